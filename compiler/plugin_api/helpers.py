"""Partition helpers of UG1414: filter_by_name, filter_by_type, filter_by_template, filter and
merge_subgraph.

All of them look only at *unassigned* children of the root subgraph (no ``device`` attribute):
what earlier plugins claimed is invisible to later ones. Results are sets, as in XIR; the
helpers themselves never depend on set iteration order, so they are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from compiler.errors import PartitionError
from compiler.xir import Graph, GraphTemplate, Op, Subgraph, creates_cycle

MatchFilter = Callable[[Mapping[str, Op]], bool]


def root_children(graph: Graph) -> Subgraph:
    """The root subgraph, split into one child per op if that has not happened yet."""
    root = graph.root_subgraph
    if root.is_leaf:
        root.create_children()
    return root


def is_assigned(subgraph: Subgraph) -> bool:
    return "device" in subgraph.attrs


def unassigned_children(graph: Graph) -> list[Subgraph]:
    """Unassigned children of the root, in topological order."""
    root = root_children(graph)
    return [c for c in root.children_topological_sort() if not is_assigned(c)]


def filter_by_name(graph: Graph, name: str) -> Subgraph | None:
    """The unassigned child named ``name``, or else the one holding the op named ``name``."""
    free = unassigned_children(graph)
    for c in free:
        if c.name == name:
            return c
    for c in free:
        if any(op.name == name for op in c.ops):
            return c
    return None


def filter_by_type(graph: Graph, op_type: str | Iterable[str]) -> set[Subgraph]:
    """Unassigned children holding an op of ``op_type`` (a type or a collection of types)."""
    types = {op_type} if isinstance(op_type, str) else set(op_type)
    return {c for c in unassigned_children(graph) if any(op.type in types for op in c.ops)}


def filter_by_template(graph: Graph, template: GraphTemplate,
                       match_filter: MatchFilter | None = None) -> set[Subgraph]:
    """Children matching ``template``, each match merged into one child and returned.

    Matches come from :meth:`GraphTemplate.find_matches` over the unassigned ops (per-op
    ``where`` predicates apply there); ``match_filter`` may reject a whole match. Overlapping
    matches are resolved greedily in topological order: the first match wins and later ones that
    share an op are skipped. A match that cannot be merged without a cycle (a path leaves it and
    comes back, e.g. ``A -> X -> C`` around a template ``A -> C``) is skipped too. Symmetric
    matches of the same ops are tried in turn, so ``match_filter`` sees each role assignment.
    """
    root = root_children(graph)
    ops = [op for c in unassigned_children(graph) for op in c.ops]
    taken: set[Op] = set()
    result: set[Subgraph] = set()
    for match in template.find_matches(graph, ops):
        matched = set(match.values())
        if matched & taken:
            continue
        if match_filter is not None and not match_filter(match):
            continue
        children = {root.child_of(op) for op in matched}
        if any(op in taken for c in children for op in c.ops):
            continue
        if len(children) > 1 and creates_cycle(root.child_dag(), children):
            continue
        merged = root.merge_children(children)
        taken |= merged.ops
        result.add(merged)
    return result


def filter(graph: Graph,  # shadows the builtin on purpose: it is the UG1414 name
           func: Callable[[set[Subgraph]], Iterable[Subgraph]]) -> set[Subgraph]:
    """``func`` applied to the set of unassigned children; it must return a subset of it."""
    free = set(unassigned_children(graph))
    picked = set(func(set(free)))
    stray = [s.name for s in picked if s not in free]
    if stray:
        raise PartitionError(f"filter(): the function returned {sorted(stray)}, which are not "
                             "unassigned children of the root")
    return picked


def merge_subgraph(subgraphs: Iterable[Subgraph]) -> set[Subgraph]:
    """Merge sibling subgraphs as far as possible without a cycle between subgraphs.

    The subgraphs are grouped as the fewest runs of consecutive members over all topological
    orders of their siblings: each run merges into one subgraph and no merge creates a cycle.
    For two kinds of node (member or not) a greedy schedule that always exhausts the current
    kind before switching is optimal, and its runs do not depend on tie-breaking, so the result
    is the same for any order of the input. Both starting kinds are tried and the one with fewer
    runs wins (starting with members on a tie). Example: with ``A -> X -> C`` and only A and C
    given, A and C stay separate.
    """
    subs = list(dict.fromkeys(subgraphs))
    if not subs:
        return set()
    parent = subs[0].parent
    for s in subs:
        if s.parent is None or s.parent is not parent or not parent.is_child(s):
            raise PartitionError(f"merge_subgraph: {s.name!r} is not a current child of "
                                 f"{parent.name if parent else 'any subgraph'!r}; only siblings "
                                 "can be merged (a subgraph merged earlier is gone; use the "
                                 "merged one)")
    assert parent is not None
    return {parent.merge_children(run) for run in member_runs(parent.child_dag(), set(subs))}


def member_runs(dag: Mapping[Subgraph, set[Subgraph]], members: set[Subgraph]
                ) -> list[list[Subgraph]]:
    """The fewest runs of consecutive ``members`` over the topological orders of ``dag`` (the
    grouping ``merge_subgraph`` merges): each run in topological order, successors visited in
    ``sort_key`` order so the order inside a run is deterministic too."""
    return min((_runs(dag, members, True), _runs(dag, members, False)), key=len)


def _runs(dag: Mapping[Subgraph, set[Subgraph]], members: set[Subgraph],
          start_with_members: bool) -> list[list[Subgraph]]:
    indeg = {n: 0 for n in dag}
    for succs in dag.values():
        for s in succs:
            indeg[s] += 1
    ready = {True: [n for n in dag if indeg[n] == 0 and n in members],
             False: [n for n in dag if indeg[n] == 0 and n not in members]}
    runs: list[list[Subgraph]] = []
    kind = start_with_members
    while ready[True] or ready[False]:
        stack = ready[kind]
        run = []
        while stack:
            n = stack.pop()
            run.append(n)
            for s in sorted(dag[n], key=lambda c: c.sort_key()):
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready[s in members].append(s)
        if kind and run:
            runs.append(run)
        kind = not kind
    return runs

"""XIR subgraphs: a tree over the graph's ops (root -> children -> leaves) with attributes.

As in Xilinx XIR, partitioning starts by giving the root one child per op
(:meth:`Subgraph.create_children`); plugins then merge children into device subgraphs
(:meth:`Subgraph.merge_children`) and tag them with ``device`` and ``runner`` attributes.
Children of one parent always partition its ops, and the graph of children (an edge where an op of
one reads a tensor of another) stays acyclic: a merge that would close a cycle is refused.

A subgraph's input tensors are produced outside it and read inside; its output tensors are
produced inside and read outside it, or read by nobody, or are graph outputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from compiler.errors import XirError
from compiler.xir.attrs import AttrMap

if TYPE_CHECKING:
    from compiler.xir.graph import Graph
    from compiler.xir.op import Op
    from compiler.xir.tensor import Tensor


class Subgraph:
    """A set of ops of one graph, a node of the subgraph tree."""

    __slots__ = ("name", "attrs", "graph", "parent", "_ops", "_children", "_child_of",
                 "__weakref__")

    def __init__(self, graph: Graph, name: str, parent: Subgraph | None,
                 ops: frozenset[Op] | None) -> None:
        self.graph = graph
        self.name = name
        self.parent = parent
        self.attrs = AttrMap(f"subgraph {name!r}")
        self._ops = ops  # None only for the root: it always holds every op of the graph
        self._children: list[Subgraph] | None = None
        self._child_of: dict[Op, Subgraph] | None = None

    @classmethod
    def _make_root(cls, graph: Graph) -> Subgraph:
        return cls(graph, "root", None, None)

    # ---- tree ---------------------------------------------------------------------------
    @property
    def ops(self) -> frozenset[Op]:
        if self._ops is None:
            return frozenset(self.graph.ops)
        return self._ops

    def get_op_num(self) -> int:
        return len(self.ops)

    def has_op(self, op: Op) -> bool:
        return op in self.ops

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def is_leaf(self) -> bool:
        return self._children is None

    @property
    def root(self) -> Subgraph:
        s = self
        while s.parent is not None:
            s = s.parent
        return s

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    @property
    def children(self) -> set[Subgraph]:
        """The children (empty for a leaf). A new set each call; order via
        :meth:`children_topological_sort`."""
        return set(self._children or ())

    @property
    def leaves(self) -> list[Subgraph]:
        """Leaf descendants (itself, if a leaf), children first in topological order."""
        if self._children is None:
            return [self]
        return [leaf for c in self.children_topological_sort() for leaf in c.leaves]

    def get_children(self) -> set[Subgraph]:  # XIR spelling
        return self.children

    def get_children_num(self) -> int:
        return len(self._children or ())

    def is_child(self, sub: Subgraph) -> bool:
        """Whether ``sub`` is currently one of this subgraph's children."""
        if sub.parent is not self or self._child_of is None or not sub.ops:
            return False
        return self._child_of.get(next(iter(sub.ops))) is sub

    def child_of(self, op: Op) -> Subgraph:
        """The child that holds ``op``."""
        if self._child_of is None:
            raise XirError(f"subgraph {self.name!r} is a leaf; call create_children() first")
        try:
            return self._child_of[op]
        except KeyError:
            raise XirError(f"op {op.name!r} is not in subgraph {self.name!r}") from None

    def create_children(self) -> set[Subgraph]:
        """Split this leaf into one child per op, each named after its op."""
        if self._children is not None:
            raise XirError(f"subgraph {self.name!r} already has children")
        self.graph.topological_sort()  # refuse to partition a cyclic graph
        children = []
        for op in sorted(self.ops, key=lambda o: o.index):
            children.append(Subgraph(self.graph, op.name, self, frozenset((op,))))
        self._children = children
        self._child_of = {next(iter(c._ops)): c for c in children}  # type: ignore[arg-type]
        if self._ops is None:
            self._ops = frozenset(self.graph.ops)  # the root's op set is fixed from now on
        return set(children)

    def merge_children(self, subgraphs: Iterable[Subgraph],
                       into: Subgraph | None = None) -> Subgraph:
        """Merge some children of this subgraph into one; refuses a merge that makes a cycle.

        The result is a new child named ``subgraph_<first op>`` without attributes, unless
        ``into`` (one of ``subgraphs``) is given: then that child grows and keeps its name and
        attributes.
        """
        group = list(dict.fromkeys(subgraphs))
        if into is not None and into not in group:
            group.append(into)
        if not group:
            raise XirError(f"merge_children on {self.name!r}: nothing to merge")
        for s in group:
            if not self.is_child(s):
                raise XirError(f"merge_children on {self.name!r}: {s.name!r} is not one of its "
                               "children (merge only siblings, and only current ones)")
            if s._children is not None:
                raise XirError(f"merge_children on {self.name!r}: {s.name!r} has children "
                               "of its own; only leaves can be merged")
        if len(group) == 1:
            return group[0]
        dag = self.child_dag()
        if creates_cycle(dag, set(group)):
            names = sorted(s.name for s in group)
            raise XirError(f"merging {names} in {self.name!r} would create a cycle between "
                           "subgraphs (a path leaves the group and comes back); use "
                           "merge_subgraph(), which merges only as far as is legal")
        ops = frozenset().union(*(s.ops for s in group))
        if into is not None:
            merged = into
            merged._ops = ops
        else:
            # name it after its first real op; a weight constant is a poor name for a subgraph
            named = [o for o in ops if o.type != "const"] or list(ops)
            first = min(named, key=self.graph.topo_position)
            name = self._unique_child_name(f"subgraph_{first.name}", exclude=group)
            merged = Subgraph(self.graph, name, self, ops)
        gone = set(group)
        assert self._children is not None and self._child_of is not None
        at = min(i for i, c in enumerate(self._children) if c in gone)
        kept = [c for c in self._children if c not in gone]
        kept.insert(min(at, len(kept)), merged)
        self._children = kept
        for op in ops:
            self._child_of[op] = merged
        for s in group:
            if s is not merged:
                s.parent = None  # a merged-away subgraph no longer belongs to the tree
        return merged

    def _restore_children(self, groups: list[tuple[str, frozenset[Op]]]) -> list[Subgraph]:
        """Give this leaf exactly these children (used when loading an .xmodel)."""
        if self._children is not None:
            raise XirError(f"subgraph {self.name!r} already has children")
        mine = self.ops
        child_of: dict[Op, Subgraph] = {}
        children = []
        for name, ops in groups:
            if not ops:
                raise XirError(f"child {name!r} of {self.name!r} has no ops")
            child = Subgraph(self.graph, name, self, ops)
            for op in ops:
                if op not in mine:
                    raise XirError(f"child {name!r} holds {op.name!r}, which is not in its "
                                   f"parent {self.name!r}")
                if op in child_of:
                    raise XirError(f"op {op.name!r} is in both {child_of[op].name!r} and "
                                   f"{name!r}")
                child_of[op] = child
            children.append(child)
        if len(child_of) != len(mine):
            lost = sorted(op.name for op in mine if op not in child_of)[:5]
            raise XirError(f"the children of {self.name!r} do not cover {lost}")
        self._children = children
        self._child_of = child_of
        if self._ops is None:
            self._ops = frozenset(self.graph.ops)
        self.children_topological_sort()  # raises on a cycle between children
        return children

    def _unique_child_name(self, base: str, exclude: Iterable[Subgraph] = ()) -> str:
        skip = set(exclude)
        taken = {c.name for c in self._children or () if c not in skip}
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"

    # ---- order and dependencies ---------------------------------------------------------
    def topological_sort(self) -> list[Op]:
        """This subgraph's ops in graph topological order."""
        pos = self.graph.topo_position
        return sorted(self.ops, key=pos)

    def sort_key(self) -> tuple[int, str]:
        """Position of the first op in graph topological order: a stable order of siblings."""
        pos = self.graph.topo_position
        return (min((pos(o) for o in self.ops), default=-1), self.name)

    def child_dag(self) -> dict[Subgraph, set[Subgraph]]:
        """Children -> the children that read one of their tensors."""
        if self._children is None or self._child_of is None:
            raise XirError(f"subgraph {self.name!r} is a leaf; call create_children() first")
        succ: dict[Subgraph, set[Subgraph]] = {c: set() for c in self._children}
        child_of = self._child_of
        for c in self._children:
            for op in c.ops:
                for t in op.input_tensors():
                    pc = child_of.get(t.producer)
                    if pc is not None and pc is not c:
                        succ[pc].add(c)
        return succ

    def children_topological_sort(self) -> list[Subgraph]:
        """Children in dependency order; ties broken by :meth:`sort_key` (deterministic)."""
        if self._children is None:
            return []
        dag = self.child_dag()
        indeg = {c: 0 for c in dag}
        for succs in dag.values():
            for s in succs:
                indeg[s] += 1
        keys = {c: c.sort_key() for c in dag}
        heap = [(keys[c], i, c) for i, c in enumerate(dag) if indeg[c] == 0]
        heapq.heapify(heap)
        order: list[Subgraph] = []
        index = {c: i for i, c in enumerate(dag)}
        while heap:
            _, _, c = heapq.heappop(heap)
            order.append(c)
            for s in dag[c]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, (keys[s], index[s], s))
        if len(order) != len(dag):
            raise XirError(f"the children of {self.name!r} form a cycle")
        return order

    # ---- interface tensors --------------------------------------------------------------
    @property
    def input_tensors(self) -> list[Tensor]:
        """Tensors produced outside and read inside, in producer topological order."""
        ops = self.ops
        found = {t for op in ops for t in op.input_tensors() if t.producer not in ops}
        pos = self.graph.topo_position
        return sorted(found, key=lambda t: pos(t.producer))

    @property
    def output_tensors(self) -> list[Tensor]:
        """Tensors produced inside and read outside, read by nobody, or graph outputs."""
        ops = self.ops
        graph_outs = set(self.graph.outputs)
        out = []
        for op in self.topological_sort():
            t = op.output
            users = t._uses
            if not users or t in graph_outs or any(u not in ops for u in users):
                out.append(t)
        return out

    # ---- attributes ---------------------------------------------------------------------
    def has_attr(self, key: str) -> bool:
        return key in self.attrs

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def set_attr(self, key: str, value: Any) -> None:
        self.attrs[key] = value

    @property
    def device(self) -> str | None:
        """The ``device`` attribute (None until a plugin or the CPU target claims it)."""
        return self.attrs.get("device")

    def __repr__(self) -> str:
        dev = self.attrs.get("device")
        return f"Subgraph({self.name!r}, {len(self.ops)} ops" + (f", {dev})" if dev else ")")


def creates_cycle(dag: dict[Subgraph, set[Subgraph]], members: set[Subgraph]) -> bool:
    """True if contracting ``members`` into one node of ``dag`` would close a cycle.

    That happens exactly when a path leaves the group and re-enters it through at least one
    outside node, so search forward from the outside successors of the group.
    """
    frontier = [s for m in members for s in dag[m] if s not in members]
    seen = set(frontier)
    while frontier:
        node = frontier.pop()
        for s in dag[node]:
            if s in members:
                return True
            if s not in seen:
                seen.add(s)
                frontier.append(s)
    return False

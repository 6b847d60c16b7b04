"""merge_subgraph: the largest legal merge, never a cycle, the same for any input order."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.errors import PartitionError
from compiler.plugin_api import merge_subgraph
from compiler.xir import Graph, Subgraph, creates_cycle
from tests.compiler.helpers import dag


def _children(g: Graph, names: str | list[str]) -> list[Subgraph]:
    root = g.root_subgraph
    if root.is_leaf:
        root.create_children()
    return [root.child_of(g.get_op(n)) for n in names]


def _groups(subs: set[Subgraph]) -> set[frozenset[str]]:
    return {frozenset(op.name for op in s.ops) for s in subs}


def test_a_x_c_stays_separate() -> None:
    """A -> X -> C with X elsewhere: merging A and C would make a cycle through X."""
    g = dag({"in": [], "a": ["in"], "x": ["a"], "c": ["x"]})
    got = merge_subgraph(_children(g, ["a", "c"]))
    assert _groups(got) == {frozenset({"a"}), frozenset({"c"})}
    assert len(g.root_subgraph.children_topological_sort()) == 4


def test_a_x_c_with_direct_edge_also_stays_separate() -> None:
    g = dag({"in": [], "a": ["in"], "x": ["a"], "c": ["x", "a"]})
    assert _groups(merge_subgraph(_children(g, ["a", "c"]))) == {frozenset("a"), frozenset("c")}


def test_connected_chain_merges_into_one() -> None:
    g = dag({"in": [], "a": ["in"], "b": ["a"], "c": ["b"]})
    got = merge_subgraph(_children(g, ["a", "b", "c"]))
    assert _groups(got) == {frozenset("abc")}
    (s,) = got
    assert s.name == "subgraph_a"


def test_independent_branches_merge() -> None:
    """Members with no path between them merge even when not adjacent."""
    g = dag({"in": [], "a": ["in"], "b": ["in"], "x": ["a"], "y": ["b"]})
    assert _groups(merge_subgraph(_children(g, ["a", "b"]))) == {frozenset("ab")}


def test_largest_merge_needs_the_right_grouping() -> None:
    """a -> u -> d with u outside, and an unrelated b -> c: a and d can never share a group, so
    two groups is the best, and the independent branch joins the first one."""
    g = dag({"in": [], "a": ["in"], "u": ["a"], "d": ["u"], "b": ["in"], "c": ["b"]})
    got = merge_subgraph(_children(g, ["a", "b", "c", "d"]))
    assert _groups(got) == {frozenset("abc"), frozenset("d")}
    _assert_legal(g)


def test_members_must_be_current_siblings() -> None:
    g = dag({"in": [], "a": ["in"], "b": ["a"]})
    a, b = _children(g, ["a", "b"])
    merged = g.root_subgraph.merge_children([a, b])
    with pytest.raises(PartitionError, match="not a current child"):
        merge_subgraph([a])
    assert merge_subgraph([merged]) == {merged}
    assert merge_subgraph([]) == set()


def _assert_legal(g: Graph) -> None:
    root = g.root_subgraph
    root.children_topological_sort()  # raises on a cycle
    dag_ = root.child_dag()
    for c in dag_:
        assert not creates_cycle(dag_, {c})


def _best_by_brute_force(g: Graph, names: list[str]) -> int:
    """Fewest groups over every set partition of ``names`` that contracts acyclically."""
    order = [op.name for op in g.topological_sort()]
    edges = {(p.name, op.name) for op in g.ops for p in op.input_ops()}
    best = len(names)
    for part in _partitions(names):
        if len(part) >= best:
            continue
        label = {n: n for n in order}
        for i, block in enumerate(part):
            for n in block:
                label[n] = f"#{i}"
        succ: dict[str, set[str]] = {}
        for a, b in edges:
            if label[a] != label[b]:
                succ.setdefault(label[a], set()).add(label[b])
        if _acyclic(set(label.values()), succ):
            best = len(part)
    return best


def _partitions(items: list[str]) -> Iterator[list[list[str]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first, *part[i]]] + part[i + 1:]
        yield [[first], *part]


def _acyclic(nodes: set[str], succ: dict[str, set[str]]) -> bool:
    indeg = dict.fromkeys(nodes, 0)
    for vs in succ.values():
        for v in vs:
            indeg[v] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for v in succ.get(n, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return seen == len(nodes)


Case = tuple[dict[str, list[str]], list[str], int]


@st.composite
def dags_and_members(draw: st.DrawFn) -> Case:
    n = draw(st.integers(3, 9))
    edges: dict[str, list[str]] = {"n0": []}
    for i in range(1, n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
        edges[f"n{i}"] = [f"n{p}" for p in preds] or ["n0"]
    names = list(edges)[1:]
    members = draw(st.lists(st.sampled_from(names), min_size=1, max_size=6, unique=True))
    seed = draw(st.integers(0, 2**16))
    return edges, members, seed


@settings(max_examples=120, deadline=None)
@given(dags_and_members())
def test_merge_is_optimal_legal_and_order_independent(case: Case) -> None:
    """Against brute force on small random DAGs: as few groups as any legal grouping, no cycle,
    and the same groups whatever order the members are given in."""
    edges, members, seed = case
    results = []
    for k in range(3):
        g = dag(edges)
        subs = _children(g, members)
        random.Random(seed + k).shuffle(subs)
        got = merge_subgraph(subs)
        _assert_legal(g)
        assert set().union(*(s.ops for s in got)) == {g.get_op(n) for n in members}
        results.append(_groups(got))
    assert results[0] == results[1] == results[2]
    assert len(results[0]) == _best_by_brute_force(dag(edges), members)


def test_shuffled_input_on_a_real_model_is_deterministic() -> None:
    """Same groups for every permutation of a ten-member selection in a branchy graph."""
    edges = {"in": [], "a": ["in"], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["d"],
             "f": ["in"], "g": ["f", "e"], "h": ["g"], "i": ["h", "c"], "j": ["i"]}
    members = ["a", "c", "d", "f", "h", "j", "b"]
    seen = set()
    for perm in itertools.islice(itertools.permutations(members), 0, 5040, 97):
        g = dag(edges)
        seen.add(frozenset(_groups(merge_subgraph(_children(g, list(perm))))))
    assert len(seen) == 1

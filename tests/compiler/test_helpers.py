"""The UG1414 partition helpers: filter_by_name/type/template and filter."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from compiler.errors import PartitionError
from compiler.plugin_api import filter, filter_by_name, filter_by_template, filter_by_type
from compiler.xir import Graph, GraphTemplate, Op, Subgraph
from tests.compiler.helpers import add


def _names(subs: set[Subgraph]) -> set[frozenset[str]]:
    return {frozenset(op.name for op in s.ops) for s in subs}


def _relu_chain(n: int) -> Graph:
    g = Graph("chain")
    prev = g.create_data("x", (1,))
    for i in range(1, n + 1):
        prev = add(g, f"r{i}", "Relu", prev)
    g.set_outputs([prev])
    return g


def _pair() -> GraphTemplate:
    t = GraphTemplate("pair")
    a = t.add_op("a", "Relu")
    t.add_op("b", "Relu", {a: "X"})
    return t


def test_overlapping_matches_first_wins_in_topological_order() -> None:
    """r1-r2-r3: matches (r1, r2) and (r2, r3) overlap; the first is taken, r3 stays free."""
    g = _relu_chain(3)
    got = filter_by_template(g, _pair())
    assert _names(got) == {frozenset({"r1", "r2"})}
    # the match is merged into one (still unassigned) child; r3 stays on its own
    assert {c.name for c in filter_by_type(g, "Relu")} == {"subgraph_r1", "r3"}
    # matching again finds the same merged child, and still no pair around r3
    assert filter_by_template(g, _pair()) == got


def test_chain_of_four_gives_two_disjoint_pairs() -> None:
    g = _relu_chain(4)
    assert _names(filter_by_template(g, _pair())) == {frozenset({"r1", "r2"}),
                                                      frozenset({"r3", "r4"})}


def test_symmetric_matches_give_one_subgraph() -> None:
    g = Graph("sym")
    x = g.create_data("x", (1,))
    c1 = add(g, "c1", "Conv", x)
    c2 = add(g, "c2", "Conv", x)
    add(g, "s", "Add", c1, c2)
    t = GraphTemplate("sum_of_convs")
    p, q = t.add_op("p", "Conv"), t.add_op("q", "Conv")
    t.add_op("add", "Add", {p: None, q: None})
    seen = []
    got = filter_by_template(g, t, lambda m: seen.append(m["p"].name) or True)
    assert _names(got) == {frozenset({"c1", "c2", "s"})}
    assert seen == ["c1"]  # the first role assignment was accepted, the mirror never tried


def test_match_filter_sees_each_role_assignment() -> None:
    """Rejecting one role assignment lets the symmetric one through."""
    g = Graph("sym")
    x = g.create_data("x", (1,))
    c1 = add(g, "c1", "Conv", x)
    c2 = add(g, "c2", "Conv", x)
    add(g, "s", "Add", c1, c2)
    t = GraphTemplate("sum_of_convs")
    p, q = t.add_op("p", "Conv"), t.add_op("q", "Conv")
    t.add_op("add", "Add", {p: None, q: None})
    seen = []

    def only_c2_as_p(m: Mapping[str, Op]) -> bool:
        seen.append(m["p"].name)
        return m["p"].name == "c2"

    assert len(filter_by_template(g, t, only_c2_as_p)) == 1
    assert seen == ["c1", "c2"]


def test_a_match_that_cannot_merge_without_a_cycle_is_skipped() -> None:
    """Template A -> C, graph A -> X -> C plus A -> C: {A, C} would enclose a cycle via X."""
    g = Graph("g")
    x = g.create_data("in", (1,))
    a = add(g, "a", "Relu", x)
    mid = add(g, "mid", "Tanh", a)
    add(g, "c", "Add", mid, a)
    t = GraphTemplate("a_c")
    ta = t.add_op("a", "Relu")
    t.add_op("c", "Add", {ta: None})
    assert len(t.find_matches(g)) == 1
    assert filter_by_template(g, t) == set()


def test_filter_by_name_and_type() -> None:
    g = _relu_chain(3)
    r2 = filter_by_name(g, "r2")
    assert r2 is not None and {op.name for op in r2.ops} == {"r2"}
    assert filter_by_name(g, "ghost") is None
    (pair,) = filter_by_template(g, _pair())
    assert filter_by_name(g, "r2") is pair  # found through the op it holds
    assert filter_by_name(g, pair.name) is pair
    pair.set_attr("device", "X")
    assert filter_by_name(g, "r2") is None  # assigned subgraphs are invisible
    assert {c.name for c in filter_by_type(g, {"Relu", "data"})} == {"x", "r3"}


def test_filter_must_return_free_children() -> None:
    g = _relu_chain(2)
    got = filter(g, lambda free: {s for s in free if s.name == "r1"})
    assert {s.name for s in got} == {"r1"}
    (r1,) = got
    r1.set_attr("device", "X")
    with pytest.raises(PartitionError, match="not unassigned children"):
        filter(g, lambda free: {r1})


def test_leaves_of_the_tree() -> None:
    g = _relu_chain(3)
    root = g.root_subgraph
    assert root.leaves == [root]
    root.create_children()
    (pair,) = filter_by_template(g, _pair())
    pair.create_children()
    assert [s.name for s in root.leaves] == ["x", "r1", "r2", "r3"]
    assert all(s.is_leaf for s in root.leaves) and root.leaves[1].depth == 2

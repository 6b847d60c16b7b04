"""Template matching: subgraph isomorphism on op types and named input edges (networkx VF2)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import XirError
from compiler.xir import Graph, GraphTemplate


def _names(matches: list[dict]) -> list[dict[str, str]]:
    return [{k: v.name for k, v in m.items()} for m in matches]


def _conv_chain() -> Graph:
    g = Graph("g")
    x = g.create_data("x", (1, 3, 8, 8))
    w = g.create_const("w", np.zeros((3, 3, 1, 1), np.float32))
    c1 = g.create_op("c1", "Conv", {"X": x, "W": w})
    r1 = g.create_op("r1", "Relu", {"X": c1})
    c2 = g.create_op("c2", "Conv", {"X": r1, "W": w})
    g.create_op("r2", "Clip", {"input": c2})
    g.create_op("s", "Sigmoid", {"X": c2})
    return g


def test_chain_with_type_sets() -> None:
    """A template op with several types matches any of them (Relu or Clip after Conv)."""
    t = GraphTemplate("conv_act")
    conv = t.add_op("conv", "Conv")
    t.add_op("act", {"Relu", "Clip"}, {conv: None})
    assert _names(t.find_matches(_conv_chain())) == [
        {"conv": "c1", "act": "r1"}, {"conv": "c2", "act": "r2"}]


def test_named_input_edges_must_match() -> None:
    """The edge label is the consumer's argument: Clip reads through 'input', not 'X'."""
    t = GraphTemplate("conv_act")
    conv = t.add_op("conv", "Conv")
    t.add_op("act", {"Relu", "Clip"}, {conv: "X"})
    assert _names(t.find_matches(_conv_chain())) == [{"conv": "c1", "act": "r1"}]
    t2 = GraphTemplate("weights")
    w = t2.add_op("w", "const")
    t2.add_op("conv", "Conv", {w: "W"})
    assert [m["conv"].name for m in t2.find_matches(_conv_chain())] == ["c1", "c2"]
    t3 = GraphTemplate("wrong_arg")
    w3 = t3.add_op("w", "const")
    t3.add_op("conv", "Conv", {w3: "X"})
    assert t3.find_matches(_conv_chain()) == []


def test_where_predicates_filter_single_ops() -> None:
    t = GraphTemplate("first_conv_only")
    t.add_op("conv", "Conv", where=lambda op: op.input_ops("X")[0].type == "data")
    assert _names(t.find_matches(_conv_chain())) == [{"conv": "c1"}]


def _diamond() -> Graph:
    g = Graph("g")
    x = g.create_data("x", (1,))
    a = g.create_op("a", "Relu", {"X": x})
    l1 = g.create_op("l", "Sigmoid", {"X": a})
    r = g.create_op("r", "Tanh", {"input": a})
    g.create_op("j", "Add", {"A": [l1], "B": [r]})
    g.create_op("j2", "Add", {"A": [r], "B": [l1]})
    return g


def test_diamond_template() -> None:
    """A diamond (fork, two branches, join) matches with the join's argument names."""
    t = GraphTemplate("diamond")
    a = t.add_op("a", "Relu")
    left = t.add_op("left", "Sigmoid", {a: "X"})
    right = t.add_op("right", "Tanh", {a: "input"})
    t.add_op("join", "Add", {left: "A", right: "B"})
    assert _names(t.find_matches(_diamond())) == [
        {"a": "a", "left": "l", "right": "r", "join": "j"}]


def test_branching_template_without_join() -> None:
    """One producer feeding two template consumers (a fork)."""
    t = GraphTemplate("fork")
    a = t.add_op("a", "Relu")
    t.add_op("s", "Sigmoid", {a: None})
    t.add_op("h", "Tanh", {a: None})
    assert _names(t.find_matches(_diamond())) == [{"a": "a", "s": "l", "h": "r"}]


def test_symmetric_matches_are_all_reported() -> None:
    """Add(conv, conv) against a template with two interchangeable convs: two role mappings."""
    g = Graph("g")
    x = g.create_data("x", (1,))
    c1 = g.create_op("c1", "Conv", {"X": x})
    c2 = g.create_op("c2", "Conv", {"X": x})
    g.create_op("s", "Add", {"A": c1, "B": c2})
    t = GraphTemplate("sum_of_convs")
    p = t.add_op("p", "Conv")
    q = t.add_op("q", "Conv")
    t.add_op("add", "Add", {p: None, q: None})
    got = _names(t.find_matches(g))
    assert got == [{"p": "c1", "q": "c2", "add": "s"}, {"p": "c2", "q": "c1", "add": "s"}]


def test_overlapping_matches_are_all_reported() -> None:
    """Relu->Relu over a chain of three Relus matches twice, sharing the middle op."""
    g = Graph("g")
    x = g.create_data("x", (1,))
    r1 = g.create_op("r1", "Relu", {"X": x})
    r2 = g.create_op("r2", "Relu", {"X": r1})
    g.create_op("r3", "Relu", {"X": r2})
    t = GraphTemplate("pair")
    a = t.add_op("a", "Relu")
    t.add_op("b", "Relu", {a: "X"})
    assert _names(t.find_matches(g)) == [{"a": "r1", "b": "r2"}, {"a": "r2", "b": "r3"}]


def test_one_tensor_on_two_arguments() -> None:
    """Add(x, x): a template needing both A and B from the producer matches; needing A twice
    does not."""
    g = Graph("g")
    x = g.create_data("x", (1,))
    r = g.create_op("r", "Relu", {"X": x})
    g.create_op("s", "Add", {"A": r, "B": r})
    t = GraphTemplate("double")
    rt = t.add_op("r", "Relu")
    t.add_op("s", "Add", {rt: "A"})
    assert len(t.find_matches(g)) == 1
    t_both = GraphTemplate("both")
    rb = t_both.add_op("r", "Relu")
    t_both.add_op("s", "Add", {rb: "B"})
    assert len(t_both.find_matches(g)) == 1


def test_candidate_ops_restrict_the_search() -> None:
    g = _conv_chain()
    t = GraphTemplate("conv")
    t.add_op("conv", "Conv")
    assert _names(t.find_matches(g, [g.get_op("c2")])) == [{"conv": "c2"}]


def test_template_errors() -> None:
    t = GraphTemplate("bad")
    a = t.add_op("a", "Relu")
    with pytest.raises(XirError, match="already has an op"):
        t.add_op("a", "Relu")
    with pytest.raises(XirError, match="not an op added earlier"):
        t.add_op("b", "Relu", {"zzz": None})
    with pytest.raises(XirError, match="at least one op type"):
        t.add_op("c", set())
    t.add_op("d", "Relu")
    with pytest.raises(XirError, match="not connected"):
        t.find_matches(_conv_chain())
    with pytest.raises(XirError, match="is empty"):
        GraphTemplate("empty").find_matches(_conv_chain())
    assert t.get_op("a") is a

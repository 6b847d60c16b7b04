"""XIR core: graphs, ops, tensors, attributes and the subgraph tree."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import XirError
from compiler.xir import Graph, values_equal
from tests.compiler.helpers import add, dag


def test_create_op_names_inputs_and_output() -> None:
    """An op's output tensor shares its name; inputs keep their argument names and order."""
    g = Graph("g")
    x = g.create_data("x", (1, 4))
    w = g.create_const("w", np.ones((4, 4), np.float32))
    mm = g.create_op("y", "MatMul", {"A": x, "B": [w]})
    assert mm.output.name == "y" and mm.output.producer is mm
    assert mm.input_args == ["A", "B"]
    assert [t.name for t in mm.input_tensors()] == ["x", "w"]
    assert mm.input_ops("B") == [w]
    assert x.fanout_ops == [mm] and w.output.consumers == [mm]
    assert g.get_tensor("w").shape == (4, 4) and g.get_tensor("w").dtype == "float32"
    assert g.inputs == [x]


def test_duplicate_names_and_foreign_inputs_are_refused() -> None:
    """Op names are unique and inputs must belong to the same graph."""
    g, h = Graph("g"), Graph("h")
    x = g.create_data("x", (1,))
    with pytest.raises(XirError, match="already has an op named 'x'"):
        g.create_data("x", (1,))
    y = h.create_data("y", (1,))
    with pytest.raises(XirError, match="does not belong"):
        g.create_op("z", "Relu", {"X": y})
    assert g.unique_name("x") == "x_1"
    del x


def test_positional_inputs_keep_holes_for_omitted_optionals() -> None:
    """Clip(input, min omitted, max) is [x, None, max] for the kernels."""
    g = Graph("g")
    x = g.create_data("x", (2,))
    hi = g.create_const("hi", np.float32(1))
    clip = g.create_op("c", "Clip", {"input": [x], "min": [], "max": [hi]})
    assert [None if t is None else t.name for t in clip.positional_inputs()] == ["x", None, "hi"]
    lone = g.create_op("d", "Clip", {"input": [x], "min": [], "max": []})
    assert lone.positional_inputs() == [x.output]


def test_topological_sort_is_deterministic_and_respects_edges() -> None:
    """Ties are broken by creation order."""
    g = dag({"a": [], "b": [], "c": ["b"], "d": ["a", "c"], "e": ["a"]})
    names = [op.name for op in g.topological_sort()]
    assert names == ["a", "b", "c", "d", "e"]
    pos = {n: i for i, n in enumerate(names)}
    for op in g.ops:
        for p in op.input_ops():
            assert pos[p.name] < pos[op.name]


def test_rewiring_that_creates_a_cycle_is_refused_and_undone() -> None:
    """replace_uses / rewrite_op keep the graph acyclic."""
    g = dag({"a": [], "b": ["a"], "c": ["b"]})
    b, c = g.get_op("b"), g.get_op("c")
    with pytest.raises(XirError, match="cycle"):
        b.replace_input(g.get_tensor("a"), c.output)
    assert b.input_ops() == [g.get_op("a")]
    with pytest.raises(XirError, match="cycle"):
        g.rewrite_op(b, "Relu", {"X": c})
    assert b.type == "Op"
    g.check(shapes=False)


def test_remove_op_requires_no_readers() -> None:
    """Removing a read op is an error naming the readers."""
    g = dag({"a": [], "b": ["a"]})
    with pytest.raises(XirError, match="read by b"):
        g.remove_op(g.get_op("a"))
    with pytest.raises(XirError, match="graph output"):
        g.remove_op(g.get_op("b"))


def test_attrs_are_normalized_and_validated() -> None:
    """Tuples become lists, numpy scalars Python scalars; unstorable values are refused."""
    g = Graph("g")
    op = g.create_data("x", (1,))
    op.set_attr("pads", (1, 2))
    op.set_attr("alpha", np.float32(0.5))
    op.set_attr("n", np.int64(3))
    op.set_attr("blob", bytearray(b"ab"))
    assert op.get_attr("pads") == [1, 2] and type(op.get_attr("alpha")) is float
    assert type(op.get_attr("n")) is int and op.get_attr("blob") == b"ab"
    with pytest.raises(XirError, match="cannot be stored"):
        op.set_attr("bad", object())
    with pytest.raises(XirError, match="must not start|not starting"):
        op.set_attr("__x", 1)
    with pytest.raises(XirError, match="dict keys"):
        op.set_attr("d", {"__ndarray__": 1})
    with pytest.raises(XirError, match="cannot be stored"):
        op.set_attr("s", np.array(["a"]))


def test_values_equal_compares_arrays_by_dtype_and_content() -> None:
    assert values_equal({"a": [np.arange(3)]}, {"a": [np.arange(3)]})
    assert not values_equal(np.arange(3), np.arange(3).astype(np.int32))
    assert not values_equal([1, 2], [1, 2.0])
    assert values_equal(float("nan"), float("nan"))


def test_create_children_one_per_op_and_mutation_locked() -> None:
    """Children are one per op, named after it; the partitioned graph cannot change."""
    g = dag({"a": [], "b": ["a"], "c": ["b"]})
    root = g.root_subgraph
    assert root.is_root and root.is_leaf and len(root.ops) == 3
    kids = root.create_children()
    assert sorted(c.name for c in kids) == ["a", "b", "c"]
    assert all(c.parent is root and c.is_leaf and c.depth == 1 for c in kids)
    with pytest.raises(XirError, match="already partitioned"):
        g.create_data("z", (1,))
    with pytest.raises(XirError, match="already has children"):
        root.create_children()


def test_merge_children_refuses_a_cycle_and_accepts_a_convex_group() -> None:
    """A -> X -> C: {A, C} cannot merge (cycle through X); {A, X} can."""
    g = dag({"a": [], "x": ["a"], "c": ["x", "a"]})
    root = g.root_subgraph
    root.create_children()
    a, x, c = (root.child_of(g.get_op(n)) for n in "axc")
    with pytest.raises(XirError, match="would create a cycle"):
        root.merge_children([a, c])
    ax = root.merge_children([x, a])
    assert ax.name == "subgraph_a" and ax.ops == {g.get_op("a"), g.get_op("x")}
    assert a.parent is None and not root.is_child(a) and root.is_child(ax)
    assert [s.name for s in root.children_topological_sort()] == ["subgraph_a", "c"]
    with pytest.raises(XirError, match="not one of its"):
        root.merge_children([a, c])


def test_merge_into_keeps_identity_name_and_attrs() -> None:
    g = dag({"a": [], "b": ["a"]})
    root = g.root_subgraph
    root.create_children()
    a, b = root.child_of(g.get_op("a")), root.child_of(g.get_op("b"))
    b.set_attr("device", "X")
    m = root.merge_children([a], into=b)
    assert m is b and m.name == "b" and m.get_attr("device") == "X" and len(m.ops) == 2


def test_tensors_with_readers_outside_or_none_are_outputs() -> None:
    """XIR's rule: a tensor read outside the subgraph, or by nobody, is an output."""
    g = dag({"x": [], "a": ["x"], "b": ["a"], "c": ["a"], "d": ["b"], "e": ["d", "c"],
             "dead": ["b"]})
    root = g.root_subgraph
    root.create_children()
    ch = {n: root.child_of(g.get_op(n)) for n in "xabcde"}
    ch["dead"] = root.child_of(g.get_op("dead"))
    s = root.merge_children([ch["a"], ch["b"], ch["d"], ch["dead"]])
    # a is read by b (inside) and c (outside); d by e (outside); dead by nobody
    assert [t.name for t in s.output_tensors] == ["a", "d", "dead"]
    assert [t.name for t in s.input_tensors] == ["x"]
    e = ch["e"]
    assert [t.name for t in e.input_tensors] == ["c", "d"]
    assert [t.name for t in e.output_tensors] == ["e"]


def test_graph_output_read_inside_is_still_an_output() -> None:
    g = dag({"x": [], "a": ["x"], "b": ["a"]})
    g.set_outputs([g.get_op("a"), g.get_op("b")])
    root = g.root_subgraph
    root.create_children()
    s = root.merge_children([root.child_of(g.get_op(n)) for n in "ab"])
    assert [t.name for t in s.output_tensors] == ["a", "b"]


def test_check_reports_missing_shapes_and_bad_consts() -> None:
    g = Graph("g")
    x = g.create_data("x", (1,))
    add(g, "y", "Relu", x)
    g.get_op("y").output.shape = None
    with pytest.raises(XirError, match="no shape"):
        g.check()
    c = g.create_const("c", np.zeros(2, np.float32))
    c.output.shape = (3,)
    with pytest.raises(XirError, match="data is"):
        g.check(shapes=False)

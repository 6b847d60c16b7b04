"""Shared test helpers: small ONNX models, XIR graphs by hand, the onnx package's test data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.xir import Graph, Op
from compiler.zoo import LIGHT, ONNX_DATA, light_path, randomize_light  # noqa: F401


def add(g: Graph, name: str, op_type: str, *inputs: Op | str, arg: str | None = None,
        **attrs: Any) -> Op:
    """An op reading ``inputs`` through one (variadic) argument, for partition tests where op
    semantics do not matter. ``arg`` defaults to ``X`` for one input and ``inputs`` otherwise."""
    ops = [g.get_op(x) if isinstance(x, str) else x for x in inputs]
    if not ops:
        return g.create_op(name, op_type, attrs=attrs, shape=(1,))
    a = arg or ("X" if len(ops) == 1 else "inputs")
    return g.create_op(name, op_type, {a: ops}, attrs, shape=(1,))


def dag(edges: Mapping[str, Sequence[str]], types: Mapping[str, str] | None = None) -> Graph:
    """A graph from ``{op: [inputs]}`` (insertion order must be topological)."""
    g = Graph("dag")
    for name, ins in edges.items():
        t = (types or {}).get(name, "data" if not ins else "Op")
        add(g, name, t, *ins)
    g.set_outputs([g.get_op(n) for n in edges if not g.get_op(n).fanout_ops])
    return g


def tensor_info(name: str, shape: Sequence[int], dtype: int = TensorProto.FLOAT
                ) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(shape))


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], inits: Mapping[str, np.ndarray] | None = None,
               opset: int = 18, name: str = "test") -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs,
                          initializer=[numpy_helper.from_array(np.asarray(v), k)
                                       for k, v in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def conv_net(seed: int = 0, channels: int = 8, with_bn: bool = True) -> onnx.ModelProto:
    """Conv-BN-Relu, a residual Add, MaxPool, Gemm and Softmax: the ops the accelerator and the
    softmax IP care about, with real (random) weights."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = {
        "w1": rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(c).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2,
        "b2": rng.standard_normal(c).astype(np.float32) * 0.1,
        "fc": rng.standard_normal((10, c * 4 * 4)).astype(np.float32) * 0.1,
        "fcb": rng.standard_normal(10).astype(np.float32) * 0.1,
        "bn_s": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "bn_b": rng.standard_normal(c).astype(np.float32) * 0.1,
        "bn_m": rng.standard_normal(c).astype(np.float32) * 0.1,
        "bn_v": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "flat": np.array([1, -1], np.int64),
    }
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4)]
    if with_bn:
        nodes.append(helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m",
                                                             "bn_v"], ["n1"], name="bn1"))
    else:
        nodes.append(helper.make_node("Identity", ["c1"], ["n1"], name="id1"))
    nodes += [
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Add", ["c2", "r1"], ["a2"], name="res"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Reshape", ["p2", "flat"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax"),
    ]
    return make_model(nodes, [tensor_info("x", [1, 3, 8, 8])],
                      [tensor_info("prob", [1, 10])], inits, name="conv_net")


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def assert_graphs_equal(a: Graph, b: Graph) -> None:
    """Everything an .xmodel stores: graph, ops, tensors, attributes, the subgraph tree."""
    from compiler.xir import Subgraph, values_equal

    assert a.name == b.name
    assert values_equal(a.attrs.copy(), b.attrs.copy()), "graph attrs differ"
    assert [op.name for op in a.topological_sort()] == [op.name for op in b.topological_sort()]
    for x in a.ops:
        y = b.get_op(x.name)
        assert x.type == y.type, x.name
        assert values_equal(x.attrs.copy(), y.attrs.copy()), f"attrs of {x.name} differ"
        assert [(k, [t.name for t in v]) for k, v in x.inputs.items()] == \
            [(k, [t.name for t in v]) for k, v in y.inputs.items()], x.name
        assert (x.output.shape, x.output.dtype) == (y.output.shape, y.output.dtype), x.name
        assert values_equal(x.output.attrs.copy(), y.output.attrs.copy()), x.name
    assert [t.name for t in a.outputs] == [t.name for t in b.outputs]

    def tree(s: Subgraph) -> Any:
        return (s.name, sorted(op.name for op in s.ops),
                [tree(c) for c in s.children_topological_sort()])

    def attrs(s: Subgraph, t: Subgraph) -> None:
        assert values_equal(s.attrs.copy(), t.attrs.copy()), f"attrs of {s.name} differ"
        for c, d in zip(s.children_topological_sort(), t.children_topological_sort(),
                        strict=True):
            attrs(c, d)

    assert tree(a.root_subgraph) == tree(b.root_subgraph)
    attrs(a.root_subgraph, b.root_subgraph)


def encoder_model(tokens: int = 32, hidden: int = 32, ffn: int = 64, heads: int = 2,
                  seed: int = 0, outliers: float = 8.0, full_mask: bool = True
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One transformer encoder layer with float inputs, in the spelling of torch exports
    (opset 17): x (1, tokens, hidden) and an additive mask (1, 1, tokens, tokens) (or a key mask
    (1, 1, 1, tokens)); Q, K, V projections scaled by 1/sqrt(sqrt(d)) each, heads split by
    Reshape/Transpose, K^T by Transpose, the mask added, Softmax, the NaN guard
    Where(IsNaN(P), 0, P), P V, heads merged; output projection, residual Add, fused
    LayerNormalization, FFN with the decomposed Erf GELU, residual Add, LayerNormalization.
    A few features of x and of the FFN's output carry ``outliers`` times the rest (as trained
    encoders' residual streams do), so per-feature quantization matters. Returns the model and
    its inputs (the second half of the keys masked)."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    inits: dict[str, np.ndarray] = {
        "qk_scale": np.array(1 / np.sqrt(np.sqrt(d)), np.float32),
        "split": np.array([1, tokens, heads, d], np.int64),
        "merge": np.array([1, tokens, hidden], np.int64),
        "sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32), "zero": np.array(0, np.float32),
    }
    nodes: list[onnx.NodeProto] = []

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, name: str, cin: int, cout: int, boost: bool = False) -> str:
        w = rng.standard_normal((cin, cout)) / np.sqrt(cin)
        if boost:
            w[:, :2] *= outliers
        inits[f"{name}_w"] = w.astype(np.float32)
        inits[f"{name}_b"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        return node("Add", [node("MatMul", [x, f"{name}_w"], f"{name}_mm"), f"{name}_b"], name)

    def heads_of(t: str, name: str, perm: list[int]) -> str:
        return node("Transpose", [node("Reshape", [t, "split"], f"{name}_r")], f"{name}_t",
                    perm=perm)

    def layernorm(x: str, name: str) -> str:
        inits[f"{name}_g"] = rng.uniform(0.5, 1.5, hidden).astype(np.float32)
        inits[f"{name}_g"][3] = 8.0                  # an outlier gamma, as BERT's have
        inits[f"{name}_b"] = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
        return node("LayerNormalization", [x, f"{name}_g", f"{name}_b"], name, axis=-1,
                    epsilon=1e-12)

    q = node("Mul", [heads_of(linear("x", "q", hidden, hidden), "q", [0, 2, 1, 3]),
                     "qk_scale"], "q_s")
    k = node("Mul", [heads_of(linear("x", "k", hidden, hidden), "k", [0, 2, 3, 1]),
                     "qk_scale"], "k_s")
    v = heads_of(linear("x", "v", hidden, hidden), "v", [0, 2, 1, 3])
    s = node("Add", [node("MatMul", [q, k], "qk"), "mask"], "scores")
    p = node("Softmax", [s], "probs", axis=-1)
    p = node("Where", [node("IsNaN", [p], "nan"), "zero", p], "probs_safe")
    ctx = node("Transpose", [node("MatMul", [p, v], "pv")], "ctx_t", perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, "merge"], "ctx")
    x1 = layernorm(node("Add", [linear(ctx, "o", hidden, hidden), "x"], "res1"), "ln1")
    f = linear(x1, "ff1", hidden, ffn)
    e = node("Erf", [node("Div", [f, "sqrt2"], "gelu_div")], "gelu_erf")
    g = node("Mul", [f, node("Mul", ["half", node("Add", [e, "one"], "gelu_1p")],
                             "gelu_h")], "gelu")
    y = layernorm(node("Add", [linear(g, "ff2", ffn, hidden, boost=True), x1], "res2"), "ln2")
    mshape = [1, 1, tokens, tokens] if full_mask else [1, 1, 1, tokens]
    graph = helper.make_graph(
        nodes, "encoder_layer",
        [tensor_info("x", [1, tokens, hidden]), tensor_info("mask", mshape)],
        [tensor_info(y, [1, tokens, hidden])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    x = rng.standard_normal((1, tokens, hidden)).astype(np.float32)
    x[..., :2] *= outliers
    keep = np.arange(tokens) < tokens // 2
    mask = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    mask = np.broadcast_to(mask, mshape).copy()
    return model, {"x": x, "mask": mask}

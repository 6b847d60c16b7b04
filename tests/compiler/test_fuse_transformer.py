"""fuse_transformer: the decomposed LayerNorm and the Erf GELU become LayerNormalization and
Gelu (the ops' numpy definitions against onnxruntime), and patterns that differ in a constant
or leak an inner tensor stay as they are."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import zoo
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.goldens import exact_reference, float_reference

H = 16


def _model(nodes, inits, outputs=("y",), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, H])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v, np.float32), k)
                     for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _layernorm(pow_exp: float = 2.0, extra_output: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("ReduceMean", ["x"], ["m"], axes=[-1]), n("Sub", ["x", "m"], ["d"]),
             n("Pow", ["d", "two"], ["sq"]), n("ReduceMean", ["sq"], ["v"], axes=[-1]),
             n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["s"]),
             n("Div", ["d", "s"], ["nrm"]), n("Mul", ["nrm", "g"], ["sc"]),
             n("Add", ["sc", "b"], ["y"])]
    inits = {"two": pow_exp, "eps": 1e-5, "g": rng.uniform(0.5, 1.5, H),
             "b": rng.standard_normal(H) * 0.1}
    return _model(nodes, inits, ("y", "m") if extra_output else ("y",))


def _gelu(half_last: bool = False, root: float = np.sqrt(2.0)) -> onnx.ModelProto:
    n = helper.make_node
    nodes = [n("Div", ["x", "r2"], ["a"]), n("Erf", ["a"], ["e"]), n("Add", ["e", "one"], ["p"])]
    if half_last:
        nodes += [n("Mul", ["x", "p"], ["xp"]), n("Mul", ["xp", "half"], ["y"])]
    else:
        nodes += [n("Mul", ["p", "half"], ["h"]), n("Mul", ["x", "h"], ["y"])]
    return _model(nodes, {"r2": root, "one": 1.0, "half": 0.5})


def _run(model: onnx.ModelProto) -> tuple[Counter, dict[str, np.ndarray], dict[str, np.ndarray]]:
    x = (np.random.default_rng(1).standard_normal((1, 8, H)) * 2).astype(np.float32)
    graph = compile_model(model, {"input_shapes": {"x": [1, 8, H]}}).graph
    got = GraphExecutor(graph).run({"x": x})
    return Counter(op.type for op in graph.ops), got, float_reference(model, {"x": x})


@pytest.mark.parametrize("build,fused", [(_layernorm, "LayerNormalization"), (_gelu, "Gelu"),
                                         (lambda: _gelu(half_last=True), "Gelu")])
def test_patterns_become_one_op_with_the_same_values(build, fused) -> None:
    ops, got, want = _run(build())
    assert ops[fused] == 1
    assert not {"ReduceMean", "Erf", "Sqrt", "Pow", "Div"} & set(ops)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("build", [lambda: _layernorm(pow_exp=4.0),
                                   lambda: _layernorm(extra_output=True),
                                   lambda: _gelu(root=1.5)])
def test_near_misses_stay_decomposed(build) -> None:
    """(onnx's reference evaluator: onnxruntime's own graph optimizer fuses x^4 as a
    LayerNorm.)"""
    model = build()
    ops, got, _ = _run(model)
    x = (np.random.default_rng(1).standard_normal((1, 8, H)) * 2).astype(np.float32)
    want = exact_reference(model, {"x": x})
    assert "LayerNormalization" not in ops and "Gelu" not in ops
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_bert_tiny_is_fused_and_minilm_keeps_its_layernorms() -> None:
    feeds = zoo.bert_inputs()
    g = compile_model(zoo.bert_tiny(), {"input_shapes": {k: list(v.shape)
                                                         for k, v in feeds.items()}}).graph
    ops = Counter(op.type for op in g.ops)
    assert ops["LayerNormalization"] == 5 and ops["Gelu"] == 2
    assert not {"ReduceMean", "Erf", "Pow", "Sqrt", "Conv"} & set(ops)
    # the attention scale stays a Mul next to its MatMul (not a 1x1 Conv)
    assert ops["Mul"] == 3


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_layernorm_ops_match_onnxruntime(approximate: str) -> None:
    """The numpy definitions against onnxruntime on the real ops (opset 20 Gelu, opset 17
    LayerNormalization over the last axis)."""
    rng = np.random.default_rng(2)
    n = helper.make_node
    nodes = [n("Gelu", ["x"], ["y"], approximate=approximate),
             n("LayerNormalization", ["x", "g", "b"], ["z"], axis=-1, epsilon=1e-3)]
    model = _model(nodes, {"g": rng.uniform(0.5, 1.5, H), "b": rng.standard_normal(H)},
                   ("y", "z"), opset=20)
    x = (rng.standard_normal((1, 8, H)) * 3).astype(np.float32)
    want = float_reference(model, {"x": x})
    graph = compile_model(model, {"input_shapes": {"x": [1, 8, H]}}).graph
    got = GraphExecutor(graph).run({"x": x})
    for k in ("y", "z"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)

"""Graph passes: shape inference with value propagation, folding, dead-op removal, pipeline."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.errors import OptionsError, PassError, ShapeInferenceError
from compiler.frontend import import_onnx
from compiler.passes import PIPELINE, run_pipeline
from compiler.passes.fold_batchnorm import FoldBatchNorm
from compiler.passes.fold_constants import FoldConstants
from compiler.passes.infer_shapes import InferShapes
from compiler.passes.remove_dead_ops import RemoveDeadOps
from compiler.passes.remove_identity import RemoveIdentity
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.compiler.helpers import make_model, tensor_info


def _flatten_by_shape_math() -> onnx.ModelProto:
    """PyTorch-style x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    return make_model(nodes, [tensor_info("x", [2, 3, 4])], [tensor_info("y", [2, 12])],
                      {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
                       "minus1": np.array([-1], np.int64)})


def test_infer_shapes_propagates_shape_arithmetic() -> None:
    g = import_onnx(_flatten_by_shape_math())
    assert g.get_tensor("y").shape is None  # unknown at import: depends on computed values
    result = InferShapes().run(g)
    assert g.get_tensor("y").shape == (2, 12) and g.get_tensor("target").dtype == "int64"
    assert result.details["propagated_values"] == 4  # s, n, n1, target
    g.check()


def test_shape_depending_on_runtime_values_is_a_clear_error() -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="dyn")]
    m = make_model(nodes, [tensor_info("x", [6]), tensor_info("shape", [2], TensorProto.INT64)],
                   [tensor_info("y", [2, 3])])
    with pytest.raises(ShapeInferenceError, match="'y' \\(Reshape, ONNX node 'dyn'\\).*not "
                                                  "known at compile time"):
        compile_model(m)


def test_shape_functions_check_their_inputs() -> None:
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    m = make_model(nodes, [tensor_info("a", [2, 3]), tensor_info("b", [4, 5])],
                   [tensor_info("y", [2, 5])])
    with pytest.raises(ShapeInferenceError, match="inner dimensions differ"):
        compile_model(m)


def test_fold_constants_keeps_names_and_evaluates_once() -> None:
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
             helper.make_node("Mul", ["w", "two"], ["w2"]),
             helper.make_node("Add", ["x", "w2"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [2, 3])],
                   {"shape": np.array([2, 3], np.int64), "two": np.array(2, np.float32)})
    g = import_onnx(m)
    InferShapes().run(g)
    assert FoldConstants().run(g).changed == 2
    w2 = g.get_op("w2")
    assert w2.type == "const" and np.array_equal(w2.attrs["data"], np.ones((2, 3), np.float32))
    assert g.get_op("y").input_ops("B") == [w2]
    assert RemoveDeadOps().run(g).changed == 3  # shape, w, two
    assert sorted(op.name for op in g.ops) == ["w2", "x", "y"]


def test_fold_batchnorm_matches_the_unfolded_graph(conv_model: onnx.ModelProto) -> None:
    x = {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    plain = compile_model(conv_model, {"passes": {"fold_batchnorm": False}}).graph
    folded = compile_model(conv_model).graph
    assert "BatchNormalization" in plain.get_op_types()
    assert "BatchNormalization" not in folded.get_op_types()
    assert folded.get_op("n1").type == "Conv"
    np.testing.assert_allclose(GraphExecutor(folded).run(x)["prob"],
                               GraphExecutor(plain).run(x)["prob"], rtol=1e-5, atol=1e-6)


def _conv_then(nodes_after: list[onnx.NodeProto], consts: dict[str, np.ndarray]
               ) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32), **consts}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), *nodes_after]
    return make_model(nodes, [tensor_info("x", [1, 2, 5, 5])], [tensor_info("y", [1, 4, 5, 5])],
                      inits)


def _check_fold(m: onnx.ModelProto, expect_folded: int) -> None:
    x = {"x": np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)}
    ref = GraphExecutor(compile_model(m, {"passes": {"fold_batchnorm": False}}).graph).run(x)
    g = import_onnx(m)
    InferShapes().run(g)
    assert FoldBatchNorm().run(g).changed == expect_folded
    RemoveDeadOps().run(g)
    np.testing.assert_allclose(GraphExecutor(g).run(x)["y"], ref["y"], rtol=1e-5, atol=1e-5)


def test_per_channel_mul_and_add_fold_into_conv() -> None:
    rng = np.random.default_rng(2)
    m = _conv_then([helper.make_node("Mul", ["s", "c"], ["m"]),
                    helper.make_node("Add", ["m", "b"], ["y"])],
                   {"s": rng.standard_normal((4, 1, 1)).astype(np.float32),
                    "b": rng.standard_normal((1, 4, 1, 1)).astype(np.float32)})
    _check_fold(m, 2)


def test_spatially_varying_constants_do_not_fold() -> None:
    m = _conv_then([helper.make_node("Mul", ["c", "s"], ["y"])],
                   {"s": np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)})
    _check_fold(m, 0)


def test_conv_read_twice_does_not_fold() -> None:
    m = _conv_then([helper.make_node("Mul", ["c", "s"], ["m"]),
                    helper.make_node("Add", ["m", "c"], ["y"])],
                   {"s": np.full((4, 1, 1), 2.0, np.float32)})
    _check_fold(m, 0)


def test_affine_maps_become_depthwise_convs() -> None:
    """DenseNet's Concat -> BN -> Mul -> Add -> Relu: nothing to fold into, so the BN becomes
    a depthwise 1x1 Conv and the Mul and Add fold into it; a constant Sub and a Div by a
    scalar become one each; spatially varying constants and activation-by-activation products
    stay. Results equal the unconverted graph."""
    rng = np.random.default_rng(5)
    c = 6
    inits = {"s": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32),
             "m": rng.standard_normal(c).astype(np.float32),
             "v": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "k": rng.standard_normal((c, 1, 1)).astype(np.float32),
             "kb": rng.standard_normal((1, c, 1, 1)).astype(np.float32),
             "two": np.array(2.0, np.float32),
             "sp": rng.standard_normal((1, 1, 5, 5)).astype(np.float32)}
    nodes = [helper.make_node("Concat", ["x", "x"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Mul", ["bn", "k"], ["mul"]),
             helper.make_node("Add", ["kb", "mul"], ["add"]),
             helper.make_node("Relu", ["add"], ["r"]),
             helper.make_node("Sub", ["kb", "r"], ["sub"]),
             helper.make_node("Div", ["sub", "two"], ["div"]),
             helper.make_node("Mul", ["div", "sp"], ["spatial"]),
             helper.make_node("Mul", ["spatial", "r"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [1, 3, 5, 5])], [tensor_info("y", [1, c, 5, 5])],
                   inits)
    x = {"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)}
    ref = GraphExecutor(compile_model(m, {"passes": {"affine_to_conv": False}}).graph).run(x)
    r = compile_model(m)
    rec = {p["name"]: p for p in r.report["passes"]}["affine_to_conv"]
    assert rec["details"] == {"converted": 3, "folded": 2}
    g = r.graph
    assert [g.get_op(n).type for n in ("add", "div", "spatial", "y")] == \
        ["Conv", "Conv", "Mul", "Mul"]
    assert g.get_op("add").attrs["group"] == c and "bn" not in g
    np.testing.assert_allclose(GraphExecutor(g).run(x)["y"], ref["y"], rtol=1e-5, atol=1e-5)


def test_remove_identity_keeps_graph_outputs() -> None:
    nodes = [helper.make_node("Identity", ["x"], ["a"]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Identity", ["b"], ["y"])]
    g = import_onnx(make_model(nodes, [tensor_info("x", [2])], [tensor_info("y", [2])]))
    assert RemoveIdentity().run(g).changed == 1
    assert g.get_op("b").input_ops() == [g.get_op("x")] and g.get_op("y").type == "Identity"


def test_remove_dead_ops_keeps_inputs() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["unused"]),
             helper.make_node("Neg", ["z"], ["unused2"])]
    g = import_onnx(make_model(nodes, [tensor_info("x", [2]), tensor_info("z", [2])],
                               [tensor_info("y", [2])]))
    assert RemoveDeadOps().run(g).changed == 2
    assert sorted(op.name for op in g.ops) == ["x", "y", "z"]


def test_pipeline_order_switches_and_errors(conv_model: onnx.ModelProto) -> None:
    assert PIPELINE == ("infer_shapes", "fold_constants", "remove_identity",
                        "fuse_transformer", "fold_batchnorm", "affine_to_conv",
                        "remove_dead_ops")
    g = import_onnx(conv_model)
    records = run_pipeline(g, {"remove_dead_ops": False})
    assert [r.name for r in records] == list(PIPELINE)
    assert [r.enabled for r in records] == [True, True, True, True, True, True, False]
    assert "bn_s" in g  # dead BN parameters stay when dead-op removal is off
    with pytest.raises(PassError, match="unknown pass name.*'fold_everything'"):
        run_pipeline(g, {"fold_everything": True})
    with pytest.raises(OptionsError, match="unknown pass name"):
        compile_model(conv_model, {"passes": {"nope": False}})
    with pytest.raises(OptionsError, match="must be true or false"):
        compile_model(conv_model, {"passes": {"fold_batchnorm": "no"}})

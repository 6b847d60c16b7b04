"""ONNX frontend: naming, opset upgrade, Split lowering, unsupported ops, shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.errors import FrontendError, UnsupportedOpError
from compiler.frontend import import_onnx
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.compiler.helpers import make_model, tensor_info
from tests.goldens import float_reference


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of a float model (tests/goldens.py: why that holds on any CPU)."""
    return list(float_reference(model, feeds).values())


def compiled_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                 options: dict | None = None) -> dict[str, np.ndarray]:
    return GraphExecutor(compile_model(model, options).graph).run(feeds)


def test_ops_are_typed_and_named_like_onnx(conv_model: onnx.ModelProto) -> None:
    g = import_onnx(conv_model)
    conv = g.get_op("c1")
    assert conv.type == "Conv" and conv.input_args == ["X", "W", "B"]
    assert [t.name for t in conv.input_tensors()] == ["x", "w1", "b1"]
    assert conv.get_attr("onnx_node") == "conv1" and conv.get_attr("pads") == [1, 1, 1, 1]
    bn = g.get_op("n1")
    assert bn.input_args == ["X", "scale", "B", "input_mean", "input_var"]
    assert g.get_op("w1").type == "const" and g.get_op("x").type == "data"
    assert [t.name for t in g.outputs] == ["prob"]
    assert g.attrs["opset_imports"] == {"": 18}


def test_old_opset_is_upgraded_with_the_same_semantics() -> None:
    """Opset 9: Unsqueeze takes axes as an attribute and Softmax coerces to 2-D."""
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[1]),
             helper.make_node("Softmax", ["u"], ["y"], axis=1)]
    m = make_model(nodes, [tensor_info("x", [2, 3, 4])], [tensor_info("y", [2, 1, 3, 4])],
                   opset=9)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    g = import_onnx(m)
    assert g.attrs["opset_imports"][""] == 18
    assert g.get_op("u").input_args == ["data", "axes"]
    got = compiled_run(m, {"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(m, {"x": x})[0], rtol=1e-6)


def test_split_becomes_one_slice_per_used_output() -> None:
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
             helper.make_node("Add", ["a", "c"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [2, 9])], [tensor_info("y", [2, 3])])
    g = import_onnx(m)
    assert g.get_op("a").type == "Slice" and g.get_op("c").type == "Slice"
    assert "b" not in g
    x = np.arange(18, dtype=np.float32).reshape(2, 9)
    np.testing.assert_array_equal(compiled_run(m, {"x": x})["y"], x[:, 0:3] + x[:, 6:9])


def test_split_with_sizes_input() -> None:
    nodes = [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=0)]
    m = make_model(nodes, [tensor_info("x", [5, 2])], [tensor_info("y", [5, 2])],
                   {"s": np.array([2, 3], np.int64)})
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(compiled_run(m, {"x": x})["y"],
                                  np.concatenate([x[2:], x[:2]]))


def test_second_output_in_use_is_refused_with_the_node_name() -> None:
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk_node", axis=1),
             helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)]
    m = make_model(nodes, [tensor_info("x", [1, 5])], [tensor_info("y", [1, 2])],
                   {"k": np.array([2], np.int64)})
    with pytest.raises(UnsupportedOpError, match="topk_node.*one output"):
        import_onnx(m)


def test_unused_extra_outputs_are_dropped() -> None:
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"])]
    m = make_model(nodes, [tensor_info("x", [3])], [tensor_info("y", [3])])
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(compiled_run(m, {"x": x})["y"], x)


def test_unknown_op_names_type_domain_and_node() -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="mystery", domain="com.example")
    g = helper.make_graph([node], "g", [tensor_info("x", [3])], [tensor_info("y", [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError,
                       match="'mystery'.*'Frobnicate' of domain 'com.example'.*no kernel"):
        import_onnx(m)


def test_op_without_numpy_kernel_runs_on_onnx_reference() -> None:
    """Hardmax has no numpy kernel: kept as a CPU op that onnx's reference evaluator runs."""
    nodes = [helper.make_node("Hardmax", ["x"], ["y"], axis=-1)]
    m = make_model(nodes, [tensor_info("x", [2, 4])], [tensor_info("y", [2, 4])])
    r = compile_model(m)
    (cpu,) = r.graph.root_subgraph.children
    assert cpu.get_attr("kernels") == {"Hardmax": "onnx-reference"}
    x = np.array([[1, 3, 2, 0], [5, 1, 1, 7]], np.float32)
    np.testing.assert_array_equal(GraphExecutor(r.graph).run({"x": x})["y"],
                                  ort_run(m, {"x": x})[0])


def test_constant_node_forms() -> None:
    nodes = [helper.make_node("Constant", [], ["c1"], value_float=2.0),
             helper.make_node("Constant", [], ["c2"], value_ints=[1, 2]),
             helper.make_node("Cast", ["c2"], ["c3"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "c1"], ["m"]),
             helper.make_node("Add", ["m", "c3"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [2])], [tensor_info("y", [2])])
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(compiled_run(m, {"x": x})["y"], [3, 6])


def test_symbolic_dimensions_need_input_shapes() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    m = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    with pytest.raises(FrontendError, match="symbolic dimension 'N'.*input_shapes"):
        import_onnx(m)
    g = compile_model(m, {"input_shapes": {"x": [4, 3]}}).graph
    assert g.get_tensor("y").shape == (4, 3)
    with pytest.raises(FrontendError, match="not model inputs"):
        import_onnx(m, input_shapes={"z": [1]})


def test_control_flow_is_refused() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [tensor_info("t", [1])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then,
                              else_branch=then)]
    m = make_model(nodes, [tensor_info("c", [], TensorProto.BOOL), tensor_info("x", [1])],
                   [tensor_info("y", [1])])
    with pytest.raises(UnsupportedOpError, match="'branch'.*control flow"):
        import_onnx(m)


def test_nodes_out_of_order_are_sorted_and_undefined_inputs_named() -> None:
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"),
             helper.make_node("Neg", ["x"], ["h"], name="first")]
    m = make_model(nodes, [tensor_info("x", [2])], [tensor_info("y", [2])])
    x = np.array([1, -1], np.float32)
    np.testing.assert_array_equal(compiled_run(m, {"x": x})["y"], [0, 1])
    bad = make_model([helper.make_node("Relu", ["ghost"], ["y"], name="lost")],
                     [tensor_info("x", [2])], [tensor_info("y", [2])])
    with pytest.raises(FrontendError, match="'lost'.*reads \\['ghost'\\]"):
        import_onnx(bad)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(FrontendError, match="does not exist"):
        import_onnx(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a protobuf" * 10)
    with pytest.raises(FrontendError, match="not a readable ONNX model"):
        import_onnx(junk)


def _qdq_conv_exact(x: np.ndarray, xs: float, wq: np.ndarray, ws: np.ndarray, ys: float
                    ) -> np.ndarray:
    """The QDQ Conv below by its integer formula (zero points 0, pads 1): quantize x, an exact
    int64 convolution, requantize in float64, dequantize. The same on every CPU."""
    xq = np.clip(np.rint(x.astype(np.float64) / xs), -128, 127).astype(np.int64)
    win = np.lib.stride_tricks.sliding_window_view(
        np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1))), wq.shape[2:], axis=(2, 3))
    acc = np.einsum("nchwij,kcij->nkhw", win, wq.astype(np.int64))
    scale = xs * ws.astype(np.float64).reshape(1, -1, 1, 1) / ys
    yq = np.clip(np.rint(acc * scale), -128, 127)
    return (yq * np.float64(np.float32(ys))).astype(np.float32)


def test_qdq_model_imports_and_runs() -> None:
    """A QDQ-quantized Conv (what onnxruntime's quantizer writes) runs on the CPU path. The
    golden is the integer formula, not onnxruntime (which fuses the pattern into an integer
    kernel whose result differs between AVX2 and AVX-512-VNNI CPUs)."""
    rng = np.random.default_rng(4)
    w_q = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    ws = np.array([0.01, 0.02, 0.03, 0.01], np.float32)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(0, np.int8), "wq": w_q,
             "ws": ws, "wz": np.zeros(4, np.int8), "ys": np.array(0.2, np.float32),
             "yz": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [1, 3, 6, 6])], [tensor_info("y", [1, 4, 6, 6])],
                   inits)
    g = compile_model(m).graph
    assert g.get_op("wd").type == "const"  # the weight dequantization was folded
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    got = GraphExecutor(g).run({"x": x})["y"]
    want = _qdq_conv_exact(x, float(np.float32(0.05)), w_q, ws, float(np.float32(0.2)))
    # the CPU path convolves the dequantized values in float32: its sum differs from the exact
    # one by ~1e-6, which moves a result to the neighbouring step (0.2) only when the exact
    # value lies that close to a rounding boundary
    assert np.abs(got - want).max() <= 0.2 + 1e-6
    assert np.mean(got == want) > 0.95

"""Every numpy kernel (and its shape function) against a golden reference, on one-node models.

The cases are data: each ``case(...)`` below registers one comparison, the parametrized test
runs them, and a coverage test checks that every op with a numpy kernel has at least one case.
The golden value never depends on the CPU (tests/goldens.py): a case with an integer or bool
output, or a quantized op, is compared bit for bit with the onnx reference evaluator (or, where
that has no implementation at the model's opset, with the formula the case gives); a float case
is compared with onnxruntime's float32 kernels within a tolerance ten times above what a
different instruction set changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.ops import OPS
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.compiler.helpers import make_model
from tests.goldens import QUANTIZED_OPS, GoldenError, exact_reference, float_reference

RNG = np.random.default_rng(1234)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


class Case:
    def __init__(self, op_type: str, inputs: dict[str, np.ndarray],
                 consts: dict[str, np.ndarray] | None = None, order: list[str] | None = None,
                 out_type: int = F, formula: Callable[..., np.ndarray] | None = None,
                 opset: int = 18, **attrs: Any) -> None:
        self.op_type, self.inputs, self.consts = op_type, inputs, consts or {}
        self.opset = opset
        self.order, self.out_type, self.attrs = order, out_type, attrs
        self.formula = formula

    @property
    def exact(self) -> bool:
        """Compared bit for bit with an exact reference, never with onnxruntime."""
        return self.op_type in QUANTIZED_OPS or self.out_type not in (F, TensorProto.DOUBLE)

    def model(self) -> onnx.ModelProto:
        names = self.order or [*self.inputs, *self.consts]
        node = helper.make_node(self.op_type, names, ["y"], **self.attrs)
        vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                             list(v.shape)) for k, v in self.inputs.items()]
        return make_model([node], vis, [helper.make_tensor_value_info("y", self.out_type, None)],
                          self.consts, opset=self.opset)

    def golden(self) -> np.ndarray:
        m = self.model()
        if not self.exact:
            return float_reference(m, self.inputs)["y"]
        if self.formula is not None:
            return self.formula(**self.inputs, **self.consts)
        return exact_reference(m, self.inputs)["y"]

    def __repr__(self) -> str:
        shapes = [list(v.shape) for v in self.inputs.values()]
        return f"{self.op_type}{shapes}{self.attrs or ''}"


CASES: list[Case] = []


def case(*args: Any, **kwargs: Any) -> None:
    CASES.append(Case(*args, **kwargs))


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


# ---- Conv --------------------------------------------------------------------------------------
for spec in [
    dict(x=(1, 3, 9, 9), w=(4, 3, 3, 3), pads=[1, 1, 1, 1]),
    dict(x=(2, 4, 10, 7), w=(6, 2, 3, 2), group=2, strides=[2, 1], pads=[0, 1, 2, 0]),
    dict(x=(1, 6, 8, 8), w=(6, 1, 3, 3), group=6, dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(x=(1, 4, 8, 8), w=(8, 1, 3, 3), group=4, strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(x=(1, 3, 7, 8), w=(2, 3, 2, 3), auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(x=(1, 3, 7, 8), w=(2, 3, 3, 3), auto_pad="VALID", bias=False),
    dict(x=(2, 3, 11), w=(5, 3, 4), strides=[3], pads=[1, 2]),
    dict(x=(1, 2, 5, 6, 4), w=(3, 2, 2, 3, 2), pads=[1, 0, 1, 0, 1, 1]),
]:
    spec = dict(spec)
    x, w = r(*spec.pop("x")), r(*spec.pop("w"))
    consts = {"w": w, "b": r(w.shape[0])} if spec.pop("bias", True) else {"w": w}
    case("Conv", {"x": x}, consts, **spec)

# ---- pooling -----------------------------------------------------------------------------------
POOLS: list[dict[str, Any]] = [
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
]
for a in [*POOLS, dict(kernel_shape=[2, 2], dilations=[2, 1], strides=[1, 2])]:
    case("MaxPool", {"x": r(2, 3, 9, 10)}, **a)
for a in [*POOLS, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
          dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1, strides=[2, 2],
               ceil_mode=1),
          dict(kernel_shape=[7, 7], pads=[0, 0, 1, 1])]:
    case("AveragePool", {"x": r(2, 3, 9, 10)}, **a)
case("MaxPool", {"x": r(2, 3, 11)}, kernel_shape=[3], strides=[2], pads=[1, 1])
case("AveragePool", {"x": r(2, 3, 11)}, kernel_shape=[4], strides=[3], ceil_mode=1)
case("GlobalAveragePool", {"x": r(2, 5, 4, 3)})
case("GlobalMaxPool", {"x": r(2, 5, 4, 3)})

# ---- GEMM --------------------------------------------------------------------------------------
for attrs, c_shape in [({}, (5,)), ({"transB": 1}, (3, 5)),
                       ({"transA": 1, "alpha": 0.5, "beta": 2.0}, (1, 5)),
                       ({"transA": 1, "transB": 1}, None), ({"beta": 0.0}, (3, 5))]:
    a = r(4, 3) if attrs.get("transA") else r(3, 4)
    b = r(5, 4) if attrs.get("transB") else r(4, 5)
    case("Gemm", {"a": a}, {"b": b} if c_shape is None else {"b": b, "c": r(*c_shape)},
         **attrs)
case("MatMul", {"a": r(2, 1, 3, 4), "b": r(5, 4, 6)})
case("MatMul", {"a": r(4), "b": r(3, 4, 2)})
case("MatMul", {"a": r(3, 4), "b": r(4)})

# ---- normalization, softmax --------------------------------------------------------------------
case("BatchNormalization", {"x": r(2, 3, 4, 5)},
     {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 0.5}, epsilon=1e-3)
case("BatchNormalization", {"x": r(2, 3)},
     {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 0.5})
for size in (1, 3, 5):  # onnxruntime accepts odd sizes only
    case("LRN", {"x": r(2, 7, 3, 3)}, size=size, alpha=1e-3, beta=0.6, bias=2.0)
case("Softmax", {"x": r(2, 3, 4)}, axis=1)
case("Softmax", {"x": r(2, 3, 4)})
case("LogSoftmax", {"x": r(2, 3, 4)}, axis=0)
case("IsNaN", {"x": np.array([[0.0, np.nan], [np.inf, -1.0]], np.float32)}, out_type=B)
case("GatherND", {"x": r(2, 3, 4)}, {"i": np.array([[0, 1], [1, -1]], np.int64)})
case("GatherND", {"x": r(2, 3, 4)}, {"i": np.array([[[1], [0]], [[2], [1]]], np.int64)},
     batch_dims=1)
case("LayerNormalization", {"x": r(2, 3, 8)}, {"g": r(8), "b": r(8)}, axis=-1, epsilon=1e-3)
case("LayerNormalization", {"x": r(2, 3, 4)}, {"g": r(3, 4)}, axis=1)
case("Gelu", {"x": r(2, 3, 4) * 3}, opset=20)
case("Gelu", {"x": r(2, 3, 4) * 3}, opset=20, approximate="tanh")

# ---- elementwise -------------------------------------------------------------------------------
for op_type, attrs in {
    "Relu": {}, "LeakyRelu": {"alpha": 0.2}, "Sigmoid": {}, "HardSigmoid": {"alpha": 0.3},
    "HardSwish": {}, "Tanh": {}, "Elu": {"alpha": 0.7}, "Selu": {}, "Softplus": {},
    "Softsign": {}, "Exp": {}, "Neg": {}, "Abs": {}, "Floor": {}, "Ceil": {}, "Round": {},
    "Sign": {}, "Erf": {}, "Reciprocal": {}, "Identity": {}, "Dropout": {},
}.items():
    x = r(3, 7) * 3
    x[0, :4] = [0.5, 1.5, -2.5, 2.4999]  # rounding ties: half to even
    case(op_type, {"x": x}, **attrs)
case("Log", {"x": np.abs(r(4, 5)) + 0.1})
case("Sqrt", {"x": np.abs(r(4, 5)) + 0.1})
case("Not", {"x": r(6) > 0}, out_type=B)
for op_type in ("Add", "Sub", "Mul", "Div"):
    case(op_type, {"a": r(2, 3, 4), "b": r(3, 1)})
case("Pow", {"a": np.abs(r(2, 3, 4)) + 0.5, "b": r(3, 1)})
ia = RNG.integers(-20, 20, (3, 4)).astype(np.int64)
ib = RNG.integers(1, 6, (4,)).astype(np.int64) * RNG.choice([-1, 1], 4)
for op_type in ("Add", "Sub", "Mul", "Div"):  # Div truncates toward zero
    case(op_type, {"a": ia, "b": ib}, out_type=I64)
for op_type in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
    case(op_type, {"a": ia, "b": ib}, out_type=B)
for op_type in ("And", "Or", "Xor"):
    case(op_type, {"p": r(5) > 0, "q": r(5) > 0}, out_type=B)
for op_type in ("Sum", "Max", "Min", "Mean"):
    case(op_type, {"a": r(2, 3), "b": r(3), "c": r(1, 3)})
case("Clip", {"x": r(3, 4)}, {"lo": np.array(-0.5, np.float32)})
case("Clip", {"x": r(3, 4)}, {"hi": np.array(0.5, np.float32)}, order=["x", "", "hi"])
case("Clip", {"x": r(3, 4)}, {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)})
case("PRelu", {"x": r(2, 3, 4)}, {"s": r(3, 1)})
case("Where", {"c": r(3, 4) > 0, "a": r(3, 4), "b": r(4)})

# ---- shapes and data movement ------------------------------------------------------------------
x3 = r(2, 3, 4)
case("Reshape", {"x": x3}, {"s": i64(0, -1)})
case("Reshape", {"x": x3}, {"s": i64(0, 2, -1, 1)}, allowzero=0)
for axis in (0, 1, -1, 3):
    case("Flatten", {"x": x3}, axis=axis)
case("Transpose", {"x": x3})
case("Transpose", {"x": x3}, perm=[1, 2, 0])
case("Concat", {"a": x3, "b": r(2, 3, 2)}, axis=-1)
case("Squeeze", {"x": r(1, 3, 1, 2)}, {"ax": i64(0, -2)})
case("Squeeze", {"x": r(1, 3, 1, 2)})
case("Unsqueeze", {"x": x3}, {"ax": i64(0, -1)})
case("Slice", {"x": r(5, 6)}, {"s": i64(4, 1), "e": i64(-9, 100), "a": i64(0, 1),
                               "st": i64(-2, 2)})
for mode in ("constant", "reflect", "edge"):
    case("Pad", {"x": r(2, 3, 4)}, {"p": i64(0, 1, 2, 0, 2, -1)}, mode=mode)
case("Pad", {"x": r(2, 3)}, {"p": i64(1, 1), "v": np.array(7.0, np.float32), "a": i64(1)})
case("Gather", {"x": r(4, 3)}, {"i": np.array([[0, -1], [2, 1]], np.int64)}, axis=0)
case("Gather", {"x": r(4, 3)}, {"i": i64(2, 0)}, axis=1)
case("Shape", {"x": x3}, out_type=I64)
case("Shape", {"x": x3}, out_type=I64, start=1, end=-1)
case("Cast", {"x": x3 * 10}, out_type=TensorProto.INT32, to=TensorProto.INT32)
case("Tile", {"x": r(2, 3)}, {"t": i64(2, 1)})
case("Expand", {"x": r(3, 1)}, {"s": i64(2, 1, 4)})
case("ConstantOfShape", {}, {"s": i64(2, 3)},
     value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5]))
for op_type in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                "ReduceSumSquare"):
    case(op_type, {"x": x3}, {"a": i64(1, -1)})
    case(op_type, {"x": x3}, {"a": i64(0)}, keepdims=0)
    case(op_type, {"x": x3})

# ---- quantized ---------------------------------------------------------------------------------
case("QuantizeLinear", {"x": r(1, 4, 5, 5)},
     {"s": np.array(0.02, np.float32), "z": np.array(3, np.int8)}, out_type=TensorProto.INT8)
case("QuantizeLinear", {"x": r(1, 4, 5, 5)},
     {"s": np.array([0.01, 0.02, 0.03, 0.04], np.float32),
      "z": np.array([0, 1, 2, 3], np.uint8)}, out_type=TensorProto.UINT8, axis=1)
# the reference evaluator has no DequantizeLinear-18: the definition, (q - z) * s rounded once
case("DequantizeLinear", {"q": RNG.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)},
     {"s": np.array(0.05, np.float32), "z": np.array(-3, np.int8)},
     formula=lambda q, s, z: ((q.astype(np.float64) - float(z)) * float(s)).astype(np.float32))
case("QLinearConv", {"x": RNG.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}, {
    "xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8),
    "w": RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
    "ws": np.array([0.01, 0.02, 0.015, 0.03], np.float32), "wz": np.zeros(4, np.int8),
    "ys": np.array(0.5, np.float32), "yz": np.array(120, np.uint8),
    "b": RNG.integers(-500, 500, 4).astype(np.int32)},
    out_type=TensorProto.UINT8, pads=[1, 1, 1, 1], strides=[2, 1])
case("QLinearMatMul", {"a": RNG.integers(0, 256, (3, 5)).astype(np.uint8)}, {
    "as": np.array(0.03, np.float32), "az": np.array(100, np.uint8),
    "b": RNG.integers(0, 256, (5, 2)).astype(np.uint8),
    "bs": np.array(0.02, np.float32), "bz": np.array(130, np.uint8),
    "ys": np.array(0.4, np.float32), "yz": np.array(90, np.uint8)}, out_type=TensorProto.UINT8)


@pytest.mark.parametrize("c", CASES, ids=repr)
def test_kernel_matches_reference(c: Case) -> None:
    want = c.golden()
    g = compile_model(c.model()).graph
    got = GraphExecutor(g).run(c.inputs)["y"]
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert g.get_tensor("y").shape == want.shape  # the shape function agrees
    if c.exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_exact_cases_do_not_depend_on_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer and quantized goldens are computed with onnxruntime unavailable: what it
    would say (it differs between AVX2 and AVX-512-VNNI CPUs) cannot reach them. And it is
    refused as the reference of a quantized model."""
    import onnxruntime

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an exact golden consulted onnxruntime")

    exact = [c for c in CASES if c.exact]
    assert {"QLinearConv", "QLinearMatMul", "QuantizeLinear", "DequantizeLinear"} <= {
        c.op_type for c in exact}
    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    for c in exact:
        c.golden()
    qconv = next(c for c in exact if c.op_type == "QLinearConv")
    with pytest.raises(GoldenError, match="QLinearConv"):
        float_reference(qconv.model(), qconv.inputs)


def test_every_numpy_kernel_has_a_case() -> None:
    assert sorted(set(OPS) - {c.op_type for c in CASES}) == []


@pytest.mark.parametrize("budget", [1, 4096, 1 << 25])
def test_conv_im2col_in_row_blocks(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    """conv_nd builds its im2col in blocks of output rows (at most IM2COL_BYTES each): with
    integer-valued float64 data (every sum exact, whatever the BLAS order) any block size gives
    the direct sum's values, for 1-, 2- and 3-d, groups, strides, dilations, padding, batches."""
    from compiler.ops import op_conv

    monkeypatch.setattr(op_conv, "IM2COL_BYTES", budget)
    rng = np.random.default_rng(7)
    for shape, wshape, s, d, p, g in [((2, 4, 11, 9), (6, 2, 3, 2), [2, 1], [1, 2],
                                       [1, 0, 2, 1], 2),
                                      ((1, 3, 17), (5, 3, 4), [3], [1], [2, 1], 1),
                                      ((1, 2, 5, 6, 4), (4, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2],
                                       [0, 1, 1, 1, 0, 0], 1)]:
        x = rng.integers(-8, 8, shape).astype(np.float64)
        w = rng.integers(-8, 8, wshape).astype(np.float64)
        got = op_conv.conv_nd(x, w, s, p, d, g)
        # the direct sum over every output position and tap
        nd = len(shape) - 2
        n, c = shape[:2]
        m, cg = wshape[:2]
        xp = np.pad(x, [(0, 0), (0, 0)] + [(p[i], p[i + nd]) for i in range(nd)])
        want = np.zeros(got.shape)
        for o in np.ndindex(*got.shape[2:]):
            for mi in range(m):
                gi = mi // (m // g)
                for tap in np.ndindex(*wshape[2:]):
                    idx = tuple(o[i] * s[i] + tap[i] * d[i] for i in range(nd))
                    want[(slice(None), mi, *o)] += (
                        xp[(slice(None), slice(gi * cg, (gi + 1) * cg), *idx)]
                        * w[(mi, slice(None), *tap)]).sum(axis=1)
        assert np.array_equal(got, want), (shape, budget)

"""LayerNormalization (opset 17) and Gelu (opset 20; also what ``fuse_transformer`` turns the
decomposed forms into), on the last axes as ONNX defines them."""

from __future__ import annotations

import math

import numpy as np

from compiler.errors import KernelError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need, norm_axis
from compiler.ops.op_elementwise import _special
from compiler.xir import Op


class LayerNormalization(OpDef):
    """Y = (X - mean) / sqrt(var + epsilon) * Scale + B over the axes from ``axis`` on (the
    mean and variance in float64, rounded once to X's dtype); only the first output (Y)."""

    op_type = "LayerNormalization"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        norm_axis(op, int(op.attrs.get("axis", -1)), x.rank)
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, scale: np.ndarray | None = None,
            b: np.ndarray | None = None) -> np.ndarray:
        assert x is not None
        if scale is None:
            raise KernelError(f"{describe(op)}: the Scale input is missing")
        axis = int(op.attrs.get("axis", -1))
        axis = axis + x.ndim if axis < 0 else axis
        axes = tuple(range(axis, x.ndim))
        eps = float(op.attrs.get("epsilon", 1e-5))
        xd = x.astype(np.float64)
        mean = xd.mean(axis=axes, keepdims=True)
        var = np.square(xd - mean).mean(axis=axes, keepdims=True)
        y = (xd - mean) / np.sqrt(var + eps) * scale
        if b is not None:
            y = y + b
        return y.astype(x.dtype, copy=False)


class Gelu(OpDef):
    """x / 2 (1 + erf(x / sqrt 2)), or with ``approximate="tanh"`` the tanh form."""

    op_type = "Gelu"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        if op.attrs.get("approximate", "none") not in ("none", "tanh"):
            raise KernelError(f"{describe(op)}: approximate must be 'none' or 'tanh', got "
                              f"{op.attrs.get('approximate')!r}")
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        xd = x.astype(np.float64)
        if op.attrs.get("approximate", "none") == "tanh":
            y = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
        else:
            y = 0.5 * xd * (1 + _special().erf(xd / math.sqrt(2)))
        return y.astype(x.dtype, copy=False)

"""DequantizeLinear: y = (x - zero_point) * scale, per tensor or per axis."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.ops.op_quantize_linear import per_axis
from compiler.xir import Op


def dequantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, axis: int) -> np.ndarray:
    s = per_axis(np.asarray(scale, np.float32), x.ndim, axis)
    z = per_axis(np.asarray(0 if zp is None else zp).astype(np.int64), x.ndim, axis)
    return ((x.astype(np.int64) - z).astype(np.float32) * s).astype(np.float32)


class DequantizeLinear(OpDef):
    op_type = "DequantizeLinear"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        return TensorType(need(op, ins, 0).shape, "float32")

    def run(self, op: Op, x: np.ndarray | None, scale: np.ndarray | None = None,
            zp: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and scale is not None
        return dequantize(x, scale, zp, int(op.attrs.get("axis", 1)))

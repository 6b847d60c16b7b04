"""QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point), per tensor or axis."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


def per_axis(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """Reshape a per-channel parameter so it broadcasts along ``axis`` of a rank-``rank``
    tensor (scalars pass through)."""
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[axis % rank] = v.size
    return v.reshape(shape)


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, axis: int,
             dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    s = per_axis(np.asarray(scale, np.float32), x.ndim, axis)
    z = per_axis(np.asarray(0 if zp is None else zp).astype(np.int64), x.ndim, axis)
    q = np.rint(x.astype(np.float32) / s).astype(np.int64) + z
    return np.clip(q, info.min, info.max).astype(dtype)


class QuantizeLinear(OpDef):
    op_type = "QuantizeLinear"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        dt = ins[2].dtype if len(ins) > 2 and ins[2] is not None else "uint8"
        return TensorType(x.shape, dt)

    def run(self, op: Op, x: np.ndarray | None, scale: np.ndarray | None = None,
            zp: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and scale is not None
        dt = zp.dtype if zp is not None else np.dtype(np.uint8)
        return quantize(x, scale, zp, int(op.attrs.get("axis", 1)), dt)

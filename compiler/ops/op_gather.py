"""Gather along ``axis`` (negative indices count from the end)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need, norm_axis
from compiler.xir import Op


class Gather(OpDef):
    op_type = "Gather"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x, idx = need(op, ins, 0), need(op, ins, 1, "indices")
        axis = norm_axis(op, int(op.attrs.get("axis", 0)), x.rank)
        return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)

    def run(self, op: Op, x: np.ndarray | None, idx: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and idx is not None
        axis = int(op.attrs.get("axis", 0)) % x.ndim
        return np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)

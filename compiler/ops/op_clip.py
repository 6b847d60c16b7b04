"""Clip with optional min/max inputs (ReLU6 is Clip(0, 6))."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


class Clip(OpDef):
    op_type = "Clip"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, lo: np.ndarray | None = None,
            hi: np.ndarray | None = None) -> np.ndarray:
        assert x is not None
        y = x
        if lo is not None:
            y = np.maximum(y, lo)
        if hi is not None:
            y = np.minimum(y, hi)
        return np.asarray(y).astype(x.dtype, copy=False)

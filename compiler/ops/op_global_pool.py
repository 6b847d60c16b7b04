"""GlobalAveragePool and GlobalMaxPool: reduce every spatial axis, keep (N, C, 1, ...)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.xir import Op


class _GlobalPool(OpDef):
    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        if x.rank < 3:
            raise ShapeInferenceError(f"{describe(op)}: input must be (N, C, ...), got {x.shape}")
        return TensorType((*x.shape[:2], *([1] * (x.rank - 2))), x.dtype)


class GlobalAveragePool(_GlobalPool):
    op_type = "GlobalAveragePool"

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        axes = tuple(range(2, x.ndim))
        return x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype)


class GlobalMaxPool(_GlobalPool):
    op_type = "GlobalMaxPool"

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)

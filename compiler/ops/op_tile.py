"""Tile by constant repeats."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, ints, need, need_value
from compiler.xir import Op


class Tile(OpDef):
    op_type = "Tile"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        reps = ints(need_value(op, vals, 1, "repeats"))
        if len(reps) != x.rank:
            raise ShapeInferenceError(f"{describe(op)}: {len(reps)} repeats for rank {x.rank}")
        return TensorType(tuple(d * r for d, r in zip(x.shape, reps, strict=True)), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, reps: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and reps is not None
        return np.tile(x, ints(reps))

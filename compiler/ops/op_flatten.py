"""Flatten to 2-D at ``axis``: (d0*...*d[axis-1], d[axis]*...)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


def flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    axis = axis + len(shape) if axis < 0 else axis
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))


class Flatten(OpDef):
    op_type = "Flatten"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType(flatten_shape(x.shape, int(op.attrs.get("axis", 1))), x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return x.reshape(flatten_shape(x.shape, int(op.attrs.get("axis", 1))))

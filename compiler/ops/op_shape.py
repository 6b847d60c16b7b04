"""Shape (with start/end): int64 vector of the input's static shape."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


def shape_slice(op: Op, shape: tuple[int, ...]) -> np.ndarray:
    start = op.attrs.get("start", 0)
    end = op.attrs.get("end")
    return np.array(shape[slice(start, end)], dtype=np.int64)


class Shape(OpDef):
    op_type = "Shape"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType((len(shape_slice(op, x.shape)),), "int64")

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return shape_slice(op, x.shape)

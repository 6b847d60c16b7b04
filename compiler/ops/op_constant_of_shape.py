"""ConstantOfShape: a tensor of the given (constant) shape filled with ``value``."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, ints, need_value
from compiler.xir import Op


def fill_value(op: Op) -> np.ndarray:
    v = op.attrs.get("value")
    return np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)[:1]


class ConstantOfShape(OpDef):
    op_type = "ConstantOfShape"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        shape = tuple(ints(need_value(op, vals, 0, "shape")))
        return TensorType(shape, fill_value(op).dtype.name)

    def run(self, op: Op, shape: np.ndarray | None) -> np.ndarray:
        assert shape is not None
        v = fill_value(op)
        return np.full(tuple(ints(shape)), v[0], dtype=v.dtype)

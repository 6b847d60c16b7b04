"""Expand: broadcast to a constant shape (bidirectionally, as ONNX defines)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, broadcast, ints, need, need_value
from compiler.xir import Op


class Expand(OpDef):
    op_type = "Expand"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        shape = tuple(ints(need_value(op, vals, 1, "shape")))
        return TensorType(broadcast(op, x.shape, shape), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, shape: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and shape is not None
        out = broadcast(op, x.shape, tuple(ints(shape)))
        return np.array(np.broadcast_to(x, out))

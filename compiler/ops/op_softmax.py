"""Softmax and LogSoftmax along one axis (opset 13+ semantics: no 2-D coercion)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need, norm_axis
from compiler.xir import Op


class Softmax(OpDef):
    op_type = "Softmax"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        norm_axis(op, int(op.attrs.get("axis", -1)), x.rank)
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        axis = int(op.attrs.get("axis", -1))
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


class LogSoftmax(Softmax):
    op_type = "LogSoftmax"

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        axis = int(op.attrs.get("axis", -1))
        s = x - x.max(axis=axis, keepdims=True)
        return (s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(x.dtype, copy=False)

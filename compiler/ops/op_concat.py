"""Concat along ``axis``."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, norm_axis
from compiler.xir import Op


class Concat(OpDef):
    op_type = "Concat"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        if not ins or any(t is None for t in ins):
            raise ShapeInferenceError(f"{describe(op)}: needs at least one typed input")
        ts = [t for t in ins if t is not None]
        rank = ts[0].rank
        axis = norm_axis(op, int(op.attrs["axis"]), rank)
        for t in ts:
            if t.rank != rank or any(t.shape[i] != ts[0].shape[i]
                                     for i in range(rank) if i != axis):
                raise ShapeInferenceError(f"{describe(op)}: input shapes "
                                          f"{[u.shape for u in ts]} differ off axis {axis}")
        shape = list(ts[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ts)
        return TensorType(tuple(shape), ts[0].dtype)

    def run(self, op: Op, *xs: np.ndarray | None) -> np.ndarray:
        arrays = [x for x in xs if x is not None]
        return np.concatenate(arrays, axis=int(op.attrs["axis"]))

"""Gather along ``axis`` (negative indices count from the end), and GatherND."""

from __future__ import annotations

import numpy as np

from compiler.errors import KernelError, ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need, norm_axis
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


class GatherND(OpDef):
    """GatherND (opset 13): slices of ``data`` at the index tuples in the last axis of
    ``indices``, after ``batch_dims`` leading dimensions both share."""

    op_type = "GatherND"

    def _dims(self, op: Op, x: TensorType | np.ndarray, idx: TensorType | np.ndarray
              ) -> tuple[int, int]:
        b = int(op.attrs.get("batch_dims", 0))
        xs, ish = tuple(x.shape), tuple(idx.shape)
        if b < 0 or b >= min(len(xs), len(ish)) or xs[:b] != ish[:b]:
            raise ShapeInferenceError(f"{describe(op)}: batch_dims {b} does not fit data "
                                      f"{xs} and indices {ish}")
        k = ish[-1]
        if k > len(xs) - b:
            raise ShapeInferenceError(f"{describe(op)}: index tuples of {k} into data {xs} "
                                      f"after {b} batch dimensions")
        return b, k

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x, idx = need(op, ins, 0), need(op, ins, 1, "indices")
        b, k = self._dims(op, x, idx)
        return TensorType(tuple(idx.shape[:-1]) + tuple(x.shape[b + k:]), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, idx: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and idx is not None
        b, k = self._dims(op, x, idx)
        bshape = x.shape[:b]
        nb = int(np.prod(bshape)) if b else 1
        xb = x.reshape((nb,) + x.shape[b:])
        ib = np.asarray(idx, np.int64).reshape((nb, -1, k))
        dims = np.asarray(x.shape[b:b + k], np.int64)
        ib = np.where(ib < 0, ib + dims, ib)
        if ((ib < 0) | (ib >= dims)).any():
            raise KernelError(f"{describe(op)}: an index is out of range for data {x.shape}")
        out = np.stack([xb[i][tuple(ib[i].T)] for i in range(nb)])
        return out.reshape(tuple(idx.shape[:-1]) + x.shape[b + k:])

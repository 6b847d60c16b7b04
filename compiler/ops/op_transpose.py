"""Transpose by ``perm`` (default: reverse the axes)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.xir import Op


def perm_of(op: Op, rank: int) -> list[int]:
    perm = op.attrs.get("perm")
    if perm is None:
        return list(range(rank))[::-1]
    perm = [int(p) % rank if rank else int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ShapeInferenceError(f"{describe(op)}: perm {perm} is not a permutation of "
                                  f"{rank} axes")
    return perm


class Transpose(OpDef):
    op_type = "Transpose"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        perm = perm_of(op, x.rank)
        return TensorType(tuple(x.shape[p] for p in perm), x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return np.transpose(x, perm_of(op, x.ndim))

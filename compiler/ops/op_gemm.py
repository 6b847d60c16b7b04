"""Gemm: Y = alpha * A' @ B' + beta * C, with optional transposes and broadcast C."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops._common_matmul import widening_matmul
from compiler.ops.base import OpDef, TensorType, Types, Values, broadcast, describe, need
from compiler.xir import Op


class Gemm(OpDef):
    op_type = "Gemm"
    narrow_inputs = frozenset({1})

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        a, b = need(op, ins, 0), need(op, ins, 1)
        if a.rank != 2 or b.rank != 2:
            raise ShapeInferenceError(f"{describe(op)}: A and B must be 2-D, got {a.shape} and "
                                      f"{b.shape}")
        m, ka = a.shape[::-1] if op.attrs.get("transA", 0) else a.shape
        kb, n = b.shape[::-1] if op.attrs.get("transB", 0) else b.shape
        if ka != kb:
            raise ShapeInferenceError(f"{describe(op)}: inner dimensions differ ({ka} vs {kb})")
        if len(ins) > 2 and ins[2] is not None:
            if broadcast(op, ins[2].shape, (m, n)) != (m, n):
                raise ShapeInferenceError(f"{describe(op)}: C {ins[2].shape} does not "
                                          f"broadcast to ({m}, {n})")
        return TensorType((m, n), a.dtype)

    def run(self, op: Op, a: np.ndarray | None, b: np.ndarray | None = None,
            c: np.ndarray | None = None) -> np.ndarray:
        assert a is not None and b is not None
        at = op.attrs
        if at.get("transA", 0):
            a = a.T
        if at.get("transB", 0):
            b = b.T
        y = widening_matmul(a, b)
        alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
        if alpha != 1.0:
            y = y * np.asarray(alpha, dtype=y.dtype)
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else c * np.asarray(beta, dtype=c.dtype))
        return y.astype(a.dtype, copy=False)

"""MatMul with numpy semantics (batched, 1-D operands promoted and squeezed)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops._common_matmul import widening_matmul
from compiler.ops.base import OpDef, TensorType, Types, Values, broadcast, describe, need
from compiler.xir import Op


def matmul_shape(op: Op, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ShapeInferenceError(f"{describe(op)}: MatMul operands must not be scalars")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeInferenceError(f"{describe(op)}: inner dimensions differ: {a} @ {b}")
    batch = broadcast(op, a2[:-2], b2[:-2])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


class MatMul(OpDef):
    op_type = "MatMul"
    narrow_inputs = frozenset({1})

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        a, b = need(op, ins, 0), need(op, ins, 1)
        return TensorType(matmul_shape(op, a.shape, b.shape), a.dtype)

    def run(self, op: Op, a: np.ndarray | None, b: np.ndarray | None = None) -> np.ndarray:
        assert a is not None and b is not None
        return widening_matmul(a, b)

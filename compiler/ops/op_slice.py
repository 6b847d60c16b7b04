"""Slice with constant starts/ends/axes/steps (clamped as ONNX specifies)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, ints, need, need_value
from compiler.xir import Op


def slices(op: Op, shape: tuple[int, ...], starts: list[int], ends: list[int],
           axes: list[int] | None, steps: list[int] | None) -> tuple[slice, ...]:
    rank = len(shape)
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeInferenceError(f"{describe(op)}: starts/ends/axes/steps lengths differ")
    sel = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        if st == 0:
            raise ShapeInferenceError(f"{describe(op)}: step 0 on axis {a}")
        # numpy clamps out-of-range bounds the way ONNX does; INT64 sentinels become None
        big = np.iinfo(np.int64).max // 2
        sel[a % rank] = slice(None if abs(s) > big else s, None if abs(e) > big else e, st)
    return tuple(sel)


def _opt(vals: Values, ins: Types, i: int, op: Op, what: str) -> list[int] | None:
    if len(ins) > i and ins[i] is not None:
        return ints(need_value(op, vals, i, what))
    return None


class Slice(OpDef):
    op_type = "Slice"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        sel = slices(op, x.shape, ints(need_value(op, vals, 1, "starts")),
                     ints(need_value(op, vals, 2, "ends")), _opt(vals, ins, 3, op, "axes"),
                     _opt(vals, ins, 4, op, "steps"))
        shape = tuple(len(range(*s.indices(d))) for s, d in zip(sel, x.shape, strict=True))
        return TensorType(shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, starts: np.ndarray | None = None,
            ends: np.ndarray | None = None, axes: np.ndarray | None = None,
            steps: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and starts is not None and ends is not None
        sel = slices(op, x.shape, ints(starts), ints(ends),
                     None if axes is None else ints(axes), None if steps is None else ints(steps))
        return x[sel]

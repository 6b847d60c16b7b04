"""Reduce{Mean,Sum,Max,Min,Prod,L2,SumSquare} with constant ``axes`` input (opset 18)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, ints, need, need_value, norm_axis
from compiler.xir import Op


class Reduce(OpDef):
    def __init__(self, op_type: str, fn: Callable[..., np.ndarray]) -> None:
        self.op_type = op_type  # type: ignore[misc]
        self.fn = fn

    def _axes(self, op: Op, rank: int, axes: list[int] | None) -> tuple[int, ...] | None:
        if not axes:
            return () if op.attrs.get("noop_with_empty_axes", 0) else None
        return tuple(sorted({norm_axis(op, a, rank) for a in axes}))

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        raw = ints(need_value(op, vals, 1, "axes")) if len(ins) > 1 and ins[1] else None
        axes = self._axes(op, x.rank, raw)
        keep = bool(op.attrs.get("keepdims", 1))
        red = set(range(x.rank)) if axes is None else set(axes)
        shape = tuple(1 if i in red else d for i, d in enumerate(x.shape) if keep or i not in red)
        return TensorType(shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, axes: np.ndarray | None = None) -> np.ndarray:
        assert x is not None
        ax = self._axes(op, x.ndim, None if axes is None else ints(axes))
        if ax == ():
            return x.copy()
        keep = bool(op.attrs.get("keepdims", 1))
        return np.asarray(self.fn(x, axis=ax, keepdims=keep)).astype(x.dtype, copy=False)


def _l2(x: np.ndarray, axis: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


def _sumsq(x: np.ndarray, axis: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    return np.sum(np.square(x), axis=axis, keepdims=keepdims)


REDUCE: list[OpDef] = [
    Reduce("ReduceMean", np.mean),
    Reduce("ReduceSum", np.sum),
    Reduce("ReduceMax", np.max),
    Reduce("ReduceMin", np.min),
    Reduce("ReduceProd", np.prod),
    Reduce("ReduceL2", _l2),
    Reduce("ReduceSumSquare", _sumsq),
]

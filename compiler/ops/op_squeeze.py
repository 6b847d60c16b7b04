"""Squeeze and Unsqueeze with constant ``axes`` inputs (opset 13+)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, ints, need, need_value
from compiler.xir import Op


def squeeze_shape(op: Op, shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    rank = len(shape)
    norm = {a % rank for a in axes}
    if any(shape[a] != 1 for a in norm):
        raise ShapeInferenceError(f"{describe(op)}: cannot squeeze axes {axes} of {shape}")
    return tuple(d for i, d in enumerate(shape) if i not in norm)


def unsqueeze_shape(op: Op, shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    norm = sorted(a % rank for a in axes)
    if len(set(norm)) != len(norm):
        raise ShapeInferenceError(f"{describe(op)}: repeated axes {axes}")
    out = list(shape)
    for a in norm:
        out.insert(a, 1)
    return tuple(out)


class Squeeze(OpDef):
    op_type = "Squeeze"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        axes = ints(need_value(op, vals, 1, "axes")) if len(ins) > 1 and ins[1] else None
        return TensorType(squeeze_shape(op, x.shape, axes), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, axes: np.ndarray | None = None) -> np.ndarray:
        assert x is not None
        return x.reshape(squeeze_shape(op, x.shape, None if axes is None else ints(axes)))


class Unsqueeze(OpDef):
    op_type = "Unsqueeze"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        axes = ints(need_value(op, vals, 1, "axes"))
        return TensorType(unsqueeze_shape(op, x.shape, axes), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, axes: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and axes is not None
        return x.reshape(unsqueeze_shape(op, x.shape, ints(axes)))

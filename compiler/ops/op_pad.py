"""Pad (constant, reflect, edge, wrap) with constant pads, optional value and axes."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, ints, need, need_value
from compiler.xir import Op

MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def pad_widths(op: Op, rank: int, pads: list[int], axes: list[int] | None) -> list[list[int]]:
    axes = [a % rank for a in axes] if axes is not None else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise ShapeInferenceError(f"{describe(op)}: {len(pads)} pads for {len(axes)} axes")
    widths = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        widths[a] = [pads[i], pads[i + len(axes)]]
    return widths


class Pad(OpDef):
    op_type = "Pad"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        axes = ints(need_value(op, vals, 3, "axes")) if len(ins) > 3 and ins[3] else None
        w = pad_widths(op, x.rank, ints(need_value(op, vals, 1, "pads")), axes)
        shape = tuple(d + a + b for d, (a, b) in zip(x.shape, w, strict=True))
        if any(d < 0 for d in shape):
            raise ShapeInferenceError(f"{describe(op)}: negative output shape {shape}")
        return TensorType(shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, pads: np.ndarray | None = None,
            value: np.ndarray | None = None, axes: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and pads is not None
        w = pad_widths(op, x.ndim, ints(pads), None if axes is None else ints(axes))
        # negative pads crop
        crop = tuple(slice(-a if a < 0 else 0, d + b if b < 0 else d)
                     for d, (a, b) in zip(x.shape, w, strict=True))
        x = x[crop]
        pos = [(max(a, 0), max(b, 0)) for a, b in w]
        mode = op.attrs.get("mode", "constant")
        if mode not in MODES:
            raise ShapeInferenceError(f"{describe(op)}: unknown pad mode {mode!r}")
        if mode == "constant":
            cv = 0 if value is None or value.size == 0 else value.reshape(-1)[0]
            return np.pad(x, pos, mode="constant", constant_values=cv)
        return np.pad(x, pos, mode=MODES[mode])

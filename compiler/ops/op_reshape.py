"""Reshape with a constant target shape (0 copies a dimension unless allowzero, -1 is inferred)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, ints, need, need_value
from compiler.xir import Op


def reshape_target(op: Op, src: tuple[int, ...], spec: list[int]) -> tuple[int, ...]:
    allowzero = bool(op.attrs.get("allowzero", 0))
    dims = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise ShapeInferenceError(f"{describe(op)}: shape {spec} copies dimension {i} "
                                          f"of input shape {src}, which has none")
            dims.append(src[i])
        else:
            dims.append(d)
    total = int(np.prod(src, dtype=np.int64))
    if dims.count(-1) > 1:
        raise ShapeInferenceError(f"{describe(op)}: shape {spec} has more than one -1")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ShapeInferenceError(f"{describe(op)}: cannot reshape {src} to {spec}")
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims, dtype=np.int64)) != total or any(d < 0 for d in dims):
        raise ShapeInferenceError(f"{describe(op)}: cannot reshape {src} ({total} elements) "
                                  f"to {spec}")
    return tuple(dims)


class Reshape(OpDef):
    op_type = "Reshape"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        spec = ints(need_value(op, vals, 1, "shape"))
        return TensorType(reshape_target(op, x.shape, spec), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, shape: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and shape is not None
        return x.reshape(reshape_target(op, x.shape, ints(shape)))

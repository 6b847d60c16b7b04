"""MaxPool (N-d, dilations, ceil_mode); the optional Indices output is not supported."""

from __future__ import annotations

import numpy as np

from compiler.ops._common_pool import canonicalize_pool, pool_out_shape, pool_windows
from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


class MaxPool(OpDef):
    op_type = "MaxPool"

    def canonicalize(self, op: Op, ins: Types) -> None:
        canonicalize_pool(op, ins)

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        canonicalize_pool(op, ins)
        x = need(op, ins, 0)
        return TensorType(pool_out_shape(op, x), x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        win = pool_windows(op, x, fill)
        nd = x.ndim - 2
        return win.max(axis=tuple(range(-nd, 0)))

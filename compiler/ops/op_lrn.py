"""LRN: local response normalization across channels (AlexNet, GoogLeNet)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.xir import Op


class LRN(OpDef):
    op_type = "LRN"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        a = op.attrs
        size = int(a["size"])
        alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), \
            float(a.get("bias", 1.0))
        c = x.shape[1]
        lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
        sq = np.square(x.astype(np.float64))
        # window sum over channels [c - lo, c + hi] via a cumulative sum padded at both ends
        csum = np.cumsum(np.pad(sq, [(0, 0), (1, 0)] + [(0, 0)] * (x.ndim - 2)), axis=1)
        idx = np.arange(c)
        top = np.minimum(idx + hi + 1, c)
        bot = np.maximum(idx - lo, 0)
        window = np.take(csum, top, axis=1) - np.take(csum, bot, axis=1)
        return (x / (bias + alpha / size * window) ** beta).astype(x.dtype)

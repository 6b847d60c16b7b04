"""AveragePool (N-d, ceil_mode, count_include_pad).

The divisor counts input elements, plus explicit padding when ``count_include_pad`` is set; the
extra cells that ceil_mode adds past the end never count (as PyTorch and ONNX Runtime do).
"""

from __future__ import annotations

import numpy as np

from compiler.ops._common_pool import canonicalize_pool, pool_out_shape, pool_windows
from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.ops.geometry import windows
from compiler.xir import Op


class AveragePool(OpDef):
    op_type = "AveragePool"

    def canonicalize(self, op: Op, ins: Types) -> None:
        canonicalize_pool(op, ins)

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        canonicalize_pool(op, ins)
        x = need(op, ins, 0)
        return TensorType(pool_out_shape(op, x), x.dtype)

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        nd = x.ndim - 2
        axes = tuple(range(-nd, 0))
        sums = pool_windows(op, x, 0).sum(axis=axes, dtype=np.float64)
        a = op.attrs
        pads = a["pads"]
        spatial = x.shape[2:]
        if a.get("count_include_pad", 0):
            ones = np.ones((1, 1, *[spatial[i] + pads[i] + pads[i + nd] for i in range(nd)]))
            mask_pads = [0] * (2 * nd)
        else:
            ones = np.ones((1, 1, *spatial))
            mask_pads = pads
        out = pool_out_shape(op, TensorType(x.shape, x.dtype.name))[2:]
        counts = windows(ones, a["kernel_shape"], a["strides"], a["dilations"], mask_pads,
                         out, 0).sum(axis=axes)
        return (sums / np.maximum(counts, 1)).astype(x.dtype)

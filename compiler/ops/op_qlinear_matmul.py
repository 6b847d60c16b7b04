"""QLinearMatMul: integer matmul requantized with float scales (per-tensor or per-column b)."""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.ops.op_matmul import matmul_shape
from compiler.xir import Op


class QLinearMatMul(OpDef):
    op_type = "QLinearMatMul"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        a, b = need(op, ins, 0), need(op, ins, 3)
        return TensorType(matmul_shape(op, a.shape, b.shape), need(op, ins, 7).dtype)

    def run(self, op: Op, a: np.ndarray | None, as_: np.ndarray | None = None,
            az: np.ndarray | None = None, b: np.ndarray | None = None,
            bs: np.ndarray | None = None, bz: np.ndarray | None = None,
            ys: np.ndarray | None = None, yz: np.ndarray | None = None) -> np.ndarray:
        assert a is not None and b is not None and as_ is not None and bs is not None
        assert ys is not None and yz is not None and az is not None and bz is not None
        ai = a.astype(np.float64) - float(np.asarray(az).reshape(-1)[0])
        bi = b.astype(np.float64) - np.asarray(bz, np.float64)  # per-column zp broadcasts
        acc = np.matmul(ai, bi)  # exact in float64 for int8 operands (see op_conv.conv_nd)
        scale = float(np.asarray(as_).reshape(-1)[0]) * np.asarray(bs, np.float64) \
            / float(np.asarray(ys).reshape(-1)[0])
        info = np.iinfo(yz.dtype)
        q = np.rint(acc * scale) + int(np.asarray(yz).reshape(-1)[0])
        return np.clip(q, info.min, info.max).astype(yz.dtype)

"""QLinearConv: integer convolution, requantized with float scales as ONNX defines.

y = saturate(round_half_even((x - x_zp) * (w - w_zp) summed, + B) * x_scale * w_scale / y_scale)
+ y_zp. The integer accumulation is exact (see :func:`compiler.ops.op_conv.conv_nd`).
"""

from __future__ import annotations

import numpy as np

from compiler.ops.base import OpDef, TensorType, Types, Values, need
from compiler.ops.op_conv import Conv, conv_nd
from compiler.xir import Op


class QLinearConv(OpDef):
    op_type = "QLinearConv"

    def canonicalize(self, op: Op, ins: Types) -> None:
        Conv().canonicalize(op, [need(op, ins, 0), need(op, ins, 3, "weights")])

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x, w = need(op, ins, 0), need(op, ins, 3, "weights")
        bias = ins[8] if len(ins) > 8 else None
        t = Conv().infer(op, [TensorType(x.shape, "float32"), TensorType(w.shape, "float32"),
                              bias and TensorType(bias.shape, "float32")], [])
        return TensorType(t.shape, need(op, ins, 7, "y_zero_point").dtype)

    def run(self, op: Op, x: np.ndarray | None, xs: np.ndarray | None = None,
            xz: np.ndarray | None = None, w: np.ndarray | None = None,
            ws: np.ndarray | None = None, wz: np.ndarray | None = None,
            ys: np.ndarray | None = None, yz: np.ndarray | None = None,
            b: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and w is not None and xs is not None and ws is not None
        assert ys is not None and yz is not None
        a = op.attrs
        if "strides" not in a or a.get("auto_pad", "NOTSET") != "NOTSET":
            self.canonicalize(op, [TensorType(x.shape, x.dtype.name), None, None,
                                   TensorType(w.shape, w.dtype.name)])
        xi = x.astype(np.int64) - (0 if xz is None else int(np.asarray(xz).reshape(-1)[0]))
        wzv = np.asarray(0 if wz is None else wz, np.int64).reshape(-1)
        wi = w.astype(np.int64) - (wzv.reshape((-1,) + (1,) * (w.ndim - 1)) if wzv.size > 1
                                   else wzv[0])
        acc = conv_nd(xi, wi, a["strides"], a["pads"], a["dilations"], int(a.get("group", 1)),
                      acc_dtype=np.dtype(np.float64))
        nd = x.ndim - 2
        if b is not None:
            acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * nd)
        scale = (np.asarray(xs, np.float64).reshape(-1)[0]
                 * np.asarray(ws, np.float64).reshape(-1) / float(np.asarray(ys).reshape(-1)[0]))
        scale = scale.reshape((1, -1) + (1,) * nd) if scale.size > 1 else scale.reshape(())
        info = np.iinfo(yz.dtype)
        q = np.rint(acc * scale) + int(np.asarray(yz).reshape(-1)[0])
        return np.clip(q, info.min, info.max).astype(yz.dtype)

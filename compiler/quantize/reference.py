"""Integer reference kernels for quantized ops: the golden model of the int8 accelerator.

Each takes int8 activations and the ``quant`` attribute the quantizer attached to the op, and
computes exactly what an integer datapath computes: int32 accumulation (padding with the input
zero point), the zero-point-corrected int32 bias, then :func:`requantize` per output channel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler.errors import QuantizationError
from compiler.ops.op_conv import conv_nd
from compiler.quantize.requant import requantize, rounding_shift

Quant = Mapping[str, Any]


def _channel(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = -1
    return np.asarray(v).reshape(shape)


def qconv(x_q: np.ndarray, q: Quant, strides: Sequence[int], pads: Sequence[int],
          dilations: Sequence[int], group: int) -> np.ndarray:
    """Quantized Conv: int8 (N, C, *S) -> int8 (N, M, *O)."""
    nd = x_q.ndim - 2
    zp = int(q["input_zero_point"])
    widths = [(0, 0), (0, 0)] + [(int(pads[i]), int(pads[i + nd])) for i in range(nd)]
    xp = np.pad(x_q.astype(np.int64), widths, constant_values=zp)
    # float64 GEMM is exact here (|partial sums| < 2**53) and runs on BLAS
    acc = conv_nd(xp, q["weight"].astype(np.int64), list(strides), [0] * (2 * nd),
                  list(dilations), group, acc_dtype=np.dtype(np.float64))
    acc = np.rint(acc).astype(np.int64) + _channel(q["bias_corrected"], acc.ndim, 1)
    return requantize(acc, _channel(q["multiplier"], acc.ndim, 1),
                      _channel(q["shift"], acc.ndim, 1), int(q["output_zero_point"]))


def qgemm(x_q: np.ndarray, q: Quant) -> np.ndarray:
    """Quantized Gemm/MatMul with a constant right operand: int8 (..., K) -> int8 (..., N).

    The weight is stored as the quantizer found it; ``weight_axis`` says which of its axes is
    the output channel (0 for Gemm with transB=1, 1 for a (K, N) matrix).
    """
    w = q["weight"].astype(np.int64)
    if w.ndim != 2:
        raise QuantizationError("qgemm expects a 2-D weight")
    w_kn = w.T if int(q["weight_axis"]) == 0 else w
    acc = np.rint(np.matmul(x_q.astype(np.float64), w_kn.astype(np.float64))).astype(np.int64)
    # x @ W with x shifted by the zero point: subtract zp * column sums, folded into the bias
    acc = acc + np.asarray(q["bias_corrected"], np.int64)
    return requantize(acc, np.asarray(q["multiplier"]), np.asarray(q["shift"]),
                      int(q["output_zero_point"]))


def qadd(xs: Sequence[np.ndarray], q: Quant) -> np.ndarray:
    """Quantized elementwise sum of int8 tensors (broadcasting), one rounding at the end.

    Each input i contributes (x_i - zp_i) * m_i * 2**-s_i; the terms are aligned to the
    largest shift so that the sum is rounded once.
    """
    mults = [int(m) for m in q["input_multipliers"]]
    shifts = [int(s) for s in q["input_shifts"]]
    zps = [int(z) for z in q["input_zero_points"]]
    top = max(shifts)
    if 8 + 31 + max(top - s for s in shifts) + 2 > 63:
        raise QuantizationError("input scales of the quantized Add differ by too much for an "
                                "int64 datapath")
    total: np.ndarray | int = 0
    for x, m, s, z in zip(xs, mults, shifts, zps, strict=True):
        term = (x.astype(np.int64) - z) * m
        total = total + np.left_shift(term, top - s)
    y = rounding_shift(np.asarray(total), top) + int(q["output_zero_point"])
    return np.clip(y, -128, 127).astype(np.int8)


def qbinary(a_q: np.ndarray, b_q: np.ndarray, q: Quant,
            bounds: tuple[int, int] = (-128, 127)) -> np.ndarray:
    """Quantized elementwise Add, Sub, Mul, Max or Min of two int8 tensors with numpy
    broadcasting, clamped to ``bounds`` (a fused Relu/Clip): the accelerator's binary kernel.

    ``q``: ``op``, ``input_zero_points`` (z_a, z_b), ``output_zero_point`` and the fixed-point
    parameters (`compiler.plugins.accel.kernels.binary_params`):

    - add / sub: signed ``multipliers`` (m_a, m_b) with one ``shift`` S:
      y = (((a - z_a) * m_a + (b - z_b) * m_b + 2**(S-1)) >> S) + z_y;
    - mul: y = requantize((a - z_a) * (b - z_b), ``multiplier``, ``shift``, z_y);
    - max / min: each operand requantized to the output on its own (``multipliers``,
      ``shifts``) and clamped, then the larger / smaller (requantization is monotone).
    """
    op = q["op"]
    za, zb = (int(z) for z in q["input_zero_points"])
    zy = int(q["output_zero_point"])
    lo, hi = (int(v) for v in bounds)
    a = a_q.astype(np.int64) - za
    b = b_q.astype(np.int64) - zb
    if op == "mul":
        y = requantize(a * b, int(q["multiplier"]), int(q["shift"]), zy).astype(np.int64)
    elif op in ("max", "min"):
        ya, yb = (np.clip(requantize(v, int(m), int(s), zy).astype(np.int64), lo, hi)
                  for v, m, s in zip((a, b), q["multipliers"], q["shifts"], strict=True))
        y = np.maximum(ya, yb) if op == "max" else np.minimum(ya, yb)
    elif op in ("add", "sub"):
        ma, mb = (int(m) for m in q["multipliers"])
        y = np.clip(rounding_shift(a * ma + b * mb, int(q["shift"])) + zy, -128, 127)
    else:
        raise QuantizationError(f"qbinary: unknown op {op!r}")
    return np.clip(y, lo, hi).astype(np.int8)

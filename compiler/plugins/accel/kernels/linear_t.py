"""A linear layer in the transposed activation layout of docs/transformers.md: Y^T = W X^T + b,
requantized per output feature to int8 and stored tile-major transposed for the next layer (the
building block of an encoder's projections and feed-forward layers, issue 16; not yet wired
into the plugin's partitioner).

Activations (int8, tile-major transposed, see kernels/attention.py): X^T's element (J, f) =
tokens J*N .. J*N + N-1 of input feature f at byte (J * d_in + f) * N; its N x N tiles load
as weight tiles. The layer's weights are the *input rows*: row (D, e) = W[e][D*N .. D*N + N-1],
so one GEMM per (token block J, input block D) runs d_out iterations with the tile of X^T
held, N x N MACs each: the array is full whatever the sequence length.

Constants (`LinearT.blob`, placed at the program's ``consts`` offset): the weight rows
(d_in / N x d_out rows of N bytes), then the bias rows (d_out rows of N int32 lanes, each the
feature's int32 bias in every lane), then the requantization rows (d_out pairs: multiplier,
shift; every lane the same), each part 64-byte aligned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels.base import Ref
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer


class LinearTError(ValueError):
    """A layer the program cannot be made for (shapes, scratchpad)."""


@dataclass(frozen=True)
class LinearT:
    """The program (END included) and its constant blob."""

    program: list[isa.Insn]
    blob: bytes


def _align(v: int, a: int = 64) -> int:
    return -(-v // a) * a


def as_ref(where: int | Ref) -> Ref:
    """A byte offset of slot 0 (the stand-alone programs' convention) or a Ref as it is."""
    return where if isinstance(where, Ref) else Ref(0, int(where))


def linear_t(cfg: AccelConfig, tokens: int, weights: np.ndarray, bias: np.ndarray,
             multiplier: np.ndarray, shift: np.ndarray, zero_point: int = 0, *,
             x: int | Ref, consts: int | Ref, y: int | Ref) -> LinearT:
    """Y^T = requantize(W X^T + bias) for int8 ``weights`` (d_out x d_in), int32 ``bias``,
    per-output-feature ``multiplier`` / ``shift`` (pyhost.fixedpoint's form) and the output
    zero point. ``x``, ``consts``, ``y``: where X^T (tile-major transposed int8, tokens x d_in),
    the blob and Y^T (same layout, tokens x d_out) are (a `Ref`, or a byte offset of slot
    0)."""
    x, consts, y = as_ref(x), as_ref(consts), as_ref(y)
    n = cfg.n
    d_out, d_in = weights.shape
    if tokens % n or d_in % n or tokens <= 0 or d_in <= 0 or d_out <= 0:
        raise LinearTError(f"tokens {tokens} and d_in {d_in} must be positive multiples of "
                           f"N = {n}")
    nb, db = tokens // n, d_in // n
    win, bias_r, par = 0, nb * d_out, nb * d_out + d_out          # INP; ACC rows below
    yr = 0
    need = {"INP": (db * d_out, cfg.inp_depth), "WGT": (nb * db, cfg.wgt_depth),
            "ACC": (par + 2 * d_out, cfg.acc_depth)}
    for name, (used, depth) in need.items():
        if used > depth:
            raise LinearTError(f"{name}: {used} rows needed, the scratchpad has {depth}")
    if nb * d_out > 4095 or db * d_out > 4095:
        raise LinearTError("a loop of more than 4095 rows")

    w_rows = np.asarray(weights, np.int8).reshape(d_out, db, n).transpose(1, 0, 2)
    lanes = np.ones((1, n), np.int64)
    b_rows = (np.asarray(bias, np.int64)[:, None] * lanes).astype("<i4")
    p_rows = np.stack([np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)], 1)
    p_rows = (p_rows.reshape(-1, 1) * lanes).astype("<i4")
    w_off = consts.offset
    b_off = w_off + _align(w_rows.nbytes)
    p_off = b_off + _align(b_rows.nbytes)
    blob = bytearray(p_off + p_rows.nbytes - consts.offset)
    for off, arr in ((w_off, w_rows), (b_off, b_rows), (p_off, p_rows)):
        raw = arr.tobytes()
        blob[off - consts.offset:off - consts.offset + len(raw)] = raw
    cs = consts.slot

    prog = [
        isa.load(Buffer.INP, slot=cs, sp_base=win, offset=w_off, y_size=1, x_size=db * d_out,
                 y_stride=db * d_out),
        isa.load(Buffer.ACC, slot=cs, sp_base=bias_r, offset=b_off, y_size=1, x_size=d_out,
                 y_stride=d_out),
        isa.load(Buffer.ACC, slot=cs, sp_base=par, offset=p_off, y_size=1, x_size=2 * d_out,
                 y_stride=2 * d_out),
        isa.load(Buffer.WGT, slot=x.slot, sp_base=0, offset=x.offset, y_size=nb, x_size=db,
                 y_stride=db, push_next=1),
    ]
    for j in range(nb):
        for dd in range(db):
            prog.append(isa.gemm(reset=int(dd == 0), acc_base=yr + j * d_out,
                                 inp_base=win + dd * d_out, wgt_base=j * db + dd, outer=1,
                                 inner=d_out, acc_si=1, inp_si=1,
                                 pop_prev=int(j == 0 and dd == 0)))
    prog += [
        isa.alu(AluOp.ADD, dst_base=yr, src_base=bias_r, outer=nb, inner=d_out, dst_so=d_out,
                dst_si=1, src_si=1),
        isa.req(zero_point, dst_base=yr, src_base=par, outer=nb, inner=d_out, dst_so=d_out,
                dst_si=1, src_si=2, push_next=1),
        isa.store(Buffer.ACC8, slot=y.slot, sp_base=yr, offset=y.offset, y_size=1,
                  x_size=nb * d_out, y_stride=nb * d_out, pop_prev=1),
        isa.end(),
    ]
    return LinearT(prog, bytes(blob))

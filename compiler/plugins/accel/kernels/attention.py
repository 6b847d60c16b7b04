"""One attention head on the accelerator, in the transposed activation layout of
docs/transformers.md: the building block of the encoder's attention layer
(`kernels.encoder.attention`, one program per head and group of query blocks).

Layout in card memory (int8, "tile-major transposed"): a matrix X^T of H features by L tokens
is stored as elements of N bytes, element (J, e) = tokens J*N .. J*N + N-1 of feature e, at
byte (J * H + e) * N. An ACC8 STORE of accumulator rows ordered (J, e) writes exactly this, and
its N x N tiles (N features of N tokens) are contiguous, so they load as WGT tiles directly.

The program (`attention_head`), for one head of ``d`` features over ``seq`` tokens:
1. loads Q^T's tiles as weights, K as input rows through the transposed LOAD (token j's N
   features of block D), V^T's rows as input rows;
2. S^T[j][i] = sum_d K[j][d] Q^T[d][i] by GEMMs (rows: keys j of query block I; lanes:
   queries);
3. Softmax over the keys, lane-wise over rows (pyhost/ibert.py's sequence: MAX, subtract,
   i_exp, ADD, one XALU DIV reciprocal per query block, MUL and SHR to 7 fraction bits, MIN
   127), P^T as int8;
4. stores P^T (ACC8) and loads it back as weight tiles (P^T's N keys x N queries);
5. out^T[e][i] = sum_j V^T[e][j] P^T[j][i] by GEMMs, stored as int32 rows (I, e): real value
   x 2**-7 x V's scale.
The score scale (Q's x K's / sqrt(d)) decides the exp constants; scores far below the row's
maximum are clamped where their exponential is 0 at the output's precision.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.plugins.accel.kernels.base import Ref
from compiler.plugins.accel.kernels.linear_t import as_ref
from pyhost import ibert
from pyhost.accel.abi import align_up
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, XAluOp

#: Alignment of the parts of the layer's constants and scratch memory (one 512-bit beat).
ALIGN = 64
#: Fraction bits of the probabilities (P^T as int8: 0 .. 127 = 0 .. 127/128)
P_BITS = 7
#: Scores this far below the row's maximum (in the refined units of i_exp, at most 2**15 - 1)
#: are clamped: their exponential is 0 at the output's precision.
SCORE_CLAMP = (1 << 15) - 1


class AttentionError(ValueError):
    """A head the program cannot be made for (shapes, scratchpad, constants)."""


def attention_consts(n: int, multiplier: np.ndarray, shift: np.ndarray) -> bytes:
    """The constants of the compiler's attention layer (``consts``): a weight tile whose row 0
    is all ones (a key mask's broadcast over the query lanes), the identity tile (a full mask's
    rows copied), then, 64-byte aligned, the requantization rows of each output feature
    (multiplier, shift; the value in every lane)."""
    ones = np.zeros((n, n), np.int8)
    ones[0] = 1
    pairs = np.stack([np.asarray(multiplier, np.int64).reshape(-1),
                      np.asarray(shift, np.int64).reshape(-1)], 1).reshape(-1, 1)
    rows = pairs * np.ones((1, n), np.int64)
    blob = bytearray(req_offset(n) + rows.size * 4)
    blob[:n * n] = ones.tobytes()
    blob[n * n:2 * n * n] = np.eye(n, dtype=np.int8).tobytes()
    blob[req_offset(n):] = rows.astype("<i4").tobytes()
    return bytes(blob)


def score_shift(score_scale: float) -> int:
    """The right shift that coarsens a very fine score scale (below 6e-4) so that 2**15 units
    reach exp's zero."""
    return max(0, math.ceil(math.log2(6e-4 / score_scale))) if score_scale < 6e-4 else 0


def req_offset(n: int) -> int:
    """Byte offset of the requantization rows in `attention_consts`."""
    return align_up(2 * n * n, ALIGN)


def query_groups(cfg: AccelConfig, seq: int, d: int) -> int:
    """Query blocks per pass of `attention_head` that fit the accumulator (scores, z, exp
    and out^T for each, plus the per-block and REQ rows) and one ALU loop."""
    n = cfg.n
    per = 3 * seq + 3 + d
    g = min((cfg.acc_depth - 2 * d) // per, 4095 // seq, seq // n)
    if g < 1:
        raise AttentionError(f"ACC: one query block of a {seq}-token head needs "
                             f"{per + 2 * d} rows, the scratchpad has {cfg.acc_depth}")
    return g


def mask_rows(cfg: AccelConfig, seq: int, *, mask: Ref, full: bool, out: Ref, consts: Ref
              ) -> list[list[isa.Insn]]:
    """Programs (pieces to join, without END) that write an additive attention mask as int8
    rows in the scores' layout: row (I * seq + j) at ``out`` + (I * seq + j) * N = the mask of
    key j for the N queries of block I, one per lane. The mask is the blocked layout of a
    (1, 1, 1, seq) tensor (``full`` False: lane 0 of memory row j is key j's value, broadcast
    over the lanes by a GEMM with the ones tile) or of a (1, 1, seq, seq) one (``full``: lane 0
    of memory row i * seq + j; a transposed LOAD gathers N queries' rows into the lanes and a
    GEMM with the identity tile moves every N-th input row to the accumulator)."""
    n = cfg.n
    nb = seq // n
    ones, eye = 0, 1
    pieces = []
    if not full:
        per = max(1, min(cfg.acc_depth // seq, nb, 4095 // seq))
        for i0 in range(0, nb, per):
            c = min(per, nb - i0)
            prog = [isa.load(Buffer.WGT, slot=consts.slot, sp_base=ones, offset=consts.offset,
                             y_size=1, x_size=1, y_stride=1),
                    isa.load(Buffer.INP, slot=mask.slot, sp_base=0, offset=mask.offset,
                             y_size=1, x_size=seq, y_stride=seq, push_next=1),
                    isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=ones, outer=c,
                             inner=seq, acc_so=seq, acc_si=1, inp_so=0, inp_si=1, pop_prev=1,
                             push_next=1),
                    isa.store(Buffer.ACC8, slot=out.slot, sp_base=0,
                              offset=out.offset + i0 * seq * n, y_size=1, x_size=c * seq,
                              y_stride=c * seq, pop_prev=1)]
            pieces.append(prog)
        return pieces
    per = max(1, min(cfg.inp_depth // (seq * n), cfg.acc_depth // seq, 4095 // seq, nb))
    if seq * n > cfg.inp_depth:
        raise AttentionError(f"INP: a block of a {seq} x {seq} mask needs {seq * n} rows")
    for i0 in range(0, nb, per):
        c = min(per, nb - i0)
        prog = [isa.load(Buffer.WGT, slot=consts.slot, sp_base=eye,
                         offset=consts.offset + n * n, y_size=1, x_size=1, y_stride=1),
                isa.load(Buffer.INP, slot=mask.slot, sp_base=0,
                         offset=mask.offset + i0 * n * seq * n, y_size=c * n, x_size=seq,
                         y_stride=seq, transpose=1, push_next=1),
                isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=eye, outer=1,
                         inner=c * seq, acc_si=1, inp_si=n, pop_prev=1, push_next=1),
                isa.store(Buffer.ACC8, slot=out.slot, sp_base=0,
                          offset=out.offset + i0 * seq * n, y_size=1, x_size=c * seq,
                          y_stride=c * seq, pop_prev=1)]
        pieces.append(prog)
    return pieces


def attention_head(cfg: AccelConfig, seq: int, d: int, score_scale: float, *, q: int | Ref,
                   k: int | Ref, v: int | Ref, p: int | Ref, out: int | Ref,
                   width: int | None = None, queries: tuple[int, int] | None = None,
                   mask_t: Ref | None = None, mask_zero_point: int = 0,
                   mask_multiplier: int = 0, consts: Ref | None = None,
                   out_zero_point: int | None = None, out_width: int | None = None,
                   feature0: int = 0) -> list[isa.Insn]:
    """The program of one attention head (module doc), END included. ``q``, ``k``, ``v``: byte
    offsets (slot 0) of this head's Q^T, K^T, V^T (d x seq, tile-major transposed int8) in
    tensors of ``width`` features (default d; with several heads, head h's features start at
    offset h * d * N of each tensor); ``p``: seq * seq bytes of scratch memory for P^T;
    ``out``: seq * d * 4 bytes for out^T as int32 rows, element (I, e) = the N queries of block
    I of feature e, at scale 2**-P_BITS x V's scale. ``score_scale``: the real value of one
    unit of Q.K (Q's scale x K's scale / sqrt(d)). Tensors are `Ref`s or byte offsets of slot
    0. ``queries``: the query blocks [first, last) this program computes (default all; the
    accumulator holds `query_groups` of them at a time).

    Options of the compiler's attention layer: ``mask_t``, an additive mask as `mask_rows`
    writes it: the scores start as (value - ``mask_zero_point``) x ``mask_multiplier`` score
    units; ``out_zero_point`` (with ``consts``' requantization rows of features ``feature0``
    .. + d, `attention_consts`): out^T is requantized to int8 and stored in the tile-major
    layout of a tensor of ``out_width`` features (this head's slice at ``out``) instead of as
    int32 rows."""
    n = cfg.n
    q, k, v, p, out = (as_ref(r) for r in (q, k, v, p, out))
    width = d if width is None else width
    if seq % n or d % n or width % n or seq <= 0 or d <= 0 or width < d:
        raise AttentionError(f"seq {seq}, d {d} and width {width} must be positive multiples "
                             f"of N = {n}, width at least d")
    nb, db = seq // n, d // n
    i0, i1 = queries if queries is not None else (0, nb)
    if not 0 <= i0 < i1 <= nb:
        raise AttentionError(f"query blocks {i0} .. {i1} of {nb}")
    g = i1 - i0                                       # query blocks in this program
    rows = g * seq                                    # S^T's accumulator rows
    if rows > 4095:
        raise AttentionError(f"{rows} score rows exceed one ALU loop (4095)")
    # scratchpad plan
    kin, vin = 0, nb * d                              # INP: K rows, V^T rows
    wq, wp = 0, g * db                                # WGT: Q^T tiles, P^T tiles
    s_, z_, e_ = 0, rows, 2 * rows                    # ACC: scores, z, exp / P
    m_, sum_, r_ = 3 * rows, 3 * rows + g, 3 * rows + 2 * g
    o_ = 3 * rows + 3 * g                             # ACC: out^T
    prm = o_ + g * d                                  # ACC: the output's REQ rows
    if out_zero_point is not None and consts is None:
        raise AttentionError("a requantized output needs the constants (consts)")
    need = {"INP": (vin + nb * d, cfg.inp_depth), "WGT": (wp + g * nb, cfg.wgt_depth),
            "ACC": (prm + 2 * d, cfg.acc_depth)}
    for name, (used, depth) in need.items():
        if used > depth:
            raise AttentionError(f"{name}: {used} rows needed, the scratchpad has {depth}")

    # scores: coarsen a very fine scale (so that 2**15 units reach exp's zero), clamp to what
    # i_exp takes after its own refinement
    shift = score_shift(score_scale)
    s_scale = score_scale * (1 << shift)
    ep = ibert.i_exp_params(s_scale)
    clamp = SCORE_CLAMP // ep["f"]
    e_max = ep["q_b"] ** 2 + ep["q_c"]                # exp(0) in output units
    if seq * e_max * 1.2 >= 1 << 30:
        raise AttentionError(f"the sum of {seq} exponentials may reach 2**30 at scale "
                             f"{score_scale}")

    alu = ibert.loop_insn
    # 1. loads: Q^T's tiles of the query blocks (token block J's d features: width / N tiles
    # apart), K's rows (one transposed LOAD of all token blocks' feature rows, or one per
    # block in a wider tensor), V^T's rows, the mask's rows and the REQ rows
    prog: list[isa.Insn] = [
        isa.load(Buffer.WGT, slot=q.slot, sp_base=wq, offset=q.offset + i0 * width * n,
                 y_size=g, x_size=db, y_stride=width // n)]
    if width == d:
        prog.append(isa.load(Buffer.INP, slot=k.slot, sp_base=kin, offset=k.offset,
                             y_size=nb * d, x_size=1, y_stride=1, transpose=1))
    else:
        prog += [isa.load(Buffer.INP, slot=k.slot, sp_base=kin + j * d,
                          offset=k.offset + j * width * n, y_size=d, x_size=1, y_stride=1,
                          transpose=1) for j in range(nb)]
    if out_zero_point is not None:
        assert consts is not None
        prog.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=prm,
                             offset=consts.offset + req_offset(n) + feature0 * 2 * 4 * n,
                             y_size=1, x_size=2 * d, y_stride=2 * d))
    if mask_t is not None:
        prog.append(isa.load(Buffer.ACC8, slot=mask_t.slot, sp_base=s_,
                             offset=mask_t.offset + i0 * seq * n, y_size=1, x_size=rows,
                             y_stride=rows))
    prog.append(isa.load(Buffer.INP, slot=v.slot, sp_base=vin, offset=v.offset, y_size=nb,
                         x_size=d, y_stride=width, push_next=1))
    # 2. S^T: for query block I and feature block D, every key j (J, c), on top of the mask
    if mask_t is not None:
        prog += [alu(AluOp.ADD, s_, inner=rows, dst_si=1, imm=-mask_zero_point, pop_prev=1),
                 alu(AluOp.MUL, s_, inner=rows, dst_si=1, imm=mask_multiplier)]
    for i in range(g):
        for dd in range(db):
            prog.append(isa.gemm(reset=int(dd == 0 and mask_t is None), acc_base=s_ + i * seq,
                                 inp_base=kin + dd * n, wgt_base=wq + i * db + dd, outer=nb,
                                 inner=n, acc_so=n, acc_si=1, inp_so=d, inp_si=1,
                                 pop_prev=int(i == 0 and dd == 0 and mask_t is None)))
    # 3. softmax over the keys (rows) of each query block
    prog += [
        alu(AluOp.MOV, m_, inner=g, src=s_, dst_si=1, src_si=seq),
        alu(AluOp.MAX, m_, g, seq, src=s_, dst_so=1, src_so=seq, src_si=1),
        alu(AluOp.MUL, m_, inner=g, dst_si=1, imm=-1),
        alu(AluOp.ADD, s_, g, seq, src=m_, dst_so=seq, dst_si=1, src_so=1),
    ]
    if shift:
        prog.append(alu(AluOp.SHR, s_, inner=rows, dst_si=1, imm=shift))
    prog.append(alu(AluOp.MAX, s_, inner=rows, dst_si=1, imm=-clamp))
    prog += ibert.i_exp_insns(s_, rows, z_, e_, s_scale)
    prog += [
        alu(AluOp.MOV, sum_, inner=g, dst_si=1, imm=0),
        alu(AluOp.ADD, sum_, g, seq, src=e_, dst_so=1, src_so=seq, src_si=1),
        alu(AluOp.MOV, r_, inner=g, dst_si=1, imm=1 << 22),
        alu(AluOp.MUL, r_, inner=g, dst_si=1, imm=1 << 8),           # 2**30
        isa.xalu(XAluOp.DIV, dst_base=r_, src_base=sum_, outer=1, inner=g, dst_si=1,
                 src_si=1),                                          # 2**30 / sum
        alu(AluOp.MUL, e_, g, seq, src=r_, dst_so=seq, dst_si=1, src_so=1),
        alu(AluOp.SHR, e_, inner=rows, dst_si=1, imm=30 - P_BITS),
        alu(AluOp.MIN, e_, inner=rows, dst_si=1, imm=127, push_next=1),
    ]
    # 4. P^T to memory and back as weight tiles (tile (Jb, I) = rows I*seq + Jb*N ..)
    prog += [
        isa.store(Buffer.ACC8, slot=p.slot, sp_base=e_, offset=p.offset, y_size=1,
                  x_size=rows, y_stride=rows, pop_prev=1, push_prev=1),
        alu(AluOp.ADD, 0, outer=0, inner=0, pop_next=1, push_prev=1),   # store -> load
        isa.load(Buffer.WGT, slot=p.slot, sp_base=wp, offset=p.offset, y_size=g, x_size=nb,
                 y_stride=nb, pop_next=1, push_next=1),
    ]
    # 5. out^T[e][i] = sum over key blocks of V^T's rows x P^T's tiles
    for i in range(g):
        for jb in range(nb):
            last = i == g - 1 and jb == nb - 1
            prog.append(isa.gemm(reset=int(jb == 0), acc_base=o_ + i * d, inp_base=vin + jb * d,
                                 wgt_base=wp + i * nb + jb, outer=1, inner=d, acc_si=1,
                                 inp_si=1, pop_prev=int(i == 0 and jb == 0),
                                 push_next=int(last and out_zero_point is None)))
    if out_zero_point is None:
        prog.append(isa.store(Buffer.ACC, slot=out.slot, sp_base=o_,
                              offset=out.offset + i0 * d * 4 * n, y_size=1, x_size=g * d,
                              y_stride=g * d, pop_prev=1))
    else:
        ow = d if out_width is None else out_width
        prog += [isa.req(out_zero_point, dst_base=o_, src_base=prm, outer=g, inner=d,
                         dst_so=d, dst_si=1, src_so=0, src_si=2, push_next=1),
                 isa.store(Buffer.ACC8, slot=out.slot, sp_base=o_,
                           offset=out.offset + i0 * ow * n, y_size=g, x_size=d, y_stride=ow,
                           pop_prev=1)]
    prog.append(isa.end())
    return prog

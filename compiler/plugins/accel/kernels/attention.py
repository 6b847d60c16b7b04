"""One attention head on the accelerator, in the transposed activation layout of
docs/transformers.md: the building block of the transformer kernels (issue 16; not yet wired
into the plugin's partitioner, which will hand it its tensors as `Ref`s).

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
from compiler.plugins.accel.kernels.linear_t import _align, as_ref
from pyhost import ibert
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, XAluOp

#: Fraction bits of the probabilities (P^T as int8: 0 .. 127 = 0 .. 127/128)
P_BITS = 7


class AttentionError(ValueError):
    """A head the program cannot be made for (shapes, scratchpad, constants)."""


def attention_consts(n: int, multiplier: int, shift: int) -> bytes:
    """The constants `attention_head` reads with ``consts``: a weight tile whose row 0 is all
    ones (the mask's broadcast over the query lanes), then, 64-byte aligned, the requantization
    rows of the output (multiplier, shift in every lane)."""
    ones = np.zeros((n, n), np.int8)
    ones[0] = 1
    rows = (np.array([[multiplier], [shift]], np.int64) * np.ones((1, n), np.int64))
    blob = bytearray(_align(n * n) + 2 * 4 * n)
    blob[:n * n] = ones.tobytes()
    blob[_align(n * n):] = rows.astype("<i4").tobytes()
    return bytes(blob)


def attention_head(cfg: AccelConfig, seq: int, d: int, score_scale: float, *, q: int | Ref,
                   k: int | Ref, v: int | Ref, p: int | Ref, out: int | Ref,
                   width: int | None = None, mask: Ref | None = None, mask_zero_point: int = 0,
                   mask_multiplier: int = 0, consts: Ref | None = None,
                   out_zero_point: int | None = None, out_width: int | None = None
                   ) -> list[isa.Insn]:
    """The program of one attention head (module doc), END included. ``q``, ``k``, ``v``: byte
    offsets (slot 0) of this head's Q^T, K^T, V^T (d x seq, tile-major transposed int8) in
    tensors of ``width`` features (default d; with several heads, head h's features start at
    offset h * d * N of each tensor); ``p``: seq * seq bytes of scratch memory for P^T;
    ``out``: seq * d * 4 bytes for out^T as int32 rows, element (I, e) = the N queries of block
    I of feature e, at scale 2**-P_BITS x V's scale. ``score_scale``: the real value of one
    unit of Q.K (Q's scale x K's scale / sqrt(d)). Tensors are `Ref`s or byte offsets of slot
    0.

    Options of the compiler's attention layer: ``mask``, an additive bias over the keys (seq
    rows of N bytes, lane 0 the key's int8 value, the blocked layout of a (1, 1, 1, seq)
    tensor): the scores get (value - ``mask_zero_point``) x ``mask_multiplier`` score units,
    broadcast over the query lanes by a GEMM with ``consts``' ones tile; ``out_zero_point``
    (with ``consts``' requantization rows): out^T is requantized to int8 and stored in the
    tile-major layout of a tensor of ``out_width`` features (this head's slice at ``out``)
    instead of as int32 rows."""
    n = cfg.n
    q, k, v, p, out = (as_ref(r) for r in (q, k, v, p, out))
    width = d if width is None else width
    if seq % n or d % n or width % n or seq <= 0 or d <= 0 or width < d:
        raise AttentionError(f"seq {seq}, d {d} and width {width} must be positive multiples "
                             f"of N = {n}, width at least d")
    nb, db = seq // n, d // n
    rows = nb * seq                                   # S^T's accumulator rows
    if rows > 4095:
        raise AttentionError(f"{rows} score rows exceed one ALU loop (4095)")
    # scratchpad plan
    kin, vin = 0, nb * d                              # INP: K rows, V^T rows
    wq, wp = 0, nb * db                               # WGT: Q^T tiles, P^T tiles
    s_, z_, e_ = 0, rows, 2 * rows                    # ACC: scores, z, exp / P
    m_, sum_, r_ = 3 * rows, 3 * rows + nb, 3 * rows + 2 * nb
    o_ = 3 * rows + 3 * nb                            # ACC: out^T
    prm = o_ + nb * d                                 # ACC: the output's REQ rows
    min_ = vin + nb * d                               # INP: the mask's rows
    ones = wp + nb * nb                               # WGT: the ones tile
    if (mask is not None or out_zero_point is not None) and consts is None:
        raise AttentionError("a mask or a requantized output needs the constants (consts)")
    need = {"INP": (min_ + (seq if mask is not None else 0), cfg.inp_depth),
            "WGT": (ones + 1, cfg.wgt_depth), "ACC": (prm + 2, cfg.acc_depth)}
    for name, (used, depth) in need.items():
        if used > depth:
            raise AttentionError(f"{name}: {used} rows needed, the scratchpad has {depth}")

    # scores: coarsen a very fine scale (so that 2**15 units reach exp's zero), clamp to what
    # i_exp takes after its own refinement
    shift = max(0, math.ceil(math.log2(6e-4 / score_scale))) if score_scale < 6e-4 else 0
    s_scale = score_scale * (1 << shift)
    ep = ibert.i_exp_params(s_scale)
    clamp = ((1 << 15) - 1) // ep["f"]
    e_max = ep["q_b"] ** 2 + ep["q_c"]                # exp(0) in output units
    if seq * e_max * 1.2 >= 1 << 30:
        raise AttentionError(f"the sum of {seq} exponentials may reach 2**30 at scale "
                             f"{score_scale}")

    alu = ibert.loop_insn
    # 1. loads: Q^T's tiles (token block J's d features: width / N tiles apart), K's rows
    # (one transposed LOAD of all token blocks' feature rows, or one per block in a wider
    # tensor), V^T's rows
    prog: list[isa.Insn] = [
        isa.load(Buffer.WGT, slot=q.slot, sp_base=wq, offset=q.offset, y_size=nb, x_size=db,
                 y_stride=width // n)]
    if width == d:
        prog.append(isa.load(Buffer.INP, slot=k.slot, sp_base=kin, offset=k.offset,
                             y_size=nb * d, x_size=1, y_stride=1, transpose=1))
    else:
        prog += [isa.load(Buffer.INP, slot=k.slot, sp_base=kin + j * d,
                          offset=k.offset + j * width * n, y_size=d, x_size=1, y_stride=1,
                          transpose=1) for j in range(nb)]
    if consts is not None:
        prog += [isa.load(Buffer.WGT, slot=consts.slot, sp_base=ones, offset=consts.offset,
                          y_size=1, x_size=1, y_stride=1),
                 isa.load(Buffer.ACC, slot=consts.slot, sp_base=prm,
                          offset=consts.offset + _align(n * n), y_size=1, x_size=2,
                          y_stride=2)]
    if mask is not None:
        prog.append(isa.load(Buffer.INP, slot=mask.slot, sp_base=min_, offset=mask.offset,
                             y_size=1, x_size=seq, y_stride=seq))
    prog.append(isa.load(Buffer.INP, slot=v.slot, sp_base=vin, offset=v.offset, y_size=nb,
                         x_size=d, y_stride=width, push_next=1))
    # 2. S^T: for query block I and feature block D, every key j (J, c); the mask first
    if mask is not None:
        prog += [isa.gemm(reset=1, acc_base=s_, inp_base=min_, wgt_base=ones, outer=nb,
                          inner=seq, acc_so=seq, acc_si=1, inp_so=0, inp_si=1, pop_prev=1),
                 alu(AluOp.ADD, s_, inner=rows, dst_si=1, imm=-mask_zero_point),
                 alu(AluOp.MUL, s_, inner=rows, dst_si=1, imm=mask_multiplier)]
    for i in range(nb):
        for dd in range(db):
            prog.append(isa.gemm(reset=int(dd == 0 and mask is None), acc_base=s_ + i * seq,
                                 inp_base=kin + dd * n, wgt_base=wq + i * db + dd, outer=nb,
                                 inner=n, acc_so=n, acc_si=1, inp_so=d, inp_si=1,
                                 pop_prev=int(i == 0 and dd == 0 and mask is None)))
    # 3. softmax over the keys (rows) of each query block
    prog += [
        alu(AluOp.MOV, m_, inner=nb, src=s_, dst_si=1, src_si=seq),
        alu(AluOp.MAX, m_, nb, seq, src=s_, dst_so=1, src_so=seq, src_si=1),
        alu(AluOp.MUL, m_, inner=nb, dst_si=1, imm=-1),
        alu(AluOp.ADD, s_, nb, seq, src=m_, dst_so=seq, dst_si=1, src_so=1),
    ]
    if shift:
        prog.append(alu(AluOp.SHR, s_, inner=rows, dst_si=1, imm=shift))
    prog.append(alu(AluOp.MAX, s_, inner=rows, dst_si=1, imm=-clamp))
    prog += ibert.i_exp_insns(s_, rows, z_, e_, s_scale)
    prog += [
        alu(AluOp.MOV, sum_, inner=nb, dst_si=1, imm=0),
        alu(AluOp.ADD, sum_, nb, seq, src=e_, dst_so=1, src_so=seq, src_si=1),
        alu(AluOp.MOV, r_, inner=nb, dst_si=1, imm=1 << 22),
        alu(AluOp.MUL, r_, inner=nb, dst_si=1, imm=1 << 8),          # 2**30
        isa.xalu(XAluOp.DIV, dst_base=r_, src_base=sum_, outer=1, inner=nb, dst_si=1,
                 src_si=1),                                          # 2**30 / sum
        alu(AluOp.MUL, e_, nb, seq, src=r_, dst_so=seq, dst_si=1, src_so=1),
        alu(AluOp.SHR, e_, inner=rows, dst_si=1, imm=30 - P_BITS),
        alu(AluOp.MIN, e_, inner=rows, dst_si=1, imm=127, push_next=1),
    ]
    # 4. P^T to memory and back as weight tiles (tile (Jb, I) = rows I*seq + Jb*N ..)
    prog += [
        isa.store(Buffer.ACC8, slot=p.slot, sp_base=e_, offset=p.offset, y_size=1,
                  x_size=rows, y_stride=rows, pop_prev=1, push_prev=1),
        alu(AluOp.ADD, 0, outer=0, inner=0, pop_next=1, push_prev=1),   # store -> load
        isa.load(Buffer.WGT, slot=p.slot, sp_base=wp, offset=p.offset, y_size=nb, x_size=nb,
                 y_stride=nb, pop_next=1, push_next=1),
    ]
    # 5. out^T[e][i] = sum over key blocks of V^T's rows x P^T's tiles
    for i in range(nb):
        for jb in range(nb):
            last = i == nb - 1 and jb == nb - 1
            prog.append(isa.gemm(reset=int(jb == 0), acc_base=o_ + i * d, inp_base=vin + jb * d,
                                 wgt_base=wp + i * nb + jb, outer=1, inner=d, acc_si=1,
                                 inp_si=1, pop_prev=int(i == 0 and jb == 0),
                                 push_next=int(last and out_zero_point is None)))
    if out_zero_point is None:
        prog.append(isa.store(Buffer.ACC, slot=out.slot, sp_base=o_, offset=out.offset,
                              y_size=1, x_size=nb * d, y_stride=nb * d, pop_prev=1))
    else:
        ow = d if out_width is None else out_width
        prog += [isa.req(out_zero_point, dst_base=o_, src_base=prm, outer=1, inner=nb * d,
                         dst_si=1, push_next=1),
                 isa.store(Buffer.ACC8, slot=out.slot, sp_base=o_, offset=out.offset,
                           y_size=nb, x_size=d, y_stride=ow, pop_prev=1)]
    prog.append(isa.end())
    return prog

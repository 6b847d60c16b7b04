"""The transformer encoder's layers as kernels, in the tile-major transposed layout of
docs/transformers.md: a (1, tokens, features) tensor is the blocked layout of its NCHW view
(1, tokens, 1, features), so block J's row f holds feature f of tokens J*N .. J*N + N-1, one
per lane. Every kernel here reads and writes that layout, which is what the CNN kernels (the
residual Add) see too.

- `linear`: Y = X W + b requantized per output feature (`linear_t.linear_t`'s program);
- `layernorm`: LayerNormalization over the features (pyhost/ibert.py's `i_layernorm`
  sequence), then gamma and beta as per-feature integer multiply and add, and REQ;
- `gelu`: pyhost/ibert.py's `i_gelu` sequence on the input's integers less its zero point,
  then REQ;
- `attention`: multi-head self-attention from Q, K, V (symmetric int8, heads side by side)
  and an optional additive key mask to the merged context (`attention.attention_head` per
  head, each requantizing its slice of the output).

Large layers run in chunks of token blocks (LayerNorm) or rows (GELU), one after the other
with `join`'s hand-off between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from compiler.plugins.accel.kernels.attention import (
    P_BITS,
    AttentionError,
    attention_consts,
    attention_head,
)
from compiler.plugins.accel.kernels.base import (
    _LOOP,
    DEFAULT_CFG,
    AccelKernelError,
    ConstBlob,
    Kernel,
    Ref,
    TensorInfo,
    _check_ref,
    _int8,
    _need,
)
from compiler.plugins.accel.kernels.join import join
from compiler.plugins.accel.kernels.linear_t import LinearTError, _align, linear_t
from compiler.quantize.requant import quantize_multiplier
from pyhost import ibert
from pyhost.fixedpoint import MAX_SHIFT
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer

#: Fraction bits of the normalized values inside `layernorm` (before gamma and beta).
LN_BITS = 10


def _shape(tokens: int, features: int) -> tuple[int, int, int, int]:
    return (1, tokens, 1, features)


def _info(name: str, ref: Ref, tokens: int, features: int, fill: int) -> TensorInfo:
    return TensorInfo(name, ref, _shape(tokens, features), "int8", tokens * features, fill)


def _tokens_ok(tokens: int, n: int, what: str) -> int:
    _need(tokens > 0 and tokens % n == 0, f"{what}: the sequence length {tokens} must be a "
          f"multiple of N = {n} (the transposed layout keeps N tokens per row)")
    return tokens // n


def _blob(consts: Ref, parts: Sequence[tuple[str, bytes]]) -> tuple[ConstBlob, list[int]]:
    """A blob of 64-byte aligned parts at ``consts``; the absolute offset of each part."""
    data = bytearray()
    offs, sections = [], []
    for name, raw in parts:
        data += bytes(_align(len(data)) - len(data))
        offs.append(consts.offset + len(data))
        sections.append((name, len(data), len(raw)))
        data += raw
    return ConstBlob(consts, bytes(data), tuple(sections)), offs


def _rows(values: np.ndarray, n: int) -> bytes:
    """int32 accumulator rows, each value in every lane."""
    v = np.asarray(values, np.int64).reshape(-1, 1)
    _need(bool((np.abs(v) < 2**31).all()), "a constant row exceeds int32")
    return (v * np.ones((1, n), np.int64)).astype("<i4").tobytes()


def _multiplier(real: float, what: str) -> tuple[int, int]:
    _need(real > 0 and math.isfinite(real), f"{what}: the rescale factor {real} is not positive")
    m, s = quantize_multiplier(real)
    _need(0 <= s <= MAX_SHIFT and 0 <= m < 2**31, f"{what}: the rescale factor {real:.3g} is "
          "out of the requantizer's range")
    return int(m), int(s)


# --- linear -----------------------------------------------------------------------------------

def linear(tokens: int, weight: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
           shift: np.ndarray, output_zero_point: int, *, inp: Ref, out: Ref, consts: Ref,
           cfg: AccelConfig = DEFAULT_CFG, name: str = "linear") -> Kernel:
    """Y^T = requantize(W X^T + bias) for int8 ``weight`` (d_out x d_in), the int32 ``bias``
    with the input's zero point folded in (-zp_in x the sum of each row of W), per-feature
    ``multiplier`` / ``shift``."""
    n = cfg.n
    _tokens_ok(tokens, n, name)
    for r, what in ((inp, "input"), (out, "output")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zp = _int8("output zero point", output_zero_point)
    w = np.asarray(weight)
    d_out, d_in = w.shape
    try:
        lt = linear_t(cfg, tokens, w.astype(np.int8), np.asarray(bias), np.asarray(multiplier),
                      np.asarray(shift), zp, x=inp, consts=consts, y=out)
    except LinearTError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    blob = ConstBlob(consts, lt.blob, (("weights, bias, requantization", 0, len(lt.blob)),))
    return Kernel(name, lt.program[:-1], inputs=(_info("input", inp, tokens, d_in, 0),),
                  outputs=(_info("output", out, tokens, d_out, zp),), consts=blob,
                  tiling={"tokens": tokens, "d_in": d_in, "d_out": d_out})


# --- LayerNorm --------------------------------------------------------------------------------

def layernorm_gamma(gamma: np.ndarray, beta: np.ndarray, h: int
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """(integer gamma, integer beta, k): gamma x 2**k and beta x 2**(LN_BITS + k), rounded,
    with k as large as keeps |normalized x gamma| + |beta| below 2**31 (|normalized| <=
    sqrt(h) x 2**LN_BITS)."""
    g = np.asarray(gamma, np.float64)
    b = np.asarray(beta, np.float64)
    _need(bool(np.isfinite(g).all() and np.isfinite(b).all()), "gamma or beta is not finite")
    top = math.sqrt(h) * (1 << LN_BITS)
    for k in range(24, -8, -1):
        gi = np.rint(g * 2.0 ** k)
        bi = np.rint(b * 2.0 ** (LN_BITS + k))
        if float(np.max(np.abs(gi) * top + np.abs(bi), initial=0)) < 2**30:
            return gi.astype(np.int64), bi.astype(np.int64), k
    raise AccelKernelError("gamma and beta are too large for 32-bit LayerNorm rows")


def layernorm(tokens: int, h: int, input_scale: float, epsilon: float, gamma: np.ndarray,
              beta: np.ndarray, output_scale: float, output_zero_point: int, *, inp: Ref,
              out: Ref, consts: Ref, cfg: AccelConfig = DEFAULT_CFG,
              name: str = "layernorm") -> Kernel:
    """LayerNormalization over the ``h`` features of each token of an int8 tensor (its zero
    point cancels in x - mean). Per chunk of token blocks: LOAD.ACC8, `ibert.i_layernorm_insns`
    (LN_BITS fraction bits), MUL by gamma x 2**k and ADD beta x 2**(LN_BITS + k) per feature
    row, REQ by 2**-(LN_BITS + k) / output_scale, STORE.ACC8."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    _need(1 <= h <= 512, f"{name}: rows of {h} features (at most 512)")
    for r, what in ((inp, "input"), (out, "output")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zp = _int8("output zero point", output_zero_point)
    gi, bi, k = layernorm_gamma(gamma, beta, h)
    mult, shift = _multiplier(2.0 ** -(LN_BITS + k) / output_scale, name)
    blob, (g_off, b_off, p_off) = _blob(consts, [
        ("gamma", _rows(gi, n)), ("beta", _rows(bi, n)), ("requant", _rows([mult, shift], n))])
    g_r, b_r, p_r = 0, h, 2 * h                       # ACC: the parameter rows
    x0 = 2 * h + 2
    per = (cfg.acc_depth - x0) // (2 * h + 9)         # token blocks per chunk
    _need(per >= 1, f"{name}: the accumulator ({cfg.acc_depth} rows) cannot hold one token "
          f"block of {h} features")
    per = min(per, _LOOP // h, nb)
    cs = consts.slot
    pieces = []
    for j0 in range(0, nb, per):
        c = min(per, nb - j0)
        x, tmp = x0, x0 + c * h
        prog: list[isa.Insn] = []
        if j0 == 0:
            prog += [isa.load(Buffer.ACC, slot=cs, sp_base=g_r, offset=g_off, y_size=1,
                              x_size=h, y_stride=h),
                     isa.load(Buffer.ACC, slot=cs, sp_base=b_r, offset=b_off, y_size=1,
                              x_size=h, y_stride=h),
                     isa.load(Buffer.ACC, slot=cs, sp_base=p_r, offset=p_off, y_size=1,
                              x_size=2, y_stride=2)]
        prog.append(isa.load(Buffer.ACC8, slot=inp.slot, sp_base=x,
                             offset=inp.offset + j0 * h * n, y_size=1, x_size=c * h,
                             y_stride=c * h, push_next=1))
        body = ibert.i_layernorm_insns(x, h, c, tmp, input_scale, epsilon, LN_BITS)
        body[0] = isa.Insn(body[0].op, {**body[0].fields, "pop_prev": 1})
        prog += body
        per_row = {"outer": c, "inner": h, "dst_so": h, "dst_si": 1, "src_so": 0, "src_si": 1}
        prog += [isa.alu(AluOp.MUL, dst_base=x, src_base=g_r, **per_row),
                 isa.alu(AluOp.ADD, dst_base=x, src_base=b_r, **per_row),
                 isa.req(zp, dst_base=x, src_base=p_r, outer=1, inner=c * h, dst_si=1,
                         push_next=1),
                 isa.store(Buffer.ACC8, slot=out.slot, sp_base=x,
                           offset=out.offset + j0 * h * n, y_size=1, x_size=c * h,
                           y_stride=c * h, pop_prev=1)]
        pieces.append(Kernel(f"{name}[{j0}]", prog, (), (), None))
    return Kernel(name, join(pieces, end=False), inputs=(_info("input", inp, tokens, h, 0),),
                  outputs=(_info("output", out, tokens, h, zp),), consts=blob,
                  tiling={"blocks_per_chunk": per, "chunks": len(pieces), "gamma_bits": k})


# --- GELU -------------------------------------------------------------------------------------

def gelu(tokens: int, h: int, input_scale: float, input_zero_point: int, output_scale: float,
         output_zero_point: int, *, inp: Ref, out: Ref, consts: Ref,
         cfg: AccelConfig = DEFAULT_CFG, name: str = "gelu") -> Kernel:
    """GELU (erf form) of an int8 tensor: per chunk of rows LOAD.ACC8, ADD -zp_in,
    `ibert.i_gelu_insns`, REQ to the output's scale, STORE.ACC8 (the integer sequence's
    scale is negative: the REQ rows get its magnitude after a MUL by -1)."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    for r, what in ((inp, "input"), (out, "output")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zin = _int8("input zero point", input_zero_point)
    zp = _int8("output zero point", output_zero_point)
    try:
        _, s_gelu = ibert.i_gelu(np.zeros(1, np.int64), input_scale)
    except ValueError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    mult, shift = _multiplier(abs(s_gelu) / output_scale, name)
    blob, (p_off,) = _blob(consts, [("requant", _rows([mult, shift], n))])
    total = nb * h
    per = min((cfg.acc_depth - 2) // 3, _LOOP, total)
    _need(per >= 1, f"{name}: the accumulator is too small")
    pieces = []
    for r0 in range(0, total, per):
        r = min(per, total - r0)
        q, tmp, o = 2, 2 + r, 2 + 2 * r
        prog: list[isa.Insn] = []
        if r0 == 0:
            prog.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=p_off,
                                 y_size=1, x_size=2, y_stride=2))
        prog.append(isa.load(Buffer.ACC8, slot=inp.slot, sp_base=q, offset=inp.offset + r0 * n,
                             y_size=1, x_size=r, y_stride=r, push_next=1))
        body = ([ibert.rows_insn(AluOp.ADD, q, r, imm=-zin)] if zin else []) + \
            ibert.i_gelu_insns(q, r, tmp, o, input_scale)
        if s_gelu < 0:
            body.append(ibert.rows_insn(AluOp.MUL, o, r, imm=-1))
        body[0] = isa.Insn(body[0].op, {**body[0].fields, "pop_prev": 1})
        prog += body
        prog += [isa.req(zp, dst_base=o, src_base=0, outer=1, inner=r, dst_si=1, push_next=1),
                 isa.store(Buffer.ACC8, slot=out.slot, sp_base=o, offset=out.offset + r0 * n,
                           y_size=1, x_size=r, y_stride=r, pop_prev=1)]
        pieces.append(Kernel(f"{name}[{r0}]", prog, (), (), None))
    return Kernel(name, join(pieces, end=False), inputs=(_info("input", inp, tokens, h, zin),),
                  outputs=(_info("output", out, tokens, h, zp),), consts=blob,
                  tiling={"rows_per_chunk": per, "chunks": len(pieces)})


# --- attention --------------------------------------------------------------------------------

def attention(tokens: int, hidden: int, heads: int, score_scale: float, v_scale: float,
              output_scale: float, output_zero_point: int, *, q: Ref, k: Ref, v: Ref,
              out: Ref, scratch: Ref, consts: Ref, mask: Ref | None = None,
              mask_scale: float = 0.0, mask_zero_point: int = 0,
              cfg: AccelConfig = DEFAULT_CFG, name: str = "attention") -> Kernel:
    """Multi-head self-attention: softmax(Q_h K_h^T x score_scale + mask) V_h for each head h
    of ``hidden / heads`` features, merged into a (1, tokens, hidden) int8 tensor at the
    output's scale. Q, K, V are symmetric int8 (zero point 0); the mask, if any, is a (1, 1,
    1, tokens) int8 tensor added to every query's scores (its value less its zero point times
    round(mask_scale / score_scale)); ``scratch``: tokens x tokens bytes for the
    probabilities. One `attention.attention_head` program per head, joined."""
    n = cfg.n
    _tokens_ok(tokens, n, name)
    _need(heads >= 1 and hidden % heads == 0, f"{name}: {hidden} features in {heads} heads")
    d = hidden // heads
    for r, what in ((q, "Q"), (k, "K"), (v, "V"), (out, "output"), (scratch, "scratch")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zp = _int8("output zero point", output_zero_point)
    mult, shift = _multiplier(2.0 ** -P_BITS * v_scale / output_scale, name)
    raw = attention_consts(n, mult, shift)
    blob = ConstBlob(consts, raw, (("ones tile, requantization", 0, len(raw)),))
    m_mult = 0
    if mask is not None:
        _check_ref(mask, n, "mask")
        m_mult = round(mask_scale / score_scale)
        _need(0 <= m_mult < 2**23 and 255 * m_mult < 2**31, f"{name}: the mask's scale is "
              f"{mask_scale / score_scale:.3g} score units (at most 2**23)")
    pieces = []
    try:
        for h in range(heads):
            prog = attention_head(cfg, tokens, d, score_scale, q=q + h * d * n,
                                  k=k + h * d * n, v=v + h * d * n, p=scratch,
                                  out=out + h * d * n, width=hidden, mask=mask,
                                  mask_zero_point=_int8("mask zero point", mask_zero_point),
                                  mask_multiplier=m_mult, consts=consts,
                                  out_zero_point=zp, out_width=hidden)
            pieces.append(Kernel(f"{name}[{h}]", prog[:-1], (), (), None))
    except AttentionError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    ins = [_info("q", q, tokens, hidden, 0), _info("k", k, tokens, hidden, 0),
           _info("v", v, tokens, hidden, 0)]
    if mask is not None:
        ins.append(TensorInfo("mask", mask, (1, 1, 1, tokens), "int8", tokens * n,
                              mask_zero_point))
    return Kernel(name, join(pieces, end=False), inputs=tuple(ins),
                  outputs=(_info("output", out, tokens, hidden, zp),), consts=blob,
                  tiling={"heads": heads, "head_size": d, "scratch_bytes": tokens * tokens})

"""The transformer encoder's layers as kernels, in the tile-major transposed layout of
docs/transformers.md: a (1, tokens, features) tensor is the blocked layout of its NCHW view
(1, tokens, 1, features), so block J's row f holds feature f of tokens J*N .. J*N + N-1, one
per lane. Every kernel here reads and writes that layout, which is what the CNN kernels (the
residual Add) see too.

- `linear`: Y = X W + b requantized per output feature (`linear_t.linear_t`'s program);
- `layernorm`: LayerNormalization over the features (pyhost/ibert.py's `i_layernorm`
  sequence), then gamma and beta as per-feature integer multiply and add, and REQ;
- `gelu`: pyhost/ibert.py's `i_gelu` sequence, then REQ;
- `add`: the residual sum of two such tensors (or one and a constant);
- `attention`: multi-head self-attention from Q, K, V (symmetric int8, heads side by side)
  and an optional additive mask to the merged context (`attention.attention_head` per head
  and group of queries, each requantizing its slice of the output).

Every tensor is described by its `ActQuant`: per tensor (scale, zero point) or per feature
(``feature_scales``, zero point 0: the quantizer's form for an encoder's residual stream and
LayerNorm outputs, where a few features are orders of magnitude above the rest). Feature f is
a row of the layout, so per-feature scales cost nothing where a kernel has per-row constants:
a linear layer folds its input's scales into the weights (W'[e][f] = W[e][f] s_x[f], then
per output feature symmetric int8) and requantizes per output row; LayerNorm and GELU first
bring the rows to one fine scale (a per-row integer MUL and a rounding SHR); the residual add
multiplies each row by its own factors.

Large layers run in chunks of token blocks (LayerNorm) or rows (GELU), one after the other
with `join`'s hand-off between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from compiler.errors import QuantizationError
from compiler.plugins.accel.kernels.attention import (
    ALIGN,
    P_BITS,
    SCORE_CLAMP,
    AttentionError,
    attention_consts,
    attention_head,
    mask_rows,
    query_groups,
    score_shift,
)
from compiler.plugins.accel.kernels.base import (
    _LOOP,
    DEFAULT_CFG,
    AccelKernelError,
    ConstBlob,
    Kernel,
    Ref,
    TensorInfo,
    _Blob,
    _check_ref,
    _int8,
    _need,
)
from compiler.plugins.accel.kernels.join import join
from compiler.plugins.accel.kernels.linear_t import LinearTError, linear_t
from compiler.quantize.params import ActQuant, feature_params, weight_params
from compiler.quantize.quantizer import (
    BIAS_LIMIT,
    SATURATING_MULTIPLIER,
    bias_weight_floor,
)
from compiler.quantize.requant import quantize_multiplier, quantize_multipliers
from pyhost import ibert
from pyhost.accel import layout
from pyhost.accel.abi import align_up
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


def _blob(consts: Ref, parts: Sequence[tuple[str, bytes]], n: int
          ) -> tuple[ConstBlob, list[int]]:
    """`base._Blob` of these parts at ``consts``; the offset of each part from the slot."""
    blob = _Blob(consts, n)
    offs = [blob.add(name, raw) for name, raw in parts]
    return blob.done(), offs


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


# --- per-feature parameters --------------------------------------------------------------------

def feature_vector(q: ActQuant, h: int) -> np.ndarray:
    """The scale of each of the ``h`` features (the per-tensor scale repeated)."""
    if q.feature_scales is None:
        return np.full(h, q.scale, np.float64)
    fs = np.asarray(q.feature_scales, np.float64)
    _need(fs.size == h, f"{fs.size} feature scales for {h} features")
    return fs


#: Fraction bits of the integer factors that bring per-feature rows to one scale.
RESCALE_BITS = 15


def _rescale(q: ActQuant, h: int, extra_bits: int) -> tuple[np.ndarray | None, float]:
    """(per-row integer factors, common unit) that bring an int8 tensor's rows to one scale
    with ``extra_bits`` more resolution than its coarsest feature: X_f = (q_f - zp) x r_f >>
    RESCALE_BITS, unit s_max / 2**extra_bits. None (and the tensor's own scale) when it is
    per tensor: X = q - zp."""
    if q.feature_scales is None:
        return None, q.scale
    fs = feature_vector(q, h)
    top = float(fs.max())
    r = np.rint(fs / top * 2.0 ** (extra_bits + RESCALE_BITS)).astype(np.int64)
    return r, top / 2.0 ** extra_bits


def _rescale_insns(x: int, rows: int, blocks: int, h: int, zp: int, r_row: int | None
                   ) -> list[isa.Insn]:
    """ALU rows from ``x`` (``blocks`` of ``h`` feature rows): less the zero point, or times
    the per-row factors at ``r_row`` and shifted back (`_rescale`)."""
    if r_row is None:
        return [ibert.rows_insn(AluOp.ADD, x, rows, imm=-zp)] if zp else []
    return [isa.alu(AluOp.MUL, dst_base=x, src_base=r_row, outer=blocks, inner=h, dst_so=h,
                    dst_si=1, src_so=0, src_si=1),
            ibert.rows_insn(AluOp.SHR, x, rows, imm=RESCALE_BITS)]


def _first_pops(body: list[isa.Insn]) -> list[isa.Insn]:
    """``body`` with its first instruction popping the loads' token."""
    return [isa.Insn(body[0].op, {**body[0].fields, "pop_prev": 1}), *body[1:]]


# --- linear -----------------------------------------------------------------------------------

def linear(tokens: int, weight: np.ndarray, bias: np.ndarray | None, in_q: ActQuant,
           out_q: ActQuant, *, inp: Ref, out: Ref, consts: Ref,
           cfg: AccelConfig = DEFAULT_CFG, name: str = "linear") -> Kernel:
    """Y = X W + b for the float ``weight`` (d_in x d_out, the MatMul's) and ``bias``: the
    input's scales folded into the weights, int8 per output feature, the input's zero point
    folded into the int32 bias, requantized per output feature to the output's parameters."""
    n = cfg.n
    _tokens_ok(tokens, n, name)
    for r, what in ((inp, "input"), (out, "output")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    w = np.asarray(weight, np.float64)
    d_in, d_out = w.shape
    zp = _int8("output zero point", out_q.zero_point)
    wf = w.T * feature_vector(in_q, d_in)[None, :]            # (d_out, d_in), real per q_x
    b = np.zeros(d_out) if bias is None else np.asarray(bias, np.float64)
    try:
        w_q, s_w = weight_params(wf, 0)
        b_q = np.rint(b / s_w)
        if np.abs(b_q).max(initial=0) > BIAS_LIMIT:
            w_q, s_w = weight_params(wf, 0, min_scale=bias_weight_floor(b, 1.0))
            b_q = np.rint(b / s_w)
    except QuantizationError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    bias_q = b_q.astype(np.int64) - in_q.zero_point * w_q.astype(np.int64).sum(axis=1)
    _need(bool(np.abs(bias_q).max(initial=0) < 2**31), f"{name}: the bias overflows int32")
    mult, shift = quantize_multipliers(np.minimum(
        s_w.astype(np.float64) / feature_vector(out_q, d_out), SATURATING_MULTIPLIER))
    try:
        lt = linear_t(cfg, tokens, w_q, bias_q, mult, shift, zp, x=inp, consts=consts, y=out)
    except LinearTError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    blob = ConstBlob(consts, lt.blob, (("weights, bias, requantization", 0, len(lt.blob)),))
    assert lt.plan is not None
    return Kernel(name, lt.program[:-1], inputs=(_info("input", inp, tokens, d_in, 0),),
                  outputs=(_info("output", out, tokens, d_out, zp),), consts=blob,
                  tiling={"tokens": tokens, "d_in": d_in, "d_out": d_out,
                          "token_blocks_per_tile": lt.plan.tj, "features_per_group": lt.plan.eo,
                          "input_blocks_per_pass": lt.plan.dk})


# --- LayerNorm --------------------------------------------------------------------------------

def layernorm_gamma(gamma: np.ndarray, beta: np.ndarray, h: int
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """(integer gamma, integer beta, k): gamma x 2**k and beta x 2**(LN_BITS + k), rounded,
    with k as large as keeps |normalized x gamma| + |beta| below 2**30 (|normalized| <=
    sqrt(h) x 2**LN_BITS)."""
    g = np.asarray(gamma, np.float64)
    b = np.asarray(beta, np.float64)
    _need(bool(np.isfinite(g).all() and np.isfinite(b).all()), "gamma or beta is not finite")
    top = math.sqrt(h) * (1 << LN_BITS)
    for k in range(24, -24, -1):
        gi = np.rint(g * 2.0 ** k)
        bi = np.rint(b * 2.0 ** (LN_BITS + k))
        if float(np.max(np.abs(gi) * top + np.abs(bi), initial=0)) < 2**30:
            return gi.astype(np.int64), bi.astype(np.int64), k
    raise AccelKernelError("gamma and beta are too large for 32-bit LayerNorm rows")


#: Resolution LayerNorm's per-feature input gets beyond its coarsest feature (bits).
LN_EXTRA_BITS = 7


def layernorm(tokens: int, h: int, in_q: ActQuant, epsilon: float, gamma: np.ndarray,
              beta: np.ndarray, out_q: ActQuant, *, inp: Ref, out: Ref, consts: Ref,
              cfg: AccelConfig = DEFAULT_CFG, name: str = "layernorm") -> Kernel:
    """LayerNormalization over the ``h`` features of each token. Per chunk of token blocks:
    LOAD.ACC8; the rows brought to one scale (`_rescale`: a per-tensor input's zero point
    cancels in x - mean, so it is used as it is); `ibert.i_layernorm_insns` (LN_BITS fraction
    bits; per-feature rows span 2**(8 + LN_EXTRA_BITS), so the squares are summed shifted by
    LN_EXTRA_BITS); MUL by gamma / s_out x 2**k and ADD beta / s_out x 2**(LN_BITS + k) per
    feature row; REQ by 2**-(LN_BITS + k) (+ the output's zero point); STORE.ACC8."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    _need(1 <= h <= 512, f"{name}: rows of {h} features (at most 512)")
    for r, what in ((inp, "input"), (out, "output")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zp = _int8("output zero point", out_q.zero_point)
    s_out = feature_vector(out_q, h)
    gi, bi, k = layernorm_gamma(np.asarray(gamma) / s_out, np.asarray(beta) / s_out, h)
    mult, shift = _multiplier(2.0 ** -(LN_BITS + k), name)
    r, unit = _rescale(in_q, h, LN_EXTRA_BITS)
    vs = LN_EXTRA_BITS if r is not None else 0
    parts = [("gamma", _rows(gi, n)), ("beta", _rows(bi, n)),
             ("requant", _rows([mult, shift], n))]
    if r is not None:
        parts.append(("rescale", _rows(r, n)))
    blob, offs = _blob(consts, parts, n)
    g_r, b_r, p_r, r_r = 0, h, 2 * h, 2 * h + 2       # ACC: the parameter rows
    x0 = 2 * h + 2 + (h if r is not None else 0)
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
            prog += [isa.load(Buffer.ACC, slot=cs, sp_base=base, offset=off, y_size=1,
                              x_size=cnt, y_stride=cnt)
                     for base, off, cnt in zip((g_r, b_r, p_r, r_r), offs, (h, h, 2, h),
                                               strict=False)]
        prog.append(isa.load(Buffer.ACC8, slot=inp.slot, sp_base=x,
                             offset=inp.offset + j0 * h * n, y_size=1, x_size=c * h,
                             y_stride=c * h, push_next=1))
        body = _rescale_insns(x, c * h, c, h, 0, r_r if r is not None else None)
        body += ibert.i_layernorm_insns(x, h, c, tmp, unit, epsilon, LN_BITS, vs)
        prog += _first_pops(body)
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

def gelu_unit(in_q: ActQuant, h: int) -> tuple[np.ndarray | None, float]:
    """`_rescale` for GELU: as much resolution beyond the coarsest feature (up to 7 bits) as
    keeps ibert's GELU in 31 bits (x (erf + 1 / s_erf) grows as x / unit**2) and its
    constants in immediates."""
    if in_q.feature_scales is None:
        return None, in_q.scale
    top = float(feature_vector(in_q, h).max())
    for extra in range(7, -1, -1):
        r, unit = _rescale(in_q, h, extra)
        s_erf = abs(ibert.ERF_A) * (unit / math.sqrt(2)) ** 2
        if 128 * 2**extra * 2.2 / s_erf < 2**31:
            try:
                ibert.i_gelu(np.zeros(1, np.int64), unit)
            except ValueError:
                continue
            return r, unit
    raise AccelKernelError(f"GELU: no common scale for features up to {top * 127:.3g}")


def gelu(tokens: int, h: int, in_q: ActQuant, out_q: ActQuant, *, inp: Ref, out: Ref,
         consts: Ref, cfg: AccelConfig = DEFAULT_CFG, name: str = "gelu") -> Kernel:
    """GELU (erf form): per chunk of token blocks LOAD.ACC8, the rows brought to one scale
    (`gelu_unit`, or less the zero point), `ibert.i_gelu_insns`, REQ per feature row to the
    output (the integer sequence's scale is negative: a MUL by -1 first), STORE.ACC8."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    for r_, what in ((inp, "input"), (out, "output")):
        _check_ref(r_, n, what)
    _check_ref(consts, n * n, "constant blob")
    zin = _int8("input zero point", in_q.zero_point)
    zp = _int8("output zero point", out_q.zero_point)
    r, unit = gelu_unit(in_q, h)
    try:
        _, s_gelu = ibert.i_gelu(np.zeros(1, np.int64), unit)
    except ValueError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    mult, shift = quantize_multipliers(abs(s_gelu) / feature_vector(out_q, h))
    prm = np.stack([mult, shift], 1).reshape(-1)
    parts = [("requant", _rows(prm, n))] + ([("rescale", _rows(r, n))] if r is not None else [])
    blob, offs = _blob(consts, parts, n)
    # chunks of features x all token blocks (x token blocks in parts when the accumulator
    # cannot hold a feature of every block): each chunk loads its features' parameter rows
    pw = 3 if r is not None else 2                    # parameter rows per feature
    tb = min(nb, max(1, (cfg.acc_depth - pw) // 3 - 1))
    fc = min(h, (cfg.acc_depth) // (pw + 3 * tb), _LOOP)
    _need(fc >= 1, f"{name}: the accumulator is too small for one feature")
    pieces = []
    for f0 in range(0, h, fc):
        w = min(fc, h - f0)
        for j0 in range(0, nb, tb):
            c = min(tb, nb - j0)
            rows = c * w
            p_r, r_r = 0, 2 * w
            q = pw * w
            tmp, o = q + rows, q + 2 * rows
            prog: list[isa.Insn] = [
                isa.load(Buffer.ACC, slot=consts.slot, sp_base=p_r,
                         offset=offs[0] + f0 * 2 * 4 * n, y_size=1, x_size=2 * w,
                         y_stride=2 * w)]
            if r is not None:
                prog.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=r_r,
                                     offset=offs[1] + f0 * 4 * n, y_size=1, x_size=w,
                                     y_stride=w))
            prog.append(isa.load(Buffer.ACC8, slot=inp.slot, sp_base=q,
                                 offset=inp.offset + (j0 * h + f0) * n, y_size=c, x_size=w,
                                 y_stride=h, push_next=1))
            body = _rescale_insns(q, rows, c, w, zin, r_r if r is not None else None)
            body += ibert.i_gelu_insns(q, rows, tmp, o, unit)
            if s_gelu < 0:
                body.append(ibert.rows_insn(AluOp.MUL, o, rows, imm=-1))
            prog += _first_pops(body)
            prog += [isa.req(zp, dst_base=o, src_base=p_r, outer=c, inner=w, dst_so=w,
                             dst_si=1, src_so=0, src_si=2, push_next=1),
                     isa.store(Buffer.ACC8, slot=out.slot, sp_base=o,
                               offset=out.offset + (j0 * h + f0) * n, y_size=c, x_size=w,
                               y_stride=h, pop_prev=1)]
            pieces.append(Kernel(f"{name}[{f0}, {j0}]", prog, (), (), None))
    return Kernel(name, join(pieces, end=False), inputs=(_info("input", inp, tokens, h, zin),),
                  outputs=(_info("output", out, tokens, h, zp),), consts=blob,
                  tiling={"features_per_chunk": fc, "blocks_per_chunk": tb,
                          "chunks": len(pieces)})


# --- residual add -----------------------------------------------------------------------------

#: The per-row factors of `add` stay below 2**ADD_BITS (kernels.eltwise's bound).
ADD_BITS = 22


def add(tokens: int, h: int, a_q: ActQuant, b_q: ActQuant | None, out_q: ActQuant, *,
        a: Ref, b: Ref | None, out: Ref, consts: Ref, b_const: np.ndarray | None = None,
        cfg: AccelConfig = DEFAULT_CFG, name: str = "add") -> Kernel:
    """a + b of two (1, tokens, h) int8 tensors, each per tensor or per feature, into the
    output's parameters; ``b_const`` instead of ``b``: a float constant of shape (h,) or
    (tokens, h) (quantized here per feature, symmetric). Per row f: (a - za) A_f + (b - zb)
    B_f with A_f = s_a[f] / s_out[f] 2**S, B_f likewise (below 2**ADD_BITS), then REQ by 2**-S
    (+ the output's zero point); a constant that varies only along the features is a
    per-row term of the sum instead of an operand."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    for r_, what in ((a, "input a"), (out, "output")):
        _check_ref(r_, n, what)
    _check_ref(consts, n * n, "constant blob")
    s_out = feature_vector(out_q, h)
    za = _int8("zero point of a", a_q.zero_point)
    zp = _int8("output zero point", out_q.zero_point)
    fa = feature_vector(a_q, h) / s_out
    term = np.zeros(h)                                 # real / s_out, per feature row
    b_rows: bytes | None = None
    zb = 0
    if b_const is not None:
        c = np.asarray(b_const, np.float64)
        _need(bool(np.isfinite(c).all()), f"{name}: the constant is not finite")
        if c.size == h:
            term = c.reshape(h) / s_out
            fb = np.zeros(h)
        else:
            _need(c.size == tokens * h, f"{name}: a constant of {c.size} values for "
                  f"{tokens} x {h}")
            c = c.reshape(tokens, h)
            cq = feature_params(np.abs(c).max(axis=0))
            fb = feature_vector(cq, h) / s_out
            b_rows = layout.pack_act(cq.quantize(c).reshape(1, tokens, 1, h), n, 0)
    else:
        _need(b is not None and b_q is not None, f"{name}: the second operand is missing")
        assert b is not None and b_q is not None
        _check_ref(b, n, "input b")
        zb = _int8("zero point of b", b_q.zero_point)
        fb = feature_vector(b_q, h) / s_out
    top = max(float(np.max(fa)), float(np.max(fb)), 1e-30)
    sc = ADD_BITS - 1 - math.ceil(math.log2(top))
    _need(0 <= sc <= MAX_SHIFT, f"{name}: an input scale is 2**{ADD_BITS - 1} or more times "
          "the output's")
    ia = np.rint(fa * 2.0 ** sc).astype(np.int64)
    ib = np.rint(fb * 2.0 ** sc).astype(np.int64)
    ic = np.rint(term * 2.0 ** sc).astype(np.int64) - za * ia - zb * ib
    _need(bool(np.abs(ic).max(initial=0) < 2**30), f"{name}: the constant term overflows")
    one = 1
    parts = [("factors a", _rows(ia, n)), ("factors b", _rows(ib, n)), ("terms", _rows(ic, n)),
             ("requant", _rows([one, sc], n))]
    if b_rows is not None:
        parts.append(("constant operand", b_rows))
    blob, offs = _blob(consts, parts, n)
    ra, rb, rc, rp = 0, h, 2 * h, 3 * h
    x0 = 3 * h + 2
    # the second operand in memory: the input b, or the constant's rows in the blob
    b_src = b if b is not None else Ref(consts.slot, offs[4]) if b_rows is not None else None
    per = min((cfg.acc_depth - x0) // (2 * h), _LOOP // h, nb)
    _need(per >= 1, f"{name}: the accumulator is too small for one token block")
    pieces = []
    for j0 in range(0, nb, per):
        c_ = min(per, nb - j0)
        rows = c_ * h
        xa, xb = x0, x0 + rows
        prog: list[isa.Insn] = []
        if j0 == 0:
            prog += [isa.load(Buffer.ACC, slot=consts.slot, sp_base=base, offset=off, y_size=1,
                              x_size=cnt, y_stride=cnt)
                     for base, off, cnt in zip((ra, rb, rc, rp), offs, (h, h, h, 2),
                                               strict=False)]
        prog.append(isa.load(Buffer.ACC8, slot=a.slot, sp_base=xa,
                             offset=a.offset + j0 * h * n, y_size=1, x_size=rows,
                             y_stride=rows))
        if b_src is not None:
            prog.append(isa.load(Buffer.ACC8, slot=b_src.slot, sp_base=xb,
                                 offset=b_src.offset + j0 * h * n, y_size=1, x_size=rows,
                                 y_stride=rows))
        prog[-1] = isa.Insn(prog[-1].op, {**prog[-1].fields, "push_next": 1})
        per_row = {"outer": c_, "inner": h, "dst_so": h, "dst_si": 1, "src_so": 0,
                   "src_si": 1}
        body = [isa.alu(AluOp.MUL, dst_base=xa, src_base=ra, **per_row)]
        if b_src is not None:
            body += [isa.alu(AluOp.MUL, dst_base=xb, src_base=rb, **per_row),
                     ibert.rows_insn(AluOp.ADD, xa, rows, src=xb)]
        body.append(isa.alu(AluOp.ADD, dst_base=xa, src_base=rc, **per_row))
        prog += _first_pops(body)
        prog += [isa.req(zp, dst_base=xa, src_base=rp, outer=1, inner=rows, dst_si=1,
                         push_next=1),
                 isa.store(Buffer.ACC8, slot=out.slot, sp_base=xa,
                           offset=out.offset + j0 * h * n, y_size=1, x_size=rows,
                           y_stride=rows, pop_prev=1)]
        pieces.append(Kernel(f"{name}[{j0}]", prog, (), (), None))
    ins = [_info("a", a, tokens, h, za)]
    if b is not None:
        ins.append(_info("b", b, tokens, h, zb))
    return Kernel(name, join(pieces, end=False), inputs=tuple(ins),
                  outputs=(_info("output", out, tokens, h, zp),), consts=blob,
                  tiling={"blocks_per_chunk": per, "chunks": len(pieces), "shift": sc})


#: The largest mask multiplier: (value - zero point) x it stays within 31 bits with the scores.
MASK_CAP = 1 << 22


def mask_multiplier(mask_scale: float, score_scale: float, clamp_units: int) -> int:
    """Score units per step of the mask's int8 value: round(mask_scale / score_scale), or, when
    that exceeds `MASK_CAP`, the cap, provided one step at the cap already pushes a score below
    what exp resolves (``clamp_units``): masks of 0 and a large negative (-10000, the float's
    lowest) then mask exactly as they do in float (a zero probability)."""
    ratio = mask_scale / score_scale
    if ratio < MASK_CAP:
        return max(0, round(ratio))
    _need(MASK_CAP > 2 * clamp_units, "the mask cannot push scores out of exp's range")
    return MASK_CAP - 1


def attention(tokens: int, hidden: int, heads: int, score_scale: float, v_scale: float,
              out_q: ActQuant, *, q: Ref, k: Ref, v: Ref,
              out: Ref, scratch: Ref, consts: Ref, mask: Ref | None = None,
              mask_full: bool = False, mask_scale: float = 0.0, mask_zero_point: int = 0,
              cfg: AccelConfig = DEFAULT_CFG, name: str = "attention") -> Kernel:
    """Multi-head self-attention: softmax(Q_h K_h^T x score_scale + mask) V_h for each head h
    of ``hidden / heads`` features, merged into a (1, tokens, hidden) int8 tensor at the
    output's scale. Q, K, V are symmetric int8 (zero point 0); the mask, if any, is a (1, 1,
    1, tokens) key mask or (``mask_full``) a (1, 1, tokens, tokens) int8 tensor added to the
    scores (its value less its zero point times `mask_multiplier`). ``scratch``:
    `attention_scratch` bytes (the probabilities, then the mask in the scores' layout,
    written once by `attention.mask_rows` for every head). One `attention.attention_head`
    program per head and group of query blocks (`attention.query_groups`), joined."""
    n = cfg.n
    nb = _tokens_ok(tokens, n, name)
    _need(heads >= 1 and hidden % heads == 0, f"{name}: {hidden} features in {heads} heads")
    d = hidden // heads
    for r, what in ((q, "Q"), (k, "K"), (v, "V"), (out, "output"), (scratch, "scratch")):
        _check_ref(r, n, what)
    _check_ref(consts, n * n, "constant blob")
    zp = _int8("output zero point", out_q.zero_point)
    mult, shift = quantize_multipliers(2.0 ** -P_BITS * v_scale / feature_vector(out_q, hidden))
    raw = attention_consts(n, mult, shift)
    blob = ConstBlob(consts, raw, (("ones and identity tiles, requantization", 0, len(raw)),))
    pieces: list[Kernel] = []
    mask_t = None
    m_mult = 0
    try:
        if mask is not None:
            _check_ref(mask, n, "mask")
            mask_t = scratch + align_up(tokens * tokens, ALIGN)
            m_mult = mask_multiplier(mask_scale, score_scale,
                                     SCORE_CLAMP << score_shift(score_scale))
            for i, prog in enumerate(mask_rows(cfg, tokens, mask=mask, full=mask_full,
                                               out=mask_t, consts=consts)):
                pieces.append(Kernel(f"{name}.mask[{i}]", prog, (), (), None))
        group = query_groups(cfg, tokens, d)
        for h in range(heads):
            for i0 in range(0, nb, group):
                prog = attention_head(
                    cfg, tokens, d, score_scale, q=q + h * d * n, k=k + h * d * n,
                    v=v + h * d * n, p=scratch, out=out + h * d * n, width=hidden,
                    queries=(i0, min(nb, i0 + group)), mask_t=mask_t,
                    mask_zero_point=_int8("mask zero point", mask_zero_point),
                    mask_multiplier=m_mult, consts=consts, out_zero_point=zp,
                    out_width=hidden, feature0=h * d)
                pieces.append(Kernel(f"{name}[{h}, {i0}]", prog[:-1], (), (), None))
    except AttentionError as e:
        raise AccelKernelError(f"{name}: {e}") from None
    ins = [_info("q", q, tokens, hidden, 0), _info("k", k, tokens, hidden, 0),
           _info("v", v, tokens, hidden, 0)]
    if mask is not None:
        mshape = (1, 1, tokens, tokens) if mask_full else (1, 1, 1, tokens)
        ins.append(TensorInfo("mask", mask, mshape, "int8", tokens * n * (tokens if mask_full
                                                                         else 1),
                              mask_zero_point))
    return Kernel(name, join(pieces, end=False), inputs=tuple(ins),
                  outputs=(_info("output", out, tokens, hidden, zp),), consts=blob,
                  tiling={"heads": heads, "head_size": d, "query_blocks_per_pass": group,
                          "scratch_bytes": attention_scratch(tokens, mask is not None)})


def attention_scratch(tokens: int, masked: bool) -> int:
    """Scratch bytes of `attention`: the probabilities (tokens x tokens), and the mask in the
    scores' layout as many."""
    return align_up(tokens * tokens, ALIGN) * (2 if masked else 1)

"""Integer-only non-linearities for transformer inference, after I-BERT (Kim et al. 2021), as
sequences of the accelerator's ALU and XALU operations.

Every step below is one accelerator operation on int32 lanes, computed with the functional
model's definitions (`pyhost.accel.model.alu_op`, `xalu_div`, `xalu_sqrt`): a kernel that emits
the same sequence gets bit for bit these results on the card. The constants are computed in
float once per tensor (from the input scale, at compile time) and enter as immediates or
constant rows. The functions return the integer result and its scale (real value = integer x
scale); tests/pyhost/test_ibert.py measures each against its float function over the whole int8
input range, and docs/transformers.md gives the bounds.

- :func:`i_exp`: exp(x) for x <= 0: x = -z ln2 + p with z = round(-x / ln2) (a multiply and a
  rounding shift, no division), p in [-ln2/2, ln2/2] through a second-order polynomial
  a (p + b)^2 + c fitted there, then a right shift by z (the ALU's SHR takes a shift per lane).
- :func:`i_softmax`: max (MAX), x - max, i_exp, sum (ADD), one reciprocal 2^30 / sum per row
  (XALU DIV), and each probability as exp x reciprocal, shifted to `out_bits` fraction bits.
- :func:`i_gelu`: x/2 (1 + erf(x / sqrt 2)) with I-BERT's erf polynomial
  sgn(x) (a (min(|x|, -b) + b)^2 + 1), a = -0.2888, b = -1.769.
- :func:`i_layernorm`: the normalization (x - mean) / std along the last axis: the mean by a sum
  and one DIV by the length (rounded; its remainder corrects the sum of squares and, once per
  row, the result), the sum of squares, its square root (XALU SQRT of 16 x the sum: 4 sqrt(h
  var)), and one reciprocal per row that has sqrt(h) folded in; gamma and beta are a
  per-feature multiply and add after it.

`i_exp_insns`, `i_gelu_insns` and `i_layernorm_insns` emit the same sequences as instructions
(the last in the transposed layout of docs/transformers.md: features as rows, tokens as
lanes); tests/pyhost/test_ibert.py runs them on the functional model bit-exact with the
functions here.
"""

from __future__ import annotations

import math

import numpy as np

from pyhost.accel.model import alu_op, xalu_div, xalu_sqrt
from pyhost.spec import isa
from pyhost.spec.isa import AluOp, XAluOp

INT32_MAX = (1 << 31) - 1
#: The ALU's immediates are 24-bit signed.
IMM_MAX = (1 << 23) - 1


def _i(v) -> np.ndarray:
    return np.asarray(v, np.int64)


def add(a, b) -> np.ndarray:
    """ALU ADD (wraps at 32 bits)."""
    return _i(alu_op(AluOp.ADD, _i(a), _i(b), None, 0))


def mul(a, b) -> np.ndarray:
    """ALU MUL (the low 32 bits)."""
    return _i(alu_op(AluOp.MUL, _i(a), _i(b), None, 0))


def shr(a, s) -> np.ndarray:
    """ALU SHR: rounding arithmetic shift right by s (0..31, per lane)."""
    return _i(alu_op(AluOp.SHR, _i(a), _i(s), None, 0))


def vmax(a, b) -> np.ndarray:
    return _i(alu_op(AluOp.MAX, _i(a), _i(b), None, 0))


def vmin(a, b) -> np.ndarray:
    return _i(alu_op(AluOp.MIN, _i(a), _i(b), None, 0))


def div(a, b) -> np.ndarray:
    """XALU DIV: a / b truncated toward zero (b nonzero)."""
    b = np.broadcast_to(_i(b), np.broadcast_shapes(np.shape(a), np.shape(b)))
    if not b.all():
        raise ZeroDivisionError("XALU DIV by zero (DIV_ZERO on the card)")
    return _i(xalu_div(np.broadcast_to(_i(a), b.shape), b))


def sqrt(b) -> np.ndarray:
    """XALU SQRT: floor(sqrt(b)) (b >= 0)."""
    b = _i(b)
    if (b < 0).any():
        raise ValueError("XALU SQRT of a negative value (NEG_SQRT on the card)")
    return _i(xalu_sqrt(b))


def _imm(v: int, what: str) -> int:
    """A constant the kernel puts in an immediate (or, beyond 24 bits, a constant row)."""
    if not -INT32_MAX - 1 <= v <= INT32_MAX:
        raise ValueError(f"{what} = {v} does not fit int32")
    return int(v)


def _exp_poly() -> tuple[float, float, float]:
    """(a, b, c) of exp(p) ~ a (p + b)^2 + c, least squares on [-ln2/2, ln2/2]."""
    h = math.log(2) / 2
    p = np.linspace(-h, h, 4001)
    c2, c1, c0 = np.polyfit(p, np.exp(p), 2)
    b = c1 / (2 * c2)
    return float(c2), float(b), float(c0 - c2 * b * b)


EXP_A, EXP_B, EXP_C = _exp_poly()
#: I-BERT's erf polynomial on [0, -b]
ERF_A, ERF_B = -0.2888, -1.769


def i_exp(q: np.ndarray, scale: float) -> tuple[np.ndarray, float]:
    """exp(q * scale) for int32 q <= 0: (integer result, its scale). A scale coarser than
    ln 2 / 64 is refined first (q times an integer); q (refined) must stay above -2**15."""
    q = _i(q)
    if (q > 0).any():
        raise ValueError("i_exp takes q <= 0")
    # a coarse scale makes ln 2 in input units inexact: refine it (one MUL) to at least 64
    p = i_exp_params(scale)
    f = p["f"]
    if (q * f <= -(1 << 15)).any():
        raise ValueError(f"i_exp: q * {f} (the scale refined to ln 2 / 64) reaches -2**15")
    if f > 1:
        q = mul(q, f)
    q_ln2 = p["q_ln2"]                                     # ln 2 in input units, >= 64
    z = shr(mul(q, -p["m"]), p["k"])                       # round(-q / q_ln2): m / 2**k
    z = vmin(z, 31)                                        # SHR's largest shift
    r = add(q, mul(z, q_ln2))                              # p in about [-q_ln2/2, q_ln2/2]
    t = add(r, _imm(p["q_b"], "exp b"))
    r = add(mul(t, t), _imm(p["q_c"], "exp c"))            # a (p + b)^2 + c, scale a s^2
    return shr(r, z), p["scale_out"]


def loop_insn(op: AluOp | XAluOp, dst: int, outer: int = 1, inner: int = 1, *,
              src: int | None = None, imm: int | None = None, **f: int) -> isa.Insn:
    """An ALU (``op`` an AluOp) or XALU (an XAluOp) instruction over the loops ``outer`` x
    ``inner`` from row ``dst`` (and ``src``), with the strides in ``f``; B the immediate when
    ``imm`` is given."""
    fields = dict(dst_base=dst, outer=outer, inner=inner, **f)
    if src is not None:
        fields["src_base"] = src
    return (isa.xalu if isinstance(op, XAluOp) else isa.alu)(op, imm, **fields)


def rows_insn(op: AluOp | XAluOp, dst: int, rows: int, src: int | None = None,
              imm: int | None = None) -> isa.Insn:
    """`loop_insn` over ``rows`` consecutive rows from ``dst`` (and ``src``)."""
    return loop_insn(op, dst, inner=rows, dst_si=1, src=src, imm=imm,
                     **({"src_si": 1} if src is not None else {}))


def i_exp_params(scale: float) -> dict[str, int | float]:
    """The constants of :func:`i_exp` at input scale ``scale``: the refinement factor f, ln 2
    in refined input units, the multiplier and shift of round(-q / q_ln2), the polynomial's
    b and c, and the output scale."""
    f = max(1, math.ceil(64 * scale / math.log(2)))
    s = scale / f
    q_ln2 = round(math.log(2) / s)
    k = 15 + q_ln2.bit_length() - 1
    return {"f": f, "q_ln2": q_ln2, "k": k, "m": round((1 << k) / q_ln2),
            "q_b": round(EXP_B / s), "q_c": round(EXP_C / (EXP_A * s * s)),
            "scale_out": EXP_A * s * s}


def i_exp_insns(q_row: int, rows: int, tmp: int, out: int, scale: float) -> list:
    """:func:`i_exp` as ALU instructions over ``rows`` accumulator rows from ``q_row`` (each
    q <= 0, refined q above -2**15): rows tmp.. hold z, rows out.. get the result (scale
    ``i_exp_params(scale)["scale_out"]``); q's rows are refined in place when f > 1."""
    p = i_exp_params(scale)

    def alu(op: AluOp, dst: int, src: int | None = None, imm: int | None = None):
        return rows_insn(op, dst, rows, src, imm)

    prog = [alu(AluOp.MUL, q_row, imm=p["f"])] if p["f"] > 1 else []
    return prog + [
        alu(AluOp.MOV, tmp, src=q_row),                  # z = round(-q / q_ln2)
        alu(AluOp.MUL, tmp, imm=-p["m"]),
        alu(AluOp.SHR, tmp, imm=p["k"]),
        alu(AluOp.MIN, tmp, imm=31),
        alu(AluOp.MOV, out, src=tmp),                    # p = q + z q_ln2
        alu(AluOp.MUL, out, imm=p["q_ln2"]),
        alu(AluOp.ADD, out, src=q_row),
        alu(AluOp.ADD, out, imm=p["q_b"]),               # (p + b)^2 + c
        alu(AluOp.MUL, out, src=out),
        alu(AluOp.ADD, out, imm=p["q_c"]),
        alu(AluOp.SHR, out, src=tmp),                    # >> z, per lane
    ]


def i_softmax(q: np.ndarray, scale: float, out_bits: int = 8, axis: int = -1
              ) -> tuple[np.ndarray, float]:
    """softmax(q * scale) along ``axis``, as integers with ``out_bits`` fraction bits (scale
    2**-out_bits). q: int32 with the row's spread (max - min) below 2**15."""
    q = _i(q)
    m = np.max(q, axis=axis, keepdims=True)                # MAX over the row
    e, _ = i_exp(add(q, mul(m, -1)), scale)                # x - max <= 0
    total = np.sum(e, axis=axis, keepdims=True)            # ADD over the row
    if (total >= 1 << 30).any():
        raise ValueError("i_softmax: the row's sum of exponentials reaches 2**30")
    one = mul(np.full_like(total, 1 << 22), 1 << 8)        # 2**30 (immediates are 24 bits)
    recip = div(one, total)                                # one XALU DIV per row
    return shr(mul(e, recip), 30 - out_bits), 2.0 ** -out_bits


def i_gelu(q: np.ndarray, scale: float) -> tuple[np.ndarray, float]:
    """gelu(q * scale) = x/2 (1 + erf(x / sqrt 2)) for int32 q, |q| < 2**15."""
    q = _i(q)
    s_e = scale / math.sqrt(2)                             # erf's argument x / sqrt 2
    q_b = _imm(math.floor(ERF_B / s_e), "erf b")           # < 0
    q_c = _imm(math.floor(1 / (ERF_A * s_e * s_e)), "erf c")   # < 0
    s_erf = ERF_A * s_e * s_e
    sgn = vmin(vmax(q, -1), 1)
    t = add(vmin(mul(q, sgn), -q_b), q_b)                  # min(|x|, -b) + b
    erf = mul(sgn, add(mul(t, t), q_c))                    # erf, scale s_erf
    q_one = _imm(math.floor(1 / s_erf), "gelu one")
    return mul(q, add(erf, q_one)), scale * s_erf / 2


def i_layernorm(q: np.ndarray, scale: float, eps: float = 1e-12, out_bits: int = 10,
                axis: int = -1, var_shift: int = 0) -> tuple[np.ndarray, float]:
    """(x - mean(x)) / sqrt(var(x) + eps) along ``axis`` for int32 q whose rows span less
    than 2**(8 + var_shift) (int8 values: var_shift 0), as integers with ``out_bits`` fraction
    bits. With ``var_shift`` the squares are summed over the deviations shifted right by it
    (rounding), so that wider rows (per-feature activations brought to one fine scale) keep the
    sums in 31 bits. gamma and beta are not applied."""
    q = _i(q)
    if (np.ptp(q, axis=axis) >= 1 << (8 + var_shift)).any():
        raise ValueError(f"i_layernorm: a row spans 2**{8 + var_shift} or more")
    h = q.shape[axis]
    if h > 512:
        raise ValueError("i_layernorm: rows of at most 512 (the sums below stay in 31 bits)")
    vs = var_shift
    if not 0 <= vs <= 7:
        raise ValueError("i_layernorm: var_shift 0 .. 7 (the squares stay below 2**30)")
    m, w = _ln_var_scaling(vs)
    total = np.sum(q, axis=axis, keepdims=True)            # ADD over the row
    mean = div(add(total, h // 2 * np.sign(total)), h)     # rounded: (sum +- h/2) / h
    rem = add(total, mul(mean, -h))                        # h (exact mean - mean), |rem| <= h/2
    c = add(q, mul(mean, -1))                              # |c| < 2**(8 + vs)
    sq = mul(c, c)                                         # < 2**30 for vs <= 7
    if w:
        sq = shr(sq, 2 * w)
    # m h var / 4**w: the sum of squares about the rounded mean less rem^2 / h
    ss = add(mul(np.sum(sq, axis=axis, keepdims=True), m),
             mul(div(mul(mul(rem, rem), m), h << (2 * w)), -1))
    eps_q = round(eps / (scale * scale) * h * m / (1 << (2 * w)))
    root = sqrt(add(ss, max(eps_q, 1)))                  # sqrt(m h (var + eps)) / 2**w, >= 1
    # 1 / std = sqrt(h) / sqrt(h var): sqrt(h m) 2**(22 - w) / root = 2**22 / std, per row
    recip = div(_imm(_ln_numerator(h, m, w), "sqrt(h) 2**24"), root)
    # (c - rem / h) / std * 2**22: c * recip (|c| / std <= sqrt(h) < 2**4.5) less the
    # rounded mean's error, rem * recip / h, one per row
    corr = div(mul(rem, recip), h)
    return shr(add(mul(c, recip), mul(corr, -1)), 22 - out_bits), 2.0 ** -out_bits


def _ln_var_scaling(var_shift: int) -> tuple[int, int]:
    """(m, w) of i_layernorm's sum of squares: sum((c * c) >> 2w) * m stays in 31 bits. int8
    rows (var_shift 0): m = 16 (two more bits for the square root), w = 0; wider rows: m = 1
    and the squares shifted by w = var_shift - 3 (rows of 512: 2**(16 + 2 * 3) x 2**9)."""
    return (16, 0) if var_shift == 0 else (1, max(0, var_shift - 3))


def _ln_numerator(h: int, m: int, w: int) -> int:
    """sqrt(h m) 2**(22 - w): the reciprocal's numerator (2**22 / std)."""
    return round(math.sqrt(h * m) * (1 << 22) / (1 << w))


def i_gelu_insns(q_row: int, rows: int, tmp: int, out: int, scale: float) -> list:
    """:func:`i_gelu` as ALU instructions over ``rows`` accumulator rows from ``q_row``: rows
    tmp.. hold sgn(q), rows out.. get the result (scale as i_gelu's)."""
    s_e = scale / math.sqrt(2)
    q_b = _imm(math.floor(ERF_B / s_e), "erf b")
    q_c = _imm(math.floor(1 / (ERF_A * s_e * s_e)), "erf c")     # also i_gelu's q_one

    def alu(op: AluOp, dst: int, src: int | None = None, imm: int | None = None):
        return rows_insn(op, dst, rows, src, imm)

    return [
        alu(AluOp.MOV, tmp, src=q_row),                  # sgn(q)
        alu(AluOp.MAX, tmp, imm=-1),
        alu(AluOp.MIN, tmp, imm=1),
        alu(AluOp.MOV, out, src=q_row),                  # min(|q|, -b) + b
        alu(AluOp.MUL, out, src=tmp),
        alu(AluOp.MIN, out, imm=-q_b),
        alu(AluOp.ADD, out, imm=q_b),
        alu(AluOp.MUL, out, src=out),                    # sgn (t^2 + c)
        alu(AluOp.ADD, out, imm=q_c),
        alu(AluOp.MUL, out, src=tmp),
        alu(AluOp.ADD, out, imm=q_c),                    # q (erf + 1/s_erf)
        alu(AluOp.MUL, out, src=q_row),
    ]


def i_layernorm_insns(x: int, h: int, blocks: int, tmp: int, scale: float, eps: float = 1e-12,
                      out_bits: int = 10, var_shift: int = 0) -> list:
    """:func:`i_layernorm` as ALU/XALU instructions in the transposed layout: ``blocks`` blocks
    of ``h`` accumulator rows from ``x`` (block J's row e = feature e of N tokens, one per
    lane), normalized in place over the features of each token. Rows tmp .. tmp + h * blocks
    + 9 * blocks - 1 are scratch."""
    if h > 512:
        raise ValueError("i_layernorm_insns: rows of at most 512")
    nb = blocks
    sq = tmp                                           # h * nb rows: c^2
    total, sgn, mean, rem, rem2, ss, root, recip, corr = (tmp + h * nb + k * nb
                                                           for k in range(9))

    alu = loop_insn

    def per_block(op: AluOp | XAluOp, dst: int, src: int | None = None,
                  imm: int | None = None) -> isa.Insn:
        return rows_insn(op, dst, nb, src, imm)

    def reduce_into(dst: int, src: int) -> list:      # dst[J] = sum over the block's rows
        return [per_block(AluOp.MOV, dst, imm=0),
                alu(AluOp.ADD, dst, nb, h, src=src, dst_so=1, src_so=h, src_si=1)]

    def each_row(op: AluOp, dst: int, src: int):      # rows of block J op= the block's src row
        return alu(op, dst, nb, h, src=src, dst_so=h, dst_si=1, src_so=1)

    m, w = _ln_var_scaling(var_shift)
    eps_q = max(round(eps / (scale * scale) * h * m / (1 << (2 * w))), 1)
    c_num = _imm(_ln_numerator(h, m, w), "sqrt(h) 2**24")
    prog = reduce_into(total, x)
    prog += [                                          # mean = (total +- h/2) / h
        per_block(AluOp.MOV, sgn, src=total),
        per_block(AluOp.MAX, sgn, imm=-1),
        per_block(AluOp.MIN, sgn, imm=1),
        per_block(AluOp.MUL, sgn, imm=h // 2),
        per_block(AluOp.ADD, sgn, src=total),
        per_block(AluOp.MOV, mean, src=sgn),
        per_block(XAluOp.DIV, mean, imm=h),
        per_block(AluOp.MOV, rem, src=mean),           # rem = total - mean h
        per_block(AluOp.MUL, rem, imm=-h),
        per_block(AluOp.ADD, rem, src=total),
        per_block(AluOp.MUL, mean, imm=-1),            # c = q - mean, in place
        each_row(AluOp.ADD, x, mean),
        alu(AluOp.MOV, sq, inner=h * nb, src=x, dst_si=1, src_si=1),
        alu(AluOp.MUL, sq, inner=h * nb, src=x, dst_si=1, src_si=1),
    ]
    if w:
        prog.append(alu(AluOp.SHR, sq, inner=h * nb, dst_si=1, imm=2 * w))
    prog += reduce_into(ss, sq)
    prog += [                                          # m ss - m rem^2 / h
        per_block(AluOp.MUL, ss, imm=m),
        per_block(AluOp.MOV, rem2, src=rem),
        per_block(AluOp.MUL, rem2, src=rem),
        per_block(AluOp.MUL, rem2, imm=m),
        per_block(XAluOp.DIV, rem2, imm=h << (2 * w)),
        per_block(AluOp.MUL, rem2, imm=-1),
        per_block(AluOp.ADD, ss, src=rem2),
        per_block(AluOp.ADD, ss, imm=eps_q),           # root = sqrt(16 h (var + eps))
        per_block(XAluOp.SQRT, root, src=ss),
        per_block(AluOp.MOV, recip, imm=c_num >> 12),  # sqrt(h) 2**24 / root
        per_block(AluOp.MUL, recip, imm=1 << 12),
        per_block(AluOp.ADD, recip, imm=c_num & 0xFFF),
        per_block(XAluOp.DIV, recip, src=root),
        per_block(AluOp.MOV, corr, src=rem),           # corr = rem recip / h
        per_block(AluOp.MUL, corr, src=recip),
        per_block(XAluOp.DIV, corr, imm=h),
        per_block(AluOp.MUL, corr, imm=-1),
        each_row(AluOp.MUL, x, recip),                 # (c recip - corr) >> (22 - out_bits)
        each_row(AluOp.ADD, x, corr),
        alu(AluOp.SHR, x, inner=h * nb, dst_si=1, imm=22 - out_bits),
    ]
    return prog


def gelu(x: np.ndarray) -> np.ndarray:
    """The float GELU the integer one approximates (erf form)."""
    from math import erf
    v = np.vectorize(erf)
    return 0.5 * x * (1 + v(np.asarray(x, np.float64) / math.sqrt(2)))

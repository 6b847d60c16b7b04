"""Elementwise kernels: the residual Add (two requantized inputs summed in ACC) and a standalone
requantization (ReLU, Clip, rescale)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.plugins.accel.kernels import words as W
from compiler.plugins.accel.kernels.base import (
    _LOOP,
    _XY,
    DEFAULT_CFG,
    Kernel,
    Quant,
    Ref,
    TensorInfo,
    _Blob,
    _bounds,
    _check_ref,
    _int8,
    _need,
    _requant_rows,
)
from compiler.plugins.accel.kernels.pipeline import ACC_REGIONS, _base, _pipeline, _region, _Step
from pyhost.accel import layout
from pyhost.fixedpoint import MAX_SHIFT
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer

#: Residual add: the per-input multipliers are scaled so that the larger is below 2**ADD_BITS;
#: then (x - zp) * m summed over two inputs stays below 2**31 (see `add`).
ADD_BITS = 22


# --- residual Add -------------------------------------------------------------------------------

def add_multipliers(mults: Sequence[int], shifts: Sequence[int]) -> tuple[list[int], int]:
    """The quantizer's per-input (multiplier, shift) pairs M_i = m_i * 2**-s_i as multipliers
    m'_i with one common shift S, M_i ~= m'_i * 2**-S, the largest m'_i below 2**ADD_BITS.

    With |x - zp| <= 255 and m'_a + m'_b <= 2**(ADD_BITS + 1) the int32 sum
    (a - za) * m'_a + (b - zb) * m'_b cannot overflow (255 * 2**23 < 2**31).
    """
    ms = [int(m) for m in mults]
    ss = [int(s) for s in shifts]
    _need(len(ms) == len(ss) >= 1, "one multiplier and shift per input")
    _need(all(0 <= m < 2**31 for m in ms) and all(0 <= s <= MAX_SHIFT for s in ss),
          "add multipliers must be in [0, 2**31) and shifts in [0, 62]")
    live = [(m, s) for m, s in zip(ms, ss, strict=True) if m]
    if not live:
        return [0] * len(ms), 0
    # M_i < 2**e_i; scale so that the largest M_i * 2**S is below 2**ADD_BITS
    e = max(m.bit_length() - s for m, s in live)
    big = ADD_BITS - e
    _need(big >= 1, f"add: an input scale is {2 ** (e - 1)} or more times the output scale; "
          "the 32-bit datapath cannot represent it")
    sc = min(big, MAX_SHIFT)
    out = []
    for m, s in zip(ms, ss, strict=True):
        d = s - sc
        out.append(m << -d if d <= 0 else (m + (1 << (d - 1))) >> d)
    return out, sc


def add(in_shape: Sequence[int], q: Quant, *, a: Ref, b: Ref, out: Ref, consts: Ref,
        act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
        name: str = "add") -> Kernel:
    """Residual add of two int8 tensors of the same shape with their own scales and zero points
    into the output's (the quantizer's Add dict: `input_multipliers`, `input_shifts`,
    `input_zero_points`, `output_zero_point`), with an optional fused ReLU/Clip (`act`).

    Per tile of rows, in 32-bit lanes: LOAD.ACC8 both inputs; MUL a by m'_a, MUL b by m'_b,
    ADD, ADD the constant row -(za*m'_a + zb*m'_b), REQ with multiplier 1 and shift S (rounding
    half up, + zero point, clamp). The multipliers come from `add_multipliers`: ~22-bit instead
    of compiler.quantize.reference.qadd's 31-bit, so the result can differ from qadd by 1 LSB
    where the exact value is within about 2**-13 of a rounding tie (docs/accel-kernels.md).
    """
    n = cfg.n
    _need(len(in_shape) == 4, f"add input shape must be NCHW, got {tuple(in_shape)}")
    bsz, c, h, w = (int(v) for v in in_shape)
    zps = [int(z) for z in q["input_zero_points"]]
    _need(len(zps) == 2, f"add takes two inputs, got {len(zps)} zero points")
    za, zb = (_int8("input zero point", z) for z in zps)
    zout = _int8("output zero point", q["output_zero_point"])
    lo, hi = _bounds(act)
    (ma, mb), sc = add_multipliers(q["input_multipliers"], q["input_shifts"])
    for ref, what in ((a, "input a"), (b, "input b"), (out, "output")):
        _check_ref(ref, n, what)
    const = -(za * ma + zb * mb)
    assert abs(const) < 2**31 and ma < 2**23 and mb < 2**23
    blob = _Blob(consts, n)
    prm = np.array([[1] * n, [sc] * n, [const] * n], np.int32)
    prm_off = blob.add("params", layout.acc_rows_bytes(prm))
    params = 3
    total = bsz * layout.blocks(c, n) * h * w
    _need(total >= 1, "empty add")
    full = cfg.acc_depth - params
    if 2 * total <= full and total <= min(_XY, _LOOP):
        rows = total                                  # one step: the whole accumulator
    else:
        rows = min(full // ACC_REGIONS // 2, _XY, _LOOP)
    _need(rows >= 1, "add: the accumulator is too small for one row of each input")
    chunks = [(r0, min(rows, total - r0)) for r0 in range(0, total, rows)]
    cap = _region(full, len(chunks), ACC_REGIONS)
    steps = []
    for t, (r0, rr) in enumerate(chunks):
        base = params + _base(t, len(chunks), ACC_REGIONS, cap)
        ab, bb = base, base + rows
        loads = []
        if t == 0:
            loads.append(W.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                y_size=1, x_size=params, y_stride=params))
        loads += [W.load(Buffer.ACC8, slot=a.slot, sp_base=ab, offset=a.offset + r0 * n,
                         y_size=1, x_size=rr, y_stride=rr),
                  W.load(Buffer.ACC8, slot=b.slot, sp_base=bb, offset=b.offset + r0 * n,
                         y_size=1, x_size=rr, y_stride=rr)]
        lp = {"outer": 1, "inner": rr, "dst_si": 1}
        compute = [
            W.alu(AluOp.MUL, imm=ma, dst_base=ab, **lp),
            W.alu(AluOp.MUL, imm=mb, dst_base=bb, **lp),
            W.alu(AluOp.ADD, dst_base=ab, src_base=bb, src_si=1, **lp),
            W.alu(AluOp.ADD, dst_base=ab, src_base=2, **lp),
            W.req(zout, lo, hi, dst_base=ab, src_base=0, **lp),
        ]
        store = W.store(Buffer.ACC8, slot=out.slot, sp_base=ab, offset=out.offset + r0 * n,
                        y_size=1, x_size=rr, y_stride=rr)
        steps.append(_Step(loads, compute, [store], True))
    shape = (bsz, c, h, w)
    nb = layout.act_bytes(c, h, w, n, bsz)
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)),
        inputs=(TensorInfo("a", a, shape, "int8", nb, za), TensorInfo("b", b, shape, "int8", nb,
                                                                        zb)),
        outputs=(TensorInfo("output", out, shape, "int8", nb, min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"rows": rows, "steps": len(steps), "multipliers": (ma, mb), "shift": sc})


# --- standalone requantization (ReLU, Clip, rescale) ---------------------------------------------

def requant_act(in_shape: Sequence[int], *, multiplier: int, shift: int,
                input_zero_point: int, output_zero_point: int, inp: Ref, out: Ref,
                consts: Ref, act: tuple[int, int] | None = None,
                cfg: AccelConfig = DEFAULT_CFG, name: str = "requant_act") -> Kernel:
    """An int8 tensor requantized to another scale and zero point, clamped to `act`: a
    standalone ReLU (`relu_bounds(zp_out)`) or Clip, or a plain rescale (`act` None). With
    (multiplier, shift) = quantize_multiplier(s_in / s_out):

        y = clamp(((x - zp_in) * multiplier + 2**(shift-1)) >> shift + zp_out, lo, hi)

    exactly (`requantize(x - zp_in, multiplier, shift, zp_out)` clamped to `act`), i.e. the
    float value clip(round(s_in * (x - zp_in) / s_out) + zp_out, lo, hi) within 1 LSB (only
    at rounding ties). It is the residual add's datapath with a single input, except that one
    input needs no common shift: REQ takes the quantizer's 31-bit multiplier itself (its
    product is exact), so per tile of flat rows: LOAD.ACC8, ADD the immediate -zp_in (left
    out when zp_in is 0), REQ, STORE.ACC8; padding channels (zp_in) become zp_out, clamped.
    """
    n = cfg.n
    _need(len(in_shape) == 4, f"requant_act input shape must be NCHW, got {tuple(in_shape)}")
    bsz, c, h, w = (int(v) for v in in_shape)
    zin = _int8("input zero point", input_zero_point)
    zout = _int8("output zero point", output_zero_point)
    lo, hi = _bounds(act)
    for ref, what in ((inp, "input"), (out, "output")):
        _check_ref(ref, n, what)
    blob = _Blob(consts, n)
    prm_off = blob.add("requant", layout.acc_rows_bytes(
        _requant_rows([multiplier] * n, [shift] * n, 1, n)))
    params = 2
    total = bsz * layout.blocks(c, n) * h * w
    _need(total >= 1, "empty requant_act")
    full = cfg.acc_depth - params
    if total <= full and total <= min(_XY, _LOOP):
        rows = total                                  # one step: the whole accumulator
    else:
        rows = min(full // ACC_REGIONS, _XY, _LOOP)
    _need(rows >= 1, "requant_act: the accumulator has no room for a row")
    chunks = [(r0, min(rows, total - r0)) for r0 in range(0, total, rows)]
    cap = _region(full, len(chunks), ACC_REGIONS)
    steps = []
    for t, (r0, rr) in enumerate(chunks):
        base = params + _base(t, len(chunks), ACC_REGIONS, cap)
        loads = []
        if t == 0:
            loads.append(W.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                y_size=1, x_size=params, y_stride=params))
        loads.append(W.load(Buffer.ACC8, slot=inp.slot, sp_base=base,
                            offset=inp.offset + r0 * n, y_size=1, x_size=rr, y_stride=rr))
        lp = {"outer": 1, "inner": rr, "dst_si": 1}
        compute = [W.alu(AluOp.ADD, imm=-zin, dst_base=base, **lp)] if zin else []
        compute.append(W.req(zout, lo, hi, dst_base=base, src_base=0, **lp))
        store = W.store(Buffer.ACC8, slot=out.slot, sp_base=base, offset=out.offset + r0 * n,
                        y_size=1, x_size=rr, y_stride=rr)
        steps.append(_Step(loads, compute, [store], True))
    shape = (bsz, c, h, w)
    nb = layout.act_bytes(c, h, w, n, bsz)
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, shape, "int8", nb, zin),),
        outputs=(TensorInfo("output", out, shape, "int8", nb, min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"rows": rows, "steps": len(steps)})

"""Elementwise Add, Sub, Mul, Max and Min of two int8 tensors with numpy broadcasting (either
operand may be a constant placed in the kernel's blob): the operands' rows in the accumulator,
combined by ALU passes whose strides do the broadcast along images and pixels, and a GEMM with
a 0/1 tile that copies lane 0 to every lane where an operand broadcasts along channels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels.base import (
    _IMM_MAX,
    _IMM_MIN,
    _LOOP,
    _SI,
    _SO,
    _XY,
    DEFAULT_CFG,
    Kernel,
    Ref,
    TensorInfo,
    _Blob,
    _bounds,
    _check_ref,
    _int8,
    _need,
    _requant_rows,
)
from compiler.plugins.accel.kernels.eltwise import add_multipliers
from compiler.plugins.accel.kernels.pipeline import (
    ACC_REGIONS,
    _base,
    _load_contig,
    _pipeline,
    _region,
    _Step,
)
from compiler.plugins.accel.kernels.pool import quantize_multiplier
from pyhost.accel import layout
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Insn

OPS = ("add", "sub", "mul", "max", "min")


@dataclass(frozen=True)
class Operand:
    """An int8 input: its NCHW view (dimensions of 1 broadcast against the output), its
    quantization, and where it is: a Ref, or `data` (a constant, int8 NCHW) that the kernel
    puts in its own blob."""

    shape: tuple[int, int, int, int]
    scale: float
    zero_point: int
    ref: Ref | None = None
    data: np.ndarray | None = None


def _broadcast(op: Operand, out: tuple[int, int, int, int], what: str) -> tuple[bool, bool, bool]:
    """(has images, has channels, has pixels): False where the operand broadcasts."""
    b, c, h, w = op.shape
    ob, oc, oh, ow = out
    _need(b in (1, ob) and c in (1, oc) and (h, w) in ((1, 1), (oh, ow)),
          f"{what} {op.shape} does not broadcast to {out} along whole images, channels or "
          "planes (numpy broadcasting of H or W alone is not supported)")
    return b == ob, c == oc, (h, w) == (oh, ow)


def binary_params(op: str, scale_a: float, scale_b: float, output_scale: float
                  ) -> dict[str, object]:
    """The fixed-point parameters of `binary` (the input of
    `compiler.quantize.reference.qbinary`): add / sub: the signed per-operand ``multipliers``
    (the subtrahend's negated) with one common ``shift`` (`eltwise.add_multipliers`); mul: one
    ``multiplier`` and ``shift`` for s_a * s_b / s_y; max / min: per-operand ``multipliers``
    and ``shifts`` for s_i / s_y."""
    _need(op in OPS, f"binary op {op!r} is not one of {OPS}")
    if op == "mul":
        m, s = quantize_multiplier(scale_a * scale_b / output_scale)
        return {"op": op, "multiplier": m, "shift": s}
    pairs = [quantize_multiplier(sc / output_scale) for sc in (scale_a, scale_b)]
    if op in ("max", "min"):
        return {"op": op, "multipliers": [p[0] for p in pairs], "shifts": [p[1] for p in pairs]}
    (ma, mb), sc = add_multipliers([p[0] for p in pairs], [p[1] for p in pairs])
    return {"op": op, "multipliers": [ma, -mb if op == "sub" else mb], "shift": sc}


def binary(op: str, out_shape: Sequence[int], a: Operand, b: Operand, *, out: Ref,
           consts: Ref, output_scale: float, output_zero_point: int,
           act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
           name: str = "binary") -> Kernel:
    """y = a + b, a - b, a * b, max(a, b) or min(a, b), requantized to (output_scale,
    output_zero_point) and clamped to `act`, with a and b broadcast to `out_shape` (NCHW view).
    Per tile of one image's rows:

    - add / sub: the residual add's datapath (`eltwise.add`): MUL each operand by its ~22-bit
      multiplier (negated for the subtrahend), combine, add -(za*m_a +- zb*m_b), REQ by the
      common shift: y = clamp(((a-za)*m_a +- (b-zb)*m_b + 2**(S-1)) >> S + zp, lo, hi);
    - mul: ADD -za and -zb, multiply, REQ with (m, s) = quantize_multiplier(s_a*s_b/s_y):
      y = clamp(requantize((a-za)*(b-zb), m, s, zp), lo, hi), exactly;
    - max / min: each operand requantized to the output (ADD -z, REQ with its own
      quantize_multiplier(s_i/s_y), clamped), then MAX / MIN: max(clamp(requantize(a-za, m_a,
      s_a, zp)), clamp(requantize(b-zb, ...))), exactly (requantization is monotone).

    Operands are loaded compactly (one row per distinct broadcast row) and combined by ALU
    passes whose source strides are 0 along the broadcast dimensions; an operand with one
    channel against many is first spread over the lanes by a GEMM (lane 0 to every real lane,
    lane 1, its zero point, to the padding lanes). Padding channels of the output hold the
    output zero point (clamped), as every kernel's do."""
    n = cfg.n
    _need(op in OPS, f"binary op {op!r} is not one of {OPS}")
    _need(len(out_shape) == 4, f"binary output shape must be NCHW, got {tuple(out_shape)}")
    ob, oc, oh, ow = (int(v) for v in out_shape)
    zout = _int8("output zero point", output_zero_point)
    lo, hi = _bounds(act)
    _check_ref(out, n, "output")
    nbo = layout.blocks(oc, n)
    hw = oh * ow
    ops = [a, b]
    flags = [_broadcast(x, (ob, oc, oh, ow), w) for x, w in zip(ops, ("a", "b"), strict=True)]
    zs = [_int8(f"{w} zero point", x.zero_point) for x, w in zip(ops, "ab", strict=True)]
    blob = _Blob(consts, n)
    refs: list[Ref] = []
    for i, x in enumerate(ops):
        if x.data is not None:
            d = np.asarray(x.data).astype(np.int8).reshape(x.shape)
            off = blob.add(f"operand{i}", layout.pack_act(d, n, zs[i]))
            refs.append(Ref(consts.slot, off))
        else:
            assert x.ref is not None
            _check_ref(x.ref, n, f"operand {'ab'[i]}")
            refs.append(x.ref)
    # parameters: per op, the rows REQ and the constant-row ADD read
    q = binary_params(op, a.scale, b.scale, output_scale)
    mults = (0, 0)
    const = 0
    if op == "mul":
        prm = _requant_rows([q["multiplier"]] * n, [q["shift"]] * n, 1, n)
    elif op in ("max", "min"):
        prm = np.concatenate([_requant_rows([m] * n, [s] * n, 1, n)
                              for m, s in zip(q["multipliers"], q["shifts"], strict=True)])
    else:
        mults = tuple(q["multipliers"])
        const = -(zs[0] * mults[0] + zs[1] * mults[1])
        assert abs(const) < 2**31
        prm = np.array([[1] * n, [q["shift"]] * n, [const] * n], np.int64)
    params = prm.shape[0]
    prm_off = blob.add("params", layout.acc_rows_bytes(prm))
    # lane expansion tiles: lane 0 to the real lanes of a full / the last block, lane 1 (the
    # operand's padding, its zero point) to the padding lanes
    lane = [not f[1] and oc > 1 for f in flags]
    tiles_off = None
    if any(lane):
        t_full = np.zeros((n, n), np.int8)
        t_full[0, :] = 1
        t_last = np.zeros((n, n), np.int8)
        real = oc - (nbo - 1) * n
        t_last[0, :real] = 1
        t_last[1, real:] = 1
        tiles_off = blob.add("lanes", t_full.tobytes() + t_last.tobytes())
    for x, f, w in zip(ops, flags, "ab", strict=True):
        if not f[1] and oc > 1:
            _need(x.shape[1] == 1, f"operand {w} has {x.shape[1]} channels, the output {oc}")
    # tiles: (image, first block, blocks, first pixel, pixels); output and operand rows in ACC
    full = cfg.acc_depth - params
    cap_rows = min(_region(full, 3, ACC_REGIONS) // 3, _XY, _LOOP)
    _need(cap_rows >= 1, "binary: the accumulator is too small")
    tiles = []
    for img in range(ob):
        if hw <= cap_rows:
            per = max(1, min(nbo, cap_rows // hw))
            tiles += [(img, b0, min(per, nbo - b0), 0, hw) for b0 in range(0, nbo, per)]
        else:
            tiles += [(img, blk, 1, p0, min(cap_rows, hw - p0)) for blk in range(nbo)
                      for p0 in range(0, hw, cap_rows)]
    cap = _region(full, len(tiles), ACC_REGIONS)
    slot_rows = cap // 3
    _need(not any(lane) or max(tl[4] for tl in tiles) <= cfg.inp_depth // 4,
          "binary: the input scratchpad is too small for the lane spreading")
    steps = []
    for t, (img, b0, nb, p0, pp) in enumerate(tiles):
        base = params + _base(t, len(tiles), ACC_REGIONS, cap)
        o_base, opnd_base = base, [base + slot_rows, base + 2 * slot_rows]
        loads: list[Insn] = []
        compute: list[Insn] = []
        if t == 0:
            loads.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                  y_size=1, x_size=params, y_stride=params))
            if tiles_off is not None:
                loads += _load_contig(Buffer.WGT, 0, consts.slot, tiles_off, 2, n * n)
        strides = []
        for i, (x, (hi_img, hi_ch, hi_px)) in enumerate(zip(ops, flags, strict=True)):
            xb = layout.blocks(x.shape[1], n)
            xhw = x.shape[2] * x.shape[3]
            rows_px = pp if hi_px else 1
            blks = range(b0, b0 + nb) if hi_ch else range(0, 1)
            ximg = img if hi_img else 0
            for j, blk in enumerate(blks):
                off = refs[i].offset + ((ximg * xb + blk) * xhw + (p0 if hi_px else 0)) * n
                dst = opnd_base[i] + j * rows_px
                if lane[i]:
                    # INP (the upper half for operand b), then the lane-spreading GEMM
                    ibase = (cfg.inp_depth // 2) * i + _base(t, len(tiles), 2,
                                                             cfg.inp_depth // 4)
                    loads += _load_contig(Buffer.INP, ibase + j * rows_px, refs[i].slot, off,
                                          rows_px, n)
                else:
                    loads += _load_contig(Buffer.ACC8, dst, refs[i].slot, off, rows_px, n)
            if lane[i]:
                ibase = (cfg.inp_depth // 2) * i + _base(t, len(tiles), 2, cfg.inp_depth // 4)
                # one copy per output block of the tile (the last block has its own tile)
                for j in range(nb):
                    last = b0 + j == nbo - 1
                    compute.append(isa.gemm(reset=1, acc_base=opnd_base[i] + j * rows_px,
                                            inp_base=ibase, wgt_base=1 if last else 0,
                                            outer=1, inner=rows_px, acc_si=1, inp_si=1))
                strides.append((rows_px, 1 if hi_px else 0))
            else:
                strides.append((rows_px if hi_ch else 0, 1 if hi_px else 0))
        xrows = [(nb if (flags[i][1] or lane[i]) else 1) * (pp if flags[i][2] else 1)
                 for i in range(2)]
        if op in ("mul", "max", "min"):
            for i in range(2):
                if zs[i]:
                    compute.append(isa.alu(AluOp.ADD, imm=-zs[i], dst_base=opnd_base[i],
                                           outer=1, inner=xrows[i], dst_si=1))
                if op != "mul":
                    compute.append(isa.req(zout, lo, hi, dst_base=opnd_base[i], src_base=2 * i,
                                           outer=1, inner=xrows[i], dst_si=1))
        else:
            for i in range(2):
                _need(_IMM_MIN <= mults[i] <= _IMM_MAX, "add multiplier exceeds the immediate")
                compute.append(isa.alu(AluOp.MUL, imm=mults[i], dst_base=opnd_base[i],
                                       outer=1, inner=xrows[i], dst_si=1))
        (a_so, a_si), (b_so, b_si) = strides
        _need(max(a_so, b_so) <= _SO and max(a_si, b_si) <= _SI, "binary strides exceed fields")
        lp = {"outer": nb, "inner": pp, "dst_so": pp, "dst_si": 1}
        compute.append(isa.alu(AluOp.MOV, dst_base=o_base, src_base=opnd_base[0], src_so=a_so,
                               src_si=a_si, **lp))
        combine = {"mul": AluOp.MUL, "max": AluOp.MAX, "min": AluOp.MIN}.get(op, AluOp.ADD)
        compute.append(isa.alu(combine, dst_base=o_base, src_base=opnd_base[1], src_so=b_so,
                               src_si=b_si, **lp))
        flat = {"outer": 1, "inner": nb * pp, "dst_si": 1}
        if op in ("max", "min"):
            pass                                  # both operands are requantized already
        elif op == "mul":
            compute.append(isa.req(zout, lo, hi, dst_base=o_base, src_base=0, **flat))
        else:
            compute.append(isa.alu(AluOp.ADD, dst_base=o_base, src_base=2, **flat))
            compute.append(isa.req(zout, lo, hi, dst_base=o_base, src_base=0, **flat))
        stores = []
        for j in range(nb):
            stores.append(isa.store(Buffer.ACC8, slot=out.slot, sp_base=o_base + j * pp,
                                    offset=out.offset + ((img * nbo + b0 + j) * hw + p0) * n,
                                    y_size=1, x_size=pp, y_stride=pp))
        steps.append(_Step(loads, compute, stores, True))
    shape = (ob, oc, oh, ow)
    ins = tuple(TensorInfo("ab"[i], refs[i], x.shape, "int8",
                           layout.act_bytes(x.shape[1], x.shape[2], x.shape[3], n, x.shape[0]),
                           zs[i]) for i, x in enumerate(ops) if x.data is None)
    return Kernel(
        name, tuple(_pipeline(steps)), inputs=ins,
        outputs=(TensorInfo("output", out, shape, "int8", layout.act_bytes(oc, oh, ow, n, ob),
                            min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"steps": len(steps), "op": op, "broadcast": "".join(
            "".join("-" if not f else "x" for f in fl) for fl in flags)})

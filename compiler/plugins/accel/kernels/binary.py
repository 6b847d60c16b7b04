"""Elementwise Add, Sub, Mul, Max and Min of two int8 tensors with numpy broadcasting along any
of N, C, H and W (either operand may be a constant placed in the kernel's blob): the operands'
rows in the accumulator, combined by ALU passes whose strides do the broadcast along images,
rows and columns, and a GEMM with a 0/1 tile that copies lane 0 to every lane where an operand
broadcasts along channels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels import words as W
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
from pyhost.spec.isa import AluOp, Buffer

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


def _broadcast(op: Operand, out: tuple[int, int, int, int], what: str
               ) -> tuple[bool, bool, str]:
    """(has images, has channels, pixel view): False where the operand broadcasts. The pixel
    view (its H and W against the output's): "hw" every pixel, "" one per plane (H and W both
    broadcast), "w" one image row of W pixels (broadcast along H), "h" one column of H pixels
    (broadcast along W); with an output of H = 1 or W = 1 a row or column is "hw"."""
    b, c, h, w = op.shape
    ob, oc, oh, ow = out
    _need(b in (1, ob) and c in (1, oc) and h in (1, oh) and w in (1, ow),
          f"{what} {op.shape} does not broadcast to {out} (numpy broadcasting: each dimension "
          "equal to the output's or 1)")
    px = "hw" if (h, w) == (oh, ow) else "" if (h, w) == (1, 1) else "w" if h == 1 else "h"
    return b == ob, c == oc, px


@dataclass(frozen=True)
class _Tile:
    """Output pixels of a tile: `rows` runs of `width` pixels, run r starting at pixel
    p0 + r * ow of the image, for blocks b0 .. b0 + nb - 1 of image `img`. With an operand
    broadcast along H or W alone the runs are image rows (or one piece of a row); otherwise
    a tile is one flat run of pixels (rows = 1) that may span image rows."""

    img: int
    b0: int
    nb: int
    p0: int
    rows: int
    width: int

    @property
    def pixels(self) -> int:
        return self.rows * self.width


def _view(px: str, t: _Tile, ow: int) -> tuple[int, int, int, int]:
    """An operand's rows in a tile, per channel block: (first pixel of its plane, rows loaded,
    row stride, column stride) of the compact copy in the accumulator."""
    if px == "hw":
        return t.p0, t.pixels, t.width, 1
    if px == "w":
        return t.p0 % ow, t.width, 0, 1
    if px == "h":
        return t.p0 // ow, t.rows, 1, 0
    return 0, 1, 0, 0


def _tiles(ob: int, nbo: int, oh: int, ow: int, cap: int, by_rows: bool) -> list[_Tile]:
    """Tiles of at most `cap` pixels x blocks: whole images (several blocks each) when an image
    fits; else per block, runs of whole image rows (`by_rows`: an operand broadcasts along H
    or W alone) or flat runs of pixels; pieces of one row when a row is wider than `cap`."""
    hw = oh * ow
    tiles = []
    for img in range(ob):
        if hw <= cap:
            per = max(1, min(nbo, cap // hw))
            rows, width = (oh, ow) if by_rows else (1, hw)
            tiles += [_Tile(img, b0, min(per, nbo - b0), 0, rows, width)
                      for b0 in range(0, nbo, per)]
        elif not by_rows:
            tiles += [_Tile(img, blk, 1, p0, 1, min(cap, hw - p0)) for blk in range(nbo)
                      for p0 in range(0, hw, cap)]
        elif ow <= cap:
            r = cap // ow
            tiles += [_Tile(img, blk, 1, y0 * ow, min(r, oh - y0), ow) for blk in range(nbo)
                      for y0 in range(0, oh, r)]
        else:
            tiles += [_Tile(img, blk, 1, y * ow + x0, 1, min(cap, ow - x0))
                      for blk in range(nbo) for y in range(oh) for x0 in range(0, ow, cap)]
    return tiles


def _combine(alu_op: AluOp, dst: int, t: _Tile, src: int, bs: int, ys: int, xs: int
             ) -> list[int]:
    """The ALU pass(es) of `alu_op` over a tile's output rows (block-major, `width` pixels per
    run) with source rows `src + block * bs + run * ys + column * xs`: one instruction whose
    outer loop runs over (block, run) where the source rows are linear in it, else one per
    block (outer = runs, inner = width)."""
    _need(max(bs, ys) <= _SO and xs <= _SI, "binary strides exceed the ALU fields")
    if t.nb == 1 or t.rows == 1 or bs == t.rows * ys:
        return [W.alu(alu_op, dst_base=dst, src_base=src, outer=t.nb * t.rows,
                      inner=t.width, dst_so=t.width, dst_si=1,
                      src_so=ys if t.rows > 1 else bs, src_si=xs)]
    return [W.alu(alu_op, dst_base=dst + j * t.pixels, src_base=src + j * bs, outer=t.rows,
                  inner=t.width, dst_so=t.width, dst_si=1, src_so=ys, src_si=xs)
            for j in range(t.nb)]


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
    output_zero_point) and clamped to `act`, with a and b broadcast to `out_shape` (NCHW view:
    numpy broadcasting along any of images, channels, H and W). Per tile of one image's pixels:

    - add / sub: the residual add's datapath (`eltwise.add`): MUL each operand by its ~22-bit
      multiplier (negated for the subtrahend), combine, add -(za*m_a +- zb*m_b), REQ by the
      common shift: y = clamp(((a-za)*m_a +- (b-zb)*m_b + 2**(S-1)) >> S + zp, lo, hi);
    - mul: ADD -za and -zb, multiply, REQ with (m, s) = quantize_multiplier(s_a*s_b/s_y):
      y = clamp(requantize((a-za)*(b-zb), m, s, zp), lo, hi), exactly;
    - max / min: each operand requantized to the output (ADD -z, REQ with its own
      quantize_multiplier(s_i/s_y), clamped), then MAX / MIN: max(clamp(requantize(a-za, m_a,
      s_a, zp)), clamp(requantize(b-zb, ...))), exactly (requantization is monotone).

    Operands are loaded compactly (one row per distinct broadcast row: per channel block all
    the tile's pixels, one row for a plane, the tile's columns of a (.., 1, W) row, the tile's
    image rows of a (.., H, 1) column) and combined by ALU passes whose source strides are 0
    along the broadcast dimensions; an operand with one channel against many is first spread
    over the lanes by a GEMM (lane 0 to every real lane, lane 1, its zero point, to the
    padding lanes). With an operand broadcast along H or W alone, tiles are whole image rows
    (pieces of one row when a row does not fit a tile) and the combining pass runs per channel
    block with outer = image rows, inner = the row's pixels (pixel (y, x): a row operand's
    row x, src_so = 0, src_si = 1; a column operand's row y, src_so = 1, src_si = 0), or as
    one pass where the rows are linear across blocks. Padding channels of the output hold the
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
    # tiles (see _Tile); output and operand rows in ACC, three slots of a region
    full = cfg.acc_depth - params
    cap_rows = min(_region(full, 3, ACC_REGIONS) // 3, _XY, _LOOP)
    _need(cap_rows >= 1, "binary: the accumulator is too small")
    tiles = _tiles(ob, nbo, oh, ow, cap_rows, any(f[2] in ("w", "h") for f in flags))
    cap = _region(full, len(tiles), ACC_REGIONS)
    slot_rows = cap // 3
    _need(not any(lane) or max(_view(flags[i][2], t, ow)[1] for t in tiles
                               for i in range(2) if lane[i]) <= cfg.inp_depth // 4,
          "binary: the input scratchpad is too small for the lane spreading")
    steps = []
    for t, tl in enumerate(tiles):
        img, b0, nb, p0, pp = tl.img, tl.b0, tl.nb, tl.p0, tl.pixels
        base = params + _base(t, len(tiles), ACC_REGIONS, cap)
        o_base, opnd_base = base, [base + slot_rows, base + 2 * slot_rows]
        loads: list[int] = []
        compute: list[int] = []
        if t == 0:
            loads.append(W.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                y_size=1, x_size=params, y_stride=params))
            if tiles_off is not None:
                loads += _load_contig(Buffer.WGT, 0, consts.slot, tiles_off, 2, n * n)
        strides = []
        xrows = []
        for i, (x, (hi_img, hi_ch, px)) in enumerate(zip(ops, flags, strict=True)):
            xb = layout.blocks(x.shape[1], n)
            xhw = x.shape[2] * x.shape[3]
            first, rows_px, ys, xs = _view(px, tl, ow)
            blks = range(b0, b0 + nb) if hi_ch else range(0, 1)
            ximg = img if hi_img else 0
            for j, blk in enumerate(blks):
                off = refs[i].offset + ((ximg * xb + blk) * xhw + first) * n
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
                    compute.append(W.gemm(reset=1, acc_base=opnd_base[i] + j * rows_px,
                                          inp_base=ibase, wgt_base=1 if last else 0,
                                          outer=1, inner=rows_px, acc_si=1, inp_si=1))
            per_block = hi_ch or lane[i]
            strides.append((rows_px if per_block else 0, ys, xs))
            xrows.append((nb if per_block else 1) * rows_px)
        if op in ("mul", "max", "min"):
            for i in range(2):
                if zs[i]:
                    compute.append(W.alu(AluOp.ADD, imm=-zs[i], dst_base=opnd_base[i],
                                         outer=1, inner=xrows[i], dst_si=1))
                if op != "mul":
                    compute.append(W.req(zout, lo, hi, dst_base=opnd_base[i], src_base=2 * i,
                                         outer=1, inner=xrows[i], dst_si=1))
        else:
            for i in range(2):
                _need(_IMM_MIN <= mults[i] <= _IMM_MAX, "add multiplier exceeds the immediate")
                compute.append(W.alu(AluOp.MUL, imm=mults[i], dst_base=opnd_base[i],
                                     outer=1, inner=xrows[i], dst_si=1))
        compute += _combine(AluOp.MOV, o_base, tl, opnd_base[0], *strides[0])
        combine = {"mul": AluOp.MUL, "max": AluOp.MAX, "min": AluOp.MIN}.get(op, AluOp.ADD)
        compute += _combine(combine, o_base, tl, opnd_base[1], *strides[1])
        flat = {"outer": 1, "inner": nb * pp, "dst_si": 1}
        if op in ("max", "min"):
            pass                                  # both operands are requantized already
        elif op == "mul":
            compute.append(W.req(zout, lo, hi, dst_base=o_base, src_base=0, **flat))
        else:
            compute.append(W.alu(AluOp.ADD, dst_base=o_base, src_base=2, **flat))
            compute.append(W.req(zout, lo, hi, dst_base=o_base, src_base=0, **flat))
        stores = []
        for j in range(nb):
            stores.append(W.store(Buffer.ACC8, slot=out.slot, sp_base=o_base + j * pp,
                                  offset=out.offset + ((img * nbo + b0 + j) * hw + p0) * n,
                                  y_size=1, x_size=pp, y_stride=pp))
        steps.append(_Step(loads, compute, stores, True))
    shape = (ob, oc, oh, ow)
    ins = tuple(TensorInfo("ab"[i], refs[i], x.shape, "int8",
                           layout.act_bytes(x.shape[1], x.shape[2], x.shape[3], n, x.shape[0]),
                           zs[i]) for i, x in enumerate(ops) if x.data is None)
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)), inputs=ins,
        outputs=(TensorInfo("output", out, shape, "int8", layout.act_bytes(oc, oh, ow, n, ob),
                            min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"steps": len(steps), "op": op, "broadcast": "".join(
            ("x" if fl[0] else "-") + ("x" if fl[1] else "-") + {"hw": "x", "": "-"}.get(
                fl[2], fl[2]) for fl in flags)})

"""Pooling kernels: MaxPool2d (ALU MOV/MAX over window positions) and GlobalAveragePool (an ADD
reduction and a requantization)."""

from __future__ import annotations

from collections.abc import Sequence

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
    AccelKernelError,
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
from compiler.plugins.accel.kernels.pipeline import (
    ACC_REGIONS,
    _balanced,
    _base,
    _cdiv,
    _load_contig,
    _load_padded,
    _pipeline,
    _region,
    _Step,
    _store,
)
from pyhost.accel import layout
from pyhost.fixedpoint import FixedPointError
from pyhost.fixedpoint import quantize_multiplier as _qm
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer


def quantize_multiplier(m: float) -> tuple[int, int]:
    try:
        return _qm(m)
    except FixedPointError as e:
        raise AccelKernelError(str(e)) from None


# --- MaxPool and AveragePool: windows over a padded tile ----------------------------------------

def pool_output_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool
                     ) -> int:
    """Output length of one axis (the ONNX / PyTorch rule, as compiler.ops.geometry: in
    ceil_mode the last window must start inside the input or its begin padding)."""
    span = (k - 1) * d + 1
    num = size + pb + pe - span
    _need(num >= 0, f"the pool window ({span}) is larger than the padded input "
          f"({size + pb + pe})")
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def _axis_counts(size: int, out: int, k: int, s: int, d: int, pb: int, pe: int,
                 include_pad: bool) -> list[int]:
    """Per output position: the window taps that count for an average (inside the input, or
    inside the explicit padding with count_include_pad; never ceil_mode's extra cells)."""
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    return [sum(lo <= o * s - pb + j * d < hi for j in range(k)) for o in range(out)]


def _runs(values: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start, stop, value) of the runs of equal consecutive values."""
    out: list[tuple[int, int, int]] = []
    for i, v in enumerate(values):
        if out and out[-1][2] == v and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1, v)
        else:
            out.append((i, i + 1, v))
    return out


def _pool2d(kind: str, in_shape: Sequence[int], kernel: Sequence[int], *, inp: Ref, out: Ref,
            strides: Sequence[int] | None, pads: Sequence[int], dilations: Sequence[int],
            ceil_mode: bool, cfg: AccelConfig, name: str, consts: Ref | None = None,
            avg: tuple[float, int, int, bool, tuple[int, int]] | None = None,
            zero_point: int = 0) -> Kernel:
    """MaxPool ("max") or AveragePool ("avg") over tiles of output rows: LOAD.ACC8 the padded
    input rows, one ALU MOV and then a MAX (ADD) per further window tap over the tile's output
    rows (2-level loop: output row src_so = stride*Wp, column src_si = stride), STORE.ACC8.
    The average then adds -taps * zp_in (the padding holds zp_in, so it cancels) and
    requantizes each rectangle of equal window counts with its own (multiplier, shift):
    quantize_multiplier(s_in / (count * s_out)). `avg` = (s_in / s_out, zp_in, zp_out,
    count_include_pad, act bounds)."""
    n = cfg.n
    _need(len(in_shape) == 4, f"{name}: input shape must be NCHW, got {tuple(in_shape)}")
    b, c, h, w = (int(v) for v in in_shape)
    kh, kw = (int(v) for v in kernel)
    sh, sw = (int(v) for v in (strides if strides is not None else kernel))
    dh, dw = (int(v) for v in dilations)
    pt, pl, pb, pr = (int(v) for v in pads)
    _need(min(b, c, h, w, kh, kw, sh, sw, dh, dw) >= 1, f"empty {name}")
    zin = _int8("zero point", zero_point if avg is None else avg[1])
    khe, kwe = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    oh = pool_output_size(h, kh, sh, dh, pt, pb, ceil_mode)
    ow = pool_output_size(w, kw, sw, dw, pl, pr, ceil_mode)
    _need(oh >= 1 and ow >= 1, "the pool window is larger than the padded input")
    pb_used = max(0, (oh - 1) * sh + khe - h - pt)      # ceil_mode may read past pb
    pr = max(0, (ow - 1) * sw + kwe - w - pl)
    for nm, pv, k in (("top", pt, khe), ("bottom", pb_used, khe), ("left", pl, kwe),
                      ("right", pr, kwe)):
        _need(0 <= pv < k, f"padding {nm}={pv} must be below the (dilated) kernel extent {k}")
    wp = pl + w + pr
    _need(ow <= _LOOP and ow <= _SO and sh * wp <= _SO and sw <= _SI and w <= _XY,
          f"{name} width {w} exceeds the ALU/LOAD fields")
    _check_ref(inp, n, "input")
    _check_ref(out, n, "output")
    cb = layout.blocks(c, n)
    blob = None
    params = 0
    regions: list[tuple[int, int, int, int, int]] = []     # (oy0, oy1, ox0, ox1, param row)
    if avg is not None:
        ratio, _, zout, include_pad, (lo, hi) = avg
        _int8("output zero point", zout)
        cy = _axis_counts(h, oh, kh, sh, dh, pt, pb, include_pad)
        cx = _axis_counts(w, ow, kw, sw, dw, pl, int(pads[3]), include_pad)
        counts = sorted({y * x for y in cy for x in cx})
        _need(0 not in counts, f"{name}: a window holds no element that counts")
        _need(len(counts) * 2 < cfg.acc_depth // 2, f"{name}: too many window sizes")
        m_s = [quantize_multiplier(ratio / cnt) for cnt in counts]
        row = {cnt: 2 * i for i, cnt in enumerate(counts)}
        for y0, y1, vy in _runs(cy):
            for x0, x1, vx in _runs(cx):
                regions.append((y0, y1, x0, x1, row[vy * vx]))
        assert consts is not None
        blob = _Blob(consts, n)
        prm = np.zeros((2 * len(counts), n), np.int64)
        for i, (m, sft) in enumerate(m_s):
            prm[2 * i], prm[2 * i + 1] = m, sft
        prm_off = blob.add("requant", layout.acc_rows_bytes(prm))
        params = 2 * len(counts)
        corr = -kh * kw * zin
        _need(_IMM_MIN <= corr <= _IMM_MAX, "zero-point correction exceeds the immediate")

    def rows_in(r: int) -> int:
        return (r - 1) * sh + khe

    best = None
    full = cfg.acc_depth - params
    for r in _balanced(oh):
        nsteps = b * cb * _cdiv(oh, r)
        cap = _region(full, nsteps, ACC_REGIONS)
        if rows_in(r) * wp + r * ow <= cap and r <= _LOOP and rows_in(r) <= _XY:
            best = r
            break
    if best is None:
        raise AccelKernelError(f"{name}: one output row of width {ow} with its {khe} input "
                               f"rows ({khe * wp + ow} ACC rows) does not fit the accumulator "
                               f"({full // ACC_REGIONS} rows per region)")
    r = best
    tiles = [(bi, ci, oy0, min(r, oh - oy0)) for bi in range(b) for ci in range(cb)
             for oy0 in range(0, oh, r)]
    cap = _region(full, len(tiles), ACC_REGIONS)
    steps = []
    for t, (bi, ci, oy0, rr) in enumerate(tiles):
        a_base = params + _base(t, len(tiles), ACC_REGIONS, cap)
        o_base = a_base + rows_in(r) * wp
        iy_lo = oy0 * sh - pt
        iy_hi = iy_lo + rows_in(rr) - 1
        y0 = max(iy_lo, 0)
        loads = []
        if t == 0 and blob is not None:
            loads.append(W.load(Buffer.ACC, slot=blob.ref.slot, sp_base=0, offset=prm_off,
                                y_size=1, x_size=params, y_stride=params))
        loads += _load_padded(Buffer.ACC8, n, slot=inp.slot, sp_base=a_base,
                       offset=inp.offset + ((bi * cb + ci) * h + y0) * w * n,
                       y_size=min(iy_hi, h - 1) - y0 + 1, x_size=w, y_stride=w,
                       pad_top=max(0, -iy_lo), pad_bottom=max(0, iy_hi - (h - 1)),
                       pad_left=pl, pad_right=pr, pad_value=-128 if avg is None else zin)
        compute = []
        fold = AluOp.MAX if avg is None else AluOp.ADD
        for ky in range(kh):
            for kx in range(kw):
                op = AluOp.MOV if (ky, kx) == (0, 0) else fold
                compute.append(W.alu(op, dst_base=o_base,
                                     src_base=a_base + ky * dh * wp + kx * dw,
                                     outer=rr, inner=ow, dst_so=ow, dst_si=1,
                                     src_so=sh * wp, src_si=sw))
        if avg is not None:
            zout, (lo, hi) = avg[2], avg[4]
            if corr:
                compute.append(W.alu(AluOp.ADD, imm=corr, dst_base=o_base, outer=1,
                                     inner=rr * ow, dst_si=1))
            for ry0, ry1, rx0, rx1, prow in regions:
                a0, a1 = max(ry0, oy0), min(ry1, oy0 + rr)
                if a0 >= a1:
                    continue
                compute.append(W.req(zout, lo, hi, dst_base=o_base + (a0 - oy0) * ow + rx0,
                                     src_base=prow, outer=a1 - a0, inner=rx1 - rx0,
                                     dst_so=ow, dst_si=1))
        stores = _store(Buffer.ACC8, n, slot=out.slot, sp_base=o_base,
                        offset=out.offset + ((bi * cb + ci) * oh + oy0) * ow * n,
                        y_size=rr, x_size=ow, y_stride=ow)
        steps.append(_Step(loads, compute, stores, True))
    fill = zin if avg is None else min(max(avg[2], avg[4][0]), avg[4][1])
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, (b, c, h, w), "int8", layout.act_bytes(c, h, w, n, b),
                           zin),),
        outputs=(TensorInfo("output", out, (b, c, oh, ow), "int8",
                            layout.act_bytes(c, oh, ow, n, b), fill),),
        consts=blob.done() if blob is not None else None,
        tiling={"rows": r, "steps": len(steps), "out_shape": (b, c, oh, ow),
                **({"window_sizes": params // 2} if avg is not None else {})})


def maxpool2d(in_shape: Sequence[int], kernel: Sequence[int], *, inp: Ref, out: Ref,
              strides: Sequence[int] | None = None, pads: Sequence[int] = (0, 0, 0, 0),
              zero_point: int = 0, dilations: Sequence[int] = (1, 1), ceil_mode: bool = False,
              cfg: AccelConfig = DEFAULT_CFG, name: str = "maxpool2d") -> Kernel:
    """int8 MaxPool2d (padding with -128, the int8 minimum): LOAD.ACC8 of a padded tile into
    ACC, one ALU MOV then a MAX per further window position over the tile's output rows, each
    with the two-level loop (output row, output column), the pool strides and dilations;
    STORE.ACC8. `ceil_mode` as ONNX (the last window may run past the end padding).

    Bit-exact with a numpy max pool on int8. The scale and `zero_point` pass through (it is
    only recorded: padding channels keep the input's fill value, its zero point).
    """
    return _pool2d("max", in_shape, kernel, inp=inp, out=out, strides=strides, pads=pads,
                   dilations=dilations, ceil_mode=ceil_mode, cfg=cfg, name=name,
                   zero_point=zero_point)


def avgpool2d(in_shape: Sequence[int], kernel: Sequence[int], *, input_scale: float,
              input_zero_point: int, output_scale: float, output_zero_point: int, inp: Ref,
              out: Ref, consts: Ref, strides: Sequence[int] | None = None,
              pads: Sequence[int] = (0, 0, 0, 0), dilations: Sequence[int] = (1, 1),
              count_include_pad: bool = False, ceil_mode: bool = False,
              act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
              name: str = "avgpool2d") -> Kernel:
    """int8 AveragePool2d with any kernel, stride, dilation and padding, count_include_pad
    either way, ceil_mode, and an optional fused ReLU/Clip (`act`): per output,

        y = clamp(requantize(sum(window) - taps * zp_in, m_c, s_c, zp_out), lo, hi)

    with padding holding zp_in (real 0) and (m_c, s_c) = quantize_multiplier(s_in / (c * s_out))
    for the window's count c of elements that count (ONNX's divisor); exact against that
    integer formula, within 1 LSB of the float average (only at rounding ties)."""
    return _pool2d("avg", in_shape, kernel, inp=inp, out=out, strides=strides, pads=pads,
                   dilations=dilations, ceil_mode=ceil_mode, cfg=cfg, name=name, consts=consts,
                   avg=(float(input_scale) / float(output_scale), int(input_zero_point),
                        int(output_zero_point), bool(count_include_pad), _bounds(act)))


# --- GlobalAveragePool --------------------------------------------------------------------------

def global_avgpool(in_shape: Sequence[int], *, multiplier: int, shift: int,
                   input_zero_point: int, output_zero_point: int, inp: Ref, out: Ref,
                   consts: Ref, act: tuple[int, int] | None = None,
                   cfg: AccelConfig = DEFAULT_CFG, name: str = "global_avgpool") -> Kernel:
    """GlobalAveragePool (ResNet-50's head): the sum of the H*W pixels of each channel block by
    a tree of ALU ADDs (halving the rows each pass), minus H*W times the input zero point, then
    REQ with (multiplier, shift) = quantize_multiplier(s_in / (H*W*s_out)):
    y = requantize(sum(x) - H*W*zp_in, multiplier, shift, zp_out), exactly.
    """
    n = cfg.n
    _need(len(in_shape) == 4, f"global_avgpool input shape must be NCHW, got {in_shape}")
    bsz, c, h, w = (int(v) for v in in_shape)
    hw = h * w
    _need(min(bsz, c, hw) >= 1, "empty global_avgpool")
    zin = _int8("input zero point", input_zero_point)
    zout = _int8("output zero point", output_zero_point)
    lo, hi = _bounds(act)
    corr = -hw * zin
    _need(_IMM_MIN <= corr <= _IMM_MAX and hw <= _XY and hw <= _SO,
          f"global_avgpool over {hw} pixels exceeds the ALU/LOAD fields")
    for ref, what in ((inp, "input"), (out, "output")):
        _check_ref(ref, n, what)
    blob = _Blob(consts, n)
    prm_off = blob.add("requant", layout.acc_rows_bytes(
        _requant_rows([multiplier] * n, [shift] * n, 1, n)))
    params = 2
    cb = layout.blocks(c, n)
    units = [(bi, ci) for bi in range(bsz) for ci in range(cb)]  # (image, channel block)
    full = cfg.acc_depth - params
    if len(units) * (hw + 1) <= full and len(units) <= min(_LOOP, _XY):
        per = len(units)                              # one step: the whole accumulator
    else:
        per = min(full // ACC_REGIONS // (hw + 1), _LOOP, _XY)
    _need(per >= 1, f"global_avgpool: {hw} pixels of one channel block do not fit the "
          "accumulator")
    chunks = [units[i:i + per] for i in range(0, len(units), per)]
    cap = _region(full, len(chunks), ACC_REGIONS)
    steps = []
    for t, ch in enumerate(chunks):
        k = len(ch)
        base = params + _base(t, len(chunks), ACC_REGIONS, cap)
        obase = base + per * hw
        first = ch[0][0] * cb + ch[0][1]            # blocks are consecutive in memory
        loads = []
        if t == 0:
            loads.append(W.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                y_size=1, x_size=params, y_stride=params))
        loads += _load_contig(Buffer.ACC8, base, inp.slot, inp.offset + first * hw * n, k * hw, n)
        compute = []
        rows = hw
        while rows > 1:
            half = rows // 2
            compute.append(W.alu(AluOp.ADD, dst_base=base, src_base=base + rows - half,
                                 outer=k, inner=half, dst_so=hw, dst_si=1, src_so=hw,
                                 src_si=1))
            rows -= half
        compute += [
            W.alu(AluOp.MOV, dst_base=obase, src_base=base, outer=k, inner=1, dst_so=1,
                  src_so=hw),
            W.alu(AluOp.ADD, imm=corr, dst_base=obase, outer=1, inner=k, dst_si=1),
            W.req(zout, lo, hi, dst_base=obase, src_base=0, outer=1, inner=k, dst_si=1),
        ]
        store = W.store(Buffer.ACC8, slot=out.slot, sp_base=obase,
                        offset=out.offset + first * n, y_size=1, x_size=k, y_stride=k)
        steps.append(_Step(loads, compute, [store], True))
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, (bsz, c, h, w), "int8",
                           layout.act_bytes(c, h, w, n, bsz), zin),),
        outputs=(TensorInfo("output", out, (bsz, c, 1, 1), "int8",
                            layout.act_bytes(c, 1, 1, n, bsz), min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"blocks_per_step": per, "steps": len(steps)})

"""Pooling kernels: MaxPool2d (ALU MOV/MAX over window positions) and GlobalAveragePool (an ADD
reduction and a requantization)."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.plugins.accel.kernels.base import (
    _IMM_MAX,
    _IMM_MIN,
    _LOOP,
    _PAD,
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
    _load,
    _load_contig,
    _pipeline,
    _region,
    _Step,
    _store,
)
from pyhost.accel import layout
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer

# --- MaxPool ------------------------------------------------------------------------------------

def maxpool2d(in_shape: Sequence[int], kernel: Sequence[int], *, inp: Ref, out: Ref,
              strides: Sequence[int] | None = None, pads: Sequence[int] = (0, 0, 0, 0),
              zero_point: int = 0, cfg: AccelConfig = DEFAULT_CFG,
              name: str = "maxpool2d") -> Kernel:
    """int8 MaxPool2d (padding with -128, the int8 minimum): LOAD.ACC8 of a padded tile into
    ACC, one ALU MOV then a MAX per further window position over the tile's output rows, each
    with the two-level loop (output row, output column) and the pool strides; STORE.ACC8.

    Bit-exact with a numpy max pool on int8. The scale and `zero_point` pass through (it is
    only recorded: padding channels keep the input's fill value, its zero point).
    """
    n = cfg.n
    _need(len(in_shape) == 4, f"maxpool2d input shape must be NCHW, got {tuple(in_shape)}")
    b, c, h, w = (int(v) for v in in_shape)
    kh, kw = (int(v) for v in kernel)
    sh, sw = (int(v) for v in (strides if strides is not None else kernel))
    pt, pl, pb, pr = (int(v) for v in pads)
    _need(min(b, c, h, w, kh, kw, sh, sw) >= 1, "empty maxpool2d")
    _int8("zero point", zero_point)
    for nm, p, k in (("top", pt, kh), ("bottom", pb, kh), ("left", pl, kw), ("right", pr, kw)):
        _need(0 <= p < k and p <= _PAD, f"padding {nm}={p} must be below the kernel size {k} "
              f"and at most {_PAD}")
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    _need(oh >= 1 and ow >= 1, "the pool window is larger than the padded input")
    pr = max(0, (ow - 1) * sw + kw - w - pl)
    wp = pl + w + pr
    _need(ow <= _LOOP and ow <= _SO and sh * wp <= _SO and sw <= _SI and w <= _XY,
          f"maxpool2d width {w} exceeds the ALU/LOAD fields")
    _check_ref(inp, n, "input")
    _check_ref(out, n, "output")
    cb = layout.blocks(c, n)

    def rows_in(r: int) -> int:
        return (r - 1) * sh + kh

    best = None
    for r in _balanced(oh):
        nsteps = b * cb * _cdiv(oh, r)
        cap = _region(cfg.acc_depth, nsteps, ACC_REGIONS)
        if rows_in(r) * wp + r * ow <= cap and r <= _LOOP and rows_in(r) <= _XY:
            best = r
            break
    if best is None:
        raise AccelKernelError(f"maxpool2d: one output row of width {ow} with its {kh} input "
                               f"rows ({kh * wp + ow} ACC rows) does not fit the accumulator "
                               f"({cfg.acc_depth // ACC_REGIONS} rows per region)")
    r = best
    tiles = [(bi, ci, oy0, min(r, oh - oy0)) for bi in range(b) for ci in range(cb)
             for oy0 in range(0, oh, r)]
    cap = _region(cfg.acc_depth, len(tiles), ACC_REGIONS)
    steps = []
    for t, (bi, ci, oy0, rr) in enumerate(tiles):
        a_base = _base(t, len(tiles), ACC_REGIONS, cap)
        o_base = a_base + rows_in(r) * wp
        iy_lo = oy0 * sh - pt
        iy_hi = iy_lo + rows_in(rr) - 1
        y0 = max(iy_lo, 0)
        loads = _load(Buffer.ACC8, n, slot=inp.slot, sp_base=a_base,
                      offset=inp.offset + ((bi * cb + ci) * h + y0) * w * n,
                      y_size=min(iy_hi, h - 1) - y0 + 1, x_size=w, y_stride=w,
                      pad_top=max(0, -iy_lo), pad_bottom=max(0, iy_hi - (h - 1)),
                      pad_left=pl, pad_right=pr, pad_value=-128)
        compute = []
        for ky in range(kh):
            for kx in range(kw):
                op = AluOp.MOV if (ky, kx) == (0, 0) else AluOp.MAX
                compute.append(isa.alu(op, dst_base=o_base, src_base=a_base + ky * wp + kx,
                                       outer=rr, inner=ow, dst_so=ow, dst_si=1,
                                       src_so=sh * wp, src_si=sw))
        stores = _store(Buffer.ACC8, n, slot=out.slot, sp_base=o_base,
                        offset=out.offset + ((bi * cb + ci) * oh + oy0) * ow * n,
                        y_size=rr, x_size=ow, y_stride=ow)
        steps.append(_Step(loads, compute, stores, True))
    return Kernel(
        name, tuple(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, (b, c, h, w), "int8", layout.act_bytes(c, h, w, n, b),
                           zero_point),),
        outputs=(TensorInfo("output", out, (b, c, oh, ow), "int8",
                            layout.act_bytes(c, oh, ow, n, b), zero_point),),
        consts=None,
        tiling={"rows": r, "steps": len(steps), "out_shape": (b, c, oh, ow)})


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
            loads.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                  y_size=1, x_size=params, y_stride=params))
        loads += _load_contig(Buffer.ACC8, base, inp.slot, inp.offset + first * hw * n, k * hw, n)
        compute = []
        rows = hw
        while rows > 1:
            half = rows // 2
            compute.append(isa.alu(AluOp.ADD, dst_base=base, src_base=base + rows - half,
                                   outer=k, inner=half, dst_so=hw, dst_si=1, src_so=hw,
                                   src_si=1))
            rows -= half
        compute += [
            isa.alu(AluOp.MOV, dst_base=obase, src_base=base, outer=k, inner=1, dst_so=1,
                    src_so=hw),
            isa.alu(AluOp.ADD, imm=corr, dst_base=obase, outer=1, inner=k, dst_si=1),
            isa.req(zout, lo, hi, dst_base=obase, src_base=0, outer=1, inner=k, dst_si=1),
        ]
        store = isa.store(Buffer.ACC8, slot=out.slot, sp_base=obase,
                          offset=out.offset + first * n, y_size=1, x_size=k, y_stride=k)
        steps.append(_Step(loads, compute, [store], True))
    return Kernel(
        name, tuple(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, (bsz, c, h, w), "int8",
                           layout.act_bytes(c, h, w, n, bsz), zin),),
        outputs=(TensorInfo("output", out, (bsz, c, 1, 1), "int8",
                            layout.act_bytes(c, 1, 1, n, bsz), min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"blocks_per_step": per, "steps": len(steps)})

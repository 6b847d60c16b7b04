"""Layout changes on the card: the copies of a Concat whose inputs cannot be written in place,
and channel permutations (ShuffleNet's channel shuffle) on the GEMM array."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels import words as W
from compiler.plugins.accel.kernels.base import (
    _LOOP,
    _XY,
    DEFAULT_CFG,
    AccelKernelError,
    Kernel,
    Ref,
    TensorInfo,
    _Blob,
    _check_ref,
    _need,
)
from compiler.plugins.accel.kernels.pipeline import (
    ACC_REGIONS,
    _base,
    _bias_blob,
    _bias_loads,
    _load_contig,
    _pipeline,
    _region,
    _Step,
)
from pyhost.accel import layout
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Insn


def nop() -> Insn:
    """A compute instruction without iterations: it only carries a step's tokens."""
    return isa.alu(AluOp.ADD, imm=0, outer=0, inner=0)


# --- Concat -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConcatPart:
    """One input of a Concat: where it is, its NCHW shape, and where it goes in the output (a
    channel offset, a multiple of N, for axis 1; an image offset for axis 0)."""

    ref: Ref
    shape: tuple[int, int, int, int]
    offset: int


def concat_offsets(shapes: Sequence[Sequence[int]], axis: int, n: int) -> list[int]:
    """Where each input of a Concat along `axis` (0: images, 1: channels of the blocked view)
    starts in the output; AccelKernelError when a channel offset is not a multiple of N (the
    lanes of a block would have to move)."""
    _need(axis in (0, 1), f"concat along axis {axis}: only images (0) and channels (1)")
    offs, at = [], 0
    for i, s in enumerate(shapes):
        offs.append(at)
        at += int(s[axis])
        if axis == 1 and i + 1 < len(shapes):
            _need(at % n == 0, f"concat: input {i} ends at channel {at}, not a multiple of "
                  f"N = {n}; the next input would have to move lanes")
    return offs


def concat(out_shape: Sequence[int], parts: Sequence[ConcatPart], axis: int, *, out: Ref,
           zero_point: int, cfg: AccelConfig = DEFAULT_CFG, name: str = "concat") -> Kernel:
    """The copies that finish a Concat of int8 tensors with the same quantization: each part
    moves block rows from its tensor to its place in the output (LOAD.ACC8 then STORE.ACC8,
    through the accumulator; no arithmetic). Inputs that the producers wrote in place (the
    plugin's channel-offset writes) are not parts; with no part the kernel is empty."""
    n = cfg.n
    _need(len(out_shape) == 4, f"concat output shape must be NCHW, got {tuple(out_shape)}")
    b, co, h, w = (int(v) for v in out_shape)
    nbo = layout.blocks(co, n)
    _check_ref(out, n, "output")
    copies: list[tuple[int, int, int, int]] = []        # (slot, src offset, dst offset, rows)
    for p in parts:
        _check_ref(p.ref, n, "input")
        pb, pc, ph, pw = p.shape
        _need((ph, pw) == (h, w), f"concat input {p.shape} does not match {tuple(out_shape)}")
        nbi = layout.blocks(pc, n)
        if axis == 1:
            _need(pb == b and p.offset % n == 0 and p.offset + pc <= co,
                  f"concat input {p.shape} at channel {p.offset} does not fit {out_shape}")
            for bi in range(b):
                copies.append((p.ref.slot, p.ref.offset + bi * nbi * h * w * n,
                               out.offset + (bi * nbo + p.offset // n) * h * w * n,
                               nbi * h * w))
        else:
            _need(pc == co and p.offset + pb <= b,
                  f"concat input {p.shape} at image {p.offset} does not fit {out_shape}")
            copies.append((p.ref.slot, p.ref.offset,
                           out.offset + p.offset * nbo * h * w * n, pb * nbi * h * w))
    chunk = min(_region(cfg.acc_depth, 3, ACC_REGIONS), _XY, _LOOP)
    pieces = [(slot, src + k * n, dst + k * n, min(chunk, rows - k))
              for slot, src, dst, rows in copies for k in range(0, rows, chunk)]
    steps = []
    for t, (slot, src, dst, rows) in enumerate(pieces):
        base = _base(t, len(pieces), ACC_REGIONS, chunk)
        loads = _load_contig(Buffer.ACC8, base, slot, src, rows, n)
        stores = [W.store(Buffer.ACC8, slot=out.slot, sp_base=base, offset=dst, y_size=1,
                          x_size=rows, y_stride=rows)]
        steps.append(_Step(loads, [W.of(nop())], stores, True))
    insns = _pipeline(steps) if steps else []
    return Kernel(
        name, isa.Stream.from_words(insns),
        inputs=tuple(TensorInfo(f"input{i}", p.ref, p.shape, "int8",
                                layout.act_bytes(p.shape[1], h, w, n, p.shape[0]), zero_point)
                     for i, p in enumerate(parts)),
        outputs=(TensorInfo("output", out, (b, co, h, w), "int8",
                            layout.act_bytes(co, h, w, n, b), zero_point),),
        consts=None,
        tiling={"copies": len(copies), "steps": len(steps)})


# --- channel permutations ---------------------------------------------------------------------

def permute_channels(in_shape: Sequence[int], perm: Sequence[int], *, inp: Ref, out: Ref,
                     consts: Ref, zero_point: int, cfg: AccelConfig = DEFAULT_CFG,
                     name: str = "permute") -> Kernel:
    """out[:, c] = in[:, perm[c]] (a channel shuffle) on the array: for each output block, one
    GEMM per input block that holds any of its sources, with a 0/1 weight tile (W[k][n] = 1
    when input lane k of that block is output lane n's source) and no requantization (the
    accumulator then holds the int8 value itself, which STORE.ACC8 writes). The padding lanes
    of the output (no source) get the zero point from the bias row. Exact."""
    n = cfg.n
    _need(len(in_shape) == 4, f"permute input shape must be NCHW, got {tuple(in_shape)}")
    b, c, h, w = (int(v) for v in in_shape)
    perm = [int(v) for v in perm]
    _need(sorted(perm) == list(range(c)), f"{perm[:8]}... is not a permutation of {c} channels")
    _check_ref(inp, n, "input")
    _check_ref(out, n, "output")
    nb = layout.blocks(c, n)
    tiles: dict[tuple[int, int], np.ndarray] = {}        # (out block, in block) -> tile
    for oc, ic in enumerate(perm):
        key = (oc // n, ic // n)
        if key not in tiles:
            tiles[key] = np.zeros((n, n), np.int8)
        tiles[key][ic % n, oc % n] = 1
    order = sorted(tiles)
    _need(len(order) <= cfg.wgt_depth, f"permute: {len(order)} weight tiles exceed WGT")
    blob = _Blob(consts, n)
    w_off = blob.add("weights", b"".join(tiles[k].tobytes() for k in order))
    bias = np.zeros(nb * n, np.int64)
    bias[c:] = zero_point
    bias_bytes, bias_rel = _bias_blob(bias.reshape(nb, n), [range(j, j + 1) for j in range(nb)])
    bias_off = blob.add("bias", bias_bytes)
    pixels = b * h * w
    # tiles of pixels: input rows (all blocks) in INP, accumulators (all blocks) in ACC
    per = min(cfg.inp_depth // (2 * nb), _region(cfg.acc_depth, 3, ACC_REGIONS) // nb, _LOOP,
              _XY)
    if per < 1:
        raise AccelKernelError(f"permute: {nb} channel blocks do not fit the scratchpads")
    chunks = [(p0, min(per, pixels - p0)) for p0 in range(0, pixels, per)]
    cap = _region(cfg.acc_depth, len(chunks), ACC_REGIONS)
    icap = _region(cfg.inp_depth, len(chunks), 2)
    steps = []
    hw = h * w
    for t, (p0, pp) in enumerate(chunks):
        abase = _base(t, len(chunks), ACC_REGIONS, cap)
        ibase = _base(t, len(chunks), 2, icap)
        loads = []
        if t == 0:
            loads += _load_contig(Buffer.WGT, 0, consts.slot, w_off, len(order), n * n)
        # the chunk's pixels of every input block (pixels of one image are contiguous per
        # block; a chunk may span images)
        for j in range(nb):
            loads += _pixel_rows(Buffer.INP, inp, ibase + j * per, p0, pp, j, nb, hw, n)
        for j in range(nb):
            loads += _bias_loads(consts.slot, bias_off + bias_rel[j], abase + j * per, pp, 1)
        compute = [W.gemm(acc_base=abase + ob * per, inp_base=ibase + cb * per,
                          wgt_base=i, outer=1, inner=pp, acc_si=1, inp_si=1)
                   for i, (ob, cb) in enumerate(order)]
        stores = []
        for j in range(nb):
            stores += _pixel_rows(None, out, abase + j * per, p0, pp, j, nb, hw, n)
        steps.append(_Step(loads, compute, stores, True))
    return Kernel(
        name, isa.Stream.from_words(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, (b, c, h, w), "int8", layout.act_bytes(c, h, w, n, b),
                           zero_point),),
        outputs=(TensorInfo("output", out, (b, c, h, w), "int8",
                            layout.act_bytes(c, h, w, n, b), zero_point),),
        consts=blob.done(),
        tiling={"tiles": len(order), "steps": len(steps), "pixels_per_step": per})


def _pixel_rows(buf: Buffer | None, ref: Ref, sp_base: int, p0: int, pp: int, block: int,
                nb: int, hw: int, n: int) -> list[int]:
    """LOAD (buf) or STORE.ACC8 (buf None) of pixels p0 .. p0+pp-1 (over all images, in
    order) of channel block `block`: one contiguous run per image they touch."""
    out = []
    done = 0
    while done < pp:
        p = p0 + done
        img, at = divmod(p, hw)
        k = min(pp - done, hw - at)
        off = ref.offset + ((img * nb + block) * hw + at) * n
        if buf is None:
            out.append(W.store(Buffer.ACC8, slot=ref.slot, sp_base=sp_base + done, offset=off,
                               y_size=1, x_size=k, y_stride=k))
        else:
            out += _load_contig(buf, sp_base + done, ref.slot, off, k, n)
        done += k
    return out

"""Conv2d and Gemm as an implicit GEMM on the N x N array: the tiling search, the weight-tile
order and the per-step instruction streams."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels import depthwise
from compiler.plugins.accel.kernels import words as W
from compiler.plugins.accel.kernels.base import (
    _LOOP,
    _PAD,
    _SI,
    _SO,
    _XY,
    _YSTRIDE,
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
from compiler.plugins.accel.kernels.pipeline import (
    _INSN_COST,
    _STEP_COST,
    ACC_REGIONS,
    BIAS_COPIES,
    INP_REGIONS,
    WGT_REGIONS,
    _balanced,
    _bias_blob,
    _bias_loads,
    _cdiv,
    _choose,
    _load,
    _load_contig,
    _pipe_cost,
    _pipeline,
    _Plan,
    _ranges,
    _region,
    _Step,
    _store,
    _tile_steps,
    _versions,
)
from pyhost.accel import layout
from pyhost.accel.timing import RTL_MEM_LATENCY, mem_cycles
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Opcode

# --- Conv2d and Gemm: implicit GEMM -------------------------------------------------------------

#: What one more accumulator row, input row and weight tile add to a GEMM word.
ACC_1, INP_1, WGT_1 = (W.step(Opcode.GEMM, f) for f in ("acc_base", "inp_base", "wgt_base"))

@dataclass(frozen=True)
class _Geom:
    b: int
    c: int
    h: int
    w: int
    co: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    pb: int
    pr: int       # right padding actually read (the conv's, trimmed to what the windows use)
    oh: int
    ow: int
    nbi: int
    nbo: int

    @property
    def wp(self) -> int:
        return self.pl + self.w + self.pr

    def rows_in(self, r: int) -> int:
        return (r - 1) * self.sh + (self.kh - 1) * self.dh + 1


def _conv_geom(in_shape: Sequence[int], w: np.ndarray, strides: Sequence[int],
               pads: Sequence[int], dilations: Sequence[int], n: int) -> _Geom:
    _need(len(in_shape) == 4, f"conv2d input shape must be NCHW, got {tuple(in_shape)}")
    b, c, h, wd = (int(v) for v in in_shape)
    _need(w.ndim == 4, f"conv2d weight must be (Cout, Cin, KH, KW), got {w.shape}")
    co, ci, kh, kw = (int(v) for v in w.shape)
    _need(ci == c, f"weight has {ci} input channels, the input {c}")
    sh, sw = (int(v) for v in strides)
    dh, dw = (int(v) for v in dilations)
    pt, pl, pb, pr = (int(v) for v in pads)
    _need(min(b, c, h, wd, co, kh, kw) >= 1, f"empty conv2d: input {tuple(in_shape)}, "
          f"weight {w.shape}")
    _need(sh >= 1 and sw >= 1 and dh >= 1 and dw >= 1, "strides and dilations must be >= 1")
    khe, kwe = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    for name, p, k in (("top", pt, khe), ("bottom", pb, khe), ("left", pl, kwe),
                       ("right", pr, kwe)):
        _need(0 <= p < k, f"padding {name}={p} must be below the (dilated) kernel extent {k}: "
              "a window entirely in the padding is not supported")
        _need(p <= _PAD, f"padding {name}={p} exceeds the LOAD padding field ({_PAD})")
    oh = (h + pt + pb - khe) // sh + 1
    ow = (wd + pl + pr - kwe) // sw + 1
    _need(oh >= 1 and ow >= 1, f"the kernel ({kh}x{kw}) is larger than the padded input")
    pr_used = max(0, (ow - 1) * sw + kwe - wd - pl)
    g = _Geom(b, c, h, wd, co, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr_used, oh, ow,
              layout.blocks(c, n), layout.blocks(co, n))
    _need(ow <= _LOOP and ow <= _SO, f"output width {ow} exceeds the GEMM loop fields "
          f"({min(_LOOP, _SO)}); split the image into column strips")
    _need(sh * g.wp <= _SO and sw <= _SI, f"stride x padded width {sh}x{g.wp} exceeds the GEMM "
          f"input stride fields ({_SO}, {_SI})")
    _need(wd <= _XY and wd <= _YSTRIDE, f"input width {wd} exceeds the LOAD size fields ({_XY})")
    return g


def _live_rows(live: np.ndarray, obg: int) -> np.ndarray:
    """Live tile pairs per (output-block group, input block)."""
    return np.add.reduceat(live.astype(np.int64), np.arange(0, live.shape[0], obg), axis=0)


#: `_sparse_profile` of the live pairs per (output-block group, input pass): (count, steps)
#: histograms and the last step's count
_Profile = tuple[list[tuple[int, int]], list[tuple[int, int]], int]


def _sparse_profile(cnt: np.ndarray) -> _Profile:
    """What `_sparse_pipe_cost` needs of the live pair counts (group, pass): (value, how many)
    over the passes before the last, the same over the last pass of every group but the last,
    and the last group's last pass."""
    def hist(a: np.ndarray) -> list[tuple[int, int]]:
        if a.size > 256:
            v, k = np.unique(a, return_counts=True)
            return list(zip(v.tolist(), k.tolist(), strict=True))
        return sorted(Counter(a.reshape(-1).tolist()).items())

    return hist(cnt[:, :-1]), hist(cnt[:-1, -1]), int(cnt[-1, -1])


def _sparse_pipe_cost(order: str, nrt: int, groups: int, passes: int,
                      profile: _Profile,
                      g_pair: int, q_tile: int, li: int, lw: int, lb: int) -> int:
    """`_pipe_cost` of a grouped conv, step by step: a (group, pass) step computes only its
    live tile pairs (`_sparse_profile` of their counts), so steps are uneven and max(compute,
    next step's loads) is taken per step. The loads that follow a step depend only on where it
    is in the nest: a step before its group's last pass is followed by a new input tile and
    weight chunk; after a group's last pass come, depending on the order, the next row tile's
    or group's loads; nothing after the last step."""
    inner, last_pass, last = profile

    def steps(hist: list[tuple[int, int]], q: int, load: int) -> int:
        total = 0
        for v, k in hist:
            c = v * g_pair + q + 1
            total += k * (c if c > load else load)
        return total

    c_last = last * g_pair + q_tile + 1
    cost = nrt * steps(inner, 0, li + lw)
    if order == "rt":
        # after (t, group, last pass): (t, next group, pass 0), or (t + 1, 0, 0)
        return (cost + nrt * steps(last_pass, q_tile, li * (passes > 1) + lw + lb)
                + (nrt - 1) * max(c_last, li + lw * (groups * passes > 1) + lb) + c_last)
    # "og": after (group, t, last pass): (group, t + 1, 0), or (next group, 0, 0)
    next_tile = li + lw * (passes > 1) + lb
    return (cost + (nrt - 1) * (steps(last_pass, q_tile, next_tile) + max(c_last, next_tile))
            + steps(last_pass, q_tile, li * (nrt * passes > 1) + lw + lb) + c_last)


def _conv_plans(g: _Geom, cfg: AccelConfig, params: int, live: np.ndarray | None = None,
                wp: int | None = None, taps: int | None = None) -> tuple[_Plan, ...]:
    """Candidate tilings. `live` (grouped convolutions): which (output block, input block)
    weight tiles are not structurally zero; only those are stored and multiplied. `wp`: the
    input tile's row pitch (default the padded width); `taps`: weight tiles and compute
    instructions per tile pair (default the kernel's taps; a depthwise Conv on DW: its
    passes). The search depends on nothing else, so layers of the same geometry (a network's
    repeated blocks) share one (`_conv_plans_of`, memoized)."""
    return _conv_plans_of(g, cfg, params,
                          None if live is None else (live.shape, live.astype(bool).tobytes()),
                          g.wp if wp is None else wp, g.kh * g.kw if taps is None else taps)


@functools.lru_cache(maxsize=1024)
def _conv_plans_of(g: _Geom, cfg: AccelConfig, params: int,
                   live_key: tuple[tuple[int, ...], bytes] | None, wp: int, taps: int
                   ) -> tuple[_Plan, ...]:
    """`_conv_plans` with `live` as (shape, bytes)."""
    live = None if live_key is None else np.frombuffer(live_key[1], bool).reshape(live_key[0])
    n = cfg.n
    total_tiles = (g.nbo * g.nbi if live is None else int(live.sum())) * taps
    resident = total_tiles <= cfg.wgt_depth
    acc_rows = cfg.acc_depth - params
    # the loads' cycles: the constants' once, an input tile's per (pass size, rows), the rest
    # per output group size
    lat = RTL_MEM_LATENCY
    padded = bool(g.pt or g.pb or g.pl or g.pr or wp != g.wp)
    params_load = mem_cycles(1, params * 4 * n, params, lat)
    resident_load = mem_cycles(1, total_tiles * n * n, total_tiles, lat)
    out = []
    # what does not depend on every loop: the output-group sizes, each (rows, group size)'s
    # bias loads and stores, each (pass size, group size)'s weight chunk (its load, and a
    # grouped conv's live pairs), each (pass size, rows)'s input tile load
    group_sizes = [obg for obg in _balanced(g.nbo) if obg <= _LOOP]
    tile_loads: dict[tuple[int, int], tuple[int, int]] = {}
    live_rows: dict[int, np.ndarray] = {}
    for cbp in _balanced(g.nbi):
        passes = _cdiv(g.nbi, cbp)
        counts: dict[int, tuple[int, _Profile | None, int]] = {}   # per obg: chunk, profile, lw
        for r in _balanced(g.oh):
            rin = g.rows_in(r)
            p = r * g.ow
            if rin > _XY or p > _XY or r > _LOOP or cbp * rin * wp > cfg.inp_depth:
                continue
            nrt = g.b * _cdiv(g.oh, r)
            if padded:
                li = cbp * mem_cycles(rin, g.w * n, rin * wp, lat)
            else:
                li = cbp * mem_cycles(1, rin * g.w * n, rin * wp, lat)
            q_tile_p = p + _INSN_COST
            for obg in group_sizes:
                if obg * p > acc_rows:
                    continue
                groups = _cdiv(g.nbo, obg)
                got = counts.get(obg)
                if got is None:
                    if live is None:
                        chunk, profile = obg * cbp, None
                    else:
                        rows_of = live_rows.get(obg)
                        if rows_of is None:
                            rows_of = live_rows[obg] = _live_rows(live, obg)
                        cnt = np.add.reduceat(rows_of, np.arange(0, g.nbi, cbp), axis=1)
                        chunk, profile = int(cnt.max()), _sparse_profile(cnt)
                    got = counts[obg] = (chunk, profile,
                                         mem_cycles(1, chunk * taps * n * n, chunk * taps, lat))
                chunk, profile, lw = got
                bs = tile_loads.get((r, obg))
                if bs is None:
                    bs = tile_loads[(r, obg)] = (
                        obg * mem_cycles(_cdiv(p, BIAS_COPIES), BIAS_COPIES * 4 * n, p, lat),
                        mem_cycles(obg, p * n, obg * p, lat))
                lb, st = bs
                first = li + lb + params_load + (resident_load if resident else lw)
                for order in ("rt", "og"):
                    inp_v, wgt_v, acc_v = _versions(order, nrt, groups, passes)
                    if resident:
                        wgt_v = 1
                    if (cbp * rin * wp > _region(cfg.inp_depth, inp_v, INP_REGIONS)
                            or obg * p > _region(acc_rows, acc_v, ACC_REGIONS)
                            or (not resident and chunk * taps
                                > _region(cfg.wgt_depth, wgt_v, WGT_REGIONS))):
                        continue
                    if profile is None:
                        cost = _pipe_cost(order, nrt, groups, passes,
                                          chunk * taps * q_tile_p, obg * p + _INSN_COST,
                                          0 if inp_v == 1 else li, 0 if wgt_v == 1 else lw, lb)
                    else:
                        cost = _sparse_pipe_cost(order, nrt, groups, passes, profile,
                                                 taps * q_tile_p, obg * p + _INSN_COST,
                                                 0 if inp_v == 1 else li,
                                                 0 if wgt_v == 1 else lw, lb)
                    cost = max(cost, acc_v * st) + first + st
                    cost += nrt * groups * passes * _STEP_COST
                    out.append(_Plan(r, obg, cbp, order, inp_v, wgt_v, acc_v, resident,
                                     int(cost)))
    return tuple(out)


def grouped_weight(w: np.ndarray, c_in: int, group: int, n: int
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """A grouped Conv's (Cout, Cin/group, KH, KW) weight as the dense (Cout, Cin, KH, KW) one
    (zero between groups) and the mask of (output block, input block) tile pairs that hold any
    of its weights: the structurally zero tiles are neither stored nor multiplied. group 1:
    the weight itself and None (every tile)."""
    _need(w.ndim == 4, f"conv2d weight must be (Cout, Cin/group, KH, KW), got {w.shape}")
    co, cig, kh, kw = (int(v) for v in w.shape)
    if group == 1:
        return w, None
    _need(group >= 1 and c_in % group == 0 and co % group == 0,
          f"group={group} must divide the input channels ({c_in}) and output channels ({co})")
    _need(cig * group == c_in, f"weight has {cig} input channels per group, the input "
          f"{c_in} / {group} = {c_in // group}")
    cog = co // group
    dense = np.zeros((co, c_in, kh, kw), w.dtype)
    for gi in range(group):
        dense[gi * cog:(gi + 1) * cog, gi * cig:(gi + 1) * cig] = w[gi * cog:(gi + 1) * cog]
    nbo, nbi = layout.blocks(co, n), layout.blocks(c_in, n)
    og = np.arange(nbo * n).clip(max=co - 1) // cog             # group of each output lane
    ig = np.arange(nbi * n).clip(max=c_in - 1) // cig
    olo, ohi = og.reshape(nbo, n).min(1), og.reshape(nbo, n).max(1)
    ilo, ihi = ig.reshape(nbi, n).min(1), ig.reshape(nbi, n).max(1)
    live = (olo[:, None] <= ihi[None, :]) & (ilo[None, :] <= ohi[:, None])
    return dense, live


def _weight_chunks(w: np.ndarray, n: int, groups: Sequence[range], passes: Sequence[range],
                   live: np.ndarray | None, dw_tiles: np.ndarray | None = None
                   ) -> tuple[list[bytes], list[dict[tuple[int, int], int]]]:
    """The weight chunks (one per (group, pass), see layout.conv_weight_tiles) holding only the
    live tile pairs, and per chunk the index of each (ob, cb) pair's first tile in it.
    `dw_tiles` (a depthwise Conv on DW, [block][pass] tiles, `depthwise.weight_tiles`): a live
    pair (ob, ob) holds block ob's DW tiles instead of its diagonal tap tiles."""
    if dw_tiles is not None:
        assert live is not None
        per = dw_tiles.shape[1]
        chunks, index = [], []
        for gr in groups:
            for pa in passes:
                pairs = [(ob, cb) for ob in gr for cb in pa if live[ob, cb]]
                assert all(ob == cb for ob, cb in pairs), "a depthwise Conv's live pairs"
                chunks.append(b"".join(np.ascontiguousarray(dw_tiles[ob]).tobytes()
                                       for ob, _ in pairs))
                index.append({pc: i * per for i, pc in enumerate(pairs)})
        return chunks, index
    if live is None:
        chunks = layout.conv_weight_tiles(w, n, groups, passes)
        taps = w.shape[2] * w.shape[3]
        index = [{(ob, cb): (j * len(pa) + k) * taps for j, ob in enumerate(gr)
                  for k, cb in enumerate(pa)} for gr in groups for pa in passes]
        return chunks, index
    t = layout.weight_tiles(w, n)
    taps = t.shape[2] * t.shape[3]
    chunks, index = [], []
    for gr in groups:
        for pa in passes:
            pairs = [(ob, cb) for ob in gr for cb in pa if live[ob, cb]]
            chunks.append(b"".join(np.ascontiguousarray(t[ob, cb]).tobytes()
                                   for ob, cb in pairs))
            index.append({pc: i * taps for i, pc in enumerate(pairs)})
    return chunks, index


def conv2d(in_shape: Sequence[int], q: Quant, *, inp: Ref, out: Ref, consts: Ref,
           strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
           dilations: Sequence[int] = (1, 1), group: int = 1,
           act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
           name: str = "conv2d") -> Kernel:
    """Quantized Conv2d, bit-exact with compiler.quantize.reference.qconv (+ clamp to `act`).

    `in_shape` is NCHW (batch images one after the other); `q` the quantizer's dict (int8
    `weight` (Cout, Cin, KH, KW), int32 `bias_corrected`, `multiplier`, `shift`,
    `input_zero_point`, `output_zero_point`); `pads` in ONNX order (top, left, bottom, right);
    `act` the fused ReLU/Clip as (lo, hi) in the output's quantized domain (`relu_bounds`).
    Implicit GEMM: for each (output block, input block, kh, kw) one GEMM over a tile of output
    rows x the full width, reading the padded input tile in INP with the GEMM strides.
    """
    n = cfg.n
    _need(len(in_shape) == 4, f"conv2d input shape must be NCHW, got {tuple(in_shape)}")
    w, live = grouped_weight(np.asarray(q["weight"]), int(in_shape[1]), int(group), n)
    g = _conv_geom(in_shape, w, strides, pads, dilations, n)
    zin = _int8("input zero point", q["input_zero_point"])
    zout = _int8("output zero point", q["output_zero_point"])
    lo, hi = _bounds(act)
    bias = np.asarray(q["bias_corrected"], np.int64).reshape(-1)
    _need(bias.size == g.co, f"{bias.size} bias values for {g.co} output channels")
    _need(bool((np.abs(bias) < 2**31).all()), "bias values must fit int32")
    _check_ref(inp, n, "input")
    _check_ref(out, n, "output")
    params = 2 * g.nbo
    _need(params < cfg.acc_depth, f"{g.nbo} output blocks need {params} ACC rows of "
          "requantization parameters")
    # a depthwise Conv runs on the array's depthwise mode (DW) where its geometry allows
    dwp = None
    if depthwise.is_depthwise(int(group), g.c, g.co) and depthwise.fits(cfg.acc_depth,
                                                                        cfg.wgt_depth):
        dwp = depthwise.plan(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pl, g.pr, g.w, n)
    pitch = g.wp if dwp is None else dwp.pitch
    taps = g.kh * g.kw if dwp is None else len(dwp.passes)     # weight tiles per live pair
    plan = _choose(_conv_plans(g, cfg, params, live, pitch, taps),
                   f"conv2d {tuple(in_shape)} x {w.shape}",
                   "use a smaller image width or fewer channels")
    groups = _ranges(g.nbo, plan.obg)
    passes = _ranges(g.nbi, plan.cbp)
    blob = _Blob(consts, n)
    cgroups = groups if not plan.resident else [range(0, g.nbo)]
    cpasses = passes if not plan.resident else [range(0, g.nbi)]
    wchunks, tile_index = _weight_chunks(
        w, n, cgroups, cpasses, live,
        None if dwp is None else depthwise.weight_tiles(np.asarray(q["weight"]), dwp, n))
    w_off = blob.add("weights", b"".join(wchunks))
    chunk_off = {}
    o = w_off
    for gi in range(len(cgroups)):
        for pi in range(len(cpasses)):
            chunk_off[(gi, pi)] = o
            o += len(wchunks[gi * len(cpasses) + pi])
    n_live = g.nbo * g.nbi if live is None else int(live.sum())
    bias_bytes, bias_rel = _bias_blob(layout.lane_rows(bias, n),
                                      [range(ob, ob + 1) for ob in range(g.nbo)])
    bias_off = blob.add("bias", bias_bytes)
    req_off = blob.add("requant", layout.acc_rows_bytes(
        _requant_rows(q["multiplier"], q["shift"], g.nbo, n)))
    _need(len(np.asarray(q["multiplier"]).reshape(-1)) == g.co,
          "one multiplier and shift per output channel")

    # everything the instructions depend on (the rest of the blob is values): layers of the
    # same geometry, quantization bounds and places share one program (_PROGRAMS)
    key = (g, cfg, params, plan, None if live is None else live.tobytes(), dwp, pitch, taps,
           zin, zout, lo, hi, inp, out, consts, w_off, bias_off, req_off, n_live,
           tuple(chunk_off.items()), tuple(len(c) for c in wchunks), tuple(bias_rel),
           tuple(tuple(d.items()) for d in tile_index))
    program = _PROGRAMS.get(key)
    if program is None:
        program = _conv_program(g, cfg, params, plan, groups, passes, live, dwp, pitch, taps,
                                zin, zout, lo, hi, inp, out, consts, w_off, bias_off, req_off,
                                n_live, chunk_off, wchunks, bias_rel, tile_index)
        if len(_PROGRAMS) >= _PROGRAMS_MAX:
            _PROGRAMS.clear()
        _PROGRAMS[key] = program
    insns, nsteps = program
    return Kernel(
        name, insns,
        inputs=(TensorInfo("input", inp, (g.b, g.c, g.h, g.w), "int8",
                           layout.act_bytes(g.c, g.h, g.w, n, g.b), zin),),
        outputs=(TensorInfo("output", out, (g.b, g.co, g.oh, g.ow), "int8",
                            layout.act_bytes(g.co, g.oh, g.ow, n, g.b),
                            min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"rows": plan.rows, "out_blocks": plan.obg, "in_blocks": plan.cbp,
                "order": plan.order, "steps": nsteps, "weights_resident": plan.resident,
                "inp_versions": plan.inp_v, "acc_versions": plan.acc_v,
                "out_shape": (g.b, g.co, g.oh, g.ow),
                **({} if live is None else {"group": int(group), "live_tiles": n_live,
                                            "tiles": g.nbo * g.nbi}),
                **({} if dwp is None else {"depthwise_mode": True, "dw_passes": len(dwp.passes),
                                           "dw_pitch": dwp.pitch})})


#: `_conv_program`'s results by everything they depend on (bounded: cleared when full)
_PROGRAMS: dict[tuple, tuple[isa.Stream, int]] = {}
_PROGRAMS_MAX = 256


def _conv_program(g: _Geom, cfg: AccelConfig, params: int, plan: _Plan, groups: list[range],
                  passes: list[range], live: np.ndarray | None, dwp: depthwise.DwPlan | None,
                  pitch: int, taps: int, zin: int, zout: int, lo: int, hi: int, inp: Ref,
                  out: Ref, consts: Ref, w_off: int, bias_off: int, req_off: int, n_live: int,
                  chunk_off: dict[tuple[int, int], int], wchunks: list[bytes],
                  bias_rel: list[int], tile_index: list[dict[tuple[int, int], int]]
                  ) -> tuple[isa.Stream, int]:
    """`conv2d`'s instruction stream and its number of pipeline steps, from the plan and the
    constant blob's layout (section offsets, weight chunks and the index of each tile pair's
    first tile in its chunk)."""
    n = cfg.n
    region = g.rows_in(plan.rows) * pitch         # INP rows of one input block of a tile
    # per tap (ky, kx): its first INP row and weight tile after the pair's, and what they add
    # to a GEMM word
    tap_rows = [ky * g.dh * g.wp + kx * g.dw for ky in range(g.kh) for kx in range(g.kw)]
    tap_steps = [r * INP_1 + t * WGT_1 for t, r in enumerate(tap_rows)]
    xl, xr = (0, 0) if dwp is None else (dwp.extra_left, dwp.extra_right)
    rtiles = [(b, oy0, min(plan.rows, g.oh - oy0)) for b in range(g.b)
              for oy0 in range(0, g.oh, plan.rows)]
    steps: list[_Step] = []
    live_pairs: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    bias_loads: dict[tuple[int, int, int], list[int]] = {}
    dw_fields = [] if dwp is None else [dwp.insn_fields(d, g.dh) for d in dwp.passes]
    for si, rt, gi, pi, new, inp_base, wgt_base, acc_base in _tile_steps(
            plan, len(rtiles), len(groups), len(passes), cfg, params):
        b, oy0, rr = rtiles[rt]
        gr, pa = groups[gi], passes[pi]
        p = rr * g.ow
        loads: list[int] = []
        if si == 0:
            if plan.resident:
                loads += _load_contig(Buffer.WGT, 0, consts.slot, w_off, n_live * taps, n * n)
            loads += _load_contig(Buffer.ACC, 0, consts.slot, req_off, params, 4 * n)
        if new["inp"]:
            iy_lo = oy0 * g.sh - g.pt
            iy_hi = iy_lo + g.rows_in(rr) - 1
            top, bot = max(0, -iy_lo), max(0, iy_hi - (g.h - 1))
            y0 = max(iy_lo, 0)
            ys = min(iy_hi, g.h - 1) - y0 + 1
            for j, cb in enumerate(pa):
                loads += _load(
                    Buffer.INP, n, slot=inp.slot, sp_base=inp_base + j * region,
                    offset=inp.offset + ((b * g.nbi + cb) * g.h + y0) * g.w * n,
                    y_size=ys, x_size=g.w, y_stride=g.w, pad_top=top, pad_bottom=bot,
                    pad_left=g.pl + xl, pad_right=g.pr + xr, pad_value=zin)
        if new["wgt"] and not plan.resident:
            loads += _load_contig(Buffer.WGT, wgt_base, consts.slot, chunk_off[(gi, pi)],
                                  len(wchunks[gi * len(passes) + pi]) // (n * n), n * n)
        if new["acc"]:
            for j, ob in enumerate(gr):
                # the same for every row tile that lands in this ACC region
                key = (ob, acc_base + j * p, p)
                bias = bias_loads.get(key)
                if bias is None:
                    bias = bias_loads[key] = _bias_loads(consts.slot, bias_off + bias_rel[ob],
                                                         acc_base + j * p, p, 1)
                loads += bias
        compute: list[int] = []
        index = tile_index[0] if plan.resident else tile_index[gi * len(passes) + pi]
        # one GEMM per (output block, input block, tap): the step's first GEMM word plus the
        # pair's ACC rows, INP rows and first tile, plus the tap's (words.step)
        gemm0 = W.gemm(acc_base=acc_base, inp_base=inp_base, outer=rr, inner=g.ow,
                       acc_so=g.ow, acc_si=1, inp_so=g.sh * g.wp, inp_si=g.sw)
        top_acc = top_inp = top_wt = -1
        pairs = live_pairs.get((gi, pi))
        if pairs is None:
            # the (output block, input block) pairs of the step that hold weights, in order
            if live is None:
                pairs = [(j, ob, k, cb) for j, ob in enumerate(gr) for k, cb in enumerate(pa)]
            else:
                jj, kk = np.nonzero(live[gr.start:gr.stop, pa.start:pa.stop])
                pairs = [(j, gr.start + j, k, pa.start + k)
                         for j, k in zip(jj.tolist(), kk.tolist(), strict=True)]
            live_pairs[(gi, pi)] = pairs
        for j, ob, k, cb in pairs:
            first = index[(ob, cb)] + (0 if plan.resident else wgt_base)
            if dwp is not None:
                for t, f in enumerate(dw_fields):
                    compute.append(W.dw(
                        acc_base=acc_base + j * p, inp_base=inp_base + k * region
                        + f["offset"], wgt_base=first + t, outer=rr, inner=g.ow,
                        acc_so=g.ow, acc_si=1, inp_so=g.sh * pitch, inp_si=g.sw,
                        taps=f["taps"], tap_w=f["tap_w"], tap_pitch=f["tap_pitch"]))
                continue
            top_acc, top_inp, top_wt = max(top_acc, j * p), max(top_inp, k * region), \
                max(top_wt, first)
            pair = gemm0 + j * p * ACC_1 + k * region * INP_1 + first * WGT_1
            compute += [pair + d for d in tap_steps]
        if top_wt >= 0:
            # every field of those GEMMs lies between the first word's and these, so each sum
            # above is the encoding: the range check of the whole step
            W.gemm(acc_base=acc_base + top_acc, inp_base=inp_base + top_inp + tap_rows[-1],
                   wgt_base=top_wt + len(tap_rows) - 1, outer=rr, inner=g.ow, acc_so=g.ow,
                   acc_si=1, inp_so=g.sh * g.wp, inp_si=g.sw)
        stores: list[int] = []
        if not compute and pi != len(passes) - 1:
            # a grouped conv's step whose pass meets none of its group's inputs: the pipeline
            # still needs one compute instruction to carry the step's tokens (no iterations)
            compute.append(W.alu(AluOp.ADD, imm=0, outer=0, inner=0))
        if pi == len(passes) - 1:
            compute.append(W.req(zout, lo, hi, dst_base=acc_base, src_base=2 * gr.start,
                                 outer=len(gr), inner=p, dst_so=p, dst_si=1, src_so=2))
            obase = out.offset + ((b * g.nbo + gr.start) * g.oh + oy0) * g.ow * n
            if g.oh * g.ow <= _YSTRIDE:
                stores += _store(Buffer.ACC8, n, slot=out.slot, sp_base=acc_base, offset=obase,
                                 y_size=len(gr), x_size=p, y_stride=g.oh * g.ow)
            else:
                for j in range(len(gr)):
                    stores.append(W.store(Buffer.ACC8, slot=out.slot, sp_base=acc_base + j * p,
                                          offset=obase + j * g.oh * g.ow * n, y_size=1,
                                          x_size=p, y_stride=p))
        steps.append(_Step(loads, compute, stores, new["acc"]))
    return isa.Stream.from_words(_pipeline(steps)), len(steps)


def conv2d_output_shape(in_shape: Sequence[int], weight_shape: Sequence[int],
                        strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                        dilations: Sequence[int] = (1, 1)) -> tuple[int, int, int, int]:
    """NCHW output shape of `conv2d` (pads top, left, bottom, right), e.g. to plan memory
    before generating the kernel."""
    b, _, h, w = in_shape
    co, _, kh, kw = weight_shape
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
    return int(b), int(co), int(oh), int(ow)


def _gemm_plans(m: int, kb: int, nbo: int, cfg: AccelConfig, params: int, elem_out: int
                ) -> list[_Plan]:
    n = cfg.n
    total_tiles = kb * nbo
    resident = total_tiles <= cfg.wgt_depth
    acc_rows = cfg.acc_depth - params
    out = []
    for kbp in _balanced(kb):
        passes = _cdiv(kb, kbp)
        if kbp > _SO or kbp > _XY:
            continue
        for mt in _balanced(m):
            if mt > _LOOP or mt > _XY or kbp * mt > cfg.inp_depth:
                continue
            nmt = _cdiv(m, mt)
            for obg in _balanced(nbo):
                if obg > _XY or obg > _SO or obg * mt > acc_rows:
                    continue
                groups = _cdiv(nbo, obg)
                for order in ("rt", "og"):
                    inp_v, wgt_v, acc_v = _versions(order, nmt, groups, passes)
                    if resident:
                        wgt_v = 1
                    if (kbp * mt > _region(cfg.inp_depth, inp_v, INP_REGIONS)
                            or obg * mt > _region(acc_rows, acc_v, ACC_REGIONS)
                            or (not resident
                                and obg * kbp > _region(cfg.wgt_depth, wgt_v, WGT_REGIONS))):
                        continue
                    lat = RTL_MEM_LATENCY
                    if kbp == kb:
                        li = mem_cycles(1, mt * kb * n, mt * kb, lat)
                    else:
                        li = mem_cycles(mt, kbp * n, mt * kbp, lat)
                    lw = mem_cycles(1, obg * kbp * n * n, obg * kbp, lat)
                    copies = max(1, BIAS_COPIES // obg)
                    lb = mem_cycles(_cdiv(mt, copies), copies * obg * 4 * n, mt * obg, lat)
                    if obg == nbo:
                        st = mem_cycles(1, mt * obg * elem_out, mt * obg, lat)
                    else:
                        st = mem_cycles(mt, obg * elem_out, mt * obg, lat)
                    first = li + lb + mem_cycles(1, params * 4 * n, params, lat) + (
                        mem_cycles(1, total_tiles * n * n, total_tiles, lat) if resident else lw)
                    cost = _pipe_cost(order, nmt, groups, passes,
                                      obg * kbp * (mt + _INSN_COST), obg * mt + _INSN_COST,
                                      0 if inp_v == 1 else li, 0 if wgt_v == 1 else lw, lb)
                    cost = max(cost, acc_v * st) + first + st
                    cost += nmt * groups * passes * _STEP_COST
                    out.append(_Plan(mt, obg, kbp, order, inp_v, wgt_v, acc_v, resident,
                                     cost))
    return out


def _gemm_kernel(m: int, w_kn: np.ndarray, bias: np.ndarray, requant: tuple | None,
                 inp: Ref, out: Ref, consts: Ref, cfg: AccelConfig, name: str, zin: int = 0
                 ) -> Kernel:
    n = cfg.n
    _need(w_kn.ndim == 2, f"gemm weight must be 2-D, got {w_kn.shape}")
    k, nout = (int(v) for v in w_kn.shape)
    _need(m >= 1 and k >= 1 and nout >= 1, f"empty gemm {m}x{k}x{nout}")
    kb, nbo = layout.blocks(k, n), layout.blocks(nout, n)
    bias = np.asarray(bias, np.int64).reshape(-1)
    _need(bias.size == nout, f"{bias.size} bias values for {nout} outputs")
    _need(bool((np.abs(bias) < 2**31).all()), "bias values must fit int32")
    elem_out = n if requant else 4 * n
    _check_ref(inp, n, "input")
    _check_ref(out, elem_out, "output")
    params = 2 * nbo if requant else 0
    _need(params < cfg.acc_depth, f"{nbo} output blocks need {params} ACC rows of "
          "requantization parameters")
    _need(kb <= _YSTRIDE and nbo <= _YSTRIDE, "K or N exceeds the LOAD/STORE stride field")
    plan = _choose(_gemm_plans(m, kb, nbo, cfg, params, elem_out), f"gemm {m}x{k}x{nout}",
                   "the weight or the accumulators are too large")
    groups = _ranges(nbo, plan.obg)
    passes = _ranges(kb, plan.cbp)
    blob = _Blob(consts, n)
    gl = groups if not plan.resident else [range(0, nbo)]
    pl = passes if not plan.resident else [range(0, kb)]
    w_off = blob.add("weights", layout.gemm_weight_tiles(w_kn, n, gl, pl))
    chunk_off = {}
    o = w_off
    for gi, gr in enumerate(gl):
        for pi, pa in enumerate(pl):
            chunk_off[(gi, pi)] = o
            o += len(gr) * len(pa) * n * n
    bias_bytes, bias_rel = _bias_blob(layout.lane_rows(bias, n), groups)
    bias_off = blob.add("bias", bias_bytes)
    if requant:
        mult, shift, zout, lo, hi = requant
        _need(np.asarray(mult).size == nout, "one multiplier and shift per output")
        req_off = blob.add("requant", layout.acc_rows_bytes(_requant_rows(mult, shift, nbo, n)))
    mtiles = [(m0, min(plan.rows, m - m0)) for m0 in range(0, m, plan.rows)]
    #: what the GEMMs of a step add to its first word, by (obg, kbp): a block (words.grid)
    grids: dict[tuple[int, int], np.ndarray] = {}
    steps: list[_Step] = []
    for si, t, gi, pi, new, inp_base, wgt_base, acc_base in _tile_steps(
            plan, len(mtiles), len(groups), len(passes), cfg, params):
        m0, mt = mtiles[t]
        gr, pa = groups[gi], passes[pi]
        obg, kbp = len(gr), len(pa)
        loads: list[int] = []
        if si == 0:
            if plan.resident:
                loads += _load_contig(Buffer.WGT, 0, consts.slot, w_off, kb * nbo, n * n)
            if requant:
                loads += _load_contig(Buffer.ACC, 0, consts.slot, req_off, params, 4 * n)
        if new["inp"]:
            loads += _load(Buffer.INP, n, slot=inp.slot, sp_base=inp_base,
                           offset=inp.offset + (m0 * kb + pa.start) * n, y_size=mt,
                           x_size=kbp, y_stride=kb)
        if new["wgt"] and not plan.resident:
            loads += _load_contig(Buffer.WGT, wgt_base, consts.slot, chunk_off[(gi, pi)],
                                  obg * kbp, n * n)
        if new["acc"]:
            loads += _bias_loads(consts.slot, bias_off + bias_rel[gi], acc_base, mt, obg)
        # GEMM (j, kk): output block j (ACC row), input block kk (INP row), weight tile
        # w0 + j * per_ob + kk; as words, the first one plus j columns and kk rows (words.step)
        w0, per_ob = (gr.start * kb + pa.start, kb) if plan.resident else (wgt_base, kbp)
        first = W.gemm(acc_base=acc_base, inp_base=inp_base, wgt_base=w0, outer=mt, inner=1,
                       acc_so=obg, inp_so=kbp)
        # the last GEMM has the largest fields: checked, every sum below is the encoding
        W.gemm(acc_base=acc_base + obg - 1, inp_base=inp_base + kbp - 1,
               wgt_base=w0 + (obg - 1) * per_ob + kbp - 1, outer=mt, inner=1, acc_so=obg,
               inp_so=kbp)
        offsets = grids.get((obg, kbp))
        if offsets is None:
            col, row = ACC_1 + per_ob * WGT_1, INP_1 + WGT_1
            offsets = grids[(obg, kbp)] = W.block(
                [j * col + kk * row for j in range(obg) for kk in range(kbp)])
        compute = W.grid(first, offsets)
        stores: list[int] = []
        if pi == len(passes) - 1:
            if requant:
                compute = np.concatenate([compute, W.block([W.req(
                    zout, lo, hi, dst_base=acc_base, src_base=2 * gr.start, outer=mt,
                    inner=obg, dst_so=obg, dst_si=1, src_si=2)])])
            stores += _store(Buffer.ACC8 if requant else Buffer.ACC, elem_out, slot=out.slot,
                             sp_base=acc_base,
                             offset=out.offset + (m0 * nbo + gr.start) * elem_out,
                             y_size=mt, x_size=obg, y_stride=nbo)
        steps.append(_Step(loads, compute, stores, new["acc"]))
    insns = W.stream(_pipeline(steps))
    zfill = 0
    if requant:
        zfill = min(max(requant[2], requant[3]), requant[4])
    return Kernel(
        name, insns,
        inputs=(TensorInfo("input", inp, (m, k, 1, 1), "int8", layout.act_bytes(k, 1, 1, n, m),
                           zin),),
        outputs=(TensorInfo("output", out, (m, nout, 1, 1), "int8" if requant else "int32",
                            layout.act_bytes(nout, 1, 1, n, m, 1 if requant else 4), zfill),),
        consts=blob.done(),
        tiling={"rows": plan.rows, "out_blocks": plan.obg, "in_blocks": plan.cbp,
                "order": plan.order, "steps": len(steps), "weights_resident": plan.resident,
                "inp_versions": plan.inp_v, "acc_versions": plan.acc_v})


def gemm(m: int, q: Quant, *, inp: Ref, out: Ref, consts: Ref,
         act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
         name: str = "gemm") -> Kernel:
    """Quantized Gemm / fully connected: (M, K) int8 @ (K, Nout) -> int8 (M, Nout), bit-exact
    with compiler.quantize.reference.qgemm (+ clamp to `act`).

    `q` is the quantizer's dict (`weight` with `weight_axis`, `bias_corrected`, `multiplier`,
    `shift`, `input_zero_point`, `output_zero_point`). Input and output are rows of K/N (N/N)
    blocks (`layout.pack_rows`); the input's padding lanes meet zero weights, so their contents
    do not matter (by convention they hold the zero point, as every kernel's outputs do).
    """
    w = np.asarray(q["weight"])
    _need(w.ndim == 2, f"gemm weight must be 2-D, got {w.shape}")
    w_kn = w.T if int(q["weight_axis"]) == 0 else w
    zout = _int8("output zero point", q["output_zero_point"])
    zin = _int8("input zero point", q["input_zero_point"])
    lo, hi = _bounds(act)
    return _gemm_kernel(int(m), np.asarray(w_kn), q["bias_corrected"],
                        (q["multiplier"], q["shift"], zout, lo, hi), inp, out, consts, cfg, name,
                        zin)


def gemm_int32(m: int, weight_kn: np.ndarray, *, inp: Ref, out: Ref, consts: Ref,
               bias: np.ndarray | None = None, cfg: AccelConfig = DEFAULT_CFG,
               name: str = "gemm_int32") -> Kernel:
    """(M, K) int8 @ (K, Nout) int8 (+ int32 bias) -> int32 (M, Nout) with STORE.ACC, no
    requantization: a direct test of the array (int32 wrap-around like the hardware)."""
    w = np.asarray(weight_kn)
    b = np.zeros(w.shape[1] if w.ndim == 2 else 0, np.int64) if bias is None else bias
    return _gemm_kernel(int(m), w, b, None, inp, out, consts, cfg, name)

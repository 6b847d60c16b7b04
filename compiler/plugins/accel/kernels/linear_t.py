"""A linear layer in the transposed activation layout of docs/transformers.md: Y^T = W X^T + b,
requantized per output feature to int8 and stored tile-major transposed for the next layer (the
encoder's projections and feed-forward layers, `kernels.encoder.linear`).

Activations (int8, tile-major transposed, see kernels/attention.py): X^T's element (J, f) =
tokens J*N .. J*N + N-1 of input feature f at byte (J * d_in + f) * N; its N x N tiles load
as weight tiles. The layer's weights are the *input rows*: row (D, e) = W[e][D*N .. D*N + N-1],
so one GEMM per (token block J, input block D) runs over the output features of a group with
the tile of X^T held, N x N MACs per cycle: the array is full whatever the sequence length.

Tiling (`plan_linear`): a tile of ``tj`` token blocks x a group of ``eo`` output features in the
accumulator, the input features in passes of ``dk`` blocks; the loop nest runs token tiles
outermost, then groups, then passes, as the software pipeline of `pipeline._pipeline` (the
load unit fills the next weight chunk and X^T tiles while the array computes, the store unit
drains the previous tile). A tile's accumulator rows start as its bias (a LOAD.ACC that
repeats the group's bias rows for every token block) followed by the group's requantization
rows; after its last pass one REQ per tile and a STORE.ACC8 of tj x eo elements. A region
that never changes (one group and one pass: the weights; one token tile and one pass: X^T) is
loaded once and kept. The plan is the cheapest by `pipeline._pipe_cost`-style accounting with
the RTL's memory latency.

Constants (`LinearT.blob`, placed at the program's ``consts``, a `base._Blob`): the weight
rows chunk by chunk (group, pass: dk x eo rows of N bytes, row (dd, e)), then per group its
bias rows (eo rows of N int32 lanes, the bias in every lane) and requantization rows (eo pairs:
multiplier, shift), each part aligned to a weight tile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels import words as W
from compiler.plugins.accel.kernels.base import _LOOP, _XY, Ref, _Blob
from compiler.plugins.accel.kernels.pipeline import (
    ACC_REGIONS,
    INP_REGIONS,
    WGT_REGIONS,
    _load_contig,
    _pipeline,
    _region,
    _Regions,
    _Step,
)
from pyhost.accel.timing import RTL_MEM_LATENCY, mem_cycles
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import Buffer


class LinearTError(ValueError):
    """A layer the program cannot be made for (shapes, scratchpad)."""


@dataclass(frozen=True)
class LinearT:
    """The program (END included), its constant blob and the tiling."""

    program: list[isa.Insn]
    blob: bytes
    plan: LinearPlan | None = None


@dataclass(frozen=True)
class LinearPlan:
    """Token blocks per tile, output features per group, input blocks per pass, the regions'
    versions and the estimated cycles the plan was chosen by."""

    tj: int
    eo: int
    dk: int
    inp_v: int
    wgt_v: int
    acc_v: int
    cost: int


def as_ref(where: int | Ref) -> Ref:
    """A byte offset of slot 0 (the stand-alone programs' convention) or a Ref as it is."""
    return where if isinstance(where, Ref) else Ref(0, int(where))


def _sizes(total: int) -> list[int]:
    """Candidate chunk sizes of ``total``: the balanced splits (largest first)."""
    return sorted({-(-total // k) for k in range(1, total + 1)}, reverse=True)


@functools.lru_cache(maxsize=256)
def plan_linear(cfg: AccelConfig, nb: int, db: int, d_out: int) -> LinearPlan:
    """The cheapest tiling of a (nb token blocks) x (db input blocks) -> d_out layer that
    fits the scratchpads (LinearTError if none does)."""
    n = cfg.n
    best: LinearPlan | None = None
    for dk in _sizes(db):
        passes = -(-db // dk)
        for tj in _sizes(nb):
            tiles = -(-nb // tj)
            for eo in _sizes(d_out):
                groups = -(-d_out // eo)
                inp_v = 1 if groups * passes == 1 else tiles * groups * passes
                wgt_v = 1 if tiles * passes == 1 else tiles * groups * passes
                acc_v = tiles * groups
                if (dk * eo > _region(cfg.inp_depth, inp_v, INP_REGIONS)
                        or tj * dk > _region(cfg.wgt_depth, wgt_v, WGT_REGIONS)
                        or tj * eo + 2 * eo > _region(cfg.acc_depth, acc_v, ACC_REGIONS)
                        or eo > _LOOP or tj * eo > min(_LOOP, _XY) or dk * eo > _XY
                        or 2 * eo > _XY):
                    continue
                lat = RTL_MEM_LATENCY
                gemm = tj * dk * (eo + 1)
                req = tj * eo + 1
                l_w = mem_cycles(1, dk * eo * n, dk * eo, lat)
                l_x = mem_cycles(tj, dk * n * n, tj * dk, lat)
                l_b = mem_cycles(tj, eo * 4 * n, tj * eo, lat) + mem_cycles(
                    1, 2 * eo * 4 * n, 2 * eo, lat)
                st = mem_cycles(tj, eo * n, tj * eo, lat)
                steps = tiles * groups * passes
                # a step costs max(its compute, the next step's loads); the stores of a tile
                # overlap the next tile's compute
                per_step = max(gemm + 4 * tj * dk, (l_w if inp_v > 1 else 0)
                               + (l_x if wgt_v > 1 else 0))
                cost = (steps * per_step + tiles * groups * (max(req, st) + l_b // passes)
                        + l_w + l_x + 8 * steps)
                p = LinearPlan(tj, eo, dk, inp_v, wgt_v, acc_v, cost)
                if best is None or (p.cost, -p.eo, -p.tj) < (best.cost, -best.eo, -best.tj):
                    best = p
    if best is None:
        raise LinearTError(f"a {nb * n}-token layer of {db * n} -> {d_out} features does not "
                           "fit the scratchpads even with one token block, one output feature "
                           "and one input block per tile")
    return best


def linear_t(cfg: AccelConfig, tokens: int, weights: np.ndarray, bias: np.ndarray,
             multiplier: np.ndarray, shift: np.ndarray, zero_point: int = 0, *,
             x: int | Ref, consts: int | Ref, y: int | Ref) -> LinearT:
    """Y^T = requantize(W X^T + bias) for int8 ``weights`` (d_out x d_in), int32 ``bias``,
    per-output-feature ``multiplier`` / ``shift`` (pyhost.fixedpoint's form) and the output
    zero point. ``x``, ``consts``, ``y``: where X^T (tile-major transposed int8, tokens x d_in),
    the blob and Y^T (same layout, tokens x d_out) are (a `Ref`, or a byte offset of slot
    0)."""
    x, consts, y = as_ref(x), as_ref(consts), as_ref(y)
    n = cfg.n
    d_out, d_in = weights.shape
    if tokens % n or d_in % n or tokens <= 0 or d_in <= 0 or d_out <= 0:
        raise LinearTError(f"tokens {tokens} and d_in {d_in} must be positive multiples of "
                           f"N = {n}")
    nb, db = tokens // n, d_in // n
    plan = plan_linear(cfg, nb, db, d_out)
    tj, eo, dk = plan.tj, plan.eo, plan.dk
    tiles = [range(a, min(a + tj, nb)) for a in range(0, nb, tj)]
    groups = [range(a, min(a + eo, d_out)) for a in range(0, d_out, eo)]
    passes = [range(a, min(a + dk, db)) for a in range(0, db, dk)]

    # constants: weight chunks (group, pass), then per group bias and requantization rows
    w_rows = np.asarray(weights, np.int8).reshape(d_out, db, n)
    lanes = np.ones((1, n), np.int64)
    blob = _Blob(consts, n)
    w_off = {(gi, pi): blob.add(f"weights {gi}.{pi}", np.ascontiguousarray(
        w_rows[g.start:g.stop, p.start:p.stop].transpose(1, 0, 2)).tobytes())
        for gi, g in enumerate(groups) for pi, p in enumerate(passes)}
    b64 = np.asarray(bias, np.int64)
    prm = np.stack([np.asarray(multiplier, np.int64), np.asarray(shift, np.int64)], 1)
    b_off, p_off = {}, {}
    for gi, g in enumerate(groups):
        b_off[gi] = blob.add(f"bias {gi}",
                             (b64[g.start:g.stop, None] * lanes).astype("<i4").tobytes())
        p_off[gi] = blob.add(f"requantization {gi}", (prm[g.start:g.stop].reshape(-1, 1)
                                                      * lanes).astype("<i4").tobytes())

    cs = consts.slot
    # the weights (INP) change per group and pass, X^T's tiles (WGT) per token tile and pass
    rot = _Regions(cfg, plan.inp_v, plan.wgt_v, plan.acc_v)
    steps = []
    for ti, t in enumerate(tiles):
        for gi, g in enumerate(groups):
            for pi, p in enumerate(passes):
                new, (ib, wb, ab) = rot.step((gi, pi), (ti, pi), (ti, gi))
                ne, nt, nd = len(g), len(t), len(p)
                pr = ab + nt * ne                          # the group's REQ rows
                loads: list[int] = []
                if new["acc"]:
                    loads += [W.load(Buffer.ACC, slot=cs, sp_base=ab, offset=b_off[gi],
                                     y_size=nt, x_size=ne, y_stride=0),
                              W.load(Buffer.ACC, slot=cs, sp_base=pr, offset=p_off[gi],
                                     y_size=1, x_size=2 * ne, y_stride=2 * ne)]
                if new["inp"]:
                    loads += _load_contig(Buffer.INP, ib, cs, w_off[(gi, pi)], nd * ne, n)
                if new["wgt"]:
                    loads.append(W.load(Buffer.WGT, slot=x.slot, sp_base=wb,
                                        offset=x.offset + (t.start * db + p.start) * n * n,
                                        y_size=nt, x_size=nd, y_stride=db))
                compute = [W.gemm(acc_base=ab + j * ne, inp_base=ib + dd * ne,
                                  wgt_base=wb + j * nd + dd, outer=1, inner=ne, acc_si=1,
                                  inp_si=1)
                           for j in range(nt) for dd in range(nd)]
                stores: list[int] = []
                if pi == len(passes) - 1:
                    compute.append(W.req(zero_point, dst_base=ab, src_base=pr, outer=nt,
                                         inner=ne, dst_so=ne, dst_si=1, src_so=0, src_si=2))
                    stores.append(W.store(Buffer.ACC8, slot=y.slot, sp_base=ab,
                                          offset=y.offset + (t.start * d_out + g.start) * n,
                                          y_size=nt, x_size=ne, y_stride=d_out))
                steps.append(_Step(loads, compute, stores, new["acc"]))
    program = list(isa.Stream.from_words(_pipeline(steps))) + [isa.end()]
    return LinearT(program, blob.done().data, plan)

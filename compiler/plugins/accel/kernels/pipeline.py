"""The software pipeline every kernel is built on (steps of loads, compute and stores ordered by
the dependency tokens, after VTA) and the tiling helpers: region versions, double and triple
buffering, the cost of a loop nest, contiguous LOAD/STORE runs and bias broadcasts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.plugins.accel.kernels import words as W
from compiler.plugins.accel.kernels.base import _PAD, _XY, AccelKernelError
from pyhost.accel import layout
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import Buffer

# --- the software pipeline ----------------------------------------------------------------------

@dataclass
class _Step:
    """One tile of work: its loads, its compute, and (if it finishes its ACC tile) the stores,
    as instruction words (`words`; the compute may be a block of words, `words.block`).

    `new_acc` says the step starts a new ACC tile; its loads then write that tile's ACC region
    (bias or input rows), which the store of the tile ACC_REGIONS before may still be reading.
    """

    loads: list[int]
    compute: list[int] | np.ndarray
    stores: list[int]
    new_acc: bool


def _flag_at(words: list[int] | np.ndarray, k: int, *flags: str) -> None:
    """Set dependency flags of word k of a list of words or a block, in place."""
    if isinstance(words, np.ndarray):
        W.flag_row(words, k, *flags)
    else:
        words[k] = W.flag(words[k], *flags)


def _spread(items: list[int], slots: int, into: dict[int, list[int]]) -> None:
    """`items` spread evenly over `slots` positions (in order), appended to ``into[position]``
    (positions that get nothing are left out)."""
    k = len(items)
    for j, it in enumerate(items):
        into.setdefault(j * slots // k, []).append(it)


#: Regions per scratchpad: INP and WGT double-buffered, ACC triple-buffered (the store of tile t
#: drains its third while tile t+1 computes in the next and the loads fill tile t+2's bias).
INP_REGIONS = WGT_REGIONS = 2
ACC_REGIONS = 3


def _pipeline(steps: Sequence[_Step]) -> list[int | np.ndarray]:
    """The instruction stream (words, and the steps' blocks of words where they have them:
    `words.stream` makes the stream) of a software pipeline, with its dependency tokens.

    A new INP tile or weight chunk goes to the other half than the previous version, a new ACC
    tile to the next of three regions; the load unit runs one step ahead:
    - load -> compute: the last load of step s pushes, the first compute of step s pops;
    - compute -> load: the last compute of step s-2 pushes, the first load of step s (s >= 2)
      pops: step s overwrites the INP/WGT half step s-2 used;
    - compute -> store: the last compute of a tile (its REQ) pushes, its first store pops;
    - store -> compute: the last store of tile t pushes, and the compute -> load push for the
      first step of tile t+3 pops it first, because that step's loads overwrite tile t's ACC
      region. That store began two steps earlier, so the wait is normally over.
    Pushes and pops balance, so a kernel leaves every token counter as it found it (zero).

    Every push comes before its pop in the stream, so the in-order fetch with bounded queues
    cannot deadlock; the next step's loads and the previous tile's stores are interleaved with
    a step's compute so that no queue runs dry while the fetcher waits on another.
    """
    steps = list(steps)
    ns = len(steps)
    if not steps or not steps[0].new_acc:
        raise AssertionError("a pipeline starts with a new ACC tile")
    tile = []
    t = -1
    for i, st in enumerate(steps):
        t += int(st.new_acc)
        tile.append(t)
        if st.new_acc and not st.loads:
            raise AssertionError("a step that starts an ACC tile must load it")
        if not len(st.compute):
            raise AssertionError("every step computes")
        if bool(st.stores) != (i + 1 == ns or steps[i + 1].new_acc):
            raise AssertionError("stores belong to the last step of each tile")
    ntiles = t + 1
    loads = [list(st.loads) for st in steps]
    comp: list[list[int] | np.ndarray] = [
        st.compute.copy() if isinstance(st.compute, np.ndarray) else list(st.compute)
        for st in steps]
    stores = [list(st.stores) for st in steps]
    for s in range(2, ns):
        if loads[s]:
            pop = ("pop_next",) if steps[s].new_acc and tile[s] >= ACC_REGIONS else ()
            _flag_at(comp[s - 2], -1, "push_prev", *pop)
            loads[s][0] = W.flag(loads[s][0], "pop_next")
    for s in range(ns):
        if loads[s]:
            loads[s][-1] = W.flag(loads[s][-1], "push_next")
            _flag_at(comp[s], 0, "pop_prev")
        if stores[s]:
            _flag_at(comp[s], -1, "push_next")
            stores[s][0] = W.flag(stores[s][0], "pop_prev")
            if tile[s] + ACC_REGIONS < ntiles:
                stores[s][-1] = W.flag(stores[s][-1], "push_prev")
    out: list[int | np.ndarray] = list(loads[0]) + (list(loads[1]) if ns > 1 else [])
    for s in range(ns):
        c = comp[s]
        # a block goes into the stream as its pieces, words one by one
        add = out.append if isinstance(c, np.ndarray) else out.extend
        # before each compute instruction: a share of the previous tile's stores, then of the
        # next step's loads (all before the last one, which may pop what these stores push)
        slots = max(len(c) - 1, 1)
        before: dict[int, list[int]] = {}
        _spread(stores[s - 1] if s >= 1 else [], slots, before)
        _spread(loads[s + 1] if s + 1 < ns and s + 1 >= 2 else [], slots, before)
        done = 0
        for i in sorted(before):
            if i > done:
                add(c[done:i])
            out += before[i]
            done = i
        add(c[done:])
    out += stores[-1]
    return out


# --- tiling helpers -----------------------------------------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _balanced(total: int) -> list[int]:
    """Tile sizes that split `total` into nearly equal parts, largest first."""
    return sorted({_cdiv(total, k) for k in range(1, total + 1)}, reverse=True)


def _ranges(total: int, size: int) -> list[range]:
    return [range(a, min(a + size, total)) for a in range(0, total, size)]


def _versions(order: str, outer: int, groups: int, passes: int) -> tuple[int, int, int]:
    """(INP, WGT, ACC) region versions of a (row tile, output group, input pass) loop nest,
    `order` "rt" (row tiles outermost) or "og" (output groups outermost); WGT not resident."""
    steps = outer * groups * passes
    if order == "rt":
        inp = outer if passes == 1 else steps
        wgt = 1 if groups * passes == 1 else steps
    else:
        inp = 1 if outer * passes == 1 else steps
        wgt = groups if passes == 1 else steps
    return inp, wgt, outer * groups


def _region(depth: int, versions: int, regions: int) -> int:
    """Rows of one region when `versions` successive versions rotate through `regions`
    regions of a scratchpad of `depth` rows (a single version gets all of it)."""
    return depth // min(versions, regions)


def _base(version: int, versions: int, regions: int, size: int) -> int:
    return (version % min(versions, regions)) * size


#: Cycles the tiling search charges per GEMM/ALU instruction and per step beyond their work
#: (the model charges 1 per instruction; more makes the search prefer long instructions and
#: few steps, which is what the RTL wants too).
_INSN_COST = 4
_STEP_COST = 8

class _Regions:
    """The versions of the INP, WGT and ACC regions of a tiled loop nest: a step whose key for
    a region differs from the previous step's needs a fresh copy of it, which goes to the next
    version (double buffering for INP and WGT, three ACC regions); a single version has the
    whole scratchpad. The ACC regions start after ``params`` rows."""

    def __init__(self, cfg: AccelConfig, inp_v: int, wgt_v: int, acc_v: int,
                 params: int = 0) -> None:
        self.versions = {"inp": inp_v, "wgt": wgt_v, "acc": acc_v}
        self.regions = {"inp": INP_REGIONS, "wgt": WGT_REGIONS, "acc": ACC_REGIONS}
        self.caps = {"inp": _region(cfg.inp_depth, inp_v, INP_REGIONS),
                     "wgt": _region(cfg.wgt_depth, wgt_v, WGT_REGIONS),
                     "acc": _region(cfg.acc_depth - params, acc_v, ACC_REGIONS)}
        self.params = params
        self.ver = {"inp": -1, "wgt": -1, "acc": -1}
        self.key: dict[str, Any] = {"inp": None, "wgt": None, "acc": None}

    def step(self, inp: Any, wgt: Any, acc: Any) -> tuple[dict[str, bool], tuple[int, int, int]]:
        """(which regions are new, their (INP, WGT, ACC) base rows) for a step with these
        keys."""
        new = {}
        for res, k in (("inp", inp), ("wgt", wgt), ("acc", acc)):
            new[res] = self.key[res] != k
            if new[res]:
                self.key[res] = k
                self.ver[res] += 1
        ib, wb, ab = (_base(self.ver[r], self.versions[r], self.regions[r], self.caps[r])
                      for r in ("inp", "wgt", "acc"))
        return new, (ib, wb, self.params + ab)


def _tile_steps(plan: _Plan, tiles: int, groups: int, passes: int, cfg: AccelConfig,
                params: int) -> Iterator[tuple[int, int, int, int, dict[str, bool], int, int,
                                               int]]:
    """The steps of a tiled layer (conv2d, gemm) in the plan's loop order: (step, tile, group,
    pass, new, inp_base, wgt_base, acc_base). ``new[r]`` says the step needs a fresh copy of
    region r ("inp" per tile and pass, "wgt" per group and pass, "acc" per tile and group), which
    then goes to the next version of that region (double buffering); the bases are the
    scratchpad rows of the current versions (ACC after the ``params`` rows)."""
    rot = _Regions(cfg, plan.inp_v, plan.wgt_v, plan.acc_v, params)
    if plan.order == "rt":
        seq = [(t, gi, pi) for t in range(tiles) for gi in range(groups) for pi in range(passes)]
    else:
        seq = [(t, gi, pi) for gi in range(groups) for t in range(tiles) for pi in range(passes)]
    for si, (t, gi, pi) in enumerate(seq):
        new, (ib, wb, ab) = rot.step((t, pi), (gi, pi), (t, gi))
        yield si, t, gi, pi, new, ib, wb, ab
    ver = rot.ver
    assert (ver["inp"] + 1, ver["acc"] + 1) == (plan.inp_v, plan.acc_v), (ver, plan)
    assert plan.resident or ver["wgt"] + 1 == plan.wgt_v, (ver, plan)


def _pipe_cost(order: str, nrt: int, groups: int, passes: int, g_step: int, q_tile: int,
               li: int, lw: int, lb: int) -> int:
    """Cycles of a (row tile, output group, input pass) nest whose load unit runs one step
    ahead: a step costs max(its compute, the next step's loads). g_step: GEMM cycles of a step,
    q_tile: REQ of a tile; li, lw, lb: loads of a new input tile, weight chunk, bias tile (0
    for a region that never changes)."""
    c_last = g_step + q_tile
    if order == "rt":
        if passes == 1:
            per = (groups - 1) * max(c_last, lb + lw) + max(c_last, li + lb + lw)
        else:
            per = groups * ((passes - 1) * max(g_step, li + lw) + max(c_last, li + lw + lb))
        return nrt * per
    if passes == 1:
        per = (nrt - 1) * max(c_last, li + lb) + max(c_last, li + lw + lb)
    else:
        per = nrt * ((passes - 1) * max(g_step, li + lw) + max(c_last, li + lw + lb))
    return groups * per


def _load_contig(buf: Buffer, sp_base: int, slot: int, offset: int, count: int, elem: int
                 ) -> list[int]:
    """LOADs of `count` contiguous elements as single memory rows (split where x_size would
    overflow): long bursts instead of one per row."""
    out = []
    done = 0
    while done < count:
        k = min(_XY, count - done)
        out.append(W.load(buf, slot=slot, sp_base=sp_base + done, offset=offset + done * elem,
                          y_size=1, x_size=k, y_stride=k))
        done += k
    return out


def _load(buf: Buffer, elem: int, **f: int) -> list[int]:
    """A LOAD; rows that are contiguous in memory and unpadded become single long rows."""
    y, x = f["y_size"], f["x_size"]
    pads = any(f.get(k) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right"))
    if y > 1 and f["y_stride"] == x and not pads:
        return _load_contig(buf, f["sp_base"], f["slot"], f["offset"], y * x, elem)
    return [W.load(buf, **f)]


def _fill(buf: Buffer, sp_base: int, count: int, value: int) -> list[int]:
    """LOADs that read no memory (y_size = x_size = 0) and write `count` consecutive
    scratchpad rows of padding `value`: up to 15 x 15 rows each (the padding fields)."""
    out = []
    done = 0
    while done < count:
        k = min(count - done, _PAD * _PAD)
        top, left = (k // _PAD, _PAD) if k >= _PAD else (1, k)
        out.append(W.load(buf, sp_base=sp_base + done, y_size=0, x_size=0, pad_top=top,
                          pad_left=left, pad_value=value))
        done += top * left
    return out


def _load_padded(buf: Buffer, elem: int, **f: int) -> list[int]:
    """`_load` of a padded tile, also with padding beyond the LOAD fields (15 per side): the
    memory rows are then loaded one by one without padding and the padding between them is
    written by `_fill` (rows of the tile stay row-major with the padded width)."""
    pads = [f.get(k, 0) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")]
    if max(pads) <= _PAD:
        return _load(buf, elem, **f)
    pt, pb, pl, pr = pads
    y, x, v = f["y_size"], f["x_size"], f.get("pad_value", 0)
    wp = pl + x + pr
    base = f["sp_base"]
    out = _fill(buf, base, pt * wp + pl, v)
    at = base + pt * wp + pl
    for r in range(y):
        out.append(W.load(buf, slot=f["slot"], sp_base=at,
                          offset=f["offset"] + r * f["y_stride"] * elem, y_size=1, x_size=x,
                          y_stride=x))
        at += x
        gap = pr + (pl if r + 1 < y else pb * wp)
        out += _fill(buf, at, gap, v)
        at += gap
    return out


def _store(buf: Buffer, elem: int, **f: int) -> list[int]:
    """A STORE; rows that are contiguous in memory become single long rows."""
    y, x = f["y_size"], f["x_size"]
    if y > 1 and f["y_stride"] == x:
        out, done, total = [], 0, y * x
        while done < total:
            k = min(_XY, total - done)
            out.append(W.store(buf, slot=f["slot"], sp_base=f["sp_base"] + done,
                               offset=f["offset"] + done * elem, y_size=1, x_size=k,
                               y_stride=k))
            done += k
        return out
    return [W.store(buf, **f)]


#: Copies of each bias row in memory: a bias broadcast over P accumulator rows is P/BIAS_COPIES
#: memory rows of BIAS_COPIES elements (y_stride 0) instead of P one-element bursts.
BIAS_COPIES = 8


def _bias_loads(slot: int, offset: int, sp_base: int, rows: int, width: int) -> list[int]:
    """LOAD.ACC of a bias group of `width` rows (stored BIAS_COPIES times in a row at `offset`)
    into `rows` x `width` accumulator rows, row-major."""
    copies = max(1, BIAS_COPIES // width)
    full, rest = divmod(rows, copies)
    out = []
    if full:
        out.append(W.load(Buffer.ACC, slot=slot, sp_base=sp_base, offset=offset, y_size=full,
                          x_size=copies * width, y_stride=0))
    if rest:
        out.append(W.load(Buffer.ACC, slot=slot, sp_base=sp_base + full * copies * width,
                          offset=offset, y_size=1, x_size=rest * width, y_stride=0))
    return out


def _bias_blob(bias_rows: np.ndarray, groups: Sequence[range]) -> tuple[bytes, list[int]]:
    """The bias section: per group, its rows repeated max(1, BIAS_COPIES // width) times;
    returns the bytes and each group's byte offset in the section."""
    parts, offs, at = [], [], 0
    for g in groups:
        copies = max(1, BIAS_COPIES // len(g))
        blk = layout.acc_rows_bytes(np.tile(bias_rows[g.start:g.stop], (copies, 1)))
        offs.append(at)
        parts.append(blk)
        at += len(blk)
    return b"".join(parts), offs


@dataclass(frozen=True)
class _Plan:
    """A tiling: rows per tile, output blocks per group, input blocks per pass, loop order,
    versions of each region and the estimate it was chosen by."""

    rows: int
    obg: int
    cbp: int
    order: str
    inp_v: int
    wgt_v: int
    acc_v: int
    resident: bool
    cost: int


def _choose(candidates: Sequence[_Plan], what: str, hint: str) -> _Plan:
    if not candidates:
        raise AccelKernelError(f"{what} does not fit the scratchpads even with one output row, "
                               f"one output-channel block and one input-channel block per tile; "
                               f"{hint}")
    return min(candidates, key=lambda p: (p.cost, -p.rows, -p.obg, -p.cbp, p.order))

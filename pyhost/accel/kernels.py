"""Accelerator kernels: instruction streams for quantized Conv2d, Gemm, MaxPool, Add,
GlobalAveragePool and a standalone requantization (ReLU), the code generator of the
accelerator's compiler plugin.

Each layer function takes shapes, the quantizer's parameters (the ``attrs["quant"]`` dict of
compiler/quantize/quantizer.py) and where its tensors live (`Ref`: a slot register and a byte
offset from its base, so programs are position independent), and returns a `Kernel`: the
instructions (without END), the constant blob the program loads (packed weights, bias and
requantization rows) and the tensors it reads and writes. `join` concatenates kernels into one
stream with the token hand-off between them and appends END. The layouts are in `layout`; the
tiling and the token scheme are described in docs/accel-kernels.md.

Every kernel is a software pipeline of *steps* (a tile of work): the load unit fills the next
region of each scratchpad (INP and WGT halves, ACC thirds) while the compute unit works on the
current one and the store unit drains the previous tile, ordered by the dependency tokens as in
VTA (see `_pipeline`).
`estimate` is a static cycle estimate of a stream and `check_races` proves statically that every
pair of conflicting accesses on different units is ordered by tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyhost.accel import layout
from pyhost.fixedpoint import MAX_SHIFT
from pyhost.spec import isa
from pyhost.spec.accel import DEFAULT_CONFIG, AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Insn, Opcode, Unit

Quant = Mapping[str, Any]
#: The default accelerator build (the ISA's default parameters).
DEFAULT_CFG = DEFAULT_CONFIG

#: Bytes of one beat of the card's 512-bit data bus (the model's timing estimate counts them).
BEAT_BYTES = 64
#: Residual add: the per-input multipliers are scaled so that the larger is below 2**ADD_BITS;
#: then (x - zp) * m summed over two inputs stays below 2**31 (see `add`).
ADD_BITS = 22


class AccelKernelError(ValueError):
    """A layer that the accelerator kernels cannot map (shape, parameters or scratchpad sizes);
    the message says what does not fit and what would."""


# --- values a kernel is made of ----------------------------------------------------------------

@dataclass(frozen=True)
class Ref:
    """Where a tensor or blob lives: slot register `slot` plus a byte `offset`."""

    slot: int
    offset: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.slot < isa.NUM_SLOTS:
            raise AccelKernelError(f"slot {self.slot} is not one of the {isa.NUM_SLOTS} slot "
                                   "registers")
        if not 0 <= self.offset < 1 << 32:
            raise AccelKernelError(f"offset {self.offset} is not a 32-bit byte offset")

    def __add__(self, delta: int) -> Ref:
        return Ref(self.slot, self.offset + int(delta))


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a kernel in card memory.

    `shape` is the logical NCHW shape (a matrix (M, K) is (M, K, 1, 1)); the bytes are the
    blocked layout of `layout` with `elem` bytes per lane; padding channels hold `fill`.
    """

    name: str
    ref: Ref
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fill: int


@dataclass(frozen=True)
class ConstBlob:
    """The constants of a kernel, to be copied to card memory at `ref` before it runs."""

    ref: Ref
    data: bytes
    #: (name, byte offset in the blob, bytes) of each section.
    sections: tuple[tuple[str, int, int], ...]

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Kernel:
    """One layer: instructions without END, its tensors, constants and tiling."""

    name: str
    insns: tuple[Insn, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    consts: ConstBlob | None
    #: Tile parameters (rows per tile, blocks per group, steps, ...) for reports and docs.
    tiling: Mapping[str, Any] = field(default_factory=dict)


# --- field limits (from the ISA formats, never by hand) -------------------------------------------

def _limit(op: Opcode, name: str) -> int:
    for f in isa.FORMATS[op]:
        if f.name == name:
            return (1 << (f.width - 1)) - 1 if f.signed else (1 << f.width) - 1
    raise KeyError(f"{op.name}.{name}")


_LOOP = _limit(Opcode.GEMM, "outer")          # GEMM/ALU outer and inner
_SO = _limit(Opcode.GEMM, "acc_so")           # outer strides
_SI = _limit(Opcode.GEMM, "inp_si")           # inner strides
_XY = _limit(Opcode.LOAD, "x_size")           # LOAD/STORE x_size, y_size
_YSTRIDE = _limit(Opcode.LOAD, "y_stride")
_PAD = _limit(Opcode.LOAD, "pad_top")
_IMM_MAX = _limit(Opcode.ALU, "imm")
_IMM_MIN = -_IMM_MAX - 1
assert _LOOP == _limit(Opcode.ALU, "inner") and _XY == _limit(Opcode.LOAD, "y_size")


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise AccelKernelError(msg)


def _int8(name: str, v: int) -> int:
    v = int(v)
    _need(-128 <= v <= 127, f"{name} = {v} is not an int8")
    return v


def _bounds(act: tuple[int, int] | None) -> tuple[int, int]:
    lo, hi = act if act is not None else (-128, 127)
    lo, hi = _int8("activation lower bound", lo), _int8("activation upper bound", hi)
    _need(lo <= hi, f"activation bounds lo={lo} > hi={hi}")
    return lo, hi


def relu_bounds(output_zero_point: int) -> tuple[int, int]:
    """REQ bounds of a fused ReLU: nothing below the output zero point (real 0)."""
    return _int8("output zero point", output_zero_point), 127


def clip_bounds(lo: float, hi: float, output_scale: float, output_zero_point: int
                ) -> tuple[int, int]:
    """REQ bounds of a fused Clip(lo, hi) (real values) in the quantized output domain."""
    q = [int(np.clip(np.rint(v / output_scale) + output_zero_point, -128, 127)) for v in (lo, hi)]
    return q[0], q[1]


def _check_ref(r: Ref, elem: int, what: str) -> None:
    _need(r.offset % elem == 0, f"{what} offset {r.offset:#x} is not a multiple of its element "
          f"size {elem} bytes (the LOAD/STORE would be MISALIGNED)")


def _requant_rows(mult: np.ndarray, shift: np.ndarray, nb: int, n: int) -> np.ndarray:
    """ACC rows for REQ: per block, the multiplier row then the shift row (padding lanes 0)."""
    m = np.asarray(mult, np.int64).reshape(-1)
    s = np.asarray(shift, np.int64).reshape(-1)
    _need(m.size == s.size, f"{m.size} multipliers but {s.size} shifts")
    _need(bool(((m >= 0) & (m < 2**31)).all()), "requantization multipliers must be in "
          "[0, 2**31) (pyhost/fixedpoint.py)")
    _need(bool(((s >= 0) & (s <= MAX_SHIFT)).all()),
          f"requantization shifts must be in [0, {MAX_SHIFT}]")
    rows = np.zeros((nb, 2, n), np.int32)
    rows[:, 0] = layout.lane_rows(m, n)[:nb] if m.size else 0
    rows[:, 1] = layout.lane_rows(s, n)[:nb] if s.size else 0
    return rows.reshape(2 * nb, n)


class _Blob:
    """Builds a ConstBlob: sections aligned to a weight tile (N*N bytes, the largest element)."""

    def __init__(self, ref: Ref, n: int) -> None:
        _check_ref(ref, n * n, "constant blob")
        self.ref = ref
        self.align = n * n
        self.data = bytearray()
        self.sections: list[tuple[str, int, int]] = []

    def add(self, name: str, data: bytes) -> int:
        """Append a section; its offset from the slot base (for LOAD.offset)."""
        pad = -len(self.data) % self.align
        self.data += bytes(pad)
        off = len(self.data)
        self.data += data
        self.sections.append((name, off, len(data)))
        return self.ref.offset + off

    def done(self) -> ConstBlob:
        return ConstBlob(self.ref, bytes(self.data), tuple(self.sections))


# --- the software pipeline ----------------------------------------------------------------------

@dataclass
class _Step:
    """One tile of work: its loads, its compute, and (if it finishes its ACC tile) the stores.

    `new_acc` says the step starts a new ACC tile; its loads then write that tile's ACC region
    (bias or input rows), which the store of the tile ACC_REGIONS before may still be reading.
    """

    loads: list[Insn]
    compute: list[Insn]
    stores: list[Insn]
    new_acc: bool


def _flag(insn: Insn, *flags: str) -> Insn:
    for f in flags:
        if insn.fields.get(f):
            raise AssertionError(f"{insn} already has {f}")
    return Insn(insn.op, {**insn.fields, **dict.fromkeys(flags, 1)})


#: Memory model of `estimate(..., mem_latency=...)` and of the tiling search: the RTL load and
#: store units issue one burst per memory row (at most MAX_BURST beats) and keep at most
#: MAX_OUTSTANDING bursts in flight (rtl/accel/accel_load.v and accel_store.v defaults); a read
#: takes about 24 cycles (README: ~60 ns mean sequential latency at 400 MHz). The functional
#: model's timing estimate has no latency.
MAX_BURST_BEATS = 16
MAX_OUTSTANDING = 4
RTL_MEM_LATENCY = 24


def mem_cycles(rows: int, row_bytes: int, sp_rows: int, mem_latency: int = 0) -> int:
    """Busy cycles of a LOAD/STORE moving `rows` memory rows of `row_bytes` bytes and `sp_rows`
    scratchpad rows: one scratchpad row per cycle, one beat per cycle, and with `mem_latency`
    each burst holds one of MAX_OUTSTANDING slots for latency + beats cycles."""
    beats = -(-row_bytes // BEAT_BYTES)
    per_row = beats
    if mem_latency and beats:
        bursts = -(-beats // MAX_BURST_BEATS)
        per_row = max(beats, -(-bursts * (mem_latency + min(beats, MAX_BURST_BEATS))
                               // MAX_OUTSTANDING))
    return max(sp_rows, rows * per_row) + 1


def insn_cycles(insn: Insn, n: int, mem_latency: int = 0) -> int:
    """Busy cycles of one instruction. With mem_latency 0 this is the functional model's
    timing rule: a GEMM/ALU runs outer*inner iterations + 1, a LOAD/STORE
    max(scratchpad rows, bus beats) + 1; `mem_latency` adds the burst latency (`mem_cycles`)."""
    # the field dict directly: Insn attribute access is slow and this runs per instruction
    f = insn.fields.get
    if insn.op in (Opcode.GEMM, Opcode.ALU):
        return f("outer", 0) * f("inner", 0) + 1
    if insn.op in (Opcode.LOAD, Opcode.STORE):
        e = isa.element_bytes(Buffer(f("buf", 0)), n)
        y, x = f("y_size", 0), f("x_size", 0)
        rows = (f("pad_top", 0) + y + f("pad_bottom", 0)) \
            * (f("pad_left", 0) + x + f("pad_right", 0))
        return mem_cycles(y if x else 0, x * e, rows, mem_latency)
    return 0


def _spread(items: list[Insn], slots: int) -> list[list[Insn]]:
    """`items` spread evenly over `slots` positions (in order)."""
    out: list[list[Insn]] = [[] for _ in range(max(slots, 1))]
    k = len(items)
    for j, it in enumerate(items):
        out[j * len(out) // k].append(it)
    return out


#: Regions per scratchpad: INP and WGT double-buffered, ACC triple-buffered (the store of tile t
#: drains its third while tile t+1 computes in the next and the loads fill tile t+2's bias).
INP_REGIONS = WGT_REGIONS = 2
ACC_REGIONS = 3


def _pipeline(steps: Sequence[_Step]) -> list[Insn]:
    """The instruction stream of a software pipeline, with its dependency tokens.

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
        if not st.compute:
            raise AssertionError("every step computes")
        if bool(st.stores) != (i + 1 == ns or steps[i + 1].new_acc):
            raise AssertionError("stores belong to the last step of each tile")
    ntiles = t + 1
    loads = [list(st.loads) for st in steps]
    comp = [list(st.compute) for st in steps]
    stores = [list(st.stores) for st in steps]
    for s in range(2, ns):
        if loads[s]:
            pop = ("pop_next",) if steps[s].new_acc and tile[s] >= ACC_REGIONS else ()
            comp[s - 2][-1] = _flag(comp[s - 2][-1], "push_prev", *pop)
            loads[s][0] = _flag(loads[s][0], "pop_next")
    for s in range(ns):
        if loads[s]:
            loads[s][-1] = _flag(loads[s][-1], "push_next")
            comp[s][0] = _flag(comp[s][0], "pop_prev")
        if stores[s]:
            comp[s][-1] = _flag(comp[s][-1], "push_next")
            stores[s][0] = _flag(stores[s][0], "pop_prev")
            if tile[s] + ACC_REGIONS < ntiles:
                stores[s][-1] = _flag(stores[s][-1], "push_prev")
    out = list(loads[0]) + (list(loads[1]) if ns > 1 else [])
    for s in range(ns):
        c = comp[s]
        # before each compute instruction: a share of the previous tile's stores and of the next
        # step's loads (all before the last one, which may pop what these stores push)
        slots = max(len(c) - 1, 1)
        st = _spread(stores[s - 1] if s >= 1 else [], slots)
        ld = _spread(loads[s + 1] if s + 1 < ns and s + 1 >= 2 else [], slots)
        for i, x in enumerate(c):
            if i < slots:
                out += st[i] + ld[i]
            out.append(x)
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

def _tile_steps(plan: _Plan, tiles: int, groups: int, passes: int, cfg: AccelConfig,
                params: int) -> Iterator[tuple[int, int, int, int, dict[str, bool], int, int,
                                               int]]:
    """The steps of a tiled layer (conv2d, gemm) in the plan's loop order: (step, tile, group,
    pass, new, inp_base, wgt_base, acc_base). ``new[r]`` says the step needs a fresh copy of
    region r ("inp" per tile and pass, "wgt" per group and pass, "acc" per tile and group), which
    then goes to the next version of that region (double buffering); the bases are the
    scratchpad rows of the current versions (ACC after the ``params`` rows)."""
    inp_cap = _region(cfg.inp_depth, plan.inp_v, INP_REGIONS)
    acc_cap = _region(cfg.acc_depth - params, plan.acc_v, ACC_REGIONS)
    wgt_cap = _region(cfg.wgt_depth, plan.wgt_v, WGT_REGIONS)
    if plan.order == "rt":
        seq = [(t, gi, pi) for t in range(tiles) for gi in range(groups) for pi in range(passes)]
    else:
        seq = [(t, gi, pi) for gi in range(groups) for t in range(tiles) for pi in range(passes)]
    ver = {"inp": -1, "wgt": -1, "acc": -1}
    key: dict[str, Any] = {"inp": None, "wgt": None, "acc": None}
    for si, (t, gi, pi) in enumerate(seq):
        new = {}
        for res, k in (("inp", (t, pi)), ("wgt", (gi, pi)), ("acc", (t, gi))):
            new[res] = key[res] != k
            if new[res]:
                key[res] = k
                ver[res] += 1
        yield (si, t, gi, pi, new, _base(ver["inp"], plan.inp_v, INP_REGIONS, inp_cap),
               _base(ver["wgt"], plan.wgt_v, WGT_REGIONS, wgt_cap),
               params + _base(ver["acc"], plan.acc_v, ACC_REGIONS, acc_cap))
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
                 ) -> list[Insn]:
    """LOADs of `count` contiguous elements as single memory rows (split where x_size would
    overflow): long bursts instead of one per row."""
    out = []
    done = 0
    while done < count:
        k = min(_XY, count - done)
        out.append(isa.load(buf, slot=slot, sp_base=sp_base + done, offset=offset + done * elem,
                            y_size=1, x_size=k, y_stride=k))
        done += k
    return out


def _load(buf: Buffer, elem: int, **f: int) -> list[Insn]:
    """A LOAD; rows that are contiguous in memory and unpadded become single long rows."""
    y, x = f["y_size"], f["x_size"]
    pads = any(f.get(k) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right"))
    if y > 1 and f["y_stride"] == x and not pads:
        return _load_contig(buf, f["sp_base"], f["slot"], f["offset"], y * x, elem)
    return [isa.load(buf, **f)]


def _store(buf: Buffer, elem: int, **f: int) -> list[Insn]:
    """A STORE; rows that are contiguous in memory become single long rows."""
    y, x = f["y_size"], f["x_size"]
    if y > 1 and f["y_stride"] == x:
        out, done, total = [], 0, y * x
        while done < total:
            k = min(_XY, total - done)
            out.append(isa.store(buf, slot=f["slot"], sp_base=f["sp_base"] + done,
                                 offset=f["offset"] + done * elem, y_size=1, x_size=k,
                                 y_stride=k))
            done += k
        return out
    return [isa.store(buf, **f)]


#: Copies of each bias row in memory: a bias broadcast over P accumulator rows is P/BIAS_COPIES
#: memory rows of BIAS_COPIES elements (y_stride 0) instead of P one-element bursts.
BIAS_COPIES = 8


def _bias_loads(slot: int, offset: int, sp_base: int, rows: int, width: int) -> list[Insn]:
    """LOAD.ACC of a bias group of `width` rows (stored BIAS_COPIES times in a row at `offset`)
    into `rows` x `width` accumulator rows, row-major."""
    copies = max(1, BIAS_COPIES // width)
    full, rest = divmod(rows, copies)
    out = []
    if full:
        out.append(isa.load(Buffer.ACC, slot=slot, sp_base=sp_base, offset=offset, y_size=full,
                            x_size=copies * width, y_stride=0))
    if rest:
        out.append(isa.load(Buffer.ACC, slot=slot, sp_base=sp_base + full * copies * width,
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


def _choose(candidates: list[_Plan], what: str, hint: str) -> _Plan:
    if not candidates:
        raise AccelKernelError(f"{what} does not fit the scratchpads even with one output row, "
                               f"one output-channel block and one input-channel block per tile; "
                               f"{hint}")
    return min(candidates, key=lambda p: (p.cost, -p.rows, -p.obg, -p.cbp, p.order))


# --- Conv2d and Gemm: implicit GEMM -------------------------------------------------------------

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
    _need(ci == c, f"weight has {ci} input channels, the input {c}; only group=1 is supported")
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


def _conv_plans(g: _Geom, cfg: AccelConfig, params: int) -> list[_Plan]:
    n = cfg.n
    taps = g.kh * g.kw
    total_tiles = g.nbo * g.nbi * taps
    resident = total_tiles <= cfg.wgt_depth
    acc_rows = cfg.acc_depth - params
    out = []
    for cbp in _balanced(g.nbi):
        passes = _cdiv(g.nbi, cbp)
        for r in _balanced(g.oh):
            rin = g.rows_in(r)
            p = r * g.ow
            if rin > _XY or p > _XY or r > _LOOP or cbp * rin * g.wp > cfg.inp_depth:
                continue
            nrt = g.b * _cdiv(g.oh, r)
            for obg in _balanced(g.nbo):
                if obg * p > acc_rows or obg > _LOOP:
                    continue
                groups = _cdiv(g.nbo, obg)
                for order in ("rt", "og"):
                    inp_v, wgt_v, acc_v = _versions(order, nrt, groups, passes)
                    if resident:
                        wgt_v = 1
                    if (cbp * rin * g.wp > _region(cfg.inp_depth, inp_v, INP_REGIONS)
                            or obg * p > _region(acc_rows, acc_v, ACC_REGIONS)
                            or (not resident and obg * cbp * taps
                                > _region(cfg.wgt_depth, wgt_v, WGT_REGIONS))):
                        continue
                    lat = RTL_MEM_LATENCY
                    if g.pt or g.pb or g.pl or g.pr:
                        li = cbp * mem_cycles(rin, g.w * n, rin * g.wp, lat)
                    else:
                        li = cbp * mem_cycles(1, rin * g.w * n, rin * g.wp, lat)
                    lw = mem_cycles(1, obg * cbp * taps * n * n, obg * cbp * taps, lat)
                    lb = obg * mem_cycles(_cdiv(p, BIAS_COPIES), BIAS_COPIES * 4 * n, p, lat)
                    st = mem_cycles(obg, p * n, obg * p, lat)
                    first = li + lb + mem_cycles(1, params * 4 * n, params, lat) + (
                        mem_cycles(1, total_tiles * n * n, total_tiles, lat) if resident else lw)
                    cost = _pipe_cost(order, nrt, groups, passes,
                                      obg * cbp * taps * (p + _INSN_COST), obg * p + _INSN_COST,
                                      0 if inp_v == 1 else li, 0 if wgt_v == 1 else lw, lb)
                    cost = max(cost, acc_v * st) + first + st
                    cost += nrt * groups * passes * _STEP_COST
                    out.append(_Plan(r, obg, cbp, order, inp_v, wgt_v, acc_v, resident,
                                     cost))
    return out


def conv2d(in_shape: Sequence[int], q: Quant, *, inp: Ref, out: Ref, consts: Ref,
           strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
           dilations: Sequence[int] = (1, 1), group: int = 1,
           act: tuple[int, int] | None = None, cfg: AccelConfig = DEFAULT_CFG,
           name: str = "conv2d") -> Kernel:
    """Quantized Conv2d, bit-exact with compiler.quantize.kernels.qconv (+ clamp to `act`).

    `in_shape` is NCHW (batch images one after the other); `q` the quantizer's dict (int8
    `weight` (Cout, Cin, KH, KW), int32 `bias_corrected`, `multiplier`, `shift`,
    `input_zero_point`, `output_zero_point`); `pads` in ONNX order (top, left, bottom, right);
    `act` the fused ReLU/Clip as (lo, hi) in the output's quantized domain (`relu_bounds`).
    Implicit GEMM: for each (output block, input block, kh, kw) one GEMM over a tile of output
    rows x the full width, reading the padded input tile in INP with the GEMM strides.
    """
    n = cfg.n
    _need(int(group) == 1, f"group={group}: only group=1 convolutions are supported")
    w = np.asarray(q["weight"])
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
    plan = _choose(_conv_plans(g, cfg, params), f"conv2d {tuple(in_shape)} x {w.shape}",
                   "use a smaller image width or fewer channels")
    taps = g.kh * g.kw
    groups = _ranges(g.nbo, plan.obg)
    passes = _ranges(g.nbi, plan.cbp)
    blob = _Blob(consts, n)
    if plan.resident:
        wchunks = layout.conv_weight_tiles(w, n, [range(0, g.nbo)], [range(0, g.nbi)])
    else:
        wchunks = layout.conv_weight_tiles(w, n, groups, passes)
    w_off = blob.add("weights", b"".join(wchunks))
    chunk_off = {}
    o = w_off
    for gi, gr in enumerate(groups if not plan.resident else [range(0, g.nbo)]):
        for pi, pa in enumerate(passes if not plan.resident else [range(0, g.nbi)]):
            chunk_off[(gi, pi)] = o
            o += len(gr) * len(pa) * taps * n * n
    bias_bytes, bias_rel = _bias_blob(layout.lane_rows(bias, n),
                                      [range(ob, ob + 1) for ob in range(g.nbo)])
    bias_off = blob.add("bias", bias_bytes)
    req_off = blob.add("requant", layout.acc_rows_bytes(
        _requant_rows(q["multiplier"], q["shift"], g.nbo, n)))
    _need(len(np.asarray(q["multiplier"]).reshape(-1)) == g.co,
          "one multiplier and shift per output channel")

    region = g.rows_in(plan.rows) * g.wp          # INP rows of one input block of a tile
    rtiles = [(b, oy0, min(plan.rows, g.oh - oy0)) for b in range(g.b)
              for oy0 in range(0, g.oh, plan.rows)]
    steps: list[_Step] = []
    for si, rt, gi, pi, new, inp_base, wgt_base, acc_base in _tile_steps(
            plan, len(rtiles), len(groups), len(passes), cfg, params):
        b, oy0, rr = rtiles[rt]
        gr, pa = groups[gi], passes[pi]
        p = rr * g.ow
        loads: list[Insn] = []
        if si == 0:
            if plan.resident:
                loads += _load_contig(Buffer.WGT, 0, consts.slot, w_off,
                                      g.nbo * g.nbi * taps, n * n)
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
                    pad_left=g.pl, pad_right=g.pr, pad_value=zin)
        if new["wgt"] and not plan.resident:
            loads += _load_contig(Buffer.WGT, wgt_base, consts.slot, chunk_off[(gi, pi)],
                                  len(gr) * len(pa) * taps, n * n)
        if new["acc"]:
            for j, ob in enumerate(gr):
                loads += _bias_loads(consts.slot, bias_off + bias_rel[ob], acc_base + j * p, p,
                                     1)
        compute: list[Insn] = []
        for j, ob in enumerate(gr):
            for k, cb in enumerate(pa):
                for ky in range(g.kh):
                    for kx in range(g.kw):
                        tap = ky * g.kw + kx
                        if plan.resident:
                            wt = (ob * g.nbi + cb) * taps + tap
                        else:
                            wt = wgt_base + (j * len(pa) + k) * taps + tap
                        compute.append(isa.gemm(
                            acc_base=acc_base + j * p,
                            inp_base=inp_base + k * region + ky * g.dh * g.wp + kx * g.dw,
                            wgt_base=wt, outer=rr, inner=g.ow, acc_so=g.ow, acc_si=1,
                            inp_so=g.sh * g.wp, inp_si=g.sw))
        stores: list[Insn] = []
        if pi == len(passes) - 1:
            compute.append(isa.req(zout, lo, hi, dst_base=acc_base, src_base=2 * gr.start,
                                   outer=len(gr), inner=p, dst_so=p, dst_si=1, src_so=2))
            obase = out.offset + ((b * g.nbo + gr.start) * g.oh + oy0) * g.ow * n
            if g.oh * g.ow <= _YSTRIDE:
                stores += _store(Buffer.ACC8, n, slot=out.slot, sp_base=acc_base, offset=obase,
                                 y_size=len(gr), x_size=p, y_stride=g.oh * g.ow)
            else:
                for j in range(len(gr)):
                    stores.append(isa.store(Buffer.ACC8, slot=out.slot, sp_base=acc_base + j * p,
                                            offset=obase + j * g.oh * g.ow * n, y_size=1,
                                            x_size=p, y_stride=p))
        steps.append(_Step(loads, compute, stores, new["acc"]))
    insns = _pipeline(steps)
    return Kernel(
        name, tuple(insns),
        inputs=(TensorInfo("input", inp, (g.b, g.c, g.h, g.w), "int8",
                           layout.act_bytes(g.c, g.h, g.w, n, g.b), zin),),
        outputs=(TensorInfo("output", out, (g.b, g.co, g.oh, g.ow), "int8",
                            layout.act_bytes(g.co, g.oh, g.ow, n, g.b),
                            min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"rows": plan.rows, "out_blocks": plan.obg, "in_blocks": plan.cbp,
                "order": plan.order, "steps": len(steps), "weights_resident": plan.resident,
                "inp_versions": plan.inp_v, "acc_versions": plan.acc_v,
                "out_shape": (g.b, g.co, g.oh, g.ow)})


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
    w4 = np.ascontiguousarray(w_kn.T)[:, :, None, None]
    blob = _Blob(consts, n)
    gl = groups if not plan.resident else [range(0, nbo)]
    pl = passes if not plan.resident else [range(0, kb)]
    w_off = blob.add("weights", b"".join(layout.conv_weight_tiles(w4, n, gl, pl)))
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
    steps: list[_Step] = []
    for si, t, gi, pi, new, inp_base, wgt_base, acc_base in _tile_steps(
            plan, len(mtiles), len(groups), len(passes), cfg, params):
        m0, mt = mtiles[t]
        gr, pa = groups[gi], passes[pi]
        obg, kbp = len(gr), len(pa)
        loads: list[Insn] = []
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
        compute: list[Insn] = []
        for j, ob in enumerate(gr):
            for kk, cb in enumerate(pa):
                wt = (ob * kb + cb) if plan.resident else wgt_base + j * kbp + kk
                compute.append(isa.gemm(acc_base=acc_base + j, inp_base=inp_base + kk,
                                        wgt_base=wt, outer=mt, inner=1, acc_so=obg,
                                        inp_so=kbp))
        stores: list[Insn] = []
        if pi == len(passes) - 1:
            if requant:
                compute.append(isa.req(zout, lo, hi, dst_base=acc_base, src_base=2 * gr.start,
                                       outer=mt, inner=obg, dst_so=obg, dst_si=1, src_si=2))
            stores += _store(Buffer.ACC8 if requant else Buffer.ACC, elem_out, slot=out.slot,
                             sp_base=acc_base,
                             offset=out.offset + (m0 * nbo + gr.start) * elem_out,
                             y_size=mt, x_size=obg, y_stride=nbo)
        steps.append(_Step(loads, compute, stores, new["acc"]))
    insns = _pipeline(steps)
    zfill = 0
    if requant:
        zfill = min(max(requant[2], requant[3]), requant[4])
    return Kernel(
        name, tuple(insns),
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
    with compiler.quantize.kernels.qgemm (+ clamp to `act`).

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
    of compiler.quantize.kernels.qadd's 31-bit, so the result can differ from qadd by 1 LSB
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
            loads.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                  y_size=1, x_size=params, y_stride=params))
        loads += [isa.load(Buffer.ACC8, slot=a.slot, sp_base=ab, offset=a.offset + r0 * n,
                           y_size=1, x_size=rr, y_stride=rr),
                  isa.load(Buffer.ACC8, slot=b.slot, sp_base=bb, offset=b.offset + r0 * n,
                           y_size=1, x_size=rr, y_stride=rr)]
        lp = {"outer": 1, "inner": rr, "dst_si": 1}
        compute = [
            isa.alu(AluOp.MUL, imm=ma, dst_base=ab, **lp),
            isa.alu(AluOp.MUL, imm=mb, dst_base=bb, **lp),
            isa.alu(AluOp.ADD, dst_base=ab, src_base=bb, src_si=1, **lp),
            isa.alu(AluOp.ADD, dst_base=ab, src_base=2, **lp),
            isa.req(zout, lo, hi, dst_base=ab, src_base=0, **lp),
        ]
        store = isa.store(Buffer.ACC8, slot=out.slot, sp_base=ab, offset=out.offset + r0 * n,
                          y_size=1, x_size=rr, y_stride=rr)
        steps.append(_Step(loads, compute, [store], True))
    shape = (bsz, c, h, w)
    nb = layout.act_bytes(c, h, w, n, bsz)
    return Kernel(
        name, tuple(_pipeline(steps)),
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
            loads.append(isa.load(Buffer.ACC, slot=consts.slot, sp_base=0, offset=prm_off,
                                  y_size=1, x_size=params, y_stride=params))
        loads.append(isa.load(Buffer.ACC8, slot=inp.slot, sp_base=base,
                              offset=inp.offset + r0 * n, y_size=1, x_size=rr, y_stride=rr))
        lp = {"outer": 1, "inner": rr, "dst_si": 1}
        compute = [isa.alu(AluOp.ADD, imm=-zin, dst_base=base, **lp)] if zin else []
        compute.append(isa.req(zout, lo, hi, dst_base=base, src_base=0, **lp))
        store = isa.store(Buffer.ACC8, slot=out.slot, sp_base=base, offset=out.offset + r0 * n,
                          y_size=1, x_size=rr, y_stride=rr)
        steps.append(_Step(loads, compute, [store], True))
    shape = (bsz, c, h, w)
    nb = layout.act_bytes(c, h, w, n, bsz)
    return Kernel(
        name, tuple(_pipeline(steps)),
        inputs=(TensorInfo("input", inp, shape, "int8", nb, zin),),
        outputs=(TensorInfo("output", out, shape, "int8", nb, min(max(zout, lo), hi)),),
        consts=blob.done(),
        tiling={"rows": rows, "steps": len(steps)})


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


# --- joining layers -----------------------------------------------------------------------------

def barrier() -> Insn:
    """The compute instruction between two layers: waits for the last store of the previous
    layer (store -> compute) and releases the loads of the next (compute -> load). It adds 0
    to ACC row 0, which no unit uses at that moment."""
    return isa.alu(AluOp.ADD, imm=0, dst_base=0, outer=1, inner=1, pop_next=1, push_prev=1)


def join(kernels: Sequence[Kernel]) -> list[Insn]:
    """One instruction stream for layers run in order, ending with END.

    Every kernel leaves the token counters balanced, but its last stores may still be writing
    (the next layer's input) while the next layer's loads would start: between two kernels the
    last STORE of the first pushes store -> compute, a `barrier` pops it and pushes
    compute -> load, and the first LOAD of the second pops that. So a layer starts loading only
    after the previous one has written all its results, and its compute and loads never touch
    scratchpad rows the previous layer still uses.
    """
    out: list[Insn] = []
    for i, k in enumerate(kernels):
        body = list(k.insns)
        if i > 0:
            j = next(x for x, ins in enumerate(body) if ins.op == Opcode.LOAD)
            body[j] = _flag(body[j], "pop_next")
            out.append(barrier())
        if i + 1 < len(kernels):
            j = max(x for x, ins in enumerate(body) if ins.op == Opcode.STORE)
            body[j] = _flag(body[j], "push_prev")
        out += body
    out.append(isa.end())
    return out


# --- static analysis: cycle estimate and race check ----------------------------------------------

def _tokens(insn: Insn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    assert insn.unit is not None
    return isa.token_counters(insn.unit, insn.fields)


@dataclass(frozen=True)
class Estimate:
    """A static cycle estimate of a stream (the functional model's timing rules, no data)."""

    cycles: int                 # until the last unit finishes
    gemm_iterations: int        # array cycles doing useful work (one row in, N*N MACs)
    gemm_busy: int              # GEMM instruction cycles, + 1 per instruction
    compute_busy: int           # GEMM + ALU
    load_busy: int
    store_busy: int
    insns: int

    @property
    def gemm_fraction(self) -> float:
        """Fraction of all cycles in which the array does a GEMM iteration."""
        return self.gemm_iterations / self.cycles if self.cycles else 0.0

    def __str__(self) -> str:
        return (f"{self.cycles} cycles, {self.gemm_iterations} GEMM iterations "
                f"({100 * self.gemm_fraction:.1f} %), compute busy {self.compute_busy}, "
                f"load busy {self.load_busy}, store busy {self.store_busy}, "
                f"{self.insns} instructions")


def estimate(insns: Sequence[Insn], cfg: AccelConfig = DEFAULT_CFG, mem_latency: int = 0
             ) -> Estimate:
    """Cycle estimate of a stream: the in-order fetcher (one instruction per cycle, blocked
    while the unit holds queue_depth + 1 instructions), three units busy `insn_cycles` per
    instruction, starting when the tokens they pop have been pushed. With mem_latency 0 these
    are the functional model's timing rules (its `cycles` counter); RTL_MEM_LATENCY adds the
    burst latency of the RTL's load and store units (`mem_cycles`), a closer guess for the RTL.

    Processes the stream in order, so it also checks that every pop has its push earlier in
    the stream (AccelKernelError otherwise: such a program can deadlock on full queues).
    """
    cap = cfg.queue_depth + 1
    fetch_t = 0
    unit_t = [0, 0, 0]
    finish: list[list[int]] = [[], [], []]
    tokens: list[deque[int]] = [deque() for _ in range(4)]
    busy = [0, 0, 0]
    gemm_it = gemm_busy = count = 0
    for pc, insn in enumerate(insns):
        count += 1
        if insn.op == Opcode.END:
            break
        u = insn.unit
        assert u is not None
        t = fetch_t + 1
        k = len(finish[u]) - cap
        if k >= 0:
            t = max(t, finish[u][k])
        fetch_t = t
        start = max(unit_t[u], t + 1)
        pops, pushes = _tokens(insn)
        for c in pops:
            if not tokens[c]:
                raise AccelKernelError(f"instruction {pc} ({insn}) pops a token that no earlier "
                                       "instruction pushed")
            start = max(start, tokens[c].popleft())
        dur = insn_cycles(insn, cfg.n, mem_latency)
        end = start + dur
        unit_t[u] = end
        finish[u].append(end)
        busy[u] += dur
        if insn.op == Opcode.GEMM:
            gemm_it += insn.fields.get("outer", 0) * insn.fields.get("inner", 0)
            gemm_busy += dur
        for c in pushes:
            tokens[c].append(end)
    return Estimate(max([fetch_t, *unit_t]), gemm_it, gemm_busy, busy[Unit.COMPUTE],
                    busy[Unit.LOAD], busy[Unit.STORE], count)


def _footprint(insn: Insn, n: int) -> list[tuple[Any, int, int, bool]]:
    """(resource, first, last, writes) intervals an instruction touches: scratchpad rows, or
    bytes of memory relative to a slot (different slots are assumed not to overlap)."""
    f = insn
    if insn.op in (Opcode.LOAD, Opcode.STORE):
        buf = Buffer(f.buf)
        sp = "ACC" if buf in (Buffer.ACC, Buffer.ACC8) else buf.name
        e = isa.element_bytes(buf, n)
        y, x = f.y_size, f.x_size
        if not (y and x):
            return []
        mem = (("MEM", f.slot), f.offset, f.offset + ((y - 1) * f.y_stride + x) * e - 1)
        if insn.op == Opcode.LOAD:
            rows = (f.pad_top + y + f.pad_bottom) * (f.pad_left + x + f.pad_right)
            return [(sp, f.sp_base, f.sp_base + rows - 1, True), (*mem, False)]
        return [("ACC", f.sp_base, f.sp_base + y * x - 1, False), (*mem, True)]
    if not (f.outer and f.inner):
        return []
    if insn.op == Opcode.GEMM:
        return [("ACC", f.acc_base, f.acc_base + (f.outer - 1) * f.acc_so
                 + (f.inner - 1) * f.acc_si, True),
                ("INP", f.inp_base, f.inp_base + (f.outer - 1) * f.inp_so
                 + (f.inner - 1) * f.inp_si, False),
                ("WGT", f.wgt_base, f.wgt_base, False)]
    out = [("ACC", f.dst_base, f.dst_base + (f.outer - 1) * f.dst_so
            + (f.inner - 1) * f.dst_si, True)]
    if not f.use_imm:
        last = f.src_base + (f.outer - 1) * f.src_so + (f.inner - 1) * f.src_si
        out.append(("ACC", f.src_base, last + (1 if f.alu_op == AluOp.REQ else 0), False))
    return out


def check_races(insns: Sequence[Insn], cfg: AccelConfig = DEFAULT_CFG) -> int:
    """Prove a stream race-free: every two instructions on different units whose footprints
    (scratchpad row ranges, slot-relative memory byte ranges) overlap with at least one write
    are ordered by tokens (the k-th pop of a counter waits for its k-th push). Raises
    AccelKernelError naming the first unordered pair; returns the number of pairs checked.
    """
    n = cfg.n
    prog = [x for x in insns if x.op != Opcode.END]
    seq = [[], [], []]           # per unit: program indices
    vc: list[list[int]] = []     # per instruction: last seq of each unit that happened before
    unit_of: list[int] = []
    pos: list[int] = []
    pushers: list[list[int]] = [[], [], [], []]
    popped = [0, 0, 0, 0]
    last = [[-1, -1, -1] for _ in range(3)]
    for i, insn in enumerate(prog):
        u = int(insn.unit)
        v = list(last[u])
        pops, pushes = _tokens(insn)
        for c in pops:
            k = popped[c]
            popped[c] += 1
            if k >= len(pushers[c]):
                raise AccelKernelError(f"instruction {i} ({insn}) pops a token that no earlier "
                                       "instruction pushed")
            pv = vc[pushers[c][k]]
            v = [max(a, b) for a, b in zip(v, pv, strict=True)]
        v[u] = len(seq[u])
        pos.append(len(seq[u]))
        seq[u].append(i)
        vc.append(v)
        unit_of.append(u)
        last[u] = v
        for c in pushes:
            pushers[c].append(i)
    fps = [_footprint(x, n) for x in prog]
    checked = 0
    for i in range(len(prog)):
        u = unit_of[i]
        for v in range(3):
            if v == u:
                continue
            j_seq = vc[i][v] + 1        # v's instructions from here are not before i
            while j_seq < len(seq[v]):
                j = seq[v][j_seq]
                if vc[j][u] >= pos[i]:  # i happens before j (and before all later ones)
                    break
                if j > i:               # check each unordered pair once (from its later one)
                    j_seq += 1
                    continue
                checked += 1
                for ra, a0, a1, wa in fps[i]:
                    for rb, b0, b1, wb in fps[j]:
                        if ra == rb and (wa or wb) and a0 <= b1 and b0 <= a1:
                            raise AccelKernelError(
                                f"race: instruction {j} ({prog[j]}) and {i} ({prog[i]}) both "
                                f"touch {ra} {max(a0, b0)}..{min(a1, b1)} without a token "
                                "between them")
                j_seq += 1
    return checked

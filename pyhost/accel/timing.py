"""The accelerator's timing rules without data: busy cycles per instruction and a static cycle
estimate of a whole stream.

These are the functional model's timing rules (`AccelModel`'s cycle counters come from
`field_cycles`), and with a memory latency the compiler's guess for the RTL: its tiling search
costs candidate tilings with `mem_cycles`, and it reports `estimate` per layer. The burst limits
are the RTL's defaults from pyhost.spec.accel.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyhost.spec import isa
from pyhost.spec.accel import (
    BEAT_BYTES,
    DEFAULT_CONFIG,
    FETCH_BUFFER_BEATS,
    FETCH_MAX_BURST,
    MEM_MAX_BURST,
    MEM_MAX_OUTSTANDING,
    AccelConfig,
)
from pyhost.spec.isa import Buffer, Insn, Opcode, Unit

__all__ = ["BEAT_BYTES", "MAX_BURST_BEATS", "MAX_OUTSTANDING", "PERF_PARAMS", "RTL_MEM_LATENCY",
           "Estimate", "PerfEstimate", "PerfParams", "PerfParamsError", "StreamOrderError",
           "estimate", "field_cycles", "insn_cycles", "load_perf_params", "mem_cycles",
           "perf_estimate", "perf_estimate_raw", "perf_params_for"]


class StreamOrderError(ValueError):
    """A stream that pops a token no earlier instruction pushed (it can deadlock)."""


#: Memory model of `estimate(..., mem_latency=...)` and of the compiler's tiling search: the RTL
#: load and store units issue one burst per memory row (at most MEM_MAX_BURST beats) and keep at
#: most MEM_MAX_OUTSTANDING bursts in flight (pyhost.spec.accel, the RTL's defaults); a read
#: takes about 24 cycles (README: ~60 ns mean sequential latency at 400 MHz). The functional
#: model's timing estimate has no latency.
MAX_BURST_BEATS = MEM_MAX_BURST
MAX_OUTSTANDING = MEM_MAX_OUTSTANDING
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
    timing rule: a GEMM/ALU runs outer*inner iterations + 1 (XALU: isa.XALU_CYCLES per
    iteration), a LOAD/STORE
    max(scratchpad rows, bus beats) + 1; `mem_latency` adds the burst latency (`mem_cycles`)."""
    return field_cycles(insn.op, insn.fields, n, mem_latency)


def _xalu_cycles(alu_op: int) -> int:
    """Cycles per iteration of an XALU operation (1 for one that does not exist)."""
    try:
        return isa.XALU_CYCLES[isa.XAluOp(alu_op)]
    except ValueError:
        return 1


def field_cycles(op: Opcode, fields: Mapping[str, int], n: int, mem_latency: int = 0) -> int:
    """`insn_cycles` of an instruction given as its opcode and field dict (absent fields 0)."""
    f = fields.get
    if op in (Opcode.GEMM, Opcode.ALU, Opcode.DW):
        return f("outer", 0) * f("inner", 0) + 1
    if op == Opcode.XALU:
        return f("outer", 0) * f("inner", 0) * _xalu_cycles(f("alu_op", 0)) + 1
    if op in (Opcode.LOAD, Opcode.STORE):
        e = isa.element_bytes(Buffer(f("buf", 0)), n)
        y, x = f("y_size", 0), f("x_size", 0)
        rows = (f("pad_top", 0) + y + f("pad_bottom", 0)) \
            * (f("pad_left", 0) + x + f("pad_right", 0))
        return mem_cycles(y if x else 0, x * e, rows, mem_latency)
    return 0


@dataclass(frozen=True)
class Estimate:
    """A static cycle estimate of a stream (the functional model's timing rules, no data)."""

    cycles: int                 # until the last unit finishes
    gemm_iterations: int        # array cycles doing work (a GEMM or DW iteration)
    gemm_busy: int              # GEMM and DW instruction cycles, + 1 per instruction
    compute_busy: int           # GEMM + DW + ALU
    load_busy: int
    store_busy: int
    insns: int
    array_macs: int = 0         # MACs the array does (ACC_MACS): N x N per GEMM iteration,
                                # taps x N per DW iteration

    @property
    def gemm_fraction(self) -> float:
        """Fraction of all cycles in which the array does a GEMM iteration."""
        return self.gemm_iterations / self.cycles if self.cycles else 0.0

    def __str__(self) -> str:
        return (f"{self.cycles} cycles, {self.gemm_iterations} GEMM iterations "
                f"({100 * self.gemm_fraction:.1f} %), compute busy {self.compute_busy}, "
                f"load busy {self.load_busy}, store busy {self.store_busy}, "
                f"{self.insns} instructions")


def estimate(insns: Sequence[Insn], cfg: AccelConfig = DEFAULT_CONFIG, mem_latency: int = 0
             ) -> Estimate:
    """Cycle estimate of a stream: the in-order fetcher (one instruction per cycle, blocked
    while the unit holds queue_depth + 1 instructions), three units busy `insn_cycles` per
    instruction, starting when the tokens they pop have been pushed. With mem_latency 0 these
    are the functional model's timing rules (its `cycles` counter); RTL_MEM_LATENCY adds the
    burst latency of the RTL's load and store units (`mem_cycles`), a closer guess for the RTL.

    Processes the stream in order, so it also checks that every pop has its push earlier in
    the stream (StreamOrderError otherwise: such a program can deadlock on full queues).

    The busy cycles of every instruction (`field_cycles`) are computed with numpy from the
    encoded stream (an `isa.Stream` as it is; other sequences are encoded first); the loop that
    follows the fetcher, the queues and the tokens runs on plain ints.
    """
    stream = isa.Stream.of(insns)
    words = np.frombuffer(stream.raw, "<u8").reshape(-1, 2)
    op = (words[:, 0] & np.uint64(0xF)).astype(np.int64)
    ends = np.flatnonzero(op == Opcode.END)
    count = int(ends[0]) + 1 if ends.size else op.size      # END counts, what follows not
    k = int(ends[0]) if ends.size else op.size
    lo, hi, op = words[:k, 0], words[:k, 1], op[:k]
    unit = _UNIT_OF[op]
    if (unit < 0).any():
        raise ValueError(f"estimate: instruction {int(np.flatnonzero(unit < 0)[0])} has an "
                         "illegal opcode")
    flags = ((lo >> np.uint64(4)) & np.uint64(0xF)).astype(np.int64)
    dur, it, lanes = _busy_cycles(op, lo, hi, cfg.n, mem_latency)
    array = (op == Opcode.GEMM) | (op == Opcode.DW)
    busy = [int(dur[unit == u].sum()) for u in range(3)]

    cap = cfg.queue_depth + 1
    fetch_t = 0
    unit_t = [0, 0, 0]
    #: the finish times of each unit's last `cap` instructions (the queue it fills)
    recent: list[deque[int]] = [deque(maxlen=cap) for _ in range(3)]
    tokens: list[deque[int]] = [deque() for _ in range(4)]
    counters = _COUNTERS

    def scalar(a: int, b: int) -> None:
        """Instructions a..b-1, one by one."""
        nonlocal fetch_t
        for pc, u, d, f in zip(range(a, b), unit[a:b].tolist(), dur[a:b].tolist(),
                               flags[a:b].tolist(), strict=True):
            t = fetch_t + 1
            r = recent[u]
            if len(r) == cap and r[0] > t:
                t = r[0]
            fetch_t = t
            start = unit_t[u]
            if start <= t:
                start = t + 1
            if f:
                pops, pushes = counters[u][f]
                for c in pops:
                    q = tokens[c]
                    if not q:
                        raise StreamOrderError(f"instruction {pc} ({stream[pc]}) pops a token "
                                               "that no earlier instruction pushed")
                    v = q.popleft()
                    if v > start:
                        start = v
                end = start + d
                for c in pushes:
                    tokens[c].append(end)
            else:
                end = start + d
            unit_t[u] = end
            r.append(end)

    # a run of flagless instructions of one unit (a layer's GEMMs between two loads) has a
    # closed form after its first `cap` (`_busy_tail`), which needs every instruction to take
    # a cycle at least (always so) and room for two in a queue
    fast = cap >= 2 and bool(k) and int(dur.min()) >= 1
    psum = np.cumsum(dur)
    for a, b, run in _runs(unit, flags, RUN_MIN) if fast else [(0, k, False)]:
        i = min(b, a + cap) if run else b
        scalar(a, i)
        if i < b:
            u = int(unit[a])
            fetch_t, unit_t[u] = _busy_tail(psum, i, b, fetch_t, unit_t[u], recent[u], cap)
    return Estimate(max([fetch_t, *unit_t]), int(it[array].sum()), int(dur[array].sum()),
                    busy[Unit.COMPUTE], busy[Unit.LOAD], busy[Unit.STORE], count,
                    int((it * lanes)[array].sum()) * cfg.n)


#: `estimate` takes runs of at least this many flagless instructions of one unit in closed
#: form (`_busy_tail`); shorter ones go through its loop.
RUN_MIN = 32


def _runs(unit: np.ndarray, flags: np.ndarray, least: int) -> list[tuple[int, int, bool]]:
    """The stream cut into pieces (start, stop, run): the maximal runs of at least ``least``
    consecutive instructions of one unit without flags (run True), and what lies between
    them (run False)."""
    k = unit.size
    plain = flags == 0
    cut = np.ones(k + 1, bool)
    cut[1:k] = (unit[1:] != unit[:-1]) | ~plain[1:] | ~plain[:-1]
    edges = np.flatnonzero(cut)
    starts, stops = edges[:-1], edges[1:]
    long = (stops - starts >= least) & plain[starts]
    out: list[tuple[int, int, bool]] = []
    at = 0
    for a, b in zip(starts[long].tolist(), stops[long].tolist(), strict=True):
        if a > at:
            out.append((at, a, False))
        out.append((a, b, True))
        at = b
    if at < k:
        out.append((at, k, False))
    return out


def _busy_tail(psum: np.ndarray, i: int, b: int, fetch: int, busy_until: int,
               recent: deque[int], cap: int) -> tuple[int, int]:
    """`estimate`'s loop over instructions i..b-1 of a run of one unit without flags, in closed
    form: (the fetch time of the last, its finish time); ``recent`` (the unit's queue: the
    finish times of instructions i-cap..i-1, all of the run) gets theirs. ``psum``: the running
    sum of the stream's busy cycles d; ``fetch`` and ``busy_until``: the fetch and finish times
    of instruction i-1.

    For j >= i the loop fetches j at T_j = max(T_{j-1} + 1, e_{j-cap}) (its queue is full: the
    finish time of the instruction cap places back). Instruction j-1 finishes at
    e_{j-1} >= T_{j-1} + 2 (it starts a cycle after its fetch at the earliest and takes a cycle
    at least) and after e_{j-cap} (finish times of one unit grow), so e_{j-1} > T_j: j starts
    when j-1 finishes, e_j = e_{j-1} + d_j, the running sum of d. And e_{j-cap} + (b-1-j) does
    not fall as j grows, so T_{b-1} = max(T_{i-1} + b - i, e_{b-1-cap})."""
    base = busy_until - int(psum[i - 1])

    def end(j: int) -> int:
        if j >= i - 1:
            return base + int(psum[j])
        return recent[j - (i - cap)]          # still in the queue

    last = b - 1
    t = max(fetch + b - i, end(last - cap))
    finish = end(last)
    recent.extend(end(j) for j in range(max(i, b - cap), b))
    return t, finish


#: Cycles per iteration of each XALU alu_op (1 for those that do not exist: never fetched)
_XALU_PER = np.ones(8, np.int64)
for _x, _c in isa.XALU_CYCLES.items():
    _XALU_PER[int(_x)] = _c


def _busy_cycles(op: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, mem_latency: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`field_cycles` of every instruction (opcodes ``op``, words as their ``lo``/``hi`` 64-bit
    halves), their iterations (GEMM, DW, ALU, XALU) and the array rows each GEMM/DW iteration
    uses (N; DW: its taps)."""
    dur = np.zeros(op.size, np.int64)
    it = np.zeros(op.size, np.int64)
    lanes = np.full(op.size, n, np.int64)
    for code in (Opcode.GEMM, Opcode.ALU, Opcode.DW, Opcode.XALU):
        sel = op == code
        if sel.any():
            pos = _positions(code)
            ls, hs = lo[sel], hi[sel]
            it[sel] = field_bits(ls, hs, *pos["outer"]) * field_bits(ls, hs, *pos["inner"])
            dur[sel] = it[sel] + 1
            if code == Opcode.DW:
                lanes[sel] = field_bits(ls, hs, *pos["taps"])
            if code == Opcode.XALU:                    # XALU_CYCLES per iteration
                dur[sel] = it[sel] * _XALU_PER[field_bits(ls, hs, *pos["alu_op"])] + 1
    mem = (op == Opcode.LOAD) | (op == Opcode.STORE)
    if mem.any():
        rows, row_bytes, sp = _mem_geometry(lo[mem], hi[mem], n)
        dur[mem] = _mem_cycles_array(rows, row_bytes, sp, mem_latency)
    return dur, it, lanes


def _mem_geometry(lo: np.ndarray, hi: np.ndarray, n: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of LOAD/STOREs (words as ``lo``/``hi``): the memory rows they move (0 when x_size is
    0), the bytes of each row, and the scratchpad rows they write or read (padding
    included)."""
    pos = _positions(Opcode.LOAD)                      # LOAD and STORE share the MEM format
    g = {k: field_bits(lo, hi, *pos[k]) for k in ("buf", "y_size", "x_size", "pad_top",
                                              "pad_bottom", "pad_left", "pad_right")}
    e = np.array([isa.element_bytes(Buffer(b), n) for b in range(4)], np.int64)[g["buf"]]
    y, x = g["y_size"], g["x_size"]
    sp = (g["pad_top"] + y + g["pad_bottom"]) * (g["pad_left"] + x + g["pad_right"])
    return np.where(x > 0, y, 0), x * e, sp


def _mem_cycles_array(rows: np.ndarray, row_bytes: np.ndarray, sp_rows: np.ndarray,
                      mem_latency: int) -> np.ndarray:
    """`mem_cycles` of arrays of LOAD/STOREs."""
    beats = -(-row_bytes // BEAT_BYTES)
    per_row = beats
    if mem_latency:
        bursts = -(-beats // MAX_BURST_BEATS)
        held = -(-bursts * (mem_latency + np.minimum(beats, MAX_BURST_BEATS)) // MAX_OUTSTANDING)
        per_row = np.where(beats > 0, np.maximum(beats, held), beats)
    return np.maximum(sp_rows, rows * per_row) + 1


# --- the calibrated performance model ------------------------------------------------------------

@dataclass(frozen=True)
class PerfParams:
    """The constants of `perf_estimate`, in accelerator clock cycles (400 MHz), calibrated
    against card_top under Verilator (bench/perf_model_bench.py, docs/perf-model.md).

    The rules above (`field_cycles`, `estimate`) stay what they were: the functional model's
    own counters and the compiler's tiling search use them. These model what they leave out:
    the fetch latency, each unit's hand-over and start cycles, the memory latency of every
    LOAD and STORE, the write responses, the token hand-over and the end of a run.

    Only fitted numbers: what the hardware's build defines (burst lengths, outstanding bursts,
    queue depth, bus width, the fetch buffer) comes from pyhost.spec.accel and the run's
    AccelConfig. The values live in one place, perf_params.json (`load_perf_params`).
    """

    #: An instruction burst's request to its first beat (the fetch unit's read latency).
    fetch_latency: int
    #: Dispatch to the unit holding the instruction (the queue's registers).
    dispatch: int
    #: Cycles a compute instruction occupies the unit beyond its iterations.
    compute_extra: int
    #: Last iteration issued to its result written (the push of a compute instruction).
    compute_push: int
    #: A LOAD starting to its first burst's address, and its first data beat's latency.
    load_start: int
    read_latency: int
    #: The last element written to the LOAD's push.
    load_end: int
    #: A STORE starting to its first write beat; the last beat to its B response.
    store_start: int
    write_latency: int
    #: Cycles between a unit finishing one instruction and starting the next it holds
    #: (load, compute, store: taking the next instruction from the queue and decoding it).
    load_gap: int
    compute_gap: int
    store_gap: int
    #: A token pushed to the unit that pops it seeing it (the token counters' registers).
    token_latency: int
    #: The last unit finishing to the end of the run (the counter stops).
    end: int
    #: Extra cycles per memory row of a LOAD's tile (moving to the next row's first beat).
    load_row: float = 0.0


#: Where the calibrated constants live: data written by the calibration
#: (bench/perf_model_bench.py --fit), so that refitting them changes no code.
PERF_PARAMS_FILE = Path(__file__).with_name("perf_params.json")


class PerfParamsError(ValueError):
    """A performance-model calibration file that is missing, malformed or incomplete."""


def load_perf_params(path: Path = PERF_PARAMS_FILE) -> dict[int | None, PerfParams]:
    """The calibration file's PerfParams: ``params`` (key None: any array size) and, optional,
    ``by_n`` (per array size N, values over ``params``). Every field without a default must be
    in ``params``; an unknown name, a missing one or a value that is not a number is an error
    naming it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PerfParamsError(f"{path}: cannot read the performance-model calibration: {e}"
                              ) from e
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise PerfParamsError(f"{path}: expected an object with a 'params' object")
    fields = {f.name: f for f in dataclasses.fields(PerfParams)}
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING}
    base = data["params"]
    by_n = data.get("by_n", {})
    if not isinstance(by_n, dict):
        raise PerfParamsError(f"{path}: 'by_n' must be an object of N -> params")
    out: dict[int | None, PerfParams] = {}
    for n, over in [(None, {}), *by_n.items()]:
        if not isinstance(over, dict):
            raise PerfParamsError(f"{path}: by_n[{n}] must be an object")
        vals = {**base, **over}
        bad = sorted(set(vals) - set(fields))
        if bad:
            raise PerfParamsError(f"{path}: unknown performance-model parameter(s) {bad}")
        missing = sorted(required - set(vals))
        if missing:
            raise PerfParamsError(f"{path}: missing performance-model parameter(s) {missing}")
        for k, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise PerfParamsError(f"{path}: {k} must be a non-negative number, got {v!r}")
        try:
            key = None if n is None else int(n)
        except ValueError:
            raise PerfParamsError(f"{path}: by_n key {n!r} is not an array size") from None
        out[key] = PerfParams(**vals)
    return out


_PERF_BY_N = load_perf_params()
#: The calibrated constants of any N without its own fit (docs/perf-model.md).
PERF_PARAMS = _PERF_BY_N[None]


def perf_params_for(n: int) -> PerfParams:
    """The calibrated constants for an array of size ``n``."""
    return _PERF_BY_N.get(n, _PERF_BY_N[None])


@dataclass(frozen=True)
class PerfEstimate:
    """What `perf_estimate` says of one run: the counters the RTL reports, estimated."""

    cycles: int
    load_busy: int
    load_stall: int
    compute_busy: int
    compute_stall: int
    store_busy: int
    store_stall: int
    gemm_busy: int

    def counters(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("cycles", "load_busy", "load_stall",
                                              "compute_busy", "compute_stall", "store_busy",
                                              "store_stall", "gemm_busy")}


def field_bits(lo: np.ndarray, hi: np.ndarray, lsb: int, width: int) -> np.ndarray:
    """An unsigned field of every 128-bit instruction (``lo``/``hi``: its two 64-bit halves)."""
    mask = np.uint64((1 << width) - 1)
    if lsb >= 64:
        v = hi >> np.uint64(lsb - 64)
    elif lsb + width <= 64:
        v = lo >> np.uint64(lsb)
    else:
        v = (lo >> np.uint64(lsb)) | (hi << np.uint64(64 - lsb))
    return (v & mask).astype(np.int64)


def _positions(op: Opcode) -> dict[str, tuple[int, int]]:
    out, lsb = {}, 0
    for f in isa.FORMATS[op]:
        out[f.name] = (lsb, f.width)
        lsb += f.width
    return out


def _unit_cycles(raw: np.ndarray, n: int, p: PerfParams
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per instruction of ``raw`` (uint8, a whole number of instructions): opcode, the flags
    (pop_prev, pop_next, push_prev, push_next as bits 0..3), the cycles it occupies its unit
    from its start and the cycles from its start to its push, under `perf_estimate`'s rules:

    - GEMM / DW / ALU: one iteration per cycle, `compute_extra` more; the push `compute_push`
      after the last (an empty loop: one cycle); XALU likewise with isa.XALU_CYCLES per
      iteration;
    - LOAD: `load_start`, then the later of its scratchpad writes (one row per cycle) and its
      memory data: bursts of at most MAX_BURST_BEATS beats per memory row, MAX_OUTSTANDING in
      flight, `read_latency` to the first beat of each, one beat per cycle; then `load_end`;
    - STORE: `store_start`, one scratchpad row or beat per cycle, then the last write
      response (`write_latency`).
    """
    words = raw.view("<u8").reshape(-1, 2)
    lo, hi = words[:, 0], words[:, 1]
    op = (lo & np.uint64(0xF)).astype(np.int64)
    flags = ((lo >> np.uint64(4)) & np.uint64(0xF)).astype(np.int64)
    occ = np.zeros(op.size, np.int64)
    push = np.zeros(op.size, np.int64)
    comp = (op == Opcode.GEMM) | (op == Opcode.ALU) | (op == Opcode.DW) | (op == Opcode.XALU)
    if comp.any():
        # the iterations' cycles: `field_cycles` less its one extra (XALU: XALU_CYCLES each)
        it = np.where(comp, _busy_cycles(np.where(comp, op, 0), lo, hi, n, 0)[0] - 1, 0)
        c_occ = np.where(it > 0, it + p.compute_extra, 1)
        occ[comp] = c_occ[comp]
        push[comp] = np.where(it > 0, c_occ + p.compute_push, 1)[comp]
    mem = (op == Opcode.LOAD) | (op == Opcode.STORE)
    if mem.any():
        rows, row_bytes, sp = _mem_geometry(lo[mem], hi[mem], n)
        beats_row = -(-row_bytes // BEAT_BYTES)
        bursts = rows * -(-beats_row // MAX_BURST_BEATS)
        beats = rows * beats_row
        m = beats / np.maximum(bursts, 1)
        period = np.maximum(m, (p.read_latency + m) / MAX_OUTSTANDING)
        data = np.where(bursts > 0, np.floor(p.read_latency + m + (bursts - 1) * period + 0.5),
                        0).astype(np.int64)
        is_load = op[mem] == Opcode.LOAD
        l_occ = p.load_start + np.maximum(sp + np.floor(rows * p.load_row).astype(np.int64),
                                          data) + p.load_end
        s_occ = p.store_start + np.maximum(sp, beats) + np.where(bursts > 0, p.write_latency, 0)
        m_occ = np.where(sp > 0, np.where(is_load, l_occ, s_occ), 1)
        occ[mem] = m_occ
        push[mem] = m_occ
    return op, flags, occ, push, comp


#: The fetch unit's prefetch buffer (beats) and the instructions per beat.
_FETCH_BUF = FETCH_BUFFER_BEATS
_IPB = BEAT_BYTES // isa.INSN_BYTES


class _Fetcher:
    """When instruction k of a run is in the fetch unit's buffer: bursts of FETCH_MAX_BURST
    beats, each requested when the buffer has room for it (beats are freed as their last
    instruction is dispatched) and `fetch_latency` cycles to its first beat."""

    def __init__(self, p: PerfParams, first_slot: int) -> None:
        self.lat = p.fetch_latency
        self.slot0 = first_slot
        self.issue: list[int] = []              # request cycle of each burst
        self.freed: list[int] = []              # cycle each beat was freed

    def ready(self, k: int) -> int:
        beat = (k + self.slot0) // _IPB
        b = beat // FETCH_MAX_BURST
        while len(self.issue) <= b:
            j = len(self.issue)
            t = self.issue[-1] + 1 if self.issue else 0
            need = (j + 1) * FETCH_MAX_BURST - _FETCH_BUF     # beats that must be free first
            if need > 0:
                t = max(t, self.freed[need - 1] + 1)
            self.issue.append(t)
        return self.issue[b] + self.lat + beat - b * FETCH_MAX_BURST

    def dispatched(self, k: int, t: int) -> None:
        if (k + self.slot0) % _IPB == _IPB - 1:
            self.freed.append(t)


def perf_estimate(insns: Sequence[Insn], cfg: AccelConfig = DEFAULT_CONFIG,
                  p: PerfParams | None = None, insn_base: int = 0) -> PerfEstimate:
    """`perf_estimate_raw` of a program given as instructions."""
    return perf_estimate_raw(b"".join(isa.encode(i) for i in insns), cfg, p, insn_base)


#: Unit of each opcode (LOAD 1, STORE 2, GEMM 3, ALU 4, END 5, DW 6 in isa.Opcode), -1: none.
_UNIT_OF = np.full(16, -1, np.int64)
for _op, _unit in isa.UNIT_OF.items():
    _UNIT_OF[_op] = int(_unit)
#: Token counters by bitmask (bit q: counter q).
_QUEUES = [tuple(q for q in range(4) if m >> q & 1) for m in range(16)]
#: Counters popped / pushed per unit and flag bit (pop_prev, pop_next, push_prev, push_next).
_FLAG_COUNTERS = {u: [isa.POPS[Unit(u)].get("pop_prev"), isa.POPS[Unit(u)].get("pop_next"),
                      isa.PUSHES[Unit(u)].get("push_prev"), isa.PUSHES[Unit(u)].get("push_next")]
                  for u in (Unit.LOAD, Unit.COMPUTE, Unit.STORE)}
#: `isa.token_counters` by unit and flag bits (pop_prev, pop_next, push_prev, push_next as
#: bits 0..3): (counters popped, counters pushed).
_COUNTERS = [[isa.token_counters(Unit(u), {name: m >> bit & 1 for bit, name in enumerate(
    ("pop_prev", "pop_next", "push_prev", "push_next"))}) for m in range(16)] for u in range(3)]


def perf_estimate_raw(raw: bytes | np.ndarray, cfg: AccelConfig = DEFAULT_CONFIG,
                      p: PerfParams | None = None, insn_base: int = 0) -> PerfEstimate:
    """The calibrated cycle estimate of one run of the program image ``raw`` (up to its END;
    the RTL's ACC_CYCLES and the units' busy and stall counters): the fetch unit's bursts
    (`_Fetcher`), one dispatch per cycle in order, blocked while the unit's queue is full,
    `estimate`'s token chains, and `_unit_cycles` for the units; `PerfParams` for the
    constants (None: `perf_params_for` the array size). ``insn_base``: the program's card
    address (where it sits in its first beat). The units' cycles are computed with numpy for
    the whole program; the loop that follows the queues and tokens runs on plain ints
    (ResNet-50's 508k instructions in about 0.3 s)."""
    if p is None:
        p = perf_params_for(cfg.n)
    arr = np.frombuffer(raw, np.uint8) if isinstance(raw, bytes | bytearray | memoryview) \
        else np.asarray(raw, np.uint8)
    arr = arr[:arr.size - arr.size % isa.INSN_BYTES]
    op, flags, occ, push, comp = _unit_cycles(np.ascontiguousarray(arr), cfg.n, p)
    ends = np.flatnonzero(op == Opcode.END)
    count = int(ends[0]) if ends.size else op.size
    u_arr = _UNIT_OF[op[:count]]
    if (u_arr < 0).any():
        raise ValueError("perf_estimate: an instruction with an illegal opcode before END")
    # per instruction: the token counters it pops and pushes (bit q: counter q)
    fl = flags[:count]
    pop_m = np.zeros(count, np.int64)
    push_m = np.zeros(count, np.int64)
    for u, fc in _FLAG_COUNTERS.items():
        sel = u_arr == u
        for bit, q in enumerate(fc):
            if q is not None:
                m = sel & ((fl >> bit) & 1 == 1)
                if bit < 2:
                    pop_m[m] |= 1 << q
                else:
                    push_m[m] |= 1 << q
    occ_c = occ[:count]
    busy = [int(occ_c[u_arr == u].sum()) for u in range(3)]
    is_gemm = (op[:count] == Opcode.GEMM) | (op[:count] == Opcode.DW)
    gemm_busy = int(occ_c[is_gemm].sum())
    cap = cfg.queue_depth + 1
    fetcher = _Fetcher(p, (insn_base % BEAT_BYTES) // isa.INSN_BYTES)
    slot0 = fetcher.slot0
    # the fetch unit: instruction pc is in beat (pc + slot0) // _IPB of burst beat // FETCH_MAX_
    # BURST, ready fetch_latency + its place in the burst after the burst's request
    slots = np.arange(count, dtype=np.int64) + slot0
    beat = slots // _IPB
    burst = beat // FETCH_MAX_BURST
    off = p.fetch_latency + beat - burst * FETCH_MAX_BURST
    frees = slots % _IPB == _IPB - 1                  # the beat's last instruction
    fetch_t = -1
    gaps = (p.load_gap, p.compute_gap, p.store_gap)
    unit_t = [0, 0, 0]
    free_at = [-(1 << 62)] * 3                        # unit_t + gap once the unit has started
    n_done = [0, 0, 0]
    finish: list[list[int]] = [[], [], []]
    tokens: list[deque[int]] = [deque() for _ in range(4)]
    stall = [0, 0, 0]
    last = 0
    tl = p.token_latency
    disp = p.dispatch
    issue, freed = fetcher.issue, fetcher.freed
    queues = _QUEUES
    pc = 0
    for u, b, o, fr, po, pu, occ_k, push_k in zip(
            u_arr.tolist(), burst.tolist(), off.tolist(), frees.tolist(), pop_m.tolist(),
            push_m.tolist(), occ_c.tolist(), push[:count].tolist(), strict=True):
        t = fetch_t + 1
        if len(issue) <= b:
            fetcher.ready(pc)                  # request the bursts up to this one
        r = issue[b] + o
        if r > t:
            t = r
        k = n_done[u] - cap
        if k >= 0:
            v = finish[u][k]
            if v > t:
                t = v
        fetch_t = t
        if fr:
            freed.append(t)
        ready = t + disp
        if free_at[u] > ready:
            ready = free_at[u]
        start = ready
        if po:
            for q in queues[po]:
                tq = tokens[q]
                if not tq:
                    raise StreamOrderError(f"instruction {pc} pops a token that no earlier "
                                           "instruction pushed")
                v = tq.popleft()
                if v > start:
                    start = v
            stall[u] += start - ready
        end = start + occ_k
        unit_t[u] = end
        free_at[u] = end + gaps[u]
        finish[u].append(end)
        n_done[u] += 1
        pt = start + push_k
        if pu:
            for q in queues[pu]:
                tokens[q].append(pt + tl)
        if pt > last:
            last = pt
        pc += 1
    t_end = fetch_t + 1
    r = fetcher.ready(count) if count < op.size else t_end
    fetch_t = max(t_end, r)
    cycles = max(last, *unit_t, fetch_t) + p.end
    return PerfEstimate(cycles, busy[Unit.LOAD], stall[Unit.LOAD], busy[Unit.COMPUTE],
                        stall[Unit.COMPUTE], busy[Unit.STORE], stall[Unit.STORE], gemm_busy)

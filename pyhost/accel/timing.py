"""The accelerator's timing rules without data: busy cycles per instruction and a static cycle
estimate of a whole stream.

These are the functional model's timing rules (`AccelModel`'s cycle counters come from
`field_cycles`), and with a memory latency the compiler's guess for the RTL: its tiling search
costs candidate tilings with `mem_cycles`, and it reports `estimate` per layer. The burst limits
are the RTL's defaults from pyhost.spec.accel.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyhost.spec import isa
from pyhost.spec.accel import (
    BEAT_BYTES,
    DEFAULT_CONFIG,
    MEM_MAX_BURST,
    MEM_MAX_OUTSTANDING,
    AccelConfig,
)
from pyhost.spec.isa import Buffer, Insn, Opcode, Unit

__all__ = ["BEAT_BYTES", "MAX_BURST_BEATS", "MAX_OUTSTANDING", "RTL_MEM_LATENCY", "Estimate",
           "StreamOrderError", "estimate", "field_cycles", "insn_cycles", "mem_cycles"]


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
    timing rule: a GEMM/ALU runs outer*inner iterations + 1, a LOAD/STORE
    max(scratchpad rows, bus beats) + 1; `mem_latency` adds the burst latency (`mem_cycles`)."""
    return field_cycles(insn.op, insn.fields, n, mem_latency)


def field_cycles(op: Opcode, fields: Mapping[str, int], n: int, mem_latency: int = 0) -> int:
    """`insn_cycles` of an instruction given as its opcode and field dict (absent fields 0)."""
    f = fields.get
    if op in (Opcode.GEMM, Opcode.ALU):
        return f("outer", 0) * f("inner", 0) + 1
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


def estimate(insns: Sequence[Insn], cfg: AccelConfig = DEFAULT_CONFIG, mem_latency: int = 0
             ) -> Estimate:
    """Cycle estimate of a stream: the in-order fetcher (one instruction per cycle, blocked
    while the unit holds queue_depth + 1 instructions), three units busy `insn_cycles` per
    instruction, starting when the tokens they pop have been pushed. With mem_latency 0 these
    are the functional model's timing rules (its `cycles` counter); RTL_MEM_LATENCY adds the
    burst latency of the RTL's load and store units (`mem_cycles`), a closer guess for the RTL.

    Processes the stream in order, so it also checks that every pop has its push earlier in
    the stream (StreamOrderError otherwise: such a program can deadlock on full queues).
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
        pops, pushes = isa.token_counters(u, insn.fields)
        for c in pops:
            if not tokens[c]:
                raise StreamOrderError(f"instruction {pc} ({insn}) pops a token that no earlier "
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

"""cocotb bench for accel_compute, the accelerator's compute unit (GEMM, DW, ALU and XALU
instructions).

The bench stands in for the accelerator top: it models the three scratchpads (synchronous reads,
data the cycle after *_re; a read and a write of one row in the same cycle read the old data; the
INP port's rows that are not read get random data, and the rows that are must sit in the banks
(first row + k) mod N, docs/isa.md DW),
feeds instructions through the queue port (encoded with pyhost.spec.isa), drives the token
inputs from its own counters, and raises stop one cycle after an error as the top does. Results
are compared with :func:`reference`, a sequential model of the GEMM/ALU loops written from
docs/isa.md: every scratchpad write in order (row and data), the final accumulator contents, the
pops and pushes of each instruction and their timing against the writes, and the errors.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import Event, FallingEdge, RisingEdge

from pyhost.spec import isa
from pyhost.spec.isa import AccelError, AluOp, Insn, Opcode, XAluOp
from tb.accel.test_accel_vector import XDIV, XSQRT, alu_ref
from tb.common.clocking import reset, start_clock

PC0 = 0x40          # insn_pc of a program's first instruction (the unit must pass pcs through)
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


# --- scratchpads and the sequential reference ----------------------------------------------------

@dataclass
class Memories:
    """Scratchpad contents, one Python int per row (lane n at bits [8n +: 8] / [32n +: 32])."""

    n: int
    inp: list[int]
    wgt: list[int]
    acc: list[int]

    @classmethod
    def random(cls, rng: random.Random, n: int, inp: int, wgt: int, acc: int) -> Memories:
        return cls(n, [rng.getrandbits(8 * n) for _ in range(inp)],
                   [rng.getrandbits(8 * n * n) for _ in range(wgt)],
                   [rng.getrandbits(32 * n) for _ in range(acc)])

    def copy(self) -> Memories:
        return Memories(self.n, list(self.inp), list(self.wgt), list(self.acc))


def lanes8(v: int, count: int) -> np.ndarray:
    return np.frombuffer(v.to_bytes(count, "little"), np.int8).astype(np.int64)


def lanes32(v: int, n: int) -> list[int]:
    return np.frombuffer(v.to_bytes(4 * n, "little"), np.int32).tolist()


def pack32(lanes) -> int:
    return int.from_bytes(np.asarray(lanes, np.int64).astype(np.uint32).tobytes(), "little")


def last_row(base: int, outer: int, inner: int, so: int, si: int) -> int:
    """The largest row a loop touches (strides are unsigned)."""
    return base + (outer - 1) * so + (inner - 1) * si


def range_ok(ins: Insn, mem: Memories) -> bool:
    """The SP_RANGE check of docs/isa.md: every row the instruction would touch exists."""
    inp_d, wgt_d, acc_d = len(mem.inp), len(mem.wgt), len(mem.acc)
    if ins.op in (Opcode.GEMM, Opcode.DW):
        o, i = ins.outer, ins.inner
        taps = dw_taps(ins)
        return (last_row(ins.acc_base, o, i, ins.acc_so, ins.acc_si) < acc_d
                and last_row(ins.inp_base, o, i, ins.inp_so, ins.inp_si) + taps[-1] < inp_d
                and ins.wgt_base < wgt_d)
    o, i = ins.outer, ins.inner
    ok = last_row(ins.dst_base, o, i, ins.dst_so, ins.dst_si) < acc_d
    if not ins.use_imm:
        extra = 1 if ins.op == Opcode.ALU and ins.alu_op == AluOp.REQ else 0
        ok = ok and last_row(ins.src_base, o, i, ins.src_so, ins.src_si) + extra < acc_d
    return ok


def dw_taps(ins: Insn) -> list[int]:
    """The input row offsets an iteration reads: DW's taps, a GEMM's one row."""
    if ins.op == Opcode.DW:
        return isa.dw_offsets(ins.taps, ins.tap_w, ins.tap_pitch)
    return [0]


COMPUTE_OPS = (Opcode.GEMM, Opcode.DW, Opcode.ALU, Opcode.XALU)


def reference(program: list[Insn], mem: Memories
              ) -> tuple[list[tuple[int, int, int]], int | None, AccelError]:
    """Run ``program`` sequentially on ``mem`` (in place). Returns every accumulator write as
    (instruction index, row, data), the index of the instruction that fails (the range check,
    or an XALU row with a bad operand: that row is not written; the program stops there) or
    None, and the error. Opcodes other than GEMM/DW/ALU/XALU do nothing here."""
    n = mem.n
    writes: list[tuple[int, int, int]] = []
    for idx, ins in enumerate(program):
        if ins.op not in COMPUTE_OPS or ins.outer == 0 or ins.inner == 0:
            continue
        if not range_ok(ins, mem):
            return writes, idx, AccelError.SP_RANGE
        if ins.op == Opcode.DW:
            w = lanes8(mem.wgt[ins.wgt_base], n * n).reshape(n, n)
            offs = dw_taps(ins)
            for o in range(ins.outer):
                for i in range(ins.inner):
                    a = ins.acc_base + o * ins.acc_so + i * ins.acc_si
                    r = ins.inp_base + o * ins.inp_so + i * ins.inp_si
                    x = np.array([lanes8(mem.inp[r + off], n) for off in offs])
                    old = np.zeros(n, np.int64) if ins.reset else np.array(lanes32(mem.acc[a], n))
                    mem.acc[a] = pack32(old + (x * w[:len(offs)]).sum(axis=0))
                    writes.append((idx, a, mem.acc[a]))
        elif ins.op == Opcode.GEMM:
            w = lanes8(mem.wgt[ins.wgt_base], n * n).reshape(n, n)
            for o in range(ins.outer):
                for i in range(ins.inner):
                    a = ins.acc_base + o * ins.acc_so + i * ins.acc_si
                    x = lanes8(mem.inp[ins.inp_base + o * ins.inp_so + i * ins.inp_si], n)
                    old = np.zeros(n, np.int64) if ins.reset else np.array(lanes32(mem.acc[a], n))
                    mem.acc[a] = pack32(old + x @ w)
                    writes.append((idx, a, mem.acc[a]))
        else:
            op = ins.alu_op + (8 if ins.op == Opcode.XALU else 0)     # the vector unit's op
            for o in range(ins.outer):
                for i in range(ins.inner):
                    d = ins.dst_base + o * ins.dst_so + i * ins.dst_si
                    s = ins.src_base + o * ins.src_so + i * ins.src_si
                    a = lanes32(mem.acc[d], n)
                    b = [ins.imm] * n if ins.use_imm else lanes32(mem.acc[s], n)
                    sh = lanes32(mem.acc[s + 1], n) if op == AluOp.REQ else [0] * n
                    if op == XDIV and 0 in b:
                        return writes, idx, AccelError.DIV_ZERO
                    if op == XSQRT and min(b) < 0:
                        return writes, idx, AccelError.NEG_SQRT
                    mem.acc[d] = pack32([alu_ref(op, a[k], b[k], sh[k], ins.imm)
                                         for k in range(n)])
                    writes.append((idx, d, mem.acc[d]))
    return writes, None, AccelError.NONE


def iterations(ins: Insn) -> int:
    return ins.outer * ins.inner if ins.op in COMPUTE_OPS else 0


# --- the bench -----------------------------------------------------------------------------------

def _bit(h) -> int:
    v = h.value
    assert v.is_resolvable, f"{h._name} is {v} after reset, expected 0 or 1"
    return int(v)


@dataclass
class Log:
    """What the unit did, cycle by cycle."""

    writes: list[tuple[int, int, int]] = field(default_factory=list)    # cycle, row, data
    pops: list[tuple[int, int, int]] = field(default_factory=list)      # cycle, prev, next
    pushes: list[tuple[int, int, int]] = field(default_factory=list)    # cycle, prev, next
    errs: list[tuple[int, int, int]] = field(default_factory=list)      # cycle, code, pc
    takes: list[tuple[int, int]] = field(default_factory=list)          # cycle, pc
    read_cycles: list[int] = field(default_factory=list)
    acc_reads: list[tuple[int, int]] = field(default_factory=list)      # cycle, row
    wgt_reads: int = 0
    macs: int = 0
    mac_rows: int = 0                     # sum of mac_rows over the mac pulses
    bank_errors: list[str] = field(default_factory=list)
    gemm_busy: int = 0
    status: dict[int, tuple[int, int, int]] = field(default_factory=dict)   # idle, waiting, busy
    violations: list[str] = field(default_factory=list)


class TB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.n = len(dut.acc_wdata) // 32
        self.inp_aw = len(dut.inp_raddr) // self.n
        self.depths = (1 << self.inp_aw, 1 << len(dut.wgt_raddr), 1 << len(dut.acc_raddr0))
        self.icarus = "icarus" in cocotb.SIM_NAME.lower()
        self.rng = random.Random(seed)
        self.mem = Memories.random(self.rng, self.n, *self.depths)
        self.task = None
        self._fresh()
        start_clock(dut)
        dut.insn_valid.value = 0
        dut.insn.value = 0
        dut.insn_pc.value = 0
        dut.tok_prev_avail.value = 0
        dut.tok_next_avail.value = 0
        dut.stop.value = 0
        for s in ("inp_rdata", "wgt_rdata", "acc_rdata0", "acc_rdata1", "acc_rdata2"):
            getattr(dut, s).value = 0

    def _fresh(self) -> None:
        self.init = self.mem.copy()
        self.program: list[Insn] = []
        self.pending: deque[tuple[int, int]] = deque()     # (instruction word, pc) not yet taken
        self.tokens = {"prev": 0, "next": 0}
        self.stop = False
        self.auto_stop = True          # raise stop the cycle after err, as the accelerator top
        self.p_gap = 0.0               # probability that insn_valid is low although one is queued
        self.p_token = 0.0             # per cycle: probability that the other units give a token
        self.cycle = 0
        self.log = Log()
        self.sampled = Event()         # set when a cycle's outputs have been sampled

    async def reset(self) -> None:
        """Reset the unit; the scratchpads as they are now are the reference's start."""
        if self.task is not None:
            self.task.cancel()
        d = self.dut
        d.insn_valid.value = 0
        d.stop.value = 0
        await reset(d, hold=4, settle=2)
        self._fresh()
        self.task = cocotb.start_soon(self._cycles())

    async def restart(self, seed: int) -> None:
        """Fresh random scratchpads and a reset, within one test."""
        self.rng = random.Random(seed)
        self.mem = Memories.random(self.rng, self.n, *self.depths)
        await self.reset()

    def queue(self, insns: list[Insn]) -> None:
        for ins in insns:
            self.queue_raw(int.from_bytes(isa.encode(ins), "little"), ins)

    def queue_raw(self, word: int, ref: Insn) -> None:
        """Queue an instruction word; ``ref`` is what the reference runs for it."""
        self.pending.append((word, PC0 + len(self.program)))
        self.program.append(ref)

    async def _cycles(self) -> None:
        """Drive each cycle's inputs just after the rising edge, sample the unit's outputs at
        the falling edge, and play the scratchpads, the queue and the token counters."""
        d, n, rng, log = self.dut, self.n, self.rng, self.log
        rdata: dict[str, int | None] = {}
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            cyc = self.cycle
            # read data of last cycle's reads; anything else is garbage the unit must not use
            d.inp_rdata.value = rdata.get("inp") if rdata.get("inp") is not None \
                else rng.getrandbits(8 * n * n)
            d.wgt_rdata.value = rdata.get("wgt") if rdata.get("wgt") is not None \
                else rng.getrandbits(8 * n * n)
            for p in "012":
                v = rdata.get("acc" + p)
                getattr(d, "acc_rdata" + p).value = v if v is not None else rng.getrandbits(32 * n)
            if self.p_token and rng.random() < self.p_token:
                k = rng.choice(("prev", "next"))
                self.tokens[k] = min(self.tokens[k] + 1, 3)
            head = self.pending[0] if self.pending and rng.random() >= self.p_gap else None
            d.insn_valid.value = int(head is not None)
            if head is not None:
                d.insn.value = head[0]
                d.insn_pc.value = head[1]
            d.tok_prev_avail.value = int(self.tokens["prev"] > 0)
            d.tok_next_avail.value = int(self.tokens["next"] > 0)
            d.stop.value = int(self.stop)
            stop = self.stop

            await FallingEdge(d.clk)
            mem = self.mem
            rdata = {}
            if _bit(d.inp_re):
                rdata["inp"] = self._inp_rows(cyc, int(d.inp_raddr.value),
                                              int(d.inp_rmask.value))
            if _bit(d.wgt_re):
                rdata["wgt"] = mem.wgt[int(d.wgt_raddr.value)]
                log.wgt_reads += 1
            for p in "012":
                if _bit(getattr(d, "acc_re" + p)):
                    row = int(getattr(d, "acc_raddr" + p).value)
                    rdata["acc" + p] = mem.acc[row]
                    log.acc_reads.append((cyc, row))
            if rdata:
                log.read_cycles.append(cyc)
            if _bit(d.acc_we):          # after the reads: a same-cycle read sees the old row
                row, data = int(d.acc_waddr.value), int(d.acc_wdata.value)
                mem.acc[row] = data
                log.writes.append((cyc, row, data))
            ready = _bit(d.insn_ready)
            if ready and stop:
                log.violations.append(f"cycle {cyc}: insn_ready while stop")
            if head is not None and ready:
                self.pending.popleft()
                log.takes.append((cyc, head[1]))
            pp, pn = _bit(d.tok_pop_prev), _bit(d.tok_pop_next)
            if pp or pn:
                for k, v in (("prev", pp), ("next", pn)):
                    if v and self.tokens[k] <= 0:
                        log.violations.append(f"cycle {cyc}: pop_{k} without a token")
                    self.tokens[k] -= v
                if stop:
                    log.violations.append(f"cycle {cyc}: pop while stop")
                log.pops.append((cyc, pp, pn))
            qp, qn = _bit(d.tok_push_prev), _bit(d.tok_push_next)
            if qp or qn:
                log.pushes.append((cyc, qp, qn))
            if _bit(d.err):
                log.errs.append((cyc, int(d.err_code.value), int(d.err_pc.value)))
                if self.auto_stop:
                    self.stop = True
            st = (_bit(d.idle), _bit(d.waiting), _bit(d.busy))
            log.status[cyc] = st
            if st[0] + st[1] + st[2] > 1:
                log.violations.append(f"cycle {cyc}: idle/waiting/busy = {st}")
            if _bit(d.mac_pulse):
                log.macs += 1
                log.mac_rows += int(d.mac_rows.value)
            log.gemm_busy += _bit(d.gemm_busy)
            self.sampled.set()

    def _inp_rows(self, cyc: int, addrs: int, mask: int) -> int:
        """The N-row INP read: the rows read where the mask is set (random data elsewhere); the
        read rows must be taps 0..k-1 in the banks (first row + k) mod N."""
        n, aw = self.n, self.inp_aw
        out = 0
        first = addrs & ((1 << aw) - 1)
        if not mask & 1 or mask & (mask + 1):
            self.log.bank_errors.append(f"cycle {cyc}: rows read {mask:#b}, not taps 0..k-1")
        for k in range(n):
            row = (addrs >> (k * aw)) & ((1 << aw) - 1)
            if mask >> k & 1:
                if row % n != (first + k) % n:
                    self.log.bank_errors.append(f"cycle {cyc}: tap {k} reads row {row}, bank "
                                                f"{row % n}, expected bank {(first + k) % n}")
                data = self.mem.inp[row]
            else:
                data = self.rng.getrandbits(8 * n)
            out |= data << (8 * n * k)
        return out

    async def next_cycle(self) -> int:
        """Wait until the next cycle has been sampled; returns its number."""
        self.sampled.clear()
        await self.sampled.wait()
        return self.cycle

    async def wait_idle(self, max_cycles: int = 20000) -> None:
        """Until every queued instruction is taken (or stop is up) and the unit stays idle."""
        quiet = 0
        for _ in range(max_cycles):
            cyc = await self.next_cycle()
            done = (not self.pending or self.stop) and self.log.status[cyc][0]
            quiet = quiet + 1 if done else 0
            if quiet >= 4:
                return
        raise AssertionError(f"not idle after {max_cycles} cycles: {len(self.pending)} "
                             f"instructions not taken, tokens {self.tokens}, status "
                             f"{self.log.status.get(self.cycle)}")

    async def run(self, insns: list[Insn], max_cycles: int = 20000) -> None:
        self.queue(insns)
        await self.wait_idle(max_cycles)

    def stale_reads(self) -> int:
        """Accumulator reads whose data the scratchpad could not give (the row is written in
        the same or the next cycle): the unit had to forward them."""
        written = {(c, r) for c, r, _ in self.log.writes}
        return sum((c, r) in written or (c + 1, r) in written for c, r in self.log.acc_reads)

    def check(self) -> None:
        """Everything the unit did since reset against the sequential reference."""
        log = self.log
        assert not log.violations, f"protocol violations: {log.violations[:5]}"
        assert not log.bank_errors, f"INP bank rule broken: {log.bank_errors[:5]}"
        ref = self.init.copy()
        exp_writes, err_idx, err_code = reference(self.program, ref)
        got = [(r, v) for _, r, v in log.writes]
        for k, (g, (idx, row, data)) in enumerate(zip(got, exp_writes, strict=False)):
            assert g == (row, data), (
                f"write {k} (instruction {idx}: {self.program[idx]}): row {g[0]} "
                f"{lanes32(g[1], self.n)}, expected row {row} {lanes32(data, self.n)}")
        assert len(got) == len(exp_writes), \
            f"{len(got)} accumulator writes, expected {len(exp_writes)}"
        assert self.mem.acc == ref.acc, "accumulator contents differ from the reference"

        ran = self.program if err_idx is None else self.program[:err_idx + 1]
        exp_errs = [] if err_idx is None else [(err_code, PC0 + err_idx)]
        assert [(c, p) for _, c, p in log.errs] == exp_errs, \
            f"errors (code, pc) {[(c, p) for _, c, p in log.errs]}, expected {exp_errs}"
        assert [p for _, p in log.takes[:len(ran)]] == [PC0 + i for i in range(len(ran))], \
            f"taken pcs {[p for _, p in log.takes]}"

        # pops: one event per started instruction that has pop flags, with exactly its flags
        poppers = [i for i, x in enumerate(ran) if x.pop_prev or x.pop_next]
        assert [(p, q) for _, p, q in log.pops] == \
            [(ran[i].pop_prev, ran[i].pop_next) for i in poppers], \
            f"pops {log.pops}, expected for instructions {poppers}"
        # pushes: one event per completed instruction (not the failing one)
        done = ran if err_idx is None else ran[:-1]
        pushers = [i for i, x in enumerate(done) if x.push_prev or x.push_next]
        assert [(p, q) for _, p, q in log.pushes] == \
            [(done[i].push_prev, done[i].push_next) for i in pushers], \
            f"pushes {log.pushes}, expected for instructions {pushers}"

        # timing: a pop precedes the instruction's first write by at least the read cycle; a
        # push comes no earlier than the last write of its instruction and of every earlier one
        wcyc: dict[int, list[int]] = {}
        for (c, _, _), (idx, _, _) in zip(log.writes, exp_writes, strict=True):
            wcyc.setdefault(idx, []).append(c)
        for (c, _, _), i in zip(log.pops, poppers, strict=True):
            if i in wcyc:
                assert c < wcyc[i][0] - 1, \
                    f"instruction {i} popped in cycle {c}, its first write is in {wcyc[i][0]}"
        for (c, _, _), i in zip(log.pushes, pushers, strict=True):
            before = [w for j, ws in wcyc.items() if j <= i for w in ws]
            if before:
                assert c >= max(before), \
                    f"instruction {i} pushed in cycle {c}, before a write in cycle {max(before)}"
        gemms = [x for x in done if x.op in (Opcode.GEMM, Opcode.DW) and iterations(x)]
        assert log.wgt_reads == len(gemms), \
            f"{log.wgt_reads} weight reads, expected one per GEMM / DW ({len(gemms)})"
        macs = sum(iterations(x) for x in gemms)
        assert log.macs == macs, f"mac_pulse {log.macs} times, expected {macs}"
        rows = sum(iterations(x) * (x.taps if x.op == Opcode.DW else self.n) for x in gemms)
        assert log.mac_rows == rows, f"mac_rows add up to {log.mac_rows}, expected {rows}"


# --- program generators --------------------------------------------------------------------------

def rand_flags(rng: random.Random, p: float) -> dict[str, int]:
    return {f: 1 for f in FLAGS if rng.random() < p}


def rand_gemm(rng: random.Random, region: int = 24, p_flags: float = 0.0) -> Insn:
    return isa.gemm(reset=int(rng.random() < 0.3), acc_base=rng.randrange(region),
                    inp_base=rng.randrange(64), wgt_base=rng.randrange(8),
                    outer=rng.choice([1, 1, 2, 3, 4]), inner=rng.choice([1, 2, 3, 5, 8]),
                    acc_so=rng.choice([0, 1, 2, 4, 8]), acc_si=rng.choice([0, 0, 1, 1, 2, 3]),
                    inp_so=rng.choice([0, 1, 5]), inp_si=rng.choice([0, 1, 2]),
                    **rand_flags(rng, p_flags))


def rand_alu(rng: random.Random, region: int = 24, p_flags: float = 0.0) -> Insn:
    op = rng.choice(list(AluOp))
    f = dict(dst_base=rng.randrange(region), src_base=rng.randrange(region),
             outer=rng.choice([1, 1, 2, 3]), inner=rng.choice([1, 2, 3, 6]),
             dst_so=rng.choice([0, 1, 2, 5]), dst_si=rng.choice([0, 0, 1, 1, 2]),
             src_so=rng.choice([0, 1, 3]), src_si=rng.choice([0, 1, 1, 2]),
             **rand_flags(rng, p_flags))
    if op == AluOp.REQ:
        return isa.req(rng.randint(-128, 127), rng.randint(-128, 127), rng.randint(-128, 127),
                       **f)
    if rng.random() < 0.35:
        imm = rng.choice([0, 1, -1, 5, 31, 17, -(1 << 23), (1 << 23) - 1, rng.randint(-99, 99)])
        return isa.alu(op, imm=imm, **f)
    return isa.alu(op, **f)


def rand_dw(rng: random.Random, n: int, region: int = 24, p_flags: float = 0.0) -> Insn:
    """A DW whose taps follow the bank rule: on one kernel row, or tap_pitch = tap_w mod N."""
    taps = rng.choice([1, n, rng.randint(1, n), rng.randint(1, n)])
    tap_w = rng.choice([1, 2, 3, rng.randint(1, 15)])
    pitch = 0 if taps <= tap_w and rng.random() < 0.5 else tap_w + n * rng.randrange(3)
    return isa.dw(reset=int(rng.random() < 0.3), acc_base=rng.randrange(region),
                  inp_base=rng.randrange(64), wgt_base=rng.randrange(8),
                  outer=rng.choice([1, 1, 2, 3, 4]), inner=rng.choice([1, 2, 3, 5, 8]),
                  acc_so=rng.choice([0, 1, 2, 4, 8]), acc_si=rng.choice([0, 0, 1, 1, 2, 3]),
                  inp_so=rng.choice([0, 1, 5, 11]), inp_si=rng.choice([0, 1, 2]), taps=taps,
                  tap_w=tap_w, tap_pitch=pitch, **rand_flags(rng, p_flags))


def rand_program(rng: random.Random, count: int, p_flags: float = 0.0,
                 p_zero: float = 0.05, n: int = 8) -> list[Insn]:
    out = []
    for _ in range(count):
        u = rng.random()
        ins = rand_gemm(rng, p_flags=p_flags) if u < 0.3 else \
            rand_dw(rng, n, p_flags=p_flags) if u < 0.5 else rand_alu(rng, p_flags=p_flags)
        if rng.random() < p_zero:
            ins = Insn(ins.op, {**ins.fields, rng.choice(["outer", "inner"]): 0})
        out.append(ins)
    return out


# --- tests ---------------------------------------------------------------------------------------

@cocotb.test(timeout_time=4, timeout_unit="ms")
async def test_xalu(dut) -> None:
    """XALU DIV and SQRT through the unit: rows and immediates, results read by the next
    instruction at once and by the same instruction (src == dst), back to back with ALU and
    GEMM; each row takes XALU_CYCLES (its write that many cycles after the previous one, the
    next instruction's first write no sooner). Then the operand errors: a DIV row with a zero
    lane (the third row of the instruction) and a SQRT row with a negative lane pulse err once
    with DIV_ZERO / NEG_SQRT and the instruction's pc; the rows before it are written, that
    one and nothing after it."""
    tb = TB(dut, seed=12)
    n = tb.n
    rng = tb.rng
    div_c, sqrt_c = isa.XALU_CYCLES[XAluOp.DIV], isa.XALU_CYCLES[XAluOp.SQRT]
    for r in range(100, 140):           # SQRT operands >= 0, DIV divisors of every size
        tb.mem.acc[r] = pack32([rng.randint(0, (1 << 31) - 1) >> rng.randrange(31)
                                for _ in range(n)])
    for r in range(140, 160):
        tb.mem.acc[r] = pack32([(rng.randint(1, 1 << rng.randrange(1, 31)))
                                * rng.choice((1, -1)) for _ in range(n)])
    await tb.reset()
    prog = [
        isa.xalu(XAluOp.DIV, dst_base=0, src_base=140, outer=2, inner=3, dst_so=3, dst_si=1,
                 src_so=4, src_si=1),
        isa.alu(AluOp.ADD, dst_base=20, src_base=5, outer=1, inner=1),      # reads the last row
        isa.xalu(XAluOp.SQRT, dst_base=30, src_base=100, outer=1, inner=5, dst_si=1, src_si=2),
        isa.xalu(XAluOp.SQRT, dst_base=104, src_base=104, outer=1, inner=2, dst_si=1,
                 src_si=1),                                                  # in place
        isa.xalu(XAluOp.DIV, imm=-7, dst_base=40, outer=1, inner=2, dst_si=1),
        isa.gemm(reset=1, acc_base=50, inp_base=3, wgt_base=1, outer=1, inner=2, acc_si=1),
        isa.xalu(XAluOp.DIV, dst_base=50, src_base=150, outer=1, inner=2, dst_si=1,
                 src_si=1, push_next=1),                                     # GEMM's rows
        isa.alu(AluOp.MUL, dst_base=51, src_base=50, outer=1, inner=1),
    ]
    await tb.run(prog)
    tb.check()
    wc = [c for c, _, _ in tb.log.writes]
    per = [div_c] * 6 + [None] + [sqrt_c] * 5 + [sqrt_c] * 2 + [div_c] * 2
    for k in range(1, len(per)):
        if per[k] is not None and per[k - 1] is not None:
            assert wc[k] - wc[k - 1] == per[k - 1], \
                f"write {k} {wc[k] - wc[k - 1]} cycles after the previous, expected {per[k - 1]}"
    assert wc[6] - wc[5] >= div_c, f"the ALU wrote {wc[6] - wc[5]} cycles after the DIV's row"
    total = wc[-1] - tb.log.takes[0][0]
    dut._log.info("XALU: %d rows in %d cycles (DIV %d, SQRT %d per row)", 15, total, div_c,
                  sqrt_c)

    for label, bad_row, ins in (
            ("DIV_ZERO", 142, isa.xalu(XAluOp.DIV, dst_base=0, src_base=140, outer=1, inner=4,
                                       dst_si=1, src_si=1, pop_prev=1, push_prev=1)),
            ("NEG_SQRT", 102, isa.xalu(XAluOp.SQRT, dst_base=10, src_base=100, outer=1,
                                       inner=4, dst_si=1, src_si=1, pop_prev=1, push_prev=1))):
        await tb.restart(seed=13)
        for r in range(100, 104):
            tb.mem.acc[r] = pack32([tb.rng.randint(0, 1 << 30) for _ in range(n)])
        for r in range(140, 144):
            tb.mem.acc[r] = pack32([tb.rng.randint(1, 1000) for _ in range(n)])
        lanes = lanes32(tb.mem.acc[bad_row], n)
        lanes[tb.rng.randrange(n)] = 0 if label == "DIV_ZERO" else -tb.rng.randint(1, 1 << 31)
        tb.mem.acc[bad_row] = pack32(lanes)
        await tb.reset()
        tb.tokens["prev"] = 1
        await tb.run([isa.alu(AluOp.ADD, imm=1, dst_base=60, outer=1, inner=2, dst_si=1),
                      ins,
                      isa.alu(AluOp.ADD, imm=1, dst_base=60, outer=1, inner=2, dst_si=1,
                              push_prev=1)])
        errs = tb.log.errs
        assert [(c, p) for _, c, p in errs] == [(AccelError[label], PC0 + 1)], \
            f"{label}: err pulses {errs}"
        tb.check()
        assert len(tb.log.writes) == 2 + 2, f"{label}: writes {len(tb.log.writes)}"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_gemm_loops(dut) -> None:
    """GEMM loop nests: reset and accumulate, outer/inner strides on acc and inp, a new weight
    tile per instruction, back to back."""
    tb = TB(dut, seed=1)
    inp_d, wgt_d, _ = tb.depths
    await tb.reset()
    await tb.run([
        isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=0, outer=4, inner=8, acc_so=8,
                 acc_si=1, inp_so=8, inp_si=1),
        isa.gemm(acc_base=0, inp_base=32, wgt_base=1, outer=4, inner=8, acc_so=8, acc_si=1,
                 inp_so=8, inp_si=1),
        isa.gemm(acc_base=40, inp_base=100, wgt_base=2, outer=3, inner=5, acc_so=100,
                 acc_si=7, inp_so=1000, inp_si=200),
        isa.gemm(reset=1, acc_base=7, inp_base=9, wgt_base=wgt_d - 1, outer=1, inner=1),
        isa.gemm(acc_base=7, inp_base=inp_d - 1, wgt_base=3, outer=1, inner=1),
    ])
    tb.check()


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_dw(dut) -> None:
    """DW (depthwise): every tap count 1..N, taps on one kernel row and over several (tap_pitch
    = tap_w mod N), output and input strides, reset and accumulate; DW rows read back by an
    ALU and a GEMM at once (forwarding), a DW accumulating into one row (acc_si = 0), DW after
    GEMM on the same rows; the taps' rows come from the banks (r + k) mod N (the bench's bank
    check), and ACC_MACS-style counting (mac_rows) adds taps per iteration."""
    tb = TB(dut, seed=11)
    n = tb.n
    await tb.reset()
    prog = []
    for taps in range(1, n + 1):
        tap_w = (taps + 1) // 2 if taps > 1 else 1
        prog.append(isa.dw(reset=int(taps % 2 == 1), acc_base=4 * taps, inp_base=3 * taps,
                           wgt_base=taps % 8, outer=2, inner=3, acc_so=3, acc_si=1,
                           inp_so=2 * (tap_w + n) + 1, inp_si=2, taps=taps, tap_w=tap_w,
                           tap_pitch=tap_w + n))
    prog += [
        isa.dw(acc_base=100, inp_base=7, wgt_base=2, outer=3, inner=4, acc_so=4, acc_si=1,
               inp_so=30, inp_si=1, taps=min(3, n), tap_w=3),                 # one kernel row
        isa.dw(acc_base=100, inp_base=9, wgt_base=3, outer=3, inner=4, acc_so=4, acc_si=1,
               inp_so=30, inp_si=1, taps=n, tap_w=3, tap_pitch=3 + 2 * n),   # accumulate
        isa.alu(AluOp.ADD, dst_base=101, src_base=100, outer=1, inner=4, dst_si=1, src_si=1),
        isa.dw(reset=1, acc_base=120, inp_base=1, wgt_base=4, outer=1, inner=6, acc_si=0,
               inp_si=1, taps=n, tap_w=1, tap_pitch=1 + n),                  # one row, x6
        isa.gemm(acc_base=120, inp_base=2, wgt_base=5, outer=1, inner=2),    # GEMM on it
        isa.dw(acc_base=120, inp_base=3, wgt_base=6, outer=1, inner=1, taps=2, tap_w=1,
               tap_pitch=1),
        isa.dw(acc_base=130, inp_base=5, wgt_base=7, outer=2, inner=2, acc_so=2, acc_si=1,
               taps=n, tap_w=15, push_prev=1, push_next=1),                  # taps <= tap_w
    ]
    await tb.run(prog)
    tb.check()


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_alu_ops(dut) -> None:
    """Every ALU operation on rows and on immediates; REQ with per-lane multiplier and shift rows
    as the requantizer produces them, lo > hi included."""
    tb = TB(dut, seed=2)
    n = tb.n
    rng = tb.rng
    for r in range(200, 216, 2):        # REQ parameter rows: M in [2^30, 2^31), shifts 0..63
        tb.mem.acc[r] = pack32([rng.randint(1 << 30, (1 << 31) - 1) for _ in range(n)])
        tb.mem.acc[r + 1] = pack32(
            [rng.choice([0, 1, 31, 32, 40, 62, 63]) | (rng.getrandbits(20) << 6)
             for _ in range(n)])
    await tb.reset()
    prog = []
    for k, op in enumerate(AluOp):
        if op == AluOp.REQ:
            continue
        prog.append(isa.alu(op, dst_base=16 * k, src_base=100 + 8 * k, outer=2, inner=4,
                            dst_so=4, dst_si=1, src_so=4, src_si=1))
        prog.append(isa.alu(op, imm=rng.choice([-7, 3, 31, 1 << 20]), dst_base=16 * k + 8,
                            outer=1, inner=8, dst_si=1))
    prog += [isa.req(zp=-3, dst_base=300, src_base=200, outer=2, inner=4, dst_so=4, dst_si=1,
                     src_so=2, src_si=4),
             isa.req(zp=10, lo=-20, hi=20, dst_base=310, src_base=204, outer=1, inner=6,
                     dst_si=1, src_si=2),
             isa.req(zp=0, lo=50, hi=-50, dst_base=320, src_base=210, outer=1, inner=3,
                     dst_si=1)]
    await tb.run(prog)
    tb.check()


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_hazards(dut) -> None:
    """Read-after-write at distance 1, 2 and 3 inside an instruction and across instructions:
    GEMM with acc_si = 0, ALU src == dst, running sums over neighbouring rows, REQ reading a
    shift row written one iteration earlier, ALU right after the GEMM that wrote its rows."""
    tb = TB(dut, seed=3)
    for rnd, gap in enumerate((0.0, 0.5)):
        await tb.restart(seed=30 + rnd)
        tb.p_gap = gap
        await tb.run([
            isa.gemm(acc_base=0, inp_base=0, wgt_base=0, outer=2, inner=6, acc_so=1, acc_si=0,
                     inp_so=6, inp_si=1),                                    # same row x6
            isa.gemm(reset=1, acc_base=5, inp_base=3, wgt_base=1, outer=3, inner=3, acc_so=1,
                     acc_si=0, inp_si=1),                                    # reset on one row
            isa.gemm(acc_base=10, inp_base=20, wgt_base=2, outer=4, inner=4, acc_so=1,
                     acc_si=1, inp_si=1),                                    # overlapping rows
            isa.alu(AluOp.ADD, dst_base=10, src_base=10, outer=1, inner=5),  # doubling
            isa.alu(AluOp.ADD, dst_base=21, src_base=20, outer=1, inner=8, dst_si=1,
                    src_si=1),                                               # running sum (d-1)
            isa.alu(AluOp.MAX, dst_base=32, src_base=30, outer=1, inner=8, dst_si=1,
                    src_si=1),                                               # distance 2
            isa.alu(AluOp.SHR, dst_base=43, src_base=40, outer=1, inner=8, dst_si=1,
                    src_si=1),                                               # distance 3
            isa.alu(AluOp.MOV, dst_base=60, src_base=3, outer=1, inner=4, dst_si=1),
            isa.req(zp=1, dst_base=59, src_base=60, outer=1, inner=3, dst_si=1),  # s+1 = d - 1
            isa.gemm(reset=1, acc_base=70, inp_base=40, wgt_base=3, outer=1, inner=3,
                     acc_si=1, inp_si=1),
            isa.alu(AluOp.MUL, dst_base=72, src_base=71, outer=1, inner=1),  # row of the GEMM
            isa.alu(AluOp.ADD, dst_base=70, src_base=72, outer=1, inner=2, dst_si=1),
            isa.gemm(acc_base=72, inp_base=1, wgt_base=4, outer=1, inner=2),  # GEMM after ALU
            isa.alu(AluOp.MIN, imm=-5, dst_base=72, outer=1, inner=1),
        ])
        tb.check()


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_random_programs(dut) -> None:
    """Random GEMM/ALU programs over a few dozen rows (so dense read-after-write hazards of every
    distance), with dependency flags, tokens that arrive at random, queue gaps and empty loops."""
    tb = TB(dut, seed=4)
    rounds, count = (3, 60) if tb.icarus else (6, 120)
    total = stale = 0
    for r in range(rounds):
        await tb.restart(seed=40 + r)
        tb.p_gap = (0.0, 0.3, 0.7)[r % 3]
        tb.p_token = 0.2
        await tb.run(rand_program(tb.rng, count, p_flags=0.15, p_zero=0.08, n=tb.n),
                     max_cycles=40000)
        tb.check()
        total += len(tb.log.writes)
        stale += tb.stale_reads()
    dut._log.info("random programs: %d x %d instructions, %d writes checked, %d reads "
                  "forwarded from the pipeline", rounds, count, total, stale)
    assert stale > total // 20, f"only {stale} of {total} reads hit an in-flight write"


def _with(ins: Insn, **f: int) -> Insn:
    return Insn(ins.op, {**ins.fields, **f})


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_sp_range(dut) -> None:
    """SP_RANGE on every row kind at the boundary: each case runs between a good GEMM and a good
    ALU. A failing case pulses err once with its pc and code, pops its tokens, writes nothing,
    pushes nothing, and nothing after it starts; a case that just fits, or has no iterations
    (whatever its rows), runs and pushes."""
    tb = TB(dut, seed=5)
    inp_d, wgt_d, acc_d = tb.depths
    dw_n = tb.n
    dw_g = dict(outer=2, inner=3, inp_so=4, inp_si=1, acc_si=1, taps=min(6, dw_n), tap_w=3,
                tap_pitch=3 + dw_n)
    dw_last = isa.dw_offsets(dw_g["taps"], 3, 3 + dw_n)[-1]
    g = dict(outer=1, inner=1)
    cases = [
        ("GEMM acc last = depth-1", isa.gemm(acc_base=acc_d - 9, outer=2, inner=5, acc_so=4,
                                             acc_si=1, inp_si=1), False),
        ("GEMM acc last = depth", isa.gemm(acc_base=acc_d - 8, outer=2, inner=5, acc_so=4,
                                           acc_si=1, inp_si=1), True),
        ("GEMM acc_base 0xFFFF", isa.gemm(acc_base=0xFFFF, **g), True),
        ("GEMM inp last = depth-1", isa.gemm(inp_base=inp_d - 8, outer=2, inner=3, inp_so=3,
                                             inp_si=2, acc_si=1), False),
        ("GEMM inp last = depth", isa.gemm(inp_base=inp_d - 7, outer=2, inner=3, inp_so=3,
                                           inp_si=2, acc_si=1), True),
        ("GEMM wgt_base = depth-1", isa.gemm(wgt_base=wgt_d - 1, **g), False),
        ("GEMM wgt_base = depth", isa.gemm(wgt_base=wgt_d, **g), True),
        ("GEMM largest loop", isa.gemm(outer=4095, inner=4095, acc_so=4095, acc_si=255,
                                       inp_so=4095, inp_si=255), True),
        ("GEMM outer 0, rows out of range", isa.gemm(acc_base=0xFFFF, inp_base=0xFFFF,
                                                     wgt_base=0xFFFF, outer=0, inner=9), False),
        ("ALU dst last = depth-1", isa.alu(AluOp.MAX, dst_base=acc_d - 6, outer=2, inner=3,
                                           dst_so=3, dst_si=1), False),
        ("ALU dst last = depth", isa.alu(AluOp.MAX, dst_base=acc_d - 5, outer=2, inner=3,
                                         dst_so=3, dst_si=1), True),
        ("ALU dst_base 0x3FFF", isa.alu(AluOp.ADD, dst_base=0x3FFF, **g), True),
        ("ALU src last = depth-1", isa.alu(AluOp.ADD, src_base=acc_d - 4, outer=1, inner=4,
                                           src_si=1, dst_si=1), False),
        ("ALU src last = depth", isa.alu(AluOp.ADD, src_base=acc_d - 3, outer=1, inner=4,
                                         src_si=1, dst_si=1), True),
        ("REQ shift row = depth-1", isa.req(src_base=acc_d - 2, dst_base=3, **g), False),
        ("REQ shift row = depth", isa.req(src_base=acc_d - 1, dst_base=3, **g), True),
        ("ALU imm, src out of range", isa.alu(AluOp.ADD, imm=3, src_base=0x3FFF, dst_base=5,
                                              outer=2, inner=2, dst_si=1, dst_so=2), False),
        ("ALU inner 0, rows out of range", isa.alu(AluOp.MUL, dst_base=0x3FFF, src_base=0x3FFF,
                                                   outer=3, inner=0), False),
        ("ALU largest loop", isa.alu(AluOp.MOV, outer=4095, inner=4095, dst_so=4095,
                                     dst_si=255), True),
        # DW: the last row read is the last iteration's last tap, 6 rows past the first
        # iteration's first tap plus the last tap's offset
        ("DW last tap row = depth-1", isa.dw(inp_base=inp_d - dw_last - 7, **dw_g), False),
        ("DW last tap row = depth", isa.dw(inp_base=inp_d - dw_last - 6, **dw_g), True),
        ("DW one tap, inp last = depth-1", isa.dw(inp_base=inp_d - 1, taps=1, tap_w=1, **g),
         False),
        ("DW wgt_base = depth", isa.dw(wgt_base=wgt_d, taps=1, tap_w=1, **g), True),
        ("DW acc_base 0x3FFF", isa.dw(acc_base=0x3FFF, taps=2, tap_w=2, **g), True),
        ("DW acc last = depth-1", isa.dw(acc_base=acc_d - 4, outer=1, inner=4, acc_si=1,
                                        taps=1, tap_w=1), False),
        ("DW inner 0, rows out of range", isa.dw(acc_base=0x3FFF, inp_base=0xFFFF, taps=4,
                                                 tap_w=1, tap_pitch=1 + dw_n, outer=2,
                                                 inner=0), False),
    ]
    for k, (label, ins, fails) in enumerate(cases):
        await tb.restart(seed=50 + k)
        tb.tokens["prev"] = 2
        await tb.run([
            isa.gemm(reset=1, acc_base=1, inp_base=2, wgt_base=3, outer=1, inner=4, acc_si=1,
                     push_next=1),
            _with(ins, pop_prev=1, push_prev=1, push_next=1),
            isa.alu(AluOp.ADD, imm=1, dst_base=1, outer=1, inner=2, dst_si=1, pop_prev=1,
                    push_prev=1),
        ])
        errs = tb.log.errs
        assert len(errs) == int(fails), f"{label}: err pulses {errs}, expected {int(fails)}"
        if fails:
            assert errs[0][1] == AccelError.SP_RANGE and errs[0][2] == PC0 + 1, \
                f"{label}: err code/pc {errs[0][1:]}, expected {(3, PC0 + 1)}"
        tb.check()


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_token_waits(dut) -> None:
    """An instruction without its tokens is held (waiting, nothing read or written, the queue
    not drained further) and starts in the cycle its tokens appear, popping them then; pushes
    come with the last write; a held instruction is not waiting while the previous one runs."""
    tb = TB(dut, seed=6)
    await tb.reset()
    log = tb.log
    tb.queue([
        isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=0, outer=1, inner=20, acc_si=1,
                 inp_si=1, pop_prev=1, push_next=1),
        isa.req(zp=2, dst_base=0, src_base=100, outer=1, inner=20, dst_si=1, pop_next=1,
                push_prev=1),
        isa.gemm(acc_base=0, inp_base=50, wgt_base=1, outer=2, inner=2, acc_so=2, acc_si=1,
                 pop_prev=1, pop_next=1, push_prev=1, push_next=1),
    ])

    async def hold(cycles: int) -> list[int]:
        return [await tb.next_cycle() for _ in range(cycles)]

    async def give(kind: str) -> int:
        """A token becomes available in the returned cycle."""
        tb.tokens[kind] += 1
        return await tb.next_cycle()

    held = await hold(40)
    assert len(log.takes) == 1, f"took {len(log.takes)} instructions while the first waits"
    assert not log.pops and not log.writes and not log.read_cycles, \
        f"activity without tokens: pops {log.pops}, writes {len(log.writes)}"
    assert all(log.status[c] == (0, 1, 0) for c in held[3:]), \
        f"(idle, waiting, busy) while held: {sorted({log.status[c] for c in held[3:]})}"

    c = await give("prev")
    assert log.pops == [(c, 1, 0)], f"pops {log.pops}, expected pop_prev in cycle {c}"
    await hold(60)                                       # GEMM runs; the REQ then waits for next
    assert len(log.writes) == 20 and log.read_cycles[0] == c + 1, \
        f"{len(log.writes)} writes, first read in {log.read_cycles[0]} (start was {c})"
    assert log.pushes == [(log.writes[-1][0], 0, 1)], \
        f"pushes {log.pushes}, expected push_next with the last write ({log.writes[-1][0]})"
    gemm_cycles = range(c + 1, log.writes[-1][0] + 1)
    assert all(log.status[k] == (0, 0, 1) for k in gemm_cycles), \
        "not (busy, not waiting) while the first GEMM runs and the REQ is held"
    assert log.status[tb.cycle] == (0, 1, 0), f"REQ not waiting: {log.status[tb.cycle]}"

    c = await give("next")
    await hold(40)
    assert log.pops[1] == (c, 0, 1) and len(log.writes) == 40, \
        f"REQ: pops {log.pops}, {len(log.writes)} writes"
    c = await give("prev")                               # the last GEMM needs both tokens
    await hold(20)
    assert len(log.pops) == 2 and len(log.writes) == 40 and log.status[tb.cycle] == (0, 1, 0), \
        f"last GEMM started with one of its two tokens: pops {log.pops}"
    c = await give("next")
    await tb.wait_idle()
    assert log.pops[2] == (c, 1, 1), f"pops {log.pops}, expected both in cycle {c}"
    tb.check()


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_stop_while_waiting(dut) -> None:
    """stop drops a held instruction: no pop even when its token comes, nothing read or written,
    nothing more taken from the queue (insn_ready low), idle within two cycles."""
    tb = TB(dut, seed=7)
    await tb.reset()
    log = tb.log
    tb.queue([isa.gemm(acc_base=4, outer=1, inner=3, acc_si=1, pop_prev=1, push_next=1),
              isa.alu(AluOp.ADD, imm=1, dst_base=4, outer=1, inner=1, push_next=1)])
    for _ in range(10):
        c = await tb.next_cycle()
    assert log.status[c] == (0, 1, 0), f"(idle, waiting, busy) {log.status[c]}, expected waiting"
    tb.stop = True
    c_stop = await tb.next_cycle()
    tb.tokens["prev"] = 1
    for _ in range(30):
        c = await tb.next_cycle()
    assert log.status[c_stop + 2] == (1, 0, 0) and log.status[c] == (1, 0, 0), \
        f"status after stop {log.status[c_stop + 2]}, later {log.status[c]}, expected idle"
    assert not log.pops and not log.writes and not log.read_cycles and not log.pushes, \
        f"activity after stop: pops {log.pops} pushes {log.pushes} writes {len(log.writes)}"
    assert len(log.takes) == 1 and len(tb.pending) == 1, \
        f"{len(log.takes)} taken, {len(tb.pending)} left in the queue, expected 1 and 1"
    assert not log.violations, log.violations


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_stop_while_running(dut) -> None:
    """stop cuts a running GEMM short: iterations in flight finish (at most two more writes,
    all correct), it never pushes, the next instruction never starts, the unit goes idle."""
    tb = TB(dut, seed=8)
    await tb.reset()
    log = tb.log
    tb.queue([isa.gemm(acc_base=10, inp_base=5, wgt_base=2, outer=1, inner=300, acc_si=1,
                       inp_si=1, push_prev=1, push_next=1),
              isa.alu(AluOp.MOV, imm=7, dst_base=0, outer=1, inner=4, dst_si=1, push_next=1)])
    while len(log.writes) < 100:
        c_stop = await tb.next_cycle()
    tb.stop = True                        # stop is high from cycle c_stop + 1
    for _ in range(10):
        await tb.next_cycle()
    last = log.writes[-1][0]
    assert last <= c_stop + 2, f"writes until cycle {last}, stop was raised in {c_stop + 1}"
    assert log.status[c_stop + 3] == (1, 0, 0), f"status {log.status[c_stop + 3]}, expected idle"
    assert not log.pushes, f"pushes {log.pushes} for an instruction cut short"
    exp, _, _ = reference(tb.program[:1], tb.init.copy())
    got = [(r, v) for _, r, v in log.writes]
    assert got == [(r, v) for _, r, v in exp[:len(got)]], "writes before the stop are wrong"
    assert all(r >= 10 for r, _ in got), "the second instruction wrote"
    assert not log.violations, log.violations


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_empty_and_illegal(dut) -> None:
    """Empty loops (outer or inner 0) and encodings the fetch unit never sends (LOAD, STORE,
    END, opcodes 0 and 15, ALU op 7, REQ with use_imm) complete without hanging, with their pops
    and their pushes after every earlier write; empty ones back to back take one cycle each."""
    tb = TB(dut, seed=9)
    await tb.reset()
    tb.tokens = {"prev": 3, "next": 3}

    def noop(opcode: int, **flags: int) -> tuple[int, Insn]:
        """The word of a non-compute opcode with dependency flags, and what the reference runs
        for it (an END, which it skips, with the same flags)."""
        word = opcode | sum(1 << isa.field_lsb(Opcode.END, f) for f in flags)
        return word, Insn(Opcode.END, flags)

    empties = [isa.gemm(acc_base=3, outer=0, inner=4, push_next=1),
               isa.alu(AluOp.ADD, dst_base=3, outer=2, inner=0, push_prev=1),
               isa.gemm(outer=0, inner=0, push_prev=1, push_next=1),
               isa.req(outer=0, inner=1, push_next=1)]
    tb.queue([isa.gemm(reset=1, acc_base=3, inp_base=1, wgt_base=1, outer=1, inner=6,
                       acc_si=0)] + empties
             + [isa.alu(AluOp.ADD, src_base=3, dst_base=4, outer=1, inner=1, pop_prev=1,
                        push_next=1)])
    for opcode, flags in ((Opcode.LOAD, {"pop_next": 1, "push_next": 1}),
                          (Opcode.STORE, {"push_prev": 1}), (Opcode.END, {"push_next": 1}),
                          (0, {"pop_prev": 1, "push_prev": 1}), (15, {"push_next": 1})):
        tb.queue_raw(*noop(int(opcode), **flags))
    tb.queue([isa.alu(7, dst_base=4, src_base=3, outer=1, inner=2, dst_si=1, push_prev=1)])
    await tb.wait_idle()
    tb.check()
    push_cycles = [c for c, _, _ in tb.log.pushes[:len(empties)]]
    assert push_cycles == list(range(push_cycles[0], push_cycles[0] + len(empties))), \
        f"empty instructions pushed in cycles {push_cycles}, expected one per cycle"

    await tb.restart(seed=91)                  # REQ with use_imm: the shift row is unspecified
    tb.queue([isa.alu(AluOp.REQ, imm=5, dst_base=2, outer=1, inner=3, dst_si=1, push_next=1)])
    await tb.wait_idle()
    assert len(tb.log.writes) == 3 and [(p, q) for _, p, q in tb.log.pushes] == [(0, 1)], \
        f"REQ with use_imm: {len(tb.log.writes)} writes, pushes {tb.log.pushes}"


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def test_throughput(dut) -> None:
    """Cycle counts (printed): a stream of 256-iteration GEMM instructions runs one iteration
    per cycle with at most 3 cycles of overhead per instruction, and the benchmark's pattern
    (GEMMs over the K tiles of an output block, then one REQ pass over its rows)."""
    tb = TB(dut, seed=10)
    await tb.reset()
    log = tb.log
    count = 4 if tb.icarus else 16
    await tb.run([isa.gemm(reset=int(k == 0), acc_base=0, inp_base=256 * (k % 8), wgt_base=k,
                           outer=16, inner=16, acc_so=16, acc_si=1, inp_so=16, inp_si=1)
                  for k in range(count)])
    tb.check()
    iters = 256 * count
    cycles = log.writes[-1][0] - log.takes[0][0] + 1
    dut._log.info("GEMM stream: %d instructions x 256 iterations: %d cycles from the first "
                  "take to the last write, %.1f%% iterations, %.2f cycles overhead per "
                  "instruction (pipeline fill included)", count, cycles, 100 * iters / cycles,
                  (cycles - iters) / count)
    assert cycles <= iters + 3 * count, f"{cycles} cycles for {iters} iterations"

    await tb.restart(seed=11)
    log = tb.log
    blocks, ktiles = (1, 2) if tb.icarus else (2, 8)
    prog = []
    for b in range(blocks):
        for k in range(ktiles):
            prog.append(isa.gemm(reset=int(k == 0), acc_base=256 * b, inp_base=256 * k,
                                 wgt_base=b * ktiles + k, outer=1, inner=256, acc_si=1,
                                 inp_si=1))
        prog.append(isa.req(zp=-1, dst_base=256 * b, src_base=1500, outer=1, inner=256,
                            dst_si=1, push_next=1))
    await tb.run(prog)
    tb.check()
    cycles = log.writes[-1][0] - log.takes[0][0] + 1
    iters = sum(iterations(x) for x in prog)
    dut._log.info("GEMM/REQ pattern: %d blocks x (%d GEMM + 1 REQ) x 256 iterations: %d cycles, "
                  "%d GEMM iteration cycles (%.1f%%), %d overhead cycles in total; gemm_busy %d",
                  blocks, ktiles, cycles, log.macs, 100 * log.macs / cycles, cycles - iters,
                  log.gemm_busy)
    assert cycles <= iters + 3 * len(prog), f"{cycles} cycles for {iters} iterations"

"""cocotb bench for accel_fetch, the accelerator's program reader and dispatcher, on its own.

A small AXI4 read responder serves programs from a sparse 4 GiB memory (the unit has no ID, size
or burst ports, which cocotbext-axi's AxiRamRead needs, and the bench must inject SLVERR beats).
Queues are modelled by random fullness. Every dispatched instruction, its pc and its queue, and
every error pulse, are compared with a reference built from pyhost.spec.isa (decode +
check_static); a monitor checks the AXI rules (burst length, 4 KiB, ARVALID/ARADDR/ARLEN stable
until ARREADY, no read beyond the program's last beat) and the status outputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from pyhost.spec import isa
from pyhost.spec.isa import AccelError, Buffer, Insn, IsaError, Opcode, Unit
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import _on

BEAT = 64
PAGE = 4096
MASK32 = (1 << 32) - 1
UNITS = (Unit.LOAD, Unit.COMPUTE, Unit.STORE)
QNAME = {Unit.LOAD: "load", Unit.COMPUTE: "compute", Unit.STORE: "store"}


# --- programs ------------------------------------------------------------------------------------
class SparseMem:
    """Byte-addressed 4 GiB memory, allocated by page, zero where never written."""

    def __init__(self) -> None:
        self.pages: dict[int, bytearray] = {}

    def write(self, addr: int, data: bytes) -> None:
        for i, b in enumerate(data):
            a = (addr + i) & MASK32
            self.pages.setdefault(a // PAGE, bytearray(PAGE))[a % PAGE] = b

    def read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for i in range(n):
            a = (addr + i) & MASK32
            page = self.pages.get(a // PAGE)
            out.append(page[a % PAGE] if page else 0)
        return bytes(out)


#: The array size of the unit under test (its N parameter; the DW rules depend on it), set by TB.
ARRAY_N = [8]


def rand_legal(rng: random.Random, op: Opcode | None = None) -> Insn:
    """A random instruction that passes check_static (END excluded unless asked for)."""
    n = ARRAY_N[0]
    op = op or rng.choice([Opcode.LOAD, Opcode.STORE, Opcode.GEMM, Opcode.ALU, Opcode.DW,
                           Opcode.XALU])
    if op == Opcode.END:
        return isa.end()
    f: dict[str, int] = {}
    for spec in isa.FORMATS[op][5:]:
        lo, hi = ((-(1 << (spec.width - 1)), (1 << (spec.width - 1)) - 1) if spec.signed
                  else (0, (1 << spec.width) - 1))
        f[spec.name] = rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, hi)])
    for flag in isa.LEGAL_FLAGS[isa.UNIT_OF[op]]:
        f[flag] = rng.randint(0, 1)
    if op == Opcode.STORE:
        f["buf"] = rng.choice([Buffer.ACC, Buffer.ACC8])
        f["transpose"] = 0
        for p in ("pad_top", "pad_bottom", "pad_left", "pad_right"):
            f[p] = 0
    if op == Opcode.LOAD and f["transpose"]:        # INP, no padding, y_size a multiple of N
        f["buf"] = Buffer.INP
        f["y_size"] -= f["y_size"] % n
        for p in ("pad_top", "pad_bottom", "pad_left", "pad_right"):
            f[p] = 0
    if op == Opcode.XALU:
        f["alu_op"] = rng.randint(0, max(isa.XAluOp))
    if op == Opcode.ALU:
        f["alu_op"] = rng.randint(0, max(isa.AluOp))
        if f["alu_op"] == isa.AluOp.REQ:
            f["use_imm"] = 0
    if op == Opcode.DW:
        f["taps"] = rng.choice([1, n, rng.randint(1, n)])
        f["tap_w"] = rng.choice([1, 3, 15, rng.randint(1, 15)])
        if f["taps"] > f["tap_w"]:          # taps over several kernel rows: pitch = tap_w mod N
            span = (1023 - f["tap_w"]) // n
            f["tap_pitch"] = f["tap_w"] + n * rng.choice([0, span, rng.randint(0, span)])
    insn = Insn(op, {k: v for k, v in f.items() if v})
    assert isa.check_static(insn, n) == AccelError.NONE, insn
    return insn


def corrupt(rng: random.Random, kind: str) -> bytes:
    """A 16-byte instruction that fails the static check in the named way."""
    def word(insn: Insn) -> int:
        return int.from_bytes(isa.encode(insn), "little")

    def bit(name: str, op: Opcode = Opcode.LOAD) -> int:
        return 1 << isa.field_lsb(op, name)

    if kind == "opcode0":
        w = word(rand_legal(rng)) & ~0xF
    elif kind == "opcode_high":
        w = (word(rand_legal(rng)) & ~0xF) | rng.randint(int(max(Opcode)) + 1, 15)
    elif kind == "load_flag":
        w = word(rand_legal(rng, Opcode.LOAD)) | bit(rng.choice(["pop_prev", "push_prev"]))
    elif kind == "store_flag":
        w = word(rand_legal(rng, Opcode.STORE)) | bit(rng.choice(["pop_next", "push_next"]))
    elif kind == "store_buf":
        w = word(rand_legal(rng, Opcode.STORE))
        lsb = isa.field_lsb(Opcode.STORE, "buf")
        w = (w & ~(3 << lsb)) | (rng.choice([Buffer.INP, Buffer.WGT]) << lsb)
    elif kind == "store_pad":
        pad = rng.choice(["pad_top", "pad_bottom", "pad_left", "pad_right"])
        w = word(rand_legal(rng, Opcode.STORE)) | (rng.randint(1, 15)
                                                  << isa.field_lsb(Opcode.STORE, pad))
    elif kind == "alu_op7":
        lsb = isa.field_lsb(Opcode.ALU, "alu_op")
        w = (word(rand_legal(rng, Opcode.ALU)) & ~(7 << lsb)) | (7 << lsb)
    elif kind == "xalu_op":
        lsb = isa.field_lsb(Opcode.XALU, "alu_op")
        w = (word(rand_legal(rng, Opcode.XALU)) & ~(7 << lsb)) \
            | (rng.randint(len(isa.XAluOp), 7) << lsb)
    elif kind == "transpose":                       # not INP, padding, or y_size % N
        load = rand_legal(rng, Opcode.LOAD)
        f = {**load.fields, "transpose": 1, "buf": Buffer.INP, "y_size": ARRAY_N[0]}
        for p in ("pad_top", "pad_bottom", "pad_left", "pad_right"):
            f.pop(p, None)
        bad = rng.choice(["buf", "pad", "y"])
        if bad == "buf":
            f["buf"] = rng.choice([Buffer.WGT, Buffer.ACC, Buffer.ACC8])
        elif bad == "pad":
            f[rng.choice(["pad_top", "pad_bottom", "pad_left", "pad_right"])] = rng.randint(1, 15)
        else:
            f["y_size"] = ARRAY_N[0] * rng.randint(0, 100) + rng.randint(1, ARRAY_N[0] - 1)
        w = word(Insn(Opcode.LOAD, f))
    elif kind == "store_transpose":
        w = word(rand_legal(rng, Opcode.STORE)) | bit("transpose", Opcode.STORE)
    elif kind == "req_imm":
        w = word(isa.req(1, -5, 100, dst_base=3, inner=2)) | bit("use_imm", Opcode.ALU)
    elif kind == "dw_taps":
        lsb = isa.field_lsb(Opcode.DW, "taps")
        w = (word(rand_legal(rng, Opcode.DW)) & ~(0x7F << lsb)) \
            | (rng.choice([0, ARRAY_N[0] + 1, 127]) << lsb)
    elif kind == "dw_tap_w0":
        w = word(rand_legal(rng, Opcode.DW)) & ~(0xF << isa.field_lsb(Opcode.DW, "tap_w"))
    elif kind == "dw_banks":
        n = ARRAY_N[0]
        taps = rng.randint(2, n)
        tap_w = rng.randint(1, min(taps - 1, 15))
        pitch = rng.choice([p for p in range(tap_w, tap_w + n) if (p - tap_w) % n]) \
            + n * rng.randrange(8)
        w = word(isa.dw(taps=taps, tap_w=tap_w, tap_pitch=pitch, outer=1, inner=1))
    elif kind == "end_flag":
        w = word(isa.end()) | bit(rng.choice(["pop_prev", "pop_next", "push_prev",
                                              "push_next"]), Opcode.END)
        w |= rng.getrandbits(100) << 8      # END ignores everything past its flags
    else:
        raise ValueError(kind)
    return w.to_bytes(16, "little")


ILLEGAL_KINDS = ("opcode0", "opcode_high", "load_flag", "store_flag", "store_buf", "store_pad",
                 "alu_op7", "req_imm", "end_flag", "dw_taps", "dw_tap_w0", "dw_banks", "xalu_op",
                 "transpose", "store_transpose")


@dataclass
class Expect:
    dispatched: list[tuple[str, int, bytes]]        # (queue or "end", pc, raw instruction)
    err: tuple[int, int] | None                     # (code, pc)
    ended: bool


def reference(mem: SparseMem, base: int, count: int, bad_beats: set[int]) -> Expect:
    """What the fetch unit must do with this program: the spec's decode + check_static in
    program order, a failed beat reported when its first instruction is next."""
    out: list[tuple[str, int, bytes]] = []
    for i in range(count):
        addr = (base + 16 * i) & MASK32
        if addr // BEAT in bad_beats:
            return Expect(out, (AccelError.FETCH_BUS, i), False)
        raw = mem.read(addr, 16)
        try:
            insn = isa.decode(raw)
            code = isa.check_static(insn, ARRAY_N[0])
        except IsaError:
            code = AccelError.ILLEGAL_OPCODE
        if code != AccelError.NONE:
            return Expect(out, (code, i), False)
        if insn.op == Opcode.END:
            out.append(("end", i, raw))
            return Expect(out, None, True)
        out.append((QNAME[isa.UNIT_OF[insn.op]], i, raw))
    return Expect(out, (AccelError.NO_END, count), False)


# --- the bench -----------------------------------------------------------------------------------
@dataclass
class Opts:
    """Memory timing and back-pressure of one run."""

    latency: tuple[int, int] = (2, 2)   # cycles from AR to the first R beat (min, max)
    ar_ready: float = 1.0               # probability ARREADY is high in a cycle
    r_idle: float = 0.0                 # probability of an idle cycle before an R beat
    q_full: float = 0.0                 # probability each queue reports full in a cycle


@dataclass
class _Burst:
    addr: int
    beats: int
    ready_at: int
    sent: int = 0


@dataclass
class Run:
    dispatched: list[tuple[str, int, bytes]] = field(default_factory=list)
    errs: list[tuple[int, int]] = field(default_factory=list)
    first: int = -1
    last: int = -1
    blocked: int = 0
    stop_dispatch: int = 0          # dispatches seen while stop was high


class TB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = SparseMem()
        self.opts = Opts()
        self.bad_beats: set[int] = set()
        self.window: tuple[int, int] | None = None      # program beats (first, count)
        self.violations: list[str] = []
        self.bursts: list[tuple[int, int]] = []
        self.pending: list[_Burst] = []
        self.cycle = 0
        self.run = Run()
        self.max_burst = int(dut.MAX_BURST.value)
        ARRAY_N[0] = int(dut.N.value)
        start_clock(dut)
        dut.start.value = 0
        dut.insn_base.value = 0
        dut.insn_count.value = 0
        dut.stop.value = 0
        dut.m_axi_arready.value = 0
        dut.m_axi_rvalid.value = 0
        dut.m_axi_rdata.value = 0
        dut.m_axi_rresp.value = 0
        dut.m_axi_rlast.value = 0
        for u in UNITS:
            getattr(dut, f"q_full_{QNAME[u]}").value = 0

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)
        cocotb.start_soon(self._loop())

    def fail(self, msg: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(f"cycle {self.cycle}: {msg}")

    async def _loop(self) -> None:
        """Memory responder, queue model and monitor in one per-cycle process, so every check
        sees the handshakes of the edge in order."""
        d = self.dut
        o = self.opts
        ar_drv = 0
        r_out = False
        full = {u: 0 for u in UNITS}
        prev_ar: tuple[int, int] | None = None      # (addr, len) of an AR left waiting
        ended_prev = 0
        start_prev = 0
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            c = self.cycle
            o = self.opts
            # -- address channel
            arvalid = _on(d.m_axi_arvalid)
            if prev_ar is not None:
                now = (int(d.m_axi_araddr.value), int(d.m_axi_arlen.value)) if arvalid else None
                if now != prev_ar:
                    self.fail(f"AR {prev_ar} changed to {now} before ARREADY")
            prev_ar = None
            if arvalid:
                addr, ln = int(d.m_axi_araddr.value), int(d.m_axi_arlen.value)
                if ar_drv:
                    self._burst(addr, ln + 1, c)
                else:
                    prev_ar = (addr, ln)
            # -- data channel
            if r_out and _on(d.m_axi_rready):
                cur = self.pending[0]
                cur.sent += 1
                r_out = False
                if cur.sent == cur.beats:
                    self.pending.pop(0)
            # -- dispatch side
            run = self.run
            pulse = _on(d.insn_pulse)
            pushes = [u for u in UNITS if _on(getattr(d, f"q_push_{QNAME[u]}"))]
            if pushes or pulse:
                raw = int(d.q_insn.value).to_bytes(16, "little")
                pc = int(d.q_pc.value)
                if not pulse or len(pushes) > 1:
                    self.fail(f"pushes {pushes} with insn_pulse {pulse}")
                for u in pushes:
                    if full[u]:
                        self.fail(f"push into full {QNAME[u]} queue at pc {pc}")
                q = QNAME[pushes[0]] if pushes else "end"
                if q == "end" and raw[0] & 0xF != Opcode.END:
                    self.fail(f"insn_pulse without a push for opcode {raw[0] & 0xF} at pc {pc}")
                run.dispatched.append((q, pc, raw))
                run.first = c if run.first < 0 else run.first
                run.last = c
                if _on(d.stop):
                    run.stop_dispatch += 1
            if _on(d.blocked):
                run.blocked += 1
                raw = int(d.q_insn.value).to_bytes(16, "little")
                op = raw[0] & 0xF
                unit = isa.UNIT_OF.get(Opcode(op)) if 1 <= op <= max(Opcode) else None
                if unit is None or not full[unit] or int(d.q_pc.value) != len(run.dispatched):
                    self.fail(f"blocked on opcode {op} pc {int(d.q_pc.value)} "
                              f"(dispatched {len(run.dispatched)}, full {full})")
            if _on(d.err):
                run.errs.append((int(d.err_code.value), int(d.err_pc.value)))
            if _on(d.idle) and (self.pending or r_out or arvalid):
                self.fail(f"idle with {len(self.pending)} bursts in flight")
            ended = _on(d.ended)
            if ended_prev and not ended and not start_prev:
                self.fail("ended dropped without a start")
            ended_prev = ended
            start_prev = _on(d.start)
            # -- drive the next cycle
            ar_drv = 1 if self.rng.random() < o.ar_ready else 0
            d.m_axi_arready.value = ar_drv
            for u in UNITS:
                full[u] = 1 if self.rng.random() < o.q_full else 0
                getattr(d, f"q_full_{QNAME[u]}").value = full[u]
            if not r_out and self.pending and self.pending[0].ready_at <= c \
                    and self.rng.random() >= o.r_idle:
                cur = self.pending[0]
                beat = cur.addr // BEAT + cur.sent
                d.m_axi_rdata.value = int.from_bytes(self.mem.read(beat * BEAT, BEAT), "little")
                d.m_axi_rresp.value = 2 if beat & (MASK32 >> 6) in self.bad_beats else 0
                d.m_axi_rlast.value = 1 if cur.sent == cur.beats - 1 else 0
                r_out = True
            d.m_axi_rvalid.value = 1 if r_out else 0

    def _burst(self, addr: int, beats: int, c: int) -> None:
        self.bursts.append((addr, beats))
        if addr % BEAT:
            self.fail(f"AR address {addr:#x} not beat aligned")
        if beats > self.max_burst:
            self.fail(f"burst of {beats} beats > MAX_BURST {self.max_burst}")
        if addr // PAGE != (addr + beats * BEAT - 1) // PAGE:
            self.fail(f"burst at {addr:#x} of {beats} beats crosses 4 KiB")
        if self.window is not None:
            first, n = self.window
            for b in range(addr // BEAT, addr // BEAT + beats):
                if (b - first) % (1 << 26) >= n:
                    self.fail(f"read of beat {b * BEAT:#x} outside the program")
                    break
        lo, hi = self.opts.latency
        self.pending.append(_Burst(addr, beats, c + self.rng.randint(lo, hi)))

    def place(self, base: int, program: list[bytes]) -> None:
        self.mem.write(base, b"".join(program))

    async def execute(self, base: int, count: int, stop_after: int | None = None,
                      limit: int = 50_000) -> Run:
        """Start at ``base`` with ``count``, wait until the unit is idle again (and the error
        pulse, if any, is out). With ``stop_after``, raise ``stop`` that many cycles after the
        start and keep it up until the unit is idle."""
        d = self.dut
        first = base // BEAT
        self.window = (first, ((base % BEAT) // 16 + count + 3) // 4)
        self.run = Run()
        d.insn_base.value = base
        d.insn_count.value = count
        d.start.value = 1
        await RisingEdge(d.clk)
        d.start.value = 0
        await RisingEdge(d.clk)
        for n in range(limit):
            if stop_after is not None and n == stop_after:
                d.stop.value = 1
            await RisingEdge(d.clk)
            if _on(d.idle) and not self.pending:
                break
        else:
            raise AssertionError(f"fetch not idle after {limit} cycles")
        d.stop.value = 0
        await ClockCycles(d.clk, 3)
        assert not self.violations, "\n".join(self.violations)
        return self.run

    def check(self, run: Run, exp: Expect, what: str) -> None:
        got = [(q, pc) for q, pc, _ in run.dispatched]
        want = [(q, pc) for q, pc, _ in exp.dispatched]
        diff = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                    min(len(got), len(want)))
        assert got == want, f"{what}: dispatched {got[:8]}... ({len(got)}), expected " \
            f"{want[:8]}... ({len(want)}); first difference at {diff}"
        for (q, pc, raw), (_, _, exp_raw) in zip(run.dispatched, exp.dispatched, strict=True):
            assert raw == exp_raw, f"{what}: pc {pc} to {q}: {raw.hex()}, expected {exp_raw.hex()}"
        want_err = [exp.err] if exp.err else []
        assert run.errs == want_err, f"{what}: errors {run.errs}, expected {want_err}"
        ended = _on(self.dut.ended)
        assert ended == exp.ended, f"{what}: ended {ended}, expected {exp.ended}"


def legal_program(rng: random.Random, n: int, end_at: int | None = None) -> list[bytes]:
    """``n`` instructions; END at ``end_at`` (junk, including illegal words, after it)."""
    prog = [isa.encode(rand_legal(rng)) for _ in range(n)]
    if end_at is not None:
        prog[end_at] = isa.encode(isa.end())
        for i in range(end_at + 1, n):
            if rng.random() < 0.3:
                prog[i] = corrupt(rng, rng.choice(ILLEGAL_KINDS))
    return prog


def rand_base(rng: random.Random, n: int) -> int:
    """A 16-byte aligned base: beat aligned or mid-beat, some close to a 4 KiB boundary."""
    kind = rng.randrange(3)
    if kind == 0:
        return rng.randrange(0, 1 << 20, BEAT)
    if kind == 1:
        return rng.randrange(0, 1 << 20, 16)
    page = rng.randrange(1, 256) * PAGE
    return page - 16 * rng.randint(1, min(n, 40))


OPTS = [
    Opts(),
    Opts(latency=(1, 30), ar_ready=0.4, r_idle=0.4, q_full=0.5),
    Opts(latency=(20, 20), q_full=0.2),
    Opts(latency=(0, 6), ar_ready=0.7, r_idle=0.2, q_full=0.8),
]


# --- tests ---------------------------------------------------------------------------------------
@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_programs(dut) -> None:
    """Random legal programs at aligned and mid-beat bases, crossed with memory latency, AR and R
    stalls and queue back-pressure, dispatch exactly in order and end at END; bursts obey AXI
    and never read past the program."""
    tb = TB(dut, 11)
    await tb.reset()
    rng = tb.rng
    rounds = 6
    for r in range(rounds):
        for oi, opts in enumerate(OPTS):
            tb.opts = opts
            n = rng.choice([1, 2, 3, 4, 5, 7, 17, 40, 90])
            end_at = rng.choice([n - 1, n - 1, rng.randrange(n)])
            prog = legal_program(rng, n, end_at)
            base = rand_base(rng, n)
            tb.place(base, prog)
            run = await tb.execute(base, n)
            exp = reference(tb.mem, base, n, set())
            assert exp.ended and exp.err is None
            tb.check(run, exp, f"round {r} opts {oi} base {base:#x} n {n} end {end_at}")
            if opts.q_full >= 0.5 and end_at > 10:     # (instructions before the END)
                assert run.blocked > 0, f"no blocked cycle with q_full {opts.q_full}"
    # a program that wraps from the top of the address space to 0
    tb.opts = OPTS[1]
    prog = legal_program(rng, 30, 29)
    base = (1 << 32) - 16 * 9
    tb.place(base, prog)
    run = await tb.execute(base, 30)
    tb.check(run, reference(tb.mem, base, 30, set()), "wrap at 4 GiB")


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_illegal(dut) -> None:
    """Each illegal case stops dispatch at that instruction with the code check_static gives
    and its index; nothing after it is dispatched; the unit drains and can run again."""
    tb = TB(dut, 12)
    await tb.reset()
    rng = tb.rng
    kinds = ILLEGAL_KINDS * 3
    for k, kind in enumerate(kinds):
        tb.opts = OPTS[k % len(OPTS)]
        n = rng.choice([1, 4, 9, 30])
        prog = legal_program(rng, n, n - 1)
        at = rng.randrange(n)
        prog[at] = corrupt(rng, kind)
        base = rand_base(rng, n)
        tb.place(base, prog)
        run = await tb.execute(base, n)
        exp = reference(tb.mem, base, n, set())
        code = exp.err[0] if exp.err else None
        want = AccelError.ILLEGAL_OPCODE if kind.startswith("opcode") else \
            AccelError.ILLEGAL_FIELD
        assert code == want and exp.err[1] == at, \
            f"reference gives {exp.err} for {kind} at {at}, expected ({want}, {at})"
        tb.check(run, exp, f"{kind} at {at} of {n} base {base:#x}")
    # a legal program afterwards runs normally
    tb.opts = OPTS[0]
    prog = legal_program(rng, 12, 11)
    tb.place(0x4000, prog)
    tb.check(await tb.execute(0x4000, 12), reference(tb.mem, 0x4000, 12, set()), "after errors")


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_no_end(dut) -> None:
    """INSN_COUNT instructions without END give NO_END with err_pc = insn_count, for counts that
    end anywhere in a beat; an illegal last instruction reports itself instead."""
    tb = TB(dut, 13)
    await tb.reset()
    rng = tb.rng
    cases = [(1, 0x1000), (1, 0x1030), (3, 0x2010), (4, 0x3000), (5, 0x3ff0), (37, 0x5020),
             (64, 0x6fc0)]
    for k, (n, base) in enumerate(cases):
        tb.opts = OPTS[k % len(OPTS)]
        prog = legal_program(rng, n + 5)          # legal words past the count are not run
        tb.place(base, prog)
        run = await tb.execute(base, n)
        exp = reference(tb.mem, base, n, set())
        assert exp.err == (AccelError.NO_END, n)
        tb.check(run, exp, f"no END, count {n} base {base:#x}")
    prog = legal_program(rng, 6)
    prog[5] = corrupt(rng, "alu_op7")
    tb.place(0x9000, prog)
    exp = reference(tb.mem, 0x9000, 6, set())
    assert exp.err == (AccelError.ILLEGAL_FIELD, 5)
    tb.check(await tb.execute(0x9000, 6), exp, "illegal last instruction")


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_fetch_bus(dut) -> None:
    """A beat read with SLVERR gives FETCH_BUS at its first instruction once dispatch reaches
    it (everything before it is dispatched); a bad beat past END is never reported."""
    tb = TB(dut, 14)
    await tb.reset()
    rng = tb.rng
    for k in range(10):
        tb.opts = OPTS[k % len(OPTS)]
        n = rng.choice([6, 20, 50])
        base = rand_base(rng, n)
        prog = legal_program(rng, n, n - 1)
        tb.place(base, prog)
        nbeats = ((base % BEAT) // 16 + n + 3) // 4
        bad = (base // BEAT + rng.randrange(nbeats)) & (MASK32 >> 6)
        tb.bad_beats = {bad}
        run = await tb.execute(base, n)
        exp = reference(tb.mem, base, n, tb.bad_beats)
        assert exp.err is not None and exp.err[0] == AccelError.FETCH_BUS
        tb.check(run, exp, f"bad beat {bad * BEAT:#x} base {base:#x} n {n}")
    # END in the first beat, the (prefetched) second beat fails: a clean end
    tb.opts = OPTS[0]
    prog = legal_program(rng, 12, 1)
    tb.place(0x8000, prog)
    tb.bad_beats = {0x8040 // BEAT}
    run = await tb.execute(0x8000, 12)
    assert any(a <= 0x8040 < a + b * BEAT for a, b in tb.bursts), "second beat not prefetched"
    tb.check(run, reference(tb.mem, 0x8000, 12, tb.bad_beats), "bad beat after END")
    tb.bad_beats = set()


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_stop(dut) -> None:
    """`stop` ends dispatch at once (nothing dispatched while it is high), outstanding beats are
    drained, the unit goes idle without an error, and the next start runs normally. Includes a
    stop while an AR waits for ARREADY."""
    tb = TB(dut, 15)
    await tb.reset()
    rng = tb.rng
    for k in range(10):
        tb.opts = OPTS[1 + k % 3]
        if k % 2:
            tb.opts = Opts(latency=(10, 40), ar_ready=0.1, r_idle=0.3, q_full=0.3)
        n = 120
        prog = legal_program(rng, n, n - 1)
        base = rand_base(rng, n)
        tb.place(base, prog)
        run = await tb.execute(base, n, stop_after=rng.randint(0, 60))
        exp = reference(tb.mem, base, n, set())
        got = [(q, pc) for q, pc, _ in run.dispatched]
        want = [(q, pc) for q, pc, _ in exp.dispatched][:len(got)]
        assert got == want, f"stop run {k}: dispatched {got} is not a prefix of the program"
        assert len(got) < n, f"stop run {k}: the whole program ran ({len(got)})"
        assert run.stop_dispatch == 0, f"{run.stop_dispatch} dispatches while stop was high"
        assert not run.errs, f"stop run {k}: error pulses {run.errs}"
        tb.opts = OPTS[0]
        prog = legal_program(rng, 9, 8)
        tb.place(0x20000, prog)
        tb.check(await tb.execute(0x20000, 9), reference(tb.mem, 0x20000, 9, set()),
                 f"run after stop {k}")


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_throughput(dut) -> None:
    """With queues never full and 20-cycle memory latency, dispatch runs at about one
    instruction per cycle (the prefetch buffer hides the latency)."""
    tb = TB(dut, 16)
    await tb.reset()
    n = 600
    tb.opts = Opts(latency=(20, 20))
    prog = legal_program(tb.rng, n, n - 1)
    tb.place(0x10010, prog)
    run = await tb.execute(0x10010, n)
    tb.check(run, reference(tb.mem, 0x10010, n, set()), "throughput")
    rate = n / (run.last - run.first + 1)
    dut._log.info("dispatch rate %.3f instructions/cycle over %d instructions (%d bursts)",
                  rate, n, len(tb.bursts))
    assert rate > 0.95, f"dispatch rate {rate:.3f} instructions/cycle, expected > 0.95"

"""cocotb bench for accel_load and accel_store together (tb/accel/accel_ls_wrap.v): both units on
one AXI4 master served by a cocotbext-axi AxiRam (4 GiB, sparse), the load unit filling the ACC
scratchpad that the store unit reads.

The bench plays the instruction queues and the compute unit (it turns each load push into a
store token and each store push into a load token, after a random delay). Programs of random
LOAD/STORE instructions are race-free by construction; a Python reference written from
docs/isa.md ("LOAD and STORE") gives every scratchpad write (checked one by one, in order, as
the load unit makes it) and the final card memory. Monitors check the AXI rules (bursts of at
most MAX_BURST beats, never across 4 KiB, VALID/address stable until READY, W beats per burst
and WLAST, at most MAX_OUTSTANDING bursts per unit), the token protocol of docs/accel.md
(waiting, pops in the start cycle, pushes with the last write / after the last B response) and
the status outputs. Errors (SP_RANGE, MISALIGNED, LOAD_BUS, STORE_BUS) and `stop` are tested on
their own; the throughput of long rows is printed.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from pyhost.spec import isa
from pyhost.spec.isa import AccelError, Buffer, Insn
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import _on

BEAT = 64
PAGE = 4096
MASK32 = (1 << 32) - 1
SRC = 0x0010_0000          # loads read here (random bytes, never written)
SRC_SIZE = 0x4_0000
DST = 0x0020_0000          # stores write here
DST_SIZE = 0x4_0000


def _icarus() -> bool:
    return cocotb.SIM_NAME.lower().startswith("icarus")


def acc_init(i: int, n: int) -> int:
    """Row i of the wrapper's initial ACC contents (lane j = i*0x9E3779B1 ^ (j+1)*0x85EBCA77)."""
    return sum((((i * 0x9E3779B1) ^ ((j + 1) * 0x85EBCA77)) & MASK32) << (32 * j)
               for j in range(n))


# --- reference (docs/isa.md, "LOAD and STORE") ---------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    n: int
    inp_depth: int
    wgt_depth: int
    acc_depth: int

    def e(self, buf: int) -> int:
        return isa.element_bytes(Buffer(buf), self.n)

    def depth(self, buf: int) -> int:
        return {Buffer.INP: self.inp_depth, Buffer.WGT: self.wgt_depth}.get(Buffer(buf),
                                                                            self.acc_depth)

    @staticmethod
    def port(buf: int) -> str:
        return {Buffer.INP: "inp", Buffer.WGT: "wgt"}.get(Buffer(buf), "acc")


def sext8(b: int) -> int:
    return b - 256 if b & 0x80 else b


def row_starts(f: Insn, slots: list[int], e: int) -> list[int]:
    base = (slots[f.slot] + f.offset) & MASK32
    return [(base + y * f.y_stride * e) & MASK32 for y in range(f.y_size)]


def span_beats(addr: int, nbytes: int) -> int:
    return (addr % BEAT + nbytes + BEAT - 1) // BEAT if nbytes else 0


@dataclass
class Outcome:
    err: AccelError = AccelError.NONE
    writes: list[tuple[str, int, int]] = field(default_factory=list)   # load: (port, row, value)
    stores: list[tuple[int, bytes]] = field(default_factory=list)      # store: (addr, bytes)
    beats: int = 0                                                     # R or W beats
    nbytes: int = 0


def ref_load(f: Insn, slots: list[int], read, g: Geometry) -> Outcome:
    n, e = g.n, g.e(f.buf)
    rows = f.pad_top + f.y_size + f.pad_bottom
    cols = f.pad_left + f.x_size + f.pad_right
    total = rows * cols
    if total and f.sp_base + total > g.depth(f.buf):
        return Outcome(AccelError.SP_RANGE)
    if ((slots[f.slot] + f.offset) & MASK32) % e:
        return Outcome(AccelError.MISALIGNED)
    pad = f.pad_value & 0xFF
    if f.buf == Buffer.INP:
        pad_el = int.from_bytes(bytes([pad]) * n, "little")
    elif f.buf == Buffer.WGT:
        pad_el = int.from_bytes(bytes([pad]) * n * n, "little")
    else:
        pad_el = sum((sext8(pad) & MASK32) << (32 * j) for j in range(n))
    out = Outcome(nbytes=f.y_size * f.x_size * e)
    starts = row_starts(f, slots, e) if f.x_size else []
    out.beats = sum(span_beats(a, f.x_size * e) for a in starts)
    port = g.port(f.buf)
    if f.transpose:
        # (INP, no padding, y a multiple of N) element (y, x): one byte lane (y mod N) of the N
        # rows its block transposes to, from row (y // N * x_size + x) * N
        for y in range(f.y_size):
            for x in range(f.x_size):
                raw = read((starts[y] + x * e) & MASK32, e)
                out.writes.append((f"inp.T{y % n}", f.sp_base + (y // n * f.x_size + x) * n,
                                   int.from_bytes(raw, "little")))
        return out
    for r in range(rows):
        for c in range(cols):
            y, x = r - f.pad_top, c - f.pad_left
            if 0 <= y < f.y_size and 0 <= x < f.x_size:
                raw = read((starts[y] + x * e) & MASK32, e)
                if f.buf == Buffer.ACC8:
                    val = sum((sext8(b) & MASK32) << (32 * j) for j, b in enumerate(raw))
                else:
                    val = int.from_bytes(raw, "little")
            else:
                val = pad_el
            out.writes.append((port, f.sp_base + r * cols + c, val))
    return out


def ref_store(f: Insn, slots: list[int], acc: list[int], g: Geometry) -> Outcome:
    n, e = g.n, g.e(f.buf)
    total = f.y_size * f.x_size
    if total and f.sp_base + total > g.acc_depth:
        return Outcome(AccelError.SP_RANGE)
    if ((slots[f.slot] + f.offset) & MASK32) % e:
        return Outcome(AccelError.MISALIGNED)
    out = Outcome(nbytes=total * e)
    if not total:
        return out
    starts = row_starts(f, slots, e)
    out.beats = sum(span_beats(a, f.x_size * e) for a in starts)
    for y, a in enumerate(starts):
        for x in range(f.x_size):
            v = acc[f.sp_base + y * f.x_size + x]
            if f.buf == Buffer.ACC8:
                data = bytes((v >> (32 * j)) & 0xFF for j in range(n))
            else:
                data = v.to_bytes(4 * n, "little")
            out.stores.append(((a + x * e) & MASK32, data))
    return out


# --- the bench -----------------------------------------------------------------------------------
@dataclass
class Item:
    """One instruction as the bench feeds it and follows it."""

    unit: str                   # "ld" or "st"
    pc: int
    insn: Insn
    exp: Outcome
    pop: bool
    push: bool
    taken_at: int = -1
    popped: int = 0
    writes_seen: int = 0
    r_beats: int = 0
    aws: int = 0
    w_beats: int = 0
    bs: int = 0
    done: str = ""              # "ok", "err" or "dropped"
    last_write_at: int = -1     # cycle of the last scratchpad write (load)
    last_b_at: int = -1         # cycle of the last write response (store)
    finished_at: int = -1
    saw_stop: bool = False


@dataclass
class Pressure:
    """Pause probabilities of the AxiRam channels."""

    ar: float = 0.0
    r: float = 0.0
    aw: float = 0.0
    w: float = 0.0
    b: float = 0.0


PRESSURES = [Pressure(), Pressure(0.3, 0.3, 0.3, 0.3, 0.3), Pressure(0.7, 0.1, 0.6, 0.2, 0.7),
             Pressure(0.0, 0.8, 0.0, 0.8, 0.0)]


class TB:
    def __init__(self, dut, seed: int) -> None:
        self.dut = dut
        self.rng = random.Random(seed)
        self.g = Geometry(int(dut.N.value), int(dut.INP_DEPTH.value), int(dut.WGT_DEPTH.value),
                          int(dut.ACC_DEPTH.value))
        self.max_burst = int(dut.MAX_BURST.value)
        self.max_out = int(dut.MAX_OUTSTANDING.value)
        start_clock(dut)
        logging.getLogger(f"cocotb.{dut._name}.m_axi").setLevel(logging.WARNING)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=1 << 32)
        self.bad: list[tuple[int, int]] = []          # address ranges that answer SLVERR
        self._wrap_faults()
        self.slots = [self.rng.getrandbits(32) for _ in range(isa.NUM_SLOTS)]
        self.acc = [acc_init(i, self.g.n) for i in range(self.g.acc_depth)]
        self.regions: dict[int, bytearray] = {}       # expected memory, by region base
        self.violations: list[str] = []
        self.cycle = 0
        self.queues: dict[str, deque[Item]] = {"ld": deque(), "st": deque()}
        self.cur: dict[str, Item | None] = {"ld": None, "st": None}
        self.finished: list[Item] = []
        self.c2l = 0
        self.c2s = 0
        self.relay: list[tuple[int, str]] = []       # (due cycle, counter) tokens in transit
        self.relay_delay = (0, 4)
        self.feed_gap = 0.2
        self.bursts = {"ar": [], "aw": []}
        dut.stop.value = 0
        dut.slots.value = sum(s << (32 * i) for i, s in enumerate(self.slots))
        for u in ("ld", "st"):
            getattr(dut, f"{u}_insn_valid").value = 0
            getattr(dut, f"{u}_insn").value = 0
            getattr(dut, f"{u}_insn_pc").value = 0
            getattr(dut, f"{u}_tok_prev_avail").value = 0
            getattr(dut, f"{u}_tok_next_avail").value = 0
        self.ram.write(SRC, self.rng.randbytes(SRC_SIZE))
        self.snapshot(SRC, SRC_SIZE)                # checked too: nothing writes it
        self.snapshot(DST, DST_SIZE, random_fill=True)

    def _wrap_faults(self) -> None:
        """SLVERR for any access touching a range in ``self.bad`` (AxiRam turns an exception of
        its memory access into SLVERR)."""
        rd, wr = self.ram.read_if._read, self.ram.write_if._write

        def bad(addr: int, n: int) -> bool:
            return any(addr < hi and addr + n > lo for lo, hi in self.bad)

        async def _read(address: int, length: int) -> bytes:
            if bad(address, length):
                raise OSError(f"injected read error at {address:#x}")
            return await rd(address, length)

        async def _write(address: int, data: bytes) -> None:
            if bad(address, len(data)):
                raise OSError(f"injected write error at {address:#x}")
            await wr(address, data)

        self.ram.read_if._read = _read
        self.ram.write_if._write = _write

    def snapshot(self, base: int, size: int, random_fill: bool = False) -> None:
        """Track the memory at [base, base+size) (filled with random bytes first)."""
        if random_fill:
            self.ram.write(base, self.rng.randbytes(size))
        self.regions[base] = bytearray(self.ram.read(base, size))

    def pressure(self, p: Pressure) -> None:
        chans = {"ar": self.ram.read_if.ar_channel, "r": self.ram.read_if.r_channel,
                 "aw": self.ram.write_if.aw_channel, "w": self.ram.write_if.w_channel,
                 "b": self.ram.write_if.b_channel}
        for name, ch in chans.items():
            prob = getattr(p, name)
            ch.clear_pause_generator()
            ch.pause = False
            if prob:
                rng = random.Random(self.rng.getrandbits(32))

                def gen(rng=rng, prob=prob):
                    while True:
                        yield rng.random() < prob
                ch.set_pause_generator(gen())

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)
        cocotb.start_soon(self._loop())

    def fail(self, msg: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(f"cycle {self.cycle}: {msg}")

    # -- program construction -------------------------------------------------------------------
    def read_mem(self, addr: int, n: int) -> bytes:
        return bytes(self.ram.read(addr, n))

    def apply_store(self, out: Outcome) -> None:
        for addr, data in out.stores:
            for base, img in self.regions.items():
                if base <= addr and addr + len(data) <= base + len(img):
                    img[addr - base:addr - base + len(data)] = data
                    break
            else:
                raise AssertionError(f"store to {addr:#x} outside the tracked regions")

    def add(self, unit: str, insn: Insn, pc: int) -> Item:
        """Queue an instruction and compute its outcome on the reference state."""
        f = insn
        if unit == "ld":
            out = ref_load(f, self.slots, self.read_mem, self.g)
            if out.err == AccelError.NONE:
                for port, row, val in out.writes:
                    if port == "acc":
                        self.acc[row] = val
            item = Item(unit, pc, insn, out, bool(f.pop_next), bool(f.push_next))
        else:
            out = ref_store(f, self.slots, self.acc, self.g)
            if out.err == AccelError.NONE:
                self.apply_store(out)
            item = Item(unit, pc, insn, out, bool(f.pop_prev), bool(f.push_prev))
        self.queues[unit].append(item)
        return item

    def mem_insn(self, load: bool, buf: int, addr: int, y: int, x: int, stride: int,
                 sp_base: int, pads: tuple[int, int, int, int] = (0, 0, 0, 0), pad_value: int = 0,
                 **flags: int) -> Insn:
        slot = self.rng.randrange(isa.NUM_SLOTS)
        fields = dict(slot=slot, offset=(addr - self.slots[slot]) & MASK32, sp_base=sp_base,
                      y_size=y, x_size=x, y_stride=stride, **flags)
        if load:
            fields.update(pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2],
                          pad_right=pads[3], pad_value=pad_value)
            return isa.load(Buffer(buf), **{k: v for k, v in fields.items() if v})
        return isa.store(Buffer(buf), **{k: v for k, v in fields.items() if v})

    def rand_shape(self, e: int, region: int, long: bool = False) -> tuple[int, int, int, int]:
        """(y, x, stride, byte offset in a region) of a random access that fits the region."""
        rng = self.rng
        y = rng.choice([0, 1, 1, 2, 3, 4, 6]) if not long else rng.randint(1, 3)
        xmax = max(1, min(120, 6000 // e))
        x = rng.choice([0, 1, 2, 3, 5, 8, rng.randint(1, xmax)]) if not long else \
            rng.randint(xmax // 2, xmax)
        stride = rng.choice([x, x, x + rng.randint(1, 9), rng.randint(0, x + 1),
                             rng.randint(0, 4 * x + 4)])
        span = ((y - 1) * stride + x) * e if y and x else 0
        off = rng.randrange(0, region - span + 1, e) if span < region else 0
        return y, x, stride, off

    def rand_load(self, buf: int, **flags: int) -> Insn:
        rng = self.rng
        e = self.g.e(buf)
        y, x, stride, off = self.rand_shape(e, SRC_SIZE)
        pads = tuple(rng.choice([0, 0, 0, 1, 2, 3, 15]) for _ in range(4))
        total = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
        depth = self.g.depth(buf)
        if total > depth:
            pads, total = (0, 0, 0, 0), y * x
            if total > depth:
                y, total = 0, 0
        sp_base = rng.randint(0, depth - total)
        return self.mem_insn(True, buf, SRC + off, y, x, stride, sp_base, pads,
                             rng.randint(-128, 127), **flags)

    def rand_store(self, **flags: int) -> Insn:
        rng = self.rng
        buf = rng.choice([Buffer.ACC, Buffer.ACC8])
        e = self.g.e(buf)
        y, x, stride, off = self.rand_shape(e, DST_SIZE)
        if y * x > self.g.acc_depth:
            y = 1
        sp_base = rng.randint(0, self.g.acc_depth - y * x)
        return self.mem_insn(False, buf, DST + off, y, x, stride, sp_base, **flags)

    def rand_program(self, phases: int, pc0: int = 0) -> int:
        """Alternating phases of loads (at least one into ACC) and stores; the last ACC load of
        a phase pushes for the first store of the next, the last store for the first ACC load
        after it, so every ACC row and memory byte shared by the units is ordered by tokens."""
        rng = self.rng
        pc = pc0
        for p in range(phases):
            loads = [rng.choice([Buffer.INP, Buffer.WGT, Buffer.ACC, Buffer.ACC8])
                     for _ in range(rng.randint(1, 4))]
            if not any(b in (Buffer.ACC, Buffer.ACC8) for b in loads):
                loads[rng.randrange(len(loads))] = rng.choice([Buffer.ACC, Buffer.ACC8])
            acc_idx = [i for i, b in enumerate(loads) if b in (Buffer.ACC, Buffer.ACC8)]
            for i, b in enumerate(loads):
                flags = {}
                if i == acc_idx[0] and p > 0:
                    flags["pop_next"] = 1
                if i == acc_idx[-1]:
                    flags["push_next"] = 1
                self.add("ld", self.rand_load(b, **flags), pc)
                pc += 1
            nst = rng.randint(1, 3)
            for i in range(nst):
                flags = {}
                if i == 0:
                    flags["pop_prev"] = 1
                if i == nst - 1 and p < phases - 1:
                    flags["push_prev"] = 1
                self.add("st", self.rand_store(**flags), pc)
                pc += 1
        return pc

    # -- running --------------------------------------------------------------------------------
    async def drain(self, limit: int = 200_000) -> None:
        """Run until both queues are empty, both units idle and no token is in transit."""
        d = self.dut
        for _ in range(limit):
            await RisingEdge(d.clk)
            if not self.queues["ld"] and not self.queues["st"] and self.cur["ld"] is None \
                    and self.cur["st"] is None and _on(d.ld_idle) and _on(d.st_idle) \
                    and not self.relay and not _on(d.ld_insn_valid) \
                    and not _on(d.st_insn_valid):
                break
        else:
            raise AssertionError(f"units still busy after {limit} cycles: queues "
                                 f"{len(self.queues['ld'])}/{len(self.queues['st'])}, current "
                                 f"{self.cur}, tokens c2l {self.c2l} c2s {self.c2s}")
        await ClockCycles(d.clk, 4)
        assert not self.violations, "\n".join(self.violations)

    def check_memory(self) -> None:
        for base, img in self.regions.items():
            got = bytes(self.ram.read(base, len(img)))
            if got != bytes(img):
                bad = [i for i in range(len(img)) if got[i] != img[i]]
                raise AssertionError(
                    f"memory at {base:#x}: {len(bad)} bytes differ, first at "
                    f"{base + bad[0]:#x}: got {got[bad[0]:bad[0] + 16].hex()}, expected "
                    f"{bytes(img[bad[0]:bad[0] + 16]).hex()}")

    # -- the per-cycle process ------------------------------------------------------------------
    async def _loop(self) -> None:
        d = self.dut
        drv = {"ld_valid": 0, "st_valid": 0, "c2l": 0, "c2s": 0}
        pend = {"ar": None, "aw": None}         # (addr, len) waiting for READY
        ar_prev_valid = aw_prev_valid = 0
        ar_prev_fire = aw_prev_fire = 0
        stop_prev = 0
        reads = 0                                # AR accepted, last R not yet in
        writes = 0                               # AW accepted, B not yet in
        wq: deque[int] = deque()                 # beats owed for accepted AWs
        wbeat = 0
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            c = self.cycle
            stop = _on(d.stop)
            # ---------------- AXI
            for ch in ("ar", "aw"):
                valid = _on(getattr(d, f"m_axi_{ch}valid"))
                ready = _on(getattr(d, f"m_axi_{ch}ready"))
                addr = int(getattr(d, f"m_axi_{ch}addr").value) if valid else 0
                ln = int(getattr(d, f"m_axi_{ch}len").value) if valid else 0
                if pend[ch] is not None and (not valid or (addr, ln) != pend[ch]):
                    self.fail(f"{ch.upper()} {pend[ch]} changed to {(addr, ln) if valid else None}"
                              f" before READY")
                prev_valid = ar_prev_valid if ch == "ar" else aw_prev_valid
                prev_fire = ar_prev_fire if ch == "ar" else aw_prev_fire
                if valid and (not prev_valid or prev_fire) and stop_prev:
                    self.fail(f"new {ch.upper()} burst at {addr:#x} after stop")
                pend[ch] = (addr, ln) if valid and not ready else None
                fire = valid and ready
                if fire:
                    beats = ln + 1
                    self.bursts[ch].append((addr, beats))
                    if beats > self.max_burst:
                        self.fail(f"{ch.upper()} burst of {beats} beats > {self.max_burst}")
                    if addr % BEAT or addr // PAGE != (addr + beats * BEAT - 1) // PAGE:
                        self.fail(f"{ch.upper()} burst at {addr:#x} x{beats} crosses 4 KiB or "
                                  f"is not beat aligned")
                    unit = "ld" if ch == "ar" else "st"
                    if self.cur[unit] is None:
                        self.fail(f"{ch.upper()} burst with no {unit} instruction")
                    if ch == "ar":
                        reads += 1
                        if reads > self.max_out:
                            self.fail(f"{reads} read bursts in flight > {self.max_out}")
                    else:
                        writes += 1
                        wq.append(beats)
                        if self.cur["st"] is not None:
                            self.cur["st"].aws += 1
                        if writes > self.max_out:
                            self.fail(f"{writes} write bursts in flight > {self.max_out}")
                if ch == "ar":
                    ar_prev_valid, ar_prev_fire = valid, fire
                else:
                    aw_prev_valid, aw_prev_fire = valid, fire
            if _on(d.m_axi_rvalid) and _on(d.m_axi_rready):
                if self.cur["ld"] is not None:
                    self.cur["ld"].r_beats += 1
                else:
                    self.fail("R beat with no load instruction")
                if _on(d.m_axi_rlast):
                    reads -= 1
            if _on(d.m_axi_wvalid) and _on(d.m_axi_wready):
                if not wq:
                    self.fail("W beat before its AW was accepted")
                else:
                    wbeat += 1
                    last = wbeat == wq[0]
                    if _on(d.m_axi_wlast) != last:
                        self.fail(f"WLAST {_on(d.m_axi_wlast)} on beat {wbeat} of {wq[0]}")
                    if last:
                        wq.popleft()
                        wbeat = 0
                if self.cur["st"] is not None:
                    self.cur["st"].w_beats += 1
            if _on(d.m_axi_bvalid) and _on(d.m_axi_bready):
                writes -= 1
                if self.cur["st"] is not None:
                    self.cur["st"].bs += 1
                    self.cur["st"].last_b_at = c

            # ---------------- units
            for u in ("ld", "st"):
                cur = self.cur[u]
                pop_name, push_name = ("next", "next") if u == "ld" else ("prev", "prev")
                other = "prev" if u == "ld" else "next"
                for sig in (f"{u}_tok_pop_{other}", f"{u}_tok_push_{other}"):
                    if _on(getattr(d, sig)):
                        self.fail(f"{sig} pulsed")
                if cur is not None and stop:
                    cur.saw_stop = True
                # scratchpad writes (load unit)
                if u == "ld":
                    for port in ("inp", "wgt", "acc"):
                        if not _on(getattr(d, f"{port}_we")):
                            continue
                        row = int(getattr(d, f"{port}_waddr").value)
                        val = int(getattr(d, f"{port}_wdata").value)
                        if port == "inp" and _on(d.inp_wtr):      # a transposed LOAD's column
                            port = f"inp.T{int(d.inp_wlane.value)}"
                        if stop_prev:
                            self.fail(f"{port} write of row {row} after stop")
                        if cur is None:
                            self.fail(f"{port} write of row {row} with no load instruction")
                            continue
                        if cur.writes_seen >= len(cur.exp.writes):
                            self.fail(f"pc {cur.pc}: extra {port} write of row {row}")
                            continue
                        ep, er, ev = cur.exp.writes[cur.writes_seen]
                        if (port, row, val) != (ep, er, ev):
                            self.fail(f"pc {cur.pc} write {cur.writes_seen}: {port}[{row}] = "
                                      f"{val:#x}, expected {ep}[{er}] = {ev:#x} ({cur.insn})")
                        cur.writes_seen += 1
                        cur.last_write_at = c
                # token pops
                if _on(getattr(d, f"{u}_tok_pop_{pop_name}")):
                    avail = drv["c2l"] if u == "ld" else drv["c2s"]
                    if cur is None or not cur.pop or cur.popped or not avail:
                        self.fail(f"{u} pop (instruction {cur and cur.pc}, avail {avail})")
                    else:
                        cur.popped = c
                        if u == "ld":
                            self.c2l -= 1
                        else:
                            self.c2s -= 1
                waiting = _on(getattr(d, f"{u}_waiting"))
                avail = drv["c2l"] if u == "ld" else drv["c2s"]
                if waiting and (cur is None or not cur.pop or cur.popped or avail):
                    self.fail(f"{u} waiting with instruction {cur and cur.pc}, avail {avail}")
                if cur is not None and cur.pop and not cur.popped and not avail and not stop \
                        and not cur.done and cur.taken_at < c - 1 and not waiting \
                        and not cur.saw_stop:
                    self.fail(f"{u} pc {cur.pc} not waiting for its token")
                push = _on(getattr(d, f"{u}_tok_push_{push_name}"))
                bytes_valid = _on(getattr(d, f"{u}_bytes_valid"))
                err = _on(getattr(d, f"{u}_err"))
                if push and (not bytes_valid or cur is None or not cur.push):
                    self.fail(f"{u} push without a finishing instruction that pushes "
                              f"({cur and cur.pc})")
                if push:
                    self.relay.append((c + self.rng.randint(*self.relay_delay),
                                       "c2s" if u == "ld" else "c2l"))
                if bytes_valid:
                    if cur is None or cur.exp.err != AccelError.NONE:
                        self.fail(f"{u} bytes_valid for {cur and cur.pc} expecting "
                                  f"{cur and cur.exp.err.name}")
                    else:
                        nb = int(getattr(d, f"{u}_bytes").value)
                        if nb != cur.exp.nbytes:
                            self.fail(f"pc {cur.pc}: bytes {nb}, expected {cur.exp.nbytes}")
                        if cur.push and not push:
                            self.fail(f"pc {cur.pc} finished without its push")
                        # the push comes with the last scratchpad write (LOAD), or right after
                        # the last write response (STORE)
                        if u == "ld" and cur.exp.writes and cur.last_write_at != c:
                            self.fail(f"pc {cur.pc} finished at {c}, last write at "
                                      f"{cur.last_write_at}")
                        if u == "st" and cur.exp.beats and not 0 < c - cur.last_b_at <= 2:
                            self.fail(f"pc {cur.pc} finished at {c}, last B at {cur.last_b_at}")
                        if cur.pop and not cur.popped:
                            self.fail(f"pc {cur.pc} finished without its pop")
                        if u == "ld" and cur.writes_seen != len(cur.exp.writes):
                            self.fail(f"pc {cur.pc} finished after {cur.writes_seen} of "
                                      f"{len(cur.exp.writes)} writes")
                        if u == "ld" and cur.r_beats != cur.exp.beats:
                            self.fail(f"pc {cur.pc}: {cur.r_beats} R beats, expected "
                                      f"{cur.exp.beats}")
                        if u == "st" and (cur.w_beats != cur.exp.beats or cur.bs != cur.aws):
                            self.fail(f"pc {cur.pc}: {cur.w_beats} W beats (expected "
                                      f"{cur.exp.beats}), {cur.bs} B for {cur.aws} AW")
                        cur.done = "ok"
                if err:
                    code, epc = int(getattr(d, f"{u}_err_code").value), \
                        int(getattr(d, f"{u}_err_pc").value)
                    if cur is None or cur.exp.err != code or epc != cur.pc:
                        self.fail(f"{u} err {code} pc {epc}, expected "
                                  f"{cur and cur.exp.err.name} at {cur and cur.pc}")
                    elif cur.push and push:
                        self.fail(f"pc {cur.pc}: push with an error")
                    if cur is not None:
                        cur.done = "err"
                        if code in (AccelError.SP_RANGE, AccelError.MISALIGNED) and \
                                (cur.writes_seen or cur.r_beats or cur.aws):
                            self.fail(f"pc {cur.pc}: {AccelError(code).name} after traffic")
                idle = _on(getattr(d, f"{u}_idle"))
                busy = _on(getattr(d, f"{u}_busy"))
                if idle and busy:
                    self.fail(f"{u} idle and busy")
                if busy and (cur is None or (cur.pop and not cur.popped)):
                    self.fail(f"{u} busy without a started instruction")
                inflight = (reads + ar_prev_valid) if u == "ld" else (writes + len(wq)
                                                                       + aw_prev_valid)
                if idle and inflight:
                    self.fail(f"{u} idle with {inflight} bursts in flight")
                if cur is not None and idle and cur.taken_at < c:
                    if not cur.done:
                        if cur.saw_stop:
                            cur.done = "dropped"
                        else:
                            self.fail(f"{u} idle while pc {cur.pc} has not finished")
                    cur.finished_at = c
                    self.finished.append(cur)
                    self.cur[u] = None
                    cur = None
                # queue handshake
                if drv[f"{u}_valid"] and _on(getattr(d, f"{u}_insn_ready")):
                    if not idle or stop:
                        self.fail(f"{u} took an instruction while not idle or stopped")
                    if cur is not None:
                        self.fail(f"{u} took pc {self.queues[u][0].pc} while running {cur.pc}")
                    item = self.queues[u].popleft()
                    item.taken_at = c
                    self.cur[u] = item
            stop_prev = stop

            # ---------------- drive the next cycle
            for due, ctr in [t for t in self.relay if t[0] <= c]:
                self.relay.remove((due, ctr))
                if ctr == "c2l":
                    self.c2l += 1
                else:
                    self.c2s += 1
            drv["c2l"] = 1 if self.c2l > 0 else 0
            drv["c2s"] = 1 if self.c2s > 0 else 0
            d.ld_tok_next_avail.value = drv["c2l"]
            d.st_tok_prev_avail.value = drv["c2s"]
            for u in ("ld", "st"):
                q = self.queues[u]
                show = bool(q) and (drv[f"{u}_valid"] or self.rng.random() >= self.feed_gap)
                drv[f"{u}_valid"] = 1 if show else 0
                getattr(d, f"{u}_insn_valid").value = drv[f"{u}_valid"]
                if show:
                    getattr(d, f"{u}_insn").value = int.from_bytes(isa.encode(q[0].insn),
                                                                   "little")
                    getattr(d, f"{u}_insn_pc").value = q[0].pc


# --- tests ---------------------------------------------------------------------------------------
@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_random_programs(dut) -> None:
    """Random race-free LOAD/STORE programs over all buffers (strides, padding, element-aligned
    addresses, 4 KiB crossings, zero sizes), crossed with AR/R/AW/W/B back-pressure: every
    scratchpad write, the final card memory, tokens, bytes and the AXI rules match."""
    tb = TB(dut, 21)
    await tb.reset()
    rounds = 2 if _icarus() else 3
    pc = 0
    for r in range(rounds):
        for pi, p in enumerate(PRESSURES):
            tb.pressure(p)
            pc = tb.rand_program(3 if _icarus() else 5, pc)
            await tb.drain()
            tb.check_memory()
            bad = [i for i in tb.finished if i.done != "ok"]
            assert not bad, f"round {r} pressure {pi}: unfinished {[(i.pc, i.done) for i in bad]}"
    dut._log.info("%d instructions, %d read and %d write bursts", len(tb.finished),
                  len(tb.bursts["ar"]), len(tb.bursts["aw"]))


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_edge_shapes(dut) -> None:
    """Targeted shapes: zero sizes with and without padding, rows sharing beats (small strides,
    stride 0), 4 KiB crossings, bursts cut at MAX_BURST, an address space wrap at 2**32, one-
    element rows, full padding rows, elements at the last beat byte."""
    tb = TB(dut, 22)
    await tb.reset()
    g = tb.g
    tb.snapshot((1 << 32) - 0x2000, 0x2000, random_fill=True)
    tb.snapshot(0, 0x2000, random_fill=True)
    pc = 0
    cases = []
    for buf in Buffer:
        e = g.e(buf)
        eb = max(e, BEAT)               # a WGT element of N = 16 is four beats
        cases += [
            dict(buf=buf, addr=SRC, y=0, x=5, stride=5, pads=(1, 2, 1, 1)),       # y = 0
            dict(buf=buf, addr=SRC, y=3, x=0, stride=5, pads=(0, 1, 2, 1)),       # x = 0
            dict(buf=buf, addr=SRC, y=0, x=0, stride=0, pads=(0, 0, 0, 0)),       # nothing
            dict(buf=buf, addr=SRC + PAGE - e, y=2, x=3, stride=1, pads=(0, 0, 0, 0)),
            dict(buf=buf, addr=SRC + 3 * e, y=4, x=2, stride=0, pads=(1, 1, 1, 1)),
            dict(buf=buf, addr=SRC + eb - e, y=1, x=1, stride=0, pads=(0, 0, 15, 15)),
            dict(buf=buf, addr=SRC + 5 * PAGE - 2 * eb, y=1,
                 x=min(g.depth(buf) - 1, (tb.max_burst * 3 * BEAT) // e + 1), stride=0,
                 pads=(0, 0, 0, 0)),
            dict(buf=buf, addr=(1 << 32) - 2 * eb, y=2, x=max(1, 3 * BEAT // e), stride=0,
                 pads=(0, 0, 1, 0), wrap=True),
        ]
    for k, cs in enumerate(cases):
        buf, e = cs["buf"], g.e(cs["buf"])
        y, x, pads = cs["y"], cs["x"], cs["pads"]
        cols = pads[2] + x + pads[3]
        total = (pads[0] + y + pads[1]) * cols
        sp = tb.rng.randint(0, max(0, g.depth(buf) - total))
        store_after = buf in (Buffer.ACC, Buffer.ACC8) and y * x > 0
        tb.add("ld", tb.mem_insn(True, buf, cs["addr"], y, x, cs["stride"], sp, pads,
                                 tb.rng.randint(-128, 127), push_next=int(store_after)), pc)
        pc += 1
        if store_after:
            # store the first memory row just loaded (ordered by a token, as in a program):
            # to DST, or across the top of the address space
            first = sp + pads[0] * cols + pads[2]
            dst = (1 << 32) - BEAT - e if cs.get("wrap") else DST + (k % 16) * 4 * PAGE + e
            tb.add("st", tb.mem_insn(False, buf, dst, 1, x, 0, first, pop_prev=1), pc)
            pc += 1
            await tb.drain()
        tb.pressure(PRESSURES[k % len(PRESSURES)])
    # stores with stride smaller than a row, stride 0, and 4 KiB crossings
    for buf in (Buffer.ACC, Buffer.ACC8):
        e = g.e(buf)
        for y, x, stride, off in ((3, 5, 2, e), (4, 3, 0, BEAT - e), (2, 300, 301, PAGE - e),
                                  (1, 1, 0, BEAT - e), (0, 9, 9, 0), (5, 0, 1, 0)):
            x = min(x, g.acc_depth // max(1, y))
            tb.add("st", tb.mem_insn(False, buf, DST + 0x10000 + off, y, x, stride,
                                     tb.rng.randint(0, g.acc_depth - y * x)), pc)
            pc += 1
    await tb.drain()
    tb.check_memory()
    bad = [(i.pc, i.done) for i in tb.finished if i.done != "ok"]
    assert not bad, f"unfinished: {bad}"
    for ch in ("ar", "aw"):
        assert any(b == tb.max_burst for _, b in tb.bursts[ch]), f"no {ch} burst of MAX_BURST"
        assert any(b < tb.max_burst and (a + b * BEAT) % PAGE == 0 for a, b in tb.bursts[ch]), \
            f"no {ch} burst cut at a 4 KiB boundary"


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_transposed_load(dut) -> None:
    """Transposed LOADs (INP): blocks of N memory rows x 1..9 elements, strides shorter and
    longer than a row and 0, rows sharing beats and crossing 4 KiB, bursts cut at MAX_BURST,
    back to back with plain LOADs of every buffer: every write is one byte lane of the N rows
    its block transposes to (docs/isa.md), in memory order, one element per cycle."""
    tb = TB(dut, 23)
    await tb.reset()
    g, n, rng = tb.g, tb.g.n, tb.rng
    pc = 0
    shapes = [(n, 1, 1), (n, 3, 3), (2 * n, 5, 7), (3 * n, 2, 0), (n, 9, 2),
              (n, max(1, tb.max_burst * BEAT // n + 3), 0)]
    for k, (y, x, stride) in enumerate(shapes * 2):
        addr = SRC + (PAGE - 2 * n if k % 3 == 0 else rng.randrange(0, PAGE, n))
        sp = rng.randrange(0, g.inp_depth - y * x)
        tb.add("ld", tb.mem_insn(True, Buffer.INP, addr, y, x, max(stride, x) if k % 4 else
                                 stride, sp, transpose=1), pc)
        pc += 1
        if k % 2:
            buf = rng.choice(list(Buffer))
            tb.add("ld", tb.rand_load(buf), pc)
            pc += 1
        tb.pressure(PRESSURES[k % len(PRESSURES)])
    await tb.drain()
    bad = [(i.pc, i.done) for i in tb.finished if i.done != "ok"]
    assert not bad, f"unfinished: {bad}"
    tr = [i for i in tb.finished if i.insn.transpose]
    assert len(tr) == 2 * len(shapes)
    assert all(i.writes_seen == len(i.exp.writes) for i in tr)


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_check_errors(dut) -> None:
    """SP_RANGE (last row = depth) and MISALIGNED (address not a multiple of E) for every
    buffer, for LOAD and STORE: err with the pc in place of the push, no memory traffic, no
    write; the range check covers only what is written; SP_RANGE wins over MISALIGNED; the
    next instruction runs normally."""
    tb = TB(dut, 23)
    await tb.reset()
    g = tb.g
    pc = 0
    for buf in Buffer:
        e, depth = g.e(buf), g.depth(buf)
        cases = [
            # exactly fits: the last row written is depth - 1
            (2, 3, (1, 0, 0, 1), depth - 12, SRC, AccelError.NONE),
            # nothing written: no range check even far beyond the depth
            (0, 3, (0, 0, 0, 0), (1 << 16) - 1, SRC, AccelError.NONE),
            (2, 3, (1, 0, 0, 1), depth - 11, SRC, AccelError.SP_RANGE),
            (1, 1, (0, 0, 0, 0), depth, SRC, AccelError.SP_RANGE),
            (0, 0, (1, 0, 1, 0), depth, SRC, AccelError.SP_RANGE),          # padding counts
            (2, 3, (0, 0, 0, 0), 0, SRC + e // 2, AccelError.MISALIGNED),
            (1, 1, (0, 0, 0, 0), 0, SRC + BEAT + max(1, e // 4), AccelError.MISALIGNED),
            (0, 0, (0, 0, 0, 0), 0, SRC + 1, AccelError.MISALIGNED),        # even moving nothing
            (5, 5, (0, 0, 0, 0), depth - 3, SRC + 1, AccelError.SP_RANGE),  # range first
        ]
        for y, x, pads, sp, addr, want in cases:
            it = tb.add("ld", tb.mem_insn(True, buf, addr, y, x, x, sp, pads, 5), pc)
            pc += 1
            assert it.exp.err == want, f"reference {it.exp.err.name}, meant {want.name}"
    await tb.drain()
    for buf in (Buffer.ACC, Buffer.ACC8):
        e, depth = g.e(buf), g.acc_depth
        cases = [
            (2, 3, depth - 6, DST, AccelError.NONE),
            (0, 3, (1 << 16) - 1, DST, AccelError.NONE),
            (2, 3, depth - 5, DST, AccelError.SP_RANGE),
            (1, 1, 0, DST + e // 2, AccelError.MISALIGNED),
            (0, 0, 0, DST + 1, AccelError.MISALIGNED),
            (3, 3, depth - 2, DST + 1, AccelError.SP_RANGE),
        ]
        for y, x, sp, addr, want in cases:
            it = tb.add("st", tb.mem_insn(False, buf, addr, y, x, x, sp), pc)
            pc += 1
            assert it.exp.err == want, f"reference {it.exp.err.name}, meant {want.name}"
    await tb.drain()
    tb.check_memory()
    for it in tb.finished:
        want = "ok" if it.exp.err == AccelError.NONE else "err"
        assert it.done == want, f"pc {it.pc} ({it.unit}): {it.done}, expected {want} " \
            f"({it.exp.err.name})"


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_bus_errors(dut) -> None:
    """A SLVERR on a read beat (LOAD_BUS) or a write response (STORE_BUS) in the middle of a
    multi-burst instruction: the unit finishes the bursts in flight (every R beat accepted, every
    W beat of an issued AW sent, every B taken), then pulses err with the pc, without a push;
    the next instruction runs normally."""
    tb = TB(dut, 24)
    await tb.reset()
    g = tb.g
    pc = 0
    for k, p in enumerate(PRESSURES):
        tb.pressure(p)
        for buf in (Buffer.INP, Buffer.WGT, Buffer.ACC):
            e = g.e(buf)
            x = min(g.depth(buf) // 2, (8 * tb.max_burst * BEAT) // e)
            addr = SRC + PAGE * (1 + k)
            tb.bad = [(addr + x * e // 2, addr + x * e // 2 + 1)]
            before = list(tb.acc)
            it = tb.add("ld", tb.mem_insn(True, buf, addr, 1, x, x, 0, push_next=1), pc)
            it.exp = Outcome(AccelError.LOAD_BUS, writes=it.exp.writes)
            pc += 1
            await tb.drain()
            assert it.done == "err", f"{buf.name}: {it.done}"
            assert it.writes_seen < x, "all elements written despite the error"
            tb.acc = before             # the rows written before the error are known
            for port, row, val in it.exp.writes[:it.writes_seen]:
                if port == "acc":
                    tb.acc[row] = val
            tb.bad = []
            tb.add("ld", tb.rand_load(buf), pc)
            pc += 1
            await tb.drain()
        for buf in (Buffer.ACC, Buffer.ACC8):
            e = g.e(buf)
            x = min(g.acc_depth, (8 * tb.max_burst * BEAT) // e)
            addr = DST + PAGE * (1 + 2 * k)
            lo = addr + x * e // 3
            tb.bad = [(lo, lo + 1)]
            it = tb.add("st", tb.mem_insn(False, buf, addr, 1, x, x, 0, push_prev=1), pc)
            pc += 1
            # memory in the failing store's range is unspecified: take a fresh snapshot later
            it.exp = Outcome(AccelError.STORE_BUS, beats=it.exp.beats)
            await tb.drain()
            assert it.done == "err", f"{buf.name}: {it.done}"
            assert it.aws == it.bs and it.w_beats == sum(
                b for a, b in tb.bursts["aw"][-it.aws:]), \
                f"{it.aws} AW, {it.bs} B, {it.w_beats} W beats"
            tb.bad = []
            tb.snapshot(DST, DST_SIZE)
            tb.add("st", tb.rand_store(), pc)
            pc += 1
            await tb.drain()
            tb.check_memory()
    for it in tb.finished:
        if it.exp.err == AccelError.NONE:
            assert it.done == "ok", f"pc {it.pc}: {it.done}"


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_stop(dut) -> None:
    """`stop` drops an instruction that waits for its token (no pop), and stops a running LOAD
    or STORE from issuing bursts: what is in flight drains, the unit goes idle without push,
    bytes or err; after `stop` the units take and run new instructions."""
    tb = TB(dut, 25)
    await tb.reset()
    d = dut
    g = tb.g
    pc = 0
    # a held instruction waiting for a token is dropped
    tb.add("ld", tb.mem_insn(True, Buffer.INP, SRC, 2, 4, 4, 0, pop_next=1), pc)
    tb.add("st", tb.mem_insn(False, Buffer.ACC, DST, 1, 4, 4, 0, pop_prev=1), pc + 1)
    pc += 2
    for _ in range(12):
        await RisingEdge(d.clk)
    assert _on(d.ld_waiting) and _on(d.st_waiting), "units not waiting for their tokens"
    d.stop.value = 1
    await ClockCycles(d.clk, 3)
    d.stop.value = 0
    await tb.drain()
    assert [i.done for i in tb.finished[-2:]] == ["dropped", "dropped"], \
        [(i.pc, i.done) for i in tb.finished[-2:]]
    assert not any(i.popped for i in tb.finished[-2:]), "a dropped instruction popped a token"
    tb.snapshot(DST, DST_SIZE)                  # the dropped store wrote nothing
    # running instructions are stopped after a while
    for k, p in enumerate(PRESSURES[1:]):
        tb.pressure(p)
        for unit in ("ld", "st"):
            if unit == "ld":
                x = min(g.inp_depth, 4000)
                insn = tb.mem_insn(True, Buffer.INP, SRC + g.e(Buffer.INP) * k, 2, x // 2,
                                   x // 2, 0)
            else:
                x = min(g.acc_depth, 2000)
                insn = tb.mem_insn(False, Buffer.ACC, DST + g.e(Buffer.ACC) * k, 1, x, x, 0)
            it = tb.add(unit, insn, pc)
            pc += 1
            while it.taken_at < 0 or tb.cycle < it.taken_at + 40 + 10 * k:
                await RisingEdge(d.clk)
            d.stop.value = 1
            while not (_on(getattr(d, f"{unit}_idle")) and tb.cur[unit] is None):
                await RisingEdge(d.clk)
            await ClockCycles(d.clk, 2)
            d.stop.value = 0
            assert it.done == "dropped", f"{unit}: {it.done}"
            if unit == "st":
                assert it.aws == it.bs, f"store stopped with {it.aws} AW and {it.bs} B"
                tb.snapshot(DST, DST_SIZE)          # partially stored rows are unspecified
            # a normal instruction afterwards
            tb.add(unit, tb.rand_load(Buffer.WGT) if unit == "ld" else tb.rand_store(), pc)
            pc += 1
            await tb.drain()
            tb.check_memory()
            assert tb.finished[-1].done == "ok", f"after stop: {tb.finished[-1].done}"


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_tokens(dut) -> None:
    """Token timing: a unit holding an instruction whose token is missing says waiting (and
    does nothing) until the token comes, pops it in the start cycle, and pushes with its last
    scratchpad write (LOAD) or after its last B response (STORE)."""
    tb = TB(dut, 26)
    await tb.reset()
    d = dut
    tb.relay_delay = (30, 60)               # tokens take long: the waiting state is visible
    e, e8 = tb.g.e(Buffer.ACC), tb.g.e(Buffer.ACC8)
    ld = tb.add("ld", tb.mem_insn(True, Buffer.ACC, SRC + 3 * e, 3, 5, 7, 0, pop_next=1,
                                  push_next=1), 0)
    st = tb.add("st", tb.mem_insn(False, Buffer.ACC8, DST + 5 * e8, 3, 5, 9, 0, pop_prev=1,
                                  push_prev=1), 1)
    ld2 = tb.add("ld", tb.mem_insn(True, Buffer.ACC, SRC + PAGE - e, 2, 9, 9, 1, pop_next=1),
                 2)
    assert all(i.exp.err == AccelError.NONE for i in (ld, st, ld2))
    for _ in range(40):
        await RisingEdge(d.clk)
    assert _on(d.ld_waiting) and _on(d.st_waiting), "not waiting"
    assert ld.writes_seen == 0 and not tb.bursts["ar"], "load moved without its token"
    tb.c2l += 1                              # the first load's token
    await tb.drain()
    assert [i.done for i in (ld, st, ld2)] == ["ok"] * 3, [i.done for i in (ld, st, ld2)]
    assert ld.popped and st.popped > ld.finished_at and ld2.popped > st.finished_at, \
        (ld.popped, ld.finished_at, st.popped, st.finished_at, ld2.popped)
    tb.check_memory()


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_throughput(dut) -> None:
    """Long rows without back-pressure: the load unit writes one element per cycle and the store
    unit streams one ACC row per cycle (checked when MAX_OUTSTANDING >= 2); prints bytes per
    cycle for each buffer."""
    tb = TB(dut, 27)
    await tb.reset()
    g = tb.g
    rates = {}
    pc = 0
    for unit, buf in (("ld", Buffer.INP), ("ld", Buffer.WGT), ("ld", Buffer.ACC),
                      ("ld", Buffer.ACC8), ("st", Buffer.ACC), ("st", Buffer.ACC8)):
        e = g.e(buf)
        x = min(g.depth(buf), 4095, (1 << 15) // e if _icarus() else (1 << 17) // e)
        x = min(x, g.acc_depth) if unit == "st" else x
        if unit == "ld":
            insn = tb.mem_insn(True, buf, SRC + e, 1, x, x, 0)
        else:
            insn = tb.mem_insn(False, buf, DST + e, 1, x, x, 0)
        it = tb.add(unit, insn, pc)
        pc += 1
        await tb.drain()
        cycles = it.finished_at - it.taken_at
        rates[f"{'LOAD' if unit == 'ld' else 'STORE'}.{buf.name}"] = (it.exp.nbytes / cycles, e)
    for name, (rate, e) in rates.items():
        dut._log.info("%-11s %6.2f bytes/cycle (%.2f elements/cycle, element %d bytes)",
                      name, rate, rate / e, e)
    tb.check_memory()
    if tb.max_out < 2:
        return          # one burst at a time: every write burst waits for its B response
    for name, (rate, e) in rates.items():
        # one element (scratchpad row) per cycle, at most a beat per cycle
        ideal = min(e, BEAT)
        assert rate >= 0.85 * ideal, f"{name}: {rate:.2f} bytes/cycle, ideal {ideal}"

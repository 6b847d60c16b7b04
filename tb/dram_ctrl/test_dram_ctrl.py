"""cocotb bench for dram_ctrl: AXI traffic checked against a Python memory model, every DRAM
command checked against the DDR4 timing rules by a monitor on the command trace.

The RTL parameters of the build under test arrive in the environment variable DRAM_TB_PARAMS
(JSON), set by tests/rtl/test_dram_ctrl.py through the runner wrapper.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, Event, FallingEdge, Timer
from cocotbext.axi import AxiBurstType, AxiBus, AxiMaster, AxiResp

from pyhost.spec import dram
from tb.common.clocking import reset, start_clock
from tb.dram_ctrl.ddr4_checker import Ddr4Checker
from tb.dram_ctrl.monitor import Ddr4Monitor
from tb.dram_ctrl.traffic import AxiTraffic, Pattern


def build_params() -> dict[str, int]:
    """The dram_ctrl parameters of this build (defaults where the build did not set one)."""
    raw = json.loads(os.environ.get("DRAM_TB_PARAMS", "{}"))
    params: dict[str, int] = {"DATA_WIDTH": 512, "ID_WIDTH": 8, "MEM_SIZE": 1 << 30,
                              "REF_POSTPONE_MAX": dram.REF_POSTPONE_MAX,
                              "ADDR_HASH": dram.ADDR_HASH}
    params.update(dram.DEFAULT_TIMING.parameters())
    params.update({k: int(v) for k, v in raw.items()})
    return params


def resume(channel) -> None:
    """Stop pausing a cocotbext-axi channel (clearing the generator leaves it paused)."""
    channel.clear_pause_generator()
    channel.pause = False


class TB:
    """Clock, reset, an AxiMaster on s_axi (or none, for a test that drives the ports with
    tb.dram_ctrl.traffic), the memory model and the timing monitor."""

    def __init__(self, dut, monitor: bool = True, master: bool = True) -> None:
        self.dut = dut
        self.params = build_params()
        p = self.params
        self.mem_size = p["MEM_SIZE"]
        self.line = p["DATA_WIDTH"] // 8
        self.timing = dram.Ddr4Timing(**{f: p[f"T_{f}"] for f in
                                         dram.DEFAULT_TIMING.__dataclass_fields__})
        self.checker = Ddr4Checker(self.timing, p["REF_POSTPONE_MAX"])
        self.monitor = Ddr4Monitor(dut, dut.clk, self.checker)
        # Storage survives between the tests of one simulation: only bytes written by this
        # test are known.
        self.model = np.zeros(self.mem_size, dtype=np.uint8)
        self.known = np.zeros(self.mem_size, dtype=bool)
        self.rng = random.Random(int(os.environ.get("COCOTB_RANDOM_SEED", "1")))
        self.monitor_enabled = monitor
        self.stop = Event()
        start_clock(dut)
        if master:
            self.axi = AxiMaster(AxiBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
            logging.getLogger("cocotb.dram_ctrl.s_axi").setLevel(logging.WARNING)
        else:   # the lean generator; it idles the ports at once (before reset)
            self.traffic = AxiTraffic(dut, seed=self.rng.getrandbits(32))

    async def reset(self) -> None:
        await reset(self.dut, hold=5, settle=1)
        if self.monitor_enabled:
            self.monitor.start()

    def set_backpressure(self, on: bool) -> None:
        """Random idle cycles on the master's requests and back-pressure on its responses."""
        pats = [[1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 0, 0], [0, 0, 1], [1, 0, 1, 1, 0, 0, 0]]
        chans = (self.axi.write_if.aw_channel, self.axi.write_if.w_channel,
                 self.axi.write_if.b_channel, self.axi.read_if.ar_channel,
                 self.axi.read_if.r_channel)
        for ch, pat in zip(chans, pats, strict=True):
            if on:
                ch.set_pause_generator(itertools.cycle(pat))
            else:
                resume(ch)

    def stat(self, name: str) -> int:
        return int(getattr(self.dut, f"stat_{name}").value)

    # -- checked accesses --------------------------------------------------------------------
    async def write(self, addr: int, data: bytes, **kw) -> None:
        resp = await self.axi.write(addr, data, **kw)
        assert resp.resp == AxiResp.OKAY, f"write 0x{addr:x}+{len(data)}: resp {resp.resp!r}"
        self.store(addr, data)

    def store(self, addr: int, data: bytes) -> None:
        """Record bytes the DUT now holds."""
        self.model[addr:addr + len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.known[addr:addr + len(data)] = True

    def expected(self, addr: int, length: int) -> bytes:
        return self.model[addr:addr + length].tobytes()

    async def check_read(self, addr: int, length: int, **kw) -> None:
        resp = await self.axi.read(addr, length, **kw)
        assert resp.resp == AxiResp.OKAY, f"read 0x{addr:x}+{length}: resp {resp.resp!r}"
        got = np.frombuffer(resp.data, dtype=np.uint8)
        exp = self.model[addr:addr + length]
        wrong = np.flatnonzero((got != exp) & self.known[addr:addr + length])
        if wrong.size:
            bad = int(wrong[0])
            raise AssertionError(
                f"read 0x{addr:x}+{length}: first mismatch at 0x{addr + bad:x}: "
                f"got {got[bad:bad + 8].tobytes().hex()} "
                f"expected {exp[bad:bad + 8].tobytes().hex()} ({wrong.size} bytes wrong)")

    async def check_written(self, base: int, span: int) -> int:
        """Read back every byte this test wrote inside [base, base+span), in bursts over the
        written lines (runs less than 4 lines apart are read as one); return the bytes read."""
        ln = self.line
        assert base % ln == 0 and span % ln == 0, "check_written takes whole lines"
        lines = np.flatnonzero(self.known[base:base + span].reshape(-1, ln).any(axis=1))
        if lines.size == 0:
            return 0
        cut = np.flatnonzero(np.diff(lines) > 4)       # a run ends before each gap
        total = 0
        for first, last in zip(np.r_[lines[0], lines[cut + 1]], np.r_[lines[cut], lines[-1]],
                               strict=True):
            n = int(last - first + 1) * ln
            await self.check_read(base + int(first) * ln, n)
            total += n
        return total

    async def worker(self, base: int, span: int, ops: int, max_len: int,
                     read_back: float = 0.0) -> None:
        """Random reads and writes (lengths, offsets, sizes, IDs) inside [base, base+span); with
        probability ``read_back`` a write is read back at once, on another ID, around its bytes
        (its B comes when the burst is queued, so the read can find the write still queued)."""
        rng = random.Random(self.rng.getrandbits(32))
        id_max = min(2 ** self.params["ID_WIDTH"], 4)
        max_size = (self.line - 1).bit_length()
        for _ in range(ops):
            length = rng.randint(1, max_len)
            addr = base + rng.randrange(span - length)
            size = rng.choice([max_size, max_size, rng.randint(0, max_size)])
            if size < max_size:  # narrow bursts: keep the beat count legal
                length = min(length, 64 << size)
            ident = rng.randrange(id_max)
            if rng.random() < 0.5:
                data = rng.randbytes(length)
                await self.write(addr, data, awid=ident, size=size)
                if rng.random() < read_back:
                    lo = max(base, addr - rng.randrange(2 * self.line))
                    hi = min(base + span, addr + length + rng.randrange(2 * self.line))
                    await self.check_read(lo, hi - lo, arid=(ident + 1) % id_max)
            else:
                await self.check_read(addr, length, arid=ident, size=size)

    async def reader(self, base: int, span: int, stop: Event, ident: int) -> int:
        """Random checked reads of 1-4 lines inside [base, base+span) until ``stop``."""
        rng = random.Random(self.rng.getrandbits(32))
        n = 0
        while not stop.is_set():
            length = rng.randint(1, 4) * self.line
            addr = base + rng.randrange(0, span - length + 1, self.line)
            await self.check_read(addr, length, arid=ident)
            n += 1
        return n

    async def count(self, names: tuple[str, ...], out: dict[str, int], stop: Event) -> None:
        """Count the cycles each of the DUT's 1-bit signals ``names`` is high, until ``stop``."""
        sigs = [getattr(self.dut, n) for n in names]
        while not stop.is_set():
            await FallingEdge(self.dut.clk)
            for n, sg in zip(names, sigs, strict=True):
                out[n] += int(sg.value)

    async def wait_cycles(self, n: int) -> None:
        """Let ``n`` cycles pass without a Python callback per cycle."""
        await Timer(n * dram.CTRL_CLK_NS, unit="ns")

    async def finish(self) -> None:
        await ClockCycles(self.dut.clk, 4 * self.timing.CL + 20)
        self.monitor.finish()


def _scale() -> int:
    """Work per test: Icarus is far slower than Verilator."""
    return 1 if os.environ.get("SIM", "verilator") == "icarus" else 4


@cocotb.test(timeout_time=1000, timeout_unit="us")
@cocotb.parametrize(backpressure=[False, True])
async def test_random_traffic(dut, backpressure: bool) -> None:
    """Concurrent random reads and writes (sizes, lengths, IDs, strobes) match the memory model
    and every DRAM command meets every timing rule."""
    tb = TB(dut)
    await tb.reset()
    tb.set_backpressure(backpressure)
    workers = 4
    span = min(tb.mem_size // workers, 64 * 1024)
    ops = 12 * _scale()
    await cocotb.triggers.gather(*(
        cocotb.start_soon(tb.worker(w * (tb.mem_size // workers), span, ops, 8 * tb.line))
        for w in range(workers)))
    # Read everything written back, in bursts over the written lines, as a final check.
    read = 0
    for w in range(workers):
        read += await tb.check_written(w * (tb.mem_size // workers), span)
    assert read > 0, "no write to read back"
    await tb.finish()
    issued = tb.checker.counts
    assert issued["RD"] == tb.stat("rd"), f"RD commands {issued['RD']} != stat_rd {tb.stat('rd')}"
    assert issued["WR"] == tb.stat("wr"), f"WR commands {issued['WR']} != stat_wr {tb.stat('wr')}"
    classes = tb.stat("row_hit") + tb.stat("row_miss") + tb.stat("row_conflict")
    assert classes == issued["RD"] + issued["WR"], (
        f"hit+miss+conflict {classes} != bursts {issued['RD'] + issued['WR']}")
    assert issued["ACT"] > 0 and issued["PRE"] > 0, f"no row traffic: {issued}"


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_same_id_ordering(dut) -> None:
    """Many outstanding reads on one ID to conflicting rows return in order, and a read after a
    write to the same line from another ID sees the written data."""
    tb = TB(dut)
    await tb.reset()
    row_stride = tb.line * (1 << (dram.BG_BITS + dram.COL_BITS + dram.BA_BITS))
    addrs = [(i % 4) * row_stride + (i // 4) * tb.line * 4 for i in range(24)]
    for a in addrs:
        await tb.write(a, tb.rng.randbytes(tb.line))
    reads = [cocotb.start_soon(tb.axi.read(a, tb.line, arid=1)) for a in addrs]
    for a, r in zip(addrs, reads, strict=True):
        res = await r
        assert res.data == tb.expected(a, tb.line), f"read 0x{a:x} out of order / wrong"
    # write (ID 2) then read (ID 3) of one line, issued back to back
    a = addrs[5]
    data = tb.rng.randbytes(tb.line)
    w = cocotb.start_soon(tb.axi.write(a, data, awid=2))
    await ClockCycles(dut.clk, 1)
    r = cocotb.start_soon(tb.axi.read(a, tb.line, arid=3))
    old = tb.expected(a, tb.line)
    await w
    tb.store(a, data)
    res = await r
    assert res.data in (data, old), "read-after-write: data is neither the old nor the new line"
    await tb.finish()


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_out_of_range_decerr(dut) -> None:
    """A burst reaching past the memory gets DECERR, writes nothing and does not alias."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    top = tb.mem_size - 2 * ln
    await tb.write(0, tb.rng.randbytes(4 * ln))
    await tb.write(top, tb.rng.randbytes(2 * ln))
    # just past the end: the address would alias to 0 if the controller dropped the top bit
    resp = await tb.axi.write(tb.mem_size, b"\xaa" * (2 * ln))
    assert resp.resp == AxiResp.DECERR, f"write at the end: {resp.resp!r}, want DECERR"
    rresp = await tb.axi.read(tb.mem_size, 2 * ln)
    assert rresp.resp == AxiResp.DECERR, f"read at the end: {rresp.resp!r}, want DECERR"
    assert rresp.data == bytes(2 * ln), "DECERR read returned data"
    # narrow single beat just past the end
    resp = await tb.axi.write(tb.mem_size + 4, b"\x55\x55", size=1)
    assert resp.resp == AxiResp.DECERR, f"narrow write past the end: {resp.resp!r}"
    far = min(2 * tb.mem_size, 2 ** 32 - 4096)
    resp = await tb.axi.write(far, b"\x55" * 100)
    assert resp.resp == AxiResp.DECERR, f"write far out: {resp.resp!r}, want DECERR"
    rresp = await tb.axi.read(far, 100, arid=3)
    assert rresp.resp == AxiResp.DECERR, f"read far out: {rresp.resp!r}, want DECERR"
    # a transfer the master splits at the 4 KiB boundary that is the end of memory: the part
    # inside is written, the burst outside refused, so the whole transfer reports DECERR
    data = tb.rng.randbytes(4 * ln)
    resp = await tb.axi.write(top, data)
    assert resp.resp == AxiResp.DECERR, f"write across the end: {resp.resp!r}, want DECERR"
    tb.store(top, data[:2 * ln])
    # the controller still works, and nothing aliased
    await tb.check_read(0, 4 * ln)
    await tb.check_read(top, 2 * ln)
    await tb.finish()


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_wrap_fixed_and_illegal(dut) -> None:
    """WRAP and FIXED bursts address the right lines; an illegal WRAP length gets SLVERR."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    base = 16 * ln
    await tb.write(base, tb.rng.randbytes(8 * ln))
    # WRAP read of 4 beats starting at beat 2: beats 2, 3, 0, 1
    r = await tb.axi.read(base + 2 * ln, 4 * ln, burst=AxiBurstType.WRAP)
    exp = tb.expected(base + 2 * ln, 2 * ln) + tb.expected(base, 2 * ln)
    assert r.resp == AxiResp.OKAY and r.data == exp, f"WRAP read: resp {r.resp!r}, data wrong"
    # WRAP write of 4 beats starting at beat 3
    data = tb.rng.randbytes(4 * ln)
    resp = await tb.axi.write(base + 3 * ln, data, burst=AxiBurstType.WRAP)
    assert resp.resp == AxiResp.OKAY, f"WRAP write: {resp.resp!r}"
    tb.store(base + 3 * ln, data[:ln])
    tb.store(base, data[ln:])
    await tb.check_read(base, 8 * ln)
    # FIXED write: every beat to the same line, the last one wins
    data = tb.rng.randbytes(3 * ln)
    resp = await tb.axi.write(base + 6 * ln, data, burst=AxiBurstType.FIXED)
    assert resp.resp == AxiResp.OKAY, f"FIXED write: {resp.resp!r}"
    tb.store(base + 6 * ln, data[2 * ln:])
    await tb.check_read(base, 8 * ln)
    # illegal WRAP: 3 beats
    r = await tb.axi.read(base, 3 * ln, burst=AxiBurstType.WRAP)
    assert r.resp == AxiResp.SLVERR, f"3-beat WRAP read: {r.resp!r}, want SLVERR"
    resp = await tb.axi.write(base, b"\x99" * (3 * ln), burst=AxiBurstType.WRAP)
    assert resp.resp == AxiResp.SLVERR, f"3-beat WRAP write: {resp.resp!r}, want SLVERR"
    await tb.check_read(base, 8 * ln)
    await tb.finish()


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_long_response_stall(dut) -> None:
    """R and B held off for hundreds of cycles with many requests queued: nothing is lost,
    nothing is reordered within an ID, and traffic resumes when the master accepts again."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    base = 64 * ln
    await tb.write(base, tb.rng.randbytes(32 * ln))
    r_chan, b_chan = tb.axi.read_if.r_channel, tb.axi.write_if.b_channel
    r_chan.set_pause_generator(itertools.repeat(1))
    b_chan.set_pause_generator(itertools.repeat(1))
    reads = [cocotb.start_soon(tb.axi.read(base + i * ln, ln, arid=i % 3)) for i in range(32)]
    data = [tb.rng.randbytes(ln) for _ in range(8)]
    writes = [cocotb.start_soon(tb.axi.write(base + (40 + i) * ln, data[i], awid=i % 2))
              for i in range(8)]
    await ClockCycles(dut.clk, 600)
    assert not any(r.done() for r in reads + writes), "a response completed while stalled"
    resume(r_chan)
    resume(b_chan)
    for i, r in enumerate(reads):
        res = await r
        assert res.data == tb.expected(base + i * ln, ln), f"read {i} wrong after the stall"
    for i, w in enumerate(writes):
        assert (await w).resp == AxiResp.OKAY, f"write {i} failed after the stall"
        tb.store(base + (40 + i) * ln, data[i])
    await tb.check_read(base, 48 * ln)
    await tb.finish()


@cocotb.test(timeout_time=1000, timeout_unit="us")
async def test_refresh_during_traffic(dut) -> None:
    """Refresh is issued on schedule while traffic flows (the monitor checks tREFI, tRFC and
    that all banks are closed), and the data survives."""
    tb = TB(dut)
    await tb.reset()
    t = tb.timing
    budget = (tb.params["REF_POSTPONE_MAX"] + 2) * t.REFI + 200
    start = int(dut.trace_cycle.value)
    span = 32 * 1024
    while int(dut.trace_cycle.value) - start < budget:
        await cocotb.triggers.gather(*(cocotb.start_soon(tb.worker(w * span, span, 4, 4 * tb.line))
                                       for w in range(2)))
    await tb.finish()
    assert tb.stat("refresh") >= 1, "no REF issued"
    assert tb.stat("refresh") == tb.checker.counts["REF"], "stat_refresh disagrees with trace"
    assert tb.stat("ref_stall") > 0, "refresh never landed while requests were waiting"
    await tb.check_read(0, 2 * span)


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_sequential_row_hits(dut) -> None:
    """A sequential stream is served mostly from open rows and counters add up."""
    tb = TB(dut)
    await tb.reset()
    n = 64 * tb.line
    await tb.write(0, tb.rng.randbytes(n))
    before = {k: tb.stat(k) for k in ("rd", "row_hit", "row_miss", "row_conflict")}
    await tb.check_read(0, n)
    after = {k: tb.stat(k) for k in before}
    reads = after["rd"] - before["rd"]
    hits = after["row_hit"] - before["row_hit"]
    assert reads == n // tb.line, f"stat_rd counted {reads} bursts, expected {n // tb.line}"
    assert hits >= reads - 8, f"sequential read: {hits} row hits of {reads}"
    await tb.finish()


@cocotb.test(timeout_time=2000, timeout_unit="us")
@cocotb.parametrize(backpressure=[False, True])
async def test_mixed_queued_writes(dut, backpressure: bool) -> None:
    """Random reads and writes (lengths, offsets, sizes, IDs) over a few lines while a stream
    of reads elsewhere keeps the write queue from draining: reads of lines whose writes are
    still queued, beats merging into queued lines, partial and narrow writes; every byte
    checked, every DRAM command timed."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    far = tb.mem_size // 2
    far_span = min(tb.mem_size // 4, 64 * ln)
    await tb.write(far, tb.rng.randbytes(far_span))
    tb.set_backpressure(backpressure)
    stop = Event()
    seen = {"rd_from_wq": 0, "w_merge": 0}
    probe = cocotb.start_soon(tb.count(tuple(seen), seen, stop))
    readers = [cocotb.start_soon(tb.reader(far, far_span, stop, 3)) for _ in range(2)]
    span = 32 * ln
    workers = [cocotb.start_soon(tb.worker(w * 4 * span, span, 16 * _scale(), 4 * ln,
                                                 read_back=0.5))
               for w in range(3)]
    await cocotb.triggers.gather(*workers)
    stop.set()
    reads = await cocotb.triggers.gather(*readers)
    await probe
    for w in range(3):
        await tb.check_read(w * 4 * span, span)
    await tb.finish()
    assert sum(reads) > 0, "the background readers never read"
    assert seen["rd_from_wq"] > 0, "no read found its line's write still queued"
    assert seen["w_merge"] > 0, "no write beat merged into a queued line"
    issued = tb.checker.counts
    assert issued["WR"] == tb.stat("wr") and issued["RD"] == tb.stat("rd"), (
        f"trace {issued} disagrees with stat_rd/stat_wr")


@cocotb.test(timeout_time=400, timeout_unit="us")
async def test_reset_with_queued_writes(dut) -> None:
    """Writes acknowledged (their B sent) but still in the write queue when reset comes reach
    the storage: the controller flushes them, one line per cycle, during and after reset, and
    takes no request until it has; a read right after reset returns their bytes."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    geom = dram.DramGeometry(tb.mem_size, ln, bool(tb.params["ADDR_HASH"]))
    # single-line writes to one bank, each in another row: every WR needs PRE and ACT first,
    # so the queue drains far slower than the writes arrive (their B comes when queued)
    lines, rows = [], set()
    bank = geom.decode(0)[:2]
    for a in range(0, tb.mem_size, ln):
        bg, ba, row, _ = geom.decode(a)
        if (bg, ba) == bank and row not in rows:
            rows.add(row)
            lines.append(a)
        if len(lines) == min(16, tb.params.get("WQ_DEPTH", 64)):
            break
    data = [tb.rng.randbytes(ln) for _ in lines]
    await cocotb.triggers.gather(*[cocotb.start_soon(tb.write(a, d))
                                   for a, d in zip(lines, data, strict=True)])
    queued = int(dut.wq_count.value)
    assert queued >= 2, f"only {queued} write(s) still queued at reset: the test checks nothing"
    # a one-cycle reset; the timing checker starts afresh after it (as after every reset)
    tb.monitor.stop()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 1)
    dut.rst.value = 0
    await FallingEdge(dut.clk)
    left = int(dut.wq_count.value)
    assert left >= 1, f"{queued} writes queued at reset, none left one cycle after it"
    assert int(dut.s_axi_arready.value) == 0 and int(dut.s_axi_awready.value) == 0, \
        f"{left} queued write(s) not yet flushed, but the controller takes requests"
    # (the trace shows the reset cycle until the next edge; the flush issues no command)
    tb.checker = Ddr4Checker(tb.timing, tb.params["REF_POSTPONE_MAX"])
    tb.monitor = Ddr4Monitor(dut, dut.clk, tb.checker).start()
    for a in lines:
        await tb.check_read(a, ln)
    assert int(dut.wq_count.value) == 0
    dut._log.info("%d of %d writes were still queued at reset, %d one cycle after it",
                  queued, len(lines), left)
    await tb.finish()


@cocotb.test(timeout_time=400, timeout_unit="us")
async def test_address_mapping(dut) -> None:
    """Every RD lands on the bank group, bank, row and column that pyhost.spec.dram's
    DramGeometry gives for its address (with or without ADDR_HASH, as the build has it)."""
    tb = TB(dut)
    await tb.reset()
    ln = tb.line
    geom = dram.DramGeometry(tb.mem_size, ln, bool(tb.params["ADDR_HASH"]))
    row = ln << (dram.BG_BITS + dram.COL_BITS + dram.BA_BITS)
    addrs = [0, ln, 2 * ln, 3 * ln, 4 * ln, 4 * ln * 128, 4 * ln * 128 * 3]
    addrs += [r * row + o for r in (1, 2, 3, 5, 6, 9, 12, 16, 31) for o in (0, 7 * ln)
              if r * row + o < tb.mem_size]
    addrs += [tb.rng.randrange(tb.mem_size // ln) * ln for _ in range(24)]
    log: list = []
    tb.monitor.log = log
    for a in addrs:
        log.clear()
        res = await tb.axi.read(a, ln)
        assert res.resp == AxiResp.OKAY
        rds = [c for c in log if c[1] == dram.CMD_RD]
        assert len(rds) == 1, f"read 0x{a:x}: {len(rds)} RD commands"
        bg, ba, r, col = geom.decode(a)
        assert rds[0][2:] == (bg, ba, r, col), (
            f"read 0x{a:x}: RD at bg {rds[0][2]} ba {rds[0][3]} row {rds[0][4]} col "
            f"{rds[0][5]}, the spec maps it to bg {bg} ba {ba} row {r} col {col}")
    await tb.finish()


def _saturate(tb: TB, cycles: int, copy: bool) -> Pattern:
    """Traffic that keeps the controller busy for ``cycles``: sequential reads, or a chunked
    copy (reads and writes, the write queue draining in batches; the copy runs over 8 chunks of
    64 lines, at most 4 KiB, so the measured copy after ``cycles`` is short)."""
    span = min(tb.mem_size // 4, 64 << 10)
    if copy:
        chunk = min(4096, 64 * tb.line)
        return Pattern("copy", 0.5, True, span=8 * chunk, copy_dst=tb.mem_size // 2,
                       chunk=chunk, in_flight=4, warmup=cycles)
    return Pattern("reads", 1.0, True, span=span, warmup=1, cycles=cycles)


@cocotb.test(timeout_time=4000, timeout_unit="us")
async def test_refresh_idle_then_saturate(dut) -> None:
    """Idle until the first REF (paid as soon as it is due), then saturating reads: refresh is
    postponed, but the next REF comes at most (REF_POSTPONE_MAX + 1) x tREFI after the idle
    one, and so on (the checker measures every REF-to-REF distance)."""
    tb = TB(dut, master=False)
    await tb.reset()
    t = tb.timing
    await tb.wait_cycles(t.REFI + t.RFC)
    assert tb.stat("refresh") == 1, f"idle controller: {tb.stat('refresh')} REFs after one tREFI"
    ck = tb.checker
    idle_ref = ck.prev_ref
    await tb.traffic.run(
        _saturate(tb, ck.ref_gap_limit + 2 * t.REFI, copy=False))
    await tb.finish()
    assert ck.refs >= 3, f"only {ck.refs} REFs"
    assert ck.max_ref_gap <= ck.ref_gap_limit
    assert ck.max_ref_gap > ck.ref_gap_limit - t.REFI, (
        f"REF-to-REF at most {ck.max_ref_gap} cycles: refresh was not postponed under load")
    assert idle_ref < t.REFI + 2 * t.RFC


@cocotb.test(timeout_time=4000, timeout_unit="us")
async def test_refresh_saturated_from_reset(dut) -> None:
    """Saturating reads and writes from reset on: the first REF comes at most
    (REF_POSTPONE_MAX + 1) x tREFI after reset, each later one at most that after the one
    before, and the refresh debt stays within the limit."""
    tb = TB(dut, master=False)
    await tb.reset()
    t = tb.timing
    ck = tb.checker
    st = await tb.traffic.run(
        _saturate(tb, ck.ref_gap_limit + 2 * t.REFI, copy=True))
    await tb.finish()
    assert st.read_beats and st.write_beats, "the copy did not run"
    assert ck.refs >= 3, f"only {ck.refs} REFs"
    assert ck.max_ref_gap > ck.ref_gap_limit - t.REFI, (
        f"REF-to-REF at most {ck.max_ref_gap} cycles: refresh was not postponed under load")

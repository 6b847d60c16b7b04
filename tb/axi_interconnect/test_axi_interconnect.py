"""cocotb bench of axi_interconnect: cocotbext-axi masters share one AxiRam through the DUT.

A bus monitor checks the interconnect's rules on every clock edge (round-robin fairness, one grant
per free cycle, ID widening, write data order, response routing, stable outputs) while the tests
move data; the tests check the data, the IDs and that every master was served.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import Counter, deque
from collections.abc import Iterator

import cocotb
from cocotb.clock import Clock
from cocotb.handle import HierarchyObject, LogicObject
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiRam, AxiResp

CLK_NS = 4
RAM_SIZE = 2**16
REGION = 2**14  # bytes of the RAM owned by each master in the data tests
STALL_LIMIT = 1000  # cycles with requests pending but no handshake anywhere: a deadlock


class MonitorError(AssertionError):
    """The bus monitor saw the interconnect break one of its rules."""


def _bit(h: LogicObject) -> int:
    v = h.value
    if not v.is_resolvable:
        raise MonitorError(f"{h._name} is {v} after reset, expected 0 or 1")
    return int(v)


def _int(h: LogicObject) -> int:
    v = h.value
    return int(v) if v.is_resolvable else -1  # -1 never equals a real value


def _diff(got: bytes, exp: bytes) -> str:
    """Where two byte strings first differ, for assertion messages."""
    if len(got) != len(exp):
        return f"got {len(got)} bytes, expected {len(exp)}"
    k = next(i for i in range(len(exp)) if got[i] != exp[i])
    return (f"first difference at byte {k} of {len(exp)}: got {got[k:k + 8].hex()}, "
            f"expected {exp[k:k + 8].hex()}")


class _AddrChannel:
    """AR or AW on every master port and on the slave port, with the monitor's state."""

    FIELDS = ("id", "addr", "len", "size", "burst")

    def __init__(self, dut: HierarchyObject, ch: str, n: int) -> None:
        self.name = ch.upper()
        self.ch = ch
        self.s_valid = [getattr(dut, f"s{i:02d}_axi_{ch}valid") for i in range(n)]
        self.s_ready = [getattr(dut, f"s{i:02d}_axi_{ch}ready") for i in range(n)]
        self.s_fields = [[getattr(dut, f"s{i:02d}_axi_{ch}{f}") for f in self.FIELDS]
                         for i in range(n)]
        self.m_valid = getattr(dut, f"m_axi_{ch}valid")
        self.m_ready = getattr(dut, f"m_axi_{ch}ready")
        self.m_fields = [getattr(dut, f"m_axi_{ch}{f}") for f in self.FIELDS]
        self.reset(n)

    def reset(self, n: int) -> None:
        self.pending: deque[tuple[int, ...]] = deque()  # granted, not yet on the slave port
        self.wait = [0] * n          # grants to others since this master began to wait
        self.max_wait = 0
        self.grants = [0] * n
        self.order: list[int] = []   # master index of every grant, in order
        self.req_ids = [Counter() for _ in range(n)]     # IDs of granted requests per master
        self.outstanding = [Counter() for _ in range(n)]  # of those, not yet answered
        self.slave_ids: Counter[int] = Counter()          # IDs seen on the slave port
        self.stalled: tuple[int, ...] | None = None


class _RespChannel:
    """R or B on every master port and on the slave port."""

    def __init__(self, dut: HierarchyObject, ch: str, n: int) -> None:
        self.name = ch.upper()
        self.ch = ch
        self.s_valid = [getattr(dut, f"s{i:02d}_axi_{ch}valid") for i in range(n)]
        self.s_ready = [getattr(dut, f"s{i:02d}_axi_{ch}ready") for i in range(n)]
        self.s_id = [getattr(dut, f"s{i:02d}_axi_{ch}id") for i in range(n)]
        self.s_resp = [getattr(dut, f"s{i:02d}_axi_{ch}resp") for i in range(n)]
        self.s_last = [getattr(dut, f"s{i:02d}_axi_rlast") if ch == "r" else None
                       for i in range(n)]
        self.m_valid = getattr(dut, f"m_axi_{ch}valid")
        self.m_ready = getattr(dut, f"m_axi_{ch}ready")
        self.m_id = getattr(dut, f"m_axi_{ch}id")
        self.m_resp = getattr(dut, f"m_axi_{ch}resp")
        self.m_last = dut.m_axi_rlast if ch == "r" else None
        self.reset(n)

    def reset(self, n: int) -> None:
        self.resp_ids = [Counter() for _ in range(n)]  # completed bursts per ID per master


class BusMonitor:
    """Checks every cycle's handshakes on all ports against the interconnect's rules.

    A violation is logged, kept in ``errors`` and raised, which fails the running test.
    """

    def __init__(self, dut: HierarchyObject, n: int, s_id_width: int, w_fifo_depth: int) -> None:
        self.dut = dut
        self.n = n
        self.s_id_width = s_id_width
        self.w_fifo_depth = w_fifo_depth
        self.log = logging.getLogger("cocotb.tb.monitor")
        self.errors: list[str] = []
        self.ar = _AddrChannel(dut, "ar", n)
        self.aw = _AddrChannel(dut, "aw", n)
        self.r = _RespChannel(dut, "r", n)
        self.b = _RespChannel(dut, "b", n)
        self.w_s_valid = [getattr(dut, f"s{i:02d}_axi_wvalid") for i in range(n)]
        self.w_s_ready = [getattr(dut, f"s{i:02d}_axi_wready") for i in range(n)]
        self.w_s_fields = [[getattr(dut, f"s{i:02d}_axi_w{f}") for f in ("data", "strb", "last")]
                           for i in range(n)]
        self.w_m_fields = [getattr(dut, f"m_axi_w{f}") for f in ("data", "strb", "last")]
        self.reset()
        cocotb.start_soon(self._run())

    def reset(self) -> None:
        for ch in (self.ar, self.aw, self.r, self.b):
            ch.reset(self.n)
        self.w_order: deque[list[int]] = deque()  # [master, beats left] per granted AW
        self.w_max_pending = 0
        self.w_stalled: tuple[int, ...] | None = None
        self.waiting: Counter[str] = Counter()  # cycles each VALID has waited for READY
        self.stall_cycles = 0
        self._pending = self._progress = False

    def _watch(self, port: str, valid: int, ready: int) -> None:
        """Notes a VALID/READY pair for the deadlock watchdog."""
        if valid and not ready:
            self.waiting[port] += 1
            self._pending = True
        else:
            self.waiting[port] = 0
            self._progress |= bool(valid)

    def _check_progress(self) -> None:
        """Deadlock watchdog: while any VALID waits, some handshake happens within STALL_LIMIT."""
        if self._pending and not self._progress:
            self.stall_cycles += 1
            if self.stall_cycles > STALL_LIMIT:
                waiting = {p: c for p, c in self.waiting.items() if c}
                self._fail(f"no handshake on any port for {self.stall_cycles} cycles while VALID "
                           f"waits (cycles waited per port: {waiting}), expected progress "
                           f"within {STALL_LIMIT}")
        else:
            self.stall_cycles = 0
        self._pending = self._progress = False

    def _fail(self, msg: str) -> None:
        self.errors.append(msg)
        self.log.error("%s", msg)
        raise MonitorError(msg)

    async def _run(self) -> None:
        clk = self.dut.clk
        while True:
            await RisingEdge(clk)
            if _int(self.dut.rst) != 0:
                self.reset()
                continue
            self._addr_cycle(self.ar)
            self._addr_cycle(self.aw)
            self._w_cycle()
            self._resp_cycle(self.r, self.ar)
            self._resp_cycle(self.b, self.aw)
            self._check_progress()

    def _addr_cycle(self, ch: _AddrChannel) -> None:
        n = self.n
        valid = [_bit(h) for h in ch.s_valid]
        ready = [_bit(h) for h in ch.s_ready]
        m_valid, m_ready = _bit(ch.m_valid), _bit(ch.m_ready)
        for i in range(n):
            self._watch(f"master {i} {ch.name}", valid[i], ready[i])
        self._watch(f"slave {ch.name}", m_valid, m_ready)
        granted = [i for i in range(n) if valid[i] and ready[i]]
        if len(granted) > 1:
            self._fail(f"{ch.name}: {len(granted)} grants in one cycle (masters {granted}), "
                       f"expected at most 1")
        # Work conserving: a request and a free output stage (and, for AW, room to route its
        # data) must produce a grant in the same cycle.
        room = ch.ch == "ar" or len(self.w_order) < self.w_fifo_depth
        if any(valid) and (not m_valid or m_ready) and room and not granted:
            self._fail(f"{ch.name}: masters {[i for i in range(n) if valid[i]]} request and the "
                       f"slave port is free, but no grant: got 0 grants, expected 1")
        for i in granted:
            fields = tuple(_int(h) for h in ch.s_fields[i])
            ch.pending.append((i, *fields))
            ch.grants[i] += 1
            ch.order.append(i)
            ch.req_ids[i][fields[0]] += 1
            ch.outstanding[i][fields[0]] += 1
            if ch.ch == "aw":
                self.w_order.append([i, fields[2] + 1])
                self.w_max_pending = max(self.w_max_pending, len(self.w_order))
        # Round robin: while a master holds VALID it sees at most n-1 grants to others.
        for i in range(n):
            if valid[i] and not ready[i]:
                ch.wait[i] += len(granted)
                ch.max_wait = max(ch.max_wait, ch.wait[i])
                if ch.wait[i] > n - 1:
                    self._fail(f"{ch.name}: master {i} has waited through {ch.wait[i]} grants to "
                               f"others (order {ch.order[-ch.wait[i]:]}), expected at most {n - 1}")
            else:
                ch.wait[i] = 0
        # The slave port carries the grants in order, with {master index, ID} as its ID.
        m_fields = tuple(_int(h) for h in ch.m_fields)
        if m_valid and m_ready:
            if not ch.pending:
                self._fail(f"{ch.name}: slave port handshake (id, addr, len, size, burst) = "
                           f"{m_fields} but no granted request is pending")
            i, sid, *rest = ch.pending.popleft()
            exp = ((i << self.s_id_width) | sid, *rest)
            if m_fields != exp:
                self._fail(f"{ch.name}: slave port (id, addr, len, size, burst) = {m_fields}, "
                           f"expected {exp} for master {i}'s request")
            ch.slave_ids[m_fields[0]] += 1
        # VALID and payload hold while the slave holds READY low.
        now = (m_valid, *m_fields)
        if ch.stalled is not None and now != ch.stalled:
            self._fail(f"{ch.name}: slave port (valid, id, addr, len, size, burst) changed "
                       f"while stalled: got {now}, expected {ch.stalled}")
        ch.stalled = now if m_valid and not m_ready else None

    def _w_cycle(self) -> None:
        valid = [_bit(h) for h in self.w_s_valid]
        ready = [_bit(h) for h in self.w_s_ready]
        m_valid, m_ready = _bit(self.dut.m_axi_wvalid), _bit(self.dut.m_axi_wready)
        for i in range(self.n):
            self._watch(f"master {i} W", valid[i], ready[i])
        self._watch("slave W", m_valid, m_ready)
        s_hs = [i for i in range(self.n) if valid[i] and ready[i]]
        m_hs = bool(m_valid and m_ready)
        if len(s_hs) > 1 or m_hs != bool(s_hs):
            self._fail(f"W: master-port beats from {s_hs} and slave-port beat {int(m_hs)}, "
                       f"expected each slave-port beat to be exactly one master's beat")
        m_fields = tuple(_int(h) for h in self.w_m_fields)
        if m_hs:
            i = s_hs[0]
            if not self.w_order:
                self._fail(f"W: beat from master {i}, expected none (no granted AW awaits data)")
            head = self.w_order[0]
            if i != head[0]:
                self._fail(f"W: beat from master {i}, expected master {head[0]} (the oldest "
                           f"granted AW whose data is incomplete; pending {list(self.w_order)})")
            s_fields = tuple(_int(h) for h in self.w_s_fields[i])
            if m_fields != s_fields:
                self._fail(f"W: slave port (data, strb, last) = {m_fields}, expected master "
                           f"{i}'s {s_fields}")
            if m_fields[2] != (head[1] == 1):
                self._fail(f"W: wlast={m_fields[2]} with {head[1]} beats left in master {i}'s "
                           f"burst, expected wlast={int(head[1] == 1)}")
            head[1] -= 1
            if head[1] == 0:
                self.w_order.popleft()
        now = (m_valid, *m_fields)
        if self.w_stalled is not None and now != self.w_stalled:
            self._fail("W: slave port (valid, data, strb, last) changed while stalled")
        self.w_stalled = now if m_valid and not m_ready else None

    def _resp_cycle(self, ch: _RespChannel, req: _AddrChannel) -> None:
        n = self.n
        valid = [_bit(h) for h in ch.s_valid]
        ready = [_bit(h) for h in ch.s_ready]
        m_valid, m_ready = _bit(ch.m_valid), _bit(ch.m_ready)
        self._watch(f"slave {ch.name}", m_valid, m_ready)
        for i in range(n):
            self._watch(f"master {i} {ch.name}", valid[i], ready[i])
        if m_valid:
            mid = _int(ch.m_id)
            i = mid >> self.s_id_width
            if not 0 <= i < n:
                self._fail(f"{ch.name}: slave-port response ID {mid:#x} names master {i}, "
                           f"expected 0..{n - 1}")
            exp_valid = [int(j == i) for j in range(n)]
            if valid != exp_valid:
                self._fail(f"{ch.name}: slave-port response ID {mid:#x} (master {i}) is valid on "
                           f"master ports {valid}, expected {exp_valid}")
            if m_ready != ready[i]:
                self._fail(f"{ch.name}: slave-port ready {m_ready}, expected master {i}'s "
                           f"ready {ready[i]}")
            got = (_int(ch.s_id[i]), _int(ch.s_resp[i]),
                   _int(ch.s_last[i]) if ch.s_last[i] is not None else 1)
            exp = (mid & ((1 << self.s_id_width) - 1), _int(ch.m_resp),
                   _int(ch.m_last) if ch.m_last is not None else 1)
            if got != exp:
                self._fail(f"{ch.name}: master {i} sees (id, resp, last) = {got}, expected {exp}")
            if ready[i]:
                out = req.outstanding[i]
                if out[got[0]] <= 0:
                    self._fail(f"{ch.name}: master {i} got a response with ID {got[0]:#x}, "
                               f"expected one of its outstanding IDs {sorted(+out)}")
                if got[2]:
                    out[got[0]] -= 1
                    ch.resp_ids[i][got[0]] += 1
        elif any(valid):
            self._fail(f"{ch.name}: master ports {valid} valid without a slave-port response, "
                       f"expected none")

    def check_quiet(self) -> None:
        """Every request was carried, its data written and its response returned."""
        assert not self.errors, f"monitor errors: {self.errors}"
        for ch in (self.ar, self.aw):
            assert not ch.pending, f"{ch.name}: {len(ch.pending)} grants never reached the " \
                f"slave port, expected 0: {list(ch.pending)}"
            left = [+c for c in ch.outstanding]
            assert not any(left), f"{ch.name}: unanswered requests per master {left}, expected none"
        assert not self.w_order, f"W: AWs still waiting for data {list(self.w_order)}, " \
            f"expected none"


class TB:
    """Clock, reset, one AxiMaster per master port, an AxiRam on the slave port, the monitor."""

    def __init__(self, dut: HierarchyObject) -> None:
        self.dut = dut
        self.log = logging.getLogger("cocotb.tb")
        self.n = next(i for i in itertools.count() if not hasattr(dut, f"s{i:02d}_axi_awvalid"))
        self.s_id_width = len(dut.s00_axi_arid)
        Clock(dut.clk, CLK_NS, unit="ns").start()
        self.masters = [AxiMaster(AxiBus.from_prefix(dut, f"s{i:02d}_axi"), dut.clk, dut.rst)
                        for i in range(self.n)]
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=RAM_SIZE)
        for bfm in (*self.masters, self.ram):
            bfm.write_if.log.setLevel(logging.WARNING)  # per-transfer logs would dominate run time
            bfm.read_if.log.setLevel(logging.WARNING)
        # the W routing FIFO depth is read from the model, never copied from the build parameters
        self.monitor = BusMonitor(dut, self.n, self.s_id_width, int(dut.W_FIFO_DEPTH.value))
        assert self.n * REGION <= RAM_SIZE, f"{self.n} regions of {REGION} exceed {RAM_SIZE}"

    def set_idle(self, rng: random.Random | None) -> None:
        """Sources insert idle cycles: masters' AW, W, AR and the slave's R, B."""
        chans = [c for m in self.masters for c in (m.write_if.aw_channel, m.write_if.w_channel,
                                                   m.read_if.ar_channel)]
        chans += [self.ram.read_if.r_channel, self.ram.write_if.b_channel]
        for c in chans:
            c.set_pause_generator(_pattern(rng) if rng else None)

    def set_backpressure(self, rng: random.Random | None) -> None:
        """Sinks hold READY low at times: the slave's AW, W, AR and masters' R, B."""
        chans = [self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                 self.ram.read_if.ar_channel]
        chans += [c for m in self.masters for c in (m.read_if.r_channel, m.write_if.b_channel)]
        for c in chans:
            c.set_pause_generator(_pattern(rng) if rng else None)

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def finish(self) -> None:
        for m in self.masters:
            await m.wait()
        await ClockCycles(self.dut.clk, 4)
        self.monitor.check_quiet()


def _pattern(rng: random.Random) -> Iterator[int]:
    """A repeating pause pattern of random period and density, different on every channel."""
    period = rng.randint(3, 11)
    ones = rng.randint(1, period - 1)
    bits = [1] * ones + [0] * (period - ones)
    rng.shuffle(bits)
    return itertools.cycle(bits)


def _rng(salt: int) -> random.Random:
    return random.Random(cocotb.RANDOM_SEED * 1000 + salt)


async def _region_worker(tb: TB, i: int, ops: int, max_len: int) -> bytearray:
    """Master i writes and reads back random data in its own region; returns the region model."""
    rng = _rng(i)
    m = tb.masters[i]
    base = i * REGION
    model = bytearray(REGION)
    for _ in range(ops):
        length = rng.randint(1, max_len)
        offset = rng.randrange(0, REGION - length + 1)
        data = rng.randbytes(length)
        wr = await m.write(base + offset, data)
        assert wr.resp == AxiResp.OKAY, f"master {i}: write at {base + offset:#x} resp " \
            f"{wr.resp!r}, expected OKAY"
        model[offset:offset + length] = data
        # read back a window around the write, which also covers earlier writes
        lo = max(0, offset - rng.randint(0, 64))
        hi = min(REGION, offset + length + rng.randint(0, 64))
        rd = await m.read(base + lo, hi - lo)
        assert rd.resp == AxiResp.OKAY, f"master {i}: read at {base + lo:#x} resp " \
            f"{rd.resp!r}, expected OKAY"
        assert rd.data == model[lo:hi], f"master {i}: read {hi - lo} bytes at " \
            f"{base + lo:#x}: {_diff(rd.data, bytes(model[lo:hi]))}"
    return model


async def _data_test(dut: HierarchyObject, idle: bool, backpressure: bool, ops: int) -> None:
    tb = TB(dut)
    tb.set_idle(_rng(100) if idle else None)
    tb.set_backpressure(_rng(200) if backpressure else None)
    await tb.reset()
    workers = [cocotb.start_soon(_region_worker(tb, i, ops, 1024)) for i in range(tb.n)]
    models = [await w for w in workers]
    await tb.finish()
    for i, model in enumerate(models):
        ram = tb.ram.read(i * REGION, REGION)
        assert ram == model, f"master {i}: RAM region at {i * REGION:#x} {_diff(ram, model)}"
    tb.log.info("grants AR %s AW %s, max W routing FIFO use %d",
                tb.monitor.ar.grants, tb.monitor.aw.grants, tb.monitor.w_max_pending)


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(idle=[False, True], backpressure=[False, True])
async def test_data_integrity(dut: HierarchyObject, idle: bool, backpressure: bool) -> None:
    """Every master writes and reads back random data of random lengths and offsets in its own
    region, all masters at once; reads and the RAM's contents match the expected bytes. Crossed
    with idle cycles on every source and READY held low at times on every sink."""
    await _data_test(dut, idle=idle, backpressure=backpressure, ops=24)


@cocotb.test(timeout_time=500, timeout_unit="us")
async def test_every_master_served(dut: HierarchyObject) -> None:
    """All masters keep many reads and writes outstanding at once. Every master completes all
    of them, each got its share of grants, and the monitor fails if any master waits through
    more than S_COUNT-1 grants to others (round robin, no starvation)."""
    tb = TB(dut)
    await tb.reset()
    slot = 512  # one burst per operation: slots never cross a 4 KB boundary
    ops = 16
    reads: list[tuple[int, int, bytes, Event]] = []
    writes: list[tuple[int, int, bytes, Event]] = []
    rng = _rng(300)
    # the first half of each region holds read data, the second half takes writes
    for i in range(tb.n):
        base = i * REGION
        tb.ram.write(base, rng.randbytes(REGION // 2))
    for i, m in enumerate(tb.masters):
        base = i * REGION
        for k in range(ops):
            length = rng.randint(1, slot)
            off = k * slot + rng.randrange(0, slot - length + 1)
            data = rng.randbytes(length)
            writes.append((i, base + REGION // 2 + off, data,
                           m.init_write(base + REGION // 2 + off, data)))
            exp = tb.ram.read(base + off, length)
            reads.append((i, base + off, exp, m.init_read(base + off, length)))
    for i, addr, exp, ev in reads:
        await ev.wait()
        assert ev.data.resp == AxiResp.OKAY, f"master {i}: read at {addr:#x} resp " \
            f"{ev.data.resp!r}, expected OKAY"
        assert ev.data.data == exp, f"master {i}: read at {addr:#x}: {_diff(ev.data.data, exp)}"
    for i, addr, data, ev in writes:
        await ev.wait()
        assert ev.data.resp == AxiResp.OKAY, f"master {i}: write at {addr:#x} resp " \
            f"{ev.data.resp!r}, expected OKAY"
        got = tb.ram.read(addr, len(data))
        assert got == data, f"master {i}: RAM after write at {addr:#x}: {_diff(got, data)}"
    await tb.finish()
    mon = tb.monitor
    for ch in (mon.ar, mon.aw):
        assert ch.grants == [ops] * tb.n, f"{ch.name} grants per master {ch.grants}, " \
            f"expected {[ops] * tb.n}"
        # the fairness bound was reached, so the masters really contended
        assert ch.max_wait == tb.n - 1, f"{ch.name}: longest wait {ch.max_wait} grants, " \
            f"expected {tb.n - 1} under full contention"
        tb.log.info("%s grant order %s", ch.name, "".join(map(str, ch.order)))


@cocotb.test(timeout_time=500, timeout_unit="us")
async def test_ids_routed(dut: HierarchyObject) -> None:
    """All masters use the same explicit IDs at once. Each response reaches the master that
    asked, with its own ID, and the slave port saw {master index, ID}."""
    tb = TB(dut)
    await tb.reset()
    ids = (0, 0x5A % (1 << tb.s_id_width), (1 << tb.s_id_width) - 1)
    rng = _rng(400)
    ops = 12
    expect_req: list[Counter[int]] = [Counter() for _ in range(tb.n)]
    for i in range(tb.n):
        tb.ram.write(i * REGION + REGION // 2, rng.randbytes(REGION // 2))
    jobs = []
    for i, m in enumerate(tb.masters):
        base = i * REGION
        for k in range(ops):
            tid = ids[(k + i) % len(ids)]
            expect_req[i][tid] += 1
            addr = base + k * 256
            data = rng.randbytes(rng.randint(1, 256))
            jobs.append((i, tid, addr, data, m.init_write(addr, data, awid=tid),
                         m.init_read(addr + REGION // 2, len(data), arid=tid)))
    for i, tid, addr, data, wev, rev in jobs:
        await wev.wait()
        await rev.wait()
        assert wev.data.resp == AxiResp.OKAY, f"master {i} id {tid:#x}: write resp " \
            f"{wev.data.resp!r}, expected OKAY"
        got = tb.ram.read(addr, len(data))
        assert got == data, f"master {i} id {tid:#x}: RAM at {addr:#x}: {_diff(got, data)}"
        exp = tb.ram.read(addr + REGION // 2, len(data))
        assert rev.data.data == exp, f"master {i} id {tid:#x}: read: {_diff(rev.data.data, exp)}"
    await tb.finish()
    mon = tb.monitor
    for ch, resp in ((mon.ar, mon.r), (mon.aw, mon.b)):
        exp_slave: Counter[int] = Counter()
        for i in range(tb.n):
            assert ch.req_ids[i] == expect_req[i], f"{ch.name}: master {i} issued IDs " \
                f"{dict(ch.req_ids[i])}, expected {dict(expect_req[i])}"
            assert resp.resp_ids[i] == expect_req[i], f"{resp.name}: master {i} got responses " \
                f"for IDs {dict(resp.resp_ids[i])}, expected {dict(expect_req[i])}"
            for tid, cnt in expect_req[i].items():
                exp_slave[(i << tb.s_id_width) | tid] += cnt
        assert ch.slave_ids == exp_slave, f"{ch.name}: slave-port IDs {dict(ch.slave_ids)}, " \
            f"expected {dict(exp_slave)}"

"""The host-memory model behind the card's host port: an AXI4 slave serving a HostMemory.

It stands where the PCIe root complex and host DRAM would be: reads come back after a configurable
latency and, when asked, out of order across IDs (as PCIe completions of different tags may);
writes are posted (the B response follows the data at once, as a PCIe memory write needs no
completion). While nothing is in flight and no VALID is up, the model sleeps until a master
raises one (no Python runs per clock cycle then); its cycle count follows simulated time, so the
behaviour is the same cycle for cycle as if it had ticked. Back-pressure and idle cycles on
every channel, and SLVERR on injected address ranges, exercise the engine. Under Verilator, a
configuration without jitter, reordering or pause patterns is served by the model's C++ main
instead (tb/common/cosim_main.cpp, the same behaviour cycle for cycle with no Python per beat;
COSIM_NATIVE_HOST_MEMORY=0 keeps the Python model).
:class:`HostPortMonitor` checks every burst against the requester rules: at most MRRS bytes per
read, at most MPS bytes per write, never across 4 KiB.
"""

from __future__ import annotations

import ctypes
import os
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import Event, First, RisingEdge
from cocotb.utils import get_sim_time

from pyhost.backend import HostMemory

PAGE = 4096
#: Set to 0 to serve host memory from Python even where the model has the C++ slave.
NATIVE_ENV = "COSIM_NATIVE_HOST_MEMORY"


def _native_host_memory():
    """The model's C++ host-memory slave (tb/common/cosim_main.cpp), when this simulator
    process has it and COSIM_NATIVE_HOST_MEMORY is not 0; else None."""
    if os.environ.get(NATIVE_ENV, "1") in ("0", ""):
        return None
    try:
        lib = ctypes.CDLL(None)
        _ = lib.cosim_axi_host_open
    except (AttributeError, OSError):
        return None
    u64 = ctypes.c_uint64
    lib.cosim_axi_host_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                        u64, u64, u64]
    lib.cosim_axi_host_open.restype = ctypes.c_int
    lib.cosim_axi_host_close.argtypes = [ctypes.c_int]
    lib.cosim_axi_host_close.restype = None
    lib.cosim_axi_host_error.argtypes = [ctypes.c_int, u64, u64]
    lib.cosim_axi_host_error.restype = None
    lib.cosim_axi_host_stats.argtypes = [ctypes.c_int, ctypes.POINTER(u64)]
    lib.cosim_axi_host_stats.restype = None
    lib.cosim_axi_host_bursts.argtypes = [ctypes.c_int, ctypes.POINTER(u64), ctypes.c_int]
    lib.cosim_axi_host_bursts.restype = ctypes.c_int
    lib.cosim_axi_host_log.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.cosim_axi_host_log.restype = None
    return lib


def _data(sig, strb: int, lanes: int) -> tuple[int, bool]:
    """Write data as an integer, X/Z taken as 0 (Icarus: lanes the engine never filled); the
    flag is False when a byte whose strobe is set is not fully defined."""
    v = sig.value
    try:
        return int(v), True
    except ValueError:
        bits = v.binstr[::-1]                       # bit i at index i
        ok = all(c in "01" for i in range(lanes) if strb >> i & 1
                 for c in bits[8 * i:8 * i + 8])
        return v.resolve("zeros").to_unsigned(), ok


def _on(sig) -> int:
    """A control bit's value; X or Z (Icarus before reset) count as 0."""
    try:
        return int(sig.value)
    except ValueError:
        return 0


@dataclass
class _Read:
    rid: int
    addr: int
    beats: int
    ready_at: int
    seq: int = 0
    sent: int = 0


@dataclass
class HostMemoryConfig:
    """Behaviour of the host memory model."""

    read_latency: int = 20            # cycles from AR to the first R beat
    jitter: int = 0                   # extra random latency per read, 0..jitter cycles
    out_of_order: bool = False        # serve ready reads of different IDs in random order
    ar_pause: list[int] = field(default_factory=list)   # repeating pause patterns (1 = stall)
    r_pause: list[int] = field(default_factory=list)
    aw_pause: list[int] = field(default_factory=list)
    w_pause: list[int] = field(default_factory=list)
    seed: int = 1

    @property
    def deterministic(self) -> bool:
        """No random latency, no reordering, no pauses: what the C++ slave serves."""
        return not (self.jitter or self.out_of_order or self.ar_pause or self.r_pause
                    or self.aw_pause or self.w_pause)


class HostMemoryAxiSlave:
    """Serves ``<prefix>_*`` AXI4 master ports of ``dut`` from ``host``: from the model's C++
    main (:attr:`native`) for a deterministic configuration under Verilator, else from a
    coroutine. Both behave the same, cycle for cycle."""

    def __init__(self, dut, prefix: str, host: HostMemory, config: HostMemoryConfig | None = None
                 ) -> None:
        self.dut = dut
        self.clk = dut.clk
        self.host = host
        self.cfg = config or HostMemoryConfig()
        self.rng = random.Random(self.cfg.seed)
        self.s = {n: getattr(dut, f"{prefix}_{n}") for n in (
            "arid", "araddr", "arlen", "arvalid", "arready", "rid", "rdata", "rresp", "rlast",
            "rvalid", "rready", "awid", "awaddr", "awlen", "awvalid", "awready", "wdata", "wstrb",
            "wlast", "wvalid", "wready", "bid", "bresp", "bvalid", "bready")}
        self.line = len(self.s["wdata"]) // 8
        self.error_ranges: list[tuple[int, int]] = []
        self.cycle = 0
        self.reads_served = 0
        self.writes_served = 0
        self.max_reads_in_flight = 0
        self.reordered = 0            # reads completed before an older one
        self.undefined_writes = 0     # write beats with X/Z in a byte whose strobe is set
        self.listeners: list = []     # callables(kind, addr, beats, written) for monitors
        self._seq = 0                 # arrival order of reads
        #: the C++ slave's id (tb/common/cosim_main.cpp), or None: the Python coroutine
        self.native: int | None = None
        self._lib = _native_host_memory() if self.cfg.deterministic else None
        if self._lib is not None:
            nid = self._lib.cosim_axi_host_open(
                f"{dut._path}.{prefix}".encode(), self.clk._path.encode(),
                host.array.ctypes.data, host.base, host.size, self.cfg.read_latency)
            if nid >= 0:
                self.native = nid
                cocotb.start_soon(self._hold_native())
                return
        for n in ("arready", "rvalid", "awready", "wready", "bvalid"):
            self.s[n].value = 0
        cocotb.start_soon(self._run())

    # -- the C++ slave -------------------------------------------------------------------------
    async def _hold_native(self) -> None:
        # the slave serves until the test ends (its tasks are cancelled then)
        try:
            await Event().wait()
        finally:
            self.poll()
            self._lib.cosim_axi_host_close(self.native)

    def listen(self, fn) -> None:
        """Call ``fn(kind, addr, beats, written)`` for every burst taken ("read": written None;
        "write": (lowest byte, one past the highest, bytes) written, (-1, -1, 0) for none): as
        it happens in the Python model, at the next :meth:`poll` in the C++ one."""
        self.listeners.append(fn)
        if self.native is not None:
            self._lib.cosim_axi_host_log(self.native, 1)

    def poll(self) -> None:
        """Native: bring the counters up to date and hand the bursts taken since the last call
        to the listeners (the Python model does both as it goes)."""
        if self.native is None:
            return
        stats = (ctypes.c_uint64 * 4)()
        self._lib.cosim_axi_host_stats(self.native, stats)
        self.reads_served, self.writes_served, self.max_reads_in_flight, self.cycle = stats
        buf = (ctypes.c_uint64 * (6 * 256))()
        while n := self._lib.cosim_axi_host_bursts(self.native, buf, 256):
            for k in range(n):
                kind, addr, beats, lo, hi, nbytes = buf[6 * k:6 * k + 6]
                for fn in self.listeners:
                    if kind == 0:
                        fn("read", addr, beats, None)
                    else:
                        fn("write", addr, beats, (lo, hi, nbytes) if nbytes else (-1, -1, 0))

    # -- configuration ------------------------------------------------------------------------
    def inject_error(self, start: int, end: int) -> None:
        self.error_ranges.append((start, end))
        if self.native is not None and start < end:
            self._lib.cosim_axi_host_error(self.native, start, end)

    def clear_errors(self) -> None:
        self.error_ranges.clear()
        if self.native is not None:
            self._lib.cosim_axi_host_error(self.native, 0, 0)

    def _bad(self, addr: int, n: int) -> bool:
        return any(addr < e and addr + n > s for s, e in self.error_ranges)

    @staticmethod
    def _pause(pattern: list[int], cycle: int) -> bool:
        return bool(pattern) and bool(pattern[cycle % len(pattern)])

    # -- the model ----------------------------------------------------------------------------
    async def _run(self) -> None:
        s = self.s
        cfg = self.cfg
        lb = self.line
        reads: list[_Read] = []
        cur: _Read | None = None
        writes: deque[tuple[int, int, int]] = deque()     # (id, addr, beats) awaiting W
        w_beat = 0
        w_failed = False
        w_bytes = 0
        w_lo = w_hi = -1
        bq: deque[tuple[int, int]] = deque()               # (id, resp)
        b_out = False
        r_out = False
        period = 0
        last_edge = 0
        while True:
            if (period and not reads and cur is None and not writes and not bq and not b_out
                    and not _on(s["arvalid"]) and not _on(s["awvalid"])
                    and not _on(s["wvalid"])):
                await First(RisingEdge(s["arvalid"]), RisingEdge(s["awvalid"]),
                            RisingEdge(s["wvalid"]))
                # drive the ready lines the ticking model would have driven at the last edge
                j = self.cycle + int((get_sim_time("ps") - last_edge) // period)
                s["arready"].value = 0 if self._pause(cfg.ar_pause, j) else 1
                s["awready"].value = 0 if self._pause(cfg.aw_pause, j) else 1
            await RisingEdge(self.clk)
            now = get_sim_time("ps")
            if period == 0 and last_edge:
                period = now - last_edge
            self.cycle += max(1, round((now - last_edge) / period)) if period else 1
            last_edge = now
            c = self.cycle
            # ---- handshakes that happened at this edge
            if _on(s["arvalid"]) and _on(s["arready"]):
                addr = int(s["araddr"].value)
                beats = int(s["arlen"].value) + 1
                delay = cfg.read_latency + (self.rng.randint(0, cfg.jitter) if cfg.jitter else 0)
                self._seq += 1
                reads.append(_Read(int(s["arid"].value), addr, beats, c + delay, self._seq))
                for fn in self.listeners:
                    fn("read", addr, beats, None)
                self.max_reads_in_flight = max(self.max_reads_in_flight, len(reads))
            if r_out and _on(s["rready"]):
                cur.sent += 1
                r_out = False
                if cur.sent == cur.beats:
                    self.reads_served += 1
                    cur = None
            if _on(s["awvalid"]) and _on(s["awready"]):
                addr = int(s["awaddr"].value)
                beats = int(s["awlen"].value) + 1
                writes.append((int(s["awid"].value), addr, beats))
            if _on(s["wvalid"]) and _on(s["wready"]):
                wid, waddr, wbeats = writes[0]
                line_addr = (waddr // lb + w_beat) * lb
                strb = int(s["wstrb"].value)
                if strb:
                    value, defined = _data(s["wdata"], strb, lb)
                    if not defined:
                        self.undefined_writes += 1
                    data = value.to_bytes(lb, "little")
                    lanes = [i for i in range(lb) if strb >> i & 1]
                    lo, hi = lanes[0], lanes[-1] + 1
                    w_bytes += len(lanes)
                    w_lo = line_addr + lo if w_lo < 0 else w_lo
                    w_hi = line_addr + hi
                    if self._bad(line_addr + lo, hi - lo) or not self.host.contains(
                            line_addr + lo, hi - lo):
                        w_failed = True
                    elif hi - lo == len(lanes):
                        self.host.write(line_addr + lo, data[lo:hi])
                    else:
                        for i in lanes:
                            self.host.write(line_addr + i, data[i:i + 1])
                w_beat += 1
                if w_beat == wbeats:
                    for fn in self.listeners:
                        fn("write", waddr, wbeats, (w_lo, w_hi, w_bytes))
                    w_bytes = 0
                    w_lo = w_hi = -1
                    bq.append((wid, 2 if w_failed else 0))
                    writes.popleft()
                    w_beat = 0
                    w_failed = False
                    self.writes_served += 1
            if b_out and _on(s["bready"]):
                b_out = False
                bq.popleft()
            # ---- drive the next cycle
            s["arready"].value = 0 if self._pause(cfg.ar_pause, c) else 1
            s["awready"].value = 0 if self._pause(cfg.aw_pause, c) else 1
            s["wready"].value = 1 if writes and not self._pause(cfg.w_pause, c) else 0
            if not b_out and bq:
                s["bid"].value, s["bresp"].value = bq[0]
                b_out = True
            s["bvalid"].value = 1 if b_out else 0
            if cur is None:
                ready = [r for r in reads if r.ready_at <= c]
                if ready:
                    if cfg.out_of_order:
                        # any ready read whose ID has no older read pending (AXI: in order per
                        # ID); older by arrival, since jitter can make a younger read ready first
                        ok = [r for r in ready
                              if not any(o.rid == r.rid and o.seq < r.seq
                                         for o in reads if o is not r)]
                        cur = self.rng.choice(ok) if ok else None
                    else:
                        cur = reads[0] if reads[0].ready_at <= c else None
                    if cur is not None:
                        if cur is not reads[0]:
                            self.reordered += 1
                        reads.remove(cur)
            if cur is not None and not r_out and not self._pause(cfg.r_pause, c):
                line_addr = (cur.addr // lb + cur.sent) * lb
                first = cur.addr if cur.sent == 0 else line_addr
                n = line_addr + lb - first
                if self._bad(first, n) or not self.host.contains(first, n):
                    s["rdata"].value = 0
                    s["rresp"].value = 2
                else:
                    s["rdata"].value = int.from_bytes(
                        bytes(first - line_addr) + self.host.read(first, n), "little")
                    s["rresp"].value = 0
                s["rid"].value = cur.rid
                s["rlast"].value = 1 if cur.sent == cur.beats - 1 else 0
                r_out = True
            s["rvalid"].value = 1 if r_out else 0


class HostPortMonitor:
    """Fails on any host-port burst that is too long or crosses a 4 KiB boundary."""

    def __init__(self, slave: HostMemoryAxiSlave, mps: int, mrrs: int) -> None:
        self.mps = mps
        self.mrrs = mrrs
        self.line = slave.line
        self.errors: list[str] = []
        self.bursts = {"read": 0, "write": 0}
        self.largest = {"read": 0, "write": 0}
        self.slave = slave
        slave.listen(self._burst)

    def _burst(self, kind: str, addr: int, beats: int,
               written: tuple[int, int, int] | None) -> None:
        self.bursts[kind] += 1
        if kind == "read":
            # the shortest request that needs these beats still has to fit in MRRS
            shortest = (beats - 1) * self.line - addr % self.line + 1
            self.largest[kind] = max(self.largest[kind], shortest)
            if shortest > self.mrrs:
                self.errors.append(f"read burst at {addr:#x} of {beats} beats asks for at least "
                                   f"{shortest} bytes > MRRS {self.mrrs}")
            last = (addr // self.line + beats) * self.line - 1
            if beats > 1 and addr // PAGE != last // PAGE:
                self.errors.append(f"read burst at {addr:#x} of {beats} beats crosses 4 KiB")
        elif written is not None and written[2]:
            lo, hi, nbytes = written
            self.largest[kind] = max(self.largest[kind], hi - lo)
            if hi - lo > self.mps:
                self.errors.append(f"write burst at {addr:#x} writes {hi - lo} bytes > MPS "
                                   f"{self.mps}")
            if lo // PAGE != (hi - 1) // PAGE:
                self.errors.append(f"write burst at {addr:#x} writes across 4 KiB "
                                   f"({lo:#x}..{hi:#x})")

    def check(self) -> None:
        self.slave.poll()
        assert not self.errors, "host port rule violations: " + "; ".join(self.errors[:5])

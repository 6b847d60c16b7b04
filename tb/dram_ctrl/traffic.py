"""A lean AXI4 traffic generator for measuring the DRAM controller.

cocotbext-axi's AxiMaster is the right tool for checking data; for measuring bandwidth the
generator must keep a request on AR/AW every cycle the controller can take one, with many reads
outstanding, so it drives the channels itself: one coroutine, one clock edge per cycle, handshakes
sampled at the edge like any AXI BFM. It records per-request latency (address handshake to last
data beat or write response) and data beats per cycle in a measurement window.

Two kinds of pattern:
- streams (``Pattern.copy_dst is None``): sequential or random requests on AR and AW, reads and
  writes in the ratio ``read_fraction`` (each direction may run ahead of the other by a few
  requests, so the ratio of the traffic served is the one asked for);
- copies (``Pattern.copy_dst`` set): what a DMA engine's card-to-card channel does, ``chunk``
  bytes at a time with ``in_flight`` chunks outstanding: each chunk is one read burst with its
  own ID and, once all its data is back, one write burst, all writes on one ID in chunk order; a
  chunk leaves the window when its write response arrives. The copy repeats over its region; the
  window is one whole copy of ``span`` bytes in steady state (from the read of its first chunk
  to the write response of its last).

When the DUT has dram_ctrl's command-trace ports, the window's activates, precharges and
read/write turnarounds are counted too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from cocotb.triggers import RisingEdge

from pyhost.spec import dram


@dataclass(frozen=True)
class Pattern:
    """One traffic pattern: what to request, where, and for how long."""

    name: str
    read_fraction: float          # 1.0 all reads, 0.0 all writes
    sequential: bool              # consecutive addresses, else uniformly random lines
    beats: int = 1                # beats per request (burst length)
    cycles: int = 40000           # measurement window
    warmup: int = 2000            # cycles before the window opens
    max_outstanding: int = 64     # requests in flight per direction
    span: int = 1 << 30           # bytes of memory the pattern touches
    mix_random: float = 0.0       # for mixed patterns: share of random single-beat requests
    copy_dst: int | None = None   # copies: destination offset (the source starts at base)
    chunk: int = 4096             # copies: bytes per chunk (one read and one write burst)
    in_flight: int = 8            # copies: chunks outstanding


@dataclass
class Stats:
    """Measured figures of one pattern."""

    pattern: str
    cycles: int = 0
    read_beats: int = 0
    write_beats: int = 0
    read_latency: list[int] = field(default_factory=list)
    write_latency: list[int] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    trace: dict[str, int] = field(default_factory=dict)
    chunks_in_flight_max: int = 0   # copies: most chunks outstanding at once (AR to B)

    @property
    def bandwidth(self) -> float:
        """Data beats per cycle, i.e. the fraction of the data bus peak."""
        return (self.read_beats + self.write_beats) / max(self.cycles, 1)

    @staticmethod
    def _pct(xs: list[int], q: float) -> float:
        if not xs:
            return 0.0
        s = sorted(xs)
        return float(s[min(len(s) - 1, int(q * len(s)))])

    def summary(self, line_bytes: int, clk_ns: float) -> dict[str, float | int | str]:
        """The figures as a flat dict; latencies in cycles and ns, reads first."""
        hits = self.counters.get("row_hit", 0)
        bursts = hits + self.counters.get("row_miss", 0) + self.counters.get("row_conflict", 0)
        out: dict[str, float | int | str] = {
            "pattern": self.pattern,
            "cycles": self.cycles,
            "read_beats": self.read_beats,
            "write_beats": self.write_beats,
            "bandwidth_fraction": round(self.bandwidth, 4),
            "bandwidth_GBps": round(self.bandwidth * line_bytes / clk_ns, 3),
        }
        for kind, lat in (("", self.read_latency or self.write_latency),
                          ("read_", self.read_latency), ("write_", self.write_latency)):
            if kind and not (self.read_latency and self.write_latency):
                continue  # separate figures only for mixed traffic
            mean = sum(lat) / len(lat) if lat else 0.0
            out[f"{kind}latency_mean_cycles"] = round(mean, 2)
            out[f"{kind}latency_p99_cycles"] = self._pct(lat, 0.99)
            out[f"{kind}latency_mean_ns"] = round(clk_ns * mean, 1)
            out[f"{kind}latency_p99_ns"] = round(clk_ns * self._pct(lat, 0.99), 1)
        out["row_hit_rate"] = round(hits / bursts, 4) if bursts else 0.0
        out["refreshes"] = self.counters.get("refresh", 0)
        out["refresh_stall_cycles"] = self.counters.get("ref_stall", 0)
        if self.chunks_in_flight_max:
            out["chunks_in_flight_max"] = self.chunks_in_flight_max
        if self.trace:
            cols = self.trace["RD"] + self.trace["WR"]
            per_k = 1000 / max(cols, 1)
            out["activates_per_1000_bursts"] = round(self.trace["ACT"] * per_k, 1)
            out["rw_switches_per_1000_bursts"] = round(self.trace["switch"] * per_k, 1)
        return out


COUNTERS = ("rd", "wr", "row_hit", "row_miss", "row_conflict", "refresh", "ref_stall", "busy")

#: Trace command codes counted in the window (pyhost.spec.dram.CMD_*).
_ACT, _RD, _WR = dram.CMD_ACT, dram.CMD_RD, dram.CMD_WR

#: How many requests one direction of a mixed stream may run ahead of its share.
RATIO_SLACK = 4


class _TraceCounter:
    """Counts ACT, RD, WR and RD/WR turnarounds on dram_ctrl's command-trace ports."""

    def __init__(self, dut) -> None:
        self.ok = all(hasattr(dut, n) for n in
                      ("trace_row_valid", "trace_row_cmd", "trace_col_valid", "trace_col_cmd"))
        if self.ok:
            self.rv, self.rc = dut.trace_row_valid, dut.trace_row_cmd
            self.cv, self.cc = dut.trace_col_valid, dut.trace_col_cmd
        self.last_col = 0
        self.counts = {"ACT": 0, "RD": 0, "WR": 0, "switch": 0}

    def sample(self, count: bool) -> None:
        if not self.ok:
            return
        if int(self.rv.value) and int(self.rc.value) == _ACT and count:
            self.counts["ACT"] += 1
        if int(self.cv.value):
            c = int(self.cc.value)
            if count:
                self.counts["RD" if c == _RD else "WR"] += 1
                if self.last_col and c != self.last_col:
                    self.counts["switch"] += 1
            self.last_col = c


class AxiTraffic:
    """Drives ``<prefix>_*`` AXI4 slave ports of ``dut`` with a :class:`Pattern`."""

    def __init__(self, dut, prefix: str = "s_axi", seed: int = 1) -> None:
        self.dut = dut
        self.clk = dut.clk
        self.sig = {n: getattr(dut, f"{prefix}_{n}") for n in (
            "arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "arready",
            "rid", "rlast", "rvalid", "rready",
            "awid", "awaddr", "awlen", "awsize", "awburst", "awvalid", "awready",
            "wdata", "wstrb", "wlast", "wvalid", "wready", "bid", "bvalid", "bready")}
        self.line = len(self.sig["wdata"]) // 8
        self.id_count = 1 << len(self.sig["arid"])
        self.rng = random.Random(seed)
        self.idle()

    def idle(self) -> None:
        s = self.sig
        for n in ("arvalid", "awvalid", "wvalid", "wlast"):
            s[n].value = 0
        s["rready"].value = 1
        s["bready"].value = 1
        s["wstrb"].value = (1 << self.line) - 1
        s["arsize"].value = (self.line - 1).bit_length()
        s["awsize"].value = (self.line - 1).bit_length()
        s["arburst"].value = 1
        s["awburst"].value = 1

    def counters(self) -> dict[str, int]:
        return {c: int(getattr(self.dut, f"stat_{c}").value) for c in COUNTERS}

    def _addresses(self, p: Pattern, base: int, start: int = 0) -> Iterator[tuple[int, int]]:
        """(address, beats) of successive requests inside [base, base + span): a sequential
        stream starting at ``base + start``, or uniformly random lines."""
        step = p.beats * self.line
        seq = start
        lines = p.span // self.line
        while True:
            if p.sequential and self.rng.random() >= p.mix_random:
                yield base + seq, p.beats
                seq = (seq + step) % (p.span - step + 1)
            else:
                yield base + self.rng.randrange(lines) * self.line, 1

    async def run(self, p: Pattern, base: int = 0) -> Stats:
        """Drive the pattern from now on; returns the window's figures."""
        if p.copy_dst is not None:
            return await self._run_copy(p, base)
        s = self.sig
        st = Stats(p.name)
        rd_addr = self._addresses(p, base)
        wr_addr = self._addresses(p, base, p.span // 2 if 0 < p.read_fraction < 1 else 0)
        rd_start: dict[int, int] = {}
        wr_start: dict[int, int] = {}
        next_rid = 0
        next_wid = 0
        ar_pending = aw_pending = False
        ar_id = aw_id = 0
        w_queue: list[int] = []        # beats of bursts whose AW was presented, in order
        w_left = 0
        total = p.warmup + p.cycles
        cyc = 0
        in_window = False
        c0: dict[str, int] = {}
        trace = _TraceCounter(self.dut)
        mixed = 0.0 < p.read_fraction < 1.0
        n_rd = n_wr = 0                # requests issued, for the ratio of a mixed stream
        while True:
            await RisingEdge(self.clk)
            trace.sample(in_window)
            # -- handshakes at this edge (values settled before it)
            if ar_pending and int(s["arready"].value):
                ar_pending = False
                rd_start[ar_id] = cyc
            if aw_pending and int(s["awready"].value):
                aw_pending = False
                wr_start[aw_id] = cyc
            if w_left and int(s["wready"].value):
                w_left -= 1
                if in_window:
                    st.write_beats += 1
            if int(s["rvalid"].value):
                if in_window:
                    st.read_beats += 1
                if int(s["rlast"].value):
                    t0 = rd_start.pop(int(s["rid"].value))
                    if in_window:
                        st.read_latency.append(cyc - t0)
            if int(s["bvalid"].value):
                t0 = wr_start.pop(int(s["bid"].value))
                if in_window:
                    st.write_latency.append(cyc - t0)
            cyc += 1
            if cyc == p.warmup:
                in_window = True
                c0 = self.counters()
            if cyc == total:
                in_window = False
                c1 = self.counters()
                st.counters = {k: c1[k] - c0[k] for k in c1}
                st.cycles = p.cycles
                st.trace = dict(trace.counts) if trace.ok else {}
            done = cyc >= total
            if done and not ar_pending and not aw_pending and not w_left and not w_queue \
                    and not rd_start and not wr_start:
                break
            # -- next requests: a mixed stream keeps reads and writes in its ratio
            rd_ok = wr_ok = True
            if mixed:
                f = p.read_fraction
                rd_ok = (n_rd + 1) * (1 - f) <= (n_wr + RATIO_SLACK) * f
                wr_ok = (n_wr + 1) * f <= (n_rd + RATIO_SLACK) * (1 - f)
            if not ar_pending and not done and p.read_fraction > 0.0 and rd_ok \
                    and len(rd_start) < p.max_outstanding and next_rid not in rd_start:
                addr, beats = next(rd_addr)
                ar_id = next_rid
                next_rid = (next_rid + 1) % self.id_count
                s["araddr"].value = addr
                s["arid"].value = ar_id
                s["arlen"].value = beats - 1
                s["arvalid"].value = 1
                ar_pending = True
                n_rd += 1
            elif not ar_pending:
                s["arvalid"].value = 0
            if not aw_pending and not done and p.read_fraction < 1.0 and wr_ok \
                    and len(wr_start) < p.max_outstanding and len(w_queue) < 4 \
                    and next_wid not in wr_start:
                addr, beats = next(wr_addr)
                aw_id = next_wid
                next_wid = (next_wid + 1) % self.id_count
                s["awaddr"].value = addr
                s["awid"].value = aw_id
                s["awlen"].value = beats - 1
                s["awvalid"].value = 1
                aw_pending = True
                n_wr += 1
                w_queue.append(beats)
            elif not aw_pending:
                s["awvalid"].value = 0
            w_left = self._present_w(s, w_left, w_queue)
        self.idle()
        return st

    def _present_w(self, s, w_left: int, w_queue: list[int]) -> int:
        """Present the W channel for this cycle: the next queued burst's first beat (random
        data) once the current one is done; returns the beats left of the current burst."""
        if not w_left and w_queue:
            w_left = w_queue.pop(0)
            s["wdata"].value = self.rng.getrandbits(8 * self.line)
        s["wvalid"].value = 1 if w_left else 0
        s["wlast"].value = 1 if w_left == 1 else 0
        return w_left

    async def _run_copy(self, p: Pattern, base: int) -> Stats:
        """A chunked copy from ``base`` to ``p.copy_dst`` over ``p.span`` bytes, repeated; the
        window is the first whole copy that starts after the warm-up."""
        s = self.sig
        st = Stats(p.name)
        beats = p.chunk // self.line
        n_chunks = p.span // p.chunk
        ids = min(self.id_count, 64)
        if p.in_flight > ids or beats > 256 or p.span % p.chunk:
            raise ValueError(f"{p.name}: chunk {p.chunk} / in_flight {p.in_flight} not drivable")
        trace = _TraceCounter(self.dut)
        next_chunk = 0                 # next chunk to read
        rd_left: dict[int, int] = {}   # ARID -> (chunk, beats still to come)
        rd_chunk: dict[int, int] = {}
        rd_t0: dict[int, int] = {}
        data_done: set[int] = set()    # chunks whose read data is all back
        next_write = 0                 # next chunk to write (writes go in chunk order)
        b_fifo: list[tuple[int, int]] = []  # (chunk, AW cycle) awaiting B, in order
        outstanding = 0
        ar_pending = aw_pending = False
        ar_chunk = aw_chunk = 0
        w_left = 0
        w_queue: list[int] = []
        first = last = -1              # chunks of the window
        t_start = t_end = -1
        c0: dict[str, int] = {}
        cyc = 0
        while True:
            await RisingEdge(self.clk)
            trace.sample(t_start >= 0 and t_end < 0)
            if ar_pending and int(s["arready"].value):
                ar_pending = False
                ident = ar_chunk % ids
                rd_left[ident] = beats
                rd_chunk[ident] = ar_chunk
                rd_t0[ident] = cyc
                if ar_chunk == first:
                    t_start = cyc
                    c0 = self.counters()
            if aw_pending and int(s["awready"].value):
                aw_pending = False
                b_fifo.append((aw_chunk, cyc))
            if w_left and int(s["wready"].value):
                w_left -= 1
            if int(s["rvalid"].value):
                ident = int(s["rid"].value)
                if ident not in rd_left:
                    raise AssertionError(f"{p.name}: read data for ID {ident}, which has no "
                                         "read outstanding")
                rd_left[ident] -= 1
                if rd_left[ident] == 0:
                    k = rd_chunk.pop(ident)
                    del rd_left[ident]
                    if first <= k <= last:
                        st.read_latency.append(cyc - rd_t0[ident])
                        st.read_beats += beats
                    data_done.add(k)
            if t_start >= 0 and t_end < 0:
                st.chunks_in_flight_max = max(st.chunks_in_flight_max, outstanding)
            if int(s["bvalid"].value):
                k, t0 = b_fifo.pop(0)
                outstanding -= 1
                if first <= k <= last:
                    st.write_latency.append(cyc - t0)
                    st.write_beats += beats
                if k == last:
                    t_end = cyc
                    c1 = self.counters()
                    st.counters = {n: c1[n] - c0[n] for n in c1}
                    st.trace = dict(trace.counts) if trace.ok else {}
                    st.cycles = t_end - t_start
            cyc += 1
            if first < 0 and cyc >= p.warmup:
                first = next_chunk
                last = first + n_chunks - 1
            stop = t_end >= 0
            if stop and not ar_pending and not aw_pending and not w_left and not w_queue \
                    and outstanding == 0:
                break
            # -- next read: a new chunk when fewer than in_flight are outstanding
            if not ar_pending and not stop and outstanding < p.in_flight:
                k = next_chunk
                next_chunk += 1
                outstanding += 1
                ar_chunk = k
                s["araddr"].value = base + (k % n_chunks) * p.chunk
                s["arid"].value = k % ids
                s["arlen"].value = beats - 1
                s["arvalid"].value = 1
                ar_pending = True
            elif not ar_pending:
                s["arvalid"].value = 0
            # -- next write: the oldest chunk whose data is back, one ID, in order
            if not aw_pending and next_write in data_done and len(w_queue) < 2:
                data_done.discard(next_write)
                aw_chunk = next_write
                next_write += 1
                s["awaddr"].value = p.copy_dst + (aw_chunk % n_chunks) * p.chunk
                s["awid"].value = 0
                s["awlen"].value = beats - 1
                s["awvalid"].value = 1
                aw_pending = True
                w_queue.append(beats)
            elif not aw_pending:
                s["awvalid"].value = 0
            w_left = self._present_w(s, w_left, w_queue)
        self.idle()
        return st

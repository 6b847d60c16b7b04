"""A lean AXI4 traffic generator for measuring the DRAM controller.

cocotbext-axi's AxiMaster is the right tool for checking data; for measuring bandwidth the
generator must keep a request on AR/AW every cycle the controller can take one, with many reads
outstanding, so it drives the channels itself: one coroutine, one clock edge per cycle, handshakes
sampled at the edge like any AXI BFM. It records per-request latency (address handshake to last
data beat or write response) and data beats per cycle in a measurement window.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from cocotb.triggers import RisingEdge


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
        return out


COUNTERS = ("rd", "wr", "row_hit", "row_miss", "row_conflict", "refresh", "ref_stall", "busy")


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

    def _addresses(self, p: Pattern, base: int) -> Iterator[tuple[int, int]]:
        """(address, beats) of successive requests."""
        step = p.beats * self.line
        seq = base
        lines = p.span // self.line
        while True:
            if p.sequential and self.rng.random() >= p.mix_random:
                yield seq, p.beats
                seq = base + (seq - base + step) % (p.span - step + 1)
            else:
                yield base + self.rng.randrange(lines) * self.line, 1

    async def run(self, p: Pattern, base: int = 0) -> Stats:
        s = self.sig
        st = Stats(p.name)
        rd_addr = self._addresses(p, base)
        wr_addr = self._addresses(p, base + (p.span // 2 if 0 < p.read_fraction < 1 else 0))
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
        while True:
            await RisingEdge(self.clk)
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
            done = cyc >= total
            if done and not ar_pending and not aw_pending and not w_left and not w_queue \
                    and not rd_start and not wr_start:
                break
            # -- next requests
            want_read = self.rng.random() < p.read_fraction
            if not ar_pending and not done and (want_read or p.read_fraction == 1.0) \
                    and len(rd_start) < p.max_outstanding and next_rid not in rd_start:
                addr, beats = next(rd_addr)
                ar_id = next_rid
                next_rid = (next_rid + 1) % self.id_count
                s["araddr"].value = addr
                s["arid"].value = ar_id
                s["arlen"].value = beats - 1
                s["arvalid"].value = 1
                ar_pending = True
            elif not ar_pending:
                s["arvalid"].value = 0
            if not aw_pending and not done and (not want_read or p.read_fraction == 0.0) \
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
                w_queue.append(beats)
            elif not aw_pending:
                s["awvalid"].value = 0
            if not w_left and w_queue:
                w_left = w_queue.pop(0)
                s["wdata"].value = self.rng.getrandbits(8 * self.line)
            s["wvalid"].value = 1 if w_left else 0
            s["wlast"].value = 1 if w_left == 1 else 0
        self.idle()
        return st

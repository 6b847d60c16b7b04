"""The PCIe link of RtlCard(link="pcie"): cocotbext-pcie's UltraScale+ hard IP in front of
card_top_pcie, on a simulated link to a root complex whose host memory is a HostMemory.

The package's classes are extended (site-packages is never patched):

- :class:`CardPcieDevice` (an ``UltraScalePlusPcieDevice``): the package's model runs several
  coroutines on every user clock (completer request, configuration status, control, interrupt
  and sequence-number logic). Here they wait on events instead (a completer request, a
  configuration write), so no Python runs per clock while the link is idle. Its requester
  streams are tb/common/pcie_streams.py's RcStream and RqStream (one coroutine per stream, a
  completion encoded into its beats at once: the same beats as the package's); the package's
  RC logic (completions from the receive buffer to the RC stream as its queue takes them) runs
  synchronously where its coroutine would resume; the usual completion (successful, with data,
  for an active read, as expected) is taken by the same steps as the package's upstream_recv
  without its enum sets (anything else goes to the package; tests/tb/test_pcie_link.py compares
  the two). It also implements the hard IP's completion timeout, which the package leaves out:
  a read whose last completion has not been handed to the card within ``pcie.CPL_TIMEOUT_US``
  (never sent, or dropped by the hard IP itself) is completed on the RC stream with error code
  TIMEOUT and its tag released. It counts what the package only logs: completions dropped
  because the receive buffer was full (``rx_overflows``), and the buffer's peak occupancy in
  headers and data credits.
- :class:`HostRootComplex` (a ``RootComplex``): the package serves each memory read at once and
  in order, all of it before the next. Here reads wait a configurable latency (by default
  500 ns plus a spread of up to 200 ns per read, as a host's memory answers: with one fixed
  latency reads would become ready in the order they came and be completed in order), many
  are in flight, completions of different tags are returned in any order and interleaved
  (when a read becomes ready, the ready reads' completions are sent one at a time, each time
  from a random pick among them), and each read is split at the read completion boundary (into
  ``cpl_split``-byte pieces, or as large as the max payload size allows). Host memory is served
  straight from the HostMemory's numpy array; address ranges can answer Unsupported Request,
  Completer Abort, poisoned data, nothing at all from there on (``drop``: a completion
  timeout), or lose the one completion that reaches them while the rest of the read is still
  sent (``lose``). Writes to the MSI-X message address arrive as vector events.

The link between the root port and the card (``PcieLink(link_model=...)``):

- ``"ideal"`` (the default): :class:`IdealLink`, an error-free link. Per direction it models
  the wire (each TLP takes its wire size, header + payload + 8 bytes, at the trained rate, in
  the order TLPs pass flow control: cocotbext-pcie's SimPort formula), the link delay (the two
  ports' 5 ns), delivery in order, and flow control: the credits each receiver advertises (the
  package's ports': the card 64 / 1024 posted, 64 / 64 non-posted, infinite completion
  credits; the root port 64 / 1024 of each), consumed by the transmitter, released when the
  receiver takes the TLP and returned to the transmitter by the UpdateFC its update timer sends
  (the SimPort's latency, from the first release after the timer last expired) a DLLP's wire
  time and the link delay later; a TLP without credits waits (``fc_stalls``), other types pass
  it. Not modelled, as nothing the card sees depends on them on an error-free link: the
  data-link layer's sequence numbers, ACK/NAK and retry buffer (the package cannot replay
  anyway: a NAK raises), and the wire time of DLLPs (ACKs and UpdateFCs took about 0.5 ns of a
  link's time every ~150 ns; an UpdateFC here never waits behind a TLP). Completions and memory
  requests between the root complex and the card go straight between the link and the root
  complex: the host bridge, the switch and the root port forward them in zero time and change
  nothing the card sees (the bridges' parity-error status bits for a poisoned TLP are not set
  on this way; nothing reads them); configuration requests take the package's way. The SimPort
  pair stays connected (the link's speed and width, its flow-control initialization) but
  carries no TLP, and its idle UpdateFCs (every 10 us, which would only wake Python) are off.
  Completions to the card and reads from it are delivered with their arrival time but may be
  taken at the next edge of the user clock, by the RC stream while it runs (it wakes at every
  edge then), instead of by a timer of their own: the card sees the hard IP only at the edges,
  the RC stream takes them before its handshake of that edge, the host's read latency counts
  from the arrival time, and anything else in flight behind them is delivered at its own time
  (with everything before it). Simulated throughput is the same as over the SimPort pair.
- ``"dll"``: the package's SimPort pair carries the TLPs (sequence numbers, ACK and flow-control
  DLLPs on the wire), through the host bridge, the switch and the root port: for comparison.

:class:`PcieLink` builds them, enumerates the bus as a host would (BARs, bus mastering, MSI-X,
max payload and read request sizes in Device Control) and gives RtlCard its MMIO and interrupts.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.queue import Queue
from cocotb.triggers import Event, First, RisingEdge, Timer
from cocotb.utils import get_sim_steps, get_sim_time
from cocotbext.axi import AxiStreamBus
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.core.caps import PciCapId
from cocotbext.pcie.core.dllp import FcType
from cocotbext.pcie.core.port import PCIE_GEN_RATE
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType, tlp_type_fc_type_mapping
from cocotbext.pcie.core.utils import PcieId
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice
from cocotbext.pcie.xilinx.us.tlp import ErrorCode, Tlp_us
from cocotbext.pcie.xilinx.us.usp_model import LocalError

from pyhost.backend import HostMemory
from pyhost.spec import pcie
from tb.common.pcie_streams import CcStream, RcStream, RqStream, rc_encode

PAGE = 4096
_READS = (TlpType.MEM_READ, TlpType.MEM_READ_64)
_WRITES = (TlpType.MEM_WRITE, TlpType.MEM_WRITE_64)
_CFG_WRITES = (TlpType.CFG_WRITE_0,)
_CPLS = (TlpType.CPL, TlpType.CPL_DATA, TlpType.CPL_LOCKED, TlpType.CPL_LOCKED_DATA)
_MEM = _READS + _WRITES
# The same, keyed by the raw (fmt, type) fields: Tlp.fmt_type builds the enum at every use
_RAW = {t: t.value for t in TlpType}
_RAW_READS = frozenset(_RAW[t] for t in _READS)
_RAW_CPLS = frozenset(_RAW[t] for t in _CPLS)
_RAW_MEM = frozenset(_RAW[t] for t in _MEM)
_RAW_CFG_WRITES = frozenset(_RAW[t] for t in _CFG_WRITES)
_RAW_CPL_DATA = _RAW[TlpType.CPL_DATA]
_FC_TYPE = {_RAW[t]: fc for t, fc in tlp_type_fc_type_mapping.items()}
MSIX_FLAG = 4   # PCI_IRQ_MSIX of cocotbext.pcie.core.pci
#: The link models PcieLink can put between the root port and the card (module doc).
LINK_MODELS = ("ideal", "dll")
#: The SimPort pair's idle flow-control update interval on the ideal link (steps: ~18 minutes)
IDLE_FC_STEPS = 1 << 50


class _Discard:
    """A queue that drops what is put in it (the hard IP's RQ sequence numbers: not wired)."""

    def put_nowait(self, item) -> None:
        pass


class _Credits:
    """Flow control of one TLP type in one direction of :class:`IdealLink`: the receiver's
    advertised credits (headers, data; 0 = infinite, as in cocotbext-pcie), what the transmitter
    consumed, the limit it last heard of."""

    __slots__ = ("infinite_h", "infinite_d", "limit_h", "limit_d", "used_h", "used_d",
                 "alloc_h", "alloc_d")

    def __init__(self, hdr: int, data: int) -> None:
        self.infinite_h, self.infinite_d = hdr == 0, data == 0
        self.limit_h = self.alloc_h = hdr
        self.limit_d = self.alloc_d = data
        self.used_h = self.used_d = 0

    def available(self, dc: int) -> bool:
        return ((self.infinite_h or self.limit_h - self.used_h >= 1)
                and (self.infinite_d or self.limit_d - self.used_d >= dc))


class _Direction:
    """One direction of :class:`IdealLink`: TLPs serialized on the wire in the order they pass
    flow control, each arriving a link delay after its last byte, delivered in that order; the
    receiver's credits.

    Delivery: a TLP of the ``lazy`` kinds may be delivered after its arrival time by
    :meth:`poll`, which the RC stream calls at each user clock edge while it runs (before its
    handshake), with its arrival time as the time of delivery (:attr:`at`); the delivery
    coroutine needs no timer for it then. Anything else (and everything while nobody polls) is
    delivered at its arrival time by the delivery coroutine, with every TLP before it."""

    def __init__(self, name: str, tx_port, rx_port, deliver, lazy: frozenset = frozenset()
                 ) -> None:
        self.name = name
        # what cocotbext-pcie's connected SimPort pair computed for this link
        self._symbol_period, self._time_scale = tx_port.symbol_period, tx_port.time_scale
        self.delay = max(tx_port.link_delay_steps, 1)
        #: the receiver's flow-control update timer (its UpdateFC DLLPs follow releases by it)
        self.update_latency = max(rx_port.max_latency_timer_steps, 1)
        self._dllp_steps = max(int(8 * tx_port.symbol_period * tx_port.time_scale), 1)
        fc = rx_port.fc_state[0]
        self.credits = {FcType.P: _Credits(fc.ph.rx_initial_allocation,
                                           fc.pd.rx_initial_allocation),
                        FcType.NP: _Credits(fc.nph.rx_initial_allocation,
                                            fc.npd.rx_initial_allocation),
                        FcType.CPL: _Credits(fc.cplh.rx_initial_allocation,
                                             fc.cpld.rx_initial_allocation)}
        self.deliver = deliver
        self.lazy = lazy                   # raw (fmt, type) of what poll may deliver late
        self.wire_free = 0                 # steps: when the wire has sent its last byte
        self.in_flight: deque = deque()    # (arrival, tlp, lazy)
        self._urgent: deque = deque()      # arrival times of the others in flight
        self._kick = Event()
        #: the RC stream polls (it runs: wakes at every edge)
        self.polled = False
        #: the arrival time (steps) of the lazy TLP being delivered, while one is
        self.at: int | None = None
        self._window_end = -1              # the receiver's update timer: expires then
        self._updates: deque = deque()     # [arrival, {type: (hdr, data)}] UpdateFCs on their way
        self._updated = Event()
        self.tlps = 0
        self.fc_stalls = {FcType.P: 0, FcType.NP: 0, FcType.CPL: 0}   # TLPs that waited
        cocotb.start_soon(self._run_deliver())

    def wire_steps(self, tlp) -> int:
        """SimPort.handle_tx's time on the wire; get_wire_size() is the header (16 bytes for
        the 4-DW formats, 12 otherwise) + the payload + 8."""
        size = (16 if tlp.fmt & 1 else 12) + len(tlp.data) + 8
        return max(int(size * self._symbol_period * self._time_scale), 1)

    # -- flow control -----------------------------------------------------------------------
    def _hear_updates(self, now: int) -> None:
        ups = self._updates
        while ups and ups[0][0] <= now:
            for ft, (h, d) in ups.popleft()[1].items():
                c = self.credits[ft]
                c.limit_h, c.limit_d = h, d

    def _release(self, ft, dc: int) -> None:
        """The receiver processed a TLP: its credits return in the UpdateFC its timer sends."""
        c = self.credits[ft]
        if c.infinite_h and c.infinite_d:
            return
        c.alloc_h += 1
        c.alloc_d += dc
        now = self.at if self.at is not None else get_sim_time()
        if now >= self._window_end:
            self._window_end = now + self.update_latency
            self._updates.append([self._window_end + self._dllp_steps + self.delay, {}])
            self._updated.set()
        self._updates[-1][1][ft] = (c.alloc_h, c.alloc_d)

    async def _gate(self, tlp, ft, dc: int) -> None:
        c = self.credits[ft]
        counted = False
        while True:
            now = get_sim_time()
            self._hear_updates(now)
            if c.available(dc):
                break
            if not counted:
                self.fc_stalls[ft] += 1
                counted = True
            if self._updates:
                await Timer(self._updates[0][0] - now, "step")
            else:
                self._updated.clear()
                await self._updated.wait()
        c.used_h += 1
        c.used_d += dc

    # -- transmit and deliver ---------------------------------------------------------------
    async def send(self, tlp) -> None:
        """Transmit ``tlp`` (returns once it has passed flow control and is on the wire)."""
        tlp.release_fc()                   # (what a switch would do for a forwarded TLP)
        raw = tlp.fmt, tlp.type
        ft = _FC_TYPE[raw]                 # (tlp.get_fc_type())
        dc = tlp.get_data_credits()
        c = self.credits[ft]
        if c.available(dc):                # (later updates only raise the limit)
            c.used_h += 1
            c.used_d += dc
        else:
            await self._gate(tlp, ft, dc)

        def release() -> None:             # once, as cocotbext-pcie's release token
            tlp.release_fc_cb = None
            self._release(ft, dc)
        tlp.release_fc_cb = release
        now = get_sim_time()
        end = max(now, self.wire_free) + self.wire_steps(tlp)
        self.wire_free = end
        arrival = end + self.delay
        lazy = raw in self.lazy
        if self.polled:                    # the delivery coroutine times only the urgent ones
            if not lazy and not self._urgent:
                self._kick.set()
        elif not self.in_flight:
            self._kick.set()
        self.in_flight.append((arrival, tlp, lazy))
        if not lazy:
            self._urgent.append(arrival)
        self.tlps += 1

    async def _deliver_due(self, now: int, lazy_only: bool) -> None:
        flight = self.in_flight
        while flight and flight[0][0] <= now:
            t, tlp, lazy = flight[0]
            if lazy_only and not lazy:
                return
            flight.popleft()
            if not lazy:
                self._urgent.popleft()
                await self.deliver(tlp)        # at its arrival time: now
                continue
            self.at = t                        # (a lazy kind never waits in delivery)
            try:
                await self.deliver(tlp)
            finally:
                self.at = None

    async def poll(self) -> None:
        """At a clock edge of the polling RC stream: deliver the lazy TLPs at the front whose
        arrival time has come, stopping at anything else (the delivery coroutine delivers it
        at its time). Taken there rather than at their arrival, they change nothing the card
        sees: it sees the hard IP only at the edges, and nothing else acts on them in
        between (module doc)."""
        flight = self.in_flight
        if flight and flight[0][2]:
            await self._deliver_due(get_sim_time(), True)

    def set_polled(self, on: bool) -> None:
        self.polled = on
        if not on:
            self._kick.set()

    async def _run_deliver(self) -> None:
        flight = self.in_flight
        while True:
            if flight:
                if not self.polled:
                    target = flight[0][0]
                elif self._urgent:
                    target = self._urgent[0]
                else:
                    target = None
                if target is not None:
                    now = get_sim_time()
                    if target > now:
                        await Timer(target - now, "step")
                    else:
                        await self._deliver_due(now, False)
                    continue
            self._kick.clear()
            await self._kick.wait()


class IdealLink:
    """The link between the root port and the card for PcieLink(link_model="ideal"): an
    error-free link at the trained rate (see the module doc for what it models and what it
    leaves to cocotbext-pcie's SimPort pair, which stays connected for link training and
    flow-control initialization)."""

    def __init__(self, rc: HostRootComplex, root_port, dev: CardPcieDevice) -> None:
        self.rc, self.root_port, self.dev = rc, root_port, dev
        rp_port, dev_port = root_port.downstream_port, dev.upstream_port
        assert get_sim_steps(1, "ps") == 1, "the link keeps time in steps of 1 ps"
        # completions to the card and reads from it may be delivered at the RC stream's next
        # edge (with their arrival time): see _Direction and the module doc
        self.down = _Direction("down", rp_port, dev_port, dev.upstream_recv, _RAW_CPLS)
        self.up = _Direction("up", dev_port, rp_port, self._to_host, _RAW_READS)
        if rc.cfg.root_credits is not None:
            ph, pd, nph, npd = rc.cfg.root_credits
            self.up.credits[FcType.P] = _Credits(ph, pd)
            self.up.credits[FcType.NP] = _Credits(nph, npd)
        root_port.downstream_tx_handler = self.down.send
        # the SimPort pair carries no TLP: after their flow-control initialization their idle
        # UpdateFCs (every 10 us each) would only wake Python; they wait "forever" after the
        # first instead
        for port in (rp_port, dev_port):
            port.fc_idle_timer_steps = IDLE_FC_STEPS
        rc.link = self
        dev.link = self
        src = dev.rc_source
        if isinstance(src, RcStream):
            src.edge_hook = self._poll
            src.on_active = self._set_polled

    async def _poll(self) -> None:
        await self.down.poll()
        await self.up.poll()

    def _set_polled(self, on: bool) -> None:
        self.down.set_polled(on)
        self.up.set_polled(on)

    async def _to_host(self, tlp) -> None:
        """A TLP from the card at the root port: memory requests and completions straight to
        the root complex (what the root port, the switch and the host bridge do with them in
        zero time), anything else through the root port."""
        rp = self.root_port
        raw = tlp.fmt, tlp.type
        # (a completion's requester is the root complex, 00:00.0, never below the root port)
        if raw in _RAW_CPLS or (raw in _RAW_MEM and not rp.match_tlp_secondary(tlp)):
            await self.rc.handle_tlp(tlp)
        else:
            await rp.downstream_recv(tlp)


class CardPcieDevice(UltraScalePlusPcieDevice):
    """The UltraScale+ hard IP model with event-driven configuration logic, one-coroutine
    requester streams and a completion timeout (see module doc)."""

    def __init__(self, *args, cpl_timeout_ns: int | None = None, **kwargs) -> None:
        self._cfg_changed = Event()
        self.cpl_timeout_ns = cpl_timeout_ns or pcie.CPL_TIMEOUT_US * 1000
        self.timeouts = 0
        self.rx_overflows = 0                # completions dropped: receive buffer full
        self._rx_peak = (0, 0)               # peak occupancy: headers, data credits
        self._awaiting: dict[int, object] = {}   # tag -> read whose last completion is due
        self._deadlines: deque = deque()     # (ps, tag, read): completion timeouts, in order
        self._deadline_added = Event()
        self._rc_held = None                 # the completion the RC logic waits to hand over
        self._pumping = False
        # with the C++ player: what is in its backlog (data credits, tag if the read ends),
        # and how many of its frames have left it as far as the buffer accounting knows
        self._rc_backlog: deque = deque()
        self._rc_moved = 0
        #: the IdealLink to the root port (None: cocotbext-pcie's SimPort carries the TLPs)
        self.link: IdealLink | None = None
        # the requester streams and the CC sink are built below (RqStream, RcStream,
        # CcStream), not by the package
        rq_bus, rc_bus = kwargs.pop("rq_bus", None), kwargs.pop("rc_bus", None)
        cc_bus = kwargs.pop("cc_bus", None)
        super().__init__(*args, **kwargs)
        assert (self.rx_buf_cplh_fc_limit, self.rx_buf_cpld_fc_limit) == (
            pcie.RC_BUFFER_CPLH, pcie.RC_BUFFER_CPLD), "pyhost.spec.pcie's buffer is the model's"
        self.rq_seq_num = _Discard()         # RQ sequence numbers are not wired
        # the streams' segments as the package makes them (card_top_pcie's 512-bit streams)
        rq_segments = 2 if self.rq_straddle else 1
        rc_segments = 4 if self.rc_4tlp_straddle else 2 if self.rc_straddle else 1
        if rq_bus is not None:
            self.rq_sink = RqStream(rq_bus, self.user_clk, self.user_reset, segments=rq_segments)
            self.rq_sink.queue_occupancy_limit_frames = 2
            cocotb.start_soon(self._run_rq_logic())
            cocotb.start_soon(self._run_rq_np_queue_logic())
            if not self.enable_client_tag:
                cocotb.start_soon(self._run_rq_tag_logic())
        if rc_bus is not None:
            self.rc_source = RcStream(rc_bus, self.user_clk, self.user_reset, segments=rc_segments,
                                      limit=2)
            self.rc_source.on_dequeue = self._rc_pump
        if cc_bus is not None:
            self.cc_sink = CcStream(cc_bus, self.user_clk, self.user_reset)
            self.cc_sink.queue_occupancy_limit_frames = 2
            cocotb.start_soon(self._run_cc_logic())
        cocotb.start_soon(self._count_local_errors())
        cocotb.start_soon(self._run_cpl_timeouts())
        # hold the user reset from the start (the model raises it two clocks later), so the
        # streams' models never sample what a previous test left in the card's FIFOs
        if self.user_reset is not None:
            self.user_reset.setimmediatevalue(1)

    # -- replaced per-clock loops ---------------------------------------------------------------
    async def _run_cq_logic(self) -> None:
        # completer requests go out as they arrive (the card always takes non-posted ones)
        while True:
            tlp = await self.cq_queue.get()
            await self.cq_source.send(tlp.pack_us_cq())

    async def _run_cfg_ctrl_logic(self) -> None:
        self.config_space_enable = True

    async def _run_cfg_int_logic(self) -> None:
        return                               # MSI-X is sent by the card as memory writes

    async def _count_local_errors(self) -> None:
        # the package queues local errors for a per-clock status loop; count them as they come
        while True:
            err = await self.local_error.get()
            if err == LocalError.RX_CPL_BUF_OVF_ERR:
                self.rx_overflows += 1

    @property
    def rx_peak(self) -> tuple[int, int]:
        self._rc_sync()
        return self._rx_peak

    @rx_peak.setter
    def rx_peak(self, value: tuple[int, int]) -> None:
        self._rx_peak = value

    def _rc_taken(self) -> None:
        """The RC logic takes the next completion from the receive buffer: the package's model
        notes the peak occupancy there."""
        self._rx_peak = (max(self._rx_peak[0], self.rx_buf_cplh_fc_count),
                         max(self._rx_peak[1], self.rx_buf_cpld_fc_count))

    def _rc_sync(self) -> None:
        """With the C++ player: the receive-buffer accounting of the frames that left its
        backlog (the package's RC logic sent them to the RC stream's queue) since the last
        look, in order, as _rc_pump does it: the buffer frees them, the peak is noted when the
        next one is taken, a read ends for the completion timeout."""
        src = self.rc_source
        if src is None or src.native is None:
            return
        moved = src.moved()
        backlog = self._rc_backlog
        while self._rc_moved < moved:
            self._rc_moved += 1
            dc, ending = backlog.popleft()
            if ending is not None:
                self._awaiting.pop(ending, None)
            self.rx_buf_cplh_fc_count = max(self.rx_buf_cplh_fc_count - 1, 0)
            self.rx_buf_cpld_fc_count = max(self.rx_buf_cpld_fc_count - (dc + 1), 0)
            if backlog:
                self._rc_taken()

    def _rc_pump(self) -> None:
        """The package's RC logic (its _run_rc_logic), run where its coroutine would resume:
        completions leave the receive buffer in order as the RC stream's queue takes them (at
        most three frames waiting besides the one on the bus); plus the peak occupancy and
        which reads the card has seen end. With the C++ player, every completion joins its
        backlog at once and the player moves them on at those moments (see _rc_sync)."""
        src = self.rc_source
        if src.native is not None:
            self._rc_sync()
            q = self.rc_queue
            while not q.empty():
                tlp = q.get_nowait()
                if not self._rc_backlog:
                    self._rc_taken()       # taken at once: nothing waits before it
                self._rc_backlog.append((tlp.get_data_credits(),
                                         tlp.tag if tlp.request_completed else None))
                src.push(tlp)
            self._rc_sync()
            return
        if self._pumping:
            return
        self._pumping = True
        try:
            src = self.rc_source
            while True:
                tlp = self._rc_held
                if tlp is None:
                    if self.rc_queue.empty():
                        break
                    tlp = self._rc_held = self.rc_queue.get_nowait()
                    self._rc_taken()
                if src.full():
                    break
                self._rc_held = None
                src.send_nowait(rc_encode(tlp))
                if tlp.request_completed:
                    self._awaiting.pop(tlp.tag, None)
                self.rx_buf_cplh_fc_count = max(self.rx_buf_cplh_fc_count - 1, 0)
                self.rx_buf_cpld_fc_count = max(
                    self.rx_buf_cpld_fc_count - (tlp.get_data_credits() + 1), 0)
        finally:
            self._pumping = False

    async def _run_cfg_status_logic(self) -> None:
        # the status the card reads changes only with a configuration write
        f = None
        while True:
            f = self.functions[0]
            if self.user_lnk_up is not None:
                self.user_lnk_up.value = 1
            if self.cfg_max_payload is not None:
                self.cfg_max_payload.value = f.pcie_cap.max_payload_size & 3
            if self.cfg_max_read_req is not None:
                self.cfg_max_read_req.value = f.pcie_cap.max_read_request_size
            if self.cfg_interrupt_msix_enable is not None:
                self.cfg_interrupt_msix_enable.value = int(bool(f.msix_cap.msix_enable))
            if self.cfg_interrupt_msix_mask is not None:
                self.cfg_interrupt_msix_mask.value = int(bool(f.msix_cap.msix_function_mask))
            self._cfg_changed.clear()
            await self._cfg_changed.wait()

    async def upstream_recv(self, tlp) -> None:
        self._rc_sync()
        if not self._take_completion(tlp):
            await super().upstream_recv(tlp)
            if (tlp.fmt, tlp.type) in _RAW_CFG_WRITES:
                self._cfg_changed.set()
        if self._rc_held is not None or not self.rc_queue.empty():
            self._rc_pump()

    def _take_completion(self, tlp) -> bool:
        """The package's upstream_recv for the usual completion: data, successful, not
        poisoned, for an active memory read of the one function with the same requester, ATTR
        and TC, at the expected lower address. The same steps without its per-check enum sets;
        anything else (returns False, nothing changed) goes to the package.
        tests/tb/test_pcie_streams.py compares the two on random completions."""
        if (tlp.fmt, tlp.type) != _RAW_CPL_DATA or tlp.ep or tlp.status != CplStatus.SC:
            return False
        functions = self.functions
        if len(functions) != 1 or functions[0].pcie_id != tlp.requester_id:
            return False
        req = self.active_request[tlp.tag]
        if (req is None or (req.fmt, req.type) not in _RAW_READS
                or tlp.requester_id != req.requester_id or tlp.attr != req.attr
                or tlp.tc != req.tc):
            return False
        lower = (req.address + req.get_first_be_offset() + req.get_be_byte_count()
                 - tlp.byte_count)
        if tlp.lower_address != lower & 0x7F:
            return False
        tlp.release_fc()
        if type(tlp) is not Tlp_us or tlp.th or tlp.request_completed:
            tlp = Tlp_us(tlp)
        # (else HostRootComplex's own: a Tlp_us with what Tlp_us(tlp) would give, taken as
        # it is: nothing else refers to it)
        tlp.error_code = ErrorCode.NORMAL_TERMINATION
        tlp.lower_address = lower & 0xFFF
        if tlp.byte_count <= tlp.length * 4 - (tlp.lower_address & 0x3):
            tlp.request_completed = True
            self.active_request[tlp.tag] = None
        dc = (len(tlp.data) // 4 + 3) // 4          # get_data_credits()
        self.cpld_credit_count = max(self.cpld_credit_count - dc, 0)
        self.cpld_credit_released.set()
        if (self.rx_buf_cplh_fc_count + 1 <= self.rx_buf_cplh_fc_limit
                and self.rx_buf_cpld_fc_count + dc + 1 <= self.rx_buf_cpld_fc_limit):
            self.rx_buf_cplh_fc_count += 1
            self.rx_buf_cpld_fc_count += dc + 1
            self.rc_queue.put_nowait(tlp)
        else:
            self.log.warning("No space in RX completion buffer, dropping TLP: CPLH %d (limit "
                             "%d), CPLD %d (limit %d)", self.rx_buf_cplh_fc_count,
                             self.rx_buf_cplh_fc_limit, self.rx_buf_cpld_fc_count,
                             self.rx_buf_cpld_fc_limit)
            self.local_error.put_nowait(LocalError.RX_CPL_BUF_OVF_ERR)
        self.tag_available_count = self.get_available_tag_count()
        return True

    async def upstream_send(self, tlp) -> None:
        if self.link is None:
            await super().upstream_send(tlp)
            return
        assert tlp.check()
        await self.link.up.send(tlp)

    # -- completion timeout -------------------------------------------------------------------
    async def send(self, tlp) -> None:
        if (tlp.fmt, tlp.type) in _RAW_READS:
            req = self.active_request[tlp.tag]
            if req is not None:
                self._awaiting[tlp.tag] = req
                if not self._deadlines:
                    self._deadline_added.set()
                self._deadlines.append(
                    (get_sim_time("ps") + self.cpl_timeout_ns * 1000, tlp.tag, req))
        await super().send(tlp)

    async def _run_cpl_timeouts(self) -> None:
        # the deadlines come in order (one timeout for all); a read whose last completion
        # reached the card is dropped from the front without waiting for its deadline
        dl = self._deadlines
        while True:
            if not dl:
                self._deadline_added.clear()
                await self._deadline_added.wait()
                continue
            t, tag, req = dl[0]
            if self._awaiting.get(tag) is not req:
                dl.popleft()
                continue
            self._rc_sync()
            if self._awaiting.get(tag) is not req:
                dl.popleft()
                continue
            now = get_sim_time("ps")
            if t > now:
                await Timer(t - now, unit="ps")
                continue
            dl.popleft()
            self._timeout(tag, req)

    def _timeout(self, tag: int, req) -> None:
        self._rc_sync()
        if self.active_request[tag] is req:  # (else the model saw it, then dropped it)
            self.active_request[tag] = None
            self.tag_available_count = self.get_available_tag_count()
            self.cpld_credit_count = max(self.cpld_credit_count - req.get_data_credits(), 0)
            self.cpld_credit_released.set()
        self.timeouts += 1
        self.rx_buf_cplh_fc_count += 1       # it takes its place in the buffer as any other
        self.rx_buf_cpld_fc_count += 1
        cpl = Tlp_us(Tlp.create_completion_for_tlp(req, PcieId(0, 0, 0), False, CplStatus.SC))
        cpl.error_code = ErrorCode.TIMEOUT
        cpl.request_completed = True
        cpl.byte_count = 0
        self.log.warning("Completion timeout: tag %d, address %#x", tag, req.address)
        self.rc_queue.put_nowait(cpl)
        self._rc_pump()


@dataclass
class HostLinkConfig:
    """Behaviour of the host behind the root complex."""

    read_latency_ns: int = 500        # request arrival to the first completion
    jitter_ns: int = 200              # extra random latency per read, 0..jitter_ns
    out_of_order: bool = True         # completions of different tags in random order
    rcb: int = 64                     # read completion boundary (64 or 128)
    cpl_split: int = 0                # completion size (a multiple of rcb); 0: up to MPS
    seed: int = 1
    errors: list[tuple[str, int, int]] = field(default_factory=list)   # (kind, start, end)
    #: the credits the root port advertises (posted headers, posted data, non-posted headers,
    #: non-posted data; "ideal" link only); None: cocotbext-pcie's (64, 1024, 64, 64)
    root_credits: tuple[int, int, int, int] | None = None


@dataclass
class _Read:
    tlp: object
    addr: int                         # next byte to complete
    end: int
    ready_at: int                     # ps
    seq: int
    first: bool = True
    cpl: object = None                # its completions' header (copied for each one)


class HostRootComplex(RootComplex):
    """A root complex whose host memory has latency, many reads in flight, out-of-order and
    split completions, and error ranges (see module doc)."""

    ERROR_KINDS = ("ur", "ca", "poison", "drop", "lose")

    def __init__(self, host: HostMemory, config: HostLinkConfig | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.host = host
        self.cfg = config or HostLinkConfig()
        self.rng = random.Random(self.cfg.seed)
        self._reads: list[_Read] = []
        self._wake = Event()
        self._seq = 0
        self.reads = 0
        self.completions = 0
        self.reordered = 0                # reads whose first completion overtook an older read
        self.interleaved = 0              # completions sent between two of another read
        self._last: _Read | None = None   # the read of the last completion sent
        self.lost = 0                     # completions the "lose" ranges kept back
        self.max_in_flight = 0
        self.listeners: list = []         # callables(tlp) for every request TLP from the card
        self.link: IdealLink | None = None   # PcieLink's link model when "ideal"
        # _serve is woken when a read becomes ready: one alarm coroutine over a heap of those
        # times (ps), plus a one-shot timer when a new time comes before the one it sleeps to
        self._alarms: set[int] = set()
        self._alarm_heap: list[int] = []
        self._alarm_sleep: int | None = None
        self._alarm_event = Event()
        self.register_rx_tlp_handler(TlpType.MEM_READ, self._mem_read)
        self.register_rx_tlp_handler(TlpType.MEM_READ_64, self._mem_read)
        self.register_rx_tlp_handler(TlpType.MEM_WRITE, self._mem_write)
        self.register_rx_tlp_handler(TlpType.MEM_WRITE_64, self._mem_write)
        self.read_completion_boundary = self.cfg.rcb == 128
        cocotb.start_soon(self._serve())
        cocotb.start_soon(self._run_alarms())

    # -- errors ---------------------------------------------------------------------------------
    def inject(self, kind: str, start: int, end: int) -> None:
        if kind not in self.ERROR_KINDS:
            raise ValueError(f"error kind {kind!r}: expected one of {self.ERROR_KINDS}")
        self.cfg.errors.append((kind, start, end))

    def clear_errors(self) -> None:
        self.cfg.errors.clear()

    def _error(self, addr: int, n: int) -> str | None:
        for kind, s, e in self.cfg.errors:
            if addr < e and addr + n > s:
                return kind
        return None

    # -- to the card ----------------------------------------------------------------------------
    async def downstream_send(self, tlp) -> None:
        """On the ideal link, completions and memory requests for the card go straight to the
        link: the host bridge, the switch and the root port forward them in zero time and
        change nothing the card sees. Configuration requests take the package's way."""
        link = self.link
        if link is not None:
            raw = tlp.fmt, tlp.type
            if raw in _RAW_CPLS or (raw in _RAW_MEM and link.root_port.match_tlp_secondary(tlp)):
                await link.down.send(tlp)
                return
        await super().downstream_send(tlp)

    # -- requests from the card -----------------------------------------------------------------
    async def _mem_read(self, tlp) -> None:
        for fn in self.listeners:
            fn(tlp)
        start = tlp.address + tlp.get_first_be_offset()
        n = tlp.get_be_byte_count()
        now = get_sim_time("ps")
        at = self.link.up.at if self.link is not None else None
        if at is not None:                # delivered by IdealLink: its arrival time
            now = at
        delay = self.cfg.read_latency_ns + (self.rng.randint(0, self.cfg.jitter_ns)
                                            if self.cfg.jitter_ns else 0)
        self._seq += 1
        ready = now + delay * 1000
        self._reads.append(_Read(tlp, start, start + n, ready, self._seq))
        self.reads += 1
        self.max_in_flight = max(self.max_in_flight, len(self._reads))
        real = get_sim_time("ps")
        if ready <= real:
            self._wake.set()
        else:
            self._alarm(ready, real)

    async def _mem_write(self, tlp) -> None:
        for fn in self.listeners:
            fn(tlp)
        data = tlp.get_data()
        lo = tlp.get_first_be_offset()
        hi = len(data)
        if tlp.length > 1:
            hi -= 4 - (tlp.last_be.bit_length() if tlp.last_be else 4)
        else:
            hi = tlp.first_be.bit_length()
        addr = tlp.address + lo
        if self.host.contains(addr, hi - lo):
            if self._error(addr, hi - lo) is None:
                self.host.write(addr, data[lo:hi])
            return
        # anything else (the MSI-X message address) goes through the address space
        await self.handle_mem_write_tlp(tlp)

    # -- completions ----------------------------------------------------------------------------
    def _piece(self, r: _Read) -> int:
        """Bytes of the next completion of r: up to the next boundary allowed."""
        rcb = self.cfg.rcb
        mps = 128 << self.max_payload_size
        size = self.cfg.cpl_split or mps
        size = max(rcb, min(size, mps))
        # a completion ends on a multiple of the RCB (or at the end of the request)
        limit = (r.addr // rcb) * rcb + size
        if limit - r.addr > mps:
            limit -= rcb
        return min(r.end, limit) - r.addr

    def _alarm(self, t: int, now: int) -> None:
        """Wake _serve at ``t`` (ps), once per distinct time."""
        if t in self._alarms:
            return
        self._alarms.add(t)
        heapq.heappush(self._alarm_heap, t)
        if self._alarm_sleep is None:
            self._alarm_event.set()
        elif t < self._alarm_sleep:
            cocotb.start_soon(self._ring(t - now))

    def _ring_due(self, now: int) -> None:
        heap = self._alarm_heap
        if heap and heap[0] <= now:
            while heap and heap[0] <= now:
                self._alarms.discard(heapq.heappop(heap))
            self._wake.set()

    async def _ring(self, dt: int) -> None:
        await Timer(dt, unit="ps")
        self._ring_due(get_sim_time("ps"))

    async def _run_alarms(self) -> None:
        heap = self._alarm_heap
        while True:
            now = get_sim_time("ps")
            self._ring_due(now)
            if not heap:
                self._alarm_sleep = None
                self._alarm_event.clear()
                await self._alarm_event.wait()
                continue
            self._alarm_sleep = heap[0]
            await Timer(heap[0] - now, unit="ps")

    async def _serve(self) -> None:
        while True:
            now = get_sim_time("ps")
            ready = [r for r in self._reads if r.ready_at <= now]
            if not ready:
                if self._reads:
                    self._alarm(min(r.ready_at for r in self._reads), now)
                self._wake.clear()
                await self._wake.wait()
                continue
            r = self.rng.choice(ready) if self.cfg.out_of_order else ready[0]
            if r.seq != min(x.seq for x in self._reads) and r.first:
                self.reordered += 1
            await self._complete(r)

    def _first_bad(self, addr: int, n: int) -> tuple[int, str] | None:
        """The first byte of [addr, addr + n) in an error range (or outside host memory)."""
        hits = [(max(addr, s), k) for k, s, e in self.cfg.errors if addr < e and addr + n > s]
        if not self.host.contains(addr, n):
            lo, hi = self.host.base, self.host.end
            hits.append((addr if addr < lo or addr >= hi else hi, "ca"))
        return min(hits) if hits else None

    async def _complete(self, r: _Read) -> None:
        """Send r's next completion. The bytes before an error range complete normally (up to
        the RCB boundary before it); the completion that reaches it is UR / CA (ending the
        request), poisoned, never sent with nothing after it (drop: the requester's completion
        timeout), or never sent while the rest of the request is (lose)."""
        tlp = r.tlp
        n = self._piece(r)
        bad = self._first_bad(r.addr, n)
        if bad is not None and bad[0] > r.addr:
            clean = (bad[0] // self.cfg.rcb) * self.cfg.rcb - r.addr
            if clean > 0:
                n, bad = clean, None
        kind = bad[1] if bad is not None else None
        if kind in ("ur", "ca"):
            self._reads.remove(r)
            cpl = (Tlp.create_ur_completion_for_tlp if kind == "ur"
                   else Tlp.create_ca_completion_for_tlp)(tlp, PcieId(0, 0, 0))
            cpl.byte_count = r.end - r.addr
            cpl.lower_address = r.addr & 0x7F
            await self.send(cpl)
            return
        if kind == "drop":
            self._reads.remove(r)
            return
        r.first = False
        if kind == "lose":
            self.lost += 1
            r.addr += n
            if r.addr >= r.end:
                self._reads.remove(r)
            return
        if r.cpl is None:                 # (a Tlp_us: the hard IP model takes it as it is)
            r.cpl = Tlp_us.create_completion_data_for_tlp(tlp, PcieId(0, 0, 0))
        cpl = object.__new__(Tlp_us)      # copy.copy(r.cpl), without its reduce protocol
        cpl.__dict__.update(r.cpl.__dict__)
        cpl.byte_count = r.end - r.addr
        cpl.lower_address = r.addr & 0x7F
        a0 = r.addr & ~3
        a1 = (r.addr + n + 3) & ~3
        if self.host.contains(a0, a1 - a0):
            cpl.set_data(bytes(self.host.view(a0, a1 - a0)))
        else:
            cpl.set_data(bytes(r.addr - a0) + self.host.read(r.addr, n) + bytes(a1 - r.addr - n))
        if kind == "poison":
            cpl.ep = True
        r.addr += n
        if r.addr >= r.end:
            self._reads.remove(r)
        last = self._last
        if last is not None and last is not r and last.addr < last.end:
            self.interleaved += 1
        self._last = r
        self.completions += 1
        if self.link is not None:
            await self.link.down.send(cpl)   # (what downstream_send does with a completion)
        else:
            await self.send(cpl)


class PcieLink:
    """The hard IP model on ``dut`` (card_top_pcie), a link to a HostRootComplex, enumeration."""

    def __init__(self, dut, host: HostMemory, config: HostLinkConfig | None = None,
                 link: str = pcie.DEFAULT_LINK, mps: int = 256, mrrs: int = 512,
                 cpl_timeout_ns: int | None = None, link_model: str = "ideal",
                 straddle: bool = pcie.STRADDLE, rc_4tlp: bool = True) -> None:
        if link_model not in LINK_MODELS:
            raise ValueError(f"link model {link_model!r}: expected one of {LINK_MODELS}")
        gen, width = pcie.LINK_CONFIGS[link]
        self.dut = dut
        self.host = host
        self.gen, self.width = gen, width
        self.mps, self.mrrs = mps, mrrs
        self.rc = HostRootComplex(host, config)
        # the root's max payload is the link's: its completions are at most MPS
        self.rc.max_payload_size_supported = pcie.payload_code(pcie.MAX_PAYLOAD_SUPPORTED)
        self.rc.max_payload_size = pcie.payload_code(mps)
        self.dev = CardPcieDevice(
            pcie_generation=gen, pcie_link_width=width,
            user_clk_frequency=pcie.USER_CLK_MHZ * 1e6, alignment="dword",
            # requester straddling as card_top_pcie's STRADDLE: RQ 2 TLPs a beat, RC 4 (or 2)
            rq_straddle=straddle, rc_straddle=straddle, rc_4tlp_straddle=straddle and rc_4tlp,
            max_payload_size=pcie.MAX_PAYLOAD_SUPPORTED, enable_client_tag=True,
            enable_extended_tag=True,          # the engine's descriptor tag is 32
            pf0_msi_enable=False, pf0_msix_enable=True,
            pf0_msix_table_size=pcie.MSIX_VECTORS - 1,
            pf0_msix_table_bir=pcie.BAR_MSIX.index,
            pf0_msix_table_offset=pcie.MSIX_TABLE_OFFSET,
            pf0_msix_pba_bir=pcie.BAR_MSIX.index, pf0_msix_pba_offset=pcie.MSIX_PBA_OFFSET,
            user_clk=dut.user_clk, user_reset=dut.user_reset,
            rq_bus=AxiStreamBus.from_prefix(dut, "m_axis_rq"),
            rc_bus=AxiStreamBus.from_prefix(dut, "s_axis_rc"),
            cq_bus=AxiStreamBus.from_prefix(dut, "s_axis_cq"),
            cc_bus=AxiStreamBus.from_prefix(dut, "m_axis_cc"),
            cfg_max_payload=dut.cfg_max_payload, cfg_max_read_req=dut.cfg_max_read_req,
            cfg_interrupt_msix_enable=dut.cfg_interrupt_msix_enable,
            cfg_interrupt_msix_mask=dut.cfg_interrupt_msix_mask,
            cpl_timeout_ns=cpl_timeout_ns)
        f = self.dev.functions[0]
        f.vendor_id = pcie.VENDOR_ID
        f.device_id = pcie.DEVICE_ID
        f.subsystem_vendor_id = pcie.SUBSYSTEM_VENDOR_ID
        f.subsystem_id = pcie.SUBSYSTEM_ID
        f.revision_id = pcie.REVISION_ID
        f.class_code = pcie.CLASS_CODE
        for bar in pcie.BARS:
            f.configure_bar(bar.index, bar.size)
        root_port = self.rc.make_port()
        root_port.connect(self.dev)
        self.link_model = link_model
        if link_model != "ideal" and self.rc.cfg.root_credits is not None:
            raise ValueError("HostLinkConfig.root_credits: the ideal link model only")
        self.wire = IdealLink(self.rc, root_port, self.dev) if link_model == "ideal" else None
        for name in ("cocotb.pcie", f"cocotb.{dut._name}"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.fn = None                    # the enumerated function (cocotbext's PciDevice)
        self.bar_addr: dict[int, int] = {}
        self.msix_counts = [0] * pcie.MSIX_VECTORS
        self._msix_pending: deque[int] = deque()
        self._msix_event = Event()
        self.info: dict = {}

    # -- bring-up ------------------------------------------------------------------------------
    async def enumerate(self) -> dict:
        """Enumerate, find the card by its IDs, assign BARs, set MPS/MRRS, enable bus mastering
        and MSI-X; returns what lspci would show."""
        # the hard IP's user reset ends 100 ns after start; the card's own reset follows.
        # The scan probes every device number and the bridges warn of each empty one: quiet
        # them for the scan only (the loggers below "cocotb.pcie" inherit its level)
        scan_log = logging.getLogger("cocotb.pcie")
        level = scan_log.level
        scan_log.setLevel(logging.ERROR)
        try:
            await self.rc.enumerate()
        finally:
            scan_log.setLevel(level)
        fn = None
        for d in _walk(self.rc.host_bridge.bus):
            if (d.vendor_id, d.device_id) == (pcie.VENDOR_ID, pcie.DEVICE_ID):
                fn = d
        if fn is None:
            raise RuntimeError(f"no device {pcie.VENDOR_ID:04x}:{pcie.DEVICE_ID:04x} on the bus")
        self.fn = fn
        await fn.enable_device()
        await fn.set_master()
        devctl = await fn.capability_read_word(PciCapId.EXP, 8)
        devctl = (devctl & ~(0x7 << 5) & ~(0x7 << 12) | pcie.payload_code(self.mps) << 5
                  | pcie.payload_code(self.mrrs) << 12)
        await fn.capability_write_word(PciCapId.EXP, 8, devctl)
        lnkctl = await fn.capability_read_word(PciCapId.EXP, 0x10)
        await fn.capability_write_word(PciCapId.EXP, 0x10, (lnkctl & ~(1 << 3))
                                       | ((self.rc.cfg.rcb == 128) << 3))
        n = await fn.alloc_irq_vectors(pcie.MSIX_VECTORS, pcie.MSIX_VECTORS, MSIX_FLAG)
        if n != pcie.MSIX_VECTORS:
            raise RuntimeError(f"MSI-X: {n} vectors enabled, expected {pcie.MSIX_VECTORS}")
        for i in range(pcie.MSIX_VECTORS):
            fn.request_irq(i, self._vector_handler(i))
        for bar in pcie.BARS:
            self.bar_addr[bar.index] = fn.bar_addr[bar.index]
        devctl = await fn.capability_read_word(PciCapId.EXP, 8)
        lnksta = await fn.capability_read_word(PciCapId.EXP, 0x12)
        port = self.dev.upstream_port
        # Link Status, or what the link trained to when the model leaves Link Status at 0
        speed = (lnksta & 0xF) or port.cur_link_speed
        width = ((lnksta >> 4) & 0x3F) or port.cur_link_width
        self.info = {
            "address": str(fn.pcie_id), "vendor_id": fn.vendor_id, "device_id": fn.device_id,
            "class_code": fn.class_code, "revision": fn.revision_id,
            "subsystem": (fn.subsystem_vendor_id, fn.subsystem_id),
            "bars": [(b, fn.bar_addr[b], fn.bar_size[b]) for b in range(6) if fn.bar_size[b]],
            "link_speed_gts": {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}[speed],
            "link_width": width,
            "msix_vectors": n, "mps": 128 << ((devctl >> 5) & 7),
            "mrrs": 128 << ((devctl >> 12) & 7), "rcb": self.rc.cfg.rcb,
        }
        return self.info

    def _vector_handler(self, i: int):
        async def handler() -> None:
            self.msix_counts[i] += 1
            self._msix_pending.append(i)
            self._msix_event.set()
        return handler

    # -- MMIO and interrupts --------------------------------------------------------------------
    async def bar_read(self, bar: int, offset: int) -> int:
        return await self.fn.bar_window[bar].read_dword(offset)

    async def bar_write(self, bar: int, offset: int, value: int) -> None:
        await self.fn.bar_window[bar].write_dword(offset, value)

    def take_vectors(self) -> list[int]:
        out = list(self._msix_pending)
        self._msix_pending.clear()
        return out

    async def wait_vector(self, timeout_ns: int) -> bool:
        if self._msix_pending:
            return True
        self._msix_event.clear()
        await First(self._msix_event.wait(), Timer(timeout_ns, unit="ns"))
        return bool(self._msix_pending)

    def tlp_bound(self, payload: int, header: int) -> float:
        """Bytes/s of payload a direction carries in TLPs of ``payload`` bytes: link rate x
        payload / (payload + header + 8) (the 8: sequence number, LCRC, framing)."""
        rate = PCIE_GEN_RATE[self.gen] * self.width / 8
        return rate * payload / (payload + header + 8)


def _walk(bus):
    """Every device on a PciBus and the buses below it."""
    yield from bus.devices
    for child in bus.children:
        yield from _walk(child)


async def wait_link_reset(dut) -> None:
    """Wait until the hard IP's user reset has ended."""
    while int(dut.user_reset.value) if dut.user_reset.value.is_resolvable else True:
        await RisingEdge(dut.user_clk)


__all__ = ["CardPcieDevice", "HostLinkConfig", "HostRootComplex", "PcieLink", "Queue",
           "wait_link_reset"]

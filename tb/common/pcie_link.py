"""The PCIe link of RtlCard(link="pcie"): cocotbext-pcie's UltraScale+ hard IP in front of
card_top_pcie, on a simulated link to a root complex whose host memory is a HostMemory.

Two classes extend the package (site-packages is never patched):

- :class:`CardPcieDevice` (an ``UltraScalePlusPcieDevice``): the package's model runs several
  coroutines on every user clock (completer request, configuration status, control, interrupt
  and sequence-number logic). Here they wait on events instead (a completer request, a
  configuration write), so no Python runs per clock while the link is idle. It also implements
  the hard IP's completion timeout, which the package leaves out: a read whose last completion
  has not been handed to the card within ``pcie.CPL_TIMEOUT_US`` (never sent, or dropped by the
  hard IP itself) is completed on the RC stream with error code TIMEOUT and its tag released.
  It counts what the package only logs: completions dropped because the receive buffer was full
  (``rx_overflows``), and the buffer's peak occupancy in headers and data credits.
- :class:`HostRootComplex` (a ``RootComplex``): the package serves each memory read at once and
  in order, all of it before the next. Here reads wait a configurable latency (by default
  500 ns plus a spread of up to 200 ns per read, as a host's memory answers: with one fixed
  latency reads would become ready in the order they came and be completed in order), many
  are in flight, completions of different tags are returned in any order and interleaved
  (a random pick among the reads that are ready whenever the link takes a completion), and each
  read is split at the read completion boundary (into ``cpl_split``-byte pieces, or as large as
  the max payload size allows). Host memory is served straight from the HostMemory's numpy array;
  address ranges can answer Unsupported Request, Completer Abort, poisoned data, nothing at all
  from there on (``drop``: a completion timeout), or lose the one completion that reaches them
  while the rest of the read is still sent (``lose``). Writes to the MSI-X message address
  arrive as vector events.

:class:`PcieLink` builds both, enumerates the bus as a host would (BARs, bus mastering, MSI-X,
max payload and read request sizes in Device Control) and gives RtlCard its MMIO and interrupts.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.queue import Queue
from cocotb.triggers import Event, First, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus
from cocotbext.pcie.core import RootComplex
from cocotbext.pcie.core.caps import PciCapId
from cocotbext.pcie.core.port import PCIE_GEN_RATE
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpType
from cocotbext.pcie.core.utils import PcieId
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice
from cocotbext.pcie.xilinx.us.tlp import ErrorCode, Tlp_us
from cocotbext.pcie.xilinx.us.usp_model import LocalError

from pyhost.backend import HostMemory
from pyhost.spec import pcie

PAGE = 4096
_READS = (TlpType.MEM_READ, TlpType.MEM_READ_64)
_WRITES = (TlpType.MEM_WRITE, TlpType.MEM_WRITE_64)
_CFG_WRITES = (TlpType.CFG_WRITE_0,)
MSIX_FLAG = 4   # PCI_IRQ_MSIX of cocotbext.pcie.core.pci


class CardPcieDevice(UltraScalePlusPcieDevice):
    """The UltraScale+ hard IP model with event-driven configuration logic (see module doc)."""

    def __init__(self, *args, cpl_timeout_ns: int | None = None, **kwargs) -> None:
        self._cfg_changed = Event()
        self.cpl_timeout_ns = cpl_timeout_ns or pcie.CPL_TIMEOUT_US * 1000
        self.timeouts = 0
        self.rx_overflows = 0                # completions dropped: receive buffer full
        self.rx_peak = (0, 0)                # peak occupancy: headers, data credits
        self._awaiting: dict[int, object] = {}   # tag -> read whose last completion is due
        super().__init__(*args, **kwargs)
        assert (self.rx_buf_cplh_fc_limit, self.rx_buf_cpld_fc_limit) == (
            pcie.RC_BUFFER_CPLH, pcie.RC_BUFFER_CPLD), "pyhost.spec.pcie's buffer is the model's"
        cocotb.start_soon(self._count_local_errors())
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

    async def _run_rq_seq_num_logic(self) -> None:
        while True:                          # sequence numbers are not wired: discard them
            await self.rq_seq_num.get()

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

    async def _run_rc_logic(self) -> None:
        # the package's loop, plus the peak occupancy and which reads the card has seen end
        while True:
            tlp = await self.rc_queue.get()
            self.rx_peak = (max(self.rx_peak[0], self.rx_buf_cplh_fc_count),
                            max(self.rx_peak[1], self.rx_buf_cpld_fc_count))
            await self.rc_source.send(tlp.pack_us_rc())
            if tlp.request_completed:
                self._awaiting.pop(tlp.tag, None)
            self.rx_buf_cplh_fc_count = max(self.rx_buf_cplh_fc_count - 1, 0)
            self.rx_buf_cpld_fc_count = max(
                self.rx_buf_cpld_fc_count - (tlp.get_data_credits() + 1), 0)

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
        await super().upstream_recv(tlp)
        if tlp.fmt_type in _CFG_WRITES:
            self._cfg_changed.set()

    # -- completion timeout -------------------------------------------------------------------
    async def send(self, tlp) -> None:
        if tlp.fmt_type in _READS:
            req = self.active_request[tlp.tag]
            if req is not None:
                self._awaiting[tlp.tag] = req
                cocotb.start_soon(self._cpl_timer(tlp.tag, req))
        await super().send(tlp)

    async def _cpl_timer(self, tag: int, req) -> None:
        await Timer(self.cpl_timeout_ns, unit="ns")
        if self._awaiting.get(tag) is not req:
            return                           # its last completion reached the card
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


@dataclass
class _Read:
    tlp: object
    addr: int                         # next byte to complete
    end: int
    ready_at: int                     # ps
    seq: int
    first: bool = True


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
        self.register_rx_tlp_handler(TlpType.MEM_READ, self._mem_read)
        self.register_rx_tlp_handler(TlpType.MEM_READ_64, self._mem_read)
        self.register_rx_tlp_handler(TlpType.MEM_WRITE, self._mem_write)
        self.register_rx_tlp_handler(TlpType.MEM_WRITE_64, self._mem_write)
        self.read_completion_boundary = self.cfg.rcb == 128
        cocotb.start_soon(self._serve())

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

    # -- requests from the card -----------------------------------------------------------------
    async def _mem_read(self, tlp) -> None:
        for fn in self.listeners:
            fn(tlp)
        start = tlp.address + tlp.get_first_be_offset()
        n = tlp.get_be_byte_count()
        now = get_sim_time("ps")
        delay = self.cfg.read_latency_ns + (self.rng.randint(0, self.cfg.jitter_ns)
                                            if self.cfg.jitter_ns else 0)
        self._seq += 1
        self._reads.append(_Read(tlp, start, start + n, now + delay * 1000, self._seq))
        self.reads += 1
        self.max_in_flight = max(self.max_in_flight, len(self._reads))
        self._wake.set()

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

    async def _serve(self) -> None:
        while True:
            if not self._reads:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = get_sim_time("ps")
            ready = [r for r in self._reads if r.ready_at <= now]
            if not ready:
                first = min(r.ready_at for r in self._reads)
                self._wake.clear()
                await First(Timer(first - now, unit="ps"), self._wake.wait())
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
        cpl = Tlp.create_completion_data_for_tlp(tlp, PcieId(0, 0, 0))
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
        await self.send(cpl)


class PcieLink:
    """The hard IP model on ``dut`` (card_top_pcie), a link to a HostRootComplex, enumeration."""

    def __init__(self, dut, host: HostMemory, config: HostLinkConfig | None = None,
                 link: str = pcie.DEFAULT_LINK, mps: int = 256, mrrs: int = 512,
                 cpl_timeout_ns: int | None = None, straddle: bool = pcie.STRADDLE,
                 rc_4tlp: bool = True) -> None:
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
        self.rc.make_port().connect(self.dev)
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

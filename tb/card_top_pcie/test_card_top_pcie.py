"""System bench for card_top_pcie: the card as a PCIe endpoint behind cocotbext-pcie's
UltraScale+ hard IP model, a link and a root complex; the real driver on top, unchanged.

Enumeration (IDs, class, BAR sizes, MSI-X, link; Gen3 x16 and Gen4 x8), MMIO of every register
against ModelCard, unmapped BAR offsets, MSI-X on every interrupt source, the shared driver
program and accelerator programs, the demo CNN bit for bit against ModelCard, the request limits
crossed with offsets and lengths under a monitor of every request TLP (and of every RQ beat:
StraddleMonitor), completions out of order, split and delayed, and the link's error completions;
the requester streams straddled as the build says (card_top_pcie STRADDLE, the hard IP
alike); the DDR4 timing monitor checks every command of the card's DRAM controller, as on
card_top. Each test picks its host behaviour
(HOSTS): "ooo" (500 ns, jittered, out of order, split at MPS), "split64" / "split128"
(completions of 64 / 128 bytes at that RCB), "default" (HostLinkConfig's defaults: what make sim
and the benchmarks run on); CARD_TB_HOST replaces "ooo" where a test runs on it (e.g.
"inorder": in order, no jitter).
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.task import bridge
from cocotb.triggers import Timer
from cocotbext.pcie.core.dllp import FcType
from cocotbext.pcie.core.tlp import TlpType

from pyhost.backend import HostMemory
from pyhost.driver import AccelRunError, DmaTransferError
from pyhost.model_card import ModelCard
from pyhost.spec import isa, pcie, regs
from pyhost.spec.isa import AccelError
from pyhost.spec.regs import Channel, DmaError
from tb.card_top import accel_program, driver_program
from tb.card_top.test_card_top import run_host
from tb.common.clocking import reset, start_clock
from tb.common.pcie_card import MmioUnsupportedRequest, PcieOptions
from tb.common.pcie_link import HostLinkConfig
from tb.common.rtl_card import RtlCard
from tb.dram_ctrl.monitor import Ddr4Monitor

PAGE = 4096
#: The driver's descriptor size on this bench: 64 KiB (the driver's default is 1 MiB). The checks
#: whose multi-descriptor cases are two chunks long (copies, batches) then move 128 KiB instead
#: of 2 MiB over the link, through the same code paths (the AXI card runs them at 1 MiB).
CHUNK_BYTES = 64 << 10
#: check_alignment on the link: what the link's byte enables and realignment see, the host
#: offsets at every byte of a DWORD and at the page's end, lengths of one byte, across a line
#: and across two page boundaries from the page's end (4098), with an unaligned card offset (the
#: card side of a transfer is the engine's, the same behind both links, which the AXI card
#: sweeps at every edge offset): 18 cases each way. The limits cases add offsets 3 / 4093 x
#: lengths 1000 / 5000 at six MPS / MRRS settings.
LINK_ALIGNMENT = {"host_offsets": (0, 1, 2, 3, 4092, 4095), "lengths": (1, 65, 4098),
                  "card_offsets": (61,)}
#: check_chains on the link: chains of 1, 2, 17 and 64 transfers (the AXI card runs up to 256;
#: what the link sees, descriptor fetches and small unaligned reads and writes of many tags
#: with one doorbell and one MSI-X per chain, a 64-descriptor chain has as well).
LINK_CHAINS = (1, 2, 17, 64)
#: Driver checks the link leaves to the AXI card: check_copy_on_card's copies never leave the
#: card (card_core's engine and DRAM, the same behind both links; the link carries only its
#: doorbells and interrupts, which every other check has), as the AXI card's out-of-order
#: host run leaves them to its in-order run.
CARD_ONLY_CHECKS = ("check_copy_on_card",)
LINK_CHECKS = tuple(c for c in driver_program.ALL_CHECKS if c.name not in CARD_ONLY_CHECKS)

HOSTS = {
    "default": HostLinkConfig(),
    "ooo": HostLinkConfig(read_latency_ns=500, jitter_ns=300, out_of_order=True, seed=7),
    "split64": HostLinkConfig(read_latency_ns=500, jitter_ns=200, rcb=64, cpl_split=64, seed=3),
    "split128": HostLinkConfig(read_latency_ns=700, jitter_ns=0, rcb=128, cpl_split=128, seed=5),
    "inorder": HostLinkConfig(read_latency_ns=200, jitter_ns=0, out_of_order=False),
    # one fixed latency, in order: small reads ready while a large one's completions go out
    # follow them back to back (several completions per RC beat)
    "burst": HostLinkConfig(read_latency_ns=500, jitter_ns=0, out_of_order=False),
    # the abort check: the driver polls BUSY after RESET against a wall-clock deadline (0.5 s),
    # and the drain waits for the reads in flight; a short latency keeps that within it
    "fast": HostLinkConfig(read_latency_ns=100, jitter_ns=50, out_of_order=True, seed=9),
    # few credits at the root port: 4 posted headers / 64 data credits (four 256-byte writes),
    # 2 non-posted headers: the card's requests wait for the root's UpdateFCs
    "credits": HostLinkConfig(read_latency_ns=300, jitter_ns=100, seed=11,
                              root_credits=(4, 64, 2, 2)),
}


def params() -> dict[str, int]:
    return {"MEM_SIZE": 1 << 30, **json.loads(os.environ.get("CARD_TB_PARAMS", "{}"))}


class RequestMonitor:
    """Fails on any request TLP the card sends that is longer than the link's limits or crosses
    a 4 KiB boundary (every TLP of the RQ stream reaches the root complex)."""

    def __init__(self, rc, dut=None) -> None:
        self.rc = rc
        self.dut = dut
        self.mps = self.mrrs = 4096
        self.errors: list[str] = []
        self.count = {"read": 0, "write": 0}
        self.largest = {"read": 0, "write": 0}
        rc.listeners.append(self._tlp)

    def _tlp(self, tlp) -> None:
        read = tlp.fmt_type in (TlpType.MEM_READ, TlpType.MEM_READ_64)
        kind = "read" if read else "write"
        n = tlp.get_be_byte_count()
        addr = tlp.address + tlp.get_first_be_offset()
        limit = self.mrrs if read else self.mps
        self.count[kind] += 1
        self.largest[kind] = max(self.largest[kind], n)
        if tlp.length * 4 > limit:
            self.errors.append(f"{kind} TLP at {addr:#x}: {tlp.length * 4} bytes > {limit} "
                               f"({tlp.fmt_type!r}, BE {tlp.first_be:x}/{tlp.last_be:x}, "
                               f"engine MPS {self.engine_limits()})")
        if tlp.address // PAGE != (tlp.address + tlp.length * 4 - 1) // PAGE:
            self.errors.append(f"{kind} TLP at {addr:#x} of {n} bytes crosses 4 KiB")

    def engine_limits(self) -> str:
        try:
            e = self.dut.core.dma.engine
            return f"{int(e.mps.value)}/{int(e.mrrs.value)}"
        except (AttributeError, ValueError):
            return "?"

    def check(self) -> None:
        assert not self.errors, "request TLP rule violations: " + "; ".join(self.errors[:5])


class StraddleMonitor:
    """The requester streams beat by beat, as the hard IP model samples and drives them.

    RQ (every beat the hard IP takes): with straddling, PG213's rules as the model reads them:
    at most two TLPs a beat, the first from DWORD 0 and a second only from DWORD 8 after a TLP
    that ended in DWORDs 0..7, is_sop / is_eop and their pointers consistent with the TLPs in
    flight, tkeep exactly the TLPs' DWORDs, discontinue only in a beat of one TLP; without it, one
    TLP per run of beats (tlast, no is_sop / is_eop). In both, each TLP rebuilt from its beats:
    as many DWORDs as its descriptor says (4, plus the payload of a write), no longer than MPS /
    MRRS, not across 4 KiB. So the request monitor at the root (RequestMonitor) sees what the card
    sent. Counts the beats shared by two TLPs (RQ), and on RC the beats by the TLPs in them and
    the segments (4 DWORDs) TLPs start at, as the RC stream counts them where it drives them
    (RcStream.stats: the C++ player's beats never pass through Python)."""

    def __init__(self, dev, straddle: bool, limits) -> None:
        self.straddle = straddle
        self.limits = limits                     # the RequestMonitor (mps, mrrs)
        self.errors: list[str] = []
        self.rq_beats = self.rq_shared = self.rq_tlps = 0
        self._rc = dev.rc_source
        self._tlp: list[int] | None = None       # DWORDs of the RQ TLP in flight
        self._disc = False
        assemble = dev.rq_sink._assemble

        def rq_beat(tdata: int, tkeep: int, tuser: int, tlast: int) -> None:
            assemble(tdata, tkeep, tuser, tlast)
            self._rq(tdata, tkeep, tlast, tuser)
        dev.rq_sink._assemble = rq_beat          # (RqStream: each beat the card hands over)

    @property
    def rc_tlps(self) -> list[int]:
        """RC beats by the TLPs they carry (a part of), 0..4 (the RC stream's count)."""
        return self._rc.stats()[0]

    @property
    def rc_starts(self) -> set[int]:
        """The segments (4 DWORDs) RC TLPs started in."""
        return self._rc.stats()[1]

    @property
    def rc_beats(self) -> int:
        return sum(self.rc_tlps)

    def _error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"RQ beat {self.rq_beats}: {text}")

    def _rq(self, data: int, keep: int, last: int, user: int) -> None:
        self.rq_beats += 1
        sop, eop = (user >> 20) & 3, (user >> 26) & 3
        disc = (user >> 36) & 1
        starts, ends = set(), set()
        if self.straddle:
            if sop == 2 or eop == 2:
                self._error(f"is_sop {sop:02b} / is_eop {eop:02b}: the second without the first")
            for k in range(2):
                if sop >> k & 1:
                    starts.add(4 * ((user >> (22 + 2 * k)) & 3))
                if eop >> k & 1:
                    ends.add((user >> (28 + 4 * k)) & 0xF)
            if not starts <= {0, 8}:
                self._error(f"a TLP starts at DWORD {sorted(starts)} (0 or 8 only)")
            if len(ends) != bin(eop).count("1") or len(starts) != bin(sop).count("1"):
                self._error("two is_sop or is_eop pointers at one DWORD")
        else:
            if sop or eop:
                self._error("is_sop / is_eop without straddling")
            if self._tlp is None:
                starts.add(0)
            if last:
                ends.add(keep.bit_length() - 1)
        lanes, tlps = 0, 0
        for lane in range(16):
            if lane in starts:
                if self._tlp is not None:
                    self._error(f"a TLP starts at DWORD {lane} inside another")
                if lane == 8 and self.straddle and not (lanes & 0xFF):
                    self._error("a TLP at DWORD 8 after an empty DWORD 0..7")
                self._tlp, self._disc = [], False
                tlps += 1
                self.rq_tlps += 1
            if self._tlp is not None:
                lanes |= 1 << lane
                self._tlp.append((data >> (32 * lane)) & 0xFFFFFFFF)
                if lane == 0 and lane not in starts:
                    tlps += 1                    # a TLP from an earlier beat
            if lane in ends:
                if self._tlp is None:
                    self._error(f"a TLP ends at DWORD {lane} outside any")
                else:
                    self._disc |= bool(disc)
                    self._check_tlp(self._tlp)
                self._tlp = None
        if self._tlp is not None:
            self._disc |= bool(disc)
        if keep != lanes:
            self._error(f"tkeep {keep:04x}, the TLPs' DWORDs {lanes:04x}")
        if tlps > 1:
            self.rq_shared += 1
            if disc:
                self._error("discontinue in a beat of two TLPs")

    def _check_tlp(self, dw: list[int]) -> None:
        if self._disc:
            return                               # abandoned: the hard IP drops it
        if len(dw) < 4:
            self._error(f"a TLP of {len(dw)} DWORDs")
            return
        count, kind = dw[2] & 0x7FF, (dw[2] >> 11) & 0xF
        count = count or 1024
        write = kind == 1
        want = 4 + (count if write else 0)
        if len(dw) != want:
            self._error(f"a {'write' if write else 'read'} of {count} DWORDs in {len(dw)} "
                        f"DWORDs (want {want})")
        addr = (dw[1] << 32 | dw[0]) & ~3
        limit = self.limits.mps if write else self.limits.mrrs
        if 4 * count > limit:
            self._error(f"a TLP of {4 * count} bytes at {addr:#x} > {limit}")
        if addr // PAGE != (addr + 4 * count - 1) // PAGE:
            self._error(f"a TLP of {4 * count} bytes at {addr:#x} crosses 4 KiB")

    def check(self) -> None:
        assert not self.errors, "RQ beats: " + "; ".join(self.errors[:5])

    def summary(self) -> str:
        return (f"RQ {self.rq_beats} beats, {self.rq_tlps} TLPs, {self.rq_shared} beats of two; "
                f"RC {self.rc_beats} beats, by TLPs in them (0..4) {self.rc_tlps}, TLPs starting "
                f"at segments {sorted(self.rc_starts)}")


class TB:
    def __init__(self, dut, host: str = "ooo", mps: int = 256, mrrs: int = 512,
                 cpl_timeout_ns: int | None = None, link: str = pcie.DEFAULT_LINK,
                 rc_4tlp: bool = True) -> None:
        self.dut = dut
        start_clock(dut)
        # CARD_TB_HOST replaces the out-of-order host in the tests that run on it
        self.host_name = (os.environ.get("CARD_TB_HOST") or host) if host == "ooo" else host
        cfg = HOSTS[self.host_name]
        # the build's requester straddling (card_top_pcie STRADDLE), the hard IP's alike; the
        # RC two-TLP mode where a test asks for it
        self.straddle = bool(params().get("STRADDLE", pcie.STRADDLE))
        opts = PcieOptions(link=link, mps=mps, mrrs=mrrs, host=HostLinkConfig(**vars(cfg)),
                           cpl_timeout_ns=cpl_timeout_ns, straddle=self.straddle,
                           rc_4tlp=rc_4tlp)
        if cfg.root_credits is not None:
            opts.link_model = "ideal"     # (the credits the root advertises: that model's)
        self.card = RtlCard(dut, HostMemory(32 << 20), link="pcie", pcie=opts,
                            irq_timeout_ns=2_000_000)
        self.link = self.card.pcie.link
        self.monitor = RequestMonitor(self.link.rc, dut)
        self.monitor.mps, self.monitor.mrrs = mps, mrrs
        self.beats = StraddleMonitor(self.link.dev, self.straddle, self.monitor)
        self.ddr4 = Ddr4Monitor.for_card(dut)

    async def reset(self) -> None:
        await reset(self.dut)
        self.ddr4.start()

    def dram_columns(self) -> int:
        """Column commands (RD, WR) the DDR4 monitor has checked so far."""
        return self.ddr4.checker.counts["RD"] + self.ddr4.checker.counts["WR"]

    def check(self) -> None:
        """The request monitor's rules, and the hard IP's completion buffer never overflowed
        (the requester's header and data budget); the RQ beats' rules (StraddleMonitor)."""
        cocotb.log.info("streams: %s", self.beats.summary())
        self.monitor.check()
        self.beats.check()
        dev = self.link.dev
        assert dev.rx_overflows == 0, (
            f"{dev.rx_overflows} completions dropped: the hard IP's completion buffer overflowed "
            f"(peak {dev.rx_peak[0]} headers / {dev.rx_peak[1]} data credits of "
            f"{pcie.RC_BUFFER_CPLH} / {pcie.RC_BUFFER_CPLD})")

    async def host(self, fn, *args, **kwargs):
        """Run blocking host code ``fn(driver, ...)`` on the card (card_top's run_host)."""
        return await run_host(self.card, self.ddr4, CHUNK_BYTES, fn, *args, **kwargs)


@cocotb.test(timeout_time=50, timeout_unit="ms")
@cocotb.parametrize(link=list(pcie.LINK_CONFIGS))
async def test_enumeration(dut, link: str) -> None:
    """The root complex finds the card by its IDs, sizes its BARs, enables MSI-X; the link
    trains to the configured generation and width (Gen3 x16, Gen4 x8); a DMA round trip
    works on it."""
    tb = TB(dut, link=link)
    await tb.reset()
    info = await tb.card.pcie.up()
    assert (info["vendor_id"], info["device_id"]) == (pcie.VENDOR_ID, pcie.DEVICE_ID), info
    assert info["class_code"] == pcie.CLASS_CODE, info
    sizes = {b: s for b, _, s in info["bars"]}
    assert sizes == {b.index: b.size for b in pcie.BARS}, f"BAR sizes {sizes}"
    assert info["msix_vectors"] == pcie.MSIX_VECTORS, info
    gen, width = pcie.LINK_CONFIGS[link]
    speed = {3: 8.0, 4: 16.0}[gen]
    assert (info["link_speed_gts"], info["link_width"]) == (speed, width), info
    assert (info["mps"], info["mrrs"]) == (256, 512), info
    assert await tb.card.pcie.mmio_read(regs.offset("CARD_ID")) == regs.CARD_ID

    def round_trip(drv) -> None:
        src, dst = drv.host.alloc(3 * PAGE), drv.host.alloc(3 * PAGE)
        src.write(bytes((i * 7 + 3) & 0xFF for i in range(3 * PAGE)))
        drv.write_data(src.address + 5, 2 * PAGE + 100, 0x40)
        drv.read_data(0x40, 2 * PAGE + 100, dst.address + 5)
        assert dst.read(5, 2 * PAGE + 100) == src.read(5, 2 * PAGE + 100), "round trip differs"
    await tb.host(round_trip)
    tb.check()


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_mmio_every_register(dut) -> None:
    """Every register reads as on ModelCard; every RW register takes a pattern and reads it
    back as on ModelCard (MMIO as memory read/write TLPs through the completer bridge)."""
    tb = TB(dut)
    await tb.reset()
    model = ModelCard(params()["MEM_SIZE"], accel=None)
    skip = {"IRQ_STATUS"}
    rw = [r for r in regs.REGISTERS if r.access == regs.Access.RW and r.name not in skip]

    def program(card) -> list[tuple[str, int]]:
        out = [(r.name, card.mmio_read(r.offset)) for r in regs.REGISTERS
               if not r.name.startswith("ACC_")]
        for i, r in enumerate(rw):
            if r.name.startswith("ACC_"):
                continue
            # the request limits take valid values (the RTL keeps only their bits)
            value = {"DMA_MPS": 512, "DMA_MRRS": 1024, "DMA_TAGS": 16}.get(
                r.name, (0x5A5A0F0F ^ (i * 0x01010101)) & 0xFFFFFFFF)
            card.mmio_write(r.offset, value)
            out.append((r.name, card.mmio_read(r.offset)))
        return out

    got = await bridge(program)(tb.card)
    want = program(model)
    # the models differ only where ModelCard has no accelerator: CAPS.ACCEL
    diff = [(g, w) for g, w in zip(got, want, strict=True) if g != w and g[0] != "CAPS"]
    assert not diff, f"RTL (PCIe) vs ModelCard: {diff[:6]}"


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_unmapped_bar_offsets(dut) -> None:
    """A read of an unmapped BAR offset completes Unsupported Request (MmioUnsupportedRequest);
    a write there is dropped; the card answers normally afterwards."""
    tb = TB(dut)
    await tb.reset()
    p = tb.card.pcie
    for bar, off in ((pcie.BAR_REGS.index, regs.BAR0_SIZE), (pcie.BAR_REGS.index, 0xFFFC),
                     (pcie.BAR_MSIX.index, 0x400), (pcie.BAR_MSIX.index, 0xFFC)):
        try:
            await p.bar_read(bar, off)
        except MmioUnsupportedRequest:
            pass
        else:
            raise AssertionError(f"BAR{bar} offset {off:#x} read did not fail")
        await p.bar_write(bar, off, 0xDEADBEEF)
    assert await p.mmio_read(regs.offset("CARD_ID")) == regs.CARD_ID
    await p.mmio_write(regs.offset("SCRATCH"), 0x1234)
    assert await p.mmio_read(regs.offset("SCRATCH")) == 0x1234
    # MSI-X table: read back what enumeration programmed, PBA empty
    assert await p.bar_read(pcie.BAR_MSIX.index, pcie.MSIX_TABLE_OFFSET + 8) == \
        tb.link.fn.msi_vectors[0].data
    assert await p.bar_read(pcie.BAR_MSIX.index, pcie.MSIX_PBA_OFFSET) == 0


def _msix_sources(drv) -> None:
    """Raise every interrupt source once: each DMA channel's done (a transfer) and error (bad
    magic), the accelerator's done (a program of END) and error (an illegal opcode)."""
    buf = drv.host.alloc(PAGE)
    for ch in Channel:
        if ch == Channel.H2C:
            drv.write_data(buf, 64, 0)
        elif ch == Channel.C2H:
            drv.read_data(0, 64, buf)
        else:
            drv.copy_on_card(0, 64, PAGE)
        try:
            drv.run_raw(ch, [driver_program.RawDescriptor(64, buf.address if ch == 0 else 0,
                                                         0 if ch != 1 else buf.address,
                                                         magic=0x1234)])
        except DmaTransferError as e:
            assert e.code == DmaError.BAD_MAGIC, e
        else:
            raise AssertionError("bad magic did not fail")
    drv.host.free(buf)
    drv.accel_run(drv.accel_load_program([isa.end()], 0x8000), None, accel_program.TIMEOUT_S)
    prog = drv.accel_load_program(b"\x00" * 16 + isa.encode(isa.end()), 0x8000, check=False)
    try:
        drv.accel_run(prog, None, accel_program.TIMEOUT_S)
    except AccelRunError as e:
        assert e.code == AccelError.ILLEGAL_OPCODE, e
    else:
        raise AssertionError("an illegal opcode did not fail the program")


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_msix_every_source(dut) -> None:
    """Each DMA channel's done and error, and the accelerator's done and error, arrive as
    their own MSI-X vector (vector i = IRQ_STATUS bit i)."""
    tb = TB(dut)
    await tb.reset()
    await tb.host(_msix_sources)
    tb.check()
    counts = tb.link.msix_counts
    assert all(c >= 1 for c in counts), (
        "vectors that never fired: "
        + ", ".join(n for n, c in zip(pcie.MSIX_VECTOR_NAMES, counts, strict=True) if not c))


@cocotb.test(timeout_time=300, timeout_unit="ms")
@cocotb.parametrize(check=[c.name for c in LINK_CHECKS])
async def test_driver_program(dut, check: str) -> None:
    """One check of the shared driver program on the PCIe card, every request TLP monitored."""
    tb = TB(dut, host="fast" if check == "check_abort" else "ooo")
    await tb.reset()
    fn = next(c.fn for c in LINK_CHECKS if c.name == check)

    def run(drv) -> None:
        limits = drv.request_limits()[:2]
        assert limits == (256, 512), f"the driver set {limits}, the link negotiated 256/512"
        if check == "check_alignment":
            fn(drv, **LINK_ALIGNMENT)
        elif check == "check_chains":
            fn(drv, reduced=True, chain_lengths=LINK_CHAINS)
        else:
            fn(drv, reduced=True)
    await tb.host(run)
    tb.check()
    assert tb.dram_columns() > 0 or check in ("check_card_info", "check_validation"), \
        "the DDR4 monitor saw no card memory access"
    rc = tb.link.rc
    if tb.host_name == "ooo" and rc.reads > 16:
        assert rc.reordered > 0, "the host never completed reads out of order"


@cocotb.test(timeout_time=300, timeout_unit="ms")
@cocotb.parametrize(check=[c.name for c in accel_program.ALL_CHECKS])
async def test_accel_program(dut, check: str) -> None:
    """One accelerator check program on the PCIe card (the programs card_top and ModelCard run:
    random programs against the functional model, GEMM and convolution against numpy, the
    accelerator's errors), every request TLP monitored."""
    tb = TB(dut)
    await tb.reset()
    fn = next(c.fn for c in accel_program.ALL_CHECKS if c.name == check)
    await tb.host(fn, reduced=True)
    tb.check()


class _WakeupCounter:
    """Counts the simulator's entries into Python (every GPI trigger that fires: clock edges a
    coroutine waits on, timers, value changes), for the idle-link check."""

    def __init__(self) -> None:
        from cocotb._gpi_triggers import GPITrigger

        self.count = 0
        self._cls = GPITrigger
        self._react = GPITrigger._react
        counter = self

        def react(trigger) -> None:
            counter.count += 1
            counter._react(trigger)
        GPITrigger._react = react

    def close(self) -> None:
        self._cls._react = self._react


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_idle_link_runs_no_python(dut) -> None:
    """While the accelerator computes and the link carries nothing, no Python runs per clock:
    a program 40,000 cycles longer than another costs a few more entries into Python (the
    link's 10 us flow-control timers, the host's wait), not one per card or user clock."""
    tb = TB(dut)
    await tb.reset()
    counter = _WakeupCounter()

    def prog(drv) -> list[tuple[int, int]]:
        out = []
        for outer in (4, 404, 4, 404):
            p = drv.accel_load_program([isa.gemm(outer=outer, inner=100), isa.end()], 0x8000)
            w0 = counter.count
            r = drv.accel_run(p, None, accel_program.TIMEOUT_S)
            out.append((r.cycles, counter.count - w0))
        return out
    try:
        runs = await tb.host(prog)
    finally:
        counter.close()
    (c_short, w_short), (c_long, w_long) = runs[2], runs[3]      # the first two warm up
    extra_cycles, extra_wakeups = c_long - c_short, w_long - w_short
    # (the card's own logger is quietened by PcieLink)
    cocotb.log.info("idle link: %d more accelerator cycles, %d more entries into Python",
                    extra_cycles, extra_wakeups)
    assert extra_cycles >= 39_000, runs
    assert extra_wakeups < extra_cycles // 200, (
        f"{extra_wakeups} entries into Python for {extra_cycles} cycles of compute with the "
        f"link idle: something runs per clock ({runs})")


@cocotb.test(timeout_time=2, timeout_unit="sec")
async def test_demo_model(dut) -> None:
    """The demo CNN end to end through the runtime on the PCIe card: bit-identical to the
    functional card of the same size, top-1 as onnxruntime (tb/card_top/test_card_models)."""
    from tb.card_top.test_card_models import _demo

    tb = TB(dut)
    await tb.reset()
    r = await tb.host(_demo)
    assert r["accel_steps"] == 4, r
    tb.check()


#: (MPS, MRRS, host) of test_request_limits: MPS 128..1024 and MRRS 128..4096; the two 4 KiB read
#: settings on the hosts that split every read into 64-byte and 128-byte completions (the RC
#: realignment of many small completions per tag, at both RCBs).
LIMITS = [(128, 128, "ooo"), (256, 4096, "split64"), (512, 256, "ooo"), (1024, 1024, "ooo"),
          (128, 2048, "ooo"), (1024, 4096, "split128")]


@cocotb.test(timeout_time=400, timeout_unit="ms")
@cocotb.parametrize(limits=LIMITS)
async def test_request_limits(dut, limits: tuple[int, int, str]) -> None:
    """The engine follows the link's MPS / MRRS (Device Control, read by the driver): host
    offsets x lengths both ways, no request TLP longer than allowed or across 4 KiB."""
    mps, mrrs, host = limits
    tb = TB(dut, host=host, mps=mps, mrrs=mrrs)
    await tb.reset()
    await tb.host(driver_program.check_alignment, lengths=(1000, 5000),
                  host_offsets=(3, 4093), card_offsets=(61,))
    tb.check()
    assert tb.monitor.largest["write"] <= mps and tb.monitor.largest["read"] <= mrrs
    assert tb.monitor.largest["write"] > mps // 2, tb.monitor.largest


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_completion_buffer(dut) -> None:
    """MRRS 4096 with a host that answers in 64-byte completions: 32 tags of 4 KiB reads would
    be 2,048 completions, eight times the hard IP's 256 completion headers, and the card drains
    its RC stream (two beats per 64-byte completion) slower than the link fills it. The
    requester's header and data budget keeps the buffer from overflowing: no completion is
    dropped, the data round trip is exact, the peak occupancy is within the buffer."""
    tb = TB(dut, host="split64", mps=256, mrrs=4096)
    await tb.reset()
    n = 128 << 10                 # 32 reads of 4 KiB: every tag

    def prog(drv) -> None:
        src, dst = drv.host.alloc(n + PAGE), drv.host.alloc(n + PAGE)
        data = bytes((i * 131 + (i >> 9)) & 0xFF for i in range(n))
        src.write(data, 0)
        drv.write_data(src, n, 0)
        drv.read_data(0, n, dst)
        assert dst.read(0, n) == data, "128 KiB round trip differs"
        drv.host.free(dst)
        drv.host.free(src)
    await tb.host(prog)
    dev = tb.link.dev
    cocotb.log.info("completion buffer: peak %d headers, %d data credits (of %d, %d); "
                    "%d completions, %d dropped", *dev.rx_peak, pcie.RC_BUFFER_CPLH,
                    pcie.RC_BUFFER_CPLD, tb.link.rc.completions, dev.rx_overflows)
    tb.check()
    assert tb.monitor.largest["read"] == 4096, tb.monitor.largest
    assert dev.rx_peak[0] <= pcie.RC_BUFFER_CPLH and dev.rx_peak[1] <= pcie.RC_BUFFER_CPLD


def streamed_round_trip(n: int, count: int, mul: int, shift: int, what: str):
    """A driver program: ``count`` transfers of ``n`` bytes to the card in one batch and back in
    another, the data (i * mul + (i >> shift)) mod 256 read back exact (``what`` if not)."""
    def prog(drv) -> None:
        src, dst = drv.host.alloc(count * n), drv.host.alloc(count * n)
        data = bytes((i * mul + (i >> shift)) & 0xFF for i in range(count * n))
        src.write(data, 0)
        drv.write_batch([(src.address + i * n, n, i * n) for i in range(count)])
        drv.read_batch([(i * n, n, dst.address + i * n) for i in range(count)])
        assert dst.read(0, count * n) == data, what
        drv.host.free(dst)
        drv.host.free(src)
    return prog


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_default_host_reorders(dut) -> None:
    """The host make sim and the benchmarks run on (HostLinkConfig's defaults: 500 ns plus a
    spread per read) really returns completions out of order across tags and interleaves them,
    with many reads in flight, while the card streams (a batch of 64 KiB transfers each way,
    read back exact). A host of one fixed latency completes every read in order."""
    tb = TB(dut, host="default")
    await tb.reset()
    await tb.host(streamed_round_trip(64 << 10, 2, 29, 12, "streamed round trip differs"))
    tb.check()
    rc = tb.link.rc
    cocotb.log.info("default host: %d reads, %d overtook an older one, %d of %d completions "
                    "interleaved, up to %d reads in flight", rc.reads, rc.reordered,
                    rc.interleaved, rc.completions, rc.max_in_flight)
    assert rc.reordered > rc.reads // 10, (
        f"{rc.reordered} of {rc.reads} reads completed out of order on the default host")
    assert rc.interleaved > 0, "the default host never interleaved completions of two reads"
    assert rc.max_in_flight >= 16, f"at most {rc.max_in_flight} reads in flight at the host"
    if tb.straddle:
        # streaming both ways packs TLPs: writes share RQ beats, completions RC beats
        b = tb.beats
        assert b.rq_shared > 0, f"no RQ beat carried two TLPs: {b.summary()}"
        assert sum(b.rc_tlps[2:]) > 0, f"no RC beat carried two TLPs: {b.summary()}"
        assert b.rc_starts & {1, 3}, f"no completion started at DWORD 4 or 12: {b.summary()}"


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_rc_two_tlp_straddle(dut) -> None:
    """The hard IP's two-TLP RC straddle (a completion from DWORD 0 or 8; the four-TLP mode is
    the default): 64-byte completions of 4 KiB reads (MRRS 4096, the split64 host) and the
    alignment cases, exact both ways. Without straddling the build has nothing to test here."""
    tb = TB(dut, host="split64", mps=256, mrrs=4096, rc_4tlp=False)
    await tb.reset()
    n = 64 << 10

    def prog(drv) -> None:
        src, dst = drv.host.alloc(n + PAGE), drv.host.alloc(n + PAGE)
        data = bytes((i * 53 + (i >> 10)) & 0xFF for i in range(n))
        src.write(data, 0)
        drv.write_data(src.address + 3, n - 5, 7)
        drv.read_data(7, n - 5, dst.address + 1)
        assert dst.read(1, n - 5) == data[3:n - 2], "64 KiB round trip differs"
        drv.host.free(dst)
        drv.host.free(src)
        driver_program.check_alignment(drv, lengths=(1, 1000), host_offsets=(0, 3, 4093),
                                       card_offsets=(61,))
    await tb.host(prog)
    tb.check()
    assert tb.link.dev.rc_source.seg_count == (2 if tb.straddle else 1)
    if tb.straddle:
        assert sum(tb.beats.rc_tlps[2:]) > 0, tb.beats.summary()
        assert tb.beats.rc_starts <= {0, 2}, tb.beats.summary()


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_rc_small_completions(dut) -> None:
    """Completions queued at the hard IP leave packed: the RC stream is paused 300 ns in every
    400 (a hard IP delivering in bursts) while the card moves a batch of one 4 KiB and 48 4-byte
    transfers each way (one-DWORD completions behind a 4 KiB read's, an in-order host of one
    latency, MRRS 4096): with straddling up to four completions start in one RC beat. Exact both
    ways; the completion buffer holds."""
    tb = TB(dut, host="burst", mps=256, mrrs=4096)
    await tb.reset()
    small = 48
    source = tb.link.dev.rc_source
    running = True

    async def bursts() -> None:
        while running:
            source.pause = True
            await Timer(300, unit="ns")
            source.pause = False
            await Timer(100, unit="ns")

    def prog(drv) -> None:
        src, dst = drv.host.alloc(4 * PAGE), drv.host.alloc(4 * PAGE)
        data = bytes((i * 97 + 5) & 0xFF for i in range(4 * PAGE))
        src.write(data, 0)
        for _ in range(2):
            jobs = [(src.address, PAGE, 0)] + [(src.address + PAGE + 68 * i, 4,
                                                PAGE + 64 * i) for i in range(small)]
            drv.write_batch(jobs)
            drv.read_batch([(c, n, dst.address + (a - src.address)) for a, n, c in jobs])
            for a, n, _ in jobs:
                o = a - src.address
                assert dst.read(o, n) == data[o:o + n], f"{n} bytes at {o:#x} differ"
        drv.host.free(dst)
        drv.host.free(src)
    pulse = cocotb.start_soon(bursts())
    try:
        await tb.host(prog)
    finally:
        running = False
        await pulse
    tb.check()
    if tb.straddle:
        assert tb.beats.rc_tlps[4] > 0, f"no RC beat of four completions: {tb.beats.summary()}"


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_flow_control(dut) -> None:
    """The root port advertises few credits (four posted headers and 64 data credits, two
    non-posted headers): the card's writes and reads wait on the link for the credits the root
    returns in its UpdateFCs (the hard IP holds them, the RQ stream backs up), and a streamed
    round trip is still exact."""
    tb = TB(dut, host="credits")
    await tb.reset()
    await tb.host(streamed_round_trip(16 << 10, 4, 53, 11,
                                      "round trip differs under flow control"))
    tb.check()
    stalls = tb.link.wire.up.fc_stalls
    cocotb.log.info("flow control: %s TLPs waited for credits (of %d sent by the card)",
                    {k.name: v for k, v in stalls.items()}, tb.link.wire.up.tlps)
    assert stalls[FcType.P] > 0 and stalls[FcType.NP] > 0, stalls


async def _error_case(dut, kind: str, host: str) -> None:
    tb = TB(dut, host=host, cpl_timeout_ns=20_000 if kind in ("drop", "lose") else None)
    await tb.reset()

    # where in the source the error is: the first completion of the read at PAGE (MRRS 512);
    # a lost one there is followed by the rest of the read, so lose also loses the read's last
    # completion (nothing follows it: the hard IP's completion timeout)
    ranges = [(PAGE, PAGE + 64)] + ([(PAGE + 448, PAGE + 512)] if kind == "lose" else [])

    def prog(drv) -> None:
        src = drv.host.alloc(2 * PAGE)
        src.write(bytes(range(256)) * 32)
        out = drv.host.alloc(2 * PAGE)
        for lo, hi in ranges:
            tb.card.pcie.inject(kind, src.address + lo, src.address + hi)
            try:
                drv.write_data(src, 2 * PAGE, 0)
            except DmaTransferError as e:
                assert e.code == DmaError.SRC_READ and e.channel == Channel.H2C, e
            else:
                raise AssertionError(f"a {kind} completion at {lo:#x} did not fail the transfer")
            tb.card.pcie.clear_errors()
            drv.write_data(src, 2 * PAGE, 0x1000)      # works again after the error
            drv.read_data(0x1000, 2 * PAGE, out)
            got, want = out.read(), src.read()
            bad = [i for i in range(len(want)) if got[i] != want[i]]
            assert not bad, (f"data wrong after recovery from a {kind} completion at {lo:#x}: "
                             f"{len(bad)} bytes from {bad[0]:#x} to {bad[-1]:#x}")
            out.write(bytes(2 * PAGE))
        # a descriptor fetch that fails is DESC_READ
        pool = drv.descriptor_pool(Channel.H2C)
        tb.card.pcie.inject(kind, pool.address, pool.address + 32)
        try:
            drv.write_data(src, 64, 0)
        except DmaTransferError as e:
            assert e.code == DmaError.DESC_READ, e
        else:
            raise AssertionError(f"a {kind} descriptor completion did not fail the transfer")
        tb.card.pcie.clear_errors()
        drv.write_data(src, 64, 0)
        drv.host.free(out)
        drv.host.free(src)

    await tb.host(prog)
    dev, rc = tb.link.dev, tb.link.rc
    if kind == "drop":
        assert dev.timeouts >= 2, dev.timeouts
    if kind == "lose":
        # a lost first completion: the requester finds the next one out of place; a lost last
        # one: the timeout; the descriptor fetch's: either, as the host splits it
        assert rc.lost >= 3 and dev.timeouts >= 1, (rc.lost, dev.timeouts)
    assert dev.rx_overflows == 0, dev.rx_overflows
    tb.beats.check()


#: (kind, host) of test_completion_errors: poisoned data also across 128-byte completions.
ERROR_CASES = [("ur", "ooo"), ("ca", "ooo"), ("poison", "ooo"), ("poison", "split128"),
               ("drop", "ooo"), ("lose", "ooo")]


@cocotb.test(timeout_time=200, timeout_unit="ms")
@cocotb.parametrize(case=ERROR_CASES)
async def test_completion_errors(dut, case: tuple[str, str]) -> None:
    """Unsupported Request, Completer Abort, poisoned data (also across 128-byte completions),
    completion timeout (the rest of a read never sent), one completion lost (the rest sent) on a
    DMA read: SRC_READ (data) or DESC_READ (descriptor), never a hang or a transfer with a hole,
    and the card works again after the driver's recovery."""
    await _error_case(dut, *case)


"""RtlCard's PCIe link (``RtlCard(dut, link="pcie")`` on card_top_pcie): BAR0 MMIO as memory
read/write TLPs from the root complex, interrupts as MSI-X messages, enumeration on first use.

The root complex enumerates the bus the first time the host program touches the card (the
driver's first MMIO), so a host program needs nothing new: it finds the card, its BARs are
assigned, bus mastering and MSI-X are on, and Device Control holds the max payload and read
request sizes of :class:`PcieOptions` (the driver reads them through ``link_limits``).

An interrupt is an MSI-X message from the card; ``wait_irq`` returns True once a message has
arrived whose source is still set (IRQ_STATUS & IRQ_MASK, read over BAR0 as an interrupt
handler would), so a message for a bit the driver has already cleared is not taken for a new
interrupt, and the backend keeps the level semantics of CardBackend.wait_irq.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cocotb.triggers import Lock
from cocotb.utils import get_sim_time

from pyhost.backend import HostMemory, MmioError
from pyhost.spec import pcie, regs
from tb.common.pcie_link import HostLinkConfig, PcieLink

#: The environment variable that chooses PcieOptions.link_model's default.
LINK_MODEL_ENV = "PCIE_LINK_MODEL"


class MmioUnsupportedRequest(MmioError):
    """A BAR access the card answered with Unsupported Request (an unmapped BAR offset)."""


@dataclass
class PcieOptions:
    """The link and the host behind it."""

    link: str = pcie.DEFAULT_LINK         # "gen3x16" or "gen4x8"
    mps: int = 256                        # max payload size the root sets in Device Control
    mrrs: int = 512                       # max read request size
    host: HostLinkConfig = field(default_factory=HostLinkConfig)
    cpl_timeout_ns: int | None = None     # the hard IP's completion timeout
    #: "ideal": tb/common/pcie_link.py's IdealLink; "dll": cocotbext-pcie's SimPort pair
    #: (sequence numbers, ACK and flow-control DLLPs on the wire), for comparison; the default
    #: is $PCIE_LINK_MODEL or "ideal"
    link_model: str = field(default_factory=lambda: os.environ.get(LINK_MODEL_ENV, "ideal"))
    straddle: bool = pcie.STRADDLE        # requester straddling: as the card's STRADDLE
    rc_4tlp: bool = True                  # with it, RC up to four TLPs a beat (else two)


class PcieHost:
    """The host side of the PCIe link of one RtlCard."""

    def __init__(self, dut, host: HostMemory, options: PcieOptions | None = None) -> None:
        self.options = options or PcieOptions()
        o = self.options
        self.link = PcieLink(dut, host, o.host, link=o.link, mps=o.mps, mrrs=o.mrrs,
                             cpl_timeout_ns=o.cpl_timeout_ns, link_model=o.link_model,
                             straddle=o.straddle, rc_4tlp=o.rc_4tlp)
        self._lock = Lock()
        self.enumerated = False
        self.spurious = 0                  # messages whose source had already been cleared

    async def up(self) -> dict:
        """Enumerate once; what enumeration found (PcieLink.info)."""
        async with self._lock:
            if not self.enumerated:
                await self.link.enumerate()
                self.enumerated = True
        return self.link.info

    async def limits(self) -> tuple[int, int]:
        info = await self.up()
        return info["mps"], info["mrrs"]

    async def bar_read(self, bar: int, offset: int) -> int:
        await self.up()
        try:
            return await self.link.bar_read(bar, offset)
        except Exception as e:            # cocotbext-pcie: "Unsuccessful completion"
            raise MmioUnsupportedRequest(
                f"BAR{bar} read at {offset:#x} completed unsuccessfully ({e}); the card maps "
                f"BAR{bar} only where pyhost.spec.pcie says") from None

    async def bar_write(self, bar: int, offset: int, value: int) -> None:
        await self.up()
        await self.link.bar_write(bar, offset, value)

    async def mmio_read(self, offset: int) -> int:
        return await self.bar_read(pcie.BAR_REGS.index, offset)

    async def mmio_write(self, offset: int, value: int) -> None:
        await self.bar_write(pcie.BAR_REGS.index, offset, value)

    async def wait_irq(self, timeout_ns: int) -> bool:
        await self.up()
        end = get_sim_time("ns") + timeout_ns
        while True:
            left = end - get_sim_time("ns")
            if not await self.link.wait_vector(max(1, int(left))) and left <= 0:
                return False
            if self.link.take_vectors():
                status = await self.mmio_read(regs.offset("IRQ_STATUS"))
                mask = await self.mmio_read(regs.offset("IRQ_MASK"))
                if status & mask:
                    return True
                self.spurious += 1
            elif get_sim_time("ns") >= end:
                return False

    def inject(self, kind: str, start: int, end: int) -> None:
        self.link.rc.inject(kind, start, end)

    def clear_errors(self) -> None:
        self.link.rc.clear_errors()


def card_sources():
    """Every Verilog file of the PCIe card (card_top_pcie, the endpoint and the card)."""
    from tb.common import simulator

    return simulator.rtl_sources(*simulator.CARD_BLOCKS, *simulator.CARD_TOPS["card_top_pcie"])


def format_lspci(info: dict) -> str:
    """What enumeration found, as ``lspci -vv`` would summarise it."""
    lines = [f"{info['address']} Processing accelerators [{info['class_code'] >> 8:04x}]: "
             f"device {info['vendor_id']:04x}:{info['device_id']:04x} (rev "
             f"{info['revision']:02x})",
             f"        Subsystem: {info['subsystem'][0]:04x}:{info['subsystem'][1]:04x}"]
    for bar, addr, size in info["bars"]:
        lines.append(f"        Region {bar}: Memory at {addr:08x} (32-bit, non-prefetchable) "
                     f"[size={size >> 10}K]")
    lines += [f"        LnkSta: Speed {info['link_speed_gts']:g}GT/s, Width x{info['link_width']}",
              f"        DevCtl: MaxPayload {info['mps']} bytes, MaxReadReq {info['mrrs']} bytes"
              f" (root RCB {info['rcb']} bytes)",
              f"        MSI-X: Enable+ Count={info['msix_vectors']} (vector i = IRQ_STATUS bit i:"
              f" {', '.join(pcie.MSIX_VECTOR_NAMES)})"]
    return "\n".join(lines)

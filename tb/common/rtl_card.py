"""RtlCard: the CardBackend on the card's RTL under cocotb.

BAR0 is an AXI4-Lite master on the card top's ``s_axil_*`` ports (tb/common/axil_master.py's
AxiLiteBar0: cocotbext-axi's timing, nothing watched while idle); host memory is a
:class:`pyhost.backend.HostMemory` served to the card's ``m_axi_host_*`` port by
:class:`tb.common.host_memory_axi.HostMemoryAxiSlave`; the interrupt is awaited as an edge.

Host programs are ordinary blocking Python: run them in a thread started with
``cocotb.task.bridge`` and every backend call below enters the simulation through
``cocotb.task.resume``, so the driver, memory manager and runtime are the same code on the RTL as
on :class:`pyhost.model_card.ModelCard`.
"""

from __future__ import annotations

import logging

from cocotb.task import resume
from cocotb.triggers import First, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from pyhost.backend import CardBackend, HostMemory, check_mmio
from pyhost.spec import dram
from tb.common.axil_master import AxiLiteBar0
from tb.common.host_memory_axi import HostMemoryAxiSlave, HostMemoryConfig

#: How much simulated time one wall-clock second of a caller's timeout stands for: about what
#: Verilator simulates of the card in a second. A driver timeout of 10 s is then 1 ms of card
#: time (400k cycles), and a check that expects a timeout after 0.5 s waits 50 us, not minutes.
SIM_NS_PER_WALL_S = 100_000


class _HostMemoryView:
    """HostMemory seen as the byte container cocotbext-axi's AxiRam reads and writes."""

    def __init__(self, host: HostMemory) -> None:
        self.host = host

    def __len__(self) -> int:
        return self.host.end

    def __getitem__(self, s: slice) -> bytes:
        return self.host.read(s.start, s.stop - s.start)

    def __setitem__(self, s: slice, data: bytes) -> None:
        self.host.write(s.start, data)


class _CocotbextBar0:
    """cocotbext-axi's AxiLiteMaster behind AxiLiteBar0's read / write (for comparison)."""

    def __init__(self, dut) -> None:
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        logging.getLogger(f"cocotb.{dut._name}.s_axil").setLevel(logging.WARNING)

    async def read(self, offset: int) -> int:
        data = await self.axil.read(offset, 4)
        return int.from_bytes(data.data, "little")

    async def write(self, offset: int, value: int) -> None:
        await self.axil.write(offset, value.to_bytes(4, "little"))


class RtlCard(CardBackend):
    """The card RTL (card_top) as a CardBackend. Construct it inside a cocotb test."""

    def __init__(self, dut, host: HostMemory | None = None,
                 memory: HostMemoryConfig | None = None, irq_timeout_ns: int = 5_000_000,
                 memory_model: str = "native", link: str = "axi", pcie=None,
                 bar0: str = "lean") -> None:
        """``memory_model``: "native" (HostMemoryAxiSlave: latency, reordering, errors) or
        "axiram" (a plain cocotbext-axi AxiRam over the same HostMemory, for comparison).
        ``link``: "axi" (card_top: AXI4-Lite BAR0, AXI4 host port) or "pcie" (card_top_pcie
        behind the hard IP model and a root complex, tb/common/pcie_card.py; ``pcie`` is its
        PcieOptions). ``bar0``: "lean" (AxiLiteBar0) or "cocotbext-axi" (its AxiLiteMaster,
        for comparison: the same timing, but its channels watch five signals for the whole run)."""
        self.dut = dut
        self.host = host or HostMemory()
        self.pcie = None
        if link == "pcie":
            from tb.common.pcie_card import PcieHost
            self.pcie = PcieHost(dut, self.host, pcie)
        elif link != "axi":
            raise ValueError(f"link {link!r}: expected 'axi' or 'pcie'")
        self._t0_ps = get_sim_time("ps")
        self.irq_timeout_ns = irq_timeout_ns
        self.mmio_reads = 0
        self.mmio_writes = 0
        if self.pcie is not None:
            self.memory = self.axiram = None
            self.host_write_errors = False     # PCIe memory writes are posted
            return
        if bar0 == "lean":
            self.bar0: AxiLiteBar0 | _CocotbextBar0 = AxiLiteBar0(dut, "s_axil", dut.clk,
                                                                  dut.rst)
        elif bar0 == "cocotbext-axi":
            self.bar0 = _CocotbextBar0(dut)
        else:
            raise ValueError(f"bar0 {bar0!r}: expected 'lean' or 'cocotbext-axi'")
        self.memory: HostMemoryAxiSlave | None = None
        self.axiram: AxiRam | None = None
        if memory_model == "native":
            self.memory = HostMemoryAxiSlave(dut, "m_axi_host", self.host, memory)
        elif memory_model == "axiram":
            self.axiram = AxiRam(AxiBus.from_prefix(dut, "m_axi_host"), dut.clk, dut.rst,
                                 mem=_HostMemoryView(self.host))
            logging.getLogger(f"cocotb.{dut._name}.m_axi_host").setLevel(logging.WARNING)
        else:
            raise ValueError(f"memory_model {memory_model!r}: expected 'native' or 'axiram'")
        # cycles follow simulated time: no Python runs per clock cycle (the co-simulation then
        # costs nothing while the card works on its own, e.g. while the accelerator computes)
        self._t0_ps = get_sim_time("ps")
        #: simulated-time bound on one wait for the interrupt (a hung card fails, not hangs)
        self.irq_timeout_ns = irq_timeout_ns
        self.mmio_reads = 0
        self.mmio_writes = 0

    # -- coroutines run in the simulator ------------------------------------------------------
    def _poll(self) -> None:
        # the C++ host memory hands its bursts to the monitors before every register access:
        # no chain starts (and no limit changes) without one, so a monitor that reads the
        # card's state for a burst sees the chain's own
        if self.memory is not None:
            self.memory.poll()

    async def _read(self, offset: int) -> int:
        if self.pcie is not None:
            return await self.pcie.mmio_read(offset)
        self._poll()
        return await self.bar0.read(offset)

    async def _write(self, offset: int, value: int) -> None:
        if self.pcie is not None:
            return await self.pcie.mmio_write(offset, value)
        self._poll()
        await self.bar0.write(offset, value)

    async def _wait_irq(self, timeout_ns: int) -> bool:
        if self.pcie is not None:
            return await self.pcie.wait_irq(timeout_ns)
        irq = self.dut.irq
        if int(irq.value):
            return True
        await First(RisingEdge(irq), Timer(timeout_ns, unit="ns"))
        await RisingEdge(self.dut.clk)
        return bool(int(irq.value))

    async def _cycles(self) -> int:
        return int((get_sim_time("ps") - self._t0_ps) // (dram.CTRL_CLK_NS * 1000))

    # -- CardBackend ----------------------------------------------------------------------------
    def mmio_read(self, offset: int) -> int:
        check_mmio(offset)
        self.mmio_reads += 1
        return resume(self._read)(offset)

    def mmio_write(self, offset: int, value: int) -> None:
        check_mmio(offset, value)
        self.mmio_writes += 1
        resume(self._write)(offset, value)

    def wait_irq(self, timeout_s: float) -> bool:
        """Wait for the interrupt. The bound is simulated time, since the simulation's speed says
        nothing about the card: ``timeout_s`` * SIM_NS_PER_WALL_S, at most ``irq_timeout_ns``."""
        limit = min(self.irq_timeout_ns, max(1, int(timeout_s * SIM_NS_PER_WALL_S)))
        return resume(self._wait_irq)(limit)

    def link_limits(self) -> tuple[int, int] | None:
        """The PCIe link's max payload and read request sizes (Device Control), or None."""
        return None if self.pcie is None else resume(self.pcie.limits)()

    def inject_host_error(self, start: int, end: int) -> None:
        if self.pcie is not None:
            return self.pcie.inject("ca", start, end)
        if self.memory is None:
            super().inject_host_error(start, end)
        else:
            self.memory.inject_error(start, end)

    def clear_host_errors(self) -> None:
        if self.pcie is not None:
            return self.pcie.clear_errors()
        if self.memory is None:
            super().clear_host_errors()
        else:
            self.memory.clear_errors()

    def cycles(self) -> int:
        """Clock cycles simulated so far."""
        return resume(self._cycles)()

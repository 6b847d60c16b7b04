"""RtlCard: the CardBackend on the card's RTL under cocotb.

BAR0 is a cocotbext-axi AxiLiteMaster on the card top's ``s_axil_*`` ports; host memory is a
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
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from pyhost.backend import CardBackend, HostMemory, check_mmio
from tb.common.host_memory_axi import HostMemoryAxiSlave, HostMemoryConfig


class RtlCard(CardBackend):
    """The card RTL (card_top) as a CardBackend. Construct it inside a cocotb test."""

    def __init__(self, dut, host: HostMemory | None = None,
                 memory: HostMemoryConfig | None = None, irq_timeout_ns: int = 5_000_000) -> None:
        self.dut = dut
        self.host = host or HostMemory()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        logging.getLogger(f"cocotb.{dut._name}.s_axil").setLevel(logging.WARNING)
        self.memory = HostMemoryAxiSlave(dut, "m_axi_host", self.host, memory)
        #: simulated-time bound on one wait for the interrupt (a hung card fails, not hangs)
        self.irq_timeout_ns = irq_timeout_ns
        self.mmio_reads = 0
        self.mmio_writes = 0

    # -- coroutines run in the simulator ------------------------------------------------------
    async def _read(self, offset: int) -> int:
        data = await self.axil.read(offset, 4)
        return int.from_bytes(data.data, "little")

    async def _write(self, offset: int, value: int) -> None:
        await self.axil.write(offset, value.to_bytes(4, "little"))

    async def _wait_irq(self, timeout_ns: int) -> bool:
        irq = self.dut.irq
        if int(irq.value):
            return True
        await First(RisingEdge(irq), Timer(timeout_ns, unit="ns"))
        await RisingEdge(self.dut.clk)
        return bool(int(irq.value))

    async def _cycles(self) -> int:
        return self.memory.cycle

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
        """Wait for the interrupt; the bound is simulated time (``irq_timeout_ns``), since a
        simulation's wall-clock speed says nothing about the card."""
        return resume(self._wait_irq)(self.irq_timeout_ns)

    def inject_host_error(self, start: int, end: int) -> None:
        self.memory.inject_error(start, end)

    def clear_host_errors(self) -> None:
        self.memory.clear_errors()

    def cycles(self) -> int:
        """Clock cycles simulated so far."""
        return resume(self._cycles)()

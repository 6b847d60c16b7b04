"""Clock and reset for every bench: the card's one clock at the controller rate, and a
synchronous active-high reset held for a number of cycles."""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from pyhost.spec import dram


def start_clock(dut) -> None:
    """Drive ``dut.clk`` at the controller clock (2.5 ns, 400 MHz)."""
    cocotb.start_soon(Clock(dut.clk, dram.CTRL_CLK_NS, unit="ns").start())


async def reset(dut, hold: int = 8, settle: int = 4) -> None:
    """Hold ``dut.rst`` high for ``hold`` cycles, then wait ``settle`` cycles."""
    dut.rst.value = 1
    await ClockCycles(dut.clk, hold)
    dut.rst.value = 0
    await ClockCycles(dut.clk, settle)

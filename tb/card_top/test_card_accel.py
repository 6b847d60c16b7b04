"""The accelerator on the whole RTL card through the real host driver: the checks of
tb/card_top/accel_program.py (which tests/pyhost runs on ModelCard) run here unchanged on card_top,
with programs, constants and data moved by the DMA engine and the accelerator reading and
writing the DRAM controller through the interconnect.
"""

from __future__ import annotations

import cocotb

from tb.card_top import accel_program
from tb.card_top.test_card_top import TB


@cocotb.test(timeout_time=2000, timeout_unit="ms")
@cocotb.parametrize(check=[c.name for c in accel_program.ALL_CHECKS])
async def test_accel_program(dut, check: str) -> None:
    """One accelerator check of the shared program, on the RTL card."""
    tb = TB(dut)
    await tb.reset()
    fn = next(c.fn for c in accel_program.ALL_CHECKS if c.name == check)
    reduced = cocotb.SIM_NAME.lower().startswith("icarus")
    await tb.host(fn, reduced=reduced)
    tb.monitor.check()

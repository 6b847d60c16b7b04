"""Clock and reset for every bench: the card's one clock at the controller rate, and a
synchronous active-high reset held for a number of cycles.

Under Verilator the model's main (tb/common/cosim_main.cpp, which tb/common/simulator.py builds
into every Verilator model) generates the clock in C++ (`cosim_clock_start`, called through
ctypes): each edge costs one evaluation of the model and no GPI call; under Icarus, or a model
built with cocotb's own main, cocotb's Clock drives it. Both give the same edges at the same
times (first edge high at the start, as cocotb's clock), so every cycle count is the same.
"""

from __future__ import annotations

import ctypes
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_steps

from pyhost.spec import dram

#: Set to 0 to use cocotb's Clock even where the model has the built-in one (for comparisons).
BUILTIN_ENV = "COSIM_BUILTIN_CLOCK"


def _builtin_start() -> object | None:
    """The model's `cosim_clock_start`, when the simulator process has it."""
    if os.environ.get(BUILTIN_ENV, "1") in ("0", ""):
        return None
    try:
        fn = ctypes.CDLL(None).cosim_clock_start
    except (AttributeError, OSError):
        return None
    fn.argtypes = (ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def start_clock(dut, period_ns: float = dram.CTRL_CLK_NS) -> str:
    """Drive ``dut.clk`` at ``period_ns`` (default: the controller clock, 2.5 ns, 400 MHz);
    returns which clock drives it: "builtin" (C++, in the Verilator model's main) or "cocotb"."""
    sig = dut.clk
    start = _builtin_start()
    if start is not None:
        period = get_sim_steps(period_ns, "ns")
        if period % 2 == 0 and start(sig._path.encode(), period, period // 2, 1) == 0:
            return "builtin"
    cocotb.start_soon(Clock(sig, period_ns, unit="ns").start())
    return "cocotb"


async def reset(dut, hold: int = 8, settle: int = 4) -> None:
    """Hold ``dut.rst`` high for ``hold`` cycles, then wait ``settle`` cycles."""
    dut.rst.value = 1
    await ClockCycles(dut.clk, hold)
    dut.rst.value = 0
    await ClockCycles(dut.clk, settle)

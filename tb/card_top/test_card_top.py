"""System bench for card_top: the real host driver (pyhost.driver.PcieDriver) on the RTL card.

Host code is ordinary blocking Python running in a thread started with ``cocotb.task.bridge``;
RtlCard turns every MMIO access and interrupt wait into simulation activity. Every check of the
shared driver program (driver_program.py beside this file, which tests/pyhost runs on ModelCard)
runs here unchanged, with a monitor on the host port that fails on any burst longer than the current
MPS / MRRS or crossing 4 KiB. CARD_TB_MEMORY picks the host-memory behaviour: "inorder" (short
latency, back-pressure and idle cycles on every channel) or "ooo" (long, jittered latency and read
data returned out of order across tags). CARD_TB_CHUNK sets the driver's largest descriptor
(default: the driver's 1 MiB); tests/rtl/test_card_top.py sets 64 KiB for every run but Verilator
in order, so the multi-descriptor transfers of the checks move a few hundred KiB, not several MiB.
"""

from __future__ import annotations

import json
import logging
import os

import cocotb
from cocotb.task import bridge

from pyhost.backend import HostMemory
from pyhost.driver import DEFAULT_CHUNK_BYTES, PcieDriver
from tb.card_top import driver_program
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import HostMemoryConfig, HostPortMonitor
from tb.common.rtl_card import RtlCard
from tb.dram_ctrl.monitor import Ddr4Monitor

MEMORY = {
    "inorder": HostMemoryConfig(read_latency=8, ar_pause=[0, 0, 1], r_pause=[0, 1, 0, 0, 1],
                                aw_pause=[1, 0, 0], w_pause=[0, 0, 1, 0]),
    "ooo": HostMemoryConfig(read_latency=60, jitter=80, out_of_order=True, seed=7),
    # a fixed latency: under Verilator the model's C++ slave serves it (unless
    # COSIM_NATIVE_HOST_MEMORY=0), tests/rtl/test_card_host_memory.py against the Python model
    "fixed": HostMemoryConfig(read_latency=40),
}


def params() -> dict[str, int]:
    return {"MEM_SIZE": 1 << 30, **json.loads(os.environ.get("CARD_TB_PARAMS", "{}"))}


class LiveLimits(HostPortMonitor):
    """HostPortMonitor that reads the limits the card uses at the moment of each burst."""

    def __init__(self, slave, dut) -> None:
        super().__init__(slave, 0, 0)
        self.dut = dut

    def _burst(self, kind, addr, beats, written) -> None:
        # the limits the engine latched for the running chain; a chain refused for BAD_CONFIG
        # still writes its status back, and then only the 4 KiB rule applies
        def valid(v: int) -> bool:
            return 128 <= v <= 4096 and v & (v - 1) == 0
        mps = int(self.dut.core.dma.engine.mps.value)
        mrrs = int(self.dut.core.dma.engine.mrrs.value)
        self.mps = mps if valid(mps) else 4096
        self.mrrs = mrrs if valid(mrrs) else 4096
        super()._burst(kind, addr, beats, written)


class TB:
    """Clock, reset, the RTL card backend, the host-port monitor and the DDR4 timing monitor on
    the card memory (every DRAM command of every card test is checked)."""

    def __init__(self, dut) -> None:
        self.dut = dut
        start_clock(dut)
        memory = MEMORY[os.environ.get("CARD_TB_MEMORY", "inorder")]
        self.card = RtlCard(dut, HostMemory(32 << 20), memory)
        self.monitor = LiveLimits(self.card.memory, dut)
        self.ddr4 = Ddr4Monitor.for_card(dut)
        logging.getLogger("cocotb.card_top.s_axil").setLevel(logging.WARNING)

    async def reset(self) -> None:
        await reset(self.dut)
        self.ddr4.start()

    async def host(self, fn, *args, **kwargs):
        """Run blocking host code ``fn(driver, ...)`` against the RTL card (see run_host)."""
        chunk = int(os.environ.get("CARD_TB_CHUNK", DEFAULT_CHUNK_BYTES))
        return await run_host(self.card, self.ddr4, chunk, fn, *args, **kwargs)


async def run_host(card, ddr4: Ddr4Monitor, chunk_bytes: int, fn, *args, **kwargs):
    """Run blocking host code ``fn(driver, ...)`` on a PcieDriver of ``card`` in the host thread;
    then the DDR4 monitor's end-of-run check (refresh debt and REF-to-REF distance up to now)."""
    def main():
        drv = PcieDriver(card, chunk_bytes=chunk_bytes)
        try:
            return fn(drv, *args, **kwargs)
        finally:
            drv.close()
    result = await bridge(main)()
    ddr4.finish()
    return result


@cocotb.test(timeout_time=200, timeout_unit="ms")
@cocotb.parametrize(check=[c.name for c in driver_program.ALL_CHECKS])
async def test_driver_program(dut, check: str) -> None:
    """One check of the shared driver program, on the RTL card, host port monitored."""
    tb = TB(dut)
    await tb.reset()
    fn = next(c.fn for c in driver_program.ALL_CHECKS if c.name == check)
    await tb.host(fn, reduced=True)
    tb.monitor.check()
    want = os.environ.get("CARD_TB_EXPECT_NATIVE")
    if want is not None:
        assert (tb.card.memory.native is not None) == (want == "1"), \
            f"the host memory is {'not ' if want == '1' else ''}the C++ slave"
    assert tb.card.memory.undefined_writes == 0, (
        f"{tb.card.memory.undefined_writes} host write beats carried undefined (X) bytes")
    assert tb.monitor.bursts["read"] > 0 or check in ("check_card_info", "check_validation"), \
        "no host traffic seen by the monitor"
    dram_cols = tb.ddr4.checker.counts["RD"] + tb.ddr4.checker.counts["WR"]
    assert dram_cols > 0 or check in ("check_card_info", "check_validation"), \
        "the DDR4 monitor saw no card memory access"
    if os.environ.get("CARD_TB_MEMORY") == "ooo" and tb.card.memory.reads_served > 8:
        assert tb.card.memory.reordered > 0, "host memory never returned data out of order"


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def test_alignment_edges(dut) -> None:
    """Host offsets 0, 3, 4093, 4095 x card offsets 0, 4095 x lengths around a line and a page,
    both directions, guard bytes checked: the alignment check sized for the slower simulator."""
    tb = TB(dut)
    await tb.reset()
    await tb.host(driver_program.check_alignment, lengths=(1, 3, 65, 4097),
                  host_offsets=(0, 3, 4093, 4095), card_offsets=(0, 4095))
    tb.monitor.check()

"""The performance model against the RTL card: accelerator runs measured on card_top.

``perf_measure`` runs the cases of tb/card_top/perf_program.py (the demo's layers through the
runtime, then random programs) through the real driver and writes them, with the card's
counters, to PERF_OUT (JSON). tests/rtl/test_perf_model.py compares them with the functional
card's estimate.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb

from tb.card_top import perf_program


@cocotb.test(timeout_time=20000, timeout_unit="ms")
async def perf_measure(dut) -> None:
    """The demo's layers and random programs on the RTL card; counters to PERF_OUT. Works on
    lean builds (it reads no internal signal): the host latency of the sweep's RTL points."""
    from cocotb.task import bridge

    from pyhost.backend import HostMemory
    from pyhost.driver import PcieDriver
    from tb.common.clocking import reset, start_clock
    from tb.common.host_memory_axi import HostMemoryConfig
    from tb.common.rtl_card import RtlCard
    from tb.sweep.host import HOST_LATENCY

    start_clock(dut)
    card = RtlCard(dut, HostMemory(64 << 20), HostMemoryConfig(read_latency=HOST_LATENCY),
                   irq_timeout_ns=10**12)
    await reset(dut)
    seeds = range(int(os.environ.get("PERF_RANDOM", "8")))
    layers = os.environ.get("PERF_LAYERS", "1") == "1"

    def measure() -> list:
        drv = PcieDriver(card, timeout_s=100_000)
        try:
            return (perf_program.layer_cases(drv) if layers else []) \
                + perf_program.random_cases(drv, seeds)
        finally:
            drv.close()

    cases = await bridge(measure)()
    Path(os.environ["PERF_OUT"]).write_text(json.dumps(cases))

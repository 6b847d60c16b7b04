"""Runs the axi_interconnect cocotb bench (three masters, one AxiRam) on every simulator."""

from __future__ import annotations

import pytest

from tb.common.simulator import ROOT, rtl_sources, run

PARAMETERS = {
    "S_COUNT": 3,          # the bench wrapper has three master ports
    "DATA_WIDTH": 512,     # the card's AXI width
    "S_ID_WIDTH": 8,
    "W_FIFO_DEPTH": 3,     # small and not a power of two: AW grants stall on a full FIFO
}


@pytest.mark.rtl
def test_axi_interconnect(sim: str) -> None:
    sources = rtl_sources("axi_interconnect") + [ROOT / "tb/axi_interconnect/axi_interconnect_tb.v"]
    run(sim, "axi_interconnect_tb", sources, "tb.axi_interconnect.test_axi_interconnect",
        parameters=PARAMETERS)

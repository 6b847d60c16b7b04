"""The RTL card behaves exactly as recorded before the speed work (tests/golden_behaviour.py):
the ``make sim`` demo on each simulator (cycles, hardware counters, outputs) and the accelerator
benchmark's layers through the driver on Verilator (counters, START-to-interrupt cycles, card
memory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import golden_behaviour as G


@pytest.mark.rtl
def test_demo_on_the_rtl_card(sim: str, tmp_path: Path) -> None:
    """tb/demo.py's flow: the same simulated cycles, counters and outputs as recorded, on both
    simulators (Icarus: the first image of the same run)."""
    got = G.rtl_demo(sim, tmp_path)
    # the demo's build has the model's own clock under Verilator (tb/common/cosim_main.cpp);
    # Icarus runs cocotb's: the same edges, so the same cycles
    out = json.loads((tmp_path / "rtl_out.json").read_text())
    assert out["clock"] == ("builtin" if sim == "verilator" else "cocotb"), out["clock"]
    # and its host memory is the C++ slave under Verilator (Icarus: the Python model): both
    # give the recorded cycles
    assert out["host_memory"] == ("native" if sim == "verilator" else "python"), \
        out["host_memory"]
    want = G.load(f"rtl/demo/{sim}")
    assert got == want, f"the demo on {sim} changed: cycles {got['cycles']} (recorded " \
        f"{want['cycles']})"
    if sim == "icarus":
        vl = G.load("rtl/demo/verilator")
        assert got["runs"][0] == vl["runs"][0] and got["outputs"][0] == vl["outputs"][0], \
            "Icarus and Verilator differ on the first image"


@pytest.mark.rtl
def test_accelerator_benchmark_layers_on_the_rtl_card(sim: str, tmp_path: Path) -> None:
    """The GEMM and convolution jobs through PcieDriver on RtlCard (Verilator only: the
    convolution's 1.8 M cycles would take Icarus ten minutes)."""
    if sim != "verilator":
        pytest.skip("the layers run on Verilator only (Icarus: about 25x slower)")
    assert G.rtl_layers(tmp_path) == G.load("rtl/layers")

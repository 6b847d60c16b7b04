"""RTL regression for csr, the BAR0 register block, on each simulator."""

from __future__ import annotations

import pytest

from tb.common import simulator


@pytest.mark.rtl
def test_csr(sim: str) -> None:
    """The csr bench passes."""
    res = simulator.run(sim, "csr", simulator.rtl_sources("csr"), "tb.csr.test_csr",
                     parameters={"MEM_SIZE": "64'd1048576", "ACCEL": 1})
    assert res.tests == 6


@pytest.mark.rtl
def test_csr_lean_build(sim: str) -> None:
    """The csr bench on a lean Verilator build (no --public-flat-rw: only the top's signals are
    visible through the generated control file), so the runner's lean builds stay usable."""
    if sim != "verilator":
        pytest.skip("lean builds are a Verilator option; Icarus ignores it")
    res = simulator.run(sim, "csr", simulator.rtl_sources("csr"), "tb.csr.test_csr",
                     parameters={"MEM_SIZE": "64'd1048576", "ACCEL": 1}, public=[])
    assert res.tests == 6

"""RTL regression for pcie_dma on its own (no csr, no DRAM timing), on each simulator."""

from __future__ import annotations

import pytest

from tb.common import simulator


@pytest.mark.rtl
def test_pcie_dma(sim: str) -> None:
    """The pcie_dma bench passes."""
    res = simulator.run(sim, "pcie_dma", simulator.rtl_sources("pcie_dma"),
                        "tb.pcie_dma.test_pcie_dma")
    assert res.tests == 3

"""RTL regression for csr, the BAR0 register block, on each simulator."""

from __future__ import annotations

import pytest

from tb.common import runner


@pytest.mark.rtl
def test_csr(sim: str) -> None:
    """The csr bench passes."""
    res = runner.run(sim, "csr", runner.rtl_sources("csr"), "tb.csr.test_csr",
                     parameters={"MEM_SIZE": "64'd1048576", "ACCEL": 1})
    assert res.tests == 6

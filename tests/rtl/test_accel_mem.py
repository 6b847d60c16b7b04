"""RTL regression for the accelerator's memory-side units (accel_fetch, accel_load,
accel_store), each bench on each simulator."""

from __future__ import annotations

import pytest

from tb.common import runner

ACCEL = runner.RTL / "accel"


@pytest.mark.rtl
@pytest.mark.parametrize("max_burst", [8, 3])
def test_accel_fetch(sim: str, max_burst: int) -> None:
    """The accel_fetch bench passes, with the default and with short bursts."""
    res = runner.run(sim, "accel_fetch", [ACCEL / "accel_fetch.v"], "tb.accel.test_accel_fetch",
                     parameters={"MAX_BURST": max_burst})
    assert res.tests == 6

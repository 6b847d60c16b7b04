"""RTL regression for the accelerator's memory-side units (accel_fetch, accel_load,
accel_store), each bench on each simulator."""

from __future__ import annotations

import pytest

from tb.common import simulator

ACCEL = simulator.RTL / "accel"


@pytest.mark.rtl
@pytest.mark.parametrize("max_burst, n", [(8, 8), (3, 4)])
def test_accel_fetch(sim: str, max_burst: int, n: int) -> None:
    """The accel_fetch bench passes, with the default and with short bursts (and N = 4, for
    DW's checks that depend on the array size)."""
    res = simulator.run(sim, "accel_fetch", [ACCEL / "accel_fetch.v"], "tb.accel.test_accel_fetch",
                     parameters={"MAX_BURST": max_burst, "N": n})
    assert res.tests == 6


LS_SOURCES = [ACCEL / "accel_load.v", ACCEL / "accel_store.v", ACCEL / "accel_mem_decode.v",
              ACCEL / "accel_burst_walker.v", simulator.ROOT / "tb" / "accel" / "accel_ls_wrap.v"]


#: N = 8 with the default bursts; N = 16 (multi-beat WGT elements, one ACC row per beat) and
#: N = 4 with smaller scratchpads and short bursts / few bursts in flight.
LS_CONFIGS = {
    8: {},
    16: {"INP_DEPTH": 2048, "WGT_DEPTH": 256, "ACC_DEPTH": 1024, "MAX_BURST": 8,
         "MAX_OUTSTANDING": 2},
    4: {"INP_DEPTH": 2048, "WGT_DEPTH": 256, "ACC_DEPTH": 1024, "MAX_BURST": 3,
        "MAX_OUTSTANDING": 1},
}


@pytest.mark.rtl
@pytest.mark.parametrize("n", list(LS_CONFIGS))
def test_accel_load_store(sim: str, n: int) -> None:
    """The accel_load/accel_store bench passes in each configuration (Icarus: the default N=8,
    as for the compute units)."""
    if n != 8 and sim != "verilator":
        pytest.skip(f"N={n} runs on Verilator only (Icarus covers the default N=8)")
    params: dict[str, object] = {"N": n, **LS_CONFIGS[n]}
    res = simulator.run(sim, "accel_ls_wrap", LS_SOURCES, "tb.accel.test_accel_load_store",
                     parameters=params)
    assert res.tests == 8

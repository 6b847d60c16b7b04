"""RTL regression for the accelerator's compute unit and its blocks (accel_gemm_array,
accel_vector, accel_compute), on each simulator; the array and the vector unit also at N = 4 on
Verilator."""

from __future__ import annotations

import pytest

from tb.common import simulator

ACCEL = simulator.RTL / "accel"
ARRAY_SRC = [ACCEL / "accel_gemm_array.v"]
VECTOR_SRC = [ACCEL / "accel_vector.v"]
COMPUTE_SRC = [ACCEL / "accel_compute.v", ACCEL / "accel_gemm_array.v", ACCEL / "accel_vector.v"]


def _only_verilator_for_small_n(sim: str, n: int) -> None:
    if n != 8 and sim != "verilator":
        pytest.skip(f"N={n} runs on Verilator only (Icarus covers the default N=8)")


@pytest.mark.rtl
@pytest.mark.parametrize("n", [8, 4])
def test_accel_gemm_array(sim: str, n: int) -> None:
    """The accel_gemm_array bench passes."""
    _only_verilator_for_small_n(sim, n)
    res = simulator.run(sim, "accel_gemm_array", ARRAY_SRC, "tb.accel.test_accel_gemm_array",
                     parameters={"N": n, "TAG_W": 3})
    assert res.tests == 3


@pytest.mark.rtl
@pytest.mark.parametrize("n", [8, 4])
def test_accel_vector(sim: str, n: int) -> None:
    """The accel_vector bench passes."""
    _only_verilator_for_small_n(sim, n)
    res = simulator.run(sim, "accel_vector", VECTOR_SRC, "tb.accel.test_accel_vector",
                     parameters={"N": n})
    assert res.tests == 5


#: accel_compute configurations: the accelerator's defaults, and a small one (other address
#: widths than the ISA fields) on Verilator only.
COMPUTE_CONFIGS = {
    "default": {},
    "n4": {"N": 4, "INP_DEPTH": 2048, "WGT_DEPTH": 32, "ACC_DEPTH": 2048},
}


@pytest.mark.rtl
@pytest.mark.parametrize("config", list(COMPUTE_CONFIGS))
def test_accel_compute(sim: str, config: str) -> None:
    """The accel_compute bench passes."""
    params = COMPUTE_CONFIGS[config]
    _only_verilator_for_small_n(sim, params.get("N", 8))
    res = simulator.run(sim, "accel_compute", COMPUTE_SRC, "tb.accel.test_accel_compute",
                     parameters=params)
    assert res.tests == 12

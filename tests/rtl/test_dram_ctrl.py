"""RTL regression for dram_ctrl: the cocotb bench on each simulator and configuration.

Configurations: DDR4-3200 defaults on a 1 MiB memory; a stress build with stretched timings, a
128-bit bus, tiny queues (a 4-line write queue) and the plain bank-row-column address map
(catches off-by-one errors in every timing counter, in the credit logic and in the write-queue
watermarks); a build with a short refresh interval so refresh lands inside traffic; and the
product default (1 GiB) under Verilator.

Refresh at the product timings (tREFI 3,120 cycles, 8 REFs postponed: up to 28,080 cycles between
two REFs, so each check saturates the controller for about 35,000 cycles) runs on Verilator only;
Icarus checks the same rules (REF-to-REF distance, debt, PREA before REF, refresh inside traffic)
in the ``refresh`` and ``stretched`` configurations, where tREFI is 150 and 700 cycles.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tb.common import simulator

MIB = 1 << 20
BENCH = Path(simulator.ROOT) / "tb" / "dram_ctrl" / "test_dram_ctrl.py"

CONFIGS: dict[str, dict[str, object]] = {
    "ddr4": {"MEM_SIZE": MIB},
    "stretched": {
        "MEM_SIZE": MIB // 2, "DATA_WIDTH": 128, "ID_WIDTH": 4, "QUEUE_DEPTH": 8,
        "WQ_DEPTH": 4, "WQ_HIGH": 3, "WQ_LOW": 1, "ADDR_HASH": 0,
        "RESP_DEPTH": 4, "B_DEPTH": 2,
        "T_CL": 9, "T_CWL": 5, "T_RCD": 7, "T_RP": 8, "T_RAS": 17, "T_RC": 25, "T_WR": 5,
        "T_RTP": 4, "T_CCD_S": 2, "T_CCD_L": 4, "T_RRD_S": 3, "T_RRD_L": 5, "T_FAW": 20,
        "T_WTR_S": 3, "T_WTR_L": 7, "T_BURST": 2, "T_RTW": 5, "T_RFC": 40, "T_REFI": 700,
        "REF_POSTPONE_MAX": 2,
    },
    "refresh": {"MEM_SIZE": MIB, "T_REFI": 150, "T_RFC": 30, "REF_POSTPONE_MAX": 1},
}

#: The bench's refresh checks; at the product timings they run on Verilator only.
REFRESH_TESTS = ["test_refresh_during_traffic", "test_refresh_idle_then_saturate",
                 "test_refresh_saturated_from_reset"]

# Tests each configuration runs (test_dram_ctrl_bench_selection: every bench test runs somewhere).
TESTS: dict[str, list[str]] = {
    "ddr4": ["test_random_traffic", "test_same_id_ordering", "test_out_of_range_decerr",
             "test_wrap_fixed_and_illegal", "test_long_response_stall",
             "test_sequential_row_hits", "test_mixed_queued_writes", "test_address_mapping",
             "test_reset_with_queued_writes"],
    "stretched": ["test_random_traffic", "test_out_of_range_decerr", "test_wrap_fixed_and_illegal",
                  "test_same_id_ordering", "test_refresh_during_traffic",
                  "test_long_response_stall", "test_mixed_queued_writes", "test_address_mapping",
                  "test_refresh_idle_then_saturate", "test_refresh_saturated_from_reset",
                  "test_reset_with_queued_writes"],
    "refresh": ["test_random_traffic", "test_mixed_queued_writes", *REFRESH_TESTS],
}


def rtl_parameters(conf: dict[str, object]) -> dict[str, object]:
    """RTL parameter values as the simulators take them (MEM_SIZE is a 64-bit parameter)."""
    return {k: (f"64'd{v}" if k == "MEM_SIZE" else v) for k, v in conf.items()}


def run_dram(sim: str, conf: dict[str, object], testcase: list[str] | None = None,
             waves: bool | None = None, run_name: str | None = None) -> simulator.RunResult:
    return simulator.run(
        sim, "dram_ctrl", simulator.rtl_sources("dram_ctrl"), "tb.dram_ctrl.test_dram_ctrl",
        parameters=rtl_parameters(conf), waves=waves, testcase=testcase, run_name=run_name,
        extra_env={"DRAM_TB_PARAMS": json.dumps(conf), "SIM": sim})


@pytest.mark.rtl
@pytest.mark.parametrize("config", list(CONFIGS))
def test_dram_ctrl(sim: str, config: str) -> None:
    """The dram_ctrl bench passes on this simulator and configuration."""
    res = run_dram(sim, CONFIGS[config], TESTS[config])
    assert res.tests >= 1


@pytest.mark.rtl
def test_dram_ctrl_product_refresh(sim: str) -> None:
    """Refresh at the product timings (DDR4-3200, 8 REFs postponed): during random traffic,
    after an idle REF then saturating reads, and saturating from reset; no REF more than
    9 x tREFI after the one before (or after reset)."""
    if sim != "verilator":
        pytest.skip("product-timing refresh is Verilator-only: each check saturates the "
                    "controller for ~35,000 cycles (9 x tREFI), 20-25 min per check on Icarus; "
                    "Icarus checks the same rules in the 'refresh' and 'stretched' "
                    "configurations (tREFI 150 and 700 cycles)")
    res = run_dram(sim, CONFIGS["ddr4"], REFRESH_TESTS)
    assert res.tests == len(REFRESH_TESTS)


def test_dram_ctrl_bench_selection() -> None:
    """Every cocotb test of the dram_ctrl bench runs at the product timings (a new test left out
    of the lists would never run), and every name selected is a test of the bench."""
    tree = ast.parse(BENCH.read_text())
    bench = {f.name for f in tree.body if isinstance(f, ast.AsyncFunctionDef)
             and any("cocotb.test" in ast.unparse(d) for d in f.decorator_list)}
    assert len(bench) >= 11, sorted(bench)  # the parse found the bench's tests
    assert set(TESTS["ddr4"]) | set(REFRESH_TESTS) == bench, \
        sorted(bench ^ (set(TESTS["ddr4"]) | set(REFRESH_TESTS)))
    selected = {t for names in TESTS.values() for t in names}
    assert selected <= bench, sorted(selected - bench)


@pytest.mark.rtl
def test_dram_ctrl_product_size(sim: str) -> None:
    """The product default (1 GiB) builds and runs under Verilator (Icarus would need ~10 GiB
    for the storage array, so it runs the 1 MiB configurations only)."""
    if sim != "verilator":
        pytest.skip("the 1 GiB build is Verilator-only (Icarus keeps 4-state storage)")
    res = run_dram(sim, {}, ["test_out_of_range_decerr", "test_sequential_row_hits"])
    assert res.tests == 2

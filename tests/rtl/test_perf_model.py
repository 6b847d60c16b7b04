"""The functional card's performance model against the RTL card (Verilator): the demo CNN's
layers (each its own accelerator subgraph, through the runtime) and random programs, measured
on card_top by tb/card_top/test_perf_model.py, estimated by pyhost.accel.timing.perf_estimate.

Stated error (docs/perf-model.md): each demo layer within 3 %; each random program within 15 %
and on average within 8 % (short, irregular programs of about 1,000 cycles, where one DRAM
refresh, 140 cycles, that the model cannot place, is 14 %).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyhost.accel.timing import perf_estimate
from pyhost.spec.accel import AccelConfig
from tb.card_top.perf_program import decode_program
from tb.common import simulator
from tests.rtl.test_card_top import CARD_MEM

LAYER_ERROR = 0.03
RANDOM_ERROR = 0.15
RANDOM_MEAN_ERROR = 0.08


@pytest.mark.rtl
def test_perf_model_against_the_rtl(tmp_path: Path) -> None:
    if not simulator.simulator_available("verilator"):
        pytest.skip("needs Verilator")
    out = tmp_path / "perf.json"
    res = simulator.test(simulator.card_build("verilator", {"MEM_SIZE": f"64'd{CARD_MEM}"}),
                         "tb.card_top.test_perf_model", testcase="perf_measure", check=True,
                        extra_env={"PERF_OUT": str(out), "PERF_RANDOM": "8"})
    assert res.tests == 1
    cases = json.loads(out.read_text())
    cfg = AccelConfig()
    errors = {}
    for c in cases:
        est = perf_estimate(decode_program(c["program"]), cfg).cycles
        errors[c["name"]] = est / c["counters"]["cycles"] - 1
    layers = {k: v for k, v in errors.items() if k.startswith("demo-")}
    randoms = {k: v for k, v in errors.items() if k.startswith("random-")}
    assert len(layers) == 8 and len(randoms) == 8, sorted(errors)
    table = ", ".join(f"{k} {100 * v:+.1f}%" for k, v in errors.items())
    assert all(abs(v) <= LAYER_ERROR for v in layers.values()), table
    assert all(abs(v) <= RANDOM_ERROR for v in randoms.values()), table
    assert sum(abs(v) for v in randoms.values()) / len(randoms) <= RANDOM_MEAN_ERROR, table

"""System regression for the accelerator on card_top through the driver, on each simulator:
random programs against the functional model, a GEMM and a convolution against numpy, bus
errors, illegal instructions and a deadlock (tb/card_top/test_card_accel.py). Icarus runs the
smaller variants of each check."""

from __future__ import annotations

import json

import pytest

from tb.card_top.accel_program import ALL_CHECKS
from tb.common import simulator
from tests.rtl.test_card_top import CARD_MEM


@pytest.mark.rtl
def test_card_accel(sim: str) -> None:
    """Every accelerator check passes on the RTL card: one simulator run for all of them (a run
    costs seconds to start; each check resets the card)."""
    res = simulator.test(simulator.card_build(sim, {"MEM_SIZE": f"64'd{CARD_MEM}"}),
                     "tb.card_top.test_card_accel",
                     extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                "CARD_TB_MEMORY": "inorder", "SIM": sim})
    assert res.tests == len(ALL_CHECKS)

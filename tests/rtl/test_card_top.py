"""System regression: the shared driver program on the RTL card (card_top), each simulator.

Two host-memory behaviours: in order with back-pressure and idle cycles on every channel, and
long jittered latency with read data returned out of order across tags.
"""

from __future__ import annotations

import json

import pytest

from tb.common import runner

SOURCES = ("csr", "pcie_dma", "axi_interconnect", "dram_ctrl", "card_top")
CARD_MEM = 16 << 20


def run_card(sim: str, memory: str, tests: list[str] | None = None,
             waves: bool | None = None) -> runner.RunResult:
    return runner.run(sim, "card_top", runner.rtl_sources(*SOURCES), "tb.card_top.test_card_top",
                      parameters={"MEM_SIZE": f"64'd{CARD_MEM}"}, testcase=tests, waves=waves,
                      extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                 "CARD_TB_MEMORY": memory, "SIM": sim})


@pytest.mark.rtl
@pytest.mark.parametrize("memory", ["inorder", "ooo"])
def test_card_top(sim: str, memory: str) -> None:
    """Every driver check passes on the RTL card with this host-memory behaviour."""
    res = run_card(sim, memory)
    assert res.tests >= 9

"""System regression: the shared driver program on the RTL card (card_top), each simulator.

Two host-memory behaviours: in order with back-pressure and idle cycles on every channel, and
long jittered latency with read data returned out of order across tags. Verilator runs every
check in both; Icarus, about 25x slower on this design, runs the in-order behaviour with the
checks that cover registers, request limits, chains of 1 to 256 descriptors, every error code and
the abort, plus a smaller alignment check (the full alignment, card copies and batched calls are
Verilator-only to keep `make test` short).
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


ICARUS_CHECKS = ("check_card_info", "check_validation", "check_request_limits", "check_chains",
                 "check_errors", "check_abort")


def _selection(sim: str) -> list[str] | None:
    from tb.card.driver_program import ALL_CHECKS

    if sim == "verilator":
        return None
    return [f"test_driver_program/check={i}" for i, c in enumerate(ALL_CHECKS)
            if c.name in ICARUS_CHECKS] + ["test_alignment_edges"]


@pytest.mark.rtl
@pytest.mark.parametrize("memory", ["inorder", "ooo"])
def test_card_top(sim: str, memory: str) -> None:
    """The driver checks pass on the RTL card with this host-memory behaviour."""
    if sim == "icarus" and memory == "ooo":
        pytest.skip("Icarus runs the in-order host memory only (Verilator runs both)")
    selection = _selection(sim)
    res = run_card(sim, memory, selection)
    assert res.tests == (len(selection) if selection else 10)

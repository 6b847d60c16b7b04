"""System regression: the shared driver program on the RTL card (card_top), each simulator.

Two host-memory behaviours: in order with back-pressure and idle cycles on every channel, and
long jittered latency with read data returned out of order across tags. Verilator runs every
check in order and every check but the card-to-card copies (which never touch host memory) out of
order. Icarus, about 100x slower on this design, runs registers, request limits, chains of
1 to 256 descriptors, the abort and a smaller alignment check in order, and batched calls and
every error code out of order: each check once (the full alignment and the card-to-card copies
are Verilator-only, to keep `make test` short). Only Verilator in order uses the driver's 1 MiB
descriptors; the other runs cap them at 64 KiB.
"""

from __future__ import annotations

import json

import pytest

from tb.common import simulator

CARD_MEM = 16 << 20
#: The small card (make sim's 80 KiB): the demo and the memory manager's bench oversubscribe it.
SMALL_CARD_MEM = 80 << 10
#: The driver's largest descriptor in every run but Verilator in order (which keeps the driver's
#: 1 MiB): the checks' multi-descriptor transfers then move hundreds of KiB, not several MiB.
SMALL_CHUNK = 64 << 10


def run_card(sim: str, memory: str, tests: list[str] | None = None,
             waves: bool | None = None) -> simulator.RunResult:
    return simulator.test(simulator.card_build(sim, {"MEM_SIZE": f"64'd{CARD_MEM}"}, waves),
                      "tb.card_top.test_card_top", testcase=tests,
                      extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                 "CARD_TB_MEMORY": memory, "SIM": sim,
                                 **({} if (sim, memory) == ("verilator", "inorder")
                                    else {"CARD_TB_CHUNK": str(SMALL_CHUNK)})})


ICARUS_CHECKS = {
    "inorder": ("check_card_info", "check_validation", "check_request_limits", "check_chains",
                "check_abort"),
    "ooo": ("check_batched_calls", "check_errors"),
}


def _selection(sim: str, memory: str) -> list[str] | None:
    from tb.card_top.driver_program import ALL_CHECKS

    if sim == "verilator":
        if memory == "inorder":
            return None
        # card-to-card copies never touch host memory: its behaviour cannot change them
        return [f"test_driver_program/check={i}" for i, c in enumerate(ALL_CHECKS)
                if c.name != "check_copy_on_card"] + ["test_alignment_edges"]
    extra = ["test_alignment_edges"] if memory == "inorder" else []
    return [f"test_driver_program/check={i}" for i, c in enumerate(ALL_CHECKS)
            if c.name in ICARUS_CHECKS[memory]] + extra


@pytest.mark.rtl
@pytest.mark.parametrize("memory", ["inorder", "ooo"])
def test_card_top(sim: str, memory: str) -> None:
    """The driver checks pass on the RTL card with this host-memory behaviour."""
    selection = _selection(sim, memory)
    res = run_card(sim, memory, selection)
    assert res.tests == (len(selection) if selection else 10)

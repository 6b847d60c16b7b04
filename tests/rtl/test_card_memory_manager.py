"""RTL regression: the memory manager on the card RTL with make sim's 80 KiB card memory (the same
build as the evicting demo), each simulator."""

from __future__ import annotations

import json

import pytest

from tb.common import simulator
from tests.rtl.test_card_top import SMALL_CARD_MEM as CARD_MEM


@pytest.mark.rtl
def test_card_memory_manager(sim: str) -> None:
    """Eviction, write-back and compaction with data checked end to end on the RTL card."""
    res = simulator.test(simulator.card_build(sim, {"MEM_SIZE": f"64'd{CARD_MEM}"}),
                     "tb.card_top.test_card_memory_manager",
                     extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                "CARD_TB_MEMORY": "inorder", "SIM": sim})
    assert res.tests == 1

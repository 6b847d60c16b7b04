"""Whole models on the RTL card, each simulator (tb/card_top/test_card_models.py): the demo CNN at
two card memory sizes (16 MiB: everything fits; 80 KiB: the memory manager must evict), the
onnx package's PyTorch-exported layers, a small MobileNet-class CNN and broadcasting elementwise
operators, the small BERT-like encoder, all bit-identical to the functional card."""

from __future__ import annotations

import json

import pytest

from tb.common import simulator
from tests.rtl.test_card_top import CARD_MEM
from tests.rtl.test_card_top import SMALL_CARD_MEM as SMALL


def _run(sim: str, mem: int, tests: list[str], env: dict[str, str] | None = None
         ) -> simulator.RunResult:
    return simulator.test(simulator.card_build(sim, {"MEM_SIZE": f"64'd{mem}"}),
                      "tb.card_top.test_card_models", testcase=tests,
                      extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": mem}),
                                 "CARD_TB_MEMORY": "inorder", "SIM": sim, **(env or {})})


@pytest.mark.rtl
@pytest.mark.parametrize("mem", [CARD_MEM, SMALL], ids=["fits", "evicts"])
def test_demo_on_the_rtl_card(sim: str, mem: int) -> None:
    """The demo CNN on the RTL card: same outputs as the functional card (and so at both sizes),
    evictions only on the small card. Verilator only: on Icarus (about 25x slower here) the demo
    runs once, as ``make sim`` runs it, in tests/rtl/test_golden_behaviour.py (the 80 KiB card
    that evicts, bit-identical to the functional card and to Verilator's recorded run)."""
    if sim != "verilator":
        pytest.skip("the demo runs on Icarus once, in test_golden_behaviour (make sim's flow)")
    res = _run(sim, mem, ["test_demo"], {"DEMO_EXPECT_EVICT": "1" if mem == SMALL else "0"})
    assert res.tests == 1


@pytest.mark.rtl
def test_pytorch_layers_on_the_rtl_card(sim: str) -> None:
    """Conv2d (plain, strided, padded, no bias, grouped, depthwise), Linear, ReLU, MaxPool2d
    and AvgPool2d on the RTL card."""
    res = _run(sim, CARD_MEM, ["test_pytorch_layer"])
    assert res.tests == 10


@pytest.mark.rtl
def test_cnn_operators_on_the_rtl_card(sim: str) -> None:
    """A small MobileNet-class CNN and broadcasting elementwise operators (issue 15; among them
    a row broadcast along H and a column along W) on the RTL card, bit-identical to the
    functional card."""
    res = _run(sim, CARD_MEM, ["test_mobilenet", "test_elementwise"])
    assert res.tests == 6


@pytest.mark.rtl
def test_bert_tiny_on_the_rtl_card(sim: str) -> None:
    """The small BERT-like encoder (issue 16) on the RTL card: both layers on Verilator, one
    on Icarus."""
    res = _run(sim, CARD_MEM, ["test_bert_tiny"],
               {"BERT_LAYERS": "2" if sim == "verilator" else "1"})
    assert res.tests == 1


@pytest.mark.rtl
def test_encoder_layer_on_the_rtl_card(sim: str) -> None:
    """A 128-token encoder layer with a full mask (query groups, per-feature activations) on
    the RTL card, Verilator only (Icarus runs bert_tiny's layer above)."""
    if sim != "verilator":
        pytest.skip("Icarus runs one bert_tiny layer (test_bert_tiny_on_the_rtl_card)")
    res = _run(sim, CARD_MEM, ["test_encoder_layer"])
    assert res.tests == 1

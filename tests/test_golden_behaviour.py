"""The functional card behaves exactly as recorded before the speed work
(tests/golden_behaviour.py): the demo CNN and ResNet-50 end to end on ModelCard, and the
accelerator benchmark's layers on AccelModel: outputs, every exact counter and the timing
estimate's cycles."""

from __future__ import annotations

from pathlib import Path

from tests import golden_behaviour as G


def test_demo_on_the_functional_card() -> None:
    """Outputs, per-step counters (with the cycle estimate) and manager traffic of both images."""
    assert G.model_demo() == G.load("model/demo")


def test_accelerator_benchmark_layers_on_the_model(tmp_path: Path) -> None:
    """The GEMM and convolution jobs: counters and card memory after the run."""
    assert G.model_layers(tmp_path) == G.load("model/layers")


def test_resnet50_on_the_functional_card() -> None:
    """ResNet-50 (light, int8) as the e2e benchmark runs it: logits, probabilities, counters."""
    got = G.model_resnet50()
    want = G.load("model/resnet50")
    assert got["outputs"] == want["outputs"], "ResNet-50's outputs changed"
    assert got["runs"] == want["runs"], "ResNet-50's counters or memory traffic changed"

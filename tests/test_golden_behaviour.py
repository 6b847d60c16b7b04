"""The functional card behaves exactly as recorded before the speed work
(tests/golden_behaviour.py): the demo CNN end to end on ModelCard, and the accelerator
benchmark's layers on AccelModel: outputs, every exact counter and the timing estimate's cycles.
ResNet-50's recorded run is checked by tests/compiler/test_card_runtime.py's end-to-end test,
from the same run that it compares with onnxruntime (one ResNet-50 compile and run, not two)."""

from __future__ import annotations

from pathlib import Path

from tests import golden_behaviour as G


def test_demo_on_the_functional_card() -> None:
    """Outputs, per-step counters (with the cycle estimate) and manager traffic of both images."""
    assert G.model_demo() == G.load("model/demo")


def test_accelerator_benchmark_layers_on_the_model(tmp_path: Path) -> None:
    """The GEMM and convolution jobs: counters and card memory after the run."""
    assert G.model_layers(tmp_path) == G.load("model/layers")



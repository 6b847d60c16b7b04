"""The performance model's accuracy on the committed study (docs/sweep-study: the demo and light
ResNet-50 at N = 4, 8, 16 and two scratchpad sizes on the RTL): every accelerator subgraph's
estimate, recorded by the functional card beside the RTL's cycles, within issue 17's targets."""

from __future__ import annotations

from pathlib import Path

from bench.perf_model_bench import NETWORK_TARGET, SUBGRAPH_TARGET, networks, study_rows

STUDY = Path(__file__).resolve().parents[1] / "docs" / "sweep-study"


def test_the_committed_study_is_within_the_targets() -> None:
    """All twelve networks of the study are there (both models, three N, two scratchpads),
    each within 2 % and each subgraph within 5 % of the RTL's cycles."""
    rows = study_rows(STUDY)
    nets = networks(rows)
    assert {(r["model"], r["n"], r["inp_depth"]) for r in nets} == {
        (m, n, d) for m in ("demo", "resnet50") for n in (4, 8, 16) for d in (4096, 8192)}
    worst = max(rows, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= SUBGRAPH_TARGET, worst
    worst_net = max(nets, key=lambda r: abs(r["error"]))
    assert abs(worst_net["error"]) <= NETWORK_TARGET, worst_net

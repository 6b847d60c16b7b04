"""Graph passes, registered by name and run in a declared order; options enable or disable them.

``PIPELINE`` is the order; ``run_pipeline(graph, {"fold_batchnorm": False})`` runs it with a
pass switched off. Registration is this explicit table, not an import side effect.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler.errors import PassError
from compiler.passes.affine_to_conv import AffineToConv
from compiler.passes.base import Pass, PassResult
from compiler.passes.fold_batchnorm import FoldBatchNorm
from compiler.passes.fold_constants import FoldConstants
from compiler.passes.fuse_transformer import FuseTransformer
from compiler.passes.infer_shapes import InferShapes
from compiler.passes.remove_dead_ops import RemoveDeadOps
from compiler.passes.remove_identity import RemoveIdentity
from compiler.xir import Graph

#: name -> pass class
PASSES: dict[str, type[Pass]] = {
    p.name: p for p in (InferShapes, FoldConstants, RemoveIdentity, FuseTransformer,
                        FoldBatchNorm, AffineToConv, RemoveDeadOps)
}

#: The declared order. infer_shapes comes first because folding and every later stage rely on
#: static shapes; dead-op removal comes last to sweep what folding left behind.
PIPELINE: tuple[str, ...] = (
    "infer_shapes",
    "fold_constants",
    "remove_identity",
    "fuse_transformer",
    "fold_batchnorm",
    "affine_to_conv",
    "remove_dead_ops",
)


@dataclass
class PassRecord:
    """One pipeline step as it ran (or was skipped)."""

    name: str
    enabled: bool
    seconds: float = 0.0
    result: PassResult = field(default_factory=PassResult)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "enabled": self.enabled, "seconds": round(self.seconds, 6),
                "changed": self.result.changed, "details": self.result.details}


def check_switches(switches: Mapping[str, bool]) -> None:
    unknown = sorted(set(switches) - set(PASSES))
    if unknown:
        raise PassError(f"unknown pass name(s) {unknown}; the passes are {list(PIPELINE)}")
    bad = sorted(k for k, v in switches.items() if not isinstance(v, bool))
    if bad:
        raise PassError(f"pass switches {bad} must be true or false")


def run_pipeline(graph: Graph, switches: Mapping[str, bool] | None = None) -> list[PassRecord]:
    """Run :data:`PIPELINE` on ``graph``; ``switches`` maps a pass name to enabled/disabled."""
    switches = dict(switches or {})
    check_switches(switches)
    records = []
    for name in PIPELINE:
        enabled = switches.get(name, True)
        rec = PassRecord(name, enabled)
        if enabled:
            t0 = time.perf_counter()
            rec.result = PASSES[name]().run(graph)
            rec.seconds = time.perf_counter() - t0
        records.append(rec)
    return records


__all__ = ["PASSES", "PIPELINE", "Pass", "PassRecord", "PassResult", "run_pipeline"]

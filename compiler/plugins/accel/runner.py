"""The accelerator's Runner: one compiled accelerator subgraph run on the card, float arrays in
and out (after VART's runner: chosen by the subgraph's ``runner`` attribute).

It needs a card session in its options (``options["card"]``, a
:class:`compiler.runtime.card.CardSession`); each ``run`` quantizes and packs the inputs, runs
the program through the memory manager and the driver, and unpacks and dequantizes the outputs.
:class:`compiler.runtime.card.CardExecutor` runs whole models without this host round trip
between accelerator subgraphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.errors import RunnerError
from compiler.runtime.base import Runner
from compiler.runtime.card import AccelStep, CardSession
from compiler.xir import CONST, Subgraph


class AccelRunner(Runner):
    """Runs one accelerator subgraph on the card of ``options["card"]``."""

    def __init__(self, subgraph: Subgraph, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(subgraph, options)
        session = self.options.get("card")
        if not isinstance(session, CardSession):
            raise RunnerError(
                f"subgraph {subgraph.name!r} runs on the accelerator: give its runner a card "
                'session, options={"card": CardSession(PcieDriver(card))}, or run the model '
                "with compiler.runtime.card.CardExecutor (dnncard-compile run uses the "
                "functional card)")
        # weights shared with another subgraph are inputs of the subgraph, but baked into the
        # constant blob: the runner takes only the activations
        self._inputs = [t for t in self._inputs if t.producer.type != CONST]
        self.step: AccelStep = session.prepare(subgraph)
        want = sorted(s.name for s in self.step.image.inputs)
        if sorted(t.name for t in self._inputs) != want:
            raise RunnerError(f"subgraph {subgraph.name!r}: accel_io lists inputs {want}, the "
                              f"graph {sorted(t.name for t in self._inputs)}; recompile")

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.step.run_host(self.check_inputs(inputs))

    @property
    def counters(self) -> dict[str, int]:
        """The accelerator's counters of the last run."""
        return dict(self.step.last_counters)

    def close(self) -> None:
        self.step.release()

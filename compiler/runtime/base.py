"""The runner interface every device implements (after VART's Runner): one runner per subgraph.

A runner is created for one subgraph of a compiled model and maps input arrays to output arrays
by tensor name. Its inputs are the subgraph's input tensors plus the outputs of any ``data`` ops
inside it (the model inputs it is fed); its outputs are the subgraph's output tensors. The CPU
runner implements it with numpy; the accelerator runner implements it on the card.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.errors import RunnerError
from compiler.xir import DATA, Subgraph, Tensor


class Runner(ABC):
    """Executes one subgraph."""

    def __init__(self, subgraph: Subgraph, options: Mapping[str, Any] | None = None) -> None:
        self.subgraph = subgraph
        self.options = dict(options or {})
        self._inputs = subgraph.input_tensors + [
            op.output for op in subgraph.topological_sort() if op.type == DATA]
        self._outputs = subgraph.output_tensors

    @property
    def input_tensors(self) -> list[Tensor]:
        return list(self._inputs)

    @property
    def output_tensors(self) -> list[Tensor]:
        return list(self._outputs)

    @abstractmethod
    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Compute every output tensor from the input arrays (by tensor name)."""

    def close(self) -> None:
        """Release device resources (nothing for the CPU)."""
        return None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs in declared order, converted to arrays; shape/dtype must match exactly."""
        out: dict[str, np.ndarray] = {}
        for t in self._inputs:
            if t.name not in inputs:
                raise RunnerError(f"subgraph {self.subgraph.name!r}: missing input {t.name!r} "
                                  f"(expects {[x.name for x in self._inputs]})")
            a = np.asarray(inputs[t.name])
            if a.shape != t.shape or a.dtype.name != t.dtype:
                raise RunnerError(f"subgraph {self.subgraph.name!r}: input {t.name!r} is "
                                  f"{a.shape}/{a.dtype}, expected {t.shape}/{t.dtype}")
            out[t.name] = a
        return out

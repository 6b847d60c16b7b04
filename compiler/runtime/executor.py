"""Running a whole compiled model: one runner per root child, in topological order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.errors import RunnerError
from compiler.runtime.cpu import CpuRunner
from compiler.runtime.loader import create_runner
from compiler.runtime.runner import Runner
from compiler.xir import Graph


def check_feeds(input_names: list[str], feeds: Mapping[str, np.ndarray]) -> None:
    """RunnerError unless ``feeds`` names exactly the model inputs."""
    missing = [n for n in input_names if n not in feeds]
    extra = [n for n in feeds if n not in input_names]
    if missing or extra:
        raise RunnerError(f"model inputs are {input_names}; missing {missing}, unknown {extra}")


class GraphExecutor:
    """Feeds model inputs through every subgraph's runner and returns the model outputs.

    An unpartitioned graph runs as one CPU subgraph (its root), which is how calibration and
    tests evaluate a graph before plugins have seen it.
    """

    def __init__(self, graph: Graph, options: Mapping[str, Any] | None = None) -> None:
        self.graph = graph
        root = graph.root_subgraph
        if root.is_leaf:
            self.runners: list[Runner] = [CpuRunner(root, options)]
        else:
            self.runners = [create_runner(c, options) for c in root.children_topological_sort()]
        self.input_names = [op.name for op in graph.inputs]
        self.output_names = [t.name for t in graph.outputs]
        # how many runners read each tensor, so the executor can drop it after the last
        self._readers: dict[str, int] = {}
        for r in self.runners:
            for t in r.input_tensors:
                self._readers[t.name] = self._readers.get(t.name, 0) + 1

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(self.input_names, feeds)
        env: dict[str, np.ndarray] = dict(feeds)
        left = dict(self._readers)
        outputs = set(self.output_names)
        for r in self.runners:
            got = r.run({t.name: env[t.name] for t in r.input_tensors})
            for t in r.output_tensors:
                if t.name not in got:
                    raise RunnerError(f"runner for {r.subgraph.name!r} did not produce "
                                      f"{t.name!r}")
            env.update(got)
            for t in r.input_tensors:
                left[t.name] -= 1
                if left[t.name] == 0 and t.name not in outputs:
                    env.pop(t.name, None)
        return {n: env[n] for n in self.output_names}

    def close(self) -> None:
        for r in self.runners:
            r.close()

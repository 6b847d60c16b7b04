"""Running a whole compiled model: one runner per root child, in topological order."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from compiler.errors import RunnerError
from compiler.runtime.base import Runner
from compiler.runtime.cpu import CpuRunner
from compiler.runtime.loader import check_runners, create_runner
from compiler.xir import Graph


def check_feeds(input_names: list[str], feeds: Mapping[str, np.ndarray]) -> None:
    """RunnerError unless ``feeds`` names exactly the model inputs."""
    missing = [n for n in input_names if n not in feeds]
    extra = [n for n in feeds if n not in input_names]
    if missing or extra:
        raise RunnerError(f"model inputs are {input_names}; missing {missing}, unknown {extra}")


class Lifetimes:
    """Which tensors a run can drop after each step: a tensor dies when the last step that reads
    it has run, unless it is a model output. Shared by `GraphExecutor` and the card executor."""

    def __init__(self, step_inputs: Iterable[Sequence[str]], outputs: Iterable[str]) -> None:
        self._readers = Counter(n for names in step_inputs for n in names)
        self._keep = frozenset(outputs)

    def start(self) -> _Countdown:
        """A fresh count for one run."""
        return _Countdown(dict(self._readers), self._keep)


class _Countdown:
    def __init__(self, left: dict[str, int], keep: frozenset[str]) -> None:
        self._left = left
        self._keep = keep

    def read(self, names: Iterable[str]) -> list[str]:
        """A step read `names`: the ones no later step reads (and that are no model output)."""
        dead = []
        for n in names:
            self._left[n] -= 1
            if self._left[n] == 0 and n not in self._keep:
                dead.append(n)
        return dead


class GraphExecutor:
    """Feeds model inputs through every subgraph's runner and returns the model outputs.

    An unpartitioned graph runs as one CPU subgraph (its root), which is how calibration and
    tests evaluate a graph before plugins have seen it. Every runner name is checked against
    the allow-list before any runner is created (``trust_runners``: see
    `compiler.runtime.loader`).
    """

    def __init__(self, graph: Graph, options: Mapping[str, Any] | None = None, *,
                 trust_runners: bool = False) -> None:
        self.graph = graph
        root = graph.root_subgraph
        if root.is_leaf:
            self.runners: list[Runner] = [CpuRunner(root, options)]
        else:
            children = root.children_topological_sort()
            check_runners(children, trust_runners=trust_runners)
            self.runners = [create_runner(c, options, trust_runners=trust_runners)
                            for c in children]
        self.input_names = [op.name for op in graph.inputs]
        self.output_names = [t.name for t in graph.outputs]
        # drop each tensor after the last runner that reads it
        self._lifetimes = Lifetimes(([t.name for t in r.input_tensors] for r in self.runners),
                                    self.output_names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(self.input_names, feeds)
        env: dict[str, np.ndarray] = dict(feeds)
        live = self._lifetimes.start()
        for r in self.runners:
            got = r.run({t.name: env[t.name] for t in r.input_tensors})
            for t in r.output_tensors:
                if t.name not in got:
                    raise RunnerError(f"runner for {r.subgraph.name!r} did not produce "
                                      f"{t.name!r}")
            env.update(got)
            for n in live.read(t.name for t in r.input_tensors):
                env.pop(n, None)
        return {n: env[n] for n in self.output_names}

    def close(self) -> None:
        for r in self.runners:
            r.close()

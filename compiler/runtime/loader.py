"""Resolving a subgraph's ``runner`` attribute to a runner factory.

``"cpu"`` is built in; other names are an entry point of group ``dnncard.runners`` or
``package.module:attr`` where ``attr`` is a Runner subclass (or any callable taking
``(subgraph, options)`` and returning a Runner).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from compiler.errors import RunnerError
from compiler.runtime.base import Runner
from compiler.runtime.cpu import CpuRunner
from compiler.xir import Subgraph

RunnerFactory = Callable[[Subgraph, Mapping[str, Any]], Runner]
ENTRY_POINT_GROUP = "dnncard.runners"
BUILTIN: dict[str, RunnerFactory] = {"cpu": CpuRunner}


def resolve_runner(name: str) -> RunnerFactory:
    if name in BUILTIN:
        return BUILTIN[name]
    eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if eps:
        return eps[0].load()  # type: ignore[no-any-return]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise RunnerError(f"runner {name!r}: cannot import {module_name!r} ({e}); install "
                              "the package that provides this device's runner") from e
        factory = getattr(module, attr, None)
        if factory is None or not callable(factory):
            raise RunnerError(f"runner {name!r}: {module_name!r} has no callable {attr!r}")
        return factory  # type: ignore[no-any-return]
    raise RunnerError(f"no runner named {name!r}: not built in ({sorted(BUILTIN)}), not an "
                      f"entry point of {ENTRY_POINT_GROUP!r}, not module:attr")


def create_runner(subgraph: Subgraph, options: Mapping[str, Any] | None = None) -> Runner:
    """The runner that the subgraph's ``runner`` attribute names."""
    name = subgraph.get_attr("runner")
    if not isinstance(name, str):
        raise RunnerError(f"subgraph {subgraph.name!r} has no runner attribute; was the model "
                          "partitioned (compiled)?")
    runner = resolve_runner(name)(subgraph, dict(options or {}))
    if not isinstance(runner, Runner):
        raise RunnerError(f"runner {name!r} returned {type(runner).__name__}, not a Runner")
    return runner

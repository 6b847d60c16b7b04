"""Resolving a subgraph's ``runner`` attribute to a runner factory, from an allow-list.

An .xmodel names the runner of each subgraph, and a file can come from anywhere: resolving a
name must never import code the user did not install. A name is accepted when it is

- built in: ``"cpu"``, or the runner of one of the project's own plugins (:data:`TRUSTED`);
- an entry point of group ``dnncard.runners`` (a package the user installed declares it);
- any other ``package.module:attr`` only when the caller passes ``trust_runners=True`` (the
  CLI's ``run --trust-runners``): then ``attr`` is a Runner subclass or a callable taking
  ``(subgraph, options)`` and returning a Runner.

Anything else is an :class:`UntrustedRunnerError`, raised before any module is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any

from compiler.errors import RunnerError, UntrustedRunnerError
from compiler.runtime.base import Runner
from compiler.runtime.cpu import CpuRunner
from compiler.xir import Subgraph

RunnerFactory = Callable[[Subgraph, Mapping[str, Any]], Runner]
ENTRY_POINT_GROUP = "dnncard.runners"
BUILTIN: dict[str, RunnerFactory] = {"cpu": CpuRunner}
#: The runners of the built-in plugins (a test checks each plugin's get_runner() is listed).
TRUSTED: frozenset[str] = frozenset({
    "compiler.plugins.accel.runner:AccelRunner",
    "compiler.plugins.softmax_ip:SoftmaxIpRunner",
})


def _entry_points(name: str) -> list[metadata.EntryPoint]:
    return [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]


def check_runner_name(name: object, *, trust_runners: bool = False, where: str = "") -> str:
    """``name`` if it is allowed (see the module docstring); RunnerError otherwise. Imports
    nothing."""
    what = f"{where}: " if where else ""
    if not isinstance(name, str) or not name:
        raise RunnerError(f"{what}runner must be a non-empty string, got {name!r}")
    if name in BUILTIN or name in TRUSTED or _entry_points(name) or trust_runners:
        return name
    if ":" in name:
        raise UntrustedRunnerError(
            f"{what}runner {name!r} is not built in and not an installed entry point of "
            f"{ENTRY_POINT_GROUP!r}; refusing to import {name.partition(':')[0]!r} from a model "
            "file (it could run any code). Install the package that provides it, or pass "
            "--trust-runners (trust_runners=True) if you trust this file")
    raise RunnerError(f"{what}no runner named {name!r}: not built in ({sorted(BUILTIN)}), not "
                      f"an entry point of {ENTRY_POINT_GROUP!r}, not module:attr")


def check_runners(subgraphs: Iterable[Subgraph], *, trust_runners: bool = False) -> None:
    """Check every subgraph's runner name before any runner is created (nothing imported)."""
    for s in subgraphs:
        name = s.get_attr("runner")
        if name is None:
            raise RunnerError(f"subgraph {s.name!r} has no runner attribute; was the model "
                              "partitioned (compiled)?")
        check_runner_name(name, trust_runners=trust_runners, where=f"subgraph {s.name!r}")


def resolve_runner(name: str, *, trust_runners: bool = False) -> RunnerFactory:
    check_runner_name(name, trust_runners=trust_runners)
    if name in BUILTIN:
        return BUILTIN[name]
    eps = _entry_points(name)
    if eps:
        try:
            return eps[0].load()  # type: ignore[no-any-return]
        except Exception as e:
            raise RunnerError(f"runner {name!r}: entry point {eps[0].value!r} cannot be "
                              f"loaded: {type(e).__name__}: {e}") from e
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise RunnerError(f"runner {name!r}: cannot import {module_name!r} ({e}); install "
                              "the package that provides this device's runner") from e
        except Exception as e:
            raise RunnerError(f"runner {name!r}: importing {module_name!r} raised "
                              f"{type(e).__name__}: {e}") from e
        factory = getattr(module, attr, None)
        if factory is None or not callable(factory):
            raise RunnerError(f"runner {name!r}: {module_name!r} has no callable {attr!r}")
        return factory  # type: ignore[no-any-return]
    raise RunnerError(f"no runner named {name!r}: not built in ({sorted(BUILTIN)}), not an "
                      f"entry point of {ENTRY_POINT_GROUP!r}, not module:attr")


def create_runner(subgraph: Subgraph, options: Mapping[str, Any] | None = None, *,
                  trust_runners: bool = False) -> Runner:
    """The runner that the subgraph's ``runner`` attribute names."""
    check_runners([subgraph], trust_runners=trust_runners)
    name = subgraph.get_attr("runner")
    runner = resolve_runner(name, trust_runners=trust_runners)(subgraph, dict(options or {}))
    if not isinstance(runner, Runner):
        raise RunnerError(f"runner {name!r} returned {type(runner).__name__}, not a Runner")
    return runner

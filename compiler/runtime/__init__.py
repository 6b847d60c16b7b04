"""Runtime: runners per subgraph (CPU, custom IPs, the accelerator's AccelRunner) and the
executors that run a compiled model: `GraphExecutor` on the host runners, `CardExecutor` on the
card (accelerator subgraphs through the memory manager and the PCIe driver).

The card half (`compiler.runtime.card`) is imported only when one of its names is first used, so
that running a graph on the host (calibration at compile time, the CPU runtime) never loads the
driver and the memory manager.
"""

from __future__ import annotations

import importlib
from typing import Any

from compiler.runtime.base import Runner
from compiler.runtime.cpu import CpuRunner
from compiler.runtime.executor import GraphExecutor
from compiler.runtime.loader import BUILTIN, create_runner, resolve_runner

#: Names served lazily by compiler.runtime.card.
_CARD = ("AccelConfigMismatch", "AccelStepError", "CardExecutor", "CardMemoryError",
         "CardRuntimeError", "CardSession", "Event", "RunStats", "StepStats", "chrome_trace",
         "write_chrome_trace")

__all__ = ["BUILTIN", "CpuRunner", "GraphExecutor", "Runner", "create_runner", "resolve_runner",
           *_CARD]


def __getattr__(name: str) -> Any:
    if name in _CARD:
        return getattr(importlib.import_module("compiler.runtime.card"), name)
    raise AttributeError(f"module 'compiler.runtime' has no attribute {name!r}")

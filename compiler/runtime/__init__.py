"""Runtime: runners per subgraph (CPU today; the accelerator implements the same interface)
and the executor that runs a compiled model."""

from compiler.runtime.cpu import CpuRunner
from compiler.runtime.executor import GraphExecutor
from compiler.runtime.loader import BUILTIN, create_runner, resolve_runner
from compiler.runtime.runner import Runner

__all__ = ["BUILTIN", "CpuRunner", "GraphExecutor", "Runner", "create_runner", "resolve_runner"]

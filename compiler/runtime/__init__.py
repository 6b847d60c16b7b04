"""Runtime: runners per subgraph (CPU, custom IPs, the accelerator's AccelRunner) and the
executors that run a compiled model: `GraphExecutor` on the host runners, `CardExecutor` on the
card (accelerator subgraphs through the memory manager and the PCIe driver)."""

from compiler.runtime.card import (
    AccelConfigMismatch,
    AccelStepError,
    CardExecutor,
    CardMemoryError,
    CardRuntimeError,
    CardSession,
    Event,
    RunStats,
    StepStats,
    chrome_trace,
    write_chrome_trace,
)
from compiler.runtime.cpu import CpuRunner
from compiler.runtime.executor import GraphExecutor
from compiler.runtime.loader import BUILTIN, create_runner, resolve_runner
from compiler.runtime.runner import Runner

__all__ = ["BUILTIN", "AccelConfigMismatch", "AccelStepError", "CardExecutor",
           "CardMemoryError", "CardRuntimeError", "CardSession", "CpuRunner", "Event",
           "GraphExecutor", "RunStats", "Runner", "StepStats", "chrome_trace", "create_runner",
           "resolve_runner", "write_chrome_trace"]

"""The accelerator's compiler plugin: quantized Conv / Gemm / MatMul (+ Relu/Clip), residual
Add/Sum, MaxPool, global average pooling and a standalone Relu go to device ``ACCEL`` as
instruction streams.

``--options '{"plugin": "accel", "quantize": true}'``; plugin options (``plugin_options.accel``):
the accelerator configuration the code is generated for (``n``, ``inp_depth``, ``wgt_depth``,
``acc_depth``, ``queue_depth``; default: the default build, `AccelConfig()`) and limits on one
subgraph (``max_layers``, ``max_step_bytes``: card bytes one launch may need at once). The
runtime checks the configuration against the card's ACC_CFG_* registers. See
docs/plugins.md ("The accelerator plugin") and docs/runtime.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from compiler.errors import OptionsError
from compiler.plugin_api import Plugin
from compiler.plugins.accel import codegen
from compiler.plugins.accel import kernels as K
from compiler.plugins.accel.partition import Limits, partition
from compiler.xir import Graph, Op, Subgraph
from pyhost.spec.accel import AccelConfig

DEVICE = "ACCEL"
RUNNER = "compiler.plugins.accel.runner:AccelRunner"
CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(AccelConfig))
LIMIT_KEYS = ("max_layers", "max_step_bytes")


class AccelPlugin(Plugin):
    def __init__(self) -> None:
        self.config = AccelConfig()
        self.limits = Limits()
        #: head op name -> why the last partition left it to the CPU
        self.rejected: dict[str, str] = {}
        self._kernels: dict[Op, K.Kernel] = {}

    def get_plugin_name(self) -> str:
        return "accel"

    def get_device(self) -> str:
        return DEVICE

    def get_runner(self) -> str:
        return RUNNER

    def set_options(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(CONFIG_KEYS) - set(LIMIT_KEYS))
        if unknown:
            raise OptionsError(f"accel plugin options are {[*CONFIG_KEYS, *LIMIT_KEYS]}, got "
                               f"unknown {unknown}")
        for k in (*CONFIG_KEYS, *LIMIT_KEYS):
            v = options.get(k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise OptionsError(f"accel option {k!r} must be a positive int, got {v!r}")
        cfg = {k: options[k] for k in CONFIG_KEYS if k in options}
        self.config = dataclasses.replace(AccelConfig(), **cfg)
        if self.config.n not in (4, 8, 16):
            raise OptionsError(f"accel option 'n' must be 4, 8 or 16 (the RTL's N), got "
                               f"{self.config.n}")
        self.limits = Limits(max_layers=options.get("max_layers"),
                             max_step_bytes=options.get("max_step_bytes"))

    def partition(self, graph: Graph) -> set[Subgraph]:
        result = partition(graph, self.config, self.limits)
        self.rejected = result.rejected
        self._kernels = result.kernels
        return result.subgraphs

    def reasons(self) -> dict[str, str]:
        return dict(self.rejected)

    def compile(self, subgraph: Subgraph) -> None:
        codegen.compile_subgraph(subgraph, self.config, self._kernels)


def get_plugin() -> Plugin:
    return AccelPlugin()

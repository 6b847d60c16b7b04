"""Example plugin: a custom Softmax IP next to the accelerator, after Xilinx's plugin sample.

``--options '{"plugin": "softmax_ip"}'`` hands every float32 Softmax over the last axis whose
rows fit the IP (at most ``MAX_COLS`` values) to device ``SOFTMAX_IP``, one subgraph per
Softmax. compile() writes the IP's job descriptor (the register image the driver would program)
into the ``ip_descriptor`` attribute; the runner reads only that descriptor, so a wrong
descriptor gives wrong results. The IP is emulated in numpy: it computes exp(x - max) in float32
and normalizes each row, which is what the hardware does.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.errors import OptionsError, RunnerError
from compiler.plugin_api import Plugin, filter_by_type
from compiler.runtime.base import Runner
from compiler.xir import Graph, Subgraph

DEVICE = "SOFTMAX_IP"
RUNNER = "compiler.plugins.softmax_ip:SoftmaxIpRunner"
#: The widest row the IP's line buffer holds.
MAX_COLS = 4096
#: Descriptor: magic, version, flags, rows, cols (little-endian).
DESCRIPTOR = struct.Struct("<4sHHII")
MAGIC = b"SMAX"
VERSION = 1


class SoftmaxIpPlugin(Plugin):
    def __init__(self) -> None:
        self.max_cols = MAX_COLS

    def get_plugin_name(self) -> str:
        return "softmax_ip"

    def get_device(self) -> str:
        return DEVICE

    def get_runner(self) -> str:
        return RUNNER

    def set_options(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - {"max_cols"}
        if unknown:
            raise OptionsError(f"softmax_ip options are ['max_cols'], got {sorted(unknown)}")
        if "max_cols" in options:
            v = options["max_cols"]
            if not isinstance(v, int) or v <= 0:
                raise OptionsError(f"softmax_ip max_cols must be a positive int, got {v!r}")
            self.max_cols = v

    def partition(self, graph: Graph) -> set[Subgraph]:
        return {s for s in filter_by_type(graph, "Softmax") if self._fits(s)}

    def _fits(self, s: Subgraph) -> bool:
        (op,) = s.ops
        x = op.input_tensors()[0]
        axis = int(op.attrs.get("axis", -1))
        assert x.shape is not None
        return (x.dtype == "float32" and axis % len(x.shape) == len(x.shape) - 1
                and x.shape[-1] <= self.max_cols)

    def compile(self, subgraph: Subgraph) -> None:
        (op,) = subgraph.ops
        shape = op.output.shape
        assert shape is not None
        cols = shape[-1]
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        subgraph.set_attr("ip_descriptor", DESCRIPTOR.pack(MAGIC, VERSION, 0, rows, cols))


class SoftmaxIpRunner(Runner):
    """Emulates the IP for one compiled Softmax subgraph."""

    def __init__(self, subgraph: Subgraph, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(subgraph, options)
        blob = subgraph.get_attr("ip_descriptor")
        if not isinstance(blob, bytes) or len(blob) != DESCRIPTOR.size:
            raise RunnerError(f"subgraph {subgraph.name!r}: missing or malformed ip_descriptor")
        magic, version, _flags, self.rows, self.cols = DESCRIPTOR.unpack(blob)
        if magic != MAGIC or version != VERSION:
            raise RunnerError(f"subgraph {subgraph.name!r}: descriptor {magic!r} v{version} is "
                              f"not a {MAGIC!r} v{VERSION} descriptor")
        if len(self.input_tensors) != 1 or len(self.output_tensors) != 1:
            raise RunnerError(f"subgraph {subgraph.name!r}: the IP takes one input and one "
                              "output")

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = self.check_inputs(inputs)[self.input_tensors[0].name]
        if x.size != self.rows * self.cols:
            raise RunnerError(f"subgraph {self.subgraph.name!r}: input has {x.size} values, "
                              f"the descriptor says {self.rows} x {self.cols}")
        rows = x.reshape(self.rows, self.cols).astype(np.float32)
        e = np.exp(rows - rows.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True, dtype=np.float32)
        out = self.output_tensors[0]
        return {out.name: y.reshape(out.shape).astype(np.float32)}


def get_plugin() -> Plugin:
    return SoftmaxIpPlugin()

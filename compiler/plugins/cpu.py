"""The built-in CPU target: runs last and takes every op no plugin claimed.

Its partition merges what is left as far as possible (fewest CPU subgraphs without a cycle); its
compile checks that every op has a CPU implementation and records which one (``numpy`` kernel or
``onnx-reference``) in the ``kernels`` attribute.
"""

from __future__ import annotations

from compiler.errors import PartitionError
from compiler.ops.infer import cpu_can_run
from compiler.ops.registry import get_opdef
from compiler.plugin_api.base import Plugin
from compiler.plugin_api.helpers import filter, merge_subgraph
from compiler.xir import CONST, DATA, Graph, Subgraph

DEVICE = "CPU"
RUNNER = "cpu"


class CpuPlugin(Plugin):
    def get_plugin_name(self) -> str:
        return "cpu"

    def get_device(self) -> str:
        return DEVICE

    def get_runner(self) -> str:
        return RUNNER

    def partition(self, graph: Graph) -> set[Subgraph]:
        return merge_subgraph(filter(graph, lambda free: free))

    def compile(self, subgraph: Subgraph) -> None:
        kernels: dict[str, str] = {}
        for op in subgraph.topological_sort():
            if op.type in (DATA, CONST):
                continue
            if not cpu_can_run(op):
                raise PartitionError(f"op {op.name!r} of type {op.type!r} was left to the CPU, "
                                     "but the CPU has no kernel for it; claim it with a plugin "
                                     "or add a kernel in compiler/ops/")
            kernels[op.type] = "numpy" if get_opdef(op.type) is not None else "onnx-reference"
        subgraph.set_attr("kernels", dict(sorted(kernels.items())))


def get_plugin() -> Plugin:
    return CpuPlugin()

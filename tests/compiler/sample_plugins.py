"""Plugins used by the tests: a Conv(+Relu) "accelerator", a Relu claimer, and broken ones.

The test accelerator's runner is the CPU runner, so compiled models still execute and can be
compared with the CPU-only result.
"""

from __future__ import annotations

from compiler.plugin_api import (
    Plugin,
    filter,
    filter_by_template,
    filter_by_type,
    merge_subgraph,
    unassigned_children,
)
from compiler.xir import Graph, GraphTemplate, Subgraph


class ConvReluPlugin(Plugin):
    """Claims Conv -> Relu pairs (fused) and lone Convs, merged as far as legal."""

    def __init__(self) -> None:
        self.seen_device_in_compile: list[object] = []
        self.compiled: list[str] = []

    def get_plugin_name(self) -> str:
        return "test_accel"

    def get_device(self) -> str:
        return "TEST_ACCEL"

    def get_runner(self) -> str:
        return "cpu"

    def partition(self, graph: Graph) -> set[Subgraph]:
        t = GraphTemplate("conv_relu")
        conv = t.add_op("conv", "Conv")
        t.add_op("relu", "Relu", {conv: "X"})
        fused = filter_by_template(graph, t)
        lone = filter_by_type(graph, "Conv")
        return merge_subgraph(fused | lone)

    def compile(self, subgraph: Subgraph) -> None:
        self.seen_device_in_compile.append(subgraph.get_attr("device"))
        self.compiled.append(subgraph.name)
        ops = [op.name for op in subgraph.topological_sort() if op.type != "const"]
        subgraph.set_attr("instructions", ";".join(ops).encode())


class ConvOnlyPlugin(ConvReluPlugin):
    """Every Conv, merged as far as legal (Relus in between stay on the CPU)."""

    def get_plugin_name(self) -> str:
        return "conv_only"

    def partition(self, graph: Graph) -> set[Subgraph]:
        return merge_subgraph(filter_by_type(graph, "Conv"))


class ReluPlugin(Plugin):
    """Claims every Relu still unassigned, one subgraph each; records what it saw."""

    def __init__(self) -> None:
        self.saw_types: set[str] = set()

    def get_plugin_name(self) -> str:
        return "relu_ip"

    def get_device(self) -> str:
        return "RELU_IP"

    def get_runner(self) -> str:
        return "cpu"

    def partition(self, graph: Graph) -> set[Subgraph]:
        for c in unassigned_children(graph):
            self.saw_types |= {op.type for op in c.ops}
        return filter_by_type(graph, "Relu")

    def compile(self, subgraph: Subgraph) -> None:
        subgraph.set_attr("lanes", 16)


class _Broken(ReluPlugin):
    def get_plugin_name(self) -> str:
        return type(self).__name__.lower()


class ReturnsStale(_Broken):
    """Merges the last Relu with the MaxPool after it, then returns the merged-away originals."""

    def partition(self, graph: Graph) -> set[Subgraph]:
        subs = filter_by_type(graph, {"Relu", "MaxPool"})
        merge_subgraph(subs)
        return subs


class ReturnsOverlapping(_Broken):
    """Returns a merged subgraph together with one of its former parts."""

    def partition(self, graph: Graph) -> set[Subgraph]:
        subs = filter_by_type(graph, {"Relu", "MaxPool"})
        merged = merge_subgraph(subs)
        return merged | {s for s in subs if s.parent is None}


class ReturnsAssigned(_Broken):
    """Returns children another plugin already claimed."""

    def partition(self, graph: Graph) -> set[Subgraph]:
        return {c for c in graph.root_subgraph.children if c.get_attr("device")}


class ReturnsNone(_Broken):
    def partition(self, graph: Graph) -> set[Subgraph]:
        return None  # type: ignore[return-value]


class ReturnsOps(_Broken):
    def partition(self, graph: Graph) -> set[Subgraph]:
        return set(graph.ops)  # type: ignore[arg-type]


class RaisesInPartition(_Broken):
    def partition(self, graph: Graph) -> set[Subgraph]:
        raise ValueError("boom")


class RaisesInCompile(_Broken):
    def compile(self, subgraph: Subgraph) -> None:
        raise RuntimeError("no instructions for you")


class FilterEverything(_Broken):
    def partition(self, graph: Graph) -> set[Subgraph]:
        return filter(graph, lambda free: {s for s in free if len(s.ops) == 1 and
                                           next(iter(s.ops)).type == "Relu"})


def get_plugin() -> Plugin:
    return ConvReluPlugin()


def get_relu_plugin() -> Plugin:
    return ReluPlugin()


def get_conv_only() -> Plugin:
    return ConvOnlyPlugin()


def not_a_plugin() -> object:
    return 42


def raises() -> Plugin:
    raise RuntimeError("factory failed")

"""Running plugins in order over a graph, then the CPU target on whatever is left.

For each plugin, in the order given: ``partition(graph)`` -> validated claims -> constants
absorbed -> ``compile(subgraph)`` for each claim (in topological order) -> ``device``,
``runner`` and ``plugin`` attributes set. A claim must be a current, unassigned child of the
root, and claims must not overlap; anything else is a :class:`PartitionError` naming the plugin.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compiler.errors import CompilerError, PartitionError
from compiler.plugin_api.base import Plugin
from compiler.plugin_api.helpers import is_assigned, root_children
from compiler.xir import CONST, Graph, Op, Subgraph


@dataclass
class PluginRecord:
    """What one plugin claimed."""

    name: str
    device: str
    runner: str
    subgraphs: list[str] = field(default_factory=list)
    ops: int = 0
    seconds: float = 0.0
    #: the CPU target's record: op name -> "<type>: <reason>" for every op that runs there,
    #: the reasons the plugins before it gave (`Plugin.reasons`)
    cpu_ops: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "device": self.device, "runner": self.runner,
             "subgraphs": self.subgraphs, "ops": self.ops, "seconds": round(self.seconds, 6)}
        if self.cpu_ops:
            d["cpu_ops"] = dict(self.cpu_ops)
        return d


def partition_graph(graph: Graph, plugins: Sequence[Plugin],
                    cpu: Plugin | None = None) -> list[PluginRecord]:
    """Run ``plugins`` then the CPU target; every root child ends with a ``device``."""
    from compiler.plugins.cpu import CpuPlugin

    root = root_children(graph)
    if any(is_assigned(c) for c in root.children):
        raise PartitionError(f"graph {graph.name!r} is already partitioned")
    records = []
    for plugin in [*plugins, cpu or CpuPlugin()]:
        records.append(run_plugin(graph, plugin))
    if plugins:
        records[-1].cpu_ops = _cpu_reasons(graph, records[-1], plugins)
    left = [c.name for c in root.children if not is_assigned(c)]
    if left:
        raise PartitionError(f"the CPU target left {left} unassigned; its partition() must "
                             "claim every remaining child")
    root.children_topological_sort()  # the children graph must still be acyclic
    return records


def _cpu_reasons(graph: Graph, cpu: PluginRecord, plugins: Sequence[Plugin]
                 ) -> dict[str, str]:
    """For every computing op the CPU target took: its type and the plugins' reasons."""
    said: dict[str, list[str]] = {}
    for p in plugins:
        for op, why in p.reasons().items():
            said.setdefault(op, []).append(f"{p.get_plugin_name()}: {why}")
    names = set(cpu.subgraphs)
    out = {}
    for c in graph.root_subgraph.children:
        if c.name not in names:
            continue
        for op in sorted(c.ops, key=lambda o: graph.topo_position(o)):
            if op.type in ("const", "data", "Identity"):
                continue
            why = "; ".join(said.get(op.name, [])) or "no plugin takes this op type"
            out[op.name] = f"{op.type}: {why}"
    return out


def _identity(plugin: Plugin) -> tuple[str, str, str]:
    """The plugin's name, device and runner, each a non-empty str (PartitionError otherwise):
    they are written into the .xmodel and resolved by the runtime."""
    out = []
    for what in ("get_plugin_name", "get_device", "get_runner"):
        try:
            v = getattr(plugin, what)()
        except Exception as e:
            raise PartitionError(f"plugin {type(plugin).__name__}: {what}() raised "
                                 f"{type(e).__name__}: {e}") from e
        if not isinstance(v, str) or not v.strip() or not v.isprintable():
            who = out[0] if out else type(plugin).__name__
            raise PartitionError(f"plugin {who!r}: {what}() must return a non-empty printable "
                                 f"str, got {type(v).__name__} {v!r}")
        out.append(v)
    return out[0], out[1], out[2]


def run_plugin(graph: Graph, plugin: Plugin) -> PluginRecord:
    name, device, runner = _identity(plugin)
    t0 = time.perf_counter()
    root = root_children(graph)
    try:
        claimed = plugin.partition(graph)
    except CompilerError:
        raise
    except Exception as e:
        raise PartitionError(f"plugin {name!r}: partition() raised {type(e).__name__}: "
                             f"{e}") from e
    subs = validate_claims(graph, name, claimed)
    if plugin.absorb_constants:
        subs = [absorb_constants(root, s) for s in subs]
    subs.sort(key=lambda s: s.sort_key())
    for s in subs:
        try:
            plugin.compile(s)
        except CompilerError:
            raise
        except Exception as e:
            raise PartitionError(f"plugin {name!r}: compile({s.name!r}) raised "
                                 f"{type(e).__name__}: {e}") from e
        s.set_attr("device", device)
        s.set_attr("runner", runner)
        s.set_attr("plugin", name)
    return PluginRecord(name, device, runner, [s.name for s in subs],
                        sum(len(s.ops) for s in subs), time.perf_counter() - t0)


def validate_claims(graph: Graph, plugin: str, claimed: Iterable[Subgraph] | None
                    ) -> list[Subgraph]:
    if claimed is None or isinstance(claimed, (Subgraph, str, bytes)):
        raise PartitionError(f"plugin {plugin!r}: partition() must return a set of Subgraph "
                             f"(empty if it claims nothing), got {type(claimed).__name__}")
    try:
        subs = list(dict.fromkeys(claimed))
    except TypeError:
        raise PartitionError(f"plugin {plugin!r}: partition() returned "
                             f"{type(claimed).__name__}, not a set of Subgraph") from None
    for s in subs:
        if not isinstance(s, Subgraph):
            raise PartitionError(f"plugin {plugin!r}: partition() returned a "
                                 f"{type(s).__name__} among its subgraphs")
        if s.graph is not graph:
            raise PartitionError(f"plugin {plugin!r}: subgraph {s.name!r} belongs to another "
                                 "graph")
    owner: dict[Op, Subgraph] = {}
    for s in sorted(subs, key=lambda s: (min(o.index for o in s.ops), s.name)):
        shared = [op for op in s.ops if op in owner]
        if shared:
            other = owner[shared[0]]
            raise PartitionError(
                f"plugin {plugin!r}: subgraphs {other.name!r} and {s.name!r} overlap (both "
                f"hold {sorted(o.name for o in shared)[:5]}); return disjoint subgraphs, e.g. "
                "merge them with merge_subgraph()")
        for op in s.ops:
            owner[op] = s
    root = graph.root_subgraph
    for s in subs:
        if not root.is_child(s):
            raise PartitionError(
                f"plugin {plugin!r}: {s.name!r} is not a child of the root subgraph (a "
                "subgraph that was merged is replaced by the merge result; return that one, "
                "and only children of the root)")
        if is_assigned(s):
            raise PartitionError(
                f"plugin {plugin!r}: {s.name!r} was already claimed by plugin "
                f"{s.get_attr('plugin')!r} for device {s.get_attr('device')!r}; claim only "
                "unassigned children (the filter_* helpers return only those)")
    return subs


def absorb_constants(root: Subgraph, sub: Subgraph) -> Subgraph:
    """Move unassigned ``const`` ops that only ``sub`` reads into ``sub`` (its weights)."""
    ops = sub.ops
    extra = []
    for op in sub.topological_sort():
        for t in op.input_tensors():
            p = t.producer
            if p.type != CONST or p in ops:
                continue
            c = root.child_of(p)
            if c in extra or is_assigned(c) or len(c.ops) != 1:
                continue
            if all(u in ops for u in p.output.consumers) and p.output not in root.graph.outputs:
                extra.append(c)
    if not extra:
        return sub
    return root.merge_children([sub, *extra], into=sub)

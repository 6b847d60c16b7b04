"""``remove_dead_ops``: drop ops that no graph output depends on (model inputs always stay)."""

from __future__ import annotations

from compiler.passes.base import Pass, PassResult
from compiler.xir import DATA, Graph, Op


class RemoveDeadOps(Pass):
    name = "remove_dead_ops"
    description = "remove ops no graph output depends on"

    def run(self, graph: Graph) -> PassResult:
        live: set[Op] = set()
        stack = [t.producer for t in graph.outputs]
        while stack:
            op = stack.pop()
            if op in live:
                continue
            live.add(op)
            stack.extend(op.input_ops())
        removed = 0
        for op in reversed(graph.topological_sort()):
            if op not in live and op.type != DATA:
                graph.remove_op(op)
                removed += 1
        return PassResult(removed, {"removed": removed})

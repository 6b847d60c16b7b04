"""Graph templates: small op patterns, found in a graph by subgraph isomorphism (networkx VF2).

After ``xir::GraphTemplate``: ``add_op(name, types, inputs)`` adds a template op that matches any
op whose type is in ``types``; ``inputs`` maps an earlier template op to the input argument name
it must feed (``"X"`` for ``Relu(X)``, ``None`` for any argument). Matching is a monomorphism on
op types and named input edges: each template edge must exist in the graph with that argument;
the matched ops may have further edges among themselves and to the rest of the graph (whether
the match is usable as a subgraph is the caller's business, see
``compiler.plugin_api.filter_by_template``).
An optional ``where`` predicate per template op narrows the match (e.g. only ``group == 1`` convs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.errors import XirError
from compiler.xir.graph import Graph
from compiler.xir.op import Op

if TYPE_CHECKING:
    import networkx as nx

OpPredicate = Callable[[Op], bool]


@dataclass(frozen=True, eq=False)
class OpTemplate:
    """One op of a :class:`GraphTemplate` (identity-compared, like XIR's OpTemplate*)."""

    name: str
    types: frozenset[str]
    inputs: tuple[tuple[OpTemplate, str | None], ...]
    where: OpPredicate | None = None

    def __repr__(self) -> str:
        return f"OpTemplate({self.name!r}, {sorted(self.types)})"


class GraphTemplate:
    """A connected pattern of template ops."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ops: dict[str, OpTemplate] = {}

    def add_op(self, name: str, types: str | Iterable[str],
               inputs: Mapping[OpTemplate | str, str | None] | None = None,
               where: OpPredicate | None = None) -> OpTemplate:
        """Add a template op matching ``types``, fed by earlier template ops (``inputs``)."""
        if name in self._ops:
            raise XirError(f"template {self.name!r} already has an op named {name!r}")
        tset = frozenset([types] if isinstance(types, str) else types)
        if not tset or not all(isinstance(t, str) and t for t in tset):
            raise XirError(f"template op {name!r}: give at least one op type (non-empty str)")
        edges = []
        for src, arg in (inputs or {}).items():
            src_op = self._ops.get(src) if isinstance(src, str) else src
            if src_op is None or self._ops.get(src_op.name) is not src_op:
                raise XirError(f"template op {name!r}: input {src!r} is not an op added earlier "
                               f"to template {self.name!r}")
            if arg is not None and (not isinstance(arg, str) or not arg):
                raise XirError(f"template op {name!r}: argument names are str or None (any)")
            edges.append((src_op, arg))
        op = OpTemplate(name, tset, tuple(edges), where)
        self._ops[name] = op
        return op

    @property
    def ops(self) -> list[OpTemplate]:
        return list(self._ops.values())

    def get_op(self, name: str) -> OpTemplate:
        try:
            return self._ops[name]
        except KeyError:
            raise XirError(f"template {self.name!r} has no op named {name!r}") from None

    def get_op_num(self) -> int:
        return len(self._ops)

    def to_networkx(self) -> nx.DiGraph:
        """The template as a DiGraph: node attrs ``types``/``where``, edge attr ``args``."""
        import networkx as nx  # on first use: networkx takes about a second to import

        t = nx.DiGraph()
        for op in self._ops.values():
            t.add_node(op.name, types=op.types, where=op.where)
        for op in self._ops.values():
            for src, arg in op.inputs:
                if t.has_edge(src.name, op.name):
                    t[src.name][op.name]["args"] += (arg,)
                else:
                    t.add_edge(src.name, op.name, args=(arg,))
        return t

    def find_matches(self, graph: Graph, ops: Iterable[Op] | None = None) -> list[dict[str, Op]]:
        """Every distinct match among ``ops`` (default: all ops) as template-op name -> op.

        Deterministic: sorted by the topological positions of the matched ops, then by the
        template's op order. Symmetric matches (same ops, different roles) are all returned.
        """
        import networkx as nx
        from networkx.algorithms.isomorphism import DiGraphMatcher

        if not self._ops:
            raise XirError(f"template {self.name!r} is empty; add_op() first")
        tgraph = self.to_networkx()
        if not nx.is_weakly_connected(tgraph):
            raise XirError(f"template {self.name!r} is not connected; split it into templates "
                           "that are, and match them one by one")
        wanted = frozenset().union(*(op.types for op in self._ops.values()))
        pool = graph.ops if ops is None else list(ops)
        # Only ops of a wanted type can be matched, so the search graph keeps just those: an
        # exact restriction that makes VF2 fast on large models.
        cand = sorted((op for op in pool if op.type in wanted), key=lambda o: o.index)
        cset = set(cand)
        g = nx.DiGraph()
        for op in cand:
            g.add_node(op, op=op)
        for op in cand:
            for arg, ts in op._inputs.items():
                for t in ts:
                    p = t.producer
                    if p in cset:
                        if g.has_edge(p, op):
                            g[p][op]["args"].append(arg)
                        else:
                            g.add_edge(p, op, args=[arg])
        matcher = DiGraphMatcher(g, tgraph, node_match=_node_match, edge_match=_edge_match)
        order = [op.name for op in self._ops.values()]
        found: dict[tuple[Op, ...], dict[str, Op]] = {}
        for mapping in matcher.subgraph_monomorphisms_iter():
            m = {tname: gop for gop, tname in mapping.items()}
            key = tuple(m[n] for n in order)
            found.setdefault(key, m)
        pos = graph.topo_position
        return sorted(found.values(),
                      key=lambda m: (sorted(pos(o) for o in m.values()),
                                     [pos(m[n]) for n in order]))


def _node_match(g: dict, t: dict) -> bool:
    op: Op = g["op"]
    if op.type not in t["types"]:
        return False
    where = t["where"]
    return where is None or bool(where(op))


def _edge_match(g: dict, t: dict) -> bool:
    # The graph edge carries the argument names through which the producer feeds the consumer
    # (two for Add(x, x)); each template argument needs its own slot, None takes any slot.
    remaining = list(g["args"])
    wildcards = 0
    for arg in t["args"]:
        if arg is None:
            wildcards += 1
        elif arg in remaining:
            remaining.remove(arg)
        else:
            return False
    return len(remaining) >= wildcards

"""``fuse_transformer``: the decomposed LayerNorm and the Erf GELU of older encoder exports as
single ``LayerNormalization`` and ``Gelu`` ops, as the accelerator's templates fuse a Conv
and its Relu.

LayerNorm: ``ReduceMean(x)`` over the last axis, ``d = Sub(x, mean)``, ``Pow(d, 2)`` (or
``Mul(d, d)``), ``ReduceMean`` over the same axis, ``Add(eps)``, ``Sqrt``, ``Div(d, std)``, then
optionally ``Mul(gamma)`` and ``Add(beta)`` with constant vectors along that axis. GELU:
``Div(x, sqrt 2)`` (or ``Mul(x, 1 / sqrt 2)``), ``Erf``, ``Add(1)`` and the products with 0.5
and x in either order. The last op of a match is rewritten in place (its output keeps its name
and readers); the rest becomes dead and is left to ``remove_dead_ops``. A pattern is fused
only when none of its inner tensors is read outside it or is a graph output, and the
constants are what the formula needs (within 1e-6).
"""

from __future__ import annotations

import math

import numpy as np

from compiler.passes.base import Pass, PassResult
from compiler.xir import CONST, Graph, Op, Tensor


def _const(t: Tensor) -> np.ndarray | None:
    return np.asarray(t.producer.attrs["data"]) if t.producer.type == CONST else None


def _scalar(t: Tensor) -> float | None:
    c = _const(t)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _near(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-6 * max(1.0, abs(want))


def _only_reader(t: Tensor, op: Op, graph: Graph) -> bool:
    return t not in graph.outputs and all(u is op for u in t.consumers)


def _other(op: Op, t: Tensor) -> Tensor | None:
    """The input of a binary op that is not ``t`` (None if both are ``t`` or arity is not 2)."""
    ins = op.input_tensors()
    if len(ins) != 2:
        return None
    if ins[0] is t and ins[1] is not t:
        return ins[1]
    if ins[1] is t and ins[0] is not t:
        return ins[0]
    return None


def _last_axis(op: Op) -> bool:
    """A ReduceMean over exactly the last axis of its input, keeping dims."""
    x = op.input_tensors()[0]
    if x.shape is None or not op.attrs.get("keepdims", 1):
        return False
    axes = op.attrs.get("axes")
    if axes is None and len(op.input_tensors()) > 1:
        c = _const(op.input_tensors()[1])
        axes = None if c is None else [int(v) for v in c.reshape(-1)]
    return axes is not None and len(axes) == 1 and int(axes[0]) % len(x.shape) == \
        len(x.shape) - 1


def _single_user(t: Tensor, graph: Graph, types: tuple[str, ...]) -> Op | None:
    users = t.consumers
    if len(users) != 1 or t in graph.outputs or users[0].type not in types:
        return None
    return users[0]


def _step(t: Tensor, graph: Graph, op_type: str) -> tuple[Op, Tensor] | None:
    """(the binary ``op_type`` op that alone reads ``t``, its other operand), or None."""
    op = _single_user(t, graph, (op_type,))
    other = _other(op, t) if op is not None else None
    return (op, other) if op is not None and other is not None else None


class FuseTransformer(Pass):
    name = "fuse_transformer"
    description = "decomposed LayerNorm and Erf GELU -> LayerNormalization, Gelu"

    def run(self, graph: Graph) -> PassResult:
        counts = {"LayerNormalization": 0, "Gelu": 0}
        for op in graph.topological_sort():
            if op.name not in graph or op.type not in ("ReduceMean", "Erf"):
                continue
            if op.type == "ReduceMean" and self._layernorm(graph, op):
                counts["LayerNormalization"] += 1
            elif op.type == "Erf" and self._gelu(graph, op):
                counts["Gelu"] += 1
        return PassResult(sum(counts.values()), counts)

    # --- LayerNorm ----------------------------------------------------------------------------
    def _layernorm(self, graph: Graph, mean: Op) -> bool:
        if not _last_axis(mean):
            return False
        x = mean.input_tensors()[0]
        sub = _single_user(mean.output, graph, ("Sub",))
        if sub is None or sub.input_tensors() != [x, mean.output]:
            return False
        d = sub.output
        users = d.consumers
        if d in graph.outputs or len(users) != 2:
            return False
        sq = next((u for u in users if u.type in ("Pow", "Mul")), None)
        div = next((u for u in users if u.type == "Div"), None)
        if sq is None or div is None or div.input_tensors()[0] is not d:
            return False
        if sq.type == "Pow" and not (sq.input_tensors()[0] is d
                                     and _near(_scalar(sq.input_tensors()[1]), 2.0)):
            return False
        if sq.type == "Mul" and sq.input_tensors() != [d, d]:
            return False
        var = _single_user(sq.output, graph, ("ReduceMean",))
        if var is None or not _last_axis(var):
            return False
        st = _step(var.output, graph, "Add")
        eps = _scalar(st[1]) if st is not None else None
        if st is None or eps is None or eps < 0:
            return False
        add = st[0]
        sqrt = _single_user(add.output, graph, ("Sqrt",))
        if sqrt is None or _single_user(sqrt.output, graph, ("Div",)) is not div \
                or div.input_tensors()[1] is not sqrt.output:
            return False
        h = int(x.shape[-1])
        last, gamma, beta = div, np.ones(h, np.float32), np.zeros(h, np.float32)

        def vector(st: tuple[Op, Tensor] | None) -> np.ndarray | None:
            """The step's constant operand as h values, if it is one."""
            c = _const(st[1]) if st is not None else None
            if c is None or c.size not in (1, h) or c.ndim > 1:
                return None
            return np.broadcast_to(c.reshape(-1), (h,)).astype(np.float32)

        mul = _step(div.output, graph, "Mul")
        g = vector(mul)
        if mul is not None and g is not None:
            gamma, last = g, mul[0]
            badd = _step(mul[0].output, graph, "Add")
            b = vector(badd)
            if badd is not None and b is not None:
                beta, last = b, badd[0]
        if x.dtype != "float32":
            return False
        g_op = graph.create_const(graph.unique_name(f"{last.name}/gamma"), gamma.copy())
        b_op = graph.create_const(graph.unique_name(f"{last.name}/beta"), beta.copy())
        graph.rewrite_op(last, "LayerNormalization", {"X": [x], "Scale": [g_op], "B": [b_op]},
                         {"axis": -1, "epsilon": float(eps)})
        return True

    # --- GELU ---------------------------------------------------------------------------------
    def _gelu(self, graph: Graph, erf: Op) -> bool:
        scaled = erf.input_tensors()[0]
        pre = scaled.producer
        if not _only_reader(scaled, erf, graph) or pre.type not in ("Div", "Mul"):
            return False
        x = pre.input_tensors()[0]
        c = _scalar(pre.input_tensors()[1]) if len(pre.input_tensors()) == 2 else None
        want = math.sqrt(2) if pre.type == "Div" else 1 / math.sqrt(2)
        if not _near(c, want):
            return False
        add = _step(erf.output, graph, "Add")
        if add is None or not _near(_scalar(add[1]), 1.0):
            return False
        m1 = _step(add[0].output, graph, "Mul")
        m2 = _step(m1[0].output, graph, "Mul") if m1 is not None else None
        if m1 is None or m2 is None:
            return False
        o1, o2 = m1[1], m2[1]
        # 0.5 * (1 + erf) then * x, or x * (1 + erf) then * 0.5
        if not ((_near(_scalar(o1), 0.5) and o2 is x) or (o1 is x and _near(_scalar(o2), 0.5))):
            return False
        if x.dtype != "float32":
            return False
        graph.rewrite_op(m2[0], "Gelu", {"X": [x]}, {"approximate": "none"})
        return True

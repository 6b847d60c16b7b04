"""Finding a self-attention block in a graph, whatever the exporter's spelling of its views.

From a Softmax over the last axis, `match_attention` walks up to ``MatMul(Q', K')`` (through an
optional additive mask and scalings by constants) and down to ``MatMul(P, V')`` (through an
optional NaN guard ``Where(IsNaN(P), 0, P)``), then follows Q', K', V' back and the product
forward through Reshape / Transpose ops (and, on the operands, scalings by constants) to
(1, tokens, hidden) tensors. Rather than trusting a fixed sequence of views (bert-style
exports split heads with one Reshape and Transpose; torch.export writes K^T as Transpose,
Reshape, Transpose, Reshape), the views are *evaluated* on element indices: the match holds
only if Q'[0, h, i, e] is element (i, h*d + e) of its source, K'[0, h, e, j] element
(j, h*d + e), V'[0, h, j, e] element (j, h*d + e), and the merged output's (i, h*d + e) is the
product's [0, h, i, e]. Every tensor inside the block must be read only inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.xir import CONST, Op, Tensor

VIEWS = frozenset({"Reshape", "Transpose"})
SCALES = frozenset({"Mul", "Div"})


@dataclass(frozen=True)
class AttentionMatch:
    """A matched block: its ops, the (1, tokens, hidden) sources of Q, K and V, the additive
    mask (None without one), the merged (1, tokens, hidden) output tensor and the product of
    the constant factors applied to the scores (on Q, on K and on Q K^T)."""

    softmax: Op
    ops: tuple[Op, ...]
    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None
    output: Tensor
    factor: float
    heads: int
    head_size: int
    tokens: int

    @property
    def last(self) -> Op:
        return self.output.producer


class NoMatch(ValueError):
    """Why the ops around a Softmax are not an attention block the accelerator takes."""


def _const(t: Tensor) -> np.ndarray | None:
    return np.asarray(t.producer.attrs["data"]) if t.producer.type == CONST else None


def _scalar_factor(op: Op) -> tuple[Tensor, float] | None:
    """(the activation operand, its factor) of Mul/Div by a scalar constant."""
    ins = op.input_tensors()
    if op.type not in SCALES or len(ins) != 2:
        return None
    for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
        c = _const(b)
        if c is not None and c.size == 1 and _const(a) is None:
            v = float(c.reshape(-1)[0])
            if op.type == "Div":
                if a is not ins[0] or v == 0:
                    return None
                v = 1.0 / v
            return (a, v) if math.isfinite(v) and v > 0 else None
    return None


def _sole_reader(t: Tensor, op: Op) -> bool:
    return t not in op.graph.outputs and t.consumers == [op]


def _trace_back(t: Tensor, ops: list[Op]) -> tuple[Tensor, list[Op], float]:
    """Follow views and scalings back from ``t`` (each read only by the next): (source, the ops
    in data order, product of the factors)."""
    chain: list[Op] = []
    factor = 1.0
    reader = ops[-1]
    while True:
        p = t.producer
        if not _sole_reader(t, reader):
            break
        if p.type in VIEWS:
            chain.append(p)
            t, reader = p.input_tensors()[0], p
        elif (sf := _scalar_factor(p)) is not None:
            chain.append(p)
            factor *= sf[1]
            t, reader = sf[0], p
        else:
            break
    return t, chain[::-1], factor


def _apply(chain: list[Op], x: np.ndarray) -> np.ndarray:
    """The views of ``chain`` applied to ``x`` (scalings skipped: they only scale)."""
    for op in chain:
        if op.type == "Reshape":
            shape = op.output.shape
            if shape is None:
                raise NoMatch(f"Reshape {op.name!r} has no static shape")
            x = x.reshape(tuple(int(v) for v in shape))
        elif op.type == "Transpose":
            perm = op.attrs.get("perm")
            x = np.transpose(x, None if perm is None else [int(v) for v in perm])
    return x


def _source_shape(t: Tensor, what: str) -> tuple[int, int]:
    s = t.shape
    if s is None or len(s) != 3 or int(s[0]) != 1:
        raise NoMatch(f"{what} comes from {t.name!r} of shape {s}, not (1, tokens, hidden)")
    return int(s[1]), int(s[2])


def match_attention(sm: Op) -> AttentionMatch:
    """The attention block around Softmax ``sm`` (module doc), or NoMatch with the reason."""
    x = sm.input_tensors()[0]
    if x.shape is None or len(x.shape) != 4 or int(x.shape[0]) != 1:
        raise NoMatch(f"Softmax {sm.name!r}: input {x.shape} is not (1, heads, queries, keys)")
    axis = int(sm.attrs.get("axis", -1))
    if axis not in (-1, 3):
        raise NoMatch(f"Softmax {sm.name!r}: over axis {axis}, not the keys")
    _, heads, seq, keys = (int(v) for v in x.shape)
    if seq != keys:
        raise NoMatch(f"Softmax {sm.name!r}: {seq} queries and {keys} keys (self-attention "
                      "has as many)")
    ops: list[Op] = [sm]
    factor, mask = 1.0, None
    t = x
    while True:
        p = t.producer
        if not _sole_reader(t, ops[-1]):
            raise NoMatch(f"the scores {t.name!r} are read outside the attention block")
        if p.type == "MatMul":
            qk = p
            break
        if p.type == "Add" and mask is None:
            a, b = p.input_tensors()
            full = tuple(x.shape)
            if a.shape is not None and tuple(a.shape) == full and b.shape != a.shape:
                t, mask = a, b
            elif b.shape is not None and tuple(b.shape) == full and a.shape != b.shape:
                t, mask = b, a
            else:
                raise NoMatch(f"Add {p.name!r} before Softmax {sm.name!r} is no broadcast mask")
            ops.append(p)
            continue
        sf = _scalar_factor(p)
        if sf is None:
            raise NoMatch(f"{p.type} {p.name!r} before Softmax {sm.name!r} is neither a mask, a "
                          "scaling by a constant nor Q K^T")
        factor *= sf[1]
        t = sf[0]
        ops.append(p)
    ops.append(qk)
    if mask is not None and (mask.shape is None or tuple(int(v) for v in mask.shape)
                             not in ((1, 1, 1, keys), (1, 1, seq, keys))
                             or _const(mask) is not None):
        raise NoMatch(f"the mask {mask.name!r} of shape {mask.shape} is not a (1, 1, 1, "
                      f"{keys}) or (1, 1, {seq}, {keys}) mask computed by the graph")
    # down: the probabilities, perhaps through a NaN guard, into P V
    p_t = sm.output
    users = p_t.consumers
    if p_t in sm.graph.outputs:
        raise NoMatch(f"the probabilities {p_t.name!r} are a graph output")
    if len(users) == 2 and {u.type for u in users} == {"IsNaN", "Where"}:
        isnan = next(u for u in users if u.type == "IsNaN")
        where = next(u for u in users if u.type == "Where")
        w_in = where.input_tensors()
        zero = _const(w_in[1]) if len(w_in) == 3 else None
        if (len(w_in) != 3 or w_in[0] is not isnan.output or w_in[2] is not p_t or zero is None
                or zero.size != 1 or float(zero.reshape(-1)[0]) != 0.0
                or not _sole_reader(isnan.output, where)):
            raise NoMatch(f"the NaN guard after Softmax {sm.name!r} is not Where(IsNaN(P), 0, P)")
        ops += [isnan, where]
        p_t = where.output
        users = p_t.consumers
    if len(users) != 1 or users[0].type != "MatMul" or p_t in sm.graph.outputs \
            or users[0].input_tensors()[0] is not p_t:
        raise NoMatch(f"the probabilities of Softmax {sm.name!r} are not multiplied by V alone")
    pv = users[0]
    ops.append(pv)
    qa, kb = qk.input_tensors()[:2]
    va = pv.input_tensors()[1]
    q_src, q_ops, fq = _trace_back(qa, [qk])
    k_src, k_ops, fk = _trace_back(kb, [qk])
    v_src, v_ops, fv = _trace_back(va, [pv])
    if fv != 1.0:
        raise NoMatch("V is scaled by a constant")
    (sq, hq), (sk, hk), (sv, hv) = (_source_shape(q_src, "Q"), _source_shape(k_src, "K"),
                                    _source_shape(v_src, "V"))
    if not (sq == sk == sv == seq and hq == hk == hv and hq % heads == 0):
        raise NoMatch(f"Q, K, V of shapes {q_src.shape}, {k_src.shape}, {v_src.shape} do not "
                      f"make {heads} heads over {seq} tokens")
    hidden = hq
    d = hidden // heads
    idx = np.arange(seq * hidden, dtype=np.int64).reshape(1, seq, hidden)
    i, h, e = np.meshgrid(np.arange(seq), np.arange(heads), np.arange(d), indexing="ij")
    want_q = np.zeros((1, heads, seq, d), np.int64)
    want_q[0, h, i, e] = i * hidden + h * d + e
    try:
        got_q = _apply(q_ops, idx)
        got_k = _apply(k_ops, idx)
        got_v = _apply(v_ops, idx)
    except ValueError as err:
        raise NoMatch(f"the views of Q, K or V do not apply: {err}") from None
    if got_q.shape != want_q.shape or not np.array_equal(got_q, want_q):
        raise NoMatch("Q' is not the heads of its source, head h = features h*d .. h*d+d-1")
    if got_v.shape != want_q.shape or not np.array_equal(got_v, want_q):
        raise NoMatch("V' is not the heads of its source")
    want_k = np.swapaxes(want_q, 2, 3)
    if got_k.shape != want_k.shape or not np.array_equal(got_k, want_k):
        raise NoMatch("K' is not the transposed heads of its source")
    # forward from P V through views to (1, tokens, hidden)
    out_ops: list[Op] = []
    t = pv.output
    while True:
        users = t.consumers
        if len(users) != 1 or users[0].type not in VIEWS or t in sm.graph.outputs:
            break
        out_ops.append(users[0])
        t = users[0].output
    if t.shape is None or tuple(int(v) for v in t.shape) != (1, seq, hidden):
        raise NoMatch(f"the attention output {t.name!r} of shape {t.shape} is not (1, {seq}, "
                      f"{hidden})")
    o_idx = np.arange(heads * seq * d, dtype=np.int64).reshape(1, heads, seq, d)
    want_o = np.zeros((1, seq, hidden), np.int64)
    want_o[0, i, h * d + e] = o_idx[0, h, i, e]
    try:
        got_o = _apply(out_ops, o_idx)
    except ValueError as err:
        raise NoMatch(f"the views of the output do not apply: {err}") from None
    if got_o.shape != want_o.shape or not np.array_equal(got_o, want_o):
        raise NoMatch("the output is not the heads merged back, head h = features h*d ..")
    every = ops + q_ops + k_ops + v_ops + out_ops
    inside = set(every)
    for op in every:
        if op is t.producer:
            continue
        if op.output in sm.graph.outputs or any(u not in inside for u in op.output.consumers):
            raise NoMatch(f"{op.type} {op.name!r} inside the attention block is read outside")
    order = sorted(inside, key=lambda o: o.graph.topo_position(o))
    return AttentionMatch(sm, tuple(order), q_src, k_src, v_src, mask, t, factor * fq * fk,
                          heads, d, seq)

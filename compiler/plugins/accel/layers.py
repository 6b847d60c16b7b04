"""What a layer of the accelerator plugin is: the op types that head one (one kernel each), the
activation fused into its requantization and the view absorbed into its weights, and the
grouping of a subgraph's ops into layers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from compiler.errors import PartitionError
from compiler.xir import CONST, Op, Tensor
from pyhost.accel import layout

#: Op types that head a layer, by kernel.
HEADS: dict[str, frozenset[str]] = {
    "conv": frozenset({"Conv"}),
    "gemm": frozenset({"Gemm", "MatMul"}),
    # Add / Sum of two tensors, Sub, Mul, Max, Min: the residual add or a broadcasting
    # elementwise op (`kernels.binary`)
    "add": frozenset({"Add", "Sum", "Sub", "Mul", "Max", "Min"}),
    "maxpool": frozenset({"MaxPool", "GlobalMaxPool"}),
    "avgpool": frozenset({"GlobalAveragePool", "AveragePool"}),
    # a Concat: its inputs written in place (channel-offset writes) or copied
    "concat": frozenset({"Concat"}),
    # the Transpose of a Reshape -> Transpose -> Reshape that only permutes channels
    # (ShuffleNet's channel shuffle)
    "permute": frozenset({"Transpose"}),
    # a Relu that is not fused into the requantization of a conv, gemm or add before it
    "relu": frozenset({"Relu"}),
    # a Flatten/Reshape/Squeeze/Unsqueeze that keeps the bytes of the blocked layout (no
    # instruction: its input is written where its output lives), unless part of a layer above
    "view": frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"}),
}
KIND_OF = {t: kind for kind, types in HEADS.items() for t in types}
#: Kinds that head a layer only where no other layer of the set takes the op.
SECONDARY = frozenset({"relu", "view"})
#: Activations fused into the requantization of a conv, gemm or add.
ACTS = frozenset({"Relu", "Clip"})
FUSES_ACT = frozenset({"conv", "gemm", "add", "avgpool"})
#: Ops that only collapse C, H, W before a Gemm/MatMul (absorbed into its weights).
VIEWS = frozenset({"Flatten", "Reshape"})
#: Kinds whose output is the bytes of their inputs, moved (a Concat, a view): the memory plan
#: may let the producers of their inputs write straight into the output.
COPIES = frozenset({"concat", "view"})


@dataclass(frozen=True, eq=False)
class Layer:
    """One kernel's worth of ops: ``head`` plus an optional fused ``act``, an absorbed ``view``
    before it and (a channel shuffle) a ``post`` Reshape after it."""

    kind: str
    head: Op
    act: Op | None = None
    view: Op | None = None
    post: Op | None = None

    @property
    def name(self) -> str:
        return self.head.name

    @property
    def ops(self) -> list[Op]:
        return [op for op in (self.view, self.head, self.post, self.act) if op is not None]

    @property
    def output(self) -> Tensor:
        return (self.act or self.post or self.head).output

    @property
    def inputs(self) -> list[Tensor]:
        """The activations the kernel reads, in its argument order (weights are constants)."""
        if self.kind in ("gemm", "permute") and self.view is not None:
            return [self.view.input_tensors()[0]]
        if self.kind == "gemm":
            return self.head.input_tensors("A")[:1]
        if self.kind == "add":        # a constant operand is the kernel's, not an input
            return [t for t in self.head.input_tensors() if t.producer.type != CONST]
        if self.kind == "concat":
            return self.head.input_tensors()
        return self.head.input_tensors()[:1]


def shuffle_views(head: Op) -> tuple[Op, Op, list[int]] | None:
    """(Reshape before, Reshape after, permutation) when ``head`` is the Transpose of a
    Reshape -> Transpose -> Reshape that maps an NCHW (or NCL) tensor to the same shape with its
    channels permuted (out[:, c] = in[:, perm[c]]), each Reshape read only by the next op."""
    if head.type != "Transpose":
        return None
    x = head.input_tensors()
    if not x or x[0].producer.type != "Reshape":
        return None
    pre = x[0].producer
    users = head.output.consumers
    if len(users) != 1 or users[0].type != "Reshape" or head.output in head.graph.outputs:
        return None
    post = users[0]
    if pre.output.consumers != [head] or pre.output in head.graph.outputs:
        return None
    src, dst = pre.input_tensors()[0], post.output
    shapes = (src.shape, pre.output.shape, head.output.shape, dst.shape)
    if any(s is None for s in shapes) or tuple(src.shape) != tuple(dst.shape) \
            or len(src.shape) not in (3, 4):
        return None
    perm_attr = head.attrs.get("perm")
    if not isinstance(perm_attr, list):
        return None
    c = int(src.shape[1])
    rest = math.prod(int(v) for v in src.shape[2:])
    if int(src.shape[0]) != 1 or math.prod(pre.output.shape) != c * rest:
        return None
    idx = np.repeat(np.arange(c), rest).reshape(src.shape)
    try:
        y = np.transpose(idx.reshape(pre.output.shape), perm_attr).reshape(dst.shape)
    except ValueError:
        return None
    flat = y.reshape(c, rest)
    if not (flat == flat[:, :1]).all():
        return None                          # something other than whole channels moves
    return pre, post, [int(v) for v in flat[:, 0]]


def is_byte_view(op: Op) -> bool:
    """A Flatten/Reshape/Squeeze/Unsqueeze whose input and output have the same bytes in the
    blocked layout: the same images, channels and pixels per image (e.g. (1, C, 1, 1) ->
    (1, C), or (N, C, H, W) -> (N, C, H * W))."""
    if KIND_OF.get(op.type) != "view":
        return False
    x = op.input_tensors()
    if not x or x[0].shape is None or op.output.shape is None:
        return False
    try:
        a, b = layout.nchw_view(x[0].shape), layout.nchw_view(op.output.shape)
    except ValueError:
        return False
    return a[:2] == b[:2] and a[2] * a[3] == b[2] * b[3]


def fusable_act(head: Op) -> Op | None:
    """The Relu/Clip that may be fused into ``head``: the only reader of its output, which is
    not a model output (else the pre-activation tensor would have to exist in memory)."""
    if KIND_OF.get(head.type) not in FUSES_ACT:
        return None
    t = head.output
    users = t.consumers
    if len(users) != 1 or t in head.graph.outputs or users[0].type not in ACTS:
        return None
    act = users[0]
    return act if act.input_tensors()[0] is t else None


def absorbable_view(head: Op) -> Op | None:
    """The Flatten/Reshape feeding a Gemm/MatMul's A input that only collapses C, H, W of an
    NCHW (or (M, K)) tensor and is read by nothing else."""
    if KIND_OF.get(head.type) != "gemm":
        return None
    a = head.input_tensors("A")
    if not a or a[0].producer.type not in VIEWS:
        return None
    view = a[0].producer
    out = view.output
    if out.consumers != [head] or out in head.graph.outputs:
        return None
    x = view.input_tensors()[0]
    if x.shape is None or out.shape is None or len(x.shape) not in (2, 4) \
            or tuple(out.shape) != (x.shape[0], math.prod(x.shape[1:])):
        return None
    if view.type == "Flatten" and int(view.attrs.get("axis", 1)) != 1:
        return None
    return view


def layer_of(kind: str, head: Op, opset: set[Op] | None = None) -> Layer:
    """The layer ``head`` heads, with the fused activation, absorbed view and shuffle Reshapes
    that belong to it (those in ``opset`` when given)."""
    def keep(op: Op | None) -> Op | None:
        return op if op is not None and (opset is None or op in opset) else None

    act = keep(fusable_act(head))
    view = keep(absorbable_view(head))
    post = None
    if kind == "permute":
        sv = shuffle_views(head)
        if sv is not None:
            view, post = keep(sv[0]), keep(sv[1])
    return Layer(kind, head, act, view, post)


def layers_of(ops: Iterable[Op]) -> list[Layer]:
    """The layers a claimed set of ops consists of, in topological order; every non-constant op
    must belong to exactly one (PartitionError otherwise: the subgraph was not claimed by this
    plugin's partition)."""
    opset = set(ops)
    heads = sorted((op for op in opset if op.type in KIND_OF),
                   key=lambda o: o.graph.topo_position(o))
    primary = [h for h in heads if KIND_OF[h.type] not in SECONDARY]
    taken: set[Op] = set()
    by_head: dict[Op, Layer] = {}
    for h in primary:
        ly = layer_of(KIND_OF[h.type], h, opset)
        by_head[h] = ly
        taken.update(ly.ops)
    # a Relu or a view is a head only if no layer above takes it (a Relu fused into the
    # requantization before it, a Reshape absorbed into an FC or part of a shuffle)
    for h in heads:
        if h not in by_head and h not in taken:
            by_head[h] = layer_of(KIND_OF[h.type], h, opset)
            taken.update(by_head[h].ops)
    layers = []
    covered: set[Op] = set()
    for h in heads:
        if h not in by_head:
            continue
        layer = by_head[h]
        layers.append(layer)
        covered.update(layer.ops)
    stray = sorted(op.name for op in opset - covered if op.type != CONST)
    if stray:
        raise PartitionError(f"accel: ops {stray[:5]} are in an accelerator subgraph but belong "
                             "to no layer (only this plugin's partition may build them)")
    return layers

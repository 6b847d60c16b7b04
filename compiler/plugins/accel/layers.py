"""What a layer of the accelerator plugin is: the op types that head one (one kernel each), the
activation fused into its requantization and the view absorbed into its weights, and the
grouping of a subgraph's ops into layers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from compiler.errors import PartitionError
from compiler.plugins.accel.attention_match import AttentionMatch, NoMatch, match_attention
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
    # the transformer encoder's layers (kernels.encoder, the transposed layout of (1, tokens,
    # features) tensors): a MatMul of token rows by constant weights (+ a bias Add), a
    # LayerNormalization and a Gelu over the features, and a self-attention block found
    # from its Softmax (attention_match)
    "linear": frozenset({"MatMul"}),
    "layernorm": frozenset({"LayerNormalization"}),
    "gelu": frozenset({"Gelu"}),
    "attention": frozenset({"Softmax"}),
}
KIND_OF = {t: kind for kind, types in HEADS.items() for t in types if kind != "linear"}
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


def linear_tokens(op: Op) -> bool:
    """A MatMul of a (1, tokens, features) activation by a constant 2-D weight: the encoder's
    `linear` layer rather than a `gemm`."""
    if op.type != "MatMul":
        return False
    a, b = op.input_tensors("A"), op.input_tensors("B")
    return (bool(a) and bool(b) and a[0].shape is not None and len(a[0].shape) == 3
            and int(a[0].shape[0]) == 1 and b[0].producer.type == CONST
            and b[0].shape is not None and len(b[0].shape) == 2)


def kind_of(op: Op) -> str | None:
    """The kind of layer ``op`` heads (None: it heads none)."""
    if op.type == "MatMul" and linear_tokens(op):
        return "linear"
    return KIND_OF.get(op.type)


def linear_bias(head: Op) -> Op | None:
    """The Add of a constant vector (one value per output feature) that is the only reader of
    a `linear` MatMul's output: its bias, fused into the layer."""
    t = head.output
    users = t.consumers
    if not linear_tokens(head) or len(users) != 1 or t in head.graph.outputs \
            or users[0].type != "Add":
        return None
    add = users[0]
    ins = add.input_tensors()
    if len(ins) != 2:
        return None
    other = ins[1] if ins[0] is t else ins[0]
    d_out = int(head.input_tensors("B")[0].shape[1])
    if other is t or other.producer.type != CONST or other.shape is None \
            or len(other.shape) > 1 or int(np.prod(other.shape or (1,))) not in (1, d_out):
        return None
    return add


@dataclass(frozen=True, eq=False)
class Layer:
    """One kernel's worth of ops: ``head`` plus an optional fused ``act``, an absorbed ``view``
    before it and (a channel shuffle) a ``post`` Reshape after it (a `linear` layer: its bias
    Add). An attention layer also has the ``extra`` ops of its block and reads ``sources``
    (Q, K, V and the mask, see `attention_match`); ``post`` is its last view."""

    kind: str
    head: Op
    act: Op | None = None
    view: Op | None = None
    post: Op | None = None
    extra: tuple[Op, ...] = ()
    sources: tuple[Tensor, ...] = ()
    #: an attention layer's block as `attention_match` found it
    match: AttentionMatch | None = None

    @property
    def name(self) -> str:
        return self.head.name

    @property
    def ops(self) -> list[Op]:
        main = [op for op in (self.view, self.head, self.post, self.act) if op is not None]
        return main + [op for op in self.extra if op not in main]

    @property
    def output(self) -> Tensor:
        return (self.act or self.post or self.head).output

    @property
    def inputs(self) -> list[Tensor]:
        """The activations the kernel reads, in its argument order (weights are constants)."""
        if self.kind == "attention":
            return list(self.sources)
        if self.kind == "linear":
            return self.head.input_tensors("A")[:1]
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
    if kind_of(head) not in FUSES_ACT:
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
    if kind_of(head) != "gemm":
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


def attention_layer(head: Op) -> Layer:
    """The attention layer of Softmax ``head`` (attention_match.NoMatch if there is none)."""
    m = match_attention(head)
    sources = (m.q, m.k, m.v) + ((m.mask,) if m.mask is not None else ())
    return Layer("attention", head, post=m.last, extra=m.ops, sources=sources, match=m)


def layer_of(kind: str, head: Op, opset: set[Op] | None = None) -> Layer:
    """The layer ``head`` heads, with the fused activation, absorbed view and shuffle Reshapes
    that belong to it (those in ``opset`` when given)."""
    def keep(op: Op | None) -> Op | None:
        return op if op is not None and (opset is None or op in opset) else None

    if kind == "attention":
        return attention_layer(head)
    if kind == "linear":
        return Layer(kind, head, post=keep(linear_bias(head)))

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
    heads = sorted((op for op in opset if kind_of(op) is not None),
                   key=lambda o: o.graph.topo_position(o))
    taken: set[Op] = set()
    by_head: dict[Op, Layer] = {}
    # an attention block first: its MatMuls and views are not layers of their own
    for h in heads:
        if kind_of(h) == "attention":
            try:
                ly = attention_layer(h)
            except NoMatch as e:
                raise PartitionError(f"accel: Softmax {h.name!r} is in an accelerator subgraph "
                                     f"but is no attention block: {e}") from None
            by_head[h] = ly
            taken.update(ly.ops)
    primary = [h for h in heads if kind_of(h) not in SECONDARY and h not in taken]
    for h in primary:
        if h in taken:                     # a linear layer's bias Add
            continue
        ly = layer_of(kind_of(h), h, opset)  # type: ignore[arg-type]
        by_head[h] = ly
        taken.update(ly.ops)
    # a Relu or a view is a head only if no layer above takes it (a Relu fused into the
    # requantization before it, a Reshape absorbed into an FC or part of a shuffle)
    for h in heads:
        if h not in by_head and h not in taken:
            by_head[h] = layer_of(kind_of(h), h, opset)  # type: ignore[arg-type]
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

"""What a layer of the accelerator plugin is: the op types that head one (one kernel each), the
activation fused into its requantization and the view absorbed into its weights, and the
grouping of a subgraph's ops into layers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from compiler.errors import PartitionError
from compiler.xir import CONST, Op, Tensor

#: Op types that head a layer, by kernel.
HEADS: dict[str, frozenset[str]] = {
    "conv": frozenset({"Conv"}),
    "gemm": frozenset({"Gemm", "MatMul"}),
    "add": frozenset({"Add", "Sum"}),
    "maxpool": frozenset({"MaxPool"}),
    "avgpool": frozenset({"GlobalAveragePool", "AveragePool"}),
    # a Relu that is not fused into the requantization of a conv, gemm or add before it
    "relu": frozenset({"Relu"}),
}
KIND_OF = {t: kind for kind, types in HEADS.items() for t in types}
#: Activations fused into the requantization of a conv, gemm or add.
ACTS = frozenset({"Relu", "Clip"})
FUSES_ACT = frozenset({"conv", "gemm", "add"})
#: Ops that only collapse C, H, W before a Gemm/MatMul (absorbed into its weights).
VIEWS = frozenset({"Flatten", "Reshape"})
@dataclass(frozen=True, eq=False)
class Layer:
    """One kernel's worth of ops: ``head`` plus an optional fused ``act`` and absorbed ``view``."""

    kind: str
    head: Op
    act: Op | None = None
    view: Op | None = None

    @property
    def name(self) -> str:
        return self.head.name

    @property
    def ops(self) -> list[Op]:
        return [op for op in (self.view, self.head, self.act) if op is not None]

    @property
    def output(self) -> Tensor:
        return (self.act or self.head).output

    @property
    def inputs(self) -> list[Tensor]:
        """The activations the kernel reads, in its argument order (weights are constants)."""
        if self.kind == "gemm":
            if self.view is not None:
                return [self.view.input_tensors()[0]]
            return self.head.input_tensors("A")[:1]
        if self.kind == "add":
            return self.head.input_tensors()
        return self.head.input_tensors()[:1]


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


def layers_of(ops: Iterable[Op]) -> list[Layer]:
    """The layers a claimed set of ops consists of, in topological order; every non-constant op
    must belong to exactly one (PartitionError otherwise: the subgraph was not claimed by this
    plugin's partition)."""
    opset = set(ops)
    heads = sorted((op for op in opset if op.type in KIND_OF),
                   key=lambda o: o.graph.topo_position(o))
    # a Relu is a head only if no head of the set fuses it
    fused = {fusable_act(h) for h in heads} & opset
    heads = [h for h in heads if h not in fused]
    layers = []
    covered: set[Op] = set()
    for h in heads:
        act = fusable_act(h)
        view = absorbable_view(h)
        layer = Layer(KIND_OF[h.type], h, act if act in opset else None,
                      view if view in opset else None)
        layers.append(layer)
        covered.update(layer.ops)
    stray = sorted(op.name for op in opset - covered if op.type != CONST)
    if stray:
        raise PartitionError(f"accel: ops {stray[:5]} are in an accelerator subgraph but belong "
                             "to no layer (only this plugin's partition may build them)")
    return layers

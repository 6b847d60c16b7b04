"""Partition of the accelerator plugin: which ops the accelerator takes, grouped into device
subgraphs.

Layers are found with templates (``filter_by_template``), longest first, so a Relu after a Conv
is fused rather than left alone: Flatten/Reshape -> Gemm/MatMul -> Relu/Clip, Conv/Gemm/MatMul/
Add/Sum/Sub/Mul/Max/Min -> Relu/Clip, then each head alone (Conv, Gemm, MatMul, the
elementwise ops with broadcasting or a constant operand, MaxPool, GlobalMaxPool, AveragePool,
GlobalAveragePool, Concat, free views) and, last, a Relu that none of these fused
(a requantization from its input's scale to its own). A match is claimed only if its
quantization parameters exist and the kernels map it: the layer's kernel is generated at placeholder
addresses (`lower.check_layer`); anything that fails stays for the CPU, with the reason kept
in `AccelPartitioner.rejected`.

The claimed layers are then merged into as few subgraphs as possible without a cycle, the same
grouping as ``merge_subgraph`` (fewest runs of consecutive claimed children over the topological
orders of the root's children), and each run is cut, in its topological order, where a subgraph
would exchange more tensors with the rest of the graph than the slot registers hold (14: slots
2..15), or exceed the optional ``max_layers`` / ``max_step_bytes`` limits. A contiguous piece of
a run is contiguous in a topological order of all children, so merging it never creates a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from compiler.errors import OptionsError
from compiler.plugin_api import filter_by_template, member_runs, merge_subgraph, root_children
from compiler.plugin_api.helpers import is_assigned
from compiler.plugins.accel import kernels as K
from compiler.plugins.accel import lower
from compiler.plugins.accel.attention_match import NoMatch
from compiler.plugins.accel.layers import (
    ACTS,
    HEADS,
    KIND_OF,
    VIEWS,
    Layer,
    absorbable_view,
    attention_layer,
    fusable_act,
    kind_of,
    linear_bias,
    shuffle_views,
)
from compiler.plugins.accel.memplan import estimate_step_bytes, external_tensors, plan_step
from compiler.xir import CONST, Graph, GraphTemplate, Op, Subgraph, creates_cycle
from pyhost.accel.abi import MAX_IO
from pyhost.spec.accel import AccelConfig


@dataclass(frozen=True)
class Limits:
    """How large one accelerator subgraph may become."""

    max_io: int = MAX_IO
    max_layers: int | None = None
    max_step_bytes: int | None = None


def _templates() -> list[tuple[str, GraphTemplate]]:
    """(kind, template), longest first; template op names: view, head, act."""
    out = []
    gemm = HEADS["gemm"]
    t = GraphTemplate("accel_view_gemm_act")
    v = t.add_op("view", VIEWS)
    h = t.add_op("head", gemm, {v: "A"})
    t.add_op("act", ACTS, {h: None})
    out.append(("gemm", t))
    t = GraphTemplate("accel_view_gemm")
    v = t.add_op("view", VIEWS)
    t.add_op("head", gemm, {v: "A"})
    out.append(("gemm", t))
    t = GraphTemplate("accel_shuffle")
    v = t.add_op("view", "Reshape")
    h = t.add_op("head", HEADS["permute"], {v: None})
    t.add_op("post", "Reshape", {h: None})
    out.append(("permute", t))
    t = GraphTemplate("accel_linear_bias")
    h = t.add_op("head", "MatMul")
    t.add_op("post", "Add", {h: None})
    out.append(("linear", t))
    for kind in ("conv", "gemm", "add", "avgpool"):
        t = GraphTemplate(f"accel_{kind}_act")
        h = t.add_op("head", HEADS[kind])
        t.add_op("act", ACTS, {h: None})
        out.append((kind, t))
    for kind in ("linear", "layernorm", "gelu", "conv", "gemm", "add", "maxpool", "avgpool",
                 "concat", "relu", "view"):
        t = GraphTemplate(f"accel_{kind}")
        t.add_op("head", HEADS[kind])
        out.append((kind, t))
    return out


class AccelPartitioner:
    """One partition run: claims layers, then groups and merges them."""

    def __init__(self, graph: Graph, cfg: AccelConfig, limits: Limits) -> None:
        self.graph = graph
        self.cfg = cfg
        self.limits = limits
        #: head op name -> why the accelerator does not take it (for reports and tests)
        self.rejected: dict[str, str] = {}
        self._claimed: set[Op] = set()
        #: Concat and view heads accepted by the template being matched (not merged yet)
        self._moved: set[Op] = set()
        self._layers: dict[Op, tuple[Layer, K.Kernel]] = {}

    def run(self) -> set[Subgraph]:
        if "quantization" not in self.graph.attrs:
            raise OptionsError('the "accel" plugin needs a quantized graph: add "quantize": '
                               'true (or a calibration setup) to the compile options, e.g. '
                               '{"plugin": "accel", "quantize": {"calibration": "in.npz"}}')
        root = root_children(self.graph)
        units: list[Subgraph] = self._attention_units(root)
        for kind, template in _templates():
            found = filter_by_template(self.graph, template, self._accept(kind))
            for s in sorted(found, key=lambda s: s.sort_key()):
                self._claimed.update(s.ops)
                units.append(s)
        for op in self._claimed:
            self.rejected.pop(op.name, None)
        self._explain_the_rest()
        if not units:
            return set()
        return self._group(units)

    def _explain_the_rest(self) -> None:
        """A reason for every computing op no layer took and no check refused: what about it
        the accelerator has no kernel for."""
        for op in self.graph.ops:
            if op in self._claimed or op.name in self.rejected or op.type in (CONST, "data"):
                continue
            floats = ("float32", "float64", "float16")
            other = [t.dtype for t in (*op.input_tensors(), op.output)
                     if t.dtype not in floats and t.producer.type != CONST]
            if op.type == "Gather":
                why = ("a lookup of rows by index (an embedding table): the accelerator has no "
                       "indexed load")
            elif other:
                why = (f"it computes with {other[0]} values; the accelerator computes quantized "
                       "real values only")
            elif op.type in KIND_OF or op.type == "MatMul":
                continue                   # a head whose layer was not matched: said above
            else:
                why = f"no accelerator kernel computes {op.type}"
            self.rejected[op.name] = why

    def _attention_units(self, root: Subgraph) -> list[Subgraph]:
        """Claim every attention block (from its Softmax, `attention_match`) whose kernel maps:
        its ops merged into one child of the root."""
        units = []
        for sm in self.graph.topological_sort():
            if sm.type != "Softmax" or sm in self._claimed:
                continue
            try:
                layer = attention_layer(sm)
            except NoMatch as e:
                self.rejected.setdefault(sm.name, str(e))
                continue
            if any(op in self._claimed for op in layer.ops):
                continue
            kern, reason = lower.check_layer(layer, self.cfg)
            if kern is None:
                self.rejected.setdefault(sm.name, reason or "")
                continue
            children = {root.child_of(op) for op in layer.ops}
            if any(is_assigned(c) for c in children):
                continue
            if len(children) > 1 and creates_cycle(root.child_dag(), children):
                self.rejected.setdefault(sm.name, "its block cannot be one subgraph without "
                                         "a cycle")
                continue
            unit = root.merge_children(children)
            self._layers[sm] = (layer, kern)
            self._claimed.update(unit.ops)
            units.append(unit)
        return units

    def _scores_of_cpu_softmax(self, op: Op) -> bool:
        """Whether ``op``'s output reaches an unclaimed Softmax through elementwise ops only
        (the scaling and masking of attention scores)."""
        seen, todo = set(), [op]
        while todo:
            o = todo.pop()
            for u in o.output.consumers:
                if u.type == "Softmax" and u not in self._claimed:
                    return True
                if u.type in ("Add", "Sub", "Mul", "Div") and u not in seen and len(seen) < 8:
                    seen.add(u)
                    todo.append(u)
        return False

    def _accept(self, kind: str) -> Callable[[Mapping[str, Op]], bool]:
        def accept(match: Mapping[str, Op]) -> bool:
            ops = list(match.values())
            if any(op in self._claimed for op in ops):
                return False
            head = match["head"]
            if kind_of(head) != kind:
                return False               # a MatMul is a gemm or a linear, not both
            act, view, post = match.get("act"), match.get("view"), match.get("post")
            if kind == "linear" and post is not None and linear_bias(head) is not post:
                return False
            if kind == "add" and self._scores_of_cpu_softmax(head):
                # attention scores the block could not take: one int8 scale for them and an
                # additive mask (-1e4, the float's lowest) would leave the scores no levels
                self.rejected.setdefault(head.name, "it computes scores for a Softmax that "
                                         "stays on the CPU (an attention block the plugin "
                                         "does not take); int8 would lose them to the mask's "
                                         "range")
                return False
            if act is not None and fusable_act(head) is not act:
                return False
            if kind == "permute":
                sv = shuffle_views(head)
                if sv is None or (view, post) != sv[:2]:
                    return False
            elif kind != "linear" and view is not None and absorbable_view(head) is not view:
                return False
            if kind in ("view", "concat"):
                cpu = [t.name for t in head.input_tensors()[:len(head.input_tensors())
                                                           if kind == "concat" else 1]
                       if t.producer not in self._claimed and t.producer not in self._moved]
                if cpu:
                    # moving bytes that come from the CPU to the card and back gains nothing
                    self.rejected.setdefault(head.name, f"its input(s) {cpu[:3]} are not made "
                                             "on the accelerator")
                    return False
            if kind == "view" and any(absorbable_view(u) is head for u in head.output.consumers):
                # the Flatten/Reshape of an FC that could not take it: layers_of would give it
                # to the FC, whose kernel was generated without it
                self.rejected.setdefault(head.name, "the view of an FC that is not fused")
                return False
            if kind == "relu":
                prod = head.input_tensors()[0].producer
                if prod in self._claimed and fusable_act(prod) is head:
                    # layers_of would fuse it into its claimed producer, whose kernel
                    # was generated (and checked) without it
                    self.rejected.setdefault(head.name, f"the {prod.type} {prod.name!r} before "
                                             "it is on the accelerator but could not be "
                                             "generated with this Relu fused")
                    return False
            layer = Layer(kind, head, act, view, post)
            kern, reason = lower.check_layer(layer, self.cfg)
            if kern is None:
                self.rejected.setdefault(head.name, reason or "")
                return False
            self._layers[head] = (layer, kern)
            if kind in ("view", "concat"):
                self._moved.add(head)      # a later Concat of this one's output may take it
            return True
        return accept

    def _layer_of(self, unit: Subgraph) -> tuple[Layer, K.Kernel]:
        (head,) = [op for op in unit.ops if op in self._layers]
        return self._layers[head]

    def _group(self, units: list[Subgraph]) -> set[Subgraph]:
        runs = member_runs(self.graph.root_subgraph.child_dag(), set(units))
        result: set[Subgraph] = set()
        for run in runs:
            for chunk in self._chunks(run):
                merged = merge_subgraph(chunk)
                assert len(merged) == 1, "a contiguous piece of a run merges into one subgraph"
                result |= merged
        return result

    def _chunks(self, run: list[Subgraph]) -> list[list[Subgraph]]:
        """Cut a run (in topological order) where a piece would exceed the limits."""
        lim = self.limits
        chunks: list[list[Subgraph]] = []
        cur: list[Subgraph] = []
        for u in run:
            trial = cur + [u]
            if cur and not self._fits(trial, lim):
                chunks.append(cur)
                trial = [u]
            cur = trial
        if cur:
            chunks.append(cur)
        return chunks

    def _fits(self, units: list[Subgraph], lim: Limits) -> bool:
        if lim.max_layers is not None and len(units) > lim.max_layers:
            return False
        pairs = sorted((self._layer_of(u) for u in units),
                       key=lambda p: self.graph.topo_position(p[0].head))
        layers = [p[0] for p in pairs]
        ins, outs = external_tensors(layers)
        if len(ins) + len(outs) > lim.max_io:
            return False
        if lim.max_step_bytes is not None:
            plan = plan_step(layers, self.cfg.n)
            need = estimate_step_bytes(plan, [p[1] for p in pairs], self.cfg)
            if need > lim.max_step_bytes:
                return False
        return True


@dataclass
class PartitionResult:
    """The accelerator subgraphs, the kernels generated to check each claimed layer (by head
    op, at placeholder Refs: the code generator relocates them) and why the other heads stay on
    the CPU."""

    subgraphs: set[Subgraph]
    kernels: dict[Op, K.Kernel]
    rejected: dict[str, str]


def partition(graph: Graph, cfg: AccelConfig, limits: Limits | None = None) -> PartitionResult:
    p = AccelPartitioner(graph, cfg, limits or Limits())
    subs = p.run()
    claimed = {op for s in subs for op in s.ops}
    kernels = {h: k for h, (_, k) in p._layers.items() if h in claimed}
    return PartitionResult(subs, kernels, p.rejected)

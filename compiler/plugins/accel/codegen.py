"""Code generation of the accelerator plugin: layers of a device subgraph -> one instruction
stream, its constant blob and the memory plan the runtime binds to the slot registers.

A *layer* is what one kernel of :mod:`compiler.plugins.accel.kernels` computes: a Conv, Gemm/MatMul,
residual Add/Sum, MaxPool, global average pool or standalone Relu (head), optionally with the
Relu/Clip after it fused into its requantization and, before a Gemm/MatMul, the Flatten/Reshape
that collapses C, H, W (absorbed by permuting the weights to the blocked layout). A Relu is a
head of its own only where it is not fused (`kernels.requant_act` from the input's scale and
zero point to the Relu output's, which the quantizer calibrates separately). The partitioner
claims ops layer by layer; this module lowers them, plans the memory of a subgraph and emits
its attributes:

- slot 0: the constant blob (each layer's packed weights, bias and requantization rows,
  aligned sections), slot 1: a scratch arena for the activations that stay inside the subgraph
  (offsets reused by liveness), slots 2..15: the external inputs, then outputs, at offset 0;
- ``accel_program`` (the END-terminated stream as bytes), ``accel_consts``,
  ``accel_scratch_bytes``, ``accel_io`` (see :class:`pyhost.accel.abi.IoSpec`),
  ``accel_config`` and ``accel_stats``.

The program refers to memory only through slots, so it runs wherever the runtime places the
tensors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.errors import PartitionError, QuantizationError
from compiler.plugins.accel import kernels as K
from compiler.quantize.params import ActQuant
from compiler.quantize.quantizer import requant_params
from compiler.quantize.requant import quantize_multiplier, quantize_multipliers
from compiler.xir import CONST, Op, Subgraph, Tensor
from pyhost.accel import layout, timing
from pyhost.accel.abi import (
    CONST_SLOT,
    FIRST_IO_SLOT,
    MAX_IO,
    SCRATCH_SLOT,
    IoSpec,
    align_up,
    card_align,
)
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig

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
#: Alignment of scratch tensors (one 512-bit beat).
SCRATCH_ALIGN = 64


class LoweringError(ValueError):
    """A layer the plugin cannot give to the accelerator (missing quantization parameters, an
    attribute the kernels do not implement); the message says which."""


# --- layers -------------------------------------------------------------------------------------

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


# --- lowering: one layer -> one kernel ----------------------------------------------------------

def block_shape(shape: Sequence[int] | None) -> tuple[int, int, int, int]:
    """The NCHW view of a tensor in the blocked layout: (B, C, H, W), or (M, K, 1, 1)."""
    if shape is None or len(shape) not in (2, 4):
        raise LoweringError(f"shape {shape} is neither NCHW nor (M, K)")
    s = tuple(int(v) for v in shape)
    return (s[0], s[1], s[2], s[3]) if len(s) == 4 else (s[0], s[1], 1, 1)


def tensor_bytes(shape: Sequence[int] | None, n: int) -> int:
    b, c, h, w = block_shape(shape)
    return layout.act_bytes(c, h, w, n, b)


def act_quant(t: Tensor) -> ActQuant:
    q = t.attrs.get("quant")
    if not isinstance(q, dict) or q.get("dtype") != "int8":
        raise LoweringError(f"tensor {t.name!r} has no int8 quantization parameters")
    if t.dtype != "float32":
        raise LoweringError(f"tensor {t.name!r} is {t.dtype}, not float32")
    return ActQuant.from_attr(q)


def _op_quant(op: Op, keys: Sequence[str]) -> dict[str, Any]:
    q = op.attrs.get("quant")
    if not isinstance(q, dict) or any(k not in q for k in keys):
        raise LoweringError(f"{op.type} {op.name!r} has no quantization parameters (is it "
                            "quantized? it needs constant weights and calibrated tensors)")
    return dict(q)


def _const_scalar(t: Tensor | None, default: float) -> float:
    if t is None:
        return default
    if t.producer.type != CONST:
        raise LoweringError(f"Clip bound {t.name!r} is not a constant")
    return float(np.asarray(t.producer.attrs["data"]).reshape(-1)[0])


def _act(layer: Layer, oq: ActQuant) -> tuple[int, int] | None:
    """REQ bounds of the fused activation in the output's quantized domain."""
    act = layer.act
    if act is None:
        return None
    if act.type == "Relu":
        return K.relu_bounds(oq.zero_point)
    lo_t, hi_t = act.input_tensors("min"), act.input_tensors("max")
    lo = _const_scalar(lo_t[0] if lo_t else None, -math.inf)
    hi = _const_scalar(hi_t[0] if hi_t else None, math.inf)
    return K.clip_bounds(lo, hi, oq.scale, oq.zero_point)


def _fused_requant(q: dict[str, Any], oq: ActQuant) -> dict[str, Any]:
    """Requantization against the fused activation's output parameters."""
    mult, shift = requant_params(q["input_scale"], q["weight_scale"], oq.scale)
    return {**q, "multiplier": mult, "shift": shift, "output_scale": oq.scale,
            "output_zero_point": oq.zero_point}


def _ints(op: Op, key: str, n: int) -> tuple[int, ...]:
    v = op.attrs.get(key)
    if not isinstance(v, list) or len(v) != n:
        raise LoweringError(f"{op.type} {op.name!r}: {key}={v!r} is not {n} values (2-D only)")
    return tuple(int(x) for x in v)


def blocked_fc_weight(w_kn: np.ndarray, x_shape: tuple[int, int, int, int], n: int
                      ) -> np.ndarray:
    """(K, Nout) weights of an FC reading a flattened (B, C, H, W) tensor -> (K', Nout) rows
    in the order of the blocked layout (k' = ((cb*H + h)*W + w)*N + lane, zero rows for the
    padding channels), so the FC reads the blocked tensor directly."""
    _, c, h, w = x_shape
    nout = w_kn.shape[1]
    cb = layout.blocks(c, n)
    wp = np.zeros((cb * n, h, w, nout), w_kn.dtype)
    wp[:c] = w_kn.reshape(c, h, w, nout)
    return np.ascontiguousarray(wp.reshape(cb, n, h, w, nout).transpose(0, 2, 3, 1, 4)
                                .reshape(cb * h * w * n, nout))


def build_kernel(layer: Layer, cfg: AccelConfig, ins: Sequence[K.Ref], out: K.Ref,
                 consts: K.Ref) -> K.Kernel:
    """The kernel of one layer with its tensors at the given Refs. Raises LoweringError,
    K.AccelKernelError or QuantizationError if the layer cannot be mapped."""
    head, kind = layer.head, layer.kind
    if kind == "add" and (len(layer.inputs) != 2
                          or any(t.shape != head.output.shape for t in layer.inputs)
                          or any(t.producer.type == CONST for t in layer.inputs)):
        raise LoweringError(f"{head.type} {head.name!r}: only the sum of two activations of "
                            "the output's shape (no broadcasting, no constants)")
    oq = act_quant(layer.output)
    for t in layer.inputs:
        act_quant(t)
    bounds = _act(layer, oq)
    if kind == "conv":
        q = _op_quant(head, ("weight", "weight_scale", "bias_corrected", "multiplier", "shift"))
        x = layer.inputs[0]
        if x.shape is None or len(x.shape) != 4:
            raise LoweringError(f"Conv {head.name!r}: only 2-D convolutions (NCHW input)")
        if layer.act is not None:
            q = _fused_requant(q, oq)
        kern = K.conv2d(x.shape, q, inp=ins[0], out=out, consts=consts,
                        strides=_ints(head, "strides", 2), pads=_ints(head, "pads", 4),
                        dilations=_ints(head, "dilations", 2),
                        group=int(head.attrs.get("group", 1)), act=bounds, cfg=cfg,
                        name=head.name)
    elif kind == "gemm":
        q = _op_quant(head, ("weight", "weight_scale", "bias_corrected", "multiplier", "shift",
                             "weight_axis"))
        w = np.asarray(q["weight"])
        w_kn = w.T if int(q["weight_axis"]) == 0 else w
        x = layer.inputs[0]
        if layer.view is not None:
            xs = block_shape(x.shape)
            w_kn = blocked_fc_weight(w_kn, xs, cfg.n)
            m = xs[0]
        else:
            if x.shape is None or len(x.shape) != 2:
                raise LoweringError(f"{head.type} {head.name!r}: the input must be (M, K)")
            m = int(x.shape[0])
        q = {**q, "weight": w_kn, "weight_axis": 1}
        if layer.act is not None:
            q = _fused_requant(q, oq)
        kern = K.gemm(m, q, inp=ins[0], out=out, consts=consts, act=bounds, cfg=cfg,
                      name=head.name)
    elif kind == "add":
        q = _op_quant(head, ("input_multipliers", "input_shifts", "input_zero_points"))
        xs = layer.inputs
        if layer.act is not None:
            mult, shift = quantize_multipliers(np.array([act_quant(t).scale / oq.scale
                                                         for t in xs]))
            q = {**q, "input_multipliers": mult, "input_shifts": shift,
                 "output_scale": oq.scale, "output_zero_point": oq.zero_point}
        kern = K.add(block_shape(head.output.shape), q, a=ins[0], b=ins[1], out=out,
                     consts=consts, act=bounds, cfg=cfg, name=head.name)
    elif kind == "maxpool":
        x = layer.inputs[0]
        iq = act_quant(x)
        if x.shape is None or len(x.shape) != 4:
            raise LoweringError(f"MaxPool {head.name!r}: only 2-D pooling (NCHW input)")
        if any(d != 1 for d in _ints(head, "dilations", 2)):
            raise LoweringError(f"MaxPool {head.name!r}: dilation is not supported")
        if iq != oq:
            raise LoweringError(f"MaxPool {head.name!r}: input and output quantization differ")
        kern = K.maxpool2d(x.shape, _ints(head, "kernel_shape", 2), inp=ins[0], out=out,
                           strides=_ints(head, "strides", 2), pads=_ints(head, "pads", 4),
                           zero_point=iq.zero_point, cfg=cfg, name=head.name)
    elif kind == "relu":
        x = layer.inputs[0]
        if x.producer.type == CONST:
            raise LoweringError(f"Relu {head.name!r}: the input is a constant (fold it)")
        iq = act_quant(x)
        mult, shift = quantize_multiplier(iq.scale / oq.scale)
        kern = K.requant_act(block_shape(x.shape), multiplier=mult, shift=shift,
                             input_zero_point=iq.zero_point, output_zero_point=oq.zero_point,
                             inp=ins[0], out=out, consts=consts,
                             act=K.relu_bounds(oq.zero_point), cfg=cfg, name=head.name)
    elif kind == "avgpool":
        x = layer.inputs[0]
        iq = act_quant(x)
        if x.shape is None or len(x.shape) != 4:
            raise LoweringError(f"{head.type} {head.name!r}: only NCHW input")
        b, c, h, w = (int(v) for v in x.shape)
        if head.type == "AveragePool" and (
                _ints(head, "kernel_shape", 2) != (h, w) or any(_ints(head, "pads", 4))):
            raise LoweringError(f"AveragePool {head.name!r}: only a window over the whole "
                                "image without padding (a global average pool)")
        mult, shift = quantize_multiplier(iq.scale / (h * w * oq.scale))
        kern = K.global_avgpool(x.shape, multiplier=mult, shift=shift,
                                input_zero_point=iq.zero_point, output_zero_point=oq.zero_point,
                                inp=ins[0], out=out, consts=consts, cfg=cfg, name=head.name)
    else:  # pragma: no cover - KIND_OF covers every head type
        raise LoweringError(f"unknown layer kind {kind!r}")
    got = tuple(kern.outputs[0].shape)
    if got != block_shape(layer.output.shape):
        raise LoweringError(f"{head.type} {head.name!r}: the kernel computes {got}, the graph "
                            f"says {layer.output.shape}")
    return kern


def layer_macs(layer: Layer) -> int:
    """Multiply-accumulates of the layer as the model defines them (no padding channels)."""
    head = layer.head
    if layer.kind == "conv":
        w = head.input_tensors("W")[0].shape or ()
        return math.prod(layer.output.shape or ()) * math.prod(w[1:])
    if layer.kind == "gemm":
        x = layer.inputs[0].shape or ()
        return math.prod(layer.output.shape or ()) * math.prod(x[1:])
    return 0


def check_layer(layer: Layer, cfg: AccelConfig) -> tuple[K.Kernel | None, str | None]:
    """(kernel at placeholder Refs, None) if the layer maps onto the accelerator, else (None,
    the reason). Placeholders: constants at slot 0, input i at slot 2 + i, the output after the
    inputs, all at offset 0 (`relocate` moves them)."""
    refs = [K.Ref(FIRST_IO_SLOT + i) for i in range(len(layer.inputs))]
    try:
        return build_kernel(layer, cfg, refs, K.Ref(FIRST_IO_SLOT + len(refs)),
                            K.Ref(CONST_SLOT)), None
    except (LoweringError, K.AccelKernelError, QuantizationError) as e:
        return None, str(e)


def relocate(kern: K.Kernel, ins: Sequence[K.Ref], out: K.Ref, consts: K.Ref) -> K.Kernel:
    """A `check_layer` kernel moved to real Refs: LOAD/STORE slots and offsets rewritten (the
    kernels' code depends on where the tensors are only through these two fields)."""
    where = {CONST_SLOT: consts, FIRST_IO_SLOT + len(ins): out}
    where.update({FIRST_IO_SLOT + i: r for i, r in enumerate(ins)})
    insns = []
    for insn in kern.insns:
        if insn.op in (isa.Opcode.LOAD, isa.Opcode.STORE):
            f = insn.fields
            r = where[f.get("slot", 0)]
            insn = isa.Insn(insn.op, {**f, "slot": r.slot, "offset": f.get("offset", 0)
                                      + r.offset})
        insns.append(insn)

    def moved(t: K.TensorInfo, r: K.Ref) -> K.TensorInfo:
        return dataclasses.replace(t, ref=r)

    return dataclasses.replace(
        kern, insns=tuple(insns),
        inputs=tuple(moved(t, r) for t, r in zip(kern.inputs, ins, strict=True)),
        outputs=(moved(kern.outputs[0], out),),
        consts=dataclasses.replace(kern.consts, ref=consts) if kern.consts else None)


# --- the memory plan of a subgraph --------------------------------------------------------------

@dataclass
class StepPlan:
    """Where every tensor of a subgraph's layers lives during its run."""

    layers: list[Layer]
    inputs: list[Tensor]
    outputs: list[Tensor]
    refs: dict[Tensor, K.Ref]
    scratch_bytes: int

    @property
    def externals(self) -> int:
        return len(self.inputs) + len(self.outputs)


def external_tensors(layers: Sequence[Layer]) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) a group of layers exchanges with the rest of the graph, in
    topological order of their producers."""
    ops = {op for ly in layers for op in ly.ops}
    graph_outs = set(layers[0].head.graph.outputs) if layers else set()
    ins = {t for ly in layers for t in ly.inputs if t.producer not in ops}
    outs = {ly.output for ly in layers
            if ly.output in graph_outs or not ly.output.consumers
            or any(u not in ops for u in ly.output.consumers)}
    pos = layers[0].head.graph.topo_position if layers else None

    def order(ts: set[Tensor]) -> list[Tensor]:
        assert pos is not None or not ts
        return sorted(ts, key=lambda t: pos(t.producer))  # type: ignore[misc]

    return order(ins), order(outs)


def _first_fit(free: list[list[int]], size: int) -> int:
    for i, (start, length) in enumerate(free):
        if length >= size:
            free[i] = [start + size, length - size]
            if free[i][1] == 0:
                del free[i]
            return start
    raise AssertionError("the arena is unbounded at its end")


def _release(free: list[list[int]], start: int, size: int) -> None:
    free.append([start, size])
    free.sort()
    merged: list[list[int]] = []
    for s, n in free:
        if merged and merged[-1][0] + merged[-1][1] == s:
            merged[-1][1] += n
        else:
            merged.append([s, n])
    free[:] = merged


def plan_step(layers: Sequence[Layer], n: int) -> StepPlan:
    """Slots for the external tensors and scratch offsets for the internal ones: a tensor gets
    its space when its layer runs (while that layer's inputs still hold theirs) and gives it
    back after its last reader, first fit in 64-byte units. Layers run one after the other
    (kernels.join drains each before the next starts), so reusing a dead tensor's bytes is safe.
    """
    layers = list(layers)
    ins, outs = external_tensors(layers)
    if len(ins) + len(outs) > MAX_IO:
        raise PartitionError(f"accel: {len(ins)} inputs + {len(outs)} outputs exceed the "
                             f"{MAX_IO} slots for external tensors")
    refs: dict[Tensor, K.Ref] = {}
    for i, t in enumerate(ins + outs):
        refs[t] = K.Ref(FIRST_IO_SLOT + i)
    last: dict[Tensor, int] = {}
    for i, ly in enumerate(layers):
        for t in ly.inputs:
            last[t] = i
    free: list[list[int]] = [[0, 1 << 40]]
    size: dict[Tensor, int] = {}
    top = 0
    for i, ly in enumerate(layers):
        t = ly.output
        if t not in refs:
            size[t] = align_up(tensor_bytes(t.shape, n), SCRATCH_ALIGN)
            at = _first_fit(free, size[t])
            refs[t] = K.Ref(SCRATCH_SLOT, at)
            top = max(top, at + size[t])
        for x in {x for x in ly.inputs if last.get(x) == i and x in size}:
            _release(free, refs[x].offset, size[x])
    return StepPlan(layers, ins, outs, refs, top)


def program_bytes(insns: int, layers: int) -> int:
    """Bytes of a joined program: the layers' instructions, a barrier between two, END."""
    return isa.INSN_BYTES * (insns + max(layers - 1, 0) + 1)


def estimate_step_bytes(plan: StepPlan, kernels: Sequence[K.Kernel], cfg: AccelConfig) -> int:
    """Card bytes a step needs at once: program, constants, scratch, inputs and outputs, each
    rounded to the runtime's allocation unit."""
    a = card_align(cfg.n)
    calign = a
    consts = 0
    for k in kernels:
        if k.consts is not None:
            consts = align_up(consts, calign) + k.consts.nbytes
    io = sum(align_up(tensor_bytes(t.shape, cfg.n), a) for t in plan.inputs + plan.outputs)
    prog = program_bytes(sum(len(k.insns) for k in kernels), len(kernels))
    return (align_up(prog, a) + align_up(consts, a) + align_up(plan.scratch_bytes, a) + io)


# --- compile ------------------------------------------------------------------------------------

def compile_subgraph(subgraph: Subgraph, cfg: AccelConfig,
                     checked: Mapping[Op, K.Kernel] | None = None) -> None:
    """Generate the subgraph's program and attach the ``accel_*`` attributes. `checked` holds
    the partition's `check_layer` kernels by head op: those are relocated, not generated again.
    """
    layers = layers_of(subgraph.ops)
    if not layers:
        raise PartitionError(f"accel: subgraph {subgraph.name!r} has no layer")
    plan = plan_step(layers, cfg.n)
    n = cfg.n
    calign = card_align(n)
    blob = bytearray()
    kernels: list[K.Kernel] = []
    per_layer = []
    for ly in layers:
        off = align_up(len(blob), calign)
        ins, out, cref = [plan.refs[t] for t in ly.inputs], plan.refs[ly.output], \
            K.Ref(CONST_SLOT, off)
        try:
            if checked is not None and ly.head in checked:
                kern = relocate(checked[ly.head], ins, out, cref)
            else:
                kern = build_kernel(ly, cfg, ins, out, cref)
        except (LoweringError, K.AccelKernelError, QuantizationError) as e:
            raise PartitionError(f"accel: layer {ly.name!r} of {subgraph.name!r} cannot be "
                                 f"generated: {e}") from e
        if kern.consts is not None:
            blob += bytes(off - len(blob))
            blob += kern.consts.data
        kernels.append(kern)
        est = timing.estimate(kern.insns, cfg)
        macs = layer_macs(ly)
        per_layer.append({
            "name": ly.name, "kind": ly.kind, "ops": [op.type for op in ly.ops],
            "out_shape": list(block_shape(ly.output.shape)), "macs": macs,
            "instructions": len(kern.insns), "estimated_cycles": est.cycles,
            "array_macs": est.gemm_iterations * n * n,
            "mac_utilization": round(macs / (n * n * est.cycles), 4) if est.cycles else 0.0,
            "tiling": {k: v for k, v in kern.tiling.items()
                       if isinstance(v, (int, str, bool))},
        })
    program = K.join(kernels)
    # join drains the accelerator between layers, so the program's estimate is the sum of the
    # layers' (within a few cycles per barrier); estimating the whole stream again would double
    # the compile time of large models
    cycles = sum(p["estimated_cycles"] for p in per_layer)
    array_macs = sum(p["array_macs"] for p in per_layer)
    raw = b"".join(isa.encode(i) for i in program)
    io = []
    fills = {ly.output: kern.outputs[0].fill for ly, kern in zip(layers, kernels, strict=True)}
    for role, ts in (("in", plan.inputs), ("out", plan.outputs)):
        for t in ts:
            q = act_quant(t)
            io.append(IoSpec(
                name=t.name, role=role, slot=plan.refs[t].slot,
                nbytes=tensor_bytes(t.shape, n), shape=tuple(int(v) for v in t.shape or ()),
                scale=q.scale, zero_point=q.zero_point, n=n,
                fill=fills[t] if role == "out" else q.zero_point).to_attr())
    macs = sum(p["macs"] for p in per_layer)
    subgraph.set_attr("accel_program", raw)
    subgraph.set_attr("accel_consts", bytes(blob))
    subgraph.set_attr("accel_scratch_bytes", plan.scratch_bytes)
    subgraph.set_attr("accel_io", io)
    subgraph.set_attr("accel_config", dataclasses.asdict(cfg))
    subgraph.set_attr("accel_stats", {
        "layers": len(layers), "macs": macs, "array_macs": array_macs,
        "estimated_cycles": cycles, "instructions": len(program),
        "mac_utilization": round(macs / (n * n * cycles), 4) if cycles else 0.0,
        "per_layer": per_layer})

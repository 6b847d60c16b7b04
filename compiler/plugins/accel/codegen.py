"""Code generation of the accelerator plugin: layers of a device subgraph -> one instruction
stream, its constant blob and the memory plan the runtime binds to the slot registers.

A *layer* (`layers`) is what one kernel of :mod:`compiler.plugins.accel.kernels` computes: a
Conv, Gemm/MatMul, residual Add/Sum, MaxPool, global average pool or standalone Relu (head),
optionally with the Relu/Clip after it fused into its requantization and, before a Gemm/MatMul,
the Flatten/Reshape that collapses C, H, W (absorbed by permuting the weights to the blocked
layout). A Relu is a head of its own only where it is not fused (`kernels.requant_act` from the
input's scale and zero point to the Relu output's, which the quantizer calibrates separately).
The partitioner claims ops layer by layer; `lower` turns each layer into a kernel, `memplan`
plans the memory of a subgraph, and this module joins the kernels and emits the attributes:

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
from collections.abc import Mapping, Sequence

from compiler.errors import PartitionError, QuantizationError
from compiler.plugins.accel import kernels as K
from compiler.plugins.accel.layers import COPIES, layers_of
from compiler.plugins.accel.lower import (
    LoweringError,
    act_quant,
    block_shape,
    build_kernel,
    layer_macs,
    relocate,
    tensor_bytes,
)
from compiler.plugins.accel.memplan import plan_step
from compiler.xir import Op, Subgraph
from pyhost.accel import timing
from pyhost.accel.abi import (
    CONST_SLOT,
    IoSpec,
    align_up,
    card_align,
)
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import Insn


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
    blob: list[bytes] = []          # the layers' constants and their padding, joined once
    size = 0
    kernels: list[K.Kernel] = []
    per_layer = []
    #: by id, the estimate of each program the layers were checked with (and the program):
    #: layers of one geometry share one (`kernels.conv2d`), and relocating it moves no cycle
    #: (`relocate` rewrites slots and offsets only)
    estimates: dict[int, tuple[Sequence[Insn], timing.Estimate]] = {}
    for ly in layers:
        off = align_up(size, calign)
        ins, out, cref = [plan.refs[t] for t in ly.inputs], plan.refs[ly.output], \
            K.Ref(CONST_SLOT, off)
        try:
            if ly.kind in COPIES:
                # what it copies depends on what the plan lets the producers write in place
                kern = build_kernel(ly, cfg, ins, out, cref,
                                    in_place=[t in plan.in_place for t in ly.inputs])
            elif checked is not None and ly.head in checked:
                kern = relocate(checked[ly.head], ins, out, cref, plan.temps.get(ly.head))
            else:
                kern = build_kernel(ly, cfg, ins, out, cref, temp=plan.temps.get(ly.head))
        except (LoweringError, K.AccelKernelError, QuantizationError) as e:
            raise PartitionError(f"accel: layer {ly.name!r} of {subgraph.name!r} cannot be "
                                 f"generated: {e}") from e
        if kern.consts is not None:
            blob += [bytes(off - size), kern.consts.data]
            size = off + len(kern.consts.data)
        kernels.append(kern)
        base = checked[ly.head].insns if checked is not None and ly.head in checked \
            and ly.kind not in COPIES else kern.insns
        if id(base) not in estimates:
            estimates[id(base)] = base, timing.estimate(base, cfg)
        est = estimates[id(base)][1]
        macs = layer_macs(ly)
        per_layer.append({
            "name": ly.name, "kind": ly.kind, "ops": [op.type for op in ly.ops],
            "out_shape": list(block_shape(ly.output.shape)), "macs": macs,
            "instructions": len(kern.insns), "estimated_cycles": est.cycles,
            "array_macs": est.array_macs,
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
    raw = program.raw
    io = []
    fills = {ly.output: kern.outputs[0].fill for ly, kern in zip(layers, kernels, strict=True)}
    for role, ts in (("in", plan.inputs), ("out", plan.outputs)):
        for t in ts:
            q = act_quant(t)
            io.append(IoSpec(
                name=t.name, role=role, slot=plan.refs[t].slot,
                nbytes=tensor_bytes(t.shape, n), shape=tuple(int(v) for v in t.shape or ()),
                scale=q.scale, zero_point=q.zero_point, n=n,
                fill=fills[t] if role == "out" else q.zero_point,
                feature_scales=q.feature_scales).to_attr())
    macs = sum(p["macs"] for p in per_layer)
    subgraph.set_attr("accel_program", raw)
    subgraph.set_attr("accel_consts", b"".join(blob))
    subgraph.set_attr("accel_scratch_bytes", plan.scratch_bytes)
    subgraph.set_attr("accel_io", io)
    subgraph.set_attr("accel_config", dataclasses.asdict(cfg))
    subgraph.set_attr("accel_stats", {
        "layers": len(layers), "macs": macs, "array_macs": array_macs,
        "estimated_cycles": cycles, "instructions": len(program),
        "mac_utilization": round(macs / (n * n * cycles), 4) if cycles else 0.0,
        "per_layer": per_layer})

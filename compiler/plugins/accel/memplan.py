"""The memory plan of an accelerator subgraph: its external tensors (slots), the scratch arena
that holds the activations that stay inside it (offsets reused by liveness), and an estimate of
the card bytes one launch needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compiler.errors import PartitionError
from compiler.plugins.accel import kernels as K
from compiler.plugins.accel.layers import COPIES, Layer
from compiler.plugins.accel.lower import in_place_offsets, temp_bytes, tensor_bytes
from compiler.xir import Op, Tensor
from pyhost.accel.abi import (
    FIRST_IO_SLOT,
    MAX_IO,
    SCRATCH_SLOT,
    align_up,
    card_align,
)
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig

#: Alignment of scratch tensors (one 512-bit beat).
SCRATCH_ALIGN = 64


@dataclass
class StepPlan:
    """Where every tensor of a subgraph's layers lives during its run. ``in_place``: the
    inputs of Concat and view layers that their producers write straight into the output
    (channel-offset writes), so that those layers copy only the rest."""

    layers: list[Layer]
    inputs: list[Tensor]
    outputs: list[Tensor]
    refs: dict[Tensor, K.Ref]
    scratch_bytes: int
    in_place: frozenset[Tensor] = frozenset()
    #: head op -> the layer's own scratch memory while it runs (`lower.temp_bytes`)
    temps: dict[Op, K.Ref] = field(default_factory=dict)

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


def in_place_writes(layers: Sequence[Layer], outs: Sequence[Tensor], n: int
                    ) -> dict[Tensor, tuple[Tensor, int]]:
    """tensor -> (the tensor whose bytes hold it, byte offset): the inputs of Concat and view
    layers that their producer writes straight into the output. An input qualifies when a
    layer of the group produces it, it is no external output (those have a slot of their
    own), no other Concat took it already and its bytes are a contiguous piece of the output
    (`lower.in_place_offsets`). Chains resolve to their last tensor (DenseNet's dense block:
    every concatenation inside the block's last one)."""
    produced = {ly.output for ly in layers}
    external = set(outs)
    direct: dict[Tensor, tuple[Tensor, int]] = {}
    for ly in layers:
        if ly.kind not in COPIES:
            continue
        seen: set[Tensor] = set()
        for t, off in zip(ly.inputs, in_place_offsets(ly, n), strict=True):
            if off is None or t in seen or t in direct or t not in produced or t in external:
                continue
            seen.add(t)
            direct[t] = (ly.output, off)
    out = {}
    for t in direct:
        r, off = t, 0
        while r in direct:
            r, o = direct[r]
            off += o
        out[t] = (r, off)
    return out


def plan_step(layers: Sequence[Layer], n: int) -> StepPlan:
    """Slots for the external tensors and scratch offsets for the internal ones: a tensor gets
    its space when its layer runs (while that layer's inputs still hold theirs) and gives it
    back after its last reader, first fit in 64-byte units. Layers run one after the other
    (kernels.join drains each before the next starts), so reusing a dead tensor's bytes is safe.
    A tensor written in place (`in_place_writes`) lives inside the one that holds it: that
    one's space is taken when the first of them is written and given back after the last
    reader of any. A layer's own scratch memory (`lower.temp_bytes`) is taken with its
    output and given back when it ends.
    """
    layers = list(layers)
    ins, outs = external_tensors(layers)
    if len(ins) + len(outs) > MAX_IO:
        raise PartitionError(f"accel: {len(ins)} inputs + {len(outs)} outputs exceed the "
                             f"{MAX_IO} slots for external tensors")
    refs: dict[Tensor, K.Ref] = {}
    for i, t in enumerate(ins + outs):
        refs[t] = K.Ref(FIRST_IO_SLOT + i)
    alias = in_place_writes(layers, outs, n)

    def root(t: Tensor) -> Tensor:
        return alias[t][0] if t in alias else t

    last: dict[Tensor, int] = {}
    for i, ly in enumerate(layers):
        for t in (*ly.inputs, ly.output):
            last[root(t)] = i
    free: list[list[int]] = [[0, 1 << 40]]
    size: dict[Tensor, int] = {}
    temps: dict[Op, K.Ref] = {}
    top = 0
    for i, ly in enumerate(layers):
        t = ly.output
        r = root(t)
        if r not in refs:
            size[r] = align_up(tensor_bytes(r.shape, n), SCRATCH_ALIGN)
            at = _first_fit(free, size[r])
            refs[r] = K.Ref(SCRATCH_SLOT, at)
            top = max(top, at + size[r])
        if t is not r:
            refs[t] = refs[r] + alias[t][1]
        tb = align_up(temp_bytes(ly), SCRATCH_ALIGN)
        if tb:
            at = _first_fit(free, tb)
            temps[ly.head] = K.Ref(SCRATCH_SLOT, at)
            top = max(top, at + tb)
            _release(free, at, tb)
        for x in {root(x) for x in (*ly.inputs, t)}:
            if last.get(x) == i and x in size:
                _release(free, refs[x].offset, size[x])
    return StepPlan(layers, ins, outs, refs, top, frozenset(alias), temps)


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

"""Joining layers into one stream: the barrier between two kernels and END."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.plugins.accel.kernels.base import Kernel
from compiler.plugins.accel.kernels.pipeline import _flag
from pyhost.spec import isa
from pyhost.spec.isa import AluOp, Insn, Opcode

# --- joining layers -----------------------------------------------------------------------------

def barrier() -> Insn:
    """The compute instruction between two layers: waits for the last store of the previous
    layer (store -> compute) and releases the loads of the next (compute -> load). It adds 0
    to ACC row 0, which no unit uses at that moment."""
    return isa.alu(AluOp.ADD, imm=0, dst_base=0, outer=1, inner=1, pop_next=1, push_prev=1)


def join(kernels: Sequence[Kernel]) -> list[Insn]:
    """One instruction stream for layers run in order, ending with END.

    Every kernel leaves the token counters balanced, but its last stores may still be writing
    (the next layer's input) while the next layer's loads would start: between two kernels the
    last STORE of the first pushes store -> compute, a `barrier` pops it and pushes
    compute -> load, and the first LOAD of the second pops that. So a layer starts loading only
    after the previous one has written all its results, and its compute and loads never touch
    scratchpad rows the previous layer still uses.
    """
    out: list[Insn] = []
    # a kernel without instructions (a Concat whose inputs were all written in place) needs
    # no hand-off
    kernels = [k for k in kernels if k.insns]
    for i, k in enumerate(kernels):
        body = list(k.insns)
        if i > 0:
            j = next(x for x, ins in enumerate(body) if ins.op == Opcode.LOAD)
            body[j] = _flag(body[j], "pop_next")
            out.append(barrier())
        if i + 1 < len(kernels):
            j = max(x for x, ins in enumerate(body) if ins.op == Opcode.STORE)
            body[j] = _flag(body[j], "push_prev")
        out += body
    out.append(isa.end())
    return out

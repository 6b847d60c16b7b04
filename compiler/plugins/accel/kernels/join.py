"""Joining layers into one stream: the barrier between two kernels and END."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.plugins.accel.kernels.base import Kernel
from pyhost.spec import isa
from pyhost.spec.isa import AluOp, Insn, Opcode

# --- joining layers -----------------------------------------------------------------------------

def barrier() -> Insn:
    """The compute instruction between two layers: waits for the last store of the previous
    layer (store -> compute) and releases the loads of the next (compute -> load). It adds 0
    to ACC row 0, which no unit uses at that moment."""
    return isa.alu(AluOp.ADD, imm=0, dst_base=0, outer=1, inner=1, pop_next=1, push_prev=1)


def _with_flag(raw: bytearray, k: int, flag: str) -> None:
    """Set a dependency flag of instruction k of an encoded stream (the flags are bits of its
    first byte); AssertionError if it is set already."""
    bit = isa.FLAG_BITS[flag]
    assert bit < 0x100, "the flags are in an instruction's first byte"
    if raw[k * isa.INSN_BYTES] & bit:
        raise AssertionError(f"{isa.Stream(bytes(raw))[k]} already has {flag}")
    raw[k * isa.INSN_BYTES] |= bit


def join(kernels: Sequence[Kernel], end: bool = True) -> isa.Stream:
    """One instruction stream for layers run in order, ending with END (unless ``end`` is
    False: the pieces of one kernel, joined the same way).

    Every kernel leaves the token counters balanced, but its last stores may still be writing
    (the next layer's input) while the next layer's loads would start: between two kernels the
    last STORE of the first pushes store -> compute, a `barrier` pops it and pushes
    compute -> load, and the first LOAD of the second pops that. So a layer starts loading only
    after the previous one has written all its results, and its compute and loads never touch
    scratchpad rows the previous layer still uses.
    """
    out: list[bytes] = []
    # a kernel without instructions (a Concat whose inputs were all written in place) needs
    # no hand-off
    kernels = [k for k in kernels if k.insns]
    for i, k in enumerate(kernels):
        body = bytearray(isa.Stream.of(k.insns).raw)
        ops = np.frombuffer(body, np.uint8)[::isa.INSN_BYTES] & 0xF     # the opcodes
        if i > 0:
            _with_flag(body, int(np.flatnonzero(ops == Opcode.LOAD)[0]), "pop_next")
            out.append(isa.encode(barrier()))
        if i + 1 < len(kernels):
            _with_flag(body, int(np.flatnonzero(ops == Opcode.STORE)[-1]), "push_prev")
        out.append(bytes(body))
    if end:
        out.append(isa.encode(isa.end()))
    return isa.Stream(b"".join(out))

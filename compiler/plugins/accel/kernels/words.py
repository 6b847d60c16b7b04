"""The kernels' instructions as words (`isa.word`): the constructors of pyhost.spec.isa with the
same arguments (`isa.load`, `isa.gemm`, ...) returning the 128-bit word instead of an Insn, and
the dependency flags of a word.

A layer's kernel emits up to hundreds of thousands of instructions (ResNet-50's whole program
is 508k, VGG-19's 2.5M), so the kernels never build an object per instruction: they emit
words, and a `Kernel` holds them as an `isa.Stream` (the encoded bytes), which decodes an
instruction only when something reads it. Every constructor here checks its fields as
`isa.encode` does. The regular loops (a layer's GEMMs) add to a checked word instead:
``w + k * step(Opcode.GEMM, "inp_base")`` is `w` with k more in that field, which is exact as
long as the field stays in range, so such a loop checks the largest value of each field it
steps once (with the constructor) and then only adds.
"""

from __future__ import annotations

from pyhost.spec import isa
from pyhost.spec.isa import AluOp, Buffer, Insn, Opcode


def load(buf: Buffer, **f: int) -> int:
    return isa.word(Opcode.LOAD, buf=int(buf), **f)


def store(buf: Buffer, **f: int) -> int:
    return isa.word(Opcode.STORE, buf=int(buf), **f)


def gemm(**f: int) -> int:
    return isa.word(Opcode.GEMM, **f)


def dw(**f: int) -> int:
    return isa.word(Opcode.DW, **f)


def alu(op: AluOp, imm: int | None = None, **f: int) -> int:
    if imm is not None:
        f["imm"] = imm
        f["use_imm"] = 1
    return isa.word(Opcode.ALU, alu_op=int(op), **f)


def req(zp: int = 0, lo: int = -128, hi: int = 127, **f: int) -> int:
    return isa.word(Opcode.ALU, alu_op=int(AluOp.REQ), imm=isa.req_imm(zp, lo, hi), **f)


def of(insn: Insn) -> int:
    """The word of an Insn."""
    return int.from_bytes(isa.encode(insn), "little")


def step(op: Opcode, name: str) -> int:
    """What adding 1 to field `name` of an `op` word adds to the word."""
    return 1 << isa.field_lsb(op, name)


def flag(w: int, *flags: str) -> int:
    """`w` with these dependency flags set (AssertionError if one already is: the pipeline
    sets each flag once)."""
    for f in flags:
        bit = isa.FLAG_BITS[f]
        if w & bit:
            raise AssertionError(f"{isa.Stream.from_words([w])[0]} already has {f}")
        w |= bit
    return w

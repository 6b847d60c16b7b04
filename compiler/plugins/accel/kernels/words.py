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

A loop of hundreds of thousands of such words (VGG-19's first fully connected layer: 1.6 M
GEMMs) is built as a *block*: a (k, 2) uint64 array of the words' low and high 64-bit halves,
whose bytes are the words' encoded images (`grid`, `stream`); the pipeline takes a block where
it takes a list of words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

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


_LOW = (1 << 64) - 1


def block(words: Sequence[int]) -> np.ndarray:
    """Words as a block: a (k, 2) uint64 array of their low and high 64-bit halves."""
    return np.array([(w & _LOW, w >> 64) for w in words], np.uint64).reshape(-1, 2)


def grid(first: int, offsets: np.ndarray) -> np.ndarray:
    """The block of words ``first + offsets[i]`` (``offsets``: a `block` of what a loop adds to
    its first word, e.g. ``j * step(op, "acc_base") + ...``), exact in 128 bits: the low
    halves wrap and carry into the high ones."""
    lo = offsets[:, 0] + np.uint64(first & _LOW)
    hi = offsets[:, 1] + np.uint64(first >> 64) + (lo < offsets[:, 0])
    return np.stack([lo, hi], axis=1)


def flag_row(words: np.ndarray, k: int, *flags: str) -> None:
    """`flag` for word ``k`` of a block, in place."""
    for f in flags:
        bit = np.uint64(isa.FLAG_BITS[f])     # the flags are in the low half
        if words[k, 0] & bit:
            raise AssertionError(f"{stream([words[k].reshape(1, 2)])[0]} already has {f}")
        words[k, 0] |= bit


def stream(words: Iterable[int | np.ndarray]) -> isa.Stream:
    """The stream of these words and blocks of words, in order."""
    parts: list[bytes] = []
    run: list[int] = []
    for w in words:
        if isinstance(w, np.ndarray):
            if run:
                parts.append(b"".join([x.to_bytes(isa.INSN_BYTES, "little") for x in run]))
                run = []
            parts.append(np.ascontiguousarray(w, "<u8").tobytes())
        else:
            run.append(w)
    if run:
        parts.append(b"".join([x.to_bytes(isa.INSN_BYTES, "little") for x in run]))
    return isa.Stream(b"".join(parts))

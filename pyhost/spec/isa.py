"""The accelerator's instruction set: formats, encoder, decoder, assembler and disassembler.

Defined once here; ``python -m pyhost.spec.gen`` writes rtl/include/accel_isa.vh and docs/isa.md
from it. Instructions are 128 bits, little endian, fields packed from bit 0 in the order listed
in FORMATS. The semantics are documented in docs/isa.md (generated from SEMANTICS below) and
implemented twice: by the RTL under rtl/accel/ and by the functional model pyhost/accel/model.py,
which are checked bit-exact against each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import overload

#: 2: DW (depthwise) added; 3: XALU (DIV, SQRT) and the transposed LOAD added. A program of an
#: earlier version runs unchanged.
ISA_VERSION = 3
INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8

#: Base-address slot registers.
NUM_SLOTS = 16
#: The accelerator addresses card memory with 32 bits (slot + offset wraps modulo this).
ADDR_SPACE = 1 << 32
#: Dependency-token counters saturate here; a push beyond it is TOKEN_OVERFLOW.
TOKEN_MAX = 255


class Opcode(IntEnum):
    """Instruction opcodes (bits [3:0]). 0 is illegal so that zeroed memory never runs."""

    LOAD = 1    # card memory -> scratchpad (load unit)
    STORE = 2   # accumulator scratchpad -> card memory (store unit)
    GEMM = 3    # int8 x int8 -> int32 on the N x N array (compute unit)
    ALU = 4     # vector operation on accumulator rows (compute unit)
    END = 5     # end of the stream: finish when every unit is idle, raise the done interrupt
    DW = 6      # depthwise: per lane, a dot product over up to N taps (N input rows at once) on
                # the N x N array (compute unit)
    XALU = 7    # ALU operations of several cycles per row (XAluOp: DIV, SQRT), in the ALU's
                # format and loops (compute unit)


class Buffer(IntEnum):
    """Scratchpad targets of LOAD/STORE. The element size is the bytes of one row in memory."""

    INP = 0     # input: rows of N int8 (N bytes)
    WGT = 1     # weight: rows of N x N int8, row-major W[k][n] (N*N bytes)
    ACC = 2     # accumulator: rows of N int32 (4*N bytes)
    ACC8 = 3    # accumulator through int8: loads sign-extend N bytes, stores keep the low byte


class AluOp(IntEnum):
    """ALU operations; B is the source row, or the immediate when USE_IMM is set."""

    ADD = 0     # A + B (wraps at 32 bits)
    MAX = 1     # max(A, B), signed
    MIN = 2     # min(A, B), signed
    MUL = 3     # low 32 bits of A * B
    SHR = 4     # rounding arithmetic shift right by B[4:0]: (A + 2**(s-1)) >> s, s = 0 keeps A
    MOV = 5     # B
    REQ = 6     # requantize: clamp(((A * M + 2**(s-1)) >> s) + zp, lo, hi), M, s from rows src,
                # src+1; zp, lo, hi are int8 fields of the immediate (USE_IMM must be 0)


class XAluOp(IntEnum):
    """XALU operations (the ALU's format; ``alu_op`` holds one of these): several cycles per row
    (XALU_CYCLES), operands and result int32 per lane."""

    DIV = 0     # A / B truncated toward zero (-2**31 / -1 wraps to -2**31); a lane with B = 0 is
                # DIV_ZERO
    SQRT = 1    # floor(sqrt(B)); A is not read; a lane with B < 0 is NEG_SQRT


#: Cycles one XALU iteration (row) occupies the compute unit: a radix-2 divider (one quotient
#: bit per cycle) and a digit-by-digit square root (one result bit per cycle).
XALU_CYCLES = {XAluOp.DIV: 32, XAluOp.SQRT: 16}


class Unit(IntEnum):
    LOAD = 0
    COMPUTE = 1
    STORE = 2


UNIT_OF = {Opcode.LOAD: Unit.LOAD, Opcode.STORE: Unit.STORE, Opcode.GEMM: Unit.COMPUTE,
           Opcode.ALU: Unit.COMPUTE, Opcode.DW: Unit.COMPUTE, Opcode.XALU: Unit.COMPUTE}

# --- dependency tokens ---------------------------------------------------------------------------
#: The four token counters (docs/isa.md "Execution model"), by index: (producer, consumer).
L2C, C2L, C2S, S2C = range(4)
TOKEN_QUEUES = ((Unit.LOAD, Unit.COMPUTE), (Unit.COMPUTE, Unit.LOAD),
                (Unit.COMPUTE, Unit.STORE), (Unit.STORE, Unit.COMPUTE))
#: The counter each legal dependency flag of a unit pops from / pushes to. "prev" and "next" are
#: relative to the unit: the load unit has only a next (compute), the store unit only a prev.
POPS: dict[Unit, dict[str, int]] = {Unit.LOAD: {"pop_next": C2L},
                                    Unit.COMPUTE: {"pop_prev": L2C, "pop_next": S2C},
                                    Unit.STORE: {"pop_prev": C2S}}
PUSHES: dict[Unit, dict[str, int]] = {Unit.LOAD: {"push_next": L2C},
                                      Unit.COMPUTE: {"push_prev": C2L, "push_next": C2S},
                                      Unit.STORE: {"push_prev": S2C}}


def token_counters(unit: Unit | None, fields: dict[str, int]) -> tuple[tuple[int, ...],
                                                                       tuple[int, ...]]:
    """(counters popped, counters pushed) by an instruction of `unit` with these fields; flags
    the unit has no counter for are ignored (`check_static` rejects them)."""
    if unit is None:
        return (), ()
    get = fields.get
    return (tuple([c for flag, c in _POP_ITEMS[unit] if get(flag)]),
            tuple([c for flag, c in _PUSH_ITEMS[unit] if get(flag)]))


_POP_ITEMS = {u: tuple(d.items()) for u, d in POPS.items()}
_PUSH_ITEMS = {u: tuple(d.items()) for u, d in PUSHES.items()}


class AccelError(IntEnum):
    """Error codes in ACC_STATUS.ERR_CODE. The accelerator stops at the first error."""

    NONE = 0
    ILLEGAL_OPCODE = 1   # opcode 0 or above XALU (8..15)
    ILLEGAL_FIELD = 2    # a dependency flag the unit has no queue for, bad buffer or ALU/XALU op,
                         # STORE from INP/WGT or with padding or transpose, a transposed LOAD
                         # not to INP, with padding, or y_size not a multiple of N, REQ with
                         # USE_IMM, END with flags,
                         # DW with taps 0 or above N, tap_w 0, or taps off the banks' rotation
    SP_RANGE = 3         # the instruction would touch a scratchpad row beyond the depth
    MISALIGNED = 4       # LOAD/STORE address not a multiple of the element size
    FETCH_BUS = 5        # reading instructions failed (SLVERR/DECERR)
    LOAD_BUS = 6         # a LOAD read failed
    STORE_BUS = 7        # a STORE write failed
    DEADLOCK = 8         # every unit waits for a token that no instruction can push
    NO_END = 9           # INSN_COUNT instructions ran without END
    TOKEN_OVERFLOW = 10  # a push beyond TOKEN_MAX tokens in one queue
    ABORTED = 11         # software wrote ACC_CTRL.ABORT
    BAD_CONFIG = 12      # INSN_BASE not 16-byte aligned, or INSN_COUNT is 0
    DIV_ZERO = 13        # XALU.DIV with B = 0 in a lane
    NEG_SQRT = 14        # XALU.SQRT with B < 0 in a lane


@dataclass(frozen=True)
class FieldSpec:
    name: str
    width: int
    signed: bool = False
    doc: str = ""


#: Every instruction starts with the opcode and the four dependency flags.
HEADER = (
    FieldSpec("opcode", 4, doc="Opcode"),
    FieldSpec("pop_prev", 1, doc="wait for and take a token from the previous unit's queue"),
    FieldSpec("pop_next", 1, doc="wait for and take a token from the next unit's queue"),
    FieldSpec("push_prev", 1, doc="give a token to the previous unit when done"),
    FieldSpec("push_next", 1, doc="give a token to the next unit when done"),
)

_MEM = (
    FieldSpec("buf", 2, doc="Buffer: scratchpad"),
    FieldSpec("slot", 4, doc="base-address slot register"),
    FieldSpec("sp_base", 16, doc="first scratchpad row"),
    FieldSpec("offset", 32, doc="byte offset from the slot's base address"),
    FieldSpec("y_size", 12, doc="rows in memory"),
    FieldSpec("x_size", 12, doc="elements per row in memory"),
    FieldSpec("y_stride", 16, doc="elements from one memory row to the next"),
    FieldSpec("pad_top", 4, doc="zero rows before (LOAD only)"),
    FieldSpec("pad_bottom", 4, doc="zero rows after (LOAD only)"),
    FieldSpec("pad_left", 4, doc="padding elements before each row (LOAD only)"),
    FieldSpec("pad_right", 4, doc="padding elements after each row (LOAD only)"),
    FieldSpec("pad_value", 8, signed=True, doc="int8 value of every padding byte / lane"),
    FieldSpec("transpose", 1, doc="LOAD INP only: write each N x N block of N memory rows "
                                  "transposed"),
)

FORMATS: dict[Opcode, tuple[FieldSpec, ...]] = {
    Opcode.LOAD: HEADER + _MEM,
    Opcode.STORE: HEADER + _MEM,
    Opcode.GEMM: HEADER + (
        FieldSpec("reset", 1, doc="write the product instead of adding it"),
        FieldSpec("acc_base", 16, doc="first accumulator row"),
        FieldSpec("inp_base", 16, doc="first input row"),
        FieldSpec("wgt_base", 16, doc="the weight tile (held for the whole instruction)"),
        FieldSpec("outer", 12, doc="outer loop count"),
        FieldSpec("inner", 12, doc="inner loop count"),
        FieldSpec("acc_so", 12, doc="accumulator row stride of the outer loop"),
        FieldSpec("acc_si", 8, doc="accumulator row stride of the inner loop"),
        FieldSpec("inp_so", 12, doc="input row stride of the outer loop"),
        FieldSpec("inp_si", 8, doc="input row stride of the inner loop"),
    ),
    Opcode.ALU: HEADER + (
        FieldSpec("alu_op", 3, doc="AluOp (XALU: XAluOp)"),
        FieldSpec("use_imm", 1, doc="B is the immediate instead of the source row"),
        FieldSpec("dst_base", 14, doc="first destination (and A operand) accumulator row"),
        FieldSpec("src_base", 14, doc="first source accumulator row"),
        FieldSpec("outer", 12, doc="outer loop count"),
        FieldSpec("inner", 12, doc="inner loop count"),
        FieldSpec("dst_so", 12, doc="destination row stride of the outer loop"),
        FieldSpec("dst_si", 8, doc="destination row stride of the inner loop"),
        FieldSpec("src_so", 12, doc="source row stride of the outer loop"),
        FieldSpec("src_si", 8, doc="source row stride of the inner loop"),
        FieldSpec("imm", 24, signed=True, doc="immediate (REQ: zp [7:0], lo [15:8], hi [23:16])"),
    ),
    Opcode.END: HEADER,
    # DW narrows GEMM's bases and inner strides to make room for the tap geometry
    Opcode.DW: HEADER + (
        FieldSpec("reset", 1, doc="write the sum instead of adding it"),
        FieldSpec("acc_base", 14, doc="first accumulator row"),
        FieldSpec("inp_base", 16, doc="first input row (tap 0 of the first iteration)"),
        FieldSpec("wgt_base", 12, doc="the weight tile W[k][n]: tap k, lane n (held for the "
                                      "whole instruction)"),
        FieldSpec("outer", 12, doc="outer loop count"),
        FieldSpec("inner", 12, doc="inner loop count"),
        FieldSpec("acc_so", 12, doc="accumulator row stride of the outer loop"),
        FieldSpec("acc_si", 4, doc="accumulator row stride of the inner loop"),
        FieldSpec("inp_so", 12, doc="input row stride of the outer loop"),
        FieldSpec("inp_si", 4, doc="input row stride of the inner loop"),
        FieldSpec("taps", 7, doc="taps (input rows) per iteration, 1..N"),
        FieldSpec("tap_w", 4, doc="taps per kernel row (1..15)"),
        FieldSpec("tap_pitch", 10, doc="input rows from one kernel row to the next"),
    ),
}

#: XALU has the ALU's format (alu_op holds an XAluOp)
FORMATS[Opcode.XALU] = FORMATS[Opcode.ALU]

for _op, _fmt in FORMATS.items():
    assert sum(f.width for f in _fmt) <= INSN_BITS, _op

#: Each format's fields other than the opcode, as encode/decode walk them: (name, lsb, mask,
#: lowest value, highest value, width, signed), computed once from FORMATS.
_Layout = tuple[tuple[str, int, int, int, int, int, bool], ...]


def _layout(fmt: tuple[FieldSpec, ...]) -> _Layout:
    out, lsb = [], 0
    for f in fmt:
        if f.name != "opcode":
            lo, hi = (-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed \
                else (0, (1 << f.width) - 1)
            out.append((f.name, lsb, (1 << f.width) - 1, lo, hi, f.width, f.signed))
        lsb += f.width
    return tuple(out)


assert all(fmt[0].name == "opcode" for fmt in FORMATS.values())
_OPCODE_MASK = (1 << FORMATS[Opcode.END][0].width) - 1
_LAYOUTS: dict[Opcode, _Layout] = {op: _layout(fmt) for op, fmt in FORMATS.items()}
#: The field names each opcode has (besides the opcode).
_FIELD_NAMES: dict[Opcode, frozenset[str]] = {op: frozenset(f[0] for f in lay)
                                              for op, lay in _LAYOUTS.items()}
#: The same layouts by field name, for `word`.
_BY_NAME: dict[Opcode, dict[str, tuple[str, int, int, int, int, int, bool]]] = {
    op: {f[0]: f for f in lay} for op, lay in _LAYOUTS.items()}


def field_lsb(op: Opcode, name: str) -> int:
    lsb = 0
    for f in FORMATS[op]:
        if f.name == name:
            return lsb
        lsb += f.width
    raise KeyError(f"{op.name} has no field {name!r}")


def element_bytes(buf: Buffer, n: int) -> int:
    """Bytes of one scratchpad row as it sits in card memory, for an array of size `n`."""
    b = Buffer(buf)
    return n * n if b == Buffer.WGT else 4 * n if b == Buffer.ACC else n


def req_imm(zp: int, lo: int = -128, hi: int = 127) -> int:
    """The REQ immediate from its three int8 parts."""
    for v in (zp, lo, hi):
        if not -128 <= v <= 127:
            raise ValueError(f"REQ zero point / bounds must be int8, got {v}")
    raw = (zp & 0xFF) | ((lo & 0xFF) << 8) | ((hi & 0xFF) << 16)
    return raw - (1 << 24) if raw & (1 << 23) else raw


def req_fields(imm: int) -> tuple[int, int, int]:
    """(zp, lo, hi) of a REQ immediate."""
    raw = imm & 0xFFFFFF

    def s8(v: int) -> int:
        return v - 256 if v & 0x80 else v
    return s8(raw & 0xFF), s8((raw >> 8) & 0xFF), s8((raw >> 16) & 0xFF)


class IsaError(ValueError):
    """An instruction that cannot be encoded, or text that does not assemble."""


@dataclass(frozen=True)
class Insn:
    """One decoded instruction: the opcode and its fields by name (missing fields are 0)."""

    op: Opcode
    fields: dict[str, int] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        known = _FIELD_NAMES[self.op]
        if not known.issuperset(self.fields):
            unknown = set(self.fields) - known
            raise IsaError(f"{self.op.name} has no field(s) {sorted(unknown)}; it has "
                           f"{sorted(known)}")

    def __getattr__(self, name: str) -> int:
        if name.startswith("_") or name in ("op", "fields"):
            raise AttributeError(name)
        if name in _FIELD_NAMES[self.op]:
            return self.fields.get(name, 0)
        raise AttributeError(f"{self.op.name} has no field {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Insn) and encode(self) == encode(other)

    def __hash__(self) -> int:
        return hash(encode(self))

    @property
    def unit(self) -> Unit | None:
        return UNIT_OF.get(self.op)

    def __str__(self) -> str:
        return disassemble_one(self)


def encode(insn: Insn) -> bytes:
    """The 16-byte little-endian image of ``insn``; IsaError if a field does not fit."""
    op = insn.op
    word = int(op) & _OPCODE_MASK
    get = insn.fields.get
    for name, lsb, mask, lo, hi, _, _ in _LAYOUTS[op]:
        v = get(name, 0)
        if v == 0:  # absent or zero: nothing to set
            continue
        v = int(v)
        if not lo <= v <= hi:
            raise _no_fit(op, name, v)
        word |= (v & mask) << lsb
    return word.to_bytes(INSN_BYTES, "little")


def _no_fit(op: Opcode, name: str, v: int) -> IsaError:
    _, _, _, lo, hi, width, signed = _BY_NAME[op][name]
    return IsaError(f"{op.name}.{name} = {v} does not fit {width} "
                    f"{'signed ' if signed else ''}bits ({lo}..{hi})")


# --- instruction words ---------------------------------------------------------------------------
# A code generator that emits hundreds of thousands of instructions builds them as *words*: the
# 128-bit integer whose little-endian bytes are `encode`'s image, with no Insn object each.
# Fields are packed from bit 0 (FORMATS), so for an unsigned field that stays in range, adding
# ``k << field_lsb(op, name)`` to a word adds k to that field alone.

#: The bit of each dependency flag in a word (the four bits after the opcode).
FLAG_BITS: dict[str, int] = {}
_lsb = FORMATS[Opcode.END][0].width
for _f in FORMATS[Opcode.END][1:]:
    FLAG_BITS[_f.name] = 1 << _lsb
    _lsb += _f.width
del _lsb, _f


def word(op: Opcode, **fields: int) -> int:
    """The instruction `op` with these fields as its word: ``encode(Insn(op, fields))`` read as
    a little-endian integer. IsaError for a field the opcode does not have or a value that does
    not fit."""
    layout = _BY_NAME[op]
    w = int(op)
    for name, v in fields.items():
        f = layout.get(name)
        if f is None:
            raise IsaError(f"{op.name} has no field {name!r}; it has "
                           f"{sorted(_FIELD_NAMES[op])}")
        if v:
            v = int(v)
            if not f[3] <= v <= f[4]:
                raise _no_fit(op, name, v)
            w |= (v & f[2]) << f[1]
    return w


class Stream(Sequence[Insn]):
    """An instruction stream held as its encoded image (`raw`, 16 bytes per instruction): an
    immutable sequence of Insn, each decoded when it is read, for streams too long for an object
    per instruction. It equals a Stream with the same bytes and any list or tuple of the same
    instructions."""

    __slots__ = ("_decoded", "raw")

    def __init__(self, raw: bytes = b"") -> None:
        if len(raw) % INSN_BYTES:
            raise IsaError(f"a stream is a multiple of {INSN_BYTES} bytes, got {len(raw)}")
        self.raw = bytes(raw)
        self._decoded: list[Insn | None] | None = None

    @classmethod
    def from_words(cls, words: Iterable[int]) -> Stream:
        """The stream of these words (`word`), in order."""
        return cls(b"".join([w.to_bytes(INSN_BYTES, "little") for w in words]))

    @classmethod
    def of(cls, insns: Sequence[Insn]) -> Stream:
        """`insns` as a Stream (itself if it is one); IsaError if one does not encode."""
        if isinstance(insns, Stream):
            return insns
        return cls(b"".join([encode(i) for i in insns]))

    def __len__(self) -> int:
        return len(self.raw) // INSN_BYTES

    @overload
    def __getitem__(self, i: int) -> Insn: ...

    @overload
    def __getitem__(self, i: slice) -> Stream: ...

    def __getitem__(self, i: int | slice) -> Insn | Stream:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return Stream(self.raw[start * INSN_BYTES:max(start, stop) * INSN_BYTES])
            return Stream(b"".join(self._image(k) for k in range(start, stop, step)))
        k = range(len(self))[i]
        if self._decoded is None:
            self._decoded = [None] * len(self)
        insn = self._decoded[k]
        if insn is None:
            insn = self._decoded[k] = decode(self._image(k))
        return insn

    def _image(self, k: int) -> bytes:
        return self.raw[k * INSN_BYTES:(k + 1) * INSN_BYTES]

    def __iter__(self) -> Iterator[Insn]:
        for k in range(len(self)):
            yield self[k]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Stream):
            return self.raw == other.raw
        if isinstance(other, list | tuple):
            return (len(other) == len(self) and all(isinstance(x, Insn) for x in other)
                    and self.raw == Stream.of(other).raw)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"Stream({len(self)} instructions)"


def decode(raw: bytes) -> Insn:
    """The instruction in a 16-byte image; IsaError for an opcode that does not exist."""
    if len(raw) != INSN_BYTES:
        raise IsaError(f"an instruction is {INSN_BYTES} bytes, got {len(raw)}")
    word = int.from_bytes(raw, "little")
    code = word & 0xF
    try:
        op = Opcode(code)
    except ValueError:
        raise IsaError(f"illegal opcode {code}") from None
    vals: dict[str, int] = {}
    lsb = 0
    for f in FORMATS[op]:
        v = (word >> lsb) & ((1 << f.width) - 1)
        if f.signed and v & (1 << (f.width - 1)):
            v -= 1 << f.width
        if f.name != "opcode" and v:
            vals[f.name] = v
        lsb += f.width
    return Insn(op, vals)


def encode_program(insns: Sequence[Insn]) -> bytes:
    return Stream.of(insns).raw


def decode_program(raw: bytes) -> list[Insn]:
    if len(raw) % INSN_BYTES:
        raise IsaError(f"a program is a multiple of {INSN_BYTES} bytes, got {len(raw)}")
    return [decode(raw[i:i + INSN_BYTES]) for i in range(0, len(raw), INSN_BYTES)]


# --- assembly text -------------------------------------------------------------------------------
# One instruction per line: MNEMONIC [flags] field=value ..., e.g.
#   LOAD.INP  slot=1 sp_base=0 offset=0x100 y_size=4 x_size=8 y_stride=8 pad_left=1 | push_next
#   GEMM      reset acc_base=0 inp_base=0 wgt_base=3 outer=4 inner=8 acc_so=8 acc_si=1 | pop_prev
#   DW        acc_base=0 inp_base=0 wgt_base=1 outer=4 inner=8 acc_so=8 acc_si=1 inp_so=22
#             inp_si=2 taps=6 tap_w=3 tap_pitch=11
#   ALU.REQ   dst_base=0 src_base=64 outer=1 inner=32 dst_si=1 zp=-3 lo=-128 hi=127
# Flags after '|' are the dependency flags; '#' starts a comment. LOAD/STORE take the buffer and
# ALU the operation as a suffix; for ALU.REQ, zp/lo/hi stand for the immediate.

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def disassemble_one(insn: Insn) -> str:
    op = insn.op
    mnem = op.name
    skip = {"opcode", *_FLAGS}
    if op in (Opcode.LOAD, Opcode.STORE):
        mnem += "." + Buffer(insn.buf).name
        skip.add("buf")
    elif op in (Opcode.ALU, Opcode.XALU):
        try:
            mnem += "." + (AluOp if op == Opcode.ALU else XAluOp)(insn.alu_op).name
            skip.add("alu_op")
        except ValueError:
            pass
    parts = [mnem]
    if op in (Opcode.GEMM, Opcode.DW) and insn.reset:
        parts.append("reset")
        skip.add("reset")
    if (op == Opcode.ALU and insn.use_imm and insn.alu_op != AluOp.REQ) or (
            op == Opcode.XALU and insn.use_imm):
        skip.add("use_imm")
    for f in FORMATS[op]:
        if f.name in skip:
            continue
        v = insn.fields.get(f.name, 0)
        if op == Opcode.ALU and f.name == "imm" and insn.alu_op == AluOp.REQ:
            zp, lo, hi = req_fields(v)
            parts.append(f"zp={zp} lo={lo} hi={hi}")
            continue
        if op in (Opcode.ALU, Opcode.XALU) and f.name == "imm" and not insn.use_imm:
            if v:
                parts.append(f"raw_imm={v}")
            continue
        if v:
            parts.append(f"{f.name}={hex(v) if f.name == 'offset' else v}")
    if ((op == Opcode.ALU and insn.alu_op != AluOp.REQ) or op == Opcode.XALU) \
            and insn.use_imm and not insn.imm:
        parts.append("imm=0")
    flags = [f for f in _FLAGS if insn.fields.get(f)]
    return " ".join(parts) + (" | " + " ".join(flags) if flags else "")


def disassemble(program: bytes | list[Insn]) -> str:
    insns = decode_program(program) if isinstance(program, bytes | bytearray) else program
    return "\n".join(f"{i:5d}: {disassemble_one(x)}" for i, x in enumerate(insns)) + "\n"


_LINE_NO = re.compile(r"^\s*\d+:\s*")


def assemble_one(line: str) -> Insn:
    text = _LINE_NO.sub("", line.split("#", 1)[0]).strip()
    if not text:
        raise IsaError("empty line")
    body, _, flag_text = text.partition("|")
    tokens = body.split()
    mnem, args = tokens[0].upper(), tokens[1:]
    base, _, suffix = mnem.partition(".")
    try:
        op = Opcode[base]
    except KeyError:
        raise IsaError(f"unknown mnemonic {tokens[0]!r}") from None
    vals: dict[str, int] = {}
    if op in (Opcode.LOAD, Opcode.STORE):
        try:
            vals["buf"] = Buffer[suffix]
        except KeyError:
            raise IsaError(f"{base} needs a buffer suffix ({', '.join(b.name for b in Buffer)}),"
                           f" got {suffix!r}") from None
    elif op in (Opcode.ALU, Opcode.XALU):
        ops = AluOp if op == Opcode.ALU else XAluOp
        try:
            vals["alu_op"] = ops[suffix]
        except KeyError:
            raise IsaError(f"{base} needs an operation suffix ({', '.join(a.name for a in ops)}),"
                           f" got {suffix!r}") from None
    elif suffix:
        raise IsaError(f"{base} takes no suffix")
    req: dict[str, int] = {}
    for a in args:
        if a == "reset" and op in (Opcode.GEMM, Opcode.DW):
            vals["reset"] = 1
            continue
        if "=" not in a:
            raise IsaError(f"expected field=value, got {a!r}")
        k, v = a.split("=", 1)
        try:
            num = int(v, 0)
        except ValueError:
            raise IsaError(f"{k}: {v!r} is not a number") from None
        if op == Opcode.ALU and k in ("zp", "lo", "hi"):
            req[k] = num
        elif op in (Opcode.ALU, Opcode.XALU) and k == "imm":
            vals["imm"] = num
            vals["use_imm"] = 1
        elif op in (Opcode.ALU, Opcode.XALU) and k == "raw_imm":
            vals["imm"] = num
        else:
            vals[k] = num
    if req:
        if op != Opcode.ALU or vals.get("alu_op") != AluOp.REQ:
            raise IsaError("zp/lo/hi belong to ALU.REQ")
        vals["imm"] = req_imm(req.get("zp", 0), req.get("lo", -128), req.get("hi", 127))
    for fl in flag_text.split():
        if fl not in _FLAGS:
            raise IsaError(f"unknown flag {fl!r}; flags are {', '.join(_FLAGS)}")
        vals[fl] = 1
    insn = Insn(op, {k: int(v) for k, v in vals.items() if v})
    encode(insn)  # range-check every field now
    return insn


def assemble(text: str) -> list[Insn]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not _LINE_NO.sub("", line.split("#", 1)[0]).strip():
            continue
        try:
            out.append(assemble_one(line))
        except IsaError as e:
            raise IsaError(f"line {n}: {e}: {line.strip()!r}") from None
    return out


# --- convenience constructors used by kernels and tests ------------------------------------------

def load(buf: Buffer, **f: int) -> Insn:
    return Insn(Opcode.LOAD, {"buf": int(buf), **f})


def store(buf: Buffer, **f: int) -> Insn:
    return Insn(Opcode.STORE, {"buf": int(buf), **f})


def gemm(**f: int) -> Insn:
    return Insn(Opcode.GEMM, dict(f))


def dw(**f: int) -> Insn:
    return Insn(Opcode.DW, dict(f))


def alu(op: AluOp, imm: int | None = None, **f: int) -> Insn:
    d = {"alu_op": int(op), **f}
    if imm is not None:
        d["imm"] = imm
        d["use_imm"] = 1
    return Insn(Opcode.ALU, d)


def xalu(op: XAluOp, imm: int | None = None, **f: int) -> Insn:
    d = {"alu_op": int(op), **f}
    if imm is not None:
        d["imm"] = imm
        d["use_imm"] = 1
    return Insn(Opcode.XALU, d)


def req(zp: int = 0, lo: int = -128, hi: int = 127, **f: int) -> Insn:
    return Insn(Opcode.ALU, {"alu_op": int(AluOp.REQ), "imm": req_imm(zp, lo, hi), **f})


def end() -> Insn:
    return Insn(Opcode.END, {})


#: Legal dependency flags per unit: (pop_prev, pop_next, push_prev, push_next). The load unit
#: has only a next (compute), the store unit only a previous (compute).
LEGAL_FLAGS = {u: (*POPS[u], *PUSHES[u]) for u in Unit}


def dw_offsets(taps: int, tap_w: int, tap_pitch: int) -> list[int]:
    """The input row offsets of a DW iteration's taps k = 0..taps-1:
    (k // tap_w) * tap_pitch + k % tap_w."""
    return [(k // tap_w) * tap_pitch + k % tap_w for k in range(taps)] if tap_w else []


def dw_banks_ok(taps: int, tap_w: int, tap_pitch: int, n: int) -> bool:
    """Whether a DW's taps may be read in one cycle from the N INP banks (row r in bank r mod N):
    tap k of an iteration at row r must be in bank (r + k) mod N, so that the banks give the
    taps rotated by r mod N. That holds when the taps lie on one kernel row (taps <= tap_w), or
    when the pitch continues the bank sequence (tap_pitch = tap_w mod N)."""
    return taps <= tap_w or (tap_pitch - tap_w) % n == 0


def check_static(insn: Insn, n: int) -> AccelError:
    """The decode-time check the fetch unit applies before dispatch (NONE if legal), on an
    accelerator with an N x N array."""
    unit = insn.unit
    flags = [f for f in _FLAGS if insn.fields.get(f)]
    if unit is None:  # END
        return AccelError.ILLEGAL_FIELD if flags else AccelError.NONE
    if any(f not in LEGAL_FLAGS[unit] for f in flags):
        return AccelError.ILLEGAL_FIELD
    if insn.op == Opcode.STORE:
        if insn.buf not in (Buffer.ACC, Buffer.ACC8):
            return AccelError.ILLEGAL_FIELD
        if insn.pad_top or insn.pad_bottom or insn.pad_left or insn.pad_right or insn.transpose:
            return AccelError.ILLEGAL_FIELD
    if insn.op == Opcode.LOAD and insn.transpose:
        if insn.buf != Buffer.INP or insn.y_size % n or insn.pad_top or insn.pad_bottom \
                or insn.pad_left or insn.pad_right:
            return AccelError.ILLEGAL_FIELD
    if insn.op == Opcode.ALU:
        if insn.alu_op > max(AluOp) or (insn.alu_op == AluOp.REQ and insn.use_imm):
            return AccelError.ILLEGAL_FIELD
    if insn.op == Opcode.XALU and insn.alu_op > max(XAluOp):
        return AccelError.ILLEGAL_FIELD
    if insn.op == Opcode.DW:
        taps, tap_w = insn.taps, insn.tap_w
        if not 1 <= taps <= n or tap_w == 0 or not dw_banks_ok(taps, tap_w, insn.tap_pitch, n):
            return AccelError.ILLEGAL_FIELD
    return AccelError.NONE


SEMANTICS = """\
## Execution model

The fetch unit reads INSN_COUNT instructions from card memory at INSN_BASE (16-byte aligned),
checks each one (opcode, dependency flags, buffer, ALU operation) when it is next to dispatch,
and appends it to its unit's queue (QUEUE_DEPTH entries; the unit holds one more while it runs
it). It blocks while that queue is full. END stops fetching; the accelerator is done when every
queue is empty and every unit idle. Reaching INSN_COUNT without END is NO_END, reported (with
ERR_PC = INSN_COUNT) once the dispatched instructions have run, as for END.

The three units run in parallel, each in its own program order: LOAD on the load unit, GEMM, DW,
ALU and XALU on the compute unit, STORE on the store unit. Four token counters order them:
load->compute, compute->load, compute->store and store->compute. Before an instruction starts,
its unit takes a token from each queue its pop flags name, waiting until one is there; after it
finishes (for STORE: after every write response), it pushes a token into each queue its push
flags name.
"prev" and "next" are relative to the unit: the load unit has only "next" (compute), the store
unit only "prev" (compute). A program is race-free when every pair of instructions on
different units that touch the same scratchpad rows or memory bytes is ordered by tokens; the
result of a race-free program does not depend on timing, and the RTL and the functional model
agree on it bit for bit.

When every unit waits for a token (or is idle with an empty queue) and the fetch unit has
finished or is blocked on a full queue, nothing can ever move: the accelerator stops with
DEADLOCK. At the first error the accelerator stops starting instructions, lets memory transfers
in flight finish, and then reports the error code and the index of the instruction (ERR_PC); the
scratchpads and card memory are then unspecified for instructions at or after it. DEADLOCK,
TOKEN_OVERFLOW and ABORTED have no culprit instruction: their ERR_PC is the number of
instructions dispatched so far.

Each instruction checks its scratchpad range before it has any effect (SP_RANGE), and LOAD/STORE
check that the address (slot base + offset) is a multiple of the element size (MISALIGNED).

## LOAD and STORE

Address of memory row y, element x: `SLOT[slot] + offset + (y * y_stride + x) * E` (bytes,
modulo 2**32), with E the element size of the buffer (INP: N, WGT: N*N, ACC: 4N, ACC8: N).
LOAD writes the padded tile row-major from `sp_base`: `(pad_top + y_size + pad_bottom)` rows of
`(pad_left + x_size + pad_right)` elements; scratchpad row
`sp_base + (pad_top + y) * W + pad_left + x` gets memory element (y, x), with W the padded
width, and every padding row gets `pad_value` in every byte (INP, WGT) or lane (ACC, ACC8).
ACC8 sign-extends each byte to an int32 lane. STORE (ACC or ACC8 only, no padding) writes
scratchpad row `sp_base + y * x_size + x` to memory element (y, x); ACC8 writes the low byte of
each lane. y_size or x_size 0 reads and writes no card memory; a LOAD still writes its padding
rows and elements (a way to fill scratchpad rows with a constant).

A transposed LOAD (`transpose`; INP only, no padding, y_size a multiple of N) writes each N x N
byte block transposed: memory rows `N*Y .. N*Y + N-1` at element x are the block M[r][c] (row r,
byte c), and scratchpad row `sp_base + (Y * x_size + x) * N + c` gets the bytes M[0..N-1][c]:
byte r of that row is byte c of memory row N*Y + r. So a matrix stored as rows of features
(each N bytes: N tokens) loads as rows of tokens (each N bytes: N features). It writes the same
rows as the plain LOAD of that tile (y_size * x_size from sp_base) at the same cost, one
element per cycle: the element's N bytes go to N consecutive rows, which lie in N different INP
banks (docs/accel.md), at byte r.

## GEMM

    for o in range(outer):
        for i in range(inner):
            a = acc_base + o * acc_so + i * acc_si
            x = INP[inp_base + o * inp_so + i * inp_si]          # N int8
            W = WGT[wgt_base]                                      # N x N int8, W[k][n]
            ACC[a][n] = (0 if reset else ACC[a][n]) + sum_k x[k] * W[k][n]   (int32, wraps)

Iterations take effect in order: a later iteration sees the rows an earlier one wrote.

## DW (depthwise)

    off[k] = (k // tap_w) * tap_pitch + k % tap_w                 # k = 0 .. taps-1
    for o in range(outer):
        for i in range(inner):
            a = acc_base + o * acc_so + i * acc_si
            r = inp_base + o * inp_so + i * inp_si
            W = WGT[wgt_base]                                      # N x N int8, W[k][n]
            ACC[a][n] = (0 if reset else ACC[a][n])
                        + sum_{k < taps} INP[r + off[k]][n] * W[k][n]          (int32, wraps)

Each lane n is its own channel: a depthwise convolution's taps (tap_w per kernel row, kernel rows
tap_pitch input rows apart) are the reduction, so one iteration does taps x N MACs, where a GEMM
with a diagonal tile does N. Rows k >= taps of the tile are not used. The INP scratchpad is N
banks (row mod N) and an iteration reads its taps' rows from them in one cycle, tap k from bank
(r + k) mod N (the banks' outputs rotated by r): that holds when the taps lie on one kernel row
(taps <= tap_w) or tap_pitch = tap_w (mod N). Otherwise, or with taps 0 or above N or tap_w 0,
the instruction is ILLEGAL_FIELD. SP_RANGE covers every row read:
r + off[taps-1] of the last iteration. Iterations take effect in order, as for GEMM. A DW
iteration costs one cycle, like a GEMM iteration; ACC_MACS counts taps x N per iteration.

## ALU

    for o in range(outer):
        for i in range(inner):
            d = dst_base + o * dst_so + i * dst_si
            s = src_base + o * src_so + i * src_si
            A = ACC[d]; B = imm (sign-extended, every lane) if use_imm else ACC[s]
            ACC[d] = op(A, B)                                      # lane by lane, int32

REQ reads the multiplier M from row s and the shift from row s+1 (low 6 bits of each lane),
computes the product A * M, adds 2**(shift-1) when shift > 0, shifts right arithmetically (all
exact: A = M = -2**31 with shift 63 needs a 65-bit sum), adds zp, and clamps with
min(max(y, lo), hi): the requantization of
compiler/quantize/requant.py, per lane, so per-channel parameters are rows of M and shifts.
Iterations take effect in order, as for GEMM.

## XALU

The ALU's loops and operands (A = ACC[d], B = ACC[s] or the immediate), with operations that
take several cycles per row: each iteration occupies the compute unit for XALU_CYCLES cycles
(DIV 32, SQRT 16: a radix-2 divider and a digit-by-digit square root per lane, one result bit
per cycle), and the next iteration or instruction starts after them.

    DIV:  ACC[d] = A / B, truncated toward zero, per lane (int32; -2**31 / -1 = -2**31)
    SQRT: ACC[d] = floor(sqrt(B)), per lane (A is not read)

A lane with B = 0 (DIV) or B < 0 (SQRT) stops the accelerator with DIV_ZERO or NEG_SQRT and
the instruction's index in ERR_PC (the scratchpads are then unspecified, as after any error).
These are the primitives integer-only inference (after I-BERT) needs besides the ALU's
ADD/MUL/SHR/MAX/MIN: a reciprocal for Softmax's normalization and LayerNorm's 1/std, and the
square root of LayerNorm's variance.
"""

"""The accelerator ISA spec (pyhost/spec/isa.py): encoder/decoder, assembler/disassembler,
static checks, and the field positions the generated Verilog include gives the RTL."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.spec import gen, isa
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn, IsaError, Opcode, XAluOp


@st.composite
def insns(draw: st.DrawFn) -> Insn:
    """Any encodable instruction: every field drawn over its whole range."""
    op = draw(st.sampled_from(list(Opcode)))
    vals = {}
    for f in isa.FORMATS[op]:
        if f.name == "opcode":
            continue
        lo, hi = ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed
                  else (0, (1 << f.width) - 1))
        v = draw(st.integers(lo, hi))
        if v:
            vals[f.name] = v
    return Insn(op, vals)


@settings(max_examples=400, deadline=None)
@given(insns())
def test_encode_decode_and_text_round_trip(insn: Insn) -> None:
    """decode(encode(i)) == i, and assembling the disassembly gives the same 16 bytes."""
    raw = isa.encode(insn)
    assert len(raw) == isa.INSN_BYTES
    assert isa.decode(raw) == insn
    if (insn.op == Opcode.ALU and insn.alu_op > max(AluOp)) or (
            insn.op == Opcode.XALU and insn.alu_op > max(XAluOp)):
        return  # an ALU op with no name has no assembly form (the card rejects it)
    text = isa.disassemble_one(insn)
    assert isa.encode(isa.assemble_one(text)) == raw, text


def test_program_listing_round_trip() -> None:
    """A hand-written program assembles, disassembles with line numbers, and reassembles."""
    src = """
    # load a padded input tile and a weight tile, multiply, requantize, store
    LOAD.INP  slot=2 sp_base=0 offset=0x100 y_size=4 x_size=8 y_stride=8 pad_left=1 pad_value=-3
    LOAD.WGT  slot=0 sp_base=5 y_size=1 x_size=1 | push_next
    GEMM reset acc_base=0 inp_base=0 wgt_base=5 outer=4 inner=8 acc_so=8 acc_si=1 inp_so=10 \
inp_si=1 | pop_prev push_next
    ALU.ADD dst_base=0 imm=-5 outer=1 inner=32 dst_si=1
    ALU.REQ dst_base=0 src_base=64 outer=1 inner=32 dst_si=1 zp=-3 lo=-3 hi=127
    DW reset acc_base=32 inp_base=0 wgt_base=6 outer=2 inner=4 acc_so=4 acc_si=1 inp_so=22 \
inp_si=2 taps=6 tap_w=3 tap_pitch=11
    STORE.ACC8 slot=3 y_size=4 x_size=8 y_stride=8 | pop_prev
    END
    """.replace("\\\n", "")
    prog = isa.assemble(src)
    assert [i.op for i in prog] == [Opcode.LOAD, Opcode.LOAD, Opcode.GEMM, Opcode.ALU, Opcode.ALU,
                                    Opcode.DW, Opcode.STORE, Opcode.END]
    assert (prog[5].reset, prog[5].taps, prog[5].tap_w, prog[5].tap_pitch) == (1, 6, 3, 11)
    assert prog[4].imm == isa.req_imm(-3, -3, 127)
    assert isa.req_fields(prog[4].imm) == (-3, -3, 127)
    listing = isa.disassemble(prog)
    assert isa.assemble(listing) == prog
    assert isa.decode_program(isa.encode_program(prog)) == prog
    assert all(isa.check_static(i, 8) == AccelError.NONE for i in prog)


@pytest.mark.parametrize("text, message", [
    ("FOO x=1", "unknown mnemonic"),
    ("LOAD y_size=1", "buffer suffix"),
    ("ALU.NOP outer=1", "operation suffix"),
    ("GEMM outer=4096", "does not fit"),
    ("LOAD.INP pad_value=200", "does not fit"),
    ("GEMM outer=x", "not a number"),
    ("GEMM nothing=1", "no field"),
    ("GEMM outer=1 | pop_sideways", "unknown flag"),
    ("ALU.ADD zp=1", "belong to ALU.REQ"),
    ("END.X", "takes no suffix"),
])
def test_assembler_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(IsaError, match=message):
        isa.assemble(text)


def test_decode_rejects_illegal_opcodes_and_sizes() -> None:
    for op in (0, 8, 15):
        with pytest.raises(IsaError, match=f"illegal opcode {op}"):
            isa.decode(bytes([op]) + bytes(15))
    with pytest.raises(IsaError, match="16 bytes"):
        isa.decode(bytes(15))


def test_static_checks_match_the_isa_text() -> None:
    """check_static flags what the fetch unit rejects (docs/isa.md ILLEGAL_FIELD)."""
    ok = AccelError.NONE
    bad = AccelError.ILLEGAL_FIELD
    def check(i: Insn, n: int = 8) -> AccelError:
        return isa.check_static(i, n)

    assert check(isa.load(Buffer.INP, push_next=1, pop_next=1)) == ok
    assert check(isa.load(Buffer.INP, pop_prev=1)) == bad
    assert check(isa.store(Buffer.ACC, push_prev=1)) == ok
    assert check(isa.store(Buffer.ACC, push_next=1)) == bad
    assert check(isa.store(Buffer.WGT)) == bad
    assert check(isa.store(Buffer.ACC8, pad_left=1)) == bad
    assert check(Insn(Opcode.ALU, {"alu_op": 7})) == bad
    assert check(isa.xalu(XAluOp.SQRT, src_base=1, outer=1, inner=1)) == ok
    for op in range(len(XAluOp), 8):
        assert check(Insn(Opcode.XALU, {"alu_op": op})) == bad
    assert check(Insn(Opcode.ALU, {"alu_op": int(AluOp.REQ), "use_imm": 1})) == bad
    assert check(Insn(Opcode.END, {"push_prev": 1})) == bad
    assert check(isa.gemm(pop_prev=1, pop_next=1, push_prev=1, push_next=1)) == ok
    # DW: taps 1..N, tap_w >= 1, the taps' rows in distinct banks (row mod N)
    dw = dict(pop_prev=1, pop_next=1, push_prev=1, push_next=1)
    assert check(isa.dw(taps=8, tap_w=3, tap_pitch=11, **dw)) == ok        # 11 = 3 mod 8
    assert check(isa.dw(taps=8, tap_w=3, tap_pitch=19)) == ok
    # rows in distinct banks (0, 1, 2, 4), but tap 3 not in bank r + 3: the banks' outputs are
    # no longer a rotation, so the ISA's rule refuses it
    assert check(isa.dw(taps=4, tap_w=3, tap_pitch=12)) == bad
    assert check(isa.dw(taps=3, tap_w=3, tap_pitch=12)) == ok              # one kernel row
    assert check(isa.dw(taps=9, tap_w=3, tap_pitch=11)) == bad             # above N
    assert check(isa.dw(taps=9, tap_w=3, tap_pitch=19), 16) == ok          # 19 = 3 mod 16
    assert check(isa.dw(taps=9, tap_w=3, tap_pitch=11), 16) == bad
    assert check(isa.dw(taps=0, tap_w=3, tap_pitch=11)) == bad
    assert check(isa.dw(taps=1, tap_w=0)) == bad
    assert check(isa.dw(taps=1, tap_w=1)) == ok
    assert check(isa.dw(taps=4, tap_w=1, tap_pitch=1), 4) == ok           # one column of taps
    assert check(isa.dw(taps=4, tap_w=1, tap_pitch=5), 4) == ok           # 5 = 1 mod 4
    assert check(isa.dw(taps=4, tap_w=1, tap_pitch=6), 4) == bad


def test_dw_offsets_and_banks() -> None:
    """dw_offsets is the row formula of docs/isa.md; whenever dw_banks_ok holds, tap k of an
    iteration starting at any row r is in bank (r + k) mod N: the banks' outputs are the taps
    rotated by r, and no two taps share a bank."""
    assert isa.dw_offsets(8, 3, 11) == [0, 1, 2, 11, 12, 13, 22, 23]
    assert isa.dw_offsets(3, 5, 100) == [0, 1, 2]
    for n in (4, 8, 16):
        for taps in range(1, n + 1):
            for tap_w in range(1, 16):
                for pitch in range(0, 3 * n + 20):
                    if isa.dw_banks_ok(taps, tap_w, pitch, n):
                        offs = isa.dw_offsets(taps, tap_w, pitch)
                        for r in range(n):
                            assert [(r + o) % n for o in offs] == \
                                [(r + k) % n for k in range(taps)], (n, taps, tap_w, pitch)


def test_generated_include_has_every_field_position() -> None:
    """accel_isa.vh (what the RTL decodes with) places every field where encode() puts it."""
    vh = gen.accel_isa()
    defs = dict(re.findall(r"`define (\w+) (\S+)", vh))
    names = {Opcode.LOAD: "MEM", Opcode.GEMM: "GEMM", Opcode.ALU: "ALU", Opcode.DW: "DW",
             Opcode.END: "HDR"}
    for op, fmt in names.items():
        for f in isa.FORMATS[op]:
            if fmt != "HDR" and f in isa.HEADER:
                continue
            key = f"F_{fmt}_{f.name.upper()}"
            assert int(defs[f"{key}_LSB"]) == isa.field_lsb(op, f.name), key
            assert int(defs[f"{key}_W"]) == f.width, key
            # and a lone 1 in that field encodes at that bit
            if f.name != "opcode":
                raw = int.from_bytes(isa.encode(Insn(op, {f.name: 1})), "little")
                assert raw >> int(defs[f"{key}_LSB"]) & 1 == 1, key
    for o in Opcode:
        assert defs[f"OP_{o.name}"] == f"4'd{int(o)}"


def test_transposed_load_check() -> None:
    """A transposed LOAD: INP only, no padding, y_size a multiple of N; never a STORE."""
    def check(**f: int) -> AccelError:
        buf = f.pop("buf", Buffer.INP)
        return isa.check_static(isa.load(buf, transpose=1, x_size=2, **f), 8)

    assert check(y_size=16) == AccelError.NONE
    assert check(y_size=0) == AccelError.NONE
    assert check(y_size=12) == AccelError.ILLEGAL_FIELD
    assert check(y_size=8, pad_top=1) == AccelError.ILLEGAL_FIELD
    assert check(y_size=8, pad_right=1) == AccelError.ILLEGAL_FIELD
    for buf in (Buffer.WGT, Buffer.ACC, Buffer.ACC8):
        assert check(y_size=8, buf=buf) == AccelError.ILLEGAL_FIELD
    assert isa.check_static(isa.load(Buffer.INP, transpose=1, y_size=12), 4) == AccelError.NONE
    assert isa.check_static(isa.store(Buffer.ACC, transpose=1), 8) == AccelError.ILLEGAL_FIELD


@settings(max_examples=300, deadline=None)
@given(insns())
def test_word_is_the_encoding(insn: Insn) -> None:
    """isa.word builds the same 128 bits as encode, and a Stream of words decodes to the
    instructions."""
    w = isa.word(insn.op, **insn.fields)
    assert w.to_bytes(isa.INSN_BYTES, "little") == isa.encode(insn)
    s = isa.Stream.from_words([w, w])
    assert list(s) == [insn, insn] and s.raw == isa.encode(insn) * 2


def test_word_checks_fields_and_flag_bits() -> None:
    with pytest.raises(IsaError, match="no field 'nope'"):
        isa.word(Opcode.GEMM, nope=1)
    with pytest.raises(IsaError, match="does not fit"):
        isa.word(Opcode.GEMM, outer=1 << 20)
    for name, bit in isa.FLAG_BITS.items():
        assert isa.word(Opcode.GEMM, **{name: 1}) == int(Opcode.GEMM) | bit
    # adding to a word steps one field
    w = isa.word(Opcode.GEMM, acc_base=3, inner=2)
    assert isa.Stream.from_words([w + (4 << isa.field_lsb(Opcode.GEMM, "acc_base"))])[0] \
        == isa.gemm(acc_base=7, inner=2)


def test_stream_is_a_sequence_of_insns() -> None:
    prog = [isa.load(Buffer.INP, y_size=1, x_size=2), isa.gemm(outer=1, inner=2), isa.end()]
    s = isa.Stream.of(prog)
    assert isa.Stream.of(s) is s
    assert len(s) == 3 and s[1] == prog[1] and s[-1] == isa.end()
    assert s == prog and s == tuple(prog) and s == isa.Stream(s.raw) and s != prog[:2]
    assert s[1:] == prog[1:] and s[::2] == prog[::2] and isa.Stream() == []
    assert isa.encode_program(s) == isa.encode_program(prog) == s.raw
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(IsaError, match="multiple of 16"):
        isa.Stream(b"\0" * 17)

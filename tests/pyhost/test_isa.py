"""The accelerator ISA spec (pyhost/spec/isa.py): encoder/decoder, assembler/disassembler,
static checks, and the field positions the generated Verilog include gives the RTL."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.spec import gen, isa
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn, IsaError, Opcode


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
    if insn.op == Opcode.ALU and insn.alu_op > max(AluOp):
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
    STORE.ACC8 slot=3 y_size=4 x_size=8 y_stride=8 | pop_prev
    END
    """.replace("\\\n", "")
    prog = isa.assemble(src)
    assert [i.op for i in prog] == [Opcode.LOAD, Opcode.LOAD, Opcode.GEMM, Opcode.ALU, Opcode.ALU,
                                    Opcode.STORE, Opcode.END]
    assert prog[4].imm == isa.req_imm(-3, -3, 127)
    assert isa.req_fields(prog[4].imm) == (-3, -3, 127)
    listing = isa.disassemble(prog)
    assert isa.assemble(listing) == prog
    assert isa.decode_program(isa.encode_program(prog)) == prog
    assert all(isa.check_static(i) == AccelError.NONE for i in prog)


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
    for op in (0, 6, 15):
        with pytest.raises(IsaError, match=f"illegal opcode {op}"):
            isa.decode(bytes([op]) + bytes(15))
    with pytest.raises(IsaError, match="16 bytes"):
        isa.decode(bytes(15))


def test_static_checks_match_the_isa_text() -> None:
    """check_static flags what the fetch unit rejects (docs/isa.md ILLEGAL_FIELD)."""
    ok = AccelError.NONE
    bad = AccelError.ILLEGAL_FIELD
    assert isa.check_static(isa.load(Buffer.INP, push_next=1, pop_next=1)) == ok
    assert isa.check_static(isa.load(Buffer.INP, pop_prev=1)) == bad
    assert isa.check_static(isa.store(Buffer.ACC, push_prev=1)) == ok
    assert isa.check_static(isa.store(Buffer.ACC, push_next=1)) == bad
    assert isa.check_static(isa.store(Buffer.WGT)) == bad
    assert isa.check_static(isa.store(Buffer.ACC8, pad_left=1)) == bad
    assert isa.check_static(Insn(Opcode.ALU, {"alu_op": 7})) == bad
    assert isa.check_static(Insn(Opcode.ALU, {"alu_op": int(AluOp.REQ), "use_imm": 1})) == bad
    assert isa.check_static(Insn(Opcode.END, {"push_prev": 1})) == bad
    assert isa.check_static(isa.gemm(pop_prev=1, pop_next=1, push_prev=1, push_next=1)) == ok


def test_generated_include_has_every_field_position() -> None:
    """accel_isa.vh (what the RTL decodes with) places every field where encode() puts it."""
    vh = gen.accel_isa()
    defs = dict(re.findall(r"`define (\w+) (\S+)", vh))
    names = {Opcode.LOAD: "MEM", Opcode.GEMM: "GEMM", Opcode.ALU: "ALU", Opcode.END: "HDR"}
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

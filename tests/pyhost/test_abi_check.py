"""abi.check_program's vectorized path against checking every instruction one by one.

The numpy rules (`abi._cleared`) only decide which instructions need not be decoded one by one;
they must never clear one that the one-by-one rules reject. So on every program, valid or not,
the vectorized check must raise exactly what the one-by-one check raises (the same first
offending instruction, the same message), or pass where it passes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.accel import abi
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tb.accel import randprog

CFG = AccelConfig()
SMALL = AccelConfig(n=8, inp_depth=64, wgt_depth=8, acc_depth=32, queue_depth=4)
MIB = 1 << 20


def _outcome(program: bytes, cfg: AccelConfig, slots: int, vectorized: bool) -> str:
    try:
        abi.check_program("p", program, cfg, slots, vectorized=vectorized)
    except abi.AbiError as e:
        return str(e)
    return "ok"


def _same(program: bytes, cfg: AccelConfig, slots: int) -> str:
    fast = _outcome(program, cfg, slots, True)
    slow = _outcome(program, cfg, slots, False)
    assert fast == slow, f"vectorized: {fast}\none by one: {slow}"
    return fast


def _raw(rp: randprog.RandomProgram) -> bytes:
    return b"".join(i if isinstance(i, bytes) else isa.encode(i) for i in rp.program)


def test_random_programs_and_every_error_kind() -> None:
    """Valid random programs pass both ways; programs with each kind of bad instruction give
    the same error both ways, on the default and on a small configuration and slot count."""
    rng = random.Random(29)
    outcomes = set()
    for _ in range(20):
        for rp in [randprog.generate(rng, CFG, mem_size=4 * MIB),
                   *(randprog.generate_error(rng, CFG, k, 4 * MIB)
                     for k in randprog.ERROR_KINDS)]:
            raw = _raw(rp)
            for cfg, slots in ((CFG, isa.NUM_SLOTS), (SMALL, isa.NUM_SLOTS), (CFG, 2)):
                outcomes.add(_same(raw, cfg, slots).split(":")[-1][:20])
    # the programs exercise passing and several kinds of refusal
    assert "ok" in outcomes and len(outcomes) > 5, outcomes


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 127), st.sampled_from(["flip", "word"])),
    min_size=1, max_size=4), slots=st.integers(1, isa.NUM_SLOTS), small=st.booleans())
def test_mutated_programs(seed: int, edits: list[tuple[int, int, str]], slots: int,
                          small: bool) -> None:
    """Valid programs with bits flipped or whole instructions replaced by random words (any
    opcode, any field, END anywhere): the same outcome both ways."""
    rng = random.Random(seed)
    raw = bytearray(_raw(randprog.generate(rng, CFG, mem_size=4 * MIB)))
    k = len(raw) // isa.INSN_BYTES
    for where, bit, kind in edits:
        pc = where % k
        if kind == "flip":
            raw[pc * 16 + bit // 8] ^= 1 << (bit % 8)
        else:
            raw[pc * 16:(pc + 1) * 16] = rng.getrandbits(128).to_bytes(16, "little")
    _same(bytes(raw), SMALL if small else CFG, slots)


@pytest.mark.parametrize("kind", ["no END", "two ENDs", "END first", "one word"])
def test_end_placement(kind: str) -> None:
    """Only the last instruction is END, however the program is cut."""
    rng = random.Random(3)
    raw = _raw(randprog.generate(rng, CFG, mem_size=4 * MIB))
    end = isa.encode(isa.Insn(isa.Opcode.END, {}))
    prog = {"no END": raw[:-16], "two ENDs": raw + end, "END first": end + raw,
            "one word": end}[kind]
    got = _same(prog, CFG, isa.NUM_SLOTS)
    assert (got == "ok") == (kind == "one word"), got

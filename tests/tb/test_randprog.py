"""The random program generator: its programs are race-free (the model gives the same result under
any schedule), error-free, inside their footprint, and cover the ISA; its error programs fail
with the promised error at the promised pc under any schedule."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pyhost.accel.model import AccelModel, AccelResult
from pyhost.driver import PcieDriver
from pyhost.model_card import ModelCard
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn, Opcode
from tb.accel import races, randprog
from tb.accel.randprog import RandomProgram

MiB = 1 << 20
CONFIGS = {
    "default": AccelConfig(),
    "small": AccelConfig(n=4, inp_depth=64, wgt_depth=16, acc_depth=64, queue_depth=2),
    "n16-q1": AccelConfig(n=16, inp_depth=256, wgt_depth=8, acc_depth=128, queue_depth=1),
}
SCHEDULES = (None, 11, 22, 33)


def run(rp: RandomProgram, cfg: AccelConfig, mem_size: int, seed: int | None
        ) -> tuple[AccelResult, bytearray, AccelModel]:
    m = AccelModel(cfg)
    mem = rp.memory(mem_size)
    r = m.run_array(np.frombuffer(mem, np.uint8), rp.insn_base, rp.insn_count, rp.slots,
                    schedule_seed=seed)
    return r, mem, m


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
@pytest.mark.parametrize("mem_size", [64 << 10, 3 * MiB])
def test_programs_are_race_free_and_error_free(cfg_name: str, mem_size: int) -> None:
    """For many seeds: no error, and identical card memory, scratchpads and counters under the
    round-robin schedule and several random ones; stores stay inside `regions`, everything
    inside the footprint (below min(mem_size, 1 MiB))."""
    cfg = CONFIGS[cfg_name]
    for seed in range(12):
        rp = randprog.generate(random.Random(seed), cfg, mem_size=mem_size)
        lo, hi = rp.footprint
        assert 0 <= lo < hi <= min(mem_size, MiB), rp.footprint
        assert rp.program[-1] == isa.end() and isa.Opcode.END not in \
            [i.op for i in rp.program[:-1]]
        outs = []
        for sched in SCHEDULES:
            r, mem, m = run(rp, cfg, mem_size, sched)
            assert r.error == AccelError.NONE, (seed, sched, r.error.name, r.err_pc)
            outs.append((bytes(mem), m.inp.tobytes(), m.wgt.tobytes(), m.acc.tobytes(),
                         r.counters))
        for o, sched in zip(outs[1:], SCHEDULES[1:], strict=True):
            assert o == outs[0], f"seed {seed}: schedule {sched} changes the result"
        # outside the store regions memory is what init and the program put there
        before = np.frombuffer(rp.memory(mem_size), np.uint8)
        after = np.frombuffer(outs[0][0], np.uint8)
        changed = np.flatnonzero(before != after)
        inside = np.zeros(mem_size, bool)
        for a, n in rp.regions:
            assert lo <= a and a + n <= hi
            inside[a:a + n] = True
        assert inside[changed].all(), f"seed {seed}: a store wrote outside its regions"
        assert changed.size, f"seed {seed}: the program stored nothing that changed memory"
        for insn in rp.program:
            if insn.op in (Opcode.LOAD, Opcode.STORE):
                e = isa.element_bytes(Buffer(insn.buf), cfg.n)
                for a, b in randprog._mem_ranges(insn.fields, e, rp.slots):
                    assert lo <= a and b <= hi, f"seed {seed}: {insn} leaves the footprint"


def test_coverage_across_seeds() -> None:
    """Over a few seeds the programs use every opcode, buffer, ALU op with and without the
    immediate, REQ with realistic and extreme parameters, strides, padding, repeated rows in one
    instruction, wrapping slot addresses, 64-byte-unaligned addresses, rows across 4 KiB, the
    last scratchpad rows, and read back earlier outputs."""
    cfg = CONFIGS["default"]
    seen: set[str] = set()
    for seed in range(25):
        seen |= randprog.coverage(randprog.generate(random.Random(seed), cfg, mem_size=MiB),
                                  cfg)
    want = {f"op:{op.name}" for op in Opcode} \
        | {f"LOAD.{b.name}" for b in Buffer} | {"STORE.ACC", "STORE.ACC8"} \
        | {f"ALU.{op.name}" for op in AluOp} \
        | {f"ALU.{op.name}.imm" for op in AluOp if op != AluOp.REQ} \
        | {"REQ parameters: realistic", "REQ parameters: extreme", "REQ lo > hi",
           "GEMM acc_si = 0 (accumulate into one row)", "GEMM reset", "GEMM input strides",
           "DW taps over kernel rows", "DW all N taps", "DW acc_si = 0 (accumulate into one row)",
           "ALU source overlaps destination", "ALU dst_si = 0 (repeated destination)",
           "y_stride > x_size", "y_stride < x_size", "zero size", "pad_value != 0",
           "padding LOAD.INP", "padding LOAD.WGT", "padding LOAD.ACC", "padding LOAD.ACC8",
           "address wraps 2**32", "element-aligned, not 64-byte aligned", "row crosses 4 KiB",
           "several slots", "last row of INP", "last row of WGT", "last row of ACC",
           "a LOAD reads back an earlier tile's STORE output",
           "pop:LOAD", "pop:COMPUTE", "pop:STORE"}
    assert want <= seen, f"never covered: {sorted(want - seen)}"


def test_units_overlap() -> None:
    """Loads of the next tile run while the compute works and stores trail: the model's cycle
    estimate is well below the sum of the units' busy times, and in program order loads of tile
    t+1 come before the compute of tile t ends."""
    cfg = CONFIGS["default"]
    for seed in range(8):
        rp = randprog.generate(random.Random(seed), cfg, mem_size=MiB)
        r, _, _ = run(rp, cfg, MiB, None)
        c = r.counters
        busy = c["load_busy"] + c["compute_busy"] + c["store_busy"]
        assert c["cycles"] < 0.9 * busy, (seed, c)


def test_generation_is_deterministic() -> None:
    """The same seed gives the same program, memory image and slots."""
    cfg = CONFIGS["small"]
    a = randprog.generate(random.Random(7), cfg, mem_size=MiB)
    b = randprog.generate(random.Random(7), cfg, mem_size=MiB)
    assert a.image() == b.image() and a.slots == b.slots and a.init == b.init
    c = randprog.generate(random.Random(8), cfg, mem_size=MiB)
    assert c.image() != a.image()


def test_too_small() -> None:
    """Card memory or scratchpads too small for the generator: a clear ValueError."""
    with pytest.raises(ValueError, match="at least"):
        randprog.generate(random.Random(0), AccelConfig(), mem_size=32 << 10)
    with pytest.raises(ValueError, match="too small"):
        randprog.generate(random.Random(0), AccelConfig(acc_depth=8), mem_size=MiB)


def test_static_race_check_finds_races() -> None:
    """check_races accepts the generated programs and rejects them once a token is missing:
    dropping the pops of one unit creates unordered conflicting pairs (and the random schedules
    then disagree)."""
    cfg = CONFIGS["default"]
    rp = randprog.generate(random.Random(4), cfg, mem_size=MiB)
    # a program of some size: 91..129 conflicting pairs checked on seeds 4..9
    assert races.check_races(rp.program, cfg.n, rp.slots) > 50
    for flag in ("pop_prev", "pop_next"):
        broken = [Insn(i.op, {k: v for k, v in i.fields.items() if k != flag})
                  if i.op in (Opcode.GEMM, Opcode.DW, Opcode.ALU) else i for i in rp.program]
        with pytest.raises(races.ProgramCheckError, match="race"):
            races.check_races(broken, cfg.n, rp.slots)
    broken = [Insn(i.op, {k: v for k, v in i.fields.items() if k != "pop_prev"})
              if i.op in (Opcode.GEMM, Opcode.DW, Opcode.ALU) else i for i in rp.program]
    rp_broken = RandomProgram(broken, rp.slots, rp.init, rp.regions, rp.insn_base,
                              rp.footprint)
    results = set()
    for sched in range(12):
        r, mem, m = run(rp_broken, cfg, MiB, sched)
        results.add((bytes(mem), m.acc.tobytes()))
    assert len(results) > 1, "a racy program gave one result under 12 schedules"
    with pytest.raises(races.ProgramCheckError, match="no earlier push"):
        races.check_token_order([isa.gemm(pop_prev=1), isa.load(Buffer.INP, push_next=1)])


@pytest.mark.parametrize("kind", randprog.ERROR_KINDS, ids=lambda k: k.name)
@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_error_programs(kind: AccelError, cfg_name: str) -> None:
    """generate_error: the promised error at the promised pc under every schedule, for seeds."""
    cfg = CONFIGS[cfg_name]
    mem_size = 2 * MiB
    pcs = set()
    for seed in range(6):
        rp = randprog.generate_error(random.Random(seed), cfg, kind, mem_size)
        assert rp.expect_error == kind
        for sched in SCHEDULES:
            r, _, _ = run(rp, cfg, mem_size, sched)
            assert (r.error, r.err_pc) == (kind, rp.expect_pc), \
                (seed, sched, r.error.name, r.err_pc, rp.expect_pc)
        pcs.add(rp.expect_pc)
        if kind == AccelError.NO_END:
            assert all(isinstance(i, bytes) or i.op != Opcode.END for i in rp.program)
        else:
            assert rp.program[-1] == isa.end()
    assert len(pcs) > 1, "the error is always at the same pc"


def test_error_kinds_are_checked() -> None:
    """Kinds the generator cannot make unambiguous are refused."""
    for kind in (AccelError.TOKEN_OVERFLOW, AccelError.FETCH_BUS, AccelError.NONE):
        with pytest.raises(ValueError, match="generate_error makes"):
            randprog.generate_error(random.Random(0), AccelConfig(), kind, MiB)


def test_through_the_driver_on_model_card() -> None:
    """A random program through PcieDriver on ModelCard (init and program by DMA, slots bound,
    START, interrupt) leaves card memory and scratchpads exactly as the model run directly."""
    cfg = CONFIGS["default"]
    rp = randprog.generate(random.Random(5), cfg, mem_size=2 * MiB)
    # the model's own timing rules (perf_model=False), so every counter compares exactly
    card = ModelCard(2 * MiB, host_size=4 * MiB, accel=cfg, perf_model=False)
    with PcieDriver(card) as drv:
        for addr, data in rp.init:
            buf = drv.host.alloc(len(data))
            buf.write(data)
            drv.write_data(buf, len(data), addr)
            drv.host.free(buf)
        prog = drv.accel_load_program(rp.program, rp.insn_base)
        res = drv.accel_run(prog, dict(enumerate(rp.slots)))
    r, mem, m = run(rp, cfg, 2 * MiB, None)
    assert res.counters == r.counters
    assert bytes(card.card_memory) == bytes(mem)
    assert np.array_equal(card.accel.acc, m.acc) and np.array_equal(card.accel.inp, m.inp)

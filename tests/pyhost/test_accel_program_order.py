"""The model's program-order path (pyhost/accel/program_order.py) against its round-robin
scheduler (`AccelModel.fast = False`): the same error, ERR_PC, counters, card memory and
scratchpads on random programs of every kind (race-free and racy, with errors anywhere, tokens
that are and are not in program order, addresses that wrap, STOREs onto the program), through
run_array, run (callbacks) and execute; and its vectorized decoder against isa.decode."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pyhost.accel.model import AccelModel
from pyhost.accel.program_order import decode_fields
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Insn, Opcode
from tb.accel import randprog

CONFIGS = [AccelConfig(n=4, inp_depth=64, wgt_depth=16, acc_depth=64, queue_depth=2),
           AccelConfig(n=8, inp_depth=128, wgt_depth=16, acc_depth=128, queue_depth=1),
           AccelConfig()]


def _model(cfg: AccelConfig, seed: int, fast: bool, batch: bool = True) -> AccelModel:
    rng = np.random.default_rng(seed)
    m = AccelModel(cfg)
    m.fast = fast
    m.batch_gemms = batch
    m.inp[:] = rng.integers(-128, 128, m.inp.shape)
    m.wgt[:] = rng.integers(-128, 128, m.wgt.shape)
    m.acc[:] = rng.integers(-(1 << 31), 1 << 31, m.acc.shape)
    return m


def _state(m: AccelModel, r, mem) -> tuple:
    return (r.error, r.err_pc, r.counters, bytes(mem), m.inp.tobytes(), m.wgt.tobytes(),
            m.acc.tobytes())


def _both(cfg: AccelConfig, seed: int, go, batch: bool = True) -> None:
    """`go(model)` -> (result, memory) on the fast path and the scheduler: equal."""
    out = []
    for fast in (True, False):
        m = _model(cfg, seed, fast, batch)
        r, mem = go(m)
        out.append(_state(m, r, mem))
    assert out[0][:3] == out[1][:3], (out[0][:3], out[1][:3])
    assert out[0] == out[1], "memory or scratchpads differ"


def _random_insn(rng: random.Random, cfg: AccelConfig, mem_size: int, wild_p: float
                 ) -> Insn | bytes:
    """Anything: mostly legal and in range, with probability about `wild_p` not (fields,
    flags, rows, addresses)."""
    n = cfg.n
    k = rng.random() if wild_p else 0.04 + 0.96 * rng.random()
    wild = rng.random() < wild_p

    def flag() -> int:
        return int(rng.random() < (0.3 if wild else 0.12))

    flags = {f: flag() for f in ("pop_prev", "pop_next", "push_prev", "push_next")}
    if k < 0.02:
        return rng.getrandbits(128).to_bytes(16, "little")
    if k < 0.04:
        return isa.end() if rng.random() < 0.7 else Insn(Opcode.END, {"pop_prev": 1})
    if k < 0.45:
        loop = {"acc_base": rng.choice((0, 8, 16, cfg.acc_depth - 20)),
                "outer": rng.choice((0, 1, 2, 3)), "inner": rng.choice((1, 4, 5)),
                "acc_so": rng.choice((0, 4, 5, 20)), "acc_si": rng.choice((0, 1, 1, 1))}
        if wild:
            loop["acc_base"] = rng.randrange(cfg.acc_depth + 8)
        f = {**loop, "reset": int(rng.random() < 0.2),
             "inp_base": rng.randrange(cfg.inp_depth - 30 if not wild else cfg.inp_depth + 4),
             "wgt_base": rng.randrange(cfg.wgt_depth + (2 if wild else 0)),
             "inp_so": rng.randrange(0, 6), "inp_si": rng.randrange(0, 3)}
        if rng.random() < 0.1:
            taps = rng.randrange(0 if wild else 1, n + 2 if wild else n + 1)
            tap_w = rng.randrange(0 if wild else 1, 5)
            f.update(taps=taps, tap_w=tap_w, tap_pitch=rng.choice((tap_w, tap_w + n, 7)),
                     acc_si=min(f["acc_si"], 15), inp_si=min(f["inp_si"], 15),
                     acc_base=min(f["acc_base"], (1 << 14) - 1))
            f["wgt_base"] = min(f["wgt_base"], (1 << 12) - 1)
            return isa.dw(**f, **{k2: v for k2, v in flags.items()})
        return isa.gemm(**f, **flags)
    if k < 0.65:
        buf = rng.choice(list(Buffer))
        depth = cfg.depth(buf)
        e = isa.element_bytes(buf, n)
        y, x = rng.choice((0, 1, 1, 2, 3)), rng.choice((0, 1, 2, 4))
        f = {"sp_base": rng.randrange(depth - 12 if not wild else depth + 2),
             "y_size": y, "x_size": x, "y_stride": rng.choice((x, x, x + 1, 0)),
             "slot": rng.randrange(3) if wild else 0,
             "offset": e * rng.randrange(mem_size // e - 8) if not wild
             else rng.choice((rng.randrange(1 << 32), mem_size - e, e * rng.randrange(64) + 1))}
        if rng.random() < 0.3:
            f.update(pad_top=rng.randrange(2), pad_left=rng.randrange(3),
                     pad_right=rng.randrange(2), pad_bottom=rng.randrange(2),
                     pad_value=rng.randrange(-128, 128))
        fl = {"pop_next": flags["pop_next"], "push_next": flags["push_next"]}
        if wild:
            fl.update(pop_prev=flags["pop_prev"])
        return isa.load(buf, **f, **fl)
    if k < 0.8:
        buf = rng.choice((Buffer.ACC, Buffer.ACC8, Buffer.ACC8)) if not wild \
            else rng.choice(list(Buffer))
        e = isa.element_bytes(buf, n)
        y, x = rng.choice((0, 1, 2)), rng.choice((0, 1, 3))
        f = {"sp_base": rng.randrange(cfg.acc_depth - 8 if not wild else cfg.acc_depth + 2),
             "y_size": y, "x_size": x, "y_stride": rng.choice((x, x + 2, 0)),
             "slot": rng.randrange(3) if wild else 0,
             "offset": e * rng.randrange(mem_size // e - 8) if not wild
             else rng.choice((rng.randrange(1 << 32), mem_size - e, 1))}
        fl = {"pop_prev": flags["pop_prev"], "push_prev": flags["push_prev"]}
        if wild:
            fl.update(push_next=flags["push_next"])
        return isa.store(buf, **f, **fl)
    op = rng.choice(list(AluOp)) if rng.random() < 0.9 else 7
    use_imm = int(rng.random() < (0.3 if op != AluOp.REQ or wild else 0))
    f = {"alu_op": int(op), "use_imm": use_imm,
         "dst_base": rng.randrange(cfg.acc_depth - 16 if not wild else cfg.acc_depth + 2),
         "src_base": rng.randrange(cfg.acc_depth - 16),
         "outer": rng.choice((0, 1, 2)), "inner": rng.choice((1, 3, 4)),
         "dst_so": rng.choice((0, 4)), "dst_si": rng.choice((0, 1, 1)),
         "src_so": rng.choice((0, 1, 4)), "src_si": rng.choice((0, 1)),
         "imm": rng.randrange(-(1 << 23), 1 << 23)}
    return Insn(Opcode.ALU, {**f, **flags})


def _random_program(rng: random.Random, cfg: AccelConfig, mem_size: int) -> list:
    """Wild programs (errors soon), or tame ones (long error-free stretches, random tokens)."""
    wild_p = rng.choice((0.08, 0.0, 0.0))
    length = rng.choice((1, 5, 20, 60, 200, 400))
    prog = [_random_insn(rng, cfg, mem_size, wild_p) for _ in range(length)]
    if wild_p == 0 and rng.random() < 0.1:                  # TOKEN_OVERFLOW somewhere
        k = rng.randrange(length + 1)
        prog[k:k] = [isa.load(Buffer.INP, push_next=1)] * (isa.TOKEN_MAX + 1)
    if rng.random() < 0.8:
        prog.append(isa.end())
    return prog


@pytest.mark.parametrize("seed", range(60))
def test_random_programs_fast_equals_scheduler(seed: int) -> None:
    rng = random.Random(seed)
    cfg = CONFIGS[seed % len(CONFIGS)]
    mem_size = rng.choice((4096, 3000, 1 << 16))
    prog = _random_program(rng, cfg, mem_size)
    init = np.random.default_rng(seed).integers(0, 256, mem_size, dtype=np.uint8)
    slots = [0, rng.randrange(1 << 32), rng.choice((0, 64, mem_size - 64))] + [0] * 13
    count = len(prog) + rng.choice((0, 0, 0, 2))
    base = rng.choice((0, 16 * rng.randrange(mem_size // 16)))

    def execute(m):
        mem = bytearray(init.tobytes())
        return m.execute(prog, mem, slots), mem

    def run_array(m):
        mem = init.copy()
        image = b"".join(isa.encode(i) if isinstance(i, Insn) else i for i in prog)
        end = min(mem_size, base + len(image))
        mem[base:end] = np.frombuffer(image[:end - base], np.uint8)
        return m.run_array(mem, base, count, slots), mem

    def run_cb(m):
        mem = init.copy()
        image = b"".join(isa.encode(i) if isinstance(i, Insn) else i for i in prog)
        end = min(mem_size, base + len(image))
        mem[base:end] = np.frombuffer(image[:end - base], np.uint8)

        def read(a: int, k: int) -> bytes:
            assert 0 <= a and a + k <= mem_size
            return mem[a:a + k].tobytes()

        def write(a: int, d: bytes) -> None:
            assert 0 <= a and a + len(d) <= mem_size
            mem[a:a + len(d)] = np.frombuffer(d, np.uint8)
        return m.run(read, write, base, count, slots, mem_size=mem_size), mem

    for go in (execute, run_array, run_cb):
        _both(cfg, seed, go)
    _both(cfg, seed, execute, batch=False)


@pytest.mark.parametrize("seed", range(12))
def test_randprog_programs_and_errors(seed: int) -> None:
    """The RTL tests' random programs (race-free, tokens in program order) and their error
    programs (every kind at a random pc)."""
    rng = random.Random(seed)
    cfg = CONFIGS[seed % len(CONFIGS)]
    mem_size = 64 << 10
    rps = [randprog.generate(rng, cfg, mem_size=mem_size, n_insns=rng.choice((40, 120)))]
    for kind in randprog.ERROR_KINDS:
        rps.append(randprog.generate_error(rng, cfg, kind, mem_size))
    for rp in rps:
        def go(m, rp=rp):
            mem = np.frombuffer(rp.memory(mem_size), np.uint8).copy()
            return m.run_array(mem, rp.insn_base, rp.insn_count, rp.slots), mem
        _both(cfg, seed, go)


def test_program_overwritten_by_its_store() -> None:
    """A STORE that writes instructions further on: the fetcher reads the program 64
    instructions at a time, so whether a later instruction is the old or the new one depends on
    where its chunk starts; the fast path leaves such programs to the scheduler."""
    cfg = CONFIGS[0]
    for target in (3, 63, 64, 65, 130):
        nop = isa.load(Buffer.INP, y_size=0)
        prog = [nop] * 200 + [isa.end()]
        prog[1] = isa.store(Buffer.ACC8, sp_base=0, offset=16 * target, y_size=1, x_size=4)
        image = isa.encode_program(prog)

        def go(m, image=image, prog=prog):
            m.acc[:4] = 0x11                                # an illegal opcode over the target
            mem = np.zeros(8192, np.uint8)
            mem[:len(image)] = np.frombuffer(image, np.uint8)
            return m.run_array(mem, 0, len(prog), [0] * 16), mem
        _both(cfg, target, go)


def test_decoder_matches_isa_decode() -> None:
    rng = random.Random(5)
    words = []
    for _ in range(3000):
        w = rng.getrandbits(128)
        w = (w & ~0xF) | rng.choice([1, 2, 3, 4, 6, 1, 3])
        words.append(w.to_bytes(16, "little"))
    op, flags, cols = decode_fields(np.frombuffer(b"".join(words), np.uint8))
    for k, w in enumerate(words):
        insn = isa.decode(w)
        assert op[k] == int(insn.op)
        for i, name in enumerate(("pop_prev", "pop_next", "push_prev", "push_next")):
            assert (flags[k] >> i) & 1 == insn.fields.get(name, 0)
        for f in isa.FORMATS[insn.op][5:]:
            assert cols[f.name][k] == insn.fields.get(f.name, 0), (insn, f.name)


def test_timing_false_leaves_out_only_the_estimate_of_a_good_run() -> None:
    """run_array(timing=False): a run without error has the same exact counters and zero
    timing counters (or, where instructions the program-order path does not take, such as a
    transposed LOAD or XALU, made the scheduler run, all of them as with timing=True); a run
    with an error has every counter, as with timing=True."""
    cfg = CONFIGS[2]
    timing = ("cycles", "load_busy", "load_stall", "compute_busy", "compute_stall",
              "store_busy", "store_stall", "gemm_busy")
    rng = random.Random(4)
    def has_xalu(rp: randprog.RandomProgram) -> bool:    # (the scheduler runs XALU)
        return any(isinstance(i, Insn) and i.op == Opcode.XALU for i in rp.program)

    rps = [randprog.generate(rng, cfg, mem_size=64 << 10, n_insns=80) for _ in range(3)]
    while all(has_xalu(rp) for rp in rps):
        rps.append(randprog.generate(rng, cfg, mem_size=64 << 10, n_insns=80))
    skipped = 0
    rps += [randprog.generate_error(rng, cfg, kind, 64 << 10) for kind in randprog.ERROR_KINDS]
    for rp in rps:
        outs = []
        for want in (True, False):
            m = AccelModel(cfg)
            mem = np.frombuffer(rp.memory(64 << 10), np.uint8).copy()
            r = m.run_array(mem, rp.insn_base, rp.insn_count, rp.slots, timing=want)
            outs.append((r, mem.tobytes(), m.acc.tobytes()))
        (a, mem_a, acc_a), (b, mem_b, acc_b) = outs
        assert (a.error, a.err_pc, mem_a, acc_a) == (b.error, b.err_pc, mem_b, acc_b)
        if a.ok:
            assert a.counters["cycles"] > 0
            if all(b.counters[k] == 0 for k in timing):
                skipped += 1
                assert {k: v for k, v in a.counters.items() if k not in timing} == \
                    {k: v for k, v in b.counters.items() if k not in timing}
            else:
                assert a.counters == b.counters
        else:
            assert a.counters == b.counters
    assert skipped, "no run left the timing estimate out"


@pytest.mark.parametrize("n", [8, 16])
def test_long_runs_and_large_batches_at_the_extremes(n: int) -> None:
    """GEMM runs long enough to split the product's reduction (more than 1024 terms), with
    every input and weight -128 (the largest partial sums) and accumulators near the int32
    limits; runs covering the whole accumulator (the input rows gathered in parts), and enough
    of them to write back in parts; with resets in the middle: batched, one by one and on the
    scheduler, the same."""
    cfg = AccelConfig(n=n, inp_depth=4096, wgt_depth=64, acc_depth=4096, queue_depth=2)
    prog = []
    for k in range(300):                                     # one run, K = 150 * n
        prog.append(isa.gemm(reset=int(k == 150), acc_base=0, inp_base=k % 7, wgt_base=k % 64,
                             outer=4, inner=8, acc_so=8, acc_si=1, inp_so=9, inp_si=1))
    for k in range(300):                                     # 1024 rows, K = 300 * n
        prog.append(isa.gemm(acc_base=8, inp_base=k % 5, wgt_base=(3 * k) % 64, outer=32,
                             inner=32, acc_so=32, acc_si=1, inp_so=64, inp_si=2))
    for k in range(140):                                     # whole-accumulator runs
        prog.append(isa.gemm(reset=int(k % 50 == 49), acc_base=0, inp_base=k % 3,
                             wgt_base=(5 * k) % 64, outer=64, inner=64,
                             acc_so=64 if k % 2 else 1, acc_si=1 if k % 2 else 64,
                             inp_so=32, inp_si=1))
    prog.append(isa.end())

    def go(m):
        m.inp[:] = -128
        m.wgt[:] = -128
        m.wgt[::3] = 127
        m.acc[::2] = (1 << 31) - 5
        mem = bytearray(64)
        return m.execute(prog, mem, [0] * 16), mem

    _both(cfg, n, go)
    _both(cfg, n, go, batch=False)

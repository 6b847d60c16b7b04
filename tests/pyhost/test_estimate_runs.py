"""timing.estimate gives exactly what its loop gives instruction by instruction: the loop below
is 7e9ba73's, verbatim, against `estimate`, which takes long runs of one unit's flagless
instructions in closed form (`timing._busy_tail`), on random streams (legal and not, tokens in
order and not), on runs with every mix of busy cycles and queue depths, and on compiled layers.
``RUN_MIN`` is lowered to 1 and 2 as well, so that every run, however short, takes the closed
form."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence

import numpy as np
import pytest

from pyhost.accel import timing
from pyhost.accel.timing import _COUNTERS, _UNIT_OF, Estimate, StreamOrderError, _busy_cycles
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp, Buffer, Insn, Opcode, Unit
from tests.pyhost import test_accel_program_order as T


def reference_estimate(insns: Sequence[Insn], cfg: AccelConfig, mem_latency: int = 0
                       ) -> Estimate:
    """timing.estimate as it was before its runs were taken in closed form (7e9ba73)."""
    stream = isa.Stream.of(insns)
    words = np.frombuffer(stream.raw, "<u8").reshape(-1, 2)
    op = (words[:, 0] & np.uint64(0xF)).astype(np.int64)
    ends = np.flatnonzero(op == Opcode.END)
    count = int(ends[0]) + 1 if ends.size else op.size      # END counts, what follows not
    k = int(ends[0]) if ends.size else op.size
    lo, hi, op = words[:k, 0], words[:k, 1], op[:k]
    unit = _UNIT_OF[op]
    if (unit < 0).any():
        raise ValueError(f"estimate: instruction {int(np.flatnonzero(unit < 0)[0])} has an "
                         "illegal opcode")
    flags = ((lo >> np.uint64(4)) & np.uint64(0xF)).astype(np.int64)
    dur, it, lanes = _busy_cycles(op, lo, hi, cfg.n, mem_latency)
    array = (op == Opcode.GEMM) | (op == Opcode.DW)
    busy = [int(dur[unit == u].sum()) for u in range(3)]

    cap = cfg.queue_depth + 1
    fetch_t = 0
    unit_t = [0, 0, 0]
    #: the finish times of each unit's last `cap` instructions (the queue it fills)
    recent: list[deque[int]] = [deque(maxlen=cap) for _ in range(3)]
    tokens: list[deque[int]] = [deque() for _ in range(4)]
    counters = _COUNTERS
    for pc, u, d, f in zip(range(k), unit.tolist(), dur.tolist(), flags.tolist(), strict=True):
        t = fetch_t + 1
        r = recent[u]
        if len(r) == cap and r[0] > t:
            t = r[0]
        fetch_t = t
        start = unit_t[u]
        if start <= t:
            start = t + 1
        if f:
            pops, pushes = counters[u][f]
            for c in pops:
                q = tokens[c]
                if not q:
                    raise StreamOrderError(f"instruction {pc} ({stream[pc]}) pops a token that "
                                           "no earlier instruction pushed")
                v = q.popleft()
                if v > start:
                    start = v
            end = start + d
            for c in pushes:
                tokens[c].append(end)
        else:
            end = start + d
        unit_t[u] = end
        r.append(end)
    return Estimate(max([fetch_t, *unit_t]), int(it[array].sum()), int(dur[array].sum()),
                    busy[Unit.COMPUTE], busy[Unit.LOAD], busy[Unit.STORE], count,
                    int((it * lanes)[array].sum()) * cfg.n)


def _both(prog: Sequence[Insn] | isa.Stream, cfg: AccelConfig, mem_latency: int = 0) -> None:
    raw = prog if isinstance(prog, isa.Stream) else isa.Stream(
        b"".join(isa.encode(i) if isinstance(i, Insn) else i for i in prog))
    out = []
    for f in (timing.estimate, reference_estimate):
        try:
            out.append(f(raw, cfg, mem_latency))
        except (StreamOrderError, ValueError) as e:
            out.append((type(e), str(e)))
    assert out[0] == out[1]


@pytest.fixture(params=[None, 1, 2], ids=["run_min", "run_min_1", "run_min_2"])
def run_min(request, monkeypatch) -> None:
    if request.param is not None:
        monkeypatch.setattr(timing, "RUN_MIN", request.param)


@pytest.mark.parametrize("seed", range(30))
def test_random_streams(seed: int, run_min: None) -> None:
    """Legal and illegal instructions, tokens in order and not (StreamOrderError, ValueError:
    the same error from both)."""
    rng = random.Random(seed)
    cfg = T.CONFIGS[seed % len(T.CONFIGS)]
    for _ in range(10):
        _both(T._random_program(rng, cfg, 4096), cfg, rng.choice((0, 24)))


def _insn(rng: random.Random, unit: Unit, **flags: int) -> Insn:
    """An instruction of ``unit`` whose busy cycles are anywhere from 1 to a few hundred."""
    if unit == Unit.COMPUTE:
        outer, inner = rng.choice((0, 1, 1, 2, 7)), rng.choice((0, 1, 1, 3, 40))
        if rng.random() < 0.2:
            return isa.alu(AluOp.ADD, imm=0, outer=outer, inner=inner, **flags)
        return isa.gemm(outer=outer, inner=inner, **flags)
    buf = Buffer.INP if unit == Unit.LOAD else Buffer.ACC8
    y, x = rng.choice((0, 1, 1, 4)), rng.choice((0, 1, 2, 9, 60))
    ctor = isa.load if unit == Unit.LOAD else isa.store
    return ctor(buf, y_size=y, x_size=x, y_stride=x, **flags)


def _pipelined_runs(rng: random.Random) -> list[Insn]:
    """Runs of one unit (1 to 700 instructions) whose first and last instructions hand over
    tokens as a pipeline does (load -> compute -> store -> compute -> load), all in order."""
    prog: list[Insn] = []
    have = {"l2c": 0, "c2l": 0, "c2s": 0, "s2c": 0}
    for _ in range(rng.randrange(2, 14)):
        unit = rng.choice((Unit.LOAD, Unit.COMPUTE, Unit.COMPUTE, Unit.STORE))
        n = rng.choice((1, 2, 3, 9, 31, 32, 33, 64, 200, 700))
        run = [_insn(rng, unit) for _ in range(n)]
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        if unit == Unit.LOAD:
            if have["c2l"]:
                first["pop_next"], have["c2l"] = 1, have["c2l"] - 1
            last["push_next"] = 1
            have["l2c"] += 1
        elif unit == Unit.COMPUTE:
            if have["l2c"]:
                first["pop_prev"], have["l2c"] = 1, have["l2c"] - 1
            elif have["s2c"]:
                first["pop_next"], have["s2c"] = 1, have["s2c"] - 1
            last["push_prev" if rng.random() < 0.5 else "push_next"] = 1
            have["c2l" if "push_prev" in last else "c2s"] += 1
        elif have["c2s"]:
            first["pop_prev"], have["c2s"] = 1, have["c2s"] - 1
            last["push_prev"] = 1
            have["s2c"] += 1
        if first:
            run[0] = _insn(rng, unit, **first)
        if last:
            run.append(_insn(rng, unit, **last))
        prog += run
    return prog + [isa.end()]


@pytest.mark.parametrize("seed", range(24))
def test_long_runs(seed: int, run_min: None) -> None:
    """Runs long and short of one unit, fetch-bound (one-cycle instructions) and unit-bound,
    between token hand-offs, at queue depths 1 to 8."""
    rng = random.Random(1000 + seed)
    for _ in range(6):
        cfg = AccelConfig(queue_depth=rng.choice((1, 2, 3, 8)))
        _both(_pipelined_runs(rng), cfg, rng.choice((0, 24)))


def test_flagless_runs_of_every_length(run_min: None) -> None:
    """No tokens at all: every run length from 1 to 80 of each unit, of instructions of any
    length and of one-cycle ones (which the fetcher, not the queue, paces), one after the
    other."""
    rng = random.Random(5)
    one = {Unit.LOAD: isa.load(Buffer.INP), Unit.COMPUTE: isa.gemm(outer=0, inner=0),
           Unit.STORE: isa.store(Buffer.ACC8)}
    for qd in (1, 2, 4, 7):
        cfg = AccelConfig(queue_depth=qd)
        prog, fast = [], []
        for n in range(1, 81):
            unit = (Unit.LOAD, Unit.COMPUTE, Unit.STORE)[n % 3]
            prog += [_insn(rng, unit) for _ in range(n)]
            fast += [one[unit]] * n + [_insn(rng, unit)] * (n % 2)
        _both(prog, cfg)
        _both(fast, cfg)
        _both([isa.gemm(outer=0, inner=0)] * 300 + [isa.gemm(outer=5, inner=5)] * 300, cfg)
        _both([isa.gemm(outer=5, inner=5)] * 300 + [isa.gemm(outer=0, inner=0)] * 300
              + [isa.load(Buffer.INP)], cfg)


@pytest.mark.parametrize("n,k,nout,m", [(8, 200, 120, 1), (4, 64, 48, 3), (16, 512, 256, 2)])
def test_compiled_gemm_and_convolution(n: int, k: int, nout: int, m: int, run_min: None
                                       ) -> None:
    """A fully connected layer (long runs of GEMMs: VGG-19's first has 1.6 M) and a
    convolution, as the plugin generates them."""
    from compiler.plugins.accel import kernels as K
    from tb.accel.randprog import random_conv_quant, random_gemm_quant

    cfg = AccelConfig(n=n)
    rng = np.random.default_rng(n)
    fc = K.gemm(m, random_gemm_quant(rng, k, nout), inp=K.Ref(2), out=K.Ref(3),
                consts=K.Ref(0), cfg=cfg)
    conv = K.conv2d((1, 16, 12, 12), random_conv_quant(rng, 24, 16, 3, 3), inp=K.Ref(2),
                    out=K.Ref(3), consts=K.Ref(0), pads=(1, 1, 1, 1), cfg=cfg)
    for kern in (fc, conv):
        for lat in (0, timing.RTL_MEM_LATENCY):
            _both(kern.insns, cfg, lat)

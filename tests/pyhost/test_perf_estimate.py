"""timing.perf_estimate_raw, the calibrated performance model (docs/perf-model.md), gives
exactly what its previous implementation gave: the loop below is 54a2724's, verbatim, run on
random instruction streams (legal and not, tokens in order and not, every insn_base
alignment, other constants) and on compiled layers."""

from __future__ import annotations

import dataclasses
import random
from collections import deque

import numpy as np
import pytest

from pyhost.accel.timing import (
    _FLAG_COUNTERS,
    _IPB,
    _UNIT_OF,
    BEAT_BYTES,
    FETCH_MAX_BURST,
    PERF_PARAMS,
    PerfEstimate,
    PerfParams,
    StreamOrderError,
    _Fetcher,
    _unit_cycles,
    perf_estimate_raw,
    perf_params_for,
)
from pyhost.spec import isa
from pyhost.spec.accel import DEFAULT_CONFIG, AccelConfig
from pyhost.spec.isa import Insn, Opcode, Unit
from tests.pyhost import test_accel_program_order as T


def reference_perf_estimate_raw(raw: bytes | np.ndarray, cfg: AccelConfig = DEFAULT_CONFIG,
                      p: PerfParams | None = None, insn_base: int = 0) -> PerfEstimate:
    """timing.perf_estimate_raw as it was before issue 19's speed work (54a2724)."""
    if p is None:
        p = perf_params_for(cfg.n)
    arr = np.frombuffer(raw, np.uint8) if isinstance(raw, bytes | bytearray | memoryview) \
        else np.asarray(raw, np.uint8)
    arr = arr[:arr.size - arr.size % isa.INSN_BYTES]
    op, flags, occ, push, comp = _unit_cycles(np.ascontiguousarray(arr), cfg.n, p)
    ends = np.flatnonzero(op == Opcode.END)
    count = int(ends[0]) if ends.size else op.size
    units = _UNIT_OF[op[:count]].tolist()
    flags_l = flags[:count].tolist()
    occ_l = occ[:count].tolist()
    push_l = push[:count].tolist()
    gemm_l = ((op[:count] == Opcode.GEMM) | (op[:count] == Opcode.DW)).tolist()
    if any(u < 0 for u in units):
        raise ValueError("perf_estimate: an instruction with an illegal opcode before END")
    cap = cfg.queue_depth + 1
    fetcher = _Fetcher(p, (insn_base % BEAT_BYTES) // isa.INSN_BYTES)
    fetch_t = -1
    gaps = (p.load_gap, p.compute_gap, p.store_gap)
    unit_t = [0, 0, 0]
    started = [False, False, False]
    finish: list[list[int]] = [[], [], []]
    tokens: list[deque[int]] = [deque() for _ in range(4)]
    busy = [0, 0, 0]
    stall = [0, 0, 0]
    gemm_busy = 0
    last = 0
    tl = p.token_latency
    disp = p.dispatch
    slot0, issue, freed = fetcher.slot0, fetcher.issue, fetcher.freed
    flat = p.fetch_latency
    for pc in range(count):
        u = units[pc]
        fl = flags_l[pc]
        t = fetch_t + 1
        beat = (pc + slot0) // _IPB
        b = beat // FETCH_MAX_BURST
        if len(issue) <= b:
            fetcher.ready(pc)                  # request the bursts up to this one
        r = issue[b] + flat + beat - b * FETCH_MAX_BURST
        if r > t:
            t = r
        k = len(finish[u]) - cap
        if k >= 0 and finish[u][k] > t:
            t = finish[u][k]
        fetch_t = t
        if (pc + slot0) % _IPB == _IPB - 1:
            freed.append(t)
        ready = t + disp
        if started[u] and unit_t[u] + gaps[u] > ready:
            ready = unit_t[u] + gaps[u]
        start = ready
        fc = _FLAG_COUNTERS[u]
        for bit in (0, 1):
            if fl >> bit & 1 and fc[bit] is not None:
                q = tokens[fc[bit]]
                if not q:
                    raise StreamOrderError(f"instruction {pc} pops a token that no earlier "
                                           "instruction pushed")
                v = q.popleft()
                if v > start:
                    start = v
        end = start + occ_l[pc]
        unit_t[u] = end
        started[u] = True
        finish[u].append(end)
        busy[u] += occ_l[pc]
        stall[u] += start - ready
        if gemm_l[pc]:
            gemm_busy += occ_l[pc]
        pt = start + push_l[pc]
        for bit in (2, 3):
            if fl >> bit & 1 and fc[bit] is not None:
                tokens[fc[bit]].append(pt + tl)
        if pt > last:
            last = pt
    t_end = fetch_t + 1
    r = fetcher.ready(count) if count < op.size else t_end
    fetch_t = max(t_end, r)
    cycles = max(last, *unit_t, fetch_t) + p.end
    return PerfEstimate(cycles, busy[Unit.LOAD], stall[Unit.LOAD], busy[Unit.COMPUTE],
                        stall[Unit.COMPUTE], busy[Unit.STORE], stall[Unit.STORE], gemm_busy)


def _both(raw: bytes, cfg: AccelConfig, p: PerfParams | None, base: int):
    out = []
    for f in (perf_estimate_raw, reference_perf_estimate_raw):
        try:
            out.append(f(raw, cfg, p, insn_base=base))
        except (StreamOrderError, ValueError) as e:
            out.append((type(e), str(e)))
    assert out[0] == out[1]


@pytest.mark.parametrize("seed", range(40))
def test_random_streams(seed: int) -> None:
    rng = random.Random(seed)
    cfg = T.CONFIGS[seed % len(T.CONFIGS)]
    p = None if seed % 2 else dataclasses.replace(
        PERF_PARAMS, compute_gap=rng.randrange(4), token_latency=rng.randrange(6),
        load_row=rng.random(), fetch_latency=rng.randrange(40))
    for _ in range(10):
        prog = T._random_program(rng, cfg, 4096)
        raw = b"".join(isa.encode(i) if isinstance(i, Insn) else i for i in prog)
        _both(raw, cfg, p, 16 * rng.randrange(8))


def test_a_compiled_convolution() -> None:
    from compiler.plugins.accel import kernels as K
    from tb.accel.randprog import random_conv_quant

    cfg = AccelConfig()
    q = random_conv_quant(np.random.default_rng(3), 24, 16, 3, 3)
    kern = K.conv2d((1, 16, 12, 12), q, inp=K.Ref(1), out=K.Ref(2), consts=K.Ref(3),
                    pads=(1, 1, 1, 1), cfg=cfg)
    raw = isa.encode_program(K.join([kern]))
    for base in (0, 16, 32, 48):
        _both(raw, cfg, None, base)


@pytest.mark.parametrize("mem_latency", [0, 24])
def test_estimate_busy_cycles_are_field_cycles(mem_latency: int) -> None:
    """timing.estimate's vectorized busy cycles equal `field_cycles` instruction by instruction
    for every opcode that has a unit (fields drawn over their whole range, no tokens): a new
    opcode needs its rule there too."""
    from pyhost.accel import timing

    rng = random.Random(7)
    flags = set(isa.FLAG_BITS)
    prog = []
    for _ in range(400):
        op = rng.choice(sorted(isa.UNIT_OF))
        vals = {}
        for f in isa.FORMATS[op][1:]:
            if f.name in flags:
                continue
            lo, hi = ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed
                      else (0, (1 << f.width) - 1))
            vals[f.name] = rng.choice([0, 1, rng.randint(lo, hi), rng.randint(0, min(hi, 40))])
        prog.append(Insn(op, vals))
    cfg = DEFAULT_CONFIG
    est = timing.estimate(prog, cfg, mem_latency)
    busy = {u: 0 for u in Unit}
    array = [i for i in prog if i.op in (Opcode.GEMM, Opcode.DW)]
    for i in prog:
        busy[i.unit] += timing.field_cycles(i.op, i.fields, cfg.n, mem_latency)
    assert (est.compute_busy, est.load_busy, est.store_busy) == \
        (busy[Unit.COMPUTE], busy[Unit.LOAD], busy[Unit.STORE])
    its = [i.fields.get("outer", 0) * i.fields.get("inner", 0) for i in array]
    assert est.gemm_iterations == sum(its)
    assert est.gemm_busy == sum(timing.field_cycles(i.op, i.fields, cfg.n) for i in array)
    assert est.array_macs == sum(
        it * (i.fields.get("taps", 0) if i.op == Opcode.DW else cfg.n) * cfg.n
        for it, i in zip(its, array, strict=True))
    assert est.insns == len(prog)

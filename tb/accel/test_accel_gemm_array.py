"""cocotb bench for accel_gemm_array, the N x N int8 weight-stationary array.

Streams rows at full throughput and with random gaps, switches weight tiles mid-stream (w_load
together with a row and on idle cycles), mixes depthwise rows (dw: N rows X[k] in x_rows) with
ordinary ones, and compares every output row, its tag and its latency (LAT = 1) with numpy:
acc_out[n] = (reset ? 0 : acc_in[n]) + sum_k x[k] * W[k][n] (depthwise: X[k][n] * W[k][n]),
int32 wraps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, RisingEdge

from tb.common.clocking import reset, start_clock

LAT = 1  # the array's documented latency


def pack8(v: np.ndarray) -> int:
    return int.from_bytes(np.asarray(v, np.int8).tobytes(), "little")


def pack32(v: np.ndarray) -> int:
    return int.from_bytes(np.asarray(v, np.int64).astype(np.int32).tobytes(), "little")


def unpack32(v: int, n: int) -> np.ndarray:
    return np.frombuffer(v.to_bytes(4 * n, "little"), np.int32).astype(np.int64)


def wrap32(v: np.ndarray) -> np.ndarray:
    return ((np.asarray(v, np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)


@dataclass
class Beat:
    """The inputs of one cycle."""

    valid: bool
    x: np.ndarray
    acc: np.ndarray
    reset: bool
    w_load: bool
    w: np.ndarray          # N x N int8, W[k][n]
    tag: int
    dw: bool = False
    xr: np.ndarray | None = None   # depthwise: N x N int8, row k = X[k]


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        self.n = len(dut.x) // 8
        self.tag_w = len(dut.in_tag)
        start_clock(dut)
        for s in ("w_load", "w_tile", "in_valid", "dw", "x", "x_rows", "acc_in", "reset_acc",
                  "in_tag"):
            getattr(dut, s).value = 0

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)

    async def stream(self, beats: list[Beat]) -> int:
        """Drive one beat per cycle and check every output; returns the rows checked."""
        d, n = self.dut, self.n
        w_held = np.zeros((n, n), np.int64)        # the tile after reset
        expected: list[tuple[int, np.ndarray, int] | None] = []   # per cycle: (cycle, acc, tag)
        rows = 0
        for cyc in range(len(beats) + LAT + 1):
            await RisingEdge(d.clk)
            b = beats[cyc] if cyc < len(beats) else None
            if b is not None:
                d.in_valid.value = int(b.valid)
                d.x.value = pack8(b.x)
                d.dw.value = int(b.dw)
                d.x_rows.value = pack8((b.xr if b.xr is not None else np.zeros((n, n))
                                        ).reshape(-1))
                d.acc_in.value = pack32(b.acc)
                d.reset_acc.value = int(b.reset)
                d.w_load.value = int(b.w_load)
                d.w_tile.value = pack8(b.w.reshape(-1))
                d.in_tag.value = b.tag
                if b.w_load:
                    w_held = b.w.astype(np.int64)
                exp = None
                if b.valid:
                    base = np.zeros(n, np.int64) if b.reset else b.acc.astype(np.int64)
                    if b.dw:
                        assert b.xr is not None
                        prod = (b.xr.astype(np.int64) * w_held).sum(axis=0)
                    else:
                        prod = b.x.astype(np.int64) @ w_held
                    exp = (cyc, wrap32(base + prod), b.tag)
                expected.append(exp)
            else:
                d.in_valid.value = 0
                d.w_load.value = 0
                expected.append(None)
            await FallingEdge(d.clk)
            # outputs now show what entered LAT cycles ago
            want = expected[cyc - LAT] if cyc >= LAT else None
            v = d.out_valid.value
            assert v.is_resolvable, f"cycle {cyc}: out_valid is {v} after reset"
            if want is None:
                assert int(v) == 0, f"cycle {cyc}: out_valid 1, no row entered {LAT} cycle before"
                continue
            assert int(v) == 1, f"cycle {cyc}: out_valid 0, expected the row of cycle {want[0]}"
            got = unpack32(int(d.acc_out.value), n)
            bad = np.nonzero(got != want[1])[0]
            assert bad.size == 0, (f"row of cycle {want[0]}, lanes {bad.tolist()}: acc_out "
                                   f"{got[bad].tolist()}, expected {want[1][bad].tolist()}")
            assert int(d.out_tag.value) == want[2], \
                f"row of cycle {want[0]}: out_tag {int(d.out_tag.value)}, expected {want[2]}"
            rows += 1
        return rows


def rand_tile(rng: np.random.Generator, n: int, edge: bool) -> np.ndarray:
    if edge:
        return rng.choice(np.array([-128, 127, -1, 0, 1], np.int64), size=(n, n))
    return rng.integers(-128, 128, size=(n, n))


def make_beats(n: int, tag_w: int, count: int, seed: int, p_valid: float,
               edge: bool) -> list[Beat]:
    """A stream with weight switches, resets, extreme values and int32 wrap of acc_in."""
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    w = rand_tile(rng, n, edge)
    beats = []
    for i in range(count):
        w_load = i == 0 or prng.random() < 0.08
        if w_load:
            w = rand_tile(rng, n, edge)
        if edge:
            x = rng.choice(np.array([-128, 127, -128, 127, 0, -1, 1]), size=n)
            acc = rng.choice(np.array([2**31 - 1, -2**31, 2**31 - 100, -2**31 + 100, 0, -1]),
                             size=n)
        else:
            x = rng.integers(-128, 128, size=n)
            acc = rng.integers(-2**31, 2**31, size=n)
        dw = prng.random() < 0.3
        xr = rand_tile(rng, n, edge) if dw else None
        beats.append(Beat(valid=prng.random() < p_valid, x=x, acc=acc,
                          reset=prng.random() < 0.2, w_load=w_load, w=w,
                          tag=prng.getrandbits(tag_w), dw=dw, xr=xr))
    return beats


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_full_throughput(dut) -> None:
    """One random row per cycle, weights switched mid-stream: every row is right, in order."""
    tb = TB(dut)
    await tb.reset()
    rows = await tb.stream(make_beats(tb.n, tb.tag_w, 1000, seed=1, p_valid=1.0, edge=False))
    assert rows == 1000, f"{rows} rows checked, expected 1000"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_gaps(dut) -> None:
    """Random in_valid gaps (weights also loaded on idle cycles): outputs only for real rows."""
    tb = TB(dut)
    await tb.reset()
    rows = await tb.stream(make_beats(tb.n, tb.tag_w, 1000, seed=2, p_valid=0.6, edge=False))
    dut._log.info("%d rows with gaps", rows)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_extremes(dut) -> None:
    """-128/127 inputs and weights (largest column sums) on acc_in near the int32 limits, so
    the sum wraps; reset_acc ignores acc_in."""
    tb = TB(dut)
    await tb.reset()
    n = tb.n
    w_min = np.full((n, n), -128)
    fixed = [
        Beat(True, np.full(n, -128), np.full(n, 2**31 - 1), False, True, w_min, 0),  # + n*2^14
        Beat(True, np.full(n, 127), np.full(n, -2**31), False, False, w_min, 1),      # wraps down
        Beat(True, np.full(n, -128), np.full(n, 12345), True, False, w_min, 0),       # reset
        Beat(True, np.full(n, 127), np.full(n, 2**31 - 1), False, True,
             np.full((n, n), 127), 1),
        Beat(True, np.zeros(n), np.full(n, 2**31 - 1), False, True, w_min, 0, True,
             np.full((n, n), -128)),                                              # dw, + n*2^14
        Beat(True, np.full(n, 5), np.full(n, -2**31), False, False, w_min, 1, True,
             np.full((n, n), 127)),                                               # dw, wraps
    ]
    rows = await tb.stream(fixed + make_beats(n, tb.tag_w, 600, seed=3, p_valid=0.9, edge=True))
    dut._log.info("%d edge rows", rows)

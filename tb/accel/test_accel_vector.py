"""cocotb bench for accel_vector, the accelerator's N-lane ALU (combinational).

Every operation (ALU and XALU) with random and edge values against :func:`alu_ref`, a per-lane
reference written from the ISA text (docs/isa.md, pyhost/spec/isa.py) with Python integers, so
it is exact where fixed-width arithmetic could overflow; and the XALU operand errors
(div_zero, neg_sqrt). The compute-unit bench reuses it.
"""

from __future__ import annotations

import math
import random

import cocotb
from cocotb.triggers import Timer

from pyhost.spec import isa
from pyhost.spec.isa import AluOp, XAluOp

#: The vector unit's 4-bit operation of each XALU operation ({1, alu_op})
XDIV, XSQRT = 8 + XAluOp.DIV, 8 + XAluOp.SQRT

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
EDGE32 = [0, 1, -1, 2, -2, 127, -128, 255, 256, 1 << 30, -(1 << 30), INT32_MAX, INT32_MIN,
          INT32_MAX - 1, INT32_MIN + 1, 0x5555_5555, -0x5555_5556]


def s32(v: int) -> int:
    """``v`` wrapped to a signed 32-bit value."""
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v & (1 << 31) else v


def alu_ref(op: int, a: int, b: int, s: int = 0, imm: int = 0) -> int:
    """One lane of ALU ``op``: A, B (or the REQ multiplier M), the REQ shift lane ``s``, the
    instruction immediate; signed int32 in, signed int32 out. XALU operations are 8 + XAluOp
    (XDIV, XSQRT). Op 7 and 10..15 are no operation: the RTL documents that they return A; a
    lane with an operand error (B = 0 for DIV, B < 0 for SQRT) returns 0."""
    if op == XDIV:
        if b == 0:
            return 0
        q = abs(a) // abs(b)
        return s32(q if (a < 0) == (b < 0) else -q)
    if op == XSQRT:
        return math.isqrt(b) if b >= 0 else 0
    if op == AluOp.ADD:
        return s32(a + b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MUL:
        return s32(a * b)
    if op == AluOp.SHR:
        sh = b & 31
        return a if sh == 0 else s32((a + (1 << (sh - 1))) >> sh)
    if op == AluOp.MOV:
        return b
    if op == AluOp.REQ:
        zp, lo, hi = isa.req_fields(imm)
        sh = s & 63
        p = a * b
        r = p if sh == 0 else (p + (1 << (sh - 1))) >> sh
        return min(max(r + zp, lo), hi)
    return a


def pack32(lanes: list[int]) -> int:
    return sum((v & 0xFFFF_FFFF) << (32 * i) for i, v in enumerate(lanes))


def unpack32(v: int, n: int) -> list[int]:
    return [s32(v >> (32 * i)) for i in range(n)]


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        self.n = len(dut.a) // 32
        self.checked = 0
        dut.en.value = 1

    async def check(self, op: int, a: list[int], b: list[int], s: list[int] | None = None,
                    imm: int = 0) -> None:
        """Apply one set of operands and compare every lane with the reference."""
        s = s or [0] * self.n
        d = self.dut
        d.op.value = op
        d.a.value = pack32(a)
        d.b.value = pack32(b)
        d.s_row.value = pack32(s)
        d.imm.value = imm & 0xFF_FFFF
        await Timer(1, "ns")
        got = unpack32(int(d.result.value), self.n)
        exp = [alu_ref(op, a[i], b[i], s[i], imm) for i in range(self.n)]
        flags = (int(d.div_zero.value), int(d.neg_sqrt.value))
        want = (int(op == XDIV and 0 in b), int(op == XSQRT and min(b) < 0))
        assert flags == want, f"op {op} a={a} b={b}: (div_zero, neg_sqrt) {flags}, expected {want}"
        for i in range(self.n):
            assert got[i] == exp[i], (
                f"op {op} lane {i}: a={a[i]} b={b[i]} s={s[i]:#x} imm={imm & 0xFFFFFF:#x}: "
                f"result {got[i]}, expected {exp[i]}")
        self.checked += 1


def rand32(rng: random.Random) -> int:
    """A random int32, often an edge value or a small one."""
    r = rng.random()
    if r < 0.25:
        return rng.choice(EDGE32)
    if r < 0.45:
        return rng.randint(-300, 300)
    return s32(rng.getrandbits(32))


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_basic_ops(dut) -> None:
    """ADD, MAX, MIN, MUL, MOV (and the non-operation 7) with edge and random lanes."""
    tb = TB(dut)
    rng = random.Random(11)
    n = tb.n
    for op in (AluOp.ADD, AluOp.MAX, AluOp.MIN, AluOp.MUL, AluOp.MOV, 7):
        for ea in EDGE32:                     # every edge value against a row of edge values
            b = [rng.choice(EDGE32) for _ in range(n)]
            await tb.check(op, [ea] * n, b)
        for _ in range(150):
            await tb.check(op, [rand32(rng) for _ in range(n)], [rand32(rng) for _ in range(n)])
    dut._log.info("basic ops: %d rows checked", tb.checked)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_shr(dut) -> None:
    """SHR rounds half up with every shift 0..31, only B[4:0] counts, no 32-bit overflow."""
    tb = TB(dut)
    rng = random.Random(12)
    n = tb.n
    for sh in range(32):
        a = [rng.choice(EDGE32) if i % 2 else rand32(rng) for i in range(n)]
        hi_bits = [rng.getrandbits(27) << 5 for _ in range(n)]   # ignored upper bits of B
        await tb.check(AluOp.SHR, a, [s32(h | sh) for h in hi_bits])
        await tb.check(AluOp.SHR, [INT32_MAX] * n, [sh] * n)     # A + 2^(s-1) beyond int32
        await tb.check(AluOp.SHR, [INT32_MIN] * n, [sh] * n)
    for _ in range(150):
        await tb.check(AluOp.SHR, [rand32(rng) for _ in range(n)], [rand32(rng) for _ in range(n)])
    # ties: (2k+1) * 2^(s-1) rounds up (towards +infinity) for both signs
    ties = [3, -3, 5, -5, 1, -1, 6, -6]
    for sh in (1, 2):
        await tb.check(AluOp.SHR, [ties[i % 8] << (sh - 1) for i in range(n)], [sh] * n)


@cocotb.test(timeout_time=4, timeout_unit="ms")
async def test_req(dut) -> None:
    """REQ: 64-bit product with extreme A and M, shifts 0, 1, 31, 32, 62, 63 (and garbage in the
    upper shift bits), zp, clamping, lo > hi."""
    tb = TB(dut)
    rng = random.Random(13)
    n = tb.n
    extremes = [INT32_MIN, INT32_MAX, -1, 0, 1, 1 << 30, (1 << 31) - 1, -(1 << 30)]
    imms = [isa.req_imm(0), isa.req_imm(-3, -128, 127), isa.req_imm(127, -128, 127),
            isa.req_imm(-128, -128, 127), isa.req_imm(5, 0, 100), isa.req_imm(0, 50, -50),
            isa.req_imm(-7, 127, -128), isa.req_imm(0, -128, -128), isa.req_imm(1, 10, 10)]
    for sh in (0, 1, 2, 31, 32, 33, 61, 62, 63):
        for imm in imms:
            a = [rng.choice(extremes) for _ in range(n)]
            m = [rng.choice(extremes) for _ in range(n)]
            s = [s32((rng.getrandbits(26) << 6) | sh) for _ in range(n)]
            await tb.check(AluOp.REQ, a, m, s, imm)
        # A = M = -2^31: p = 2^62, and with s = 63 the rounding sum 2^63 does not fit int64
        await tb.check(AluOp.REQ, [INT32_MIN] * n, [INT32_MIN] * n, [sh] * n, isa.req_imm(0))
        await tb.check(AluOp.REQ, [INT32_MIN] * n, [INT32_MAX] * n, [sh] * n, isa.req_imm(0))
    for _ in range(400):     # realistic requantization parameters and random ones
        a = [rand32(rng) for _ in range(n)]
        if rng.random() < 0.5:
            m = [rng.randint(1 << 30, (1 << 31) - 1) for _ in range(n)]
            s = [rng.randint(20, 45) for _ in range(n)]
        else:
            m = [rand32(rng) for _ in range(n)]
            s = [s32(rng.getrandbits(32)) for _ in range(n)]
        zp, lo, hi = (rng.randint(-128, 127) for _ in range(3))
        await tb.check(AluOp.REQ, a, m, s, isa.req_imm(zp, lo, hi))
    dut._log.info("REQ: %d rows checked", tb.checked)


@cocotb.test(timeout_time=4, timeout_unit="ms")
async def test_xalu(dut) -> None:
    """XALU DIV: truncation toward zero for every sign combination, -2^31 / -1 (wraps), B = +-1,
    random and edge lanes; SQRT: 0, 1, every k^2 - 1, k^2 around the powers of two, 2^31 - 1 and
    random values; the operand errors flag only their own operation (B = 0 lanes for DIV, B < 0
    for SQRT), and the unused XALU operations 10..15 return A."""
    tb = TB(dut)
    rng = random.Random(14)
    n = tb.n
    nonzero = [v for v in EDGE32 if v]
    for ea in EDGE32:
        await tb.check(XDIV, [ea] * n, [rng.choice(nonzero) for _ in range(n)])
    await tb.check(XDIV, [INT32_MIN] * n, [-1] * n)
    signs_a, signs_b = [7, -7, 7, -7, 6, -6, 1, -1], [2, 2, -2, -2, 4, 4, 3, 3]
    for k in (0, 4):                          # every sign combination, with and without rest
        await tb.check(XDIV, [signs_a[(i + k) % 8] for i in range(n)],
                       [signs_b[(i + k) % 8] for i in range(n)])
    for _ in range(300):
        b = [rand32(rng) or 1 for _ in range(n)]
        if rng.random() < 0.3:
            b = [rng.randint(1, 4000) * rng.choice((1, -1)) for _ in range(n)]
        await tb.check(XDIV, [rand32(rng) for _ in range(n)], b)
    roots = [0, 1, 2, 3, 4, INT32_MAX, INT32_MAX - 1]
    for k in range(1, 46341, 997):
        roots += [k * k - 1, k * k, k * k + 1]
    for p in range(1, 16):
        k = 1 << p
        roots += [k * k - 1, k * k, k * k + 1]
    roots = [r for r in roots if 0 <= r <= INT32_MAX]
    for i in range(0, len(roots), n):
        b = (roots[i:i + n] + roots[:n])[:n]
        await tb.check(XSQRT, [rand32(rng) for _ in range(n)], b)
    for _ in range(200):
        await tb.check(XSQRT, [rand32(rng) for _ in range(n)],
                       [rng.randint(0, INT32_MAX) for _ in range(n)])
    # operand errors: one bad lane flags the row; the other operation ignores it
    for lane in range(n):
        b = [rng.randint(1, 1000) for _ in range(n)]
        b[lane] = 0
        await tb.check(XDIV, [rand32(rng) for _ in range(n)], b)
        await tb.check(XSQRT, [rand32(rng) for _ in range(n)], b)
        b[lane] = rng.choice([-1, INT32_MIN, -12345])
        await tb.check(XSQRT, [rand32(rng) for _ in range(n)], b)
        await tb.check(XDIV, [rand32(rng) for _ in range(n)], b)
    for op in range(10, 16):
        await tb.check(op, [rand32(rng) for _ in range(n)], [0] * n)
    dut._log.info("XALU: %d rows checked", tb.checked)


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def test_disabled(dut) -> None:
    """Without en the unit computes nothing: result and both flags are 0 for every operation,
    including a DIV by zero and a SQRT of a negative lane; with en again the row is computed."""
    tb = TB(dut)
    rng = random.Random(5)
    n = tb.n
    for op in (AluOp.ADD, AluOp.MUL, AluOp.MOV, AluOp.REQ, 7, XDIV, XSQRT, 10):
        a = [rand32(rng) for _ in range(n)]
        b = [rng.choice((0, -1, -7, rand32(rng))) for _ in range(n)]
        dut.en.value = 0
        dut.op.value = op
        dut.a.value = pack32(a)
        dut.b.value = pack32(b)
        dut.s_row.value = pack32([rng.randint(0, 63) for _ in range(n)])
        dut.imm.value = rng.getrandbits(24)
        await Timer(1, "ns")
        got = (int(dut.result.value), int(dut.div_zero.value), int(dut.neg_sqrt.value))
        assert got == (0, 0, 0), f"op {op} with en low: result, div_zero, neg_sqrt = {got}"
        dut.en.value = 1
        await tb.check(op, a, b)

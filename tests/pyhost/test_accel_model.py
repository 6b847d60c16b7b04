"""The accelerator's functional model against docs/isa.md: every instruction, error and rule.

Each instruction is checked against hand-computed values and against `Ref`, a deliberately naive
sequential reference written from the ISA text (pure Python integers, one loop iteration and one
lane at a time), with hypothesis drawing the fields; REQ is also checked against the compiler's
requantizer.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.quantize.requant import quantize_multiplier, requantize
from pyhost.accel.model import AccelModel
from pyhost.spec import isa, regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn, Opcode

SMALL = AccelConfig(n=4, inp_depth=64, wgt_depth=16, acc_depth=64, queue_depth=2)
SLOTS0 = [0] * isa.NUM_SLOTS
I32 = (-(1 << 31), (1 << 31) - 1)
HYP = settings(max_examples=150, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def s32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v & 0x8000_0000 else v


def s8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v & 0x80 else v


def random_model(cfg: AccelConfig, seed: int) -> AccelModel:
    """A model whose scratchpads hold random values, extremes included."""
    rng = np.random.default_rng(seed)
    m = AccelModel(cfg)
    m.inp[:] = rng.integers(-128, 128, m.inp.shape)
    m.wgt[:] = rng.integers(-128, 128, m.wgt.shape)
    m.acc[:] = rng.integers(*I32, m.acc.shape, endpoint=True)
    m.acc.reshape(-1)[rng.integers(0, m.acc.size, m.acc.size // 8)] = I32[0]
    m.acc.reshape(-1)[rng.integers(0, m.acc.size, m.acc.size // 8)] = I32[1]
    return m


def run1(m: AccelModel, insn: Insn, mem: bytearray, slots: list[int] | None = None):
    return m.execute([insn, isa.end()], mem, slots or SLOTS0)


# --- the reference -------------------------------------------------------------------------------

class Ref:
    """docs/isa.md, literally: Python lists, one iteration and one lane at a time."""

    def __init__(self, m: AccelModel) -> None:
        self.cfg = m.cfg
        self.inp = m.inp.astype(int).tolist()
        self.wgt = m.wgt.astype(int).tolist()
        self.acc = m.acc.astype(int).tolist()

    def same_as(self, m: AccelModel) -> bool:
        return (self.inp == m.inp.astype(int).tolist() and self.wgt == m.wgt.astype(int).tolist()
                and self.acc == m.acc.astype(int).tolist())

    @staticmethod
    def loop(base: int, outer: int, inner: int, so: int, si: int) -> list[int]:
        return [base + o * so + i * si for o in range(outer) for i in range(inner)]

    def gemm(self, f: dict[str, int]) -> AccelError:
        g = {k: f.get(k, 0) for k in ("acc_base", "inp_base", "wgt_base", "outer", "inner",
                                      "acc_so", "acc_si", "inp_so", "inp_si", "reset")}
        a_rows = self.loop(g["acc_base"], g["outer"], g["inner"], g["acc_so"], g["acc_si"])
        x_rows = self.loop(g["inp_base"], g["outer"], g["inner"], g["inp_so"], g["inp_si"])
        if a_rows and (max(a_rows) >= self.cfg.acc_depth or max(x_rows) >= self.cfg.inp_depth
                       or g["wgt_base"] >= self.cfg.wgt_depth):
            return AccelError.SP_RANGE
        n = self.cfg.n
        for a, xr in zip(a_rows, x_rows, strict=True):
            x = self.inp[xr]
            w = self.wgt[g["wgt_base"]]
            self.acc[a] = [s32((0 if g["reset"] else self.acc[a][j])
                               + sum(x[k] * w[k][j] for k in range(n))) for j in range(n)]
        return AccelError.NONE

    def dw(self, f: dict[str, int]) -> AccelError:
        g = {k: f.get(k, 0) for k in ("acc_base", "inp_base", "wgt_base", "outer", "inner",
                                      "acc_so", "acc_si", "inp_so", "inp_si", "reset", "taps",
                                      "tap_w", "tap_pitch")}
        off = [(k // g["tap_w"]) * g["tap_pitch"] + k % g["tap_w"] for k in range(g["taps"])]
        a_rows = self.loop(g["acc_base"], g["outer"], g["inner"], g["acc_so"], g["acc_si"])
        x_rows = self.loop(g["inp_base"], g["outer"], g["inner"], g["inp_so"], g["inp_si"])
        if a_rows and (max(a_rows) >= self.cfg.acc_depth
                       or max(x_rows) + off[-1] >= self.cfg.inp_depth
                       or g["wgt_base"] >= self.cfg.wgt_depth):
            return AccelError.SP_RANGE
        n = self.cfg.n
        for a, r in zip(a_rows, x_rows, strict=True):
            w = self.wgt[g["wgt_base"]]
            self.acc[a] = [s32((0 if g["reset"] else self.acc[a][j])
                               + sum(self.inp[r + off[k]][j] * w[k][j]
                                     for k in range(g["taps"]))) for j in range(n)]
        return AccelError.NONE

    def alu(self, f: dict[str, int]) -> AccelError:
        g = {k: f.get(k, 0) for k in ("alu_op", "use_imm", "dst_base", "src_base", "outer",
                                      "inner", "dst_so", "dst_si", "src_so", "src_si", "imm")}
        op = g["alu_op"]
        d_rows = self.loop(g["dst_base"], g["outer"], g["inner"], g["dst_so"], g["dst_si"])
        s_rows = self.loop(g["src_base"], g["outer"], g["inner"], g["src_so"], g["src_si"])
        touched = d_rows + ([] if g["use_imm"] else s_rows)
        if op == AluOp.REQ:
            touched += [s + 1 for s in s_rows]
        if touched and max(touched) >= self.cfg.acc_depth:
            return AccelError.SP_RANGE
        zp, lo, hi = isa.req_fields(g["imm"])
        for d, s in zip(d_rows, s_rows, strict=True):
            out = []
            for j in range(self.cfg.n):
                a = self.acc[d][j]
                b = g["imm"] if g["use_imm"] else self.acc[s][j]
                if op == AluOp.ADD:
                    r = a + b
                elif op == AluOp.MAX:
                    r = max(a, b)
                elif op == AluOp.MIN:
                    r = min(a, b)
                elif op == AluOp.MUL:
                    r = a * b
                elif op == AluOp.SHR:
                    sh = b & 31
                    r = (a + (1 << (sh - 1))) >> sh if sh else a
                elif op == AluOp.MOV:
                    r = b
                else:
                    sh = self.acc[s + 1][j] & 63
                    y = ((a * b + (1 << (sh - 1))) >> sh if sh else a * b) + zp
                    r = min(max(y, lo), hi)
                out.append(s32(r))
            self.acc[d] = out
        return AccelError.NONE

    def _mem_fields(self, f: dict[str, int], slots: list[int]):
        g = {k: f.get(k, 0) for k in ("buf", "slot", "sp_base", "offset", "y_size", "x_size",
                                      "y_stride", "pad_top", "pad_bottom", "pad_left",
                                      "pad_right", "pad_value")}
        e = isa.element_bytes(Buffer(g["buf"]), self.cfg.n)
        base = slots[g["slot"]] + g["offset"]
        return g, e, base

    def element_addr(self, base: int, y: int, x: int, stride: int, e: int) -> int:
        return (base + (y * stride + x) * e) % (1 << 32)

    def load(self, f: dict[str, int], mem: bytearray, slots: list[int]) -> AccelError:
        g, e, base = self._mem_fields(f, slots)
        n, buf = self.cfg.n, Buffer(g["buf"])
        width = g["pad_left"] + g["x_size"] + g["pad_right"]
        height = g["pad_top"] + g["y_size"] + g["pad_bottom"]
        depth = {Buffer.INP: self.cfg.inp_depth, Buffer.WGT: self.cfg.wgt_depth}.get(
            buf, self.cfg.acc_depth)
        if width * height and g["sp_base"] + width * height - 1 >= depth:
            return AccelError.SP_RANGE
        if base % (1 << 32) % e:
            return AccelError.MISALIGNED
        for y in range(g["y_size"]):
            for x in range(g["x_size"]):
                a = self.element_addr(base, y, x, g["y_stride"], e)
                if a + e > len(mem):
                    return AccelError.LOAD_BUS
        pv = g["pad_value"]
        for r in range(height):
            for c in range(width):
                row = g["sp_base"] + r * width + c
                y, x = r - g["pad_top"], c - g["pad_left"]
                inside = 0 <= y < g["y_size"] and 0 <= x < g["x_size"]
                raw = bytes(mem[(a := self.element_addr(base, y, x, g["y_stride"], e)):a + e]) \
                    if inside else None
                if buf == Buffer.INP:
                    self.inp[row] = [s8(b) for b in raw] if raw else [pv] * n
                elif buf == Buffer.WGT:
                    flat = [s8(b) for b in raw] if raw else [pv] * (n * n)
                    self.wgt[row] = [flat[k * n:(k + 1) * n] for k in range(n)]
                elif buf == Buffer.ACC:
                    self.acc[row] = [int.from_bytes(raw[4 * j:4 * j + 4], "little", signed=True)
                                     for j in range(n)] if raw else [pv] * n
                else:
                    self.acc[row] = [s8(b) for b in raw] if raw else [pv] * n
        return AccelError.NONE

    def store(self, f: dict[str, int], mem: bytearray, slots: list[int]) -> AccelError:
        g, e, base = self._mem_fields(f, slots)
        y_size, x_size = g["y_size"], g["x_size"]
        if y_size * x_size and g["sp_base"] + y_size * x_size - 1 >= self.cfg.acc_depth:
            return AccelError.SP_RANGE
        if base % (1 << 32) % e:
            return AccelError.MISALIGNED
        for y in range(y_size):
            for x in range(x_size):
                if self.element_addr(base, y, x, g["y_stride"], e) + e > len(mem):
                    return AccelError.STORE_BUS
        for y in range(y_size):
            for x in range(x_size):
                lanes = self.acc[g["sp_base"] + y * x_size + x]
                a = self.element_addr(base, y, x, g["y_stride"], e)
                if g["buf"] == Buffer.ACC:
                    mem[a:a + e] = b"".join((v & 0xFFFF_FFFF).to_bytes(4, "little")
                                            for v in lanes)
                else:
                    mem[a:a + e] = bytes(v & 0xFF for v in lanes)
        return AccelError.NONE


def check_against_ref(m: AccelModel, insn: Insn, mem: bytearray, slots: list[int]) -> None:
    """Run one instruction on the model and on the reference; compare everything."""
    ref = Ref(m)
    ref_mem = bytearray(mem)
    f = dict(insn.fields)
    want = {Opcode.GEMM: lambda: ref.gemm(f), Opcode.ALU: lambda: ref.alu(f),
            Opcode.DW: lambda: ref.dw(f),
            Opcode.LOAD: lambda: ref.load(f, ref_mem, slots),
            Opcode.STORE: lambda: ref.store(f, ref_mem, slots)}[insn.op]()
    before = (m.inp.copy(), m.wgt.copy(), m.acc.copy(), bytes(mem))
    r = run1(m, insn, mem, slots)
    assert r.error == want, f"{insn}: model {r.error.name}, reference {want.name}"
    if want == AccelError.NONE:
        assert r.err_pc == 0
        assert ref.same_as(m), f"{insn}: scratchpads differ from the reference"
        assert mem == ref_mem, f"{insn}: card memory differs from the reference"
    else:
        assert r.err_pc == 0, f"{insn}: err_pc {r.err_pc}, expected 0"
        # The model has no effect when an instruction fails its checks.
        for a, b in zip(before, (m.inp, m.wgt, m.acc, bytes(mem)), strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b)) if not isinstance(a, bytes) \
                else a == b, f"{insn}: state changed by a failing instruction"


# --- GEMM ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [4, 8, 16])
def test_gemm_is_a_matmul(n: int) -> None:
    """GEMM over consecutive rows is x @ W with int32 accumulation, reset or accumulating."""
    cfg = AccelConfig(n=n, inp_depth=256, wgt_depth=4, acc_depth=256)
    m = random_model(cfg, n)
    x, w = m.inp[:200].astype(np.int64), m.wgt[2].astype(np.int64)
    acc0 = m.acc[:200].astype(np.int64)
    r = m.execute([isa.gemm(acc_base=0, inp_base=0, wgt_base=2, outer=10, inner=20, acc_so=20,
                            acc_si=1, inp_so=20, inp_si=1), isa.end()], bytearray(64), SLOTS0)
    assert r.error == AccelError.NONE
    want = ((acc0 + x @ w + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    assert np.array_equal(m.acc[:200], want), "accumulating GEMM != acc + x @ W (wrapped)"
    m.execute([isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=2, outer=1, inner=200,
                        acc_si=1, inp_si=1), isa.end()], bytearray(64), SLOTS0)
    assert np.array_equal(m.acc[:200], x @ w), "GEMM with reset != x @ W"
    assert r.counters["macs"] == 200 * n * n


def test_gemm_extremes_and_wrap() -> None:
    """-128 x -128 everywhere: the largest products; accumulating past 2**31 wraps."""
    m = AccelModel(SMALL)
    m.inp[:] = -128
    m.wgt[:] = -128
    m.acc[0] = (1 << 31) - 1
    m.execute([isa.gemm(acc_base=0, outer=1, inner=1), isa.end()], bytearray(64), SLOTS0)
    assert m.acc[0].tolist() == [s32((1 << 31) - 1 + 4 * 128 * 128)] * 4


def test_gemm_hazards_inside_one_instruction() -> None:
    """acc_si = 0 accumulates every inner iteration into one row; with reset the last wins."""
    m = random_model(SMALL, 1)
    x, w = m.inp.astype(np.int64), m.wgt[3].astype(np.int64)
    acc5 = m.acc[5].astype(np.int64)
    m.execute([isa.gemm(acc_base=5, inp_base=10, wgt_base=3, outer=1, inner=7, acc_si=0,
                        inp_si=2), isa.end()], bytearray(64), SLOTS0)
    want = acc5 + sum(x[10 + 2 * i] @ w for i in range(7))
    assert m.acc[5].tolist() == [s32(v) for v in want]
    m.execute([isa.gemm(reset=1, acc_base=5, inp_base=10, wgt_base=3, outer=3, inner=7,
                        acc_si=0, inp_so=1, inp_si=2), isa.end()], bytearray(64), SLOTS0)
    assert m.acc[5].tolist() == (x[12 + 12] @ w).tolist(), "reset: the last iteration wins"


gemm_fields = st.fixed_dictionaries({
    "reset": st.integers(0, 1), "acc_base": st.integers(0, 70), "inp_base": st.integers(0, 70),
    "wgt_base": st.integers(0, 17), "outer": st.integers(0, 5), "inner": st.integers(0, 6),
    "acc_so": st.integers(0, 12), "acc_si": st.integers(0, 4), "inp_so": st.integers(0, 12),
    "inp_si": st.integers(0, 4)})


@HYP
@given(f=gemm_fields, seed=st.integers(0, 1 << 16))
def test_gemm_property(f: dict[str, int], seed: int) -> None:
    """Any GEMM (strides, repeated rows, out of range) does what the sequential loop does."""
    check_against_ref(random_model(SMALL, seed), isa.gemm(**f), bytearray(64), SLOTS0)


# --- DW ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [4, 8, 16])
def test_dw_is_a_depthwise_convolution(n: int) -> None:
    """DW over a padded image tile in INP (rows = pixels, lanes = channels) with a 3x3 kernel,
    as many whole kernel rows per instruction as N lanes of taps allow (N = 8: 6 taps, then 3),
    is the depthwise convolution of numpy, per channel; MACs count taps x N per iteration."""
    h, w, k = 6, 9, 3
    pitch = w + (k - w) % n                       # pitch = kw (mod N): taps over kernel rows
    cfg = AccelConfig(n=n, inp_depth=256, wgt_depth=8, acc_depth=256)
    m = random_model(cfg, 100 + n)
    img = m.inp[:h * pitch].astype(np.int64).reshape(h, pitch, n)
    kern = np.random.default_rng(n).integers(-128, 128, (k, k, n))
    oh, ow = h - k + 1, w - k + 1
    geo = dict(acc_base=0, outer=oh, inner=ow, acc_so=ow, acc_si=1, inp_so=pitch, inp_si=1)
    per = n // k                                   # kernel rows per instruction
    prog = []
    for p, ky in enumerate(range(0, k, per)):
        rows = kern[ky:ky + per].reshape(-1, n)
        m.wgt[1 + p] = 0
        m.wgt[1 + p, :rows.shape[0]] = rows
        prog.append(isa.dw(reset=int(p == 0), inp_base=ky * pitch, wgt_base=1 + p,
                           taps=rows.shape[0], tap_w=k, tap_pitch=pitch, **geo))
    r = m.execute(prog + [isa.end()], bytearray(64), SLOTS0)
    assert r.error == AccelError.NONE
    assert len(prog) == {4: 3, 8: 2, 16: 1}[n]
    want = sum(img[dy:dy + oh, dx:dx + ow] * kern[dy, dx] for dy in range(k) for dx in range(k))
    assert np.array_equal(m.acc[:oh * ow].reshape(oh, ow, n), want)
    assert r.counters["macs"] == oh * ow * k * k * n


def test_dw_extremes_wrap_and_unused_taps() -> None:
    """-128 x -128 on every tap wraps past 2**31; tile rows beyond taps never count."""
    m = AccelModel(SMALL)
    m.inp[:] = -128
    m.wgt[:] = -128
    m.acc[0] = (1 << 31) - 1
    m.execute([isa.dw(acc_base=0, outer=1, inner=1, taps=3, tap_w=3), isa.end()],
              bytearray(64), SLOTS0)
    assert m.acc[0].tolist() == [s32((1 << 31) - 1 + 3 * 128 * 128)] * 4


dw_fields = st.fixed_dictionaries({
    "reset": st.integers(0, 1), "acc_base": st.integers(0, 70), "inp_base": st.integers(0, 60),
    "wgt_base": st.integers(0, 17), "outer": st.integers(0, 4), "inner": st.integers(0, 5),
    "acc_so": st.integers(0, 12), "acc_si": st.integers(0, 3), "inp_so": st.integers(0, 9),
    "inp_si": st.integers(0, 3), "taps": st.integers(1, 4), "tap_w": st.integers(1, 4),
    "tap_pitch": st.sampled_from([0, 1, 5, 6, 9])})


@HYP
@given(f=dw_fields, seed=st.integers(0, 1 << 16))
def test_dw_property(f: dict[str, int], seed: int) -> None:
    """Any legal DW (strides, repeated rows, taps over kernel rows, out of range) does what the
    sequential loop does; an illegal one (the bank rule) is ILLEGAL_FIELD before it runs."""
    insn = isa.dw(**f)
    if isa.check_static(insn, SMALL.n) != AccelError.NONE:
        assert not isa.dw_banks_ok(f["taps"], f["tap_w"], f["tap_pitch"], SMALL.n)
        r = run1(AccelModel(SMALL), insn, bytearray(64))
        assert (r.error, r.err_pc) == (AccelError.ILLEGAL_FIELD, 0)
        return
    check_against_ref(random_model(SMALL, seed), insn, bytearray(64), SLOTS0)


def test_dw_between_gemm_batches() -> None:
    """A DW between GEMMs (which the model batches) sees their results and they see its: the
    same state as with batching off."""
    prog = [isa.gemm(reset=1, acc_base=0, inp_base=0, wgt_base=1, outer=2, inner=8, acc_so=8,
                     acc_si=1, inp_so=8, inp_si=1),
            isa.dw(acc_base=4, inp_base=3, wgt_base=2, outer=1, inner=8, acc_si=1, inp_si=1,
                   taps=4, tap_w=2, tap_pitch=6),
            isa.gemm(acc_base=0, inp_base=16, wgt_base=3, outer=2, inner=8, acc_so=8,
                     acc_si=1, inp_so=8, inp_si=1), isa.end()]
    states = []
    for batch in (True, False):
        m = random_model(SMALL, 5)
        m.batch_gemms = batch
        assert m.execute(prog, bytearray(64), SLOTS0).error == AccelError.NONE
        states.append(m.acc.copy())
    assert np.array_equal(*states)


# --- ALU -----------------------------------------------------------------------------------------

def alu_on(a: list[int], b: list[int] | None, op: AluOp, imm: int | None = None,
           shift: list[int] | None = None) -> list[int]:
    """One ALU row operation on a 4-lane model: A in row 0, B in row 1, shifts in row 2."""
    m = AccelModel(SMALL)
    m.acc[0] = a
    if b is not None:
        m.acc[1] = b
    if shift is not None:
        m.acc[2] = shift
    insn = isa.alu(op, imm, dst_base=0, src_base=1, outer=1, inner=1) if op != AluOp.REQ \
        else Insn(Opcode.ALU, {"alu_op": AluOp.REQ, "imm": imm or 0, "dst_base": 0,
                               "src_base": 1, "outer": 1, "inner": 1})
    r = run1(m, insn, bytearray(64))
    assert r.error == AccelError.NONE, r
    return m.acc[0].tolist()


MAX32, MIN32 = (1 << 31) - 1, -(1 << 31)


def test_alu_add_max_min_mul_mov() -> None:
    """Hand-computed lanes: wrap-around, signed compares, low half of the product, MOV."""
    a = [MAX32, MIN32, -5, 7]
    b = [1, -1, 3, -7]
    assert alu_on(a, b, AluOp.ADD) == [MIN32, MAX32, -2, 0]
    assert alu_on(a, b, AluOp.MAX) == [MAX32, -1, 3, 7]
    assert alu_on(a, b, AluOp.MIN) == [1, MIN32, -5, -7]
    assert alu_on([0x10000, MIN32, -3, 46341], [0x10000, -1, 5, 46341], AluOp.MUL) == \
        [0, MIN32, -15, s32(46341 * 46341)]
    assert alu_on(a, b, AluOp.MOV) == b


def test_alu_shr_rounds() -> None:
    """SHR: (A + 2**(s-1)) >> s on B[4:0]; s = 0 keeps A; the sum does not overflow."""
    assert alu_on([5, -5, 6, -6], [1, 1, 1, 1], AluOp.SHR) == [3, -2, 3, -3]
    assert alu_on([7, 7, 7, 7], [0, 32, 33, -31], AluOp.SHR) == [7, 7, 4, 4]  # low 5 bits
    assert alu_on([MAX32, MIN32, MAX32, -1], [31, 31, 1, 31], AluOp.SHR) == [1, -1, 1 << 30, 0]


def test_alu_immediate_is_sign_extended() -> None:
    """use_imm: the 24-bit immediate, sign-extended, in every lane."""
    a = [10, 20, 30, 40]
    assert alu_on(a, None, AluOp.ADD, imm=-1) == [9, 19, 29, 39]
    assert alu_on(a, None, AluOp.MOV, imm=-(1 << 23)) == [-(1 << 23)] * 4
    assert alu_on(a, None, AluOp.MOV, imm=(1 << 23) - 1) == [(1 << 23) - 1] * 4
    assert alu_on([-7, 7, 100, -100], None, AluOp.SHR, imm=33) == [-3, 4, 50, -50]
    assert alu_on(a, None, AluOp.MAX, imm=25) == [25, 25, 30, 40]


def test_req_by_hand() -> None:
    """REQ: 64-bit product, rounding shift on the low 6 bits of the shift row, zp, clamp with max
    first (lo > hi gives hi); shift 63 of the largest product is exact (1, not -1)."""
    imm = isa.req_imm(zp=3, lo=-128, hi=127)
    assert alu_on([100, -100, 1000, 1 << 20], [1 << 30] * 4, AluOp.REQ, imm,
                  [31, 31, 31, 64 + 31]) == [53, -47, 127, 127]
    assert alu_on([5, -5, 5, 0], [1, 1, 1, 1], AluOp.REQ, isa.req_imm(0, -128, 127),
                  [0, 0, 1, 0]) == [5, -5, 3, 0]
    assert alu_on([0, 50, -50, 0], [0, 1, 1, 0], AluOp.REQ, isa.req_imm(0, 10, -10),
                  [0, 0, 0, 0]) == [-10] * 4
    assert alu_on([MIN32, MIN32, MAX32, MIN32], [MIN32, MIN32, MAX32, MAX32], AluOp.REQ,
                  isa.req_imm(0, -128, 127), [63, 62, 63, 63]) == [1, 1, 0, 0]


def test_req_matches_the_compiler_requantizer() -> None:
    """LOAD.ACC the accumulators and per-lane M / shift rows, REQ, STORE.ACC8: the bytes equal
    compiler.quantize.requant.requantize for realistic multipliers and for extreme ones."""
    rng = np.random.default_rng(7)
    cfg = AccelConfig(n=8, acc_depth=512)
    rows = 256
    accs = rng.integers(-(1 << 31) + 1, 1 << 31, (rows, 8), dtype=np.int64)
    accs[:16] = rng.integers(-5000, 5000, (16, 8))
    for case, (lo, hi, zp) in enumerate([(-128, 127, 0), (-128, 127, -7), (0, 127, -128),
                                         (-20, 90, 5)]):
        scales = np.exp(rng.uniform(np.log(1e-9), np.log(0.9), 8))
        if case == 3:
            scales[:3] = [2.0 ** -31, 0.999, 1e-12]
        pairs = [quantize_multiplier(float(s)) for s in scales]
        mult = np.array([p[0] for p in pairs], np.int64)
        shift = np.array([p[1] for p in pairs], np.int64)
        mem = bytearray(1 << 16)
        mem[0:rows * 32] = accs.astype("<i4").tobytes()
        mem[0x8000:0x8020] = mult.astype("<i4").tobytes()
        mem[0x8020:0x8040] = (shift | (rng.integers(0, 1 << 20, 8) << 6)).astype("<i4").tobytes()
        m = AccelModel(cfg)
        r = m.execute([
            isa.load(Buffer.ACC, y_size=1, x_size=rows, y_stride=rows),
            isa.load(Buffer.ACC, sp_base=300, offset=0x8000, y_size=1, x_size=2, y_stride=2,
                     push_next=1),
            isa.req(zp=zp, lo=lo, hi=hi, dst_base=0, src_base=300, outer=rows, inner=1, dst_so=1,
                    pop_prev=1, push_next=1),
            isa.store(Buffer.ACC8, offset=0xC000, y_size=1, x_size=rows, y_stride=rows,
                      pop_prev=1),
            isa.end()], mem, SLOTS0)
        assert r.error == AccelError.NONE, r
        got = np.frombuffer(bytes(mem[0xC000:0xC000 + rows * 8]), np.int8).reshape(rows, 8)
        want = requantize(accs, mult, shift, zp, lo, hi).astype(np.int8)
        assert np.array_equal(got, want), f"case {case}: {np.argwhere(got != want)[:5]}"


alu_fields = st.fixed_dictionaries({
    "alu_op": st.sampled_from(list(AluOp)), "use_imm": st.integers(0, 1),
    "dst_base": st.integers(0, 66), "src_base": st.integers(0, 66),
    "outer": st.integers(0, 5), "inner": st.integers(0, 6), "dst_so": st.integers(0, 10),
    "dst_si": st.integers(0, 3), "src_so": st.integers(0, 10), "src_si": st.integers(0, 3),
    "imm": st.integers(-(1 << 23), (1 << 23) - 1)})


@HYP
@given(f=alu_fields, seed=st.integers(0, 1 << 16))
def test_alu_property(f: dict[str, int], seed: int) -> None:
    """Any ALU instruction (overlapping source and destination, repeated rows, reductions,
    every op with and without the immediate, out of range) equals the sequential loop."""
    if f["alu_op"] == AluOp.REQ:
        f["use_imm"] = 0
    m = random_model(SMALL, seed)
    if seed % 3 == 0:                        # small values: SHR/REQ shifts that do not zero all
        m.acc[:] = np.random.default_rng(seed).integers(-300, 300, m.acc.shape)
    check_against_ref(m, Insn(Opcode.ALU, {k: v for k, v in f.items() if v}), bytearray(64),
                      SLOTS0)


@pytest.mark.parametrize("op", [AluOp.ADD, AluOp.MAX, AluOp.MIN, AluOp.MOV, AluOp.MUL])
def test_alu_reductions(op: AluOp) -> None:
    """Pooling-style reductions (dst_si = 0 over a window of sources, windows overlapping
    across the outer loop) equal the sequential loop, at the default size."""
    cfg = AccelConfig()
    m = random_model(cfg, int(op))
    insn = isa.alu(op, dst_base=3000, src_base=0, outer=300, inner=9, dst_so=1, dst_si=0,
                   src_so=2, src_si=1)
    check_against_ref(m, insn, bytearray(64), SLOTS0)


# --- LOAD and STORE ------------------------------------------------------------------------------

def test_load_inp_padding_and_strides() -> None:
    """LOAD.INP: rows y_stride elements apart, padding rows/elements with pad_value; a row
    crossing a 4 KiB boundary is ordinary."""
    m = AccelModel(SMALL)
    mem = bytearray(8192)
    base = 4096 - 8                           # element-aligned, row 0 crosses 4 KiB
    for y in range(2):
        for x in range(3):
            a = base + (y * 5 + x) * 4
            mem[a:a + 4] = bytes([16 * y + 4 * x + k for k in range(4)])
    r = run1(m, isa.load(Buffer.INP, sp_base=2, offset=base, y_size=2, x_size=3, y_stride=5,
                         pad_top=1, pad_bottom=0, pad_left=1, pad_right=2, pad_value=-3), mem)
    assert r.error == AccelError.NONE and r.counters["bytes_loaded"] == 24
    tile = m.inp[2:2 + 3 * 6].reshape(3, 6, 4)
    assert (tile[0] == -3).all() and (tile[:, 0] == -3).all() and (tile[:, 4:] == -3).all()
    for y in range(2):
        for x in range(3):
            assert tile[1 + y, 1 + x].tolist() == [16 * y + 4 * x + k for k in range(4)]
    assert (m.inp[:2] == 0).all() and (m.inp[20:] == 0).all(), "rows outside the tile written"


def test_transposed_load_writes_blocks_transposed() -> None:
    """LOAD.INP transpose: memory rows N*Y + r at element x land as byte r of rows
    sp_base + (Y * x_size + x) * N + c (byte c of the memory element), rows outside untouched;
    a GEMM on the result is the product with the transposed matrix (features x tokens in
    memory, tokens x features as input rows)."""
    m = AccelModel(SMALL)
    n = SMALL.n
    rng = np.random.default_rng(3)
    mem = bytearray(rng.integers(0, 256, 8192, dtype=np.uint8).tobytes())
    base, y, x, stride = 4096 - 2 * n, 2 * n, 3, 5        # rows cross 4 KiB
    r = run1(m, isa.load(Buffer.INP, sp_base=3, offset=base, y_size=y, x_size=x,
                         y_stride=stride, transpose=1), mem)
    assert r.error == AccelError.NONE and r.counters["bytes_loaded"] == y * x * n
    arr = np.frombuffer(bytes(mem), np.int8)
    for yy in range(y):
        for xx in range(x):
            el = arr[base + (yy * stride + xx) * n:][:n]
            for c in range(n):
                assert m.inp[3 + (yy // n * x + xx) * n + c][yy % n] == el[c]
    assert (m.inp[:3] == 0).all() and (m.inp[3 + y * x:] == 0).all()
    # the same result from the round-robin scheduler as from the program-order path
    m2 = AccelModel(SMALL)
    m2.fast = False
    run1(m2, isa.load(Buffer.INP, sp_base=3, offset=base, y_size=y, x_size=x,
                      y_stride=stride, transpose=1), mem)
    assert np.array_equal(m.inp, m2.inp)


def test_load_wgt_layout_feeds_gemm() -> None:
    """LOAD.WGT puts byte k*N+n of the tile at W[k][n]; GEMM computes x @ W with it."""
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    x = rng.integers(-128, 128, 8, dtype=np.int8)
    mem = bytearray(4096)
    mem[64:128] = w.tobytes()
    mem[256:264] = x.tobytes()
    m = AccelModel()
    r = m.execute([isa.load(Buffer.WGT, sp_base=5, offset=64, y_size=1, x_size=1),
                   isa.load(Buffer.INP, sp_base=9, offset=256, y_size=1, x_size=1, push_next=1),
                   isa.gemm(reset=1, acc_base=4, inp_base=9, wgt_base=5, outer=1, inner=1,
                            pop_prev=1, push_next=1),
                   isa.store(Buffer.ACC, sp_base=4, offset=1024, y_size=1, x_size=1,
                             pop_prev=1),
                   isa.end()], mem, SLOTS0)
    assert r.error == AccelError.NONE
    assert np.array_equal(m.wgt[5], w)
    got = np.frombuffer(bytes(mem[1024:1056]), "<i4")
    assert got.tolist() == (x.astype(np.int64) @ w.astype(np.int64)).tolist()


def test_load_acc_and_acc8_store_acc_and_acc8() -> None:
    """ACC rows are little-endian int32 lanes; ACC8 loads sign-extend bytes and ACC8 stores keep
    the low byte; ACC padding fills lanes with the sign-extended pad_value."""
    m = AccelModel(SMALL)
    mem = bytearray(4096)
    vals = [0x12345680, -2, 127, -(1 << 31)]
    mem[0:16] = np.array(vals, "<i4").tobytes()
    mem[64:68] = bytes([0x80, 0x7F, 0xFF, 0x01])
    r = m.execute([
        isa.load(Buffer.ACC, sp_base=1, y_size=1, x_size=1, pad_right=1, pad_value=-2),
        isa.load(Buffer.ACC8, sp_base=3, offset=64, y_size=1, x_size=1),
        isa.end()], mem, SLOTS0)
    assert r.error == AccelError.NONE
    assert m.acc[1].tolist() == vals and m.acc[2].tolist() == [-2] * 4
    assert m.acc[3].tolist() == [-128, 127, -1, 1]
    r = m.execute([isa.store(Buffer.ACC8, sp_base=1, offset=128, y_size=1, x_size=3),
                   isa.store(Buffer.ACC, sp_base=3, offset=256, y_size=1, x_size=1),
                   isa.end()], mem, SLOTS0)
    assert r.error == AccelError.NONE and r.counters["bytes_stored"] == 12 + 16
    assert list(mem[128:140]) == [0x80, 0xFE, 0x7F, 0x00, 0xFE, 0xFE, 0xFE, 0xFE,
                                  0x80, 0x7F, 0xFF, 0x01]
    assert np.frombuffer(bytes(mem[256:272]), "<i4").tolist() == [-128, 127, -1, 1]


def test_zero_sizes_move_nothing_but_pad() -> None:
    """y_size or x_size 0 moves no bytes (no bus error even at a bad address); LOAD still writes
    its padding; STORE writes nothing."""
    m = AccelModel(SMALL)
    mem = bytearray(256)
    r = m.execute([isa.load(Buffer.INP, offset=1 << 20, y_size=0, x_size=3, pad_top=1,
                            pad_value=9),
                   isa.load(Buffer.ACC8, offset=1 << 20, sp_base=10, y_size=2, x_size=0,
                            pad_left=1, pad_value=-9),
                   isa.store(Buffer.ACC, offset=1 << 20, y_size=0, x_size=5),
                   isa.end()], mem, SLOTS0)
    assert r.error == AccelError.NONE
    assert (m.inp[0:3] == 9).all() and (m.inp[3] == 0).all()
    assert (m.acc[10:12] == -9).all() and (m.acc[12] == 0).all()
    assert r.counters["bytes_loaded"] == 0 and r.counters["bytes_stored"] == 0
    assert mem == bytearray(256)


def test_slots_and_address_wrap() -> None:
    """The address is SLOT[slot] + offset (+ row/element terms) modulo 2**32."""
    m = AccelModel(SMALL)
    mem = bytearray(4096)
    mem[0x100:0x104] = b"\x01\x02\x03\x04"
    slots = [0] * 16
    slots[7] = 0xFFFF_FF00
    slots[3] = 0x80
    r = m.execute([isa.load(Buffer.INP, slot=7, offset=0x200, y_size=1, x_size=1),
                   isa.load(Buffer.INP, slot=3, sp_base=1, offset=0x80, y_size=1, x_size=1),
                   isa.load(Buffer.INP, slot=7, sp_base=2, offset=0x100, y_size=2, x_size=1,
                            y_stride=0x40),   # row 1 of this one wraps to 0x100
                   isa.end()], mem, slots)
    assert r.error == AccelError.NONE
    assert m.inp[0].tolist() == [1, 2, 3, 4] and m.inp[1].tolist() == [1, 2, 3, 4]
    assert m.inp[3].tolist() == [1, 2, 3, 4]


def test_store_overlapping_rows_later_wins() -> None:
    """STORE rows that overlap in memory (y_stride < x_size) are written in order."""
    m = AccelModel(SMALL)
    m.acc[:6] = np.arange(24).reshape(6, 4)
    mem = bytearray(1024)
    r = run1(m, isa.store(Buffer.ACC8, y_size=3, x_size=2, y_stride=1), mem)
    assert r.error == AccelError.NONE
    assert list(mem[:16]) == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23]


mem_fields = st.fixed_dictionaries({
    "buf": st.sampled_from(list(Buffer)), "slot": st.integers(0, 15),
    "sp_base": st.one_of(st.integers(0, 24), st.integers(0, 66)),
    "offset": st.integers(0, 1 << 11),
    "y_size": st.integers(0, 4), "x_size": st.integers(0, 4), "y_stride": st.integers(0, 6),
    "pad_top": st.integers(0, 2), "pad_bottom": st.integers(0, 2), "pad_left": st.integers(0, 2),
    "pad_right": st.integers(0, 2), "pad_value": st.integers(-128, 127)})


@HYP
@given(f=mem_fields, seed=st.integers(0, 1 << 16), aligned=st.booleans())
def test_load_property(f: dict[str, int], seed: int, aligned: bool) -> None:
    """Any LOAD: strides, padding, slots, wrap, SP_RANGE, MISALIGNED, LOAD_BUS."""
    rng = random.Random(seed)
    e = isa.element_bytes(Buffer(f["buf"]), SMALL.n)
    slots = [rng.choice([0, 64, 4096 - 64, 0xFFFF_F000]) for _ in range(16)]
    if aligned:
        f["offset"] -= (slots[f["slot"]] + f["offset"]) % e
        f["offset"] = max(f["offset"], 0)
    mem = bytearray(np.random.default_rng(seed).integers(0, 256, 3000, np.uint8).tobytes())
    check_against_ref(random_model(SMALL, seed), isa.load(**f), mem, slots)


@HYP
@given(f=mem_fields, seed=st.integers(0, 1 << 16), aligned=st.booleans())
def test_store_property(f: dict[str, int], seed: int, aligned: bool) -> None:
    """Any STORE from ACC / ACC8: strides (overlapping rows too), slots, SP_RANGE, MISALIGNED,
    STORE_BUS."""
    f["buf"] = Buffer.ACC if f["buf"] in (Buffer.INP, Buffer.ACC) else Buffer.ACC8
    for k in ("pad_top", "pad_bottom", "pad_left", "pad_right", "pad_value"):
        del f[k]
    rng = random.Random(seed)
    e = isa.element_bytes(Buffer(f["buf"]), SMALL.n)
    slots = [rng.choice([0, 64, 4096 - 64, 0xFFFF_F000]) for _ in range(16)]
    if aligned:
        f["offset"] = max(f["offset"] - (slots[f["slot"]] + f["offset"]) % e, 0)
    mem = bytearray(np.random.default_rng(seed).integers(0, 256, 3000, np.uint8).tobytes())
    check_against_ref(random_model(SMALL, seed), isa.store(**f), mem, slots)


# --- errors --------------------------------------------------------------------------------------

def raw_insn(opcode: int, payload: int = 0) -> bytes:
    return ((payload << 4) | opcode).to_bytes(16, "little")


@pytest.mark.parametrize("opcode", [0, 8, 9, 15])
def test_illegal_opcode(opcode: int) -> None:
    """Opcode 0 and those above DW: ILLEGAL_OPCODE at their pc, from a list or from memory."""
    prog = [isa.load(Buffer.INP, y_size=0), raw_insn(opcode, 0x1234), isa.end()]
    r = AccelModel(SMALL).execute(prog, bytearray(256), SLOTS0)
    assert (r.error, r.err_pc) == (AccelError.ILLEGAL_OPCODE, 1)
    mem = bytearray(256)
    mem[16:32] = isa.encode(prog[0])
    mem[32:48] = prog[1]
    mem[48:64] = isa.encode(prog[2])
    r = AccelModel(SMALL).run_array(np.frombuffer(mem, np.uint8), 16, 3, SLOTS0)
    assert (r.error, r.err_pc) == (AccelError.ILLEGAL_OPCODE, 1)


ILLEGAL_FIELDS = [
    isa.load(Buffer.INP, pop_prev=1), isa.load(Buffer.WGT, push_prev=1),
    isa.store(Buffer.ACC, pop_next=1), isa.store(Buffer.ACC8, push_next=1),
    isa.store(Buffer.INP), isa.store(Buffer.WGT), isa.store(Buffer.ACC, pad_top=1),
    isa.store(Buffer.ACC, pad_bottom=2), isa.store(Buffer.ACC8, pad_left=1),
    isa.store(Buffer.ACC8, pad_right=3),
    Insn(Opcode.ALU, {"alu_op": 7}), Insn(Opcode.ALU, {"alu_op": AluOp.REQ, "use_imm": 1}),
    Insn(Opcode.END, {"pop_prev": 1}), Insn(Opcode.END, {"push_next": 1}),
    isa.dw(taps=0, tap_w=1), isa.dw(taps=5, tap_w=5), isa.dw(taps=1, tap_w=0),
    isa.dw(taps=3, tap_w=2, tap_pitch=3), isa.dw(taps=4, tap_w=1, tap_pitch=2),
]


@pytest.mark.parametrize("insn", ILLEGAL_FIELDS, ids=str)
def test_illegal_field(insn: Insn) -> None:
    """Every ILLEGAL_FIELD case of check_static stops the run at that instruction, before
    dispatch: nothing after it runs."""
    m = AccelModel(SMALL)
    prog = [isa.load(Buffer.INP, y_size=0), isa.load(Buffer.INP, y_size=0), insn,
            isa.load(Buffer.INP, y_size=0, pad_top=1, pad_value=5), isa.end()]
    r = m.execute(prog, bytearray(256), SLOTS0)
    assert (r.error, r.err_pc) == (AccelError.ILLEGAL_FIELD, 2)
    assert (m.inp == 0).all(), "an instruction after the illegal one ran"
    assert r.counters["insns"] == 2


SP_CASES = [  # (instruction, fails) at the edge of SMALL's depths (inp 64, wgt 16, acc 64)
    (isa.load(Buffer.INP, sp_base=63, y_size=1, x_size=1), False),
    (isa.load(Buffer.INP, sp_base=62, y_size=1, x_size=1, pad_right=2), True),
    (isa.load(Buffer.WGT, sp_base=15, y_size=1, x_size=1), False),
    (isa.load(Buffer.WGT, sp_base=14, y_size=0, x_size=1, pad_top=3), True),
    (isa.load(Buffer.ACC, sp_base=60, y_size=2, x_size=2), False),
    (isa.load(Buffer.ACC8, sp_base=61, y_size=2, x_size=2), True),
    (isa.load(Buffer.INP, sp_base=65000, y_size=0, x_size=4), False),   # nothing touched
    (isa.store(Buffer.ACC, sp_base=56, y_size=2, x_size=4), False),
    (isa.store(Buffer.ACC8, sp_base=57, y_size=2, x_size=4), True),
    (isa.gemm(acc_base=3, outer=4, inner=5, acc_so=15, acc_si=1), False),   # 3+45+4 = 52
    (isa.gemm(acc_base=3, outer=4, inner=5, acc_so=15, acc_si=4), True),    # 3+45+16 = 64
    (isa.gemm(inp_base=63, outer=1, inner=1), False),
    (isa.gemm(inp_base=60, outer=2, inner=2, inp_so=2, inp_si=2), True),
    (isa.gemm(wgt_base=16, outer=1, inner=1), True),
    (isa.gemm(acc_base=9999, inp_base=9999, wgt_base=9999, outer=0, inner=5), False),
    (isa.alu(AluOp.ADD, dst_base=63, src_base=63, outer=1, inner=1), False),
    (isa.alu(AluOp.ADD, dst_base=0, src_base=60, outer=2, inner=3, src_so=2, src_si=1), True),
    (isa.alu(AluOp.ADD, 5, dst_base=0, src_base=9999, outer=2, inner=3), False),   # imm: no src
    (isa.req(dst_base=0, src_base=62, outer=1, inner=1), False),
    (isa.req(dst_base=0, src_base=63, outer=1, inner=1), True),              # shift row 64
    (isa.alu(AluOp.MOV, dst_base=64, src_base=0, outer=3, inner=0), False),
    # DW: the last row read is the last iteration's last tap (off 1 * 6 + 1 = 7)
    (isa.dw(inp_base=50, outer=2, inner=2, inp_so=3, inp_si=1, taps=4, tap_w=2,
            tap_pitch=6), False),                                             # 50+4+7 = 61
    (isa.dw(inp_base=53, outer=2, inner=2, inp_so=3, inp_si=1, taps=4, tap_w=2,
            tap_pitch=6), True),                                              # 64
    (isa.dw(acc_base=60, outer=1, inner=4, acc_si=1, taps=1, tap_w=1), False),
    (isa.dw(acc_base=61, outer=1, inner=4, acc_si=1, taps=1, tap_w=1), True),
    (isa.dw(wgt_base=16, outer=1, inner=1, taps=1, tap_w=1), True),
    (isa.dw(acc_base=9999, inp_base=9999, wgt_base=999, outer=0, inner=2, taps=1,
            tap_w=1), False),
]


@pytest.mark.parametrize(("insn", "fails"), SP_CASES, ids=lambda v: str(v))
def test_sp_range(insn: Insn, fails: bool) -> None:
    """Every row an instruction touches must be below the depth; nothing touched, no error."""
    r = AccelModel(SMALL).execute([isa.load(Buffer.INP, y_size=0), insn, isa.end()],
                                  bytearray(4096), SLOTS0)
    want = (AccelError.SP_RANGE, 1) if fails else (AccelError.NONE, 0)
    assert (r.error, r.err_pc) == want


@pytest.mark.parametrize(("buf", "addr", "bad"), [
    (Buffer.INP, 4, False), (Buffer.INP, 6, True), (Buffer.WGT, 16, False),
    (Buffer.WGT, 8, True), (Buffer.ACC, 16, False), (Buffer.ACC, 8, True),
    (Buffer.ACC8, 12, False), (Buffer.ACC8, 2, True)])
def test_misaligned(buf: Buffer, addr: int, bad: bool) -> None:
    """slot + offset must be a multiple of the element size (N=4: INP/ACC8 4, WGT 16, ACC 16),
    for LOAD and STORE, even when nothing moves."""
    slots = [0] * 16
    slots[2] = 0x1000 + addr - 2
    for insn in (isa.load(buf, slot=2, offset=2, y_size=1, x_size=1),
                 isa.load(buf, slot=2, offset=2, y_size=0, x_size=1)) + (
            (isa.store(buf, slot=2, offset=2, y_size=1, x_size=2),)
            if buf in (Buffer.ACC, Buffer.ACC8) else ()):
        r = AccelModel(SMALL).execute([insn, isa.end()], bytearray(8192), slots)
        assert r.error == (AccelError.MISALIGNED if bad else AccelError.NONE), insn


def test_sp_range_is_checked_before_alignment() -> None:
    """An instruction failing both checks reports SP_RANGE (the model's documented order)."""
    r = run1(AccelModel(SMALL), isa.load(Buffer.INP, sp_base=64, offset=1, y_size=1,
                                         x_size=1), bytearray(64))
    assert r.error == AccelError.SP_RANGE


@pytest.mark.parametrize("op", [Opcode.LOAD, Opcode.STORE])
def test_bus_errors(op: Opcode) -> None:
    """A row with a byte at or beyond mem_size is LOAD_BUS / STORE_BUS; the last byte is fine;
    a row crossing 2**32 fails on a card smaller than 4 GiB."""
    want = AccelError.LOAD_BUS if op == Opcode.LOAD else AccelError.STORE_BUS
    make = isa.load if op == Opcode.LOAD else isa.store
    size = 4096
    slots = [0] * 16
    slots[1] = 0xFFFF_FFF0
    for fields, err in [
            ({"offset": size - 32, "y_size": 2, "x_size": 1, "y_stride": 1}, False),
            ({"offset": size - 32, "y_size": 2, "x_size": 1, "y_stride": 2}, True),
            ({"offset": size - 16, "y_size": 1, "x_size": 2}, True),
            ({"offset": 1 << 31, "y_size": 1, "x_size": 1}, True),
            ({"slot": 1, "offset": 0x10, "y_size": 1, "x_size": 1}, False),    # wraps to 0
            ({"slot": 1, "offset": 0, "y_size": 1, "x_size": 2}, True)]:      # crosses 2**32
        m = AccelModel(SMALL)
        m.acc[:] = 3
        mem = bytearray(b"\x05" * size)
        r = m.execute([make(Buffer.ACC, **fields), isa.end()], mem, slots)
        assert (r.error, r.err_pc) == ((want, 0) if err else (AccelError.NONE, 0)), fields
        if err:
            assert mem == bytearray(b"\x05" * size) and (m.acc == 3).all(), \
                "a failing transfer moved data"


def test_fetch_bus_error_and_callbacks_stay_in_range() -> None:
    """run(): instructions at or beyond mem_size are FETCH_BUS at their pc; the callbacks never
    see an access outside [0, mem_size)."""
    size = 4096
    mem = bytearray(size)
    seen: list[tuple[int, int]] = []

    def read(a: int, n: int) -> bytes:
        assert 0 <= a and a + n <= size, (a, n)
        seen.append((a, n))
        return bytes(mem[a:a + n])

    def write(a: int, data: bytes) -> None:
        assert 0 <= a and a + len(data) <= size, (a, len(data))
        mem[a:a + len(data)] = data

    prog = [isa.load(Buffer.INP, y_size=1, x_size=1), isa.load(Buffer.INP, y_size=0)]
    mem[size - 32:] = isa.encode_program(prog)
    r = AccelModel(SMALL).run(read, write, size - 32, 5, SLOTS0, mem_size=size)
    assert (r.error, r.err_pc) == (AccelError.FETCH_BUS, 2)
    r = AccelModel(SMALL).run(read, write, 0xFFFF_FFF0, 2, SLOTS0, mem_size=size)
    assert (r.error, r.err_pc) == (AccelError.FETCH_BUS, 0)
    assert seen, "the program was not read through the callback"


def test_no_end() -> None:
    """INSN_COUNT instructions without END: NO_END with ERR_PC = INSN_COUNT; an END beyond the
    count is never fetched."""
    prog = [isa.load(Buffer.INP, y_size=0)] * 3 + [isa.end()]
    r = AccelModel(SMALL).execute(prog[:3], bytearray(64), SLOTS0)
    assert (r.error, r.err_pc, r.counters["insns"]) == (AccelError.NO_END, 3, 3)
    mem = bytearray(256)
    mem[:64] = isa.encode_program(prog)
    r = AccelModel(SMALL).run_array(np.frombuffer(mem, np.uint8), 0, 3, SLOTS0)
    assert (r.error, r.err_pc) == (AccelError.NO_END, 3)


def test_deadlock_on_missing_tokens() -> None:
    """A pop that no instruction can satisfy: DEADLOCK, ERR_PC = instructions dispatched (END
    included), as the RTL reports it."""
    nop = {"outer": 0, "inner": 0}
    cases = [
        ([isa.gemm(pop_prev=1, **nop), isa.end()], 2),
        ([isa.store(Buffer.ACC, pop_prev=1), isa.end()], 2),
        ([isa.load(Buffer.INP, pop_next=1), isa.gemm(push_next=1, **nop), isa.end()], 3),
        # compute waits for store, store waits for compute
        ([isa.gemm(pop_next=1, push_next=1, **nop), isa.store(Buffer.ACC, pop_prev=1,
                                                               push_prev=1), isa.end()], 3),
        # tokens arrive but one short
        ([isa.load(Buffer.INP, push_next=1), isa.gemm(pop_prev=1, **nop),
          isa.gemm(pop_prev=1, **nop), isa.end()], 4),
    ]
    for prog, pc in cases:
        for seed in (None, 1, 2, 3):
            r = AccelModel(SMALL).execute(prog, bytearray(64), SLOTS0, schedule_seed=seed)
            assert (r.error, r.err_pc) == (AccelError.DEADLOCK, pc), [str(i) for i in prog]


def test_tokens_from_later_instructions_are_fine() -> None:
    """A pop satisfied by an instruction later in program order (on another unit) waits, it is
    not a deadlock, as long as the fetcher can reach that instruction."""
    nop = {"outer": 0, "inner": 0}
    prog = [isa.gemm(pop_prev=1, push_next=1, **nop), isa.store(Buffer.ACC, pop_prev=1),
            isa.load(Buffer.INP, push_next=1), isa.end()]
    for seed in (None, 1, 2):
        assert AccelModel(SMALL).execute(prog, bytearray(64), SLOTS0,
                                         schedule_seed=seed).error == AccelError.NONE


@pytest.mark.parametrize("depth", [1, 2, 8])
def test_deadlock_from_full_queues(depth: int) -> None:
    """A unit holds queue_depth + 1 instructions that have not started: one more GEMM waiting
    for a token the LOAD behind it would push blocks the fetcher forever (an artificial
    deadlock); one fewer runs."""
    cfg = AccelConfig(n=4, inp_depth=16, wgt_depth=4, acc_depth=16, queue_depth=depth)
    nop = {"outer": 0, "inner": 0}
    for k, ok in ((depth + 1, True), (depth + 2, False)):
        prog = [isa.gemm(pop_prev=1, **nop)] * k + [isa.load(Buffer.INP, push_next=1)] * k \
            + [isa.end()]
        for seed in (None, 5, 6):
            r = AccelModel(cfg).execute(prog, bytearray(64), SLOTS0, schedule_seed=seed)
            want = (AccelError.NONE, 0) if ok else (AccelError.DEADLOCK, depth + 1)
            assert (r.error, r.err_pc) == want, (k, seed)


def test_token_overflow() -> None:
    """TOKEN_MAX tokens may wait in a counter; one more push is TOKEN_OVERFLOW."""
    push = isa.load(Buffer.INP, push_next=1)
    r = AccelModel(SMALL).execute([push] * isa.TOKEN_MAX + [isa.end()], bytearray(64), SLOTS0)
    assert r.error == AccelError.NONE
    r = AccelModel(SMALL).execute([push] * (isa.TOKEN_MAX + 1) + [isa.end()], bytearray(64),
                                  SLOTS0)
    assert r.error == AccelError.TOKEN_OVERFLOW
    assert isa.TOKEN_MAX + 1 <= r.err_pc <= isa.TOKEN_MAX + 2, "ERR_PC: instructions dispatched"


def test_first_error_wins_and_stops() -> None:
    """After the first error nothing else starts: a later failing instruction is not reported."""
    prog = [isa.load(Buffer.INP, sp_base=1000, y_size=1, x_size=1),
            isa.load(Buffer.INP, offset=1, y_size=1, x_size=1), isa.end()]
    for seed in (None, 1, 2):
        r = AccelModel(SMALL).execute(prog, bytearray(64), SLOTS0, schedule_seed=seed)
        assert (r.error, r.err_pc) == (AccelError.SP_RANGE, 0)


# --- execution model, counters, determinism ------------------------------------------------------

PIPE = AccelConfig(n=8, inp_depth=64, wgt_depth=4, acc_depth=64, queue_depth=2)


def pipeline_program(tiles: int = 6) -> tuple[list[Insn], bytearray]:
    """A double-buffered tiled GEMM (load tile i+1 while computing i, store behind)."""
    rng = np.random.default_rng(11)
    mem = bytearray(rng.integers(0, 256, 1 << 16, np.uint8).tobytes())
    prog: list[Insn] = [isa.load(Buffer.WGT, sp_base=0, offset=0x8000, y_size=1, x_size=1)]
    for t in range(tiles):
        half = t % 2
        prog.append(isa.load(Buffer.INP, sp_base=32 * half, offset=t * 256, y_size=4, x_size=8,
                             y_stride=8, pop_next=int(t >= 2), push_next=1))
    prog_c: list[Insn] = []
    for t in range(tiles):
        half = t % 2
        prog_c += [isa.gemm(reset=1, acc_base=32 * half, inp_base=32 * half, outer=4, inner=8,
                            acc_so=8, acc_si=1, inp_so=8, inp_si=1, pop_prev=1,
                            pop_next=int(t >= 2)),
                   isa.alu(AluOp.SHR, 2, dst_base=32 * half, outer=1, inner=32, dst_si=1,
                           push_prev=1, push_next=1)]
    prog_s = [isa.store(Buffer.ACC8, sp_base=32 * (t % 2), offset=0x9000 + 256 * t, y_size=1,
                        x_size=32, y_stride=32, pop_prev=1, push_prev=1) for t in range(tiles)]
    # interleave in a plausible program order: load runs one tile ahead
    out = prog[:3]
    for t in range(tiles):
        out += prog_c[2 * t:2 * t + 2] + [prog_s[t]]
        if t + 3 < len(prog):
            out.append(prog[t + 3])
    out.append(isa.end())
    return out, mem


def test_race_free_program_is_schedule_independent() -> None:
    """The double-buffered pipeline gives identical scratchpads, memory and counters under the
    round-robin schedule and many random ones, and the right numbers."""
    prog, mem0 = pipeline_program()
    results = []
    for seed in [None, *range(12)]:
        m = AccelModel(PIPE)
        mem = bytearray(mem0)
        r = m.execute(prog, mem, SLOTS0, schedule_seed=seed)
        assert r.error == AccelError.NONE, (seed, r)
        results.append((bytes(mem), m.acc.tobytes(), m.inp.tobytes(), r.counters))
    assert all(x == results[0] for x in results), "a race-free program depends on the schedule"
    mem = results[0][0]
    w = np.frombuffer(mem0[0x8000:0x8040], np.int8).reshape(8, 8).astype(np.int64)
    for t in range(6):
        x = np.frombuffer(mem0[t * 256:t * 256 + 256], np.int8).reshape(32, 8).astype(np.int64)
        want = ((x @ w + 2) >> 2).astype(np.int8)
        got = np.frombuffer(mem[0x9000 + 256 * t:0x9000 + 256 * t + 256], np.int8)
        assert np.array_equal(got.reshape(32, 8), want), f"tile {t}"


def test_random_schedules_really_interleave() -> None:
    """A racy program (STORE of rows a LOAD writes, no tokens) gives different memory under
    different schedules: the random schedule does reorder the units."""
    prog = [isa.load(Buffer.ACC, y_size=1, x_size=4), isa.store(Buffer.ACC, offset=1024,
                                                                y_size=1, x_size=4),
            isa.end()]
    outs = set()
    for seed in range(40):
        mem = bytearray(2048)
        mem[:1024] = bytes([7]) * 1024
        AccelModel(SMALL).execute(prog, mem, SLOTS0, schedule_seed=seed)
        outs.add(bytes(mem[1024:1088]))
    assert len(outs) == 2, f"{len(outs)} outcomes; expected both orders"


def test_determinism() -> None:
    """The same seed gives the same run; the default schedule is fixed."""
    prog, mem0 = pipeline_program()
    runs = []
    for _ in range(2):
        for seed in (None, 3):
            m, mem = AccelModel(PIPE), bytearray(mem0)
            runs.append((seed, m.execute(prog, mem, SLOTS0, schedule_seed=seed).counters,
                         bytes(mem)))
    assert runs[0] == runs[2] and runs[1] == runs[3]


def test_counters() -> None:
    """insns (END included), macs, bytes_loaded / bytes_stored are exact; the estimate is
    consistent (busy <= cycles, gemm_busy <= compute_busy) and every counter is reported."""
    prog, mem = pipeline_program(tiles=4)
    r = AccelModel(PIPE).execute(prog, mem, SLOTS0)
    c = r.counters
    assert list(c) == [name for name, _ in regs.ACCEL_COUNTERS]
    assert c["insns"] == len(prog)
    assert c["macs"] == 4 * 32 * 64
    assert c["bytes_loaded"] == 64 + 4 * 256 and c["bytes_stored"] == 4 * 256
    for u in ("load", "compute", "store"):
        assert 0 < c[f"{u}_busy"] <= c["cycles"] and c[f"{u}_stall"] >= 0
    assert 0 < c["gemm_busy"] <= c["compute_busy"]
    assert c["cycles"] < c["load_busy"] + c["compute_busy"] + c["store_busy"], "no overlap"


def test_run_from_memory_equals_execute() -> None:
    """The program encoded into card memory at a 16-byte (not 64-byte) aligned base and fetched
    through run() callbacks, through run_array(), or given as Insn or as 16-byte images to
    execute() all give the same result; decode(encode) is the identity on it."""
    prog, mem0 = pipeline_program()
    assert isa.decode_program(isa.encode_program(prog)) == prog
    base = 0xA010
    mem0[base:base + 16 * len(prog)] = isa.encode_program(prog)
    outs = []
    for how in ("run", "array", "insn", "bytes"):
        m = AccelModel(PIPE)
        mem = bytearray(mem0)
        if how == "run":
            r = m.run(lambda a, n, mem=mem: bytes(mem[a:a + n]),
                      lambda a, d, mem=mem: mem.__setitem__(slice(a, a + len(d)), d),
                      base, len(prog), SLOTS0, mem_size=len(mem))
        elif how == "array":
            r = m.run_array(np.frombuffer(mem, np.uint8), base, len(prog), SLOTS0)
        else:
            r = m.execute(prog if how == "insn" else [isa.encode(i) for i in prog], mem,
                          SLOTS0)
        assert r.error == AccelError.NONE, (how, r)
        outs.append((bytes(mem), m.acc.tobytes(), r.counters))
    assert all(o == outs[0] for o in outs)


def test_scratchpads_persist_across_runs() -> None:
    """Nothing clears the scratchpads: a second run computes with the first run's loads."""
    m = AccelModel(SMALL)
    mem = bytearray(4096)
    mem[0:4] = bytes([1, 2, 3, 4])
    mem[64:80] = np.eye(4, dtype=np.int8).tobytes()
    assert m.execute([isa.load(Buffer.INP, y_size=1, x_size=1),
                      isa.load(Buffer.WGT, offset=64, y_size=1, x_size=1), isa.end()],
                     mem, SLOTS0).ok
    assert m.execute([isa.gemm(reset=1, outer=1, inner=1), isa.end()], mem, SLOTS0).ok
    assert m.acc[0].tolist() == [1, 2, 3, 4]


def test_field_out_of_range_is_a_programming_error() -> None:
    """An Insn whose field does not fit its width cannot be executed (it has no encoding)."""
    with pytest.raises(isa.IsaError):
        AccelModel(SMALL).execute([isa.load(Buffer.INP, x_size=4096), isa.end()],
                                  bytearray(64), SLOTS0)


# --- batched GEMMs -------------------------------------------------------------------------------

def _racy_program(rng: random.Random, cfg: AccelConfig, length: int) -> list[Insn]:
    """GEMM-heavy streams with LOADs, STOREs and ALUs on overlapping and disjoint rows, resets,
    repeated rows and no tokens at all: the order of the units' work is the schedule's, so the
    result depends on it, and batching must keep it exactly."""
    def acc_loop() -> dict[str, int]:
        return {"acc_base": rng.choice((0, 0, 8, 16, 30)), "outer": rng.choice((1, 2, 3)),
                "inner": rng.choice((1, 4, 5)), "acc_so": rng.choice((0, 4, 5)),
                "acc_si": rng.choice((0, 1, 1, 1))}

    loops = [acc_loop() for _ in range(3)]        # GEMMs sharing an accumulator loop group
    out: list[Insn] = []
    for _ in range(length):
        k = rng.random()
        if k < 0.6:
            out.append(isa.gemm(
                reset=int(rng.random() < 0.15), inp_base=rng.randrange(0, 40),
                wgt_base=rng.randrange(cfg.wgt_depth), inp_so=rng.randrange(0, 6),
                inp_si=rng.randrange(0, 3),
                **(rng.choice(loops) if rng.random() < 0.85 else acc_loop())))
        elif k < 0.72:
            buf = rng.choice((Buffer.INP, Buffer.INP, Buffer.WGT, Buffer.ACC, Buffer.ACC8))
            depth = cfg.depth(buf)
            y = rng.randrange(1, 4)
            out.append(isa.load(buf, sp_base=rng.randrange(0, depth - 8), offset=0, y_size=y,
                                x_size=2, y_stride=2, pad_top=rng.choice((0, 0, 1))))
        elif k < 0.85:
            out.append(isa.store(Buffer.ACC, sp_base=rng.randrange(0, 40), offset=256,
                                 y_size=1, x_size=rng.randrange(1, 4)))
        else:
            op = rng.choice((AluOp.ADD, AluOp.MAX, AluOp.MOV, AluOp.MUL))
            out.append(isa.alu(op, rng.choice((None, 3)), dst_base=rng.randrange(0, 40),
                               src_base=rng.randrange(0, 40), outer=rng.choice((1, 2)),
                               inner=rng.choice((1, 3)), dst_si=1, src_si=1))
    return out + [isa.end()]


@pytest.mark.parametrize("seed", range(40))
def test_batched_gemms_equal_one_by_one(seed: int) -> None:
    """The model computes consecutive GEMMs together (a matrix product per group of GEMMs with
    the same accumulator loop) and lets another unit's work on other rows run past them; under
    every schedule the scratchpads, memory and counters equal computing each GEMM as it starts,
    also for racy programs whose result depends on the schedule."""
    rng = random.Random(seed)
    cfg = SMALL if seed % 2 else AccelConfig(n=8, inp_depth=64, wgt_depth=16, acc_depth=64)
    prog = _racy_program(rng, cfg, rng.choice((8, 30, 120)))
    init = bytes(np.random.default_rng(seed).integers(0, 256, 1024, dtype=np.uint8))
    for sched in (None, seed, seed + 1000):
        states = []
        for batch in (True, False):
            m = random_model(cfg, seed)
            m.batch_gemms = batch
            mem = bytearray(init)
            r = m.execute(prog, mem, SLOTS0, schedule_seed=sched)
            states.append((r.error, r.err_pc, r.counters, bytes(mem), m.inp.tobytes(),
                           m.wgt.tobytes(), m.acc.tobytes()))
        assert states[0] == states[1], f"seed {seed}, schedule {sched}"


def test_batched_gemms_of_a_layer_equal_one_by_one() -> None:
    """A compiled convolution (many GEMM groups, double-buffered loads running past them)."""
    from compiler.plugins.accel import kernels as K
    from tb.accel.randprog import random_conv_quant

    rng = np.random.default_rng(3)
    cfg = AccelConfig()
    q = random_conv_quant(rng, 24, 16, 3, 3)
    kern = K.conv2d((1, 16, 12, 12), q, inp=K.Ref(1), out=K.Ref(2), consts=K.Ref(3),
                    pads=(1, 1, 1, 1), cfg=cfg)
    prog = K.join([kern])
    size = 1 << 20
    base = bytearray(size)
    base[0x10000:0x10000 + kern.consts.nbytes] = kern.consts.data
    base[0x40000:0x40000 + 4096] = bytes(np.random.default_rng(4).integers(0, 256, 4096,
                                                                          dtype=np.uint8))
    slots = [0, 0x40000, 0x80000, 0x10000] + [0] * 12
    outs = []
    for batch in (True, False):
        m = AccelModel(cfg)
        m.batch_gemms = batch
        mem = bytearray(base)
        r = m.execute(prog, mem, slots)
        assert r.ok, r
        outs.append((r.counters, bytes(mem), m.acc.tobytes()))
    assert outs[0] == outs[1]

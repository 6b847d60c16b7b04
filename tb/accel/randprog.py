"""Constrained-random accelerator programs, for comparing the RTL with the functional model.

`generate` makes a race-free, error-free, deadlock-free program that keeps the three units busy at
once (a double-buffered tile pipeline: loads of tile t+1 overlap the compute of tile t and the
stores of tile t-1) and covers the ISA: every opcode, buffer and ALU operation, the immediate,
REQ with realistic and extreme parameters, strides, padding, repeated rows inside one GEMM/ALU,
slot-relative addresses that wrap modulo 2**32, element-aligned addresses that are not 64-byte
aligned and rows that cross 4 KiB. `generate_error` makes a program whose first error is a given
AccelError at a known pc under every schedule. The generator proves its own output race-free and
deadlock-free with `tb.accel.races`.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pyhost.accel.model import AccelModel
from pyhost.fixedpoint import quantize_multiplier, quantize_multipliers
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn, Opcode, Unit, XAluOp
from tb.accel.races import ProgramCheckError, check_races, check_token_order, footprint

_MASK32 = (1 << 32) - 1
KiB = 1 << 10
#: The footprint of a program stays below this (and below mem_size).
MAX_FOOTPRINT = 1 << 20
#: Smallest card memory `generate` works with.
MIN_MEM_SIZE = 64 * KiB
#: Bytes of card memory a program's data, outputs and code use at most.
_SPAN = 60 * KiB


@dataclass
class RandomProgram:
    """A program with everything needed to run it.

    Write `init` into card memory in list order (the first entry is a fill of the whole
    footprint, a fixed function of the address; later ones are the input data), the program at
    `insn_base` (`image()`), bind `slots`, start with INSN_COUNT = len(program). Stores write only
    inside `regions`; every access lies in `footprint`. `program` may hold 16-byte images where
    an instruction has no Insn form (ILLEGAL_OPCODE). `expect_error` / `expect_pc` are what the
    run ends with (NONE / 0 for `generate`).
    """

    program: list[Insn | bytes]
    slots: list[int]
    init: list[tuple[int, bytes]]
    regions: list[tuple[int, int]]
    insn_base: int
    footprint: tuple[int, int]
    expect_error: AccelError = AccelError.NONE
    expect_pc: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def insn_count(self) -> int:
        return len(self.program)

    def image(self) -> bytes:
        """The program as it sits in card memory at insn_base."""
        return b"".join(i if isinstance(i, bytes) else isa.encode(i) for i in self.program)

    def memory(self, mem_size: int | None = None) -> bytearray:
        """Card memory of `mem_size` bytes (default: up to the footprint's end), zeros with init
        and the program written."""
        mem = bytearray(self.footprint[1] if mem_size is None else mem_size)
        for addr, data in self.init:
            mem[addr:addr + len(data)] = data
        img = self.image()
        mem[self.insn_base:self.insn_base + len(img)] = img
        return mem


def fill_pattern(addr: int, size: int) -> bytes:
    """The program-independent fill: a fixed function of the card address."""
    a = np.arange(addr, addr + size, dtype=np.uint64)
    return ((a * np.uint64(0x9E37) + (a >> np.uint64(7)) * np.uint64(0x5B) + np.uint64(0x3C))
            & np.uint64(0xFF)).astype(np.uint8).tobytes()


# --- coverage helpers ----------------------------------------------------------------------------

def _token_flags(insn: Insn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return isa.token_counters(insn.unit, insn.fields)


def _mem_ranges(f: dict[str, int], e: int, slots: Sequence[int]) -> list[tuple[int, int]]:
    """Card byte ranges [a, b) a LOAD/STORE touches (split at 2**32)."""
    y, x = f.get("y_size", 0), f.get("x_size", 0)
    if not (y and x):
        return []
    base = (slots[f.get("slot", 0)] + f.get("offset", 0)) & _MASK32
    out = []
    for r in range(y):
        a = (base + r * f.get("y_stride", 0) * e) & _MASK32
        b = a + x * e
        out += [(a, b)] if b <= 1 << 32 else [(a, 1 << 32), (0, b - (1 << 32))]
    return out


# --- the generator ------------------------------------------------------------------------------

@dataclass
class _Window:
    buf: Buffer          # INP, WGT or ACC
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


class _Gen:
    """One program: memory layout, scratchpad windows, per-unit instruction streams."""

    def __init__(self, rng: random.Random, cfg: AccelConfig, mem_size: int,
                 n_insns: int = 60) -> None:
        if mem_size < MIN_MEM_SIZE:
            raise ValueError(f"generate needs at least {MIN_MEM_SIZE} bytes of card memory, "
                             f"got {mem_size}")
        if cfg.inp_depth < 4 or cfg.wgt_depth < 2 or cfg.acc_depth < 16:
            raise ValueError(f"scratchpads too small for random programs: {cfg}")
        self.rng = rng
        self.cfg = cfg
        self.n = cfg.n
        self.mem_size = mem_size
        top = min(mem_size, MAX_FOOTPRINT)
        # Outputs take about 300 bytes per instruction at N = 8.
        want = _SPAN + max(0, n_insns - 60) * 300 * max(1, cfg.n // 8)
        span = min(-(-want // 4096) * 4096, top)
        self.lo = rng.randrange(0, top - span + 1, 4096) if rng.random() < 0.5 \
            else top - span
        self.hi = self.lo + span
        self.cur = self.lo
        self.init: list[tuple[int, bytes]] = [(self.lo, fill_pattern(self.lo, span))]
        self.regions: list[tuple[int, int]] = []
        self.notes: list[str] = []
        self._layout()

    # --- card memory ---------------------------------------------------------------------------

    def alloc(self, size: int, align: int, cross_4k: bool = False) -> int:
        """`size` bytes at a multiple of `align` after a random gap; straddling a 4 KiB boundary
        when asked (and possible)."""
        r = self.rng
        a = self.cur + r.randrange(0, 3) * align
        if cross_4k:
            boundary = (a // 4096 + 1) * 4096
            a = max(a, boundary - r.randrange(1, max(2, size // align)) * align)
        a = -(-a // align) * align
        if a + size > self.hi:
            raise ValueError(f"the random program does not fit its {self.hi - self.lo} bytes of "
                             "card memory: ask for fewer instructions or more memory")
        self.cur = a + size
        return a

    def data(self, addr: int, raw: bytes) -> None:
        self.init.append((addr, raw))

    def _layout(self) -> None:
        r, n = self.rng, self.n
        nprng = np.random.default_rng(r.getrandbits(32))
        # Input bytes for INP / ACC8 / WGT loads; int32 rows for ACC loads (extremes included).
        self.r_bytes = (self.alloc(4 * KiB, n, cross_4k=True), 4 * KiB)
        self.data(self.r_bytes[0], nprng.integers(0, 256, 4 * KiB, np.uint8).tobytes())
        wsize = n * n * 12
        self.r_wgt = (self.alloc(wsize, n * n, cross_4k=r.random() < 0.5), wsize)
        self.data(self.r_wgt[0], nprng.integers(0, 256, wsize, np.uint8).tobytes())
        asize = 4 * n * 48
        self.r_acc = (self.alloc(asize, 4 * n, cross_4k=True), asize)
        vals = nprng.integers(-(1 << 31), 1 << 31, asize // 4, dtype=np.int64)
        pick = nprng.random(vals.size)
        vals[pick < 0.1] = -(1 << 31)
        vals[(pick >= 0.1) & (pick < 0.2)] = (1 << 31) - 1
        small = (pick >= 0.2) & (pick < 0.6)
        vals[small] = nprng.integers(-2000, 2000, int(small.sum()))
        self.data(self.r_acc[0], vals.astype("<i4").tobytes())
        # REQ parameters: pairs of rows (multipliers, shifts), realistic and extreme.
        self.params: list[tuple[int, str]] = []
        npar = 8
        self.r_par = (self.alloc(npar * 2 * 4 * n, 4 * n), npar * 2 * 4 * n)
        raw = b""
        for k in range(npar):
            if k % 2 == 0:
                ms = [quantize_multiplier(float(np.exp(nprng.uniform(np.log(1e-6),
                                                                     np.log(0.99)))))
                      for _ in range(n)]
                mult = [m for m, _ in ms]
                shift = [s | (int(nprng.integers(0, 1 << 20)) << 6) for _, s in ms]
                kind = "realistic"
            else:
                mult = [int(nprng.choice([-(1 << 31), (1 << 31) - 1, 1, 0, -1,
                                          int(nprng.integers(-(1 << 31), 1 << 31))]))
                        for _ in range(n)]
                shift = [int(nprng.choice([0, 1, 31, 32, 62, 63, 64 + 5, -1,
                                           int(nprng.integers(-(1 << 31), 1 << 31))]))
                         for _ in range(n)]
                kind = "extreme"
            raw += np.array(mult, "<i4").tobytes() + np.array(shift, "<i4").tobytes()
            self.params.append((self.r_par[0] + 2 * 4 * n * k, kind))
        self.data(self.r_par[0], raw)
        # Slots: a few near the data, the others anywhere in the 32-bit space (offsets wrap).
        self.slots = [r.getrandbits(32) for _ in range(isa.NUM_SLOTS)]
        for s in r.sample(range(isa.NUM_SLOTS), 5):
            self.slots[s] = r.choice([0, self.lo, self.r_bytes[0] - r.randrange(0, 512),
                                      self.hi + r.randrange(0, 1 << 16)]) & _MASK32

    def address(self, target: int) -> dict[str, int]:
        """slot + offset fields reaching card address `target` (modulo 2**32)."""
        slot = self.rng.randrange(isa.NUM_SLOTS)
        return {"slot": slot, "offset": (target - self.slots[slot]) & _MASK32}

    def pick_source(self, region: tuple[int, int], e: int, y: int, x: int, stride: int) -> int:
        """An element-aligned address in `region` where a y x x tile with `stride` fits."""
        span = ((y - 1) * stride + x) * e if y and x else 0
        first, size = region
        lo = -(-first // e) * e
        hi = first + size - span
        if hi < lo:
            raise _Retry
        return lo + self.rng.randrange(0, (hi - lo) // e + 1) * e

    # --- scratchpad windows --------------------------------------------------------------------

    def windows(self) -> None:
        r, c = self.rng, self.cfg

        def place(buf: Buffer, region_lo: int, region_hi: int, size: int) -> _Window:
            size = min(size, region_hi - region_lo)
            if r.random() < 0.35:
                start = region_hi - size          # touch the top row of the region
            else:
                start = r.randrange(region_lo, region_hi - size + 1)
            return _Window(buf, start, size)

        hi_, hw, q = c.inp_depth // 2, c.wgt_depth // 2, c.acc_depth // 4
        self.w_inp = [place(Buffer.INP, b * hi_, (b + 1) * hi_, 48) for b in range(2)]
        self.w_wgt = [place(Buffer.WGT, b * hw, (b + 1) * hw, 8) for b in range(2)]
        quarters = r.sample(range(4), 4)
        self.w_work = [place(Buffer.ACC, quarters[b] * q, (quarters[b] + 1) * q, 32)
                       for b in range(2)]
        self.w_stage = [place(Buffer.ACC, quarters[2 + b] * q, (quarters[2 + b] + 1) * q, 16)
                        for b in range(2)]

    # --- instructions --------------------------------------------------------------------------

    def load_into(self, win: _Window, buf: Buffer, source: tuple[int, int],
                  max_rows: int = 64) -> Insn:
        """A random LOAD of `buf` into window `win` from the memory `source` region."""
        r = self.rng
        e = isa.element_bytes(buf, self.n)
        if buf == Buffer.INP and r.random() < 0.2:
            # transposed: N memory rows per block, no padding
            for _ in range(50):
                y = self.n * r.choice([1, 1, 2])
                x = r.choice([1, 1, 2, 3])
                if not y * x <= min(win.size, max_rows):
                    continue
                stride = r.choice([x, x + r.randrange(1, 5), r.randrange(0, x + 1)])
                try:
                    src = self.pick_source(source, e, y, x, stride)
                except _Retry:
                    continue
                return isa.load(buf, sp_base=win.start + r.randrange(0, win.size - y * x + 1),
                                y_size=y, x_size=x, y_stride=stride, transpose=1,
                                **self.address(src))
        for _ in range(50):
            pt, pb, pl, pr = ((r.choice([0, 0, 1, 2]) for _ in range(4)) if r.random() < 0.5
                              else (0, 0, 0, 0))
            y = r.choice([0, 1, 1, 2, 3, 4, 6])
            x = r.choice([0, 1, 2, 3, 4, 5, 8]) if y else r.randrange(1, 4)
            rows = (pt + y + pb) * (pl + x + pr)
            if not 0 < rows <= min(win.size, max_rows):
                continue
            stride = r.choice([x, x, x + r.randrange(1, 5), r.randrange(0, x + 1)])
            try:
                src = self.pick_source(source, e, y, x, stride)
            except _Retry:
                continue
            base = win.start + r.randrange(0, win.size - rows + 1)
            return isa.load(buf, sp_base=base, y_size=y, x_size=x, y_stride=stride,
                            pad_top=pt, pad_bottom=pb, pad_left=pl, pad_right=pr,
                            pad_value=r.choice([0, -128, 127, r.randrange(-128, 128)]),
                            **self.address(src))
        raise _Retry

    def fill_window(self, win: _Window) -> list[Insn]:
        """LOADs that write every row of `win` (so nothing reads undefined scratchpad rows)."""
        out = []
        row = win.start
        while row < win.end:
            k = min(win.end - row, self.rng.randrange(4, 33))
            if win.buf == Buffer.INP:
                buf, src = Buffer.INP, self.r_bytes
            elif win.buf == Buffer.WGT:
                buf, src = Buffer.WGT, self.r_wgt
            else:
                buf, src = (Buffer.ACC, self.r_acc) if self.rng.random() < 0.6 \
                    else (Buffer.ACC8, self.r_bytes)
            e = isa.element_bytes(buf, self.n)
            k = min(k, src[1] // e)
            a = self.pick_source(src, e, 1, k, k)
            out.append(isa.load(buf, sp_base=row, y_size=1, x_size=k, y_stride=k,
                                **self.address(a)))
            row += k
        return out

    def gemm(self, b: int) -> Insn:
        r = self.rng
        wa, wi, ww = self.w_work[b], self.w_inp[b], self.w_wgt[b]
        for _ in range(50):
            outer, inner = r.randrange(1, 5), r.randrange(1, 9)
            acc_si = r.choice([0, 1, 1, 2])
            acc_so = r.choice([0, inner * acc_si, inner * acc_si + 1, r.randrange(0, 9)])
            inp_si = r.choice([0, 1, 1, 2, 3])
            inp_so = r.choice([inner * inp_si, r.randrange(0, 12)])
            a_span = (outer - 1) * acc_so + (inner - 1) * acc_si
            i_span = (outer - 1) * inp_so + (inner - 1) * inp_si
            if a_span >= wa.size or i_span >= wi.size:
                continue
            return isa.gemm(reset=r.randrange(2), acc_base=wa.start + r.randrange(wa.size - a_span),
                            inp_base=wi.start + r.randrange(wi.size - i_span),
                            wgt_base=ww.start + r.randrange(ww.size), outer=outer, inner=inner,
                            acc_so=acc_so, acc_si=acc_si, inp_so=inp_so, inp_si=inp_si)
        raise _Retry

    def dw(self, b: int) -> Insn:
        """A DW inside tile b's windows: taps 1..N, on one kernel row or over several with
        tap_pitch = tap_w (mod N) (the bank rule)."""
        r, n = self.rng, self.n
        wa, wi, ww = self.w_work[b], self.w_inp[b], self.w_wgt[b]
        for _ in range(50):
            taps = r.choice([1, n, r.randint(1, n)])
            tap_w = r.choice([1, 2, 3, r.randint(1, 15)])
            pitch = r.randrange(0, 4) if taps <= tap_w else tap_w + n * r.randrange(0, 3)
            last_tap = isa.dw_offsets(taps, tap_w, pitch)[-1]
            outer, inner = r.randrange(1, 5), r.randrange(1, 9)
            acc_si = r.choice([0, 1, 1, 2])
            acc_so = r.choice([0, inner * acc_si, inner * acc_si + 1, r.randrange(0, 9)])
            inp_si = r.choice([0, 1, 1, 2])
            inp_so = r.choice([inner * inp_si, r.randrange(0, 12)])
            a_span = (outer - 1) * acc_so + (inner - 1) * acc_si
            i_span = (outer - 1) * inp_so + (inner - 1) * inp_si + last_tap
            if a_span >= wa.size or i_span >= wi.size:
                continue
            return isa.dw(reset=r.randrange(2), acc_base=wa.start + r.randrange(wa.size - a_span),
                          inp_base=wi.start + r.randrange(wi.size - i_span),
                          wgt_base=ww.start + r.randrange(ww.size), outer=outer, inner=inner,
                          acc_so=acc_so, acc_si=acc_si, inp_so=inp_so, inp_si=inp_si,
                          taps=taps, tap_w=tap_w, tap_pitch=pitch)
        raise _Retry

    def alu(self, b: int, params_row: int | None) -> Insn:
        r = self.rng
        dst_w = self.w_work[b]
        op = r.choice(list(AluOp))
        for _ in range(50):
            outer, inner = r.randrange(1, 4), r.randrange(1, 9)
            dst_si = r.choice([0, 1, 1, 2])
            dst_so = r.choice([inner * dst_si, r.randrange(0, 6)])
            d_span = (outer - 1) * dst_so + (inner - 1) * dst_si
            if d_span >= dst_w.size:
                continue
            dst = dst_w.start + r.randrange(dst_w.size - d_span)
            f = {"dst_base": dst, "outer": outer, "inner": inner, "dst_so": dst_so,
                 "dst_si": dst_si}
            if r.random() < 0.1:
                # XALU on an immediate operand (a row could hold a zero or negative lane: its
                # operand errors are generate_error's DIV_ZERO / NEG_SQRT)
                if r.random() < 0.5:
                    return isa.xalu(XAluOp.DIV, r.choice([1, -1, 3, -7, (1 << 23) - 1,
                                                          -(1 << 23), r.randrange(1, 1000)]),
                                    **f)
                return isa.xalu(XAluOp.SQRT, r.choice([0, 1, 2, (1 << 23) - 1,
                                                       r.randrange(1 << 23)]), **f)
            if op == AluOp.REQ:
                zp, lo, hi = r.randrange(-128, 128), r.randrange(-128, 128), r.randrange(-128, 128)
                if r.random() < 0.75:
                    lo, hi = min(lo, hi), max(lo, hi)
                if r.random() < 0.3:
                    lo, hi = -128, 127
                if params_row is not None and r.random() < 0.8:
                    return isa.req(zp, lo, hi, src_base=params_row, **f)
                src_w = r.choice([self.w_work[b], self.w_stage[b]])
                s_span = (outer - 1) * 1 + 1
                if s_span >= src_w.size:
                    continue
                return isa.req(zp, lo, hi, src_base=src_w.start + r.randrange(src_w.size - s_span),
                               src_so=1, src_si=0, **f)
            if r.random() < 0.4:
                imm = r.choice([0, 1, -1, (1 << 23) - 1, -(1 << 23), r.randrange(-64, 64),
                                r.randrange(-(1 << 23), 1 << 23)])
                if op == AluOp.SHR:
                    imm = r.choice([0, 1, 5, 31, 32, 33, -1, r.randrange(-(1 << 23), 1 << 23)])
                return isa.alu(op, imm, src_base=r.randrange(1 << 14), **f)
            src_w = r.choice([self.w_work[b], self.w_stage[b]])   # work: overlaps dst
            src_si = r.choice([0, 1, 1, 2])
            src_so = r.choice([inner * src_si, r.randrange(0, 6)])
            s_span = (outer - 1) * src_so + (inner - 1) * src_si
            if s_span >= src_w.size:
                continue
            return isa.alu(op, src_base=src_w.start + r.randrange(src_w.size - s_span),
                           src_so=src_so, src_si=src_si, **f)
        raise _Retry

    def stores(self, b: int) -> list[Insn]:
        """1-2 STOREs of the tile's work window into a fresh output slice."""
        r, n = self.rng, self.n
        win = self.w_work[b]
        shapes = []
        for _ in range(r.choice([1, 1, 2])):
            for _ in range(50):
                buf = r.choice([Buffer.ACC, Buffer.ACC8])
                y, x = r.choice([1, 1, 2, 3, 4]), r.choice([1, 2, 3, 4, 6, 8])
                if y * x > win.size:
                    continue
                stride = r.choice([x, x, x + r.randrange(1, 4), r.randrange(0, x + 1)])
                shapes.append((buf, y, x, stride))
                break
        if not shapes:
            raise _Retry
        e_max = 4 * n
        span = max(((y - 1) * s + x) * isa.element_bytes(bf, n) for bf, y, x, s in shapes)
        size = span + r.randrange(0, 3) * e_max
        addr = self.alloc(size, e_max, cross_4k=r.random() < 0.3)
        self.regions.append((addr, size))
        out = []
        for buf, y, x, stride in shapes:
            e = isa.element_bytes(buf, n)
            a = self.pick_source((addr, size), e, y, x, stride)
            out.append(isa.store(buf, sp_base=win.start + r.randrange(win.size - y * x + 1),
                                 y_size=y, x_size=x, y_stride=stride, **self.address(a)))
        return out


class _Retry(Exception):
    """A random choice did not fit: try another."""


def _with_flags(insn: Insn, **flags: int) -> Insn:
    return Insn(insn.op, {**insn.fields, **{k: v for k, v in flags.items() if v}})


def _tile_streams(g: _Gen, t: int, slices: list[tuple[int, int, int]]
                  ) -> tuple[list[Insn], list[Insn], list[Insn]]:
    """The load, compute and store instructions of tile t (buffer half t % 2), with tokens:
    loads wait for the compute of tile t-2 (C2L) and signal this tile's compute (L2C); the
    compute waits for the loads and for the store of tile t-2 (S2C) and signals the store (C2S)
    and the loads of tile t+2 (C2L); the store signals the compute of tile t+2 (S2C)."""
    r, b = g.rng, t % 2
    loads: list[Insn] = []
    params_row = None
    for kind in r.sample(["inp", "wgt", "acc", "params", "inp2"], r.randrange(1, 4)):
        if kind in ("inp", "inp2"):
            src = g.r_bytes
            # Tiles at least 4 behind have stored for sure (store t-4 -> compute t-2 -> load t):
            # read their output back.
            old = [s for s in slices if s[0] <= t - 4]
            if old and r.random() < 0.5:
                _, a, size = r.choice(old)
                src = (a, size)
                g.notes.append("a LOAD reads back an earlier tile's STORE output")
            loads.append(g.load_into(g.w_inp[b], Buffer.INP, src))
        elif kind == "wgt":
            loads.append(g.load_into(g.w_wgt[b], Buffer.WGT, g.r_wgt, max_rows=4))
        elif kind == "acc":
            buf = r.choice([Buffer.ACC, Buffer.ACC8])
            loads.append(g.load_into(g.w_stage[b], buf,
                                     g.r_acc if buf == Buffer.ACC else g.r_bytes))
        else:
            win = g.w_stage[b]
            params_row = win.start + r.randrange(win.size - 1)
            addr, kind_ = r.choice(g.params)
            g.notes.append(f"REQ parameters: {kind_}")
            loads.append(isa.load(Buffer.ACC, sp_base=params_row, y_size=1, x_size=2,
                                  y_stride=2, **g.address(addr)))
    loads[0] = _with_flags(loads[0], pop_next=int(t >= 2))
    loads[-1] = _with_flags(loads[-1], push_next=1)

    comp: list[Insn] = []
    for _ in range(r.randrange(1, 5)):
        u = r.random()
        comp.append(g.gemm(b) if u < 0.35 else g.dw(b) if u < 0.55 else g.alu(b, params_row))
    comp[0] = _with_flags(comp[0], pop_prev=1, pop_next=int(t >= 2))
    comp[-1] = _with_flags(comp[-1], push_prev=1, push_next=1)

    st = g.stores(b)
    st[0] = _with_flags(st[0], pop_prev=1)
    st[-1] = _with_flags(st[-1], push_prev=1)
    slices.append((t, *g.regions[-1]))
    return loads, comp, st


def _merge(rng: random.Random, streams: list[list[Insn]]) -> list[Insn]:
    """A random program order of the three unit streams in which every pop's token is pushed
    earlier (always possible: the streams have such an order, and emitting an instruction only
    ever enables more)."""
    queues = [deque(s) for s in streams]
    pushes = [0, 0, 0, 0]
    pops = [0, 0, 0, 0]
    out: list[Insn] = []
    bias = [rng.random() + 0.2 for _ in range(3)]
    while any(queues):
        ready = []
        for u, q in enumerate(queues):
            if q:
                p, _ = _token_flags(q[0])
                if all(pops[c] < pushes[c] for c in p):
                    ready.append(u)
        if not ready:
            raise ProgramCheckError("unit streams with no token order")
        u = rng.choices(ready, weights=[bias[k] for k in ready])[0]
        insn = queues[u].popleft()
        p, q = _token_flags(insn)
        for c in p:
            pops[c] += 1
        for c in q:
            pushes[c] += 1
        out.append(insn)
    return out


def _streams(g: _Gen, n_insns: int) -> list[list[Insn]]:
    """Per-unit streams: the window fills, then tiles until about n_insns instructions."""
    g.windows()
    prologue = [x for w in (*g.w_inp, *g.w_wgt, *g.w_work, *g.w_stage) for x in g.fill_window(w)]
    g.rng.shuffle(prologue)
    streams: list[list[Insn]] = [prologue, [], []]
    slices: list[tuple[int, int, int]] = []
    t = 0
    while t < 2 or sum(map(len, streams)) < n_insns - 1:
        for _ in range(20):
            saved = (g.cur, len(g.regions), len(g.notes))
            try:
                loads, comp, st = _tile_streams(g, t, slices)
                break
            except _Retry:
                g.cur = saved[0]
                del g.regions[saved[1]:]
                del g.notes[saved[2]:]
        else:
            raise ProgramCheckError("could not place a tile")
        streams[Unit.LOAD] += loads
        streams[Unit.COMPUTE] += comp
        streams[Unit.STORE] += st
        t += 1
    return streams


def generate(rng: random.Random, cfg: AccelConfig, *, mem_size: int,
             n_insns: int = 60) -> RandomProgram:
    """A race-free, error-free, deadlock-free random program of about `n_insns` instructions
    (at least about 30: the window fills and two tiles; END last) whose card-memory footprint
    lies in [0, min(mem_size, 1 MiB)). ValueError if it cannot fit."""
    g = _Gen(rng, cfg, mem_size, n_insns)
    program = _merge(rng, _streams(g, n_insns)) + [isa.end()]
    return _finish(g, program)


def _finish(g: _Gen, program: list[Insn | bytes], expect: AccelError = AccelError.NONE,
            pc: int = 0) -> RandomProgram:
    align = g.rng.choice([16, 32, 48, 64])
    base = g.alloc(isa.INSN_BYTES * len(program) + 64, 64) + align % 64
    rp = RandomProgram(program, list(g.slots), list(g.init), list(g.regions), base,
                       (g.lo, g.hi), expect, pc, sorted(set(g.notes)))
    if expect == AccelError.NONE:
        check_races(program, g.n, g.slots)
    elif expect != AccelError.DEADLOCK:
        check_token_order(program)
    return rp


def _run_once(rp: RandomProgram, cfg: AccelConfig) -> tuple[AccelError, int]:
    r = AccelModel(cfg).run_array(np.frombuffer(rp.memory(), np.uint8), rp.insn_base,
                                  rp.insn_count, rp.slots)
    return r.error, r.err_pc


# --- programs that fail ---------------------------------------------------------------------------

ERROR_KINDS = (AccelError.ILLEGAL_OPCODE, AccelError.ILLEGAL_FIELD, AccelError.SP_RANGE,
               AccelError.MISALIGNED, AccelError.LOAD_BUS, AccelError.STORE_BUS,
               AccelError.NO_END, AccelError.DEADLOCK, AccelError.DIV_ZERO,
               AccelError.NEG_SQRT)


def _bad_insn(g: _Gen, kind: AccelError) -> Insn | bytes:
    """An instruction (no dependency flags) that fails with `kind` and nothing else."""
    r, c, n = g.rng, g.cfg, g.n
    if kind == AccelError.ILLEGAL_OPCODE:
        op = r.choice([0, *range(int(max(Opcode)) + 1, 16)])
        return ((r.getrandbits(124) << 4) | op).to_bytes(isa.INSN_BYTES, "little")
    if kind == AccelError.ILLEGAL_FIELD:
        return r.choice([
            lambda: isa.load(r.choice(list(Buffer)), y_size=1, x_size=1,
                             **{r.choice(["pop_prev", "push_prev"]): 1}),
            lambda: isa.store(Buffer.ACC, **{r.choice(["pop_next", "push_next"]): 1}),
            lambda: isa.store(r.choice([Buffer.INP, Buffer.WGT]), y_size=1, x_size=1),
            lambda: isa.store(Buffer.ACC, y_size=1, x_size=1, transpose=1),
            lambda: isa.load(r.choice([Buffer.WGT, Buffer.ACC, Buffer.ACC8]), y_size=n,
                             x_size=1, transpose=1),
            lambda: isa.load(Buffer.INP, y_size=n + r.randrange(1, n) if n > 1 else 0,
                             x_size=1, transpose=1, pad_left=int(n == 1)),
            lambda: isa.store(Buffer.ACC8, **{r.choice(["pad_top", "pad_bottom", "pad_left",
                                                        "pad_right"]): r.randrange(1, 16)}),
            lambda: Insn(Opcode.ALU, {"alu_op": 7, "outer": 1, "inner": 1}),
            lambda: Insn(Opcode.XALU, {"alu_op": r.randrange(len(XAluOp), 8), "outer": 1,
                                       "inner": 1}),
            lambda: Insn(Opcode.ALU, {"alu_op": int(AluOp.REQ), "use_imm": 1, "outer": 1,
                                      "inner": 1}),
            lambda: Insn(Opcode.END, {r.choice(["pop_prev", "pop_next", "push_prev",
                                                "push_next"]): 1}),
            lambda: isa.dw(outer=1, inner=1, **r.choice([
                {"taps": 0, "tap_w": 1}, {"taps": n + 1, "tap_w": 15}, {"taps": 1, "tap_w": 0},
                {"taps": 2, "tap_w": 1, "tap_pitch": 2 + n * r.randrange(4)}])),
        ])()
    if kind == AccelError.SP_RANGE:
        which = r.randrange(7)
        if which == 0:     # LOAD whose padded tile runs past the depth; memory in range
            buf = r.choice(list(Buffer))
            depth = c.depth(buf)
            e = isa.element_bytes(buf, n)
            a = g.pick_source(g.r_bytes if e <= 4 * n else g.r_wgt, e, 1, 1, 1)
            return isa.load(buf, sp_base=depth - 1, y_size=1, x_size=1,
                            pad_right=r.randrange(1, 3), **g.address(a))
        if which == 1:
            buf = r.choice([Buffer.ACC, Buffer.ACC8])
            e = isa.element_bytes(buf, n)
            a = g.pick_source(g.r_acc, e, 1, 2, 2)
            return isa.store(buf, sp_base=c.acc_depth - 1, y_size=1, x_size=2, y_stride=2,
                             **g.address(a))
        if which == 2:
            return isa.gemm(acc_base=c.acc_depth - 3, outer=2, inner=2, acc_so=2, acc_si=1)
        if which == 3:
            return isa.gemm(inp_base=c.inp_depth - 1, outer=1, inner=2, inp_si=1)
        if which == 4:
            return isa.gemm(wgt_base=c.wgt_depth + r.randrange(0, 3), outer=1, inner=1)
        if which == 5:     # DW whose last tap is the row at the depth (its first is in range)
            taps = min(n, 4)
            last = isa.dw_offsets(taps, 1, n + 1)[-1]
            return isa.dw(inp_base=c.inp_depth - last, outer=1, inner=1, taps=taps, tap_w=1,
                          tap_pitch=n + 1)
        return isa.req(src_base=c.acc_depth - 1, outer=1, inner=1)   # shift row at depth
    if kind == AccelError.MISALIGNED:
        buf = r.choice(list(Buffer))
        e = isa.element_bytes(buf, n)
        if r.random() < 0.5 or buf in (Buffer.INP, Buffer.WGT):
            a = g.pick_source(g.r_wgt, n * n, 1, 1, 1) + r.randrange(1, e)
            return isa.load(buf, sp_base=g.w_stage[0].start if buf in (Buffer.ACC, Buffer.ACC8)
                            else 0, y_size=r.randrange(0, 2), x_size=1, **g.address(a))
        a = g.regions[0][0] + r.randrange(1, e)
        return isa.store(buf, sp_base=0, y_size=1, x_size=1, **g.address(a))
    if kind == AccelError.DIV_ZERO:          # B = 0 in every lane
        return isa.xalu(XAluOp.DIV, 0, dst_base=g.w_work[0].start, outer=1,
                        inner=r.randrange(1, 3))
    if kind == AccelError.NEG_SQRT:
        return isa.xalu(XAluOp.SQRT, -r.randrange(1, 1 << 23), dst_base=g.w_work[0].start,
                        outer=1, inner=1)
    if kind in (AccelError.LOAD_BUS, AccelError.STORE_BUS):
        buf = r.choice([Buffer.ACC, Buffer.ACC8]) if kind == AccelError.STORE_BUS \
            else r.choice(list(Buffer))
        e = isa.element_bytes(buf, n)
        end = -(-g.mem_size // e) * e
        if r.random() < 0.5 and end == g.mem_size:
            a, x = end - e, 2                         # the row runs off the end of memory
        else:
            a, x = min(end + e * r.randrange(0, 64), (1 << 32) - e), 1
            a -= a % e
        mk = isa.load if kind == AccelError.LOAD_BUS else isa.store
        return mk(buf, sp_base=0, y_size=1, x_size=x, y_stride=x, **g.address(a))
    raise ValueError(f"no bad instruction for {kind.name}")


def generate_error(rng: random.Random, cfg: AccelConfig, kind: AccelError,
                   mem_size: int) -> RandomProgram:
    """A program whose first error is `kind` at `expect_pc`, under every schedule.

    A valid random program (race-free, its pops paired with earlier pushes, so the fetcher and
    every unit always reach any given instruction) gets one failing instruction without
    dependency flags inserted at a random pc, or loses its END (NO_END), or gets a pop nobody
    pushes (DEADLOCK: at a random place, or the queue-filling kind at the end).
    """
    if kind not in ERROR_KINDS:
        raise ValueError(f"generate_error makes {[k.name for k in ERROR_KINDS]}, not {kind}")
    g = _Gen(rng, cfg, mem_size)
    base: list[Insn | bytes] = list(_merge(rng, _streams(g, rng.randrange(12, 40))))
    if kind == AccelError.NO_END:
        rp = _finish(g, base, kind, len(base))
    elif kind == AccelError.DEADLOCK:
        if rng.random() < 0.5:
            # The compute queue fills with GEMMs waiting for loads that come after them.
            k = cfg.queue_depth + 2
            nop = {"outer": 0, "inner": 0}
            program = base + [isa.gemm(pop_prev=1, **nop)] * k \
                + [isa.load(Buffer.INP, push_next=1, **g.address(g.r_bytes[0]))] * k \
                + [isa.end()]
        else:
            stuck = rng.choice([isa.gemm(pop_prev=1, outer=0, inner=0),
                                isa.store(Buffer.ACC, pop_prev=1, **g.address(g.r_acc[0]))])
            k = rng.randrange(len(base) + 1)
            program = base[:k] + [stuck] + base[k:] + [isa.end()]
        # ERR_PC counts the instructions dispatched when nothing can move, the same under
        # every schedule: take it from one run.
        rp = _finish(g, program, kind, 0)
        rp.expect_pc = _run_once(rp, cfg)[1]
    else:
        bad = _bad_insn(g, kind)
        pc = rng.randrange(len(base) + 1)
        program = base[:pc] + [bad] + base[pc:] + [isa.end()]
        rp = _finish(g, program, kind, pc)
    got = _run_once(rp, cfg)
    if got != (kind, rp.expect_pc):
        raise ProgramCheckError(f"{kind.name} program at pc {rp.expect_pc} ended with "
                                f"{got[0].name} at pc {got[1]}")
    return rp


# --- coverage -------------------------------------------------------------------------------------

def coverage(rp: RandomProgram, cfg: AccelConfig) -> set[str]:
    """The ISA features a program exercises (for coverage reports and tests)."""
    n = cfg.n
    out: set[str] = set(rp.notes)
    slots_used = set()
    for insn in rp.program:
        if isinstance(insn, bytes):
            out.add("illegal-opcode")
            continue
        f = insn.fields
        g = f.get
        out.add(f"op:{insn.op.name}")
        if insn.op in (Opcode.LOAD, Opcode.STORE):
            buf = Buffer(g("buf", 0))
            out.add(f"{insn.op.name}.{buf.name}" + (".transposed" if g("transpose", 0) else ""))
            e = isa.element_bytes(buf, n)
            y, x, stride = g("y_size", 0), g("x_size", 0), g("y_stride", 0)
            addr = rp.slots[g("slot", 0)] + g("offset", 0)
            slots_used.add(g("slot", 0))
            if addr >= 1 << 32:
                out.add("address wraps 2**32")
            if (addr & _MASK32) % 64 and (addr & _MASK32) % e == 0:
                out.add("element-aligned, not 64-byte aligned")
            if y == 0 or x == 0:
                out.add("zero size")
            if y > 1:
                out.add("y_stride > x_size" if stride > x else
                        "y_stride < x_size" if stride < x else "y_stride = x_size")
            if any(a // 4096 != (b - 1) // 4096 for a, b in _mem_ranges(f, e, rp.slots)):
                out.add("row crosses 4 KiB")
            pads = [g(k, 0) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right")]
            if any(pads):
                out.add(f"padding {insn.op.name}.{buf.name}")
                if g("pad_value", 0):
                    out.add("pad_value != 0")
            touched = [a for a in footprint(insn, n, rp.slots) if a.res != "MEM"]
            if any(a.hi == cfg.depth(buf) - 1 for a in touched):   # contiguous rows
                out.add(f"last row of {Buffer(buf).name if buf != Buffer.ACC8 else 'ACC'}")
        elif insn.op == Opcode.GEMM:
            if g("acc_si", 0) == 0 and g("inner", 0) > 1:
                out.add("GEMM acc_si = 0 (accumulate into one row)")
            if g("reset", 0):
                out.add("GEMM reset")
            if g("inp_si", 0) > 1 or g("inp_so", 0) != g("inner", 0) * g("inp_si", 0):
                out.add("GEMM input strides")
        elif insn.op == Opcode.DW:
            if g("taps", 0) > g("tap_w", 0):
                out.add("DW taps over kernel rows")
            if g("taps", 0) == cfg.n:
                out.add("DW all N taps")
            if g("acc_si", 0) == 0 and g("inner", 0) > 1:
                out.add("DW acc_si = 0 (accumulate into one row)")
        elif insn.op == Opcode.XALU:
            out.add(f"XALU.{XAluOp(g('alu_op', 0)).name}")
        elif insn.op == Opcode.ALU:
            op = AluOp(g("alu_op", 0))
            out.add(f"ALU.{op.name}" + (".imm" if g("use_imm", 0) else ""))
            d = {g("dst_base", 0) + o * g("dst_so", 0) + i * g("dst_si", 0)
                 for o in range(g("outer", 0)) for i in range(g("inner", 0))}
            if not g("use_imm", 0):
                s = {g("src_base", 0) + o * g("src_so", 0) + i * g("src_si", 0)
                     for o in range(g("outer", 0)) for i in range(g("inner", 0))}
                if s & d:
                    out.add("ALU source overlaps destination")
            if g("dst_si", 0) == 0 and g("inner", 0) > 1:
                out.add("ALU dst_si = 0 (repeated destination)")
            if op == AluOp.REQ:
                _, lo, hi = isa.req_fields(g("imm", 0))
                if lo > hi:
                    out.add("REQ lo > hi")
        if any(f.get(k) for k in ("pop_prev", "pop_next")):
            out.add(f"pop:{insn.unit.name if insn.unit is not None else 'END'}")
    if len(slots_used) > 3:
        out.add("several slots")
    return out


# --- random layer parameters (kernel tests, card checks, benchmarks) -----------------------------

def random_conv_quant(rng: np.random.Generator, co: int, ci: int, kh: int, kw: int) -> dict:
    """Random quantizer parameters of a Conv (the keys of compiler/quantize/quantizer.py's
    "quant"): int8 weights, zero points, the zero-point-corrected int32 bias and per-channel
    multipliers that spread the outputs over the int8 range."""
    w = rng.integers(-127, 128, (co, ci, kh, kw)).astype(np.int8)
    zin, zout = int(rng.integers(-40, 40)), int(rng.integers(-30, 30))
    bias = rng.integers(-(2**15), 2**15, co)
    corrected = bias - zin * w.astype(np.int64).sum(axis=(1, 2, 3))
    m = 40.0 / (74 * 73 * np.sqrt(ci * kh * kw)) * rng.uniform(0.5, 2.0, co)
    mult, shift = quantize_multipliers(m)
    return {"weight": w, "bias_corrected": corrected.astype(np.int32), "multiplier": mult,
            "shift": shift, "input_zero_point": zin, "output_zero_point": zout}


def random_gemm_quant(rng: np.random.Generator, k: int, nout: int, axis: int = 0) -> dict:
    """`random_conv_quant` for a Gemm with a (Nout, K) weight (`axis` 0) or a (K, Nout) one."""
    q = random_conv_quant(rng, nout, k, 1, 1)
    w = q["weight"][:, :, 0, 0]
    return {**q, "weight": w if axis == 0 else np.ascontiguousarray(w.T), "weight_axis": axis}

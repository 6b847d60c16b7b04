"""The static race check of accelerator programs: every two instructions on different units that
touch the same scratchpad row or card byte, one of them writing it, must be ordered by
dependency tokens (docs/isa.md "Execution model"), or the result depends on timing.

Used on every stream the kernels and the compiler plugin emit (slot-relative: different slots
are assumed not to overlap, as the runtime binds them to distinct tensors) and on the random
programs of `tb.accel.randprog` (with the slots' addresses: absolute card bytes, wrapping at
2**32). Order is the happens-before relation of the token protocol: the k-th pop of a counter
waits for its k-th push, and a unit runs its own instructions in program order; it is tracked
with one vector clock per instruction. Conflicts are found on coarse intervals first and then
confirmed on the exact rows and byte ranges, so strided accesses that interleave are not
reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyhost.spec import isa
from pyhost.spec.accel import DEFAULT_N
from pyhost.spec.isa import AluOp, Buffer, Insn, Opcode

_SPACE = 1 << 32


class ProgramCheckError(AssertionError):
    """A program that breaks the token rules: a race, or a pop with no earlier push."""


@dataclass(frozen=True)
class _Access:
    """A range an instruction touches: scratchpad rows of `res` ("INP", "WGT", "ACC"), or card
    bytes ("MEM", or ("MEM", slot) when slot-relative), from `lo` to `hi` inclusive."""

    res: object
    lo: int
    hi: int
    write: bool


def _mem_rows(insn: Insn, n: int, slots: Sequence[int] | None) -> tuple[object, int, int, int]:
    """(resource, first byte, row stride in bytes, bytes per row) of a LOAD/STORE."""
    e = isa.element_bytes(Buffer(insn.buf), n)
    if slots is None:
        return ("MEM", insn.slot), insn.offset, insn.y_stride * e, insn.x_size * e
    base = (slots[insn.slot] + insn.offset) % _SPACE
    return "MEM", base, insn.y_stride * e, insn.x_size * e


def _mem_access(insn: Insn, n: int, slots: Sequence[int] | None, write: bool) -> list[_Access]:
    res, base, stride, length = _mem_rows(insn, n, slots)
    end = base + (insn.y_size - 1) * stride + length            # exclusive
    if slots is None or end <= _SPACE:
        return [_Access(res, base, end - 1, write)]
    return [_Access(res, base, _SPACE - 1, write), _Access(res, 0, end - _SPACE - 1, write)]


def _loop_last(base: int, outer: int, inner: int, so: int, si: int) -> int:
    return base + (outer - 1) * so + (inner - 1) * si


def footprint(insn: Insn, n: int, slots: Sequence[int] | None = None) -> list[_Access]:
    """The coarse ranges `insn` reads and writes (an instruction that moves nothing: none)."""
    f = insn
    if insn.op in (Opcode.LOAD, Opcode.STORE):
        y, x = f.y_size, f.x_size
        if insn.op == Opcode.LOAD:
            buf = Buffer(f.buf)
            sp = "ACC" if buf in (Buffer.ACC, Buffer.ACC8) else buf.name
            rows = (f.pad_top + y + f.pad_bottom) * (f.pad_left + x + f.pad_right)
            out = [_Access(sp, f.sp_base, f.sp_base + rows - 1, True)] if rows else []
            return out + (_mem_access(insn, n, slots, False) if y and x else [])
        if not (y and x):
            return []
        return [_Access("ACC", f.sp_base, f.sp_base + y * x - 1, False),
                *_mem_access(insn, n, slots, True)]
    if insn.op not in (Opcode.GEMM, Opcode.DW, Opcode.ALU, Opcode.XALU) \
            or not (f.outer and f.inner):
        return []
    if insn.op in (Opcode.GEMM, Opcode.DW):
        taps = _taps(insn)
        return [_Access("ACC", f.acc_base, _loop_last(f.acc_base, f.outer, f.inner, f.acc_so,
                                                      f.acc_si), True),
                _Access("INP", f.inp_base, _loop_last(f.inp_base, f.outer, f.inner, f.inp_so,
                                                      f.inp_si) + taps[-1], False),
                _Access("WGT", f.wgt_base, f.wgt_base, False)]
    out = [_Access("ACC", f.dst_base, _loop_last(f.dst_base, f.outer, f.inner, f.dst_so,
                                                 f.dst_si), True)]
    if not f.use_imm:
        last = _loop_last(f.src_base, f.outer, f.inner, f.src_so, f.src_si)
        req = insn.op == Opcode.ALU and f.alu_op == AluOp.REQ
        out.append(_Access("ACC", f.src_base, last + (1 if req else 0), False))
    return out


def _taps(insn: Insn) -> list[int]:
    """The input row offsets an iteration reads: a DW's taps, a GEMM's one row."""
    if insn.op == Opcode.DW:
        return isa.dw_offsets(insn.taps, insn.tap_w, insn.tap_pitch)
    return [0]


def _loop_rows(base: int, outer: int, inner: int, so: int, si: int) -> np.ndarray:
    return (base + np.arange(outer, dtype=np.int64)[:, None] * so
            + np.arange(inner, dtype=np.int64)[None, :] * si).reshape(-1)


def _exact_rows(insn: Insn, res: str, write: bool) -> np.ndarray:
    """The scratchpad rows of `res` that `insn` writes (or reads), sorted and unique."""
    f = insn
    if insn.op in (Opcode.LOAD, Opcode.STORE):
        if insn.op == Opcode.LOAD:
            rows = (f.pad_top + f.y_size + f.pad_bottom) * (f.pad_left + f.x_size + f.pad_right)
        else:
            rows = f.y_size * f.x_size
        return np.arange(f.sp_base, f.sp_base + rows, dtype=np.int64)
    if insn.op in (Opcode.GEMM, Opcode.DW):
        loops = {"ACC": (f.acc_base, f.acc_so, f.acc_si), "INP": (f.inp_base, f.inp_so, f.inp_si)}
        if res == "WGT":
            return np.array([f.wgt_base], np.int64)
        rows = _loop_rows(loops[res][0], f.outer, f.inner, *loops[res][1:])
        if res == "INP":
            rows = (rows[:, None] + np.array(_taps(insn), np.int64)[None, :]).reshape(-1)
        return np.unique(rows)
    dst = _loop_rows(f.dst_base, f.outer, f.inner, f.dst_so, f.dst_si)
    if write:
        return np.unique(dst)
    src = _loop_rows(f.src_base, f.outer, f.inner, f.src_so, f.src_si)
    if insn.op == Opcode.ALU and f.alu_op == AluOp.REQ:
        src = np.concatenate([src, src + 1])
    return np.unique(src)


def _exact_bytes(insn: Insn, n: int, slots: Sequence[int] | None) -> list[tuple[int, int]]:
    """The card byte ranges [a, b) of a LOAD/STORE, one per memory row (split at 2**32)."""
    _, base, stride, length = _mem_rows(insn, n, slots)
    out = []
    for r in range(insn.y_size):
        a = base + r * stride
        if slots is not None:
            a %= _SPACE
            if a + length > _SPACE:
                out += [(a, _SPACE), (0, a + length - _SPACE)]
                continue
        out.append((a, a + length))
    return sorted(out)


def _ranges_meet(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> bool:
    i = j = 0
    while i < len(x) and j < len(y):
        if x[i][0] < y[j][1] and y[j][0] < x[i][1]:
            return True
        if x[i][1] <= y[j][1]:
            i += 1
        else:
            j += 1
    return False


def _conflict(a: Insn, fa: list[_Access], b: Insn, fb: list[_Access], n: int,
              slots: Sequence[int] | None) -> str | None:
    """What `a` and `b` both touch (one writing), or None."""
    for x in fa:
        for y in fb:
            if x.res != y.res or not (x.write or y.write) or x.lo > y.hi or y.lo > x.hi:
                continue
            if isinstance(x.res, str) and x.res != "MEM":
                common = np.intersect1d(_exact_rows(a, x.res, x.write),
                                        _exact_rows(b, y.res, y.write), assume_unique=True)
                if common.size:
                    return f"{x.res} row {int(common[0])}"
            elif _ranges_meet(_exact_bytes(a, n, slots), _exact_bytes(b, n, slots)):
                where = "card memory" if slots is not None else f"memory of slot {x.res[1]}"
                return f"{where} near byte {max(x.lo, y.lo):#x}"
    return None


def _program(program: Sequence[Insn | bytes]) -> list[tuple[int, Insn]]:
    """(pc, instruction) of the instructions that run on a unit (16-byte images and END
    skipped)."""
    return [(pc, i) for pc, i in enumerate(program)
            if isinstance(i, Insn) and i.unit is not None]


def check_token_order(program: Sequence[Insn | bytes]) -> None:
    """Every pop's token (the k-th pop of a counter takes its k-th push) is pushed by an earlier
    instruction in program order. Such a program cannot deadlock with any queue depth: the
    earliest unfinished instruction can always start."""
    pushes = [0, 0, 0, 0]
    pops = [0, 0, 0, 0]
    for pc, insn in _program(program):
        p, q = isa.token_counters(insn.unit, insn.fields)
        for c in p:
            pops[c] += 1
            if pops[c] > pushes[c]:
                raise ProgramCheckError(f"pc {pc} ({insn}) pops a token of counter {c} with no "
                                        "earlier push")
        for c in q:
            pushes[c] += 1


def check_races(program: Sequence[Insn | bytes], n: int = DEFAULT_N,
                slots: Sequence[int] | None = None) -> int:
    """Prove `program` race-free for an array of size `n`: ProgramCheckError naming the first
    pair of instructions on different units that touch the same data (one writing) without a
    token ordering them. With `slots` (the slot registers' addresses) memory is absolute card
    bytes; without, each slot is its own space. Returns the unordered pairs examined."""
    check_token_order(program)
    prog = _program(program)
    seq: list[list[int]] = [[], [], []]        # per unit: indices into prog, in order
    vc: list[list[int]] = []                   # per instruction: last seq of each unit before it
    pos: list[int] = []
    units: list[int] = []
    pushers: list[list[int]] = [[], [], [], []]
    popped = [0, 0, 0, 0]
    last = [[-1, -1, -1] for _ in range(3)]
    for i, (_, insn) in enumerate(prog):
        u = int(insn.unit)
        v = list(last[u])
        pops, pushes = isa.token_counters(insn.unit, insn.fields)
        for c in pops:
            v = [max(a, b) for a, b in zip(v, vc[pushers[c][popped[c]]], strict=True)]
            popped[c] += 1
        v[u] = len(seq[u])
        pos.append(len(seq[u]))
        seq[u].append(i)
        vc.append(v)
        units.append(u)
        last[u] = v
        for c in pushes:
            pushers[c].append(i)
    fps = [footprint(insn, n, slots) for _, insn in prog]
    examined = 0
    for i in range(len(prog)):
        u = units[i]
        for v in range(3):
            if v == u:
                continue
            k = vc[i][v] + 1          # v's instructions from here on are not before i
            while k < len(seq[v]):
                j = seq[v][k]
                if vc[j][u] >= pos[i]:  # i happens before j, and before every later one of v
                    break
                k += 1
                if j > i:               # each unordered pair once, from its later instruction
                    continue
                examined += 1
                what = _conflict(prog[j][1], fps[j], prog[i][1], fps[i], n, slots)
                if what:
                    raise ProgramCheckError(
                        f"race: pc {prog[j][0]} ({prog[j][1]}) and pc {prog[i][0]} "
                        f"({prog[i][1]}) both touch {what}, one writing, without a token "
                        "between them")
    return examined

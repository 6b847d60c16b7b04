"""The functional model's default schedule run as program order, a window of instructions at a
time (the fast path of `AccelModel`; docs/accel.md "Speed where users wait").

The model's default schedule is a round robin (`_Run._go_round_robin`): each round the fetcher
dispatches the next instruction, then the load, compute and store units each start the
instruction at the head of their queue if the tokens it pops are there. While every instruction
finds the tokens it pops already pushed by earlier instructions, that round robin *is* program
order. By induction on the rounds: at the start of round k every queue is empty, the fetcher is
at pc k and instructions 0..k-1 have run in order; the fetcher dispatches k (its queue holds
nothing, fewer than queue_depth + 1), and in the same round k's unit, the only one with an
instruction, starts it, since its tokens are there; every queue is empty again. So when the
tokens allow it, running the instructions one after the other in program order gives the round
robin's scratchpads, memory, counters and timing estimate exactly, for any program, racy or not.

`ProgramOrder` does that for windows of the program at once. Each window is decoded with numpy
and checked, with sound vectorized rules, for anything the fast path does not handle: an
instruction the fetch unit rejects or might reject (illegal opcode or field; END), a pop whose
token is not there or a push that overflows a counter (in program order), an SP_RANGE,
MISALIGNED or bus error, a fetch beyond memory, a STORE that could write the program's own
bytes, an address that wraps at 2**32. The instructions before the first such one run here; the
run then continues with the round robin from exactly the state it would have had there (queues
empty, tokens, counters and the timing estimate's state), so anything unusual, every error
included, goes through the unchanged scheduler, with the same ERR_PC. Instructions that pass
the vectorized rules are legal: the rules accept a subset of what `isa.check_static` and the
units accept (DW, rare, is checked with `isa.check_static` itself).

Inside a window the compute unit's GEMMs are computed in batches (consecutive GEMMs; LOADs,
STOREs and ALUs on other rows run past them, as `_GemmBatch` does): runs of GEMMs with the same
loops become one float32 matrix product (exact: see `_products`), runs with the same input rows
share it, and the timing estimate is a loop on plain ints. `schedule_seed` (a random
interleaving) never comes here.
"""

from __future__ import annotations

import bisect
import sys
from typing import Any

import numpy as np

from pyhost.accel.timing import field_bits
from pyhost.spec import isa
from pyhost.spec.accel import BEAT_BYTES
from pyhost.spec.isa import AccelError, Buffer, Opcode

_MASK32 = isa.ADDR_SPACE - 1
_LOAD, _STORE, _GEMM, _ALU, _END, _DW = (int(Opcode.LOAD), int(Opcode.STORE), int(Opcode.GEMM),
                                         int(Opcode.ALU), int(Opcode.END), int(Opcode.DW))
#: Instructions decoded per window: the first window is small (a short program, or an early END
#: in a long INSN_COUNT, decodes little), each next one 4x larger up to the last.
WINDOW_FIRST = 1 << 12
WINDOW_MAX = 1 << 16
_LITTLE = sys.byteorder == "little"
_EMPTY = (1 << 62, -1)                # an empty row range: commutes with everything


def _layouts() -> dict[int, list[tuple[str, int, int, bool]]]:
    out = {}
    for op, fmt in isa.FORMATS.items():
        lsb, fields = 0, []
        for f in fmt:
            if lsb >= 8:                       # after the opcode and the four flags
                fields.append((f.name, lsb, f.width, f.signed))
            lsb += f.width
        out[int(op)] = fields
    return out


_LAYOUTS = _layouts()


def _extract(lo: np.ndarray, hi: np.ndarray, lsb: int, width: int, signed: bool) -> np.ndarray:
    v = field_bits(lo, hi, lsb, width)
    if signed:
        v -= (v >> (width - 1)) << width
    return v


def decode_fields(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(opcode, flags, fields by name) of every 16-byte instruction in ``raw`` (uint8): flags
    pop_prev, pop_next, push_prev, push_next as bits 0..3; each field an int64 array, 0 where
    the instruction's format has no such field (an illegal opcode has none)."""
    words = np.ascontiguousarray(raw).view("<u8").reshape(-1, 2)
    lo, hi = words[:, 0], words[:, 1]
    k = lo.size
    op = (lo & np.uint64(0xF)).astype(np.int64)
    flags = ((lo >> np.uint64(4)) & np.uint64(0xF)).astype(np.int64)
    cols: dict[str, np.ndarray] = {}
    for code, fields in _LAYOUTS.items():
        sel = op == code
        count = int(np.count_nonzero(sel))
        if not count or not fields:
            continue
        whole = count == k
        ls, hs = (lo, hi) if whole else (lo[sel], hi[sel])
        for name, lsb, width, signed in fields:
            v = _extract(ls, hs, lsb, width, signed)
            if whole:
                cols[name] = v
            else:
                col = cols.get(name)
                if col is None:
                    col = cols[name] = np.zeros(k, np.int64)
                col[sel] = v
    return op, flags, cols


class _Col(dict):
    """Field columns by name; an absent field is all zeros."""

    def __init__(self, cols: dict[str, np.ndarray], k: int) -> None:
        super().__init__(cols)
        self.k = k

    def __missing__(self, name: str) -> np.ndarray:
        v = self[name] = np.zeros(self.k, np.int64)
        return v


def _first(mask: np.ndarray) -> int:
    """Index of the first True of ``mask``, or its length."""
    i = int(np.argmax(mask)) if mask.size else 0
    return i if mask.size and mask[i] else mask.size


class ProgramOrder:
    """Runs `run` (a model._Run at its start) in program order while that is the round robin's
    order and nothing unusual happens (module docstring); leaves `run` exactly as the round
    robin would have left it before the first instruction it did not run."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.model = model = run.model
        cfg = self.cfg = model.cfg
        self.n = cfg.n
        self.mem = run.mem
        self.arr = getattr(run.mem, "arr", None)          # card memory as a numpy array
        self.slots = np.array(run.slots, np.int64)
        self.elem = np.array([isa.element_bytes(Buffer(b), cfg.n) for b in range(4)], np.int64)
        self.depth = np.array([cfg.depth(Buffer(b)) for b in range(4)], np.int64)
        self.inp_b = model.inp.reshape(-1).view(np.uint8)
        self.wgt_b = model.wgt.reshape(-1).view(np.uint8)
        self.acc_b = model.acc.reshape(-1).view(np.uint8)
        #: counters the per-instruction methods add to (the window counts them itself)
        self.scratch: dict[str, int] = dict.fromkeys(run.c, 0)
        #: each window's timing inputs, evaluated in order at the end (`go`)
        self.timing: list[tuple[np.ndarray, ...]] = []

    # --- the windows ---------------------------------------------------------------------------

    def go(self) -> None:
        run = self.run
        prog = run.prog
        size = WINDOW_FIRST
        at_end = False
        while not run.error:
            lo = run.pc
            hi = min(prog.count, lo + size)
            if lo >= hi:
                break                                     # NO_END: the round robin reports it
            raw = prog.window(lo, hi)
            stop, at_end = self._window(lo, raw)
            if stop < hi:
                break
            size = min(size * 4, WINDOW_MAX)
        if at_end and not run.want_timing:
            # The next instruction is an END the fetch unit accepts: the run ends there
            # without error, and the caller does not want the timing estimate.
            run.timing_skipped = True
        else:
            for args in self.timing:
                self._timing(*args)
        prog.resume(run.pc)

    def _window(self, lo: int, raw: np.ndarray) -> tuple[int, bool]:
        """Runs what it can of the instructions at pcs lo.. (``raw``: their bytes, possibly
        fewer than asked for); returns the pc of the first one it did not run, and whether
        that one is an END without flags (the run's successful end)."""
        run, cfg, n = self.run, self.cfg, self.n
        k = raw.size // isa.INSN_BYTES
        if not k:
            return lo, False
        op, flags, cols = decode_fields(raw[:k * isa.INSN_BYTES])
        c = _Col(cols, k)
        is_l, is_s, is_g, is_a, is_d = (op == _LOAD, op == _STORE, op == _GEMM, op == _ALU,
                                        op == _DW)
        is_m = is_l | is_s
        comp = is_g | is_a | is_d
        # --- the fetch unit's check, as a subset of what it accepts (DW: below, exactly)
        bad = ~(is_m | comp)                               # END, illegal opcodes
        bad |= is_l & ((flags & 0b0101) != 0)              # the load unit has no prev queue
        bad |= is_s & (((flags & 0b1010) != 0) | (c["buf"] < 2) | (c["pad_top"] != 0)
                       | (c["pad_bottom"] != 0) | (c["pad_left"] != 0) | (c["pad_right"] != 0))
        alu_op = c["alu_op"]
        bad |= is_a & ((alu_op > 6) | ((alu_op == 6) & (c["use_imm"] != 0)))
        bad |= is_m & (c["transpose"] != 0) & (is_s | (c["buf"] != 0) | (c["y_size"] % n != 0)
                                               | (c["pad_top"] != 0) | (c["pad_bottom"] != 0)
                                               | (c["pad_left"] != 0) | (c["pad_right"] != 0))
        # --- the units' checks: SP_RANGE, MISALIGNED, bus errors (or a STORE onto the program)
        it = c["outer"] * c["inner"]
        e = self.elem[c["buf"]]
        y, x = c["y_size"], c["x_size"]
        total = (c["pad_top"] + y + c["pad_bottom"]) * (c["pad_left"] + x + c["pad_right"])
        addr = (self.slots[c["slot"]] + c["offset"]) & _MASK32
        moves = is_m & (y > 0) & (x > 0)
        end = addr + ((y - 1) * c["y_stride"] + x) * e     # past the last byte moved
        mem_bad = ((total > 0) & (c["sp_base"] + total > self.depth[c["buf"]])) \
            | (addr % e != 0) | (moves & (end > min(self.mem.size, isa.ADDR_SPACE)))
        pb, pe = run.prog.region()
        if pe > pb:
            mem_bad |= is_s & moves & (addr < pe) & (end > pb)
        bad |= is_m & mem_bad
        a_last = c["acc_base"] + (c["outer"] - 1) * c["acc_so"] + (c["inner"] - 1) * c["acc_si"]
        i_last = c["inp_base"] + (c["outer"] - 1) * c["inp_so"] + (c["inner"] - 1) * c["inp_si"]
        bad |= is_g & (it > 0) & ((a_last >= cfg.acc_depth) | (i_last >= cfg.inp_depth)
                                  | (c["wgt_base"] >= cfg.wgt_depth))
        d_last = c["dst_base"] + (c["outer"] - 1) * c["dst_so"] + (c["inner"] - 1) * c["dst_si"]
        s_last = c["src_base"] + (c["outer"] - 1) * c["src_so"] + (c["inner"] - 1) * c["src_si"] \
            + (alu_op == 6)
        bad |= is_a & (it > 0) & ((d_last >= cfg.acc_depth)
                                  | ((c["use_imm"] == 0) & (s_last >= cfg.acc_depth)))
        # --- tokens in program order: a pop must find its token, a push must not overflow
        b0, b1, b2, b3 = ((flags >> i) & 1 for i in range(4))
        pops = [comp * b0, is_l * b1, is_s * b0, comp * b1]      # L2C, C2L, C2S, S2C
        pushes = [is_l * b3, comp * b2, comp * b3, is_s * b2]
        for q in range(4):
            d = pushes[q] - pops[q]
            after = run.tokens[q] + np.cumsum(d)
            bad |= (pops[q] > 0) & (after - d == 0)
            bad |= after > isa.TOKEN_MAX
        s = _first(bad)
        dws = np.flatnonzero(is_d[:s])
        if dws.size:                                        # DW: the exact checks
            for pc in dws.tolist():
                if not self._dw_ok(raw[pc * 16:pc * 16 + 16]):
                    s = pc
                    break
        at_end = s < k and op[s] == _END and flags[s] == 0
        if s == 0:
            return lo, at_end
        # --- run [lo, lo + s)
        cnt = self.run.c
        sl = slice(0, s)
        cnt["insns"] += s
        macs = np.where(is_g[sl], it[sl] * (n * n), 0)
        if dws.size:
            macs += np.where(is_d[sl], it[sl] * c["taps"][sl] * n, 0)
        cnt["macs"] += int(macs.sum())
        moved = np.where(moves[sl], y[sl] * x[sl] * e[sl], 0)
        cnt["bytes_loaded"] += int(moved[is_l[sl]].sum())
        cnt["bytes_stored"] += int(moved[is_s[sl]].sum())
        for q in range(4):
            run.tokens[q] += int(pushes[q][sl].sum() - pops[q][sl].sum())
        # the timing estimate's inputs (`timing.field_cycles` per instruction)
        xe = x[sl] * e[sl]
        beats = -(-xe // BEAT_BYTES)
        mem_rows = np.where(x[sl] > 0, y[sl], 0)
        dur = np.where(is_m[sl], np.maximum(total[sl], mem_rows * beats) + 1, it[sl] + 1)
        unit = np.where(op[sl] == _LOAD, 0, np.where(op[sl] == _STORE, 2, 1))
        self.timing.append((unit, dur, sum(p[sl] << q for q, p in enumerate(pops)),
                            sum(p[sl] << q for q, p in enumerate(pushes)),
                            is_g[sl] | is_d[sl]))
        self._execute(s, op, c, it, a_last, i_last, d_last, s_last, addr, total, e)
        run.pc = lo + s
        return lo + s, at_end

    def _dw_ok(self, word: np.ndarray) -> bool:
        """A DW that the fetch unit accepts and whose rows are in range."""
        d = self.model._check_cached(word.tobytes())
        if isinstance(d, AccelError):
            return False
        f, cfg = d.f, self.cfg
        outer, inner = f["outer"], f["inner"]
        if not (outer and inner):
            return True
        off = isa.dw_offsets(f["taps"], f["tap_w"], f["tap_pitch"])
        a_last = f["acc_base"] + (outer - 1) * f["acc_so"] + (inner - 1) * f["acc_si"]
        i_last = f["inp_base"] + (outer - 1) * f["inp_so"] + (inner - 1) * f["inp_si"] + off[-1]
        return a_last < cfg.acc_depth and i_last < cfg.inp_depth and f["wgt_base"] < cfg.wgt_depth

    # --- the timing estimate -------------------------------------------------------------------

    def _timing(self, unit: np.ndarray, dur: np.ndarray, popm: np.ndarray, pushm: np.ndarray,
                gemm: np.ndarray) -> None:
        """The round robin's timing estimate (`_Run.fetch_step` / `unit_step`, the rules of
        `timing.field_cycles`) of a window's instructions in program order: their units, busy
        cycles, token counters popped and pushed (bit q: counter q), GEMM or DW."""
        run = self.run
        queues = _QUEUES
        cap = run.cap
        fetch_t, unit_t, fin, tok = run.fetch_t, run.unit_t, run.finish_t, run.token_t
        busy, stall = [0, 0, 0], [0, 0, 0]
        gb = 0
        last = run.last_t
        for u, d, po, pu, g in zip(unit.tolist(), dur.tolist(), popm.tolist(), pushm.tolist(),
                                   gemm.tolist(), strict=True):
            t = fetch_t + 1
            fl = fin[u]
            j = len(fl) - cap
            if j >= 0 and fl[j] > t:
                t = fl[j]
            fetch_t = t
            ready = unit_t[u]
            if t >= ready:
                ready = t + 1
            start = ready
            if po:
                for q in queues[po]:
                    v = tok[q].popleft()
                    if v > start:
                        start = v
                stall[u] += start - ready
            finish = start + d
            busy[u] += d
            if g:
                gb += d
            unit_t[u] = finish
            fl.append(finish)
            if finish > last:
                last = finish
            if pu:
                for q in queues[pu]:
                    tok[q].append(finish)
        run.fetch_t, run.last_t = fetch_t, last
        c = run.c
        for u, name in enumerate(("load", "compute", "store")):
            c[f"{name}_busy"] += busy[u]
            c[f"{name}_stall"] += stall[u]
            run.dispatched[u] = len(fin[u])
        c["gemm_busy"] += gb

    # --- execution -----------------------------------------------------------------------------

    def _execute(self, s: int, op: np.ndarray, c: _Col, it: np.ndarray,
                 a_last: np.ndarray, i_last: np.ndarray, d_last: np.ndarray,
                 s_last: np.ndarray, addr: np.ndarray, total: np.ndarray, e: np.ndarray
                 ) -> None:
        """Instructions [0, s) of the window, in program order: GEMMs in batches, the others
        one by one (past the pending batch when they touch none of its rows)."""
        model = self.model
        is_g = op[:s] == _GEMM
        gp = np.flatnonzero(is_g)                          # the GEMMs' pcs, in order
        ev = np.flatnonzero(~is_g)                         # everything else
        batch = _Batch(self, gp, c, it, a_last, i_last) if gp.size else None
        # GEMMs before each event: gp[seg[j]:seg[j + 1]] precede event j
        seg = np.searchsorted(gp, ev).tolist() + [gp.size]
        # the row ranges each event touches (for the batch's commute check)
        eop = op[ev]
        buf = c["buf"][ev]
        tot = total[ev]
        kind = np.where(eop == _LOAD, np.minimum(buf, 2), np.where(eop == _DW, 3, 2))
        has = np.where(eop == _ALU, it[ev] > 0, tot > 0)
        lo1 = np.where(eop == _ALU, c["dst_base"][ev], c["sp_base"][ev])
        hi1 = np.where(eop == _ALU, d_last[ev], c["sp_base"][ev] + tot - 1)
        lo1 = np.where(has, lo1, _EMPTY[0])
        hi1 = np.where(has, hi1, _EMPTY[1])
        src = (eop == _ALU) & has & (c["use_imm"][ev] == 0)
        lo2 = np.where(src, c["src_base"][ev], _EMPTY[0])
        hi2 = np.where(src, s_last[ev] + 1 - (c["alu_op"][ev] == 6), _EMPTY[1])
        # LOADs the direct path takes: no padding, rows moving, memory an array
        simple = np.zeros(ev.size, bool)
        if self.arr is not None:
            simple = (eop == _LOAD) & (c["y_size"][ev] > 0) & (c["x_size"][ev] > 0) \
                & (c["pad_top"][ev] == 0) & (c["pad_bottom"][ev] == 0) \
                & (c["pad_left"][ev] == 0) & (c["pad_right"][ev] == 0) \
                & (c["transpose"][ev] == 0)                # (transposed: the unit's _load)
            if not _LITTLE:
                simple &= buf < 2
        contig = (c["y_size"][ev] == 1) | (c["y_stride"][ev] == c["x_size"][ev])
        sp_b = c["sp_base"][ev] * e[ev]                    # the LOAD's first scratchpad byte
        fields = self._fields(c, ev[~simple], eop[~simple])  # for the units' own methods
        rows = zip(ev.tolist(), eop.tolist(), kind.tolist(), lo1.tolist(), hi1.tolist(),
                   lo2.tolist(), hi2.tolist(), simple.tolist(), contig.tolist(),
                   buf.tolist(), addr[ev].tolist(), e[ev].tolist(), tot.tolist(),
                   sp_b.tolist(), (tot * e[ev]).tolist(), c["sp_base"][ev].tolist(),
                   c["y_size"][ev].tolist(), c["x_size"][ev].tolist(),
                   c["y_stride"][ev].tolist(), strict=True)
        one_by_one = not model.batch_gemms
        arr, n = self.arr, self.n
        dst_bytes = (self.inp_b, self.wgt_b, self.acc_b)
        acc = model.acc
        big, neg = _EMPTY
        # the pending batch: GEMMs gp[batch.start:g0]; the rows they touch
        g0 = 0
        pend = False
        ilo, ihi, wlo, whi, alo, ahi = big, neg, big, neg, big, neg
        seg_r = batch.segment_ranges(seg) if batch else None
        for j, (pc, o, kd, l1, h1, l2, h2, simp, cont, bf, ad, el, tt, d0, nb, sp, ys, xs,
                st) in enumerate(rows):
            g1 = seg[j]
            if g1 > g0:
                assert batch is not None and seg_r is not None
                if one_by_one:
                    batch.one_by_one(g0, g1)
                else:                                      # GEMMs gp[g0:g1] join the batch
                    a0, a1, b0, b1, c0, c1 = seg_r[j]
                    if a0 < ilo:
                        ilo = a0
                    if a1 > ihi:
                        ihi = a1
                    if b0 < wlo:
                        wlo = b0
                    if b1 > whi:
                        whi = b1
                    if c0 < alo:
                        alo = c0
                    if c1 > ahi:
                        ahi = c1
                    pend = True
                g0 = g1
            if pend:                                       # past the batch, or compute it
                if kd == 0:
                    r0, r1 = ilo, ihi
                elif kd == 1:
                    r0, r1 = wlo, whi
                else:
                    r0, r1 = alo, ahi
                if kd == 3 or not (h1 < r0 or l1 > r1) or not (h2 < alo or l2 > ahi):
                    assert batch is not None
                    batch.flush(g1)
                    pend = False
                    ilo, ihi, wlo, whi, alo, ahi = big, neg, big, neg, big, neg
            if simp:                                       # LOAD, straight into the rows
                if bf == 3:                                # ACC8: sign-extend the bytes
                    src = arr[ad:ad + nb] if cont else \
                        np.ndarray((ys, xs * el), np.uint8, arr, ad, (st * el, 1))
                    acc[sp:sp + tt] = src.view(np.int8).reshape(tt, n)
                elif cont:
                    dst_bytes[bf][d0:d0 + nb] = arr[ad:ad + nb]
                else:
                    dst_bytes[bf][d0:d0 + nb].reshape(ys, xs * el)[...] = \
                        np.ndarray((ys, xs * el), np.uint8, arr, ad, (st * el, 1))
                continue
            f = fields[pc]
            if o == _LOAD:
                err = model._load(f, self.mem, self.run.slots, self.scratch)
            elif o == _STORE:
                err = model._store(f, self.mem, self.run.slots, self.scratch)
            elif o == _ALU:
                err = model._alu(f)
            else:
                err = model._dw(f, self.scratch)
            if err:
                raise AssertionError(f"the program-order path ran pc {pc}, which fails "
                                     f"with {AccelError(err).name}")
        if batch is not None:
            g1 = gp.size
            if one_by_one:
                batch.one_by_one(g0, g1)
            else:
                batch.flush(g1)

    @staticmethod
    def _fields(c: _Col, pcs: np.ndarray, ops: np.ndarray) -> dict[int, dict[str, int]]:
        """The fields by name of the instructions at ``pcs`` (opcodes ``ops``), by pc."""
        out: dict[int, dict[str, int]] = {}
        for o in np.unique(ops).tolist():
            at = pcs[ops == o]
            names = [name for name, _, _, _ in _LAYOUTS[o]]
            cols = [c[name][at].tolist() for name in names]
            for pc, vals in zip(at.tolist(), zip(*cols, strict=True), strict=True):
                out[pc] = dict(zip(names, vals, strict=True))
        return out


#: Token counters by bitmask (bit q: counter q).
_QUEUES = [tuple(q for q in range(4) if m >> q & 1) for m in range(16)]


class _Batch:
    """The window's GEMMs (pcs ``gp``) as batches: each batch is a range gp[start:end] of
    consecutive GEMMs, computed together (`flush`) before the first instruction that touches
    one of their rows, or at the window's end. A batch is cut into runs of GEMMs with the same
    accumulator loop and input strides (`AccelModel._gemm_runs`)."""

    def __init__(self, po: ProgramOrder, gp: np.ndarray, c: _Col, it: np.ndarray,
                 a_last: np.ndarray, i_last: np.ndarray) -> None:
        self.model = po.model
        g = {k: c[k][gp] for k in ("acc_base", "outer", "inner", "acc_so", "acc_si", "inp_base",
                                   "inp_so", "inp_si", "wgt_base", "reset")}
        live = it[gp] > 0                                  # GEMMs without iterations do nothing
        big, neg = _EMPTY
        self.r_lo = [np.where(live, g["inp_base"], big), np.where(live, g["wgt_base"], big),
                     np.where(live, g["acc_base"], big)]
        self.r_hi = [np.where(live, i_last[gp], neg), np.where(live, g["wgt_base"], neg),
                     np.where(live, a_last[gp], neg)]
        m = gp.size
        brk = np.ones(m, bool)                             # a run starts here
        if m > 1:
            brk[1:] = False
            for k in ("acc_base", "outer", "inner", "acc_so", "acc_si", "inp_so", "inp_si"):
                v = g[k]
                brk[1:] |= v[1:] != v[:-1]
        #: the GEMMs where a run starts, and each GEMM's last GEMM with reset up to it (or -1)
        self.run_starts = np.flatnonzero(brk).tolist()
        self.last_reset = np.maximum.accumulate(
            np.where(g["reset"] != 0, np.arange(m), -1)).tolist()
        self.lists = {k: v.tolist() for k, v in g.items()}
        self.live = live.tolist()
        self.start = 0

    def segment_ranges(self, seg: list[int]) -> list[tuple[int, int, int, int, int, int]]:
        """For the GEMMs gp[seg[j-1]:seg[j]] (seg[-1] read as 0) of each j: the lowest and the
        highest INP, WGT and ACC rows they touch (`_EMPTY` when there are none)."""
        bounds = np.array([0, *seg], np.int64)
        full = bounds[1:] > bounds[:-1]
        starts = bounds[:-1][full]
        lows, highs = [], []
        for lo, hi in zip(self.r_lo, self.r_hi, strict=True):
            a = np.full(full.size, _EMPTY[0], np.int64)
            b = np.full(full.size, _EMPTY[1], np.int64)
            if starts.size:
                a[full] = np.minimum.reduceat(lo, starts)
                b[full] = np.maximum.reduceat(hi, starts)
            lows.append(a.tolist())
            highs.append(b.tolist())
        return list(zip(lows[0], highs[0], lows[1], highs[1], lows[2], highs[2], strict=True))

    def one_by_one(self, g0: int, g1: int) -> None:
        """`batch_gemms` off: GEMMs gp[g0:g1], each computed alone as it starts."""
        L = self.lists
        for j in range(g0, g1):
            if self.live[j]:
                self.model._gemm_now({k: L[k][j] for k in L})
        self.start = g1

    def flush(self, g1: int) -> None:
        """Computes the pending GEMMs gp[start:g1]."""
        g0, self.start = self.start, g1
        if g1 <= g0:
            return
        rs = self.run_starts
        starts = rs[bisect.bisect_right(rs, g0):bisect.bisect_left(rs, g1)]
        starts.insert(0, g0)
        starts.append(g1)
        lr, live = self.last_reset, self.live
        runs = []
        for k in range(len(starts) - 1):
            a, b = starts[k], starts[k + 1]
            if live[a]:                                    # (a run without iterations: none)
                r = lr[b - 1]
                runs.append((a, b, r if r >= a else -1))
        self.model._gemm_runs(self.lists, runs)

"""The accelerator's bit-exact functional model: docs/isa.md executed with numpy.

`AccelModel.run` fetches a program from card memory like the RTL fetch unit, dispatches it to the
load, compute and store units and runs them under the token protocol of docs/isa.md "Execution
model"; `AccelModel.execute` does the same with the program given directly. A race-free program
gives the same scratchpads, card memory and exact counters as the RTL, bit for bit, whatever the
interleaving (`schedule_seed` picks a random one to show it).

The default interleaving (round robin) is program order while every pop finds its token already
pushed; pyhost/accel/program_order.py runs such stretches a window at a time with vectorized
checks, batched GEMMs and a plain-int timing loop, and hands anything else (every error
included) to the scheduler below with its exact state (`AccelModel.fast`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyhost.accel import blas
from pyhost.accel.program_order import ProgramOrder
from pyhost.accel.timing import field_cycles
from pyhost.fixedpoint import requantize_lanes, rounding_shift
from pyhost.spec import isa, regs
from pyhost.spec.accel import DEFAULT_CONFIG, AccelConfig
from pyhost.spec.isa import TOKEN_QUEUES, AccelError, AluOp, Buffer, Insn, Opcode, XAluOp

_ADDR_SPACE = isa.ADDR_SPACE
_MASK32 = _ADDR_SPACE - 1
#: Iterations of one GEMM / ALU instruction computed per numpy pass (bounds temporary memory).
_BLOCK = 1 << 16
#: Instructions the fetcher reads from memory per `read` call.
_FETCH_CHUNK = 64
#: Largest matrix product (rows x depth x columns) of one BLAS call of the batched GEMM: OpenBLAS
#: runs products below 4 * 65536 on the calling thread, and its threads cost more than they gain
#: on products this thin (and on a busy machine, far more).
_BLAS_MNK = 1 << 18
#: Distinct instruction encodings the model keeps decoded (cleared when it grows past this).
_DECODE_CACHE = 1 << 20
#: Input-row index matrices of GEMM runs the model keeps (cleared when it grows past this).
_INDEX_CACHE = 1 << 10
#: The program-order path's GEMM products (pyhost/accel/program_order.py): at most _K_MAX terms
#: per float32 product (exact, see `AccelModel._products`), at most _X_MAX elements of gathered
#: input rows at once, at most _S_MAX products (rows x N) held before they are written back.
_K_MAX = 1 << 10
_X_MAX = 1 << 21
_S_MAX = 1 << 22

COUNTER_NAMES = tuple(name for name, _ in regs.ACCEL_COUNTERS)
#: The timing estimate's counters (the others are exact).
_TIMING_COUNTERS = ("cycles", "load_busy", "load_stall", "compute_busy", "compute_stall",
                    "store_busy", "store_stall", "gemm_busy")

#: Field ranges per opcode for instructions given as `Insn` (the encoder's check, without encoding).
_RANGES = {op: tuple((f.name, -(1 << (f.width - 1)) if f.signed else 0,
                      (1 << (f.width - 1)) - 1 if f.signed else (1 << f.width) - 1)
                     for f in fmt if f.name != "opcode")
           for op, fmt in isa.FORMATS.items()}


@dataclass
class AccelResult:
    """The outcome of a run: the first error (NONE on success), its pc and the counters."""

    error: AccelError
    err_pc: int
    counters: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.error == AccelError.NONE


class _Op:
    """A checked instruction as the model runs it: fields by name, the token counters it pops and
    pushes, its busy cycles (`timing.field_cycles`). It does not know its pc: one object serves
    every pc with the same encoding (the fetcher's decode cache)."""

    __slots__ = ("op", "unit", "f", "pops", "pushes", "cycles")

    def __init__(self, insn: Insn, f: dict[str, int], n: int) -> None:
        self.op = insn.op
        self.unit = insn.unit
        self.f = f
        self.pops, self.pushes = isa.token_counters(self.unit, f)
        self.cycles = field_cycles(self.op, f, n)


class _Fields(dict):
    """An instruction's fields by name; `pre` caches what the unit derives from them alone (the
    same for every run: the fields never change)."""

    __slots__ = ("pre",)


def _fields(insn: Insn) -> dict[str, int]:
    """Every field of `insn` (0 when absent), range-checked like `isa.encode`."""
    out = _Fields()
    out.pre = None
    for name, lo, hi in _RANGES[insn.op]:
        v = int(insn.fields.get(name, 0))
        if not lo <= v <= hi:
            raise isa.IsaError(f"{insn.op.name}.{name} = {v} is outside {lo}..{hi}")
        out[name] = v
    return out


# --- card memory ---------------------------------------------------------------------------------

class _Memory:
    """Card memory as the units see it: rows of bytes at 32-bit addresses below `size`."""

    def __init__(self, size: int) -> None:
        self.size = size

    def rows_ok(self, starts: np.ndarray, length: int) -> bool:
        """True if every byte of every row [start, start+length) (addresses modulo 2**32) is
        below the memory size: no bus error."""
        if length == 0 or starts.size == 0:
            return True
        ends = starts + length                       # exclusive; may pass 2**32 (wrap)
        wraps = ends > _ADDR_SPACE
        if not wraps.any():
            return bool((ends <= self.size).all())
        if self.size < _ADDR_SPACE:
            return False                             # the bytes just below 2**32 do not exist
        return bool((ends - _ADDR_SPACE <= self.size).all())

    def gather(self, starts: np.ndarray, length: int) -> np.ndarray:
        raise NotImplementedError

    def scatter(self, starts: np.ndarray, data: np.ndarray) -> None:
        raise NotImplementedError

    def load_rows(self, addr: int, rows: int, stride: int, length: int) -> np.ndarray | None:
        """`rows` rows of `length` bytes from `addr`, `stride` bytes apart (addresses modulo
        2**32), as a [rows, length] uint8 array; None on a bus error."""
        starts = _row_starts(addr, rows, stride)
        if not self.rows_ok(starts, length):
            return None
        return self.gather(starts, length)

    def store_rows(self, addr: int, stride: int, data: np.ndarray) -> bool:
        """Write the rows of `data` ([rows, length] uint8) from `addr`, `stride` bytes apart (a
        later row wins where rows overlap); False on a bus error (nothing written)."""
        starts = _row_starts(addr, data.shape[0], stride)
        if not self.rows_ok(starts, data.shape[1]):
            return False
        self.scatter(starts, data)
        return True


class _ArrayMemory(_Memory):
    """Card memory that is a numpy uint8 array (ModelCard, `execute`): one fancy index per LOAD."""

    def __init__(self, arr: np.ndarray) -> None:
        super().__init__(arr.size)
        self.arr = arr

    def read(self, addr: int, n: int) -> bytes:
        return self.arr[addr:addr + n].tobytes()

    def _index(self, starts: np.ndarray, length: int) -> np.ndarray:
        return (starts[:, None] + np.arange(length, dtype=np.int64)[None, :]) & _MASK32

    def _strided(self, addr: int, rows: int, stride: int, length: int) -> np.ndarray | None:
        """The rows as a strided view of the array when they all lie below its end (then no
        address wraps), else None."""
        if addr + (rows - 1) * stride + length > self.size:
            return None
        return np.ndarray((rows, length), np.uint8, self.arr, addr, (stride, 1))

    def load_rows(self, addr: int, rows: int, stride: int, length: int) -> np.ndarray | None:
        view = self._strided(addr, rows, stride, length) if length else None
        return view if view is not None else super().load_rows(addr, rows, stride, length)

    def store_rows(self, addr: int, stride: int, data: np.ndarray) -> bool:
        rows, length = data.shape
        if length and (rows == 1 or stride >= length):      # rows that do not overlap
            view = self._strided(addr, rows, stride, length)
            if view is not None:
                view[...] = data
                return True
        return super().store_rows(addr, stride, data)

    def gather(self, starts: np.ndarray, length: int) -> np.ndarray:
        s0 = int(starts[0])
        if starts.size == 1 or bool((np.diff(starts) == length).all()):
            total = starts.size * length
            if s0 + total <= _ADDR_SPACE:             # one contiguous block
                return self.arr[s0:s0 + total].reshape(starts.size, length)
        return self.arr[self._index(starts, length)]

    def scatter(self, starts: np.ndarray, data: np.ndarray) -> None:
        rows, length = data.shape
        s0 = int(starts[0])
        if rows == 1 or bool((np.diff(starts) == length).all()):
            if s0 + rows * length <= _ADDR_SPACE:
                self.arr[s0:s0 + rows * length] = data.reshape(-1)
                return
        if not (starts + length > _ADDR_SPACE).any() \
                and bool((np.diff(np.sort(starts)) >= length).all()):
            # Rows do not overlap: the order of the writes does not matter.
            self.arr[self._index(starts, length)] = data
            return
        for r in range(rows):                           # overlapping rows: later rows win
            self.arr[self._index(starts[r:r + 1], length)[0]] = data[r]


class _CallbackMemory(_Memory):
    """Card memory behind `read(addr, n)` / `write(addr, data)` callbacks: one call per row."""

    def __init__(self, read: Callable[[int, int], bytes], write: Callable[[int, bytes], None],
                 size: int) -> None:
        super().__init__(size)
        self._read = read
        self._write = write

    def read(self, addr: int, n: int) -> bytes:
        return bytes(self._read(addr, n))

    def _pieces(self, start: int, length: int) -> list[tuple[int, int, int]]:
        """(address, offset in the row, bytes) of a row, split where it wraps at 2**32."""
        first = min(length, _ADDR_SPACE - start)
        out = [(start, 0, first)]
        if first < length:
            out.append((0, first, length - first))
        return out

    def gather(self, starts: np.ndarray, length: int) -> np.ndarray:
        out = np.empty((starts.size, length), np.uint8)
        for r, s in enumerate(starts.tolist()):
            for addr, off, n in self._pieces(s, length):
                out[r, off:off + n] = np.frombuffer(self.read(addr, n), np.uint8)
        return out

    def scatter(self, starts: np.ndarray, data: np.ndarray) -> None:
        length = data.shape[1]
        for r, s in enumerate(starts.tolist()):
            for addr, off, n in self._pieces(s, length):
                self._write(addr, data[r, off:off + n].tobytes())


# --- program sources -----------------------------------------------------------------------------

class _ProgramSource:
    """Instruction `pc` as the fetcher sees it: an `_Op`, or the AccelError fetching it raises.
    For the program-order path (pyhost/accel/program_order.py): `window` gives the bytes of
    instructions [lo, hi) (fewer when the rest cannot be had as plain bytes), `region` the card
    memory bytes the program occupies, `resume` puts the fetcher at `pc` as if it had fetched
    every instruction before it."""

    count: int

    def get(self, pc: int) -> _Op | AccelError:
        raise NotImplementedError

    def window(self, lo: int, hi: int) -> np.ndarray:
        raise NotImplementedError

    def region(self) -> tuple[int, int]:
        return 0, 0

    def resume(self, pc: int) -> None:
        pass


class _ListProgram(_ProgramSource):
    def __init__(self, program: Sequence[Insn | bytes], n: int) -> None:
        self.program = program
        self.count = len(program)
        self.n = n

    def get(self, pc: int) -> _Op | AccelError:
        return _check(self.program[pc], self.n)

    def window(self, lo: int, hi: int) -> np.ndarray:
        """Instructions [lo, hi) encoded, up to the first that has no 16-byte encoding (an Insn
        with a field out of range, an image of another length: the fetcher's own path
        reports it)."""
        out = []
        for item in self.program[lo:hi]:
            try:
                b = isa.encode(item) if isinstance(item, Insn) else bytes(item)
            except Exception:  # noqa: BLE001  (whatever it is, `get` meets it again)
                break
            if len(b) != isa.INSN_BYTES:
                break
            out.append(b)
        return np.frombuffer(b"".join(out), np.uint8)


class _MemoryProgram(_ProgramSource):
    """The program in card memory, read in chunks of _FETCH_CHUNK instructions as the fetcher
    advances; each 16-byte encoding is decoded and checked once (`decoded`, kept by the model
    across runs: a compiled program repeats its encodings many times)."""

    def __init__(self, mem: _Memory, base: int, count: int, n: int,
                 decoded: dict[bytes, _Op | AccelError]) -> None:
        self.mem = mem
        self.base = base
        self.count = count
        self.n = n
        self.decoded = decoded
        self._lo = self._hi = 0                  # the chunk held: pcs [lo, hi)
        self._chunk: list[_Op | AccelError] = []

    def get(self, pc: int) -> _Op | AccelError:
        if not self._lo <= pc < self._hi:
            self._read(pc)
        return self._chunk[pc - self._lo]

    def window(self, lo: int, hi: int) -> np.ndarray:
        """Instructions [lo, hi) in one read, up to the first with a byte beyond the memory or
        at an address that wrapped at 2**32."""
        ib = isa.INSN_BYTES
        first = (self.base + ib * lo) & _MASK32
        limit = min(self.mem.size, _ADDR_SPACE)
        k = min(hi - lo, (limit - first) // ib) if first < limit else 0
        if k <= 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(self.mem.read(first, ib * k), np.uint8)

    def region(self) -> tuple[int, int]:
        end = self.base + isa.INSN_BYTES * self.count
        return (self.base, end) if end <= _ADDR_SPACE else (0, _ADDR_SPACE)

    def resume(self, pc: int) -> None:
        """The chunk the fetcher would hold at `pc` (chunks start at multiples of _FETCH_CHUNK),
        read now: the same bytes, since nothing before `pc` wrote the program's bytes."""
        self._lo = self._hi = 0
        self._chunk = []
        if pc < self.count:
            self._read(pc - pc % _FETCH_CHUNK)

    def _read(self, pc: int) -> None:
        ib = isa.INSN_BYTES
        end = min(self.count, pc + _FETCH_CHUNK)
        size = self.mem.size
        ok = pc
        if ((self.base + ib * pc) & _MASK32) + ib * (end - pc) <= min(size, _ADDR_SPACE):
            ok = end                             # the whole chunk exists (the usual case)
        while ok < end:                          # instructions whose bytes all exist
            addr = (self.base + ib * ok) & _MASK32
            if not (addr + ib <= size or (addr + ib > _ADDR_SPACE and size >= _ADDR_SPACE)):
                break
            ok += 1
        chunk: list[_Op | AccelError] = []
        if ok > pc:
            first = (self.base + ib * pc) & _MASK32
            if first + ib * (ok - pc) <= min(size, _ADDR_SPACE):
                raw = self.mem.read(first, ib * (ok - pc))
                words = [raw[i:i + ib] for i in range(0, len(raw), ib)]
            else:                                # the program wraps at 2**32
                words = [self.mem.read((self.base + ib * k) & _MASK32, ib) for k in range(pc, ok)]
            cache = self.decoded
            if len(cache) > _DECODE_CACHE:
                cache.clear()
            for w in words:
                d = cache.get(w)
                if d is None:
                    d = cache[w] = _check(w, self.n)
                chunk.append(d)
        if ok < end:
            chunk.append(AccelError.FETCH_BUS)   # the first instruction with a missing byte
        self._lo, self._hi = pc, pc + len(chunk)
        self._chunk = chunk


def _check(item: Insn | bytes, n: int) -> _Op | AccelError:
    """Decode and statically check one instruction, like the fetch unit."""
    if isinstance(item, Insn):
        insn = item
    else:
        try:
            insn = isa.decode(bytes(item))
        except isa.IsaError:
            return AccelError.ILLEGAL_OPCODE
    err = isa.check_static(insn, n)
    if err != AccelError.NONE:
        return err
    return _Op(insn, _fields(insn), n)


# --- the model -----------------------------------------------------------------------------------

class AccelModel:
    """The accelerator: scratchpads that persist across runs, and the units that run programs.

    Execution follows docs/isa.md "Execution model": an in-order fetcher checks each instruction
    with `isa.check_static` when it is next to dispatch and appends it to its unit's queue,
    blocking while the unit already holds `queue_depth + 1` instructions that have not started
    (the queue plus the one the unit holds while it waits for tokens); END stops fetching. Each
    unit starts its instructions in program order when their pop tokens are there, runs them
    atomically and then pushes. By default the fetcher and the units take turns round robin;
    `schedule_seed` interleaves them randomly instead (a race-free program gives the same result
    under every interleaving). Where the round robin is program order (every pop finds its token
    already pushed: compiled kernels), the model runs it as that (pyhost/accel/program_order.py;
    `fast = False` keeps the scheduler's step-by-step loop for every instruction, with the same
    result, counters and errors).

    Where the ISA leaves a choice, the model:
    - checks SP_RANGE before MISALIGNED, and both before the bus; a LOAD/STORE with a bus error
      moves nothing (the ISA leaves memory and scratchpads unspecified after an error);
    - reports DEADLOCK and TOKEN_OVERFLOW with ERR_PC = the instructions dispatched so far (END
      included), as rtl/accel/accel.v does: for DEADLOCK the pc of the instruction the fetcher is
      blocked on, or the END's pc + 1 (the same under every schedule); for TOKEN_OVERFLOW it
      depends on how far the fetcher has run ahead;
    - reports FETCH_BUS at the first instruction with a byte at or beyond `mem_size` (the RTL
      reports the first instruction of the failing 64-byte beat: the same pc when the memory size
      is a multiple of 64);
    - computes REQ's rounding sum exactly (65 bits, as rtl/accel/accel_vector.v does; a 64-bit
      sum would wrap for A = M = -2**31 with shift 63).

    Counters: `insns`, `macs`, `bytes_loaded` and `bytes_stored` are exact (the RTL's values for
    a run without error; after an error they depend on timing, in the RTL too).
    The cycle counters are an estimate, not cycle-accurate (the rules of `timing.field_cycles`):
    an instruction of the load unit is busy max(scratchpad rows written, 64-byte beats) + 1
    cycles, a store the same with rows read, a GEMM or ALU outer*inner + 1; the fetcher
    dispatches one instruction per cycle, no sooner than the unit frees a queue entry; an
    instruction starts when its unit is free and its tokens have been pushed (the wait is
    `*_stall`); `cycles` is the time the last unit finishes.
    """

    def __init__(self, cfg: AccelConfig = DEFAULT_CONFIG) -> None:
        self.cfg = cfg
        n = cfg.n
        self.inp = np.zeros((cfg.inp_depth, n), np.int8)
        self.wgt = np.zeros((cfg.wgt_depth, n, n), np.int8)
        self.acc = np.zeros((cfg.acc_depth, n), np.int32)
        #: decoded and checked instructions by encoding (the fetcher's cache, kept across runs)
        self._decoded: dict[bytes, _Op | AccelError] = {}
        #: GEMMs started but not yet computed (during a run; see `_GemmBatch`)
        self._batch: _GemmBatch | None = None
        #: compute consecutive GEMMs together (False: each as it starts; the same result)
        self.batch_gemms = True
        #: run the default schedule in program order where it is that (program_order.py;
        #: False: the round-robin scheduler for every instruction; the same result)
        self.fast = True
        #: (element bytes, scratchpad depth) of each LOAD/STORE buffer
        self._buffers = {int(b): (cfg.element_bytes(b), cfg.depth(b)) for b in Buffer}
        #: row sequences of GEMM accumulator loops, and whether their rows are distinct
        self._loops: dict[tuple[int, ...], tuple[np.ndarray, bool]] = {}
        #: whether accumulator loops (outer, inner, so, si) have distinct rows
        self._distinct: dict[tuple[int, int, int, int], bool] = {}
        #: input-row index matrices of GEMM runs, by (outer, inner, so, si, bases)
        self._inp_index: dict[tuple[Any, ...], np.ndarray] = {}

    # --- public API --------------------------------------------------------------------------

    def run(self, read: Callable[[int, int], bytes], write: Callable[[int, bytes], None],
            insn_base: int, insn_count: int, slots: Sequence[int], *, mem_size: int,
            schedule_seed: int | None = None) -> AccelResult:
        """Run `insn_count` instructions fetched through `read` from card address `insn_base`.

        LOAD reads and STORE writes card memory through `read(addr, n)` / `write(addr, data)`;
        an access (fetch, LOAD, STORE) touching a byte at or beyond `mem_size` is a bus error and
        never reaches the callbacks. The caller checks INSN_BASE / INSN_COUNT (BAD_CONFIG).
        """
        mem = _CallbackMemory(read, write, mem_size)
        return self._run(mem, _MemoryProgram(mem, insn_base & _MASK32, insn_count, self.cfg.n,
                                                   self._decoded), slots,
                         schedule_seed)

    def run_array(self, mem: np.ndarray, insn_base: int, insn_count: int, slots: Sequence[int],
                  *, schedule_seed: int | None = None, timing: bool = True) -> AccelResult:
        """`run` on card memory that is a writable uint8 numpy array (its size is mem_size).

        ``timing=False``: a run that ends without error may leave out the timing estimate
        (cycles and the busy, stall and gemm_busy counters are then 0), for a caller that
        estimates the timing itself (ModelCard: `timing.perf_estimate_raw`). After an error the
        counters are always complete.
        """
        m = _ArrayMemory(_as_u8(mem))
        return self._run(m, _MemoryProgram(m, insn_base & _MASK32, insn_count, self.cfg.n,
                                                self._decoded), slots,
                         schedule_seed, timing)

    def execute(self, program: Sequence[Insn | bytes], mem: bytearray | np.ndarray,
                slots: Sequence[int], *, schedule_seed: int | None = None) -> AccelResult:
        """Run `program` as if fetched (len(program) is INSN_COUNT) on card memory `mem`.

        `mem` is a bytearray (or a writable uint8 numpy array); its length is the memory size.
        Items of `program` may be 16-byte images instead of Insn, for illegal encodings.
        """
        return self._run(_ArrayMemory(_as_u8(mem)), _ListProgram(program, self.cfg.n), slots,
                         schedule_seed)

    # --- scheduler ---------------------------------------------------------------------------

    def _run(self, mem: _Memory, prog: _ProgramSource, slots: Sequence[int],
             schedule_seed: int | None, timing: bool = True) -> AccelResult:
        if len(slots) > isa.NUM_SLOTS:
            raise ValueError(f"at most {isa.NUM_SLOTS} slots, got {len(slots)}")
        run = _Run(self, mem, prog, [int(s) & _MASK32 for s in slots]
                   + [0] * (isa.NUM_SLOTS - len(slots)))
        run.want_timing = timing
        return run.go(schedule_seed)

    def _check_cached(self, word: bytes) -> _Op | AccelError:
        """`_check` of one encoding, through the decode cache."""
        d = self._decoded.get(word)
        if d is None:
            if len(self._decoded) > _DECODE_CACHE:
                self._decoded.clear()
            d = self._decoded[word] = _check(word, self.cfg.n)
        return d

    # --- instructions (each returns NONE or the error; nothing changes on an error) --------------

    def _load(self, f: dict[str, int], mem: _Memory, slots: list[int], c: dict[str, int]
              ) -> AccelError:
        n = self.cfg.n
        buf = f["buf"]
        e, depth = self._buffers[buf]
        y, x = f["y_size"], f["x_size"]
        pt, pb, pl, pr = f["pad_top"], f["pad_bottom"], f["pad_left"], f["pad_right"]
        rows, cols = pt + y + pb, pl + x + pr
        total = rows * cols
        base = f["sp_base"]
        if total and base + total > depth:
            return AccelError.SP_RANGE
        addr = (slots[f["slot"]] + f["offset"]) & _MASK32
        if addr % e:
            return AccelError.MISALIGNED
        data = None
        if y and x:
            data = mem.load_rows(addr, y, f["y_stride"] * e, x * e)
            if data is None:
                return AccelError.LOAD_BUS
            data = data.reshape(y, x, e)
        if total:
            pad = f["pad_value"]
            if data is not None and f["transpose"]:
                # each block of N memory rows x one element transposed (INP, no padding, y a
                # multiple of N: the fetch check): [Y, r, x, c] -> rows (Y, x, c), lanes r
                d8 = data.view(np.int8).reshape(y // n, n, x, n)
                self.inp[base:base + total] = d8.transpose(0, 2, 3, 1).reshape(total, n)
            elif data is not None and not (pt or pb or pl or pr) and buf != Buffer.ACC:
                # no padding: the rows go straight in
                d8 = data.view(np.int8).reshape(total, e)
                if buf == Buffer.INP:
                    self.inp[base:base + total] = d8
                elif buf == Buffer.WGT:
                    self.wgt[base:base + total] = d8.reshape(total, n, n)
                else:
                    self.acc[base:base + total] = d8
            elif buf == Buffer.INP:
                tile = np.full((rows, cols, n), pad, np.int8)
                if data is not None:
                    tile[pt:pt + y, pl:pl + x] = data.view(np.int8)
                self.inp[base:base + total] = tile.reshape(total, n)
            elif buf == Buffer.WGT:
                tile = np.full((rows, cols, n * n), pad, np.int8)
                if data is not None:
                    tile[pt:pt + y, pl:pl + x] = data.view(np.int8)
                self.wgt[base:base + total] = tile.reshape(total, n, n)
            else:
                tile = np.full((rows, cols, n), pad, np.int32)
                if data is not None:
                    tile[pt:pt + y, pl:pl + x] = (
                        np.ascontiguousarray(data).view("<i4") if buf == Buffer.ACC
                        else data.view(np.int8))
                self.acc[base:base + total] = tile.reshape(total, n)
        c["bytes_loaded"] += y * x * e
        return AccelError.NONE

    def _store(self, f: dict[str, int], mem: _Memory, slots: list[int], c: dict[str, int]
               ) -> AccelError:
        cfg = self.cfg
        buf = f["buf"]
        e = self._buffers[buf][0]
        y, x = f["y_size"], f["x_size"]
        total = y * x
        base = f["sp_base"]
        if total and base + total > cfg.acc_depth:
            return AccelError.SP_RANGE
        addr = (slots[f["slot"]] + f["offset"]) & _MASK32
        if addr % e:
            return AccelError.MISALIGNED
        if total:
            rows = self.acc[base:base + total]
            lanes = rows.astype("<i4") if buf == Buffer.ACC else rows.astype(np.int8)
            if not mem.store_rows(addr, f["y_stride"] * e,
                                  np.ascontiguousarray(lanes).view(np.uint8).reshape(y, x * e)):
                return AccelError.STORE_BUS
        c["bytes_stored"] += total * e
        return AccelError.NONE

    def _gemm(self, f: dict[str, int], c: dict[str, int]) -> AccelError:
        pre = getattr(f, "pre", None)
        if pre is None:
            pre = self._gemm_check(f)
            if isinstance(f, _Fields):
                f.pre = pre
        err, macs, a_last, i_last = pre
        if err != AccelError.NONE or not macs:
            return err
        c["macs"] += macs
        if self._batch is not None:                  # in a run: computed with its neighbours
            self._batch.add(f, a_last, i_last)
        else:
            self._gemm_now(f)
        return AccelError.NONE

    def _gemm_check(self, f: dict[str, int]) -> tuple[AccelError, int, int, int]:
        """(SP_RANGE or NONE, MACs, last accumulator row, last input row) of a GEMM."""
        cfg, n = self.cfg, self.cfg.n
        outer, inner = f["outer"], f["inner"]
        if not (outer and inner):
            return AccelError.NONE, 0, 0, 0
        a_last = f["acc_base"] + (outer - 1) * f["acc_so"] + (inner - 1) * f["acc_si"]
        i_last = f["inp_base"] + (outer - 1) * f["inp_so"] + (inner - 1) * f["inp_si"]
        if a_last >= cfg.acc_depth or i_last >= cfg.inp_depth or f["wgt_base"] >= cfg.wgt_depth:
            return AccelError.SP_RANGE, 0, 0, 0
        return AccelError.NONE, outer * inner * n * n, a_last, i_last

    def _gemm_now(self, f: dict[str, int]) -> None:
        """One GEMM instruction's effect, computed alone (its fields already checked)."""
        outer, inner = f["outer"], f["inner"]
        a = _loop_rows(f["acc_base"], outer, inner, f["acc_so"], f["acc_si"])
        x = _loop_rows(f["inp_base"], outer, inner, f["inp_so"], f["inp_si"])
        w = self.wgt[f["wgt_base"]].astype(np.int32)
        reset = bool(f["reset"])
        for lo in range(0, a.size, _BLOCK):
            ab, xb = a[lo:lo + _BLOCK], x[lo:lo + _BLOCK]
            prod = self.inp[xb].astype(np.int32) @ w            # |sum| < 2**19: exact in int32
            self._write_products(ab, prod, reset)

    def _write_products(self, rows: np.ndarray, prod: np.ndarray, reset: bool) -> None:
        """Iterations' products written to (reset) or added to their accumulator rows, in
        iteration order."""
        if _unique(rows):
            self.acc[rows] = prod if reset else _wrap32(self.acc[rows].astype(np.int64) + prod)
        elif reset:
            # Every iteration overwrites its row: the last one writing a row wins.
            r, last = np.unique(rows[::-1], return_index=True)
            self.acc[r] = prod[::-1][last]
        else:
            # Accumulating into repeated rows: addition modulo 2**32 is order-free.
            r, sums = _group_reduce(rows, prod.astype(np.int64), np.add)
            self.acc[r] = _wrap32(self.acc[r].astype(np.int64) + sums)

    def _acc_loop(self, key: tuple[int, ...]) -> tuple[np.ndarray, bool, np.ndarray, np.ndarray]:
        """(rows, rows distinct, outer index, inner index of each iteration) of the accumulator
        loop key = (acc_base, outer, inner, so, si)."""
        hit = self._loops.get(key)
        if hit is None:
            if len(self._loops) > _DECODE_CACHE:
                self._loops.clear()
            rows = _loop_rows(*key)
            outer, inner = key[1], key[2]
            hit = self._loops[key] = (
                rows, _unique(rows), np.repeat(np.arange(outer, dtype=np.int64), inner)[:, None],
                np.tile(np.arange(inner, dtype=np.int64), outer)[:, None])
        return hit

    def _gemm_many(self, fs: list[dict[str, int]]) -> None:
        """The effect of GEMM instructions `fs` run one after the other, with nothing else
        touching the scratchpads in between.

        Instructions with the same accumulator loop (base, counts, strides) form a group: each
        row of the group gets the sum of its products over the group's instructions (after the
        last one that resets, or added to the row), computed as one matrix product of the
        instructions' input rows side by side ([rows, T*N]) with their weight tiles stacked
        ([T*N, N]). Groups whose rows overlap an earlier group's are computed in order, one
        part at a time. Addition modulo 2**32 is associative, and every partial sum is an
        integer below 2**24 (float32) or 2**53 (float64) in magnitude, so the floating-point
        product (BLAS) is exact and the result is bit for bit the sequential one's.
        """
        depth = self.cfg.acc_depth
        groups: dict[tuple[int, ...], list[dict[str, int]]] = {}
        taken = np.zeros(depth, bool)
        for f in fs:
            key = (f["acc_base"], f["outer"], f["inner"], f["acc_so"], f["acc_si"])
            g = groups.get(key)
            if g is not None:
                g.append(f)
                continue
            rows, distinct, _, _ = self._acc_loop(key)
            if not distinct:                         # rows repeat inside the instruction
                self._gemm_groups(groups)
                groups = {}
                taken[:] = False
                self._gemm_now(f)
                continue
            if groups and taken[rows].any():         # overlaps an earlier group: in order
                self._gemm_groups(groups)
                groups = {}
                taken[:] = False
            taken[rows] = True
            groups[key] = [f]
        self._gemm_groups(groups)

    def _gemm_groups(self, groups: dict[tuple[int, ...], list[dict[str, int]]]) -> None:
        n = self.cfg.n
        for key, fs in groups.items():
            if len(fs) == 1:
                self._gemm_now(fs[0])
                continue
            last = max((j for j, f in enumerate(fs) if f["reset"]), default=-1)
            use = fs[last:] if last >= 0 else fs
            rows, _, o, i = self._acc_loop(key)
            t = len(use)
            ib = np.array([[f["inp_base"] for f in use], [f["inp_so"] for f in use],
                           [f["inp_si"] for f in use]], np.int64)
            idx = ib[0][None, :] + o * ib[1][None, :] + i * ib[2][None, :]
            dt = np.float32 if t * n <= 512 else np.float64      # exact: see _gemm_many
            w = self.wgt[[f["wgt_base"] for f in use]].reshape(t * n, n).astype(dt)
            step = max(1, _BLAS_MNK // (t * n * n))
            for lo in range(0, rows.size, step):
                r = rows[lo:lo + step]
                s = (self.inp[idx[lo:lo + step]].reshape(r.size, t * n).astype(dt) @ w
                     ).astype(np.int64)
                if last >= 0:
                    self.acc[r] = _wrap32(s)
                else:
                    self.acc[r] = _wrap32(self.acc[r].astype(np.int64) + s)

    # --- GEMM runs (the program-order path) ---------------------------------------------------

    def _loop_distinct(self, outer: int, inner: int, so: int, si: int) -> bool:
        """Whether the loop o * so + i * si (o < outer, i < inner) visits distinct rows."""
        key = (outer, inner, so, si)
        hit = self._distinct.get(key)
        if hit is None:
            if len(self._distinct) > _DECODE_CACHE:
                self._distinct.clear()
            hit = self._distinct[key] = _unique(_loop_rows(0, outer, inner, so, si))
        return hit

    def _gemm_runs(self, g: dict[str, list[int]], runs: list[tuple[int, int, int]]) -> None:
        """The effect of the GEMM instructions g[a:b] of each run (a, b, r), the runs one after
        the other with nothing else touching the scratchpads in between (`g`: fields by name,
        a list per field; r: the run's last GEMM with reset, or -1).

        The GEMMs of a run share their accumulator loop (base, counts, strides) and input
        strides, so each accumulator row gets the sum of the run's products for it (after the
        last reset, or added to the row): one matrix product of the input rows of every GEMM
        side by side ([rows, T*N]) with their weight tiles stacked ([T*N, N]). Runs reading the
        same input rows (the same loop and bases) share the product: their tiles side by side
        ([T*N, m*N]). Products are computed first (they read INP and WGT, which no GEMM
        writes), then written back run by run in program order, so runs on the same rows add
        up as the instructions do. A run whose loop repeats rows inside an instruction runs
        each instruction alone (`_gemm_now`), in its place.
        """
        n = self.cfg.n
        pending: list[tuple[int, int, int, int, int, bool, int, int]] = []
        groups: dict[tuple[Any, ...], list[list[int]]] = {}
        held = 0
        L = g
        ab_l, ou_l, in_l, aso_l, asi_l = (L["acc_base"], L["outer"], L["inner"], L["acc_so"],
                                          L["acc_si"])
        ib_l, iso_l, isi_l, wb_l = L["inp_base"], L["inp_so"], L["inp_si"], L["wgt_base"]
        for a, b, r in runs:
            ou, inn, aso, asi = ou_l[a], in_l[a], aso_l[a], asi_l[a]
            if not self._loop_distinct(ou, inn, aso, asi):
                self._write_runs(pending, groups)
                pending, groups, held = [], {}, 0
                for j in range(a, b):
                    self._gemm_now({k: v[j] for k, v in L.items()})
                continue
            u = r if r >= 0 else a
            key = (ou, inn, iso_l[a], isi_l[a], tuple(ib_l[u:b]))
            tiles = groups.get(key)
            if tiles is None:
                tiles = groups[key] = []
            pending.append((ab_l[a], ou, inn, aso, asi, r >= 0, len(tiles), id(tiles)))
            tiles.append(wb_l[u:b])
            held += ou * inn * n
            if held > _S_MAX:
                self._write_runs(pending, groups)
                pending, groups, held = [], {}, 0
        self._write_runs(pending, groups)

    def _write_runs(self, pending: list[tuple[int, int, int, int, int, bool, int, int]],
                    groups: dict[tuple[Any, ...], list[list[int]]]) -> None:
        if not pending:
            return
        n = self.cfg.n
        row = 4 * n
        prods = {id(tiles): self._products(key, tiles) for key, tiles in groups.items()}
        acc = self.acc
        for ab, ou, inn, aso, asi, reset, j, gid in pending:
            s = prods[gid][:, j * n:(j + 1) * n].reshape(ou, inn, n)
            view = np.ndarray((ou, inn, n), np.int32, acc, ab * row, (aso * row, asi * row, 4))
            if reset:
                view[...] = s
            else:
                u = view.view(np.uint32)
                np.add(u, s.view(np.uint32), out=u)          # modulo 2**32

    def _products(self, key: tuple[Any, ...], tiles: list[list[int]]) -> np.ndarray:
        """[rows, m*N] int32: for each of the m weight-tile lists (one per run), the sum over the
        run's GEMMs of input row x tile, for every iteration of the loop `key` = (outer, inner,
        inp_so, inp_si, input bases).

        Exact: the reduction is split into float32 products of at most _K_MAX terms, each an
        int8 x int8 product of magnitude <= 2**14, so every partial sum BLAS forms, in whatever
        order, is an integer of magnitude <= 2**24, represented exactly; the parts are added
        modulo 2**32, as the accumulator does."""
        n = self.cfg.n
        outer, inner, so, si, bases = key
        idx = self._inp_index.get(key)
        if idx is None:
            if len(self._inp_index) > _INDEX_CACHE:
                self._inp_index.clear()
            rows = _loop_rows(0, outer, inner, so, si)
            idx = self._inp_index[key] = rows[:, None] + np.array(bases, np.int64)[None, :]
        r_all, t = idx.shape
        m = len(tiles)
        kk = t * n
        w = self.wgt[np.array(tiles, np.int64)]                          # [m, T, N, N]
        w = w.transpose(1, 2, 0, 3).reshape(kk, m * n)
        wf = w.astype(np.float32)
        out = np.empty((r_all, m * n), np.int32)
        step = max(1, _X_MAX // kk)
        for lo in range(0, r_all, step):
            x = self.inp.take(idx[lo:lo + step], axis=0).reshape(-1, kk)   # [rows, T*N] int8
            dst = out[lo:lo + step]
            for k0 in range(0, kk, _K_MAX):
                p = (x[:, k0:k0 + _K_MAX].astype(np.float32) @ wf[k0:k0 + _K_MAX]
                     ).astype(np.int32)
                if k0 == 0:
                    dst[...] = p
                else:
                    u = dst.view(np.uint32)
                    np.add(u, p.view(np.uint32), out=u)
        return out

    def _dw(self, f: dict[str, int], c: dict[str, int]) -> AccelError:
        """DW (docs/isa.md): per lane, the dot product of the taps' input rows with the tile's
        rows, computed at once for every iteration whose accumulator row no other iteration of
        the instruction writes (an order-free sum otherwise, as `_gemm_now` does)."""
        cfg = self.cfg
        outer, inner = f["outer"], f["inner"]
        if not (outer and inner):
            return AccelError.NONE
        off = np.array(isa.dw_offsets(f["taps"], f["tap_w"], f["tap_pitch"]), np.int64)
        a_last = f["acc_base"] + (outer - 1) * f["acc_so"] + (inner - 1) * f["acc_si"]
        i_last = f["inp_base"] + (outer - 1) * f["inp_so"] + (inner - 1) * f["inp_si"] \
            + int(off[-1])
        if a_last >= cfg.acc_depth or i_last >= cfg.inp_depth or f["wgt_base"] >= cfg.wgt_depth:
            return AccelError.SP_RANGE
        taps = off.size
        c["macs"] += outer * inner * taps * cfg.n
        a = _loop_rows(f["acc_base"], outer, inner, f["acc_so"], f["acc_si"])
        x = _loop_rows(f["inp_base"], outer, inner, f["inp_so"], f["inp_si"])
        w = self.wgt[f["wgt_base"], :taps].astype(np.int32)          # [taps, N]
        reset = bool(f["reset"])
        step = max(1, _BLOCK // taps)
        for lo in range(0, a.size, step):
            ab = a[lo:lo + step]
            rows = self.inp[x[lo:lo + step, None] + off[None, :]]      # [iters, taps, N]
            prod = np.einsum("ikn,kn->in", rows.astype(np.int32), w)   # |sum| < 2**21
            self._write_products(ab, prod, reset)
        return AccelError.NONE

    def _alu(self, f: dict[str, int]) -> AccelError:
        cfg = self.cfg
        outer, inner = f["outer"], f["inner"]
        if not (outer and inner):
            return AccelError.NONE
        op = AluOp(f["alu_op"])
        imm = bool(f["use_imm"])
        d_last = f["dst_base"] + (outer - 1) * f["dst_so"] + (inner - 1) * f["dst_si"]
        s_last = f["src_base"] + (outer - 1) * f["src_so"] + (inner - 1) * f["src_si"] \
            + (1 if op == AluOp.REQ else 0)
        if d_last >= cfg.acc_depth or (not imm and s_last >= cfg.acc_depth):
            return AccelError.SP_RANGE
        if self._loop_distinct(outer, inner, f["dst_so"], f["dst_si"]) and (
                imm or s_last < f["dst_base"] or f["src_base"] > d_last
                or (op != AluOp.REQ and f["src_base"] == f["dst_base"]
                    and f["src_so"] == f["dst_so"] and f["src_si"] == f["dst_si"])):
            # Every row written once, and no iteration reads a row another one writes (the
            # sources lie outside the destinations, or each iteration reads only its own
            # destination row): all iterations at once, on views of the rows.
            self._alu_views(op, f, outer, inner)
            return AccelError.NONE
        d = _loop_rows(f["dst_base"], outer, inner, f["dst_so"], f["dst_si"])
        s = None if imm else _loop_rows(f["src_base"], outer, inner, f["src_so"], f["src_si"])
        if s is not None and op in _FOLDS and not _unique(d) \
                and not np.isin(s, d, assume_unique=False).any():
            # Reductions (pooling): rows written repeatedly from sources the instruction never
            # writes. ADD (modulo 2**32), MAX and MIN are order-free; MOV keeps the last source.
            rows, red = _group_reduce(d, self.acc[s].astype(np.int64), _FOLDS[op])
            if op == AluOp.MOV:
                self.acc[rows] = red
            else:
                self.acc[rows] = alu_op(op, self.acc[rows].astype(np.int64), red, None, 0)
            return AccelError.NONE
        for lo, hi in self._alu_chunks(d, s, op):
            db = d[lo:hi]
            a = self.acc[db].astype(np.int64)
            if s is None:
                b = np.int64(f["imm"])
                shift = None
            else:
                b = self.acc[s[lo:hi]].astype(np.int64)
                shift = self.acc[s[lo:hi] + 1].astype(np.int64) if op == AluOp.REQ else None
            self.acc[db] = alu_op(op, a, b, shift, f["imm"])
        return AccelError.NONE

    def _xalu(self, f: dict[str, int]) -> AccelError:
        """XALU (DIV, SQRT): the ALU's loops in order, in chunks of iterations that do not see
        each other's writes (`_alu_chunks`); DIV_ZERO / NEG_SQRT at the first chunk with a bad
        operand (rows before it in the chunk are not written: the ISA leaves the scratchpads
        unspecified after an error)."""
        cfg = self.cfg
        outer, inner = f["outer"], f["inner"]
        if not (outer and inner):
            return AccelError.NONE
        op = XAluOp(f["alu_op"])
        imm = bool(f["use_imm"])
        d_last = f["dst_base"] + (outer - 1) * f["dst_so"] + (inner - 1) * f["dst_si"]
        s_last = f["src_base"] + (outer - 1) * f["src_so"] + (inner - 1) * f["src_si"]
        if d_last >= cfg.acc_depth or (not imm and s_last >= cfg.acc_depth):
            return AccelError.SP_RANGE
        d = _loop_rows(f["dst_base"], outer, inner, f["dst_so"], f["dst_si"])
        s = None if imm else _loop_rows(f["src_base"], outer, inner, f["src_so"], f["src_si"])
        for lo, hi in self._alu_chunks(d, s, AluOp.ADD):
            db = d[lo:hi]
            b = np.broadcast_to(np.int64(f["imm"]), (hi - lo, cfg.n)) if s is None \
                else self.acc[s[lo:hi]].astype(np.int64)
            if op == XAluOp.DIV:
                if not b.all():
                    return AccelError.DIV_ZERO
                self.acc[db] = xalu_div(self.acc[db].astype(np.int64), b)
            else:
                if (b < 0).any():
                    return AccelError.NEG_SQRT
                self.acc[db] = xalu_sqrt(b)
        return AccelError.NONE

    def _alu_views(self, op: AluOp, f: dict[str, int], outer: int, inner: int) -> None:
        """`_alu` of an instruction whose iterations are independent (`_alu` checks it): A, B
        (and REQ's shift rows) as strided views of the accumulator. ADD and MUL wrap as uint32
        (the low 32 bits of the sum and of the product do not depend on the signs); SHR and
        REQ compute in int64 like `alu_op`."""
        n = self.cfg.n
        row = 4 * n
        acc = self.acc
        shape = (outer, inner, n)
        a = np.ndarray(shape, np.int32, acc, f["dst_base"] * row,
                       (f["dst_so"] * row, f["dst_si"] * row, 4))
        imm = f["imm"]
        if f["use_imm"]:
            b: Any = np.int32(imm)                     # 24-bit signed: fits
        else:
            b = np.ndarray(shape, np.int32, acc, f["src_base"] * row,
                           (f["src_so"] * row, f["src_si"] * row, 4))
        if op == AluOp.ADD or op == AluOp.MUL:
            au = a.view(np.uint32)
            bu = b.astype(np.uint32) if isinstance(b, np.int32) else b.view(np.uint32)
            (np.add if op == AluOp.ADD else np.multiply)(au, bu, out=au)
        elif op == AluOp.MAX:
            np.maximum(a, b, out=a)
        elif op == AluOp.MIN:
            np.minimum(a, b, out=a)
        elif op == AluOp.MOV:
            a[...] = b
        elif op == AluOp.SHR:
            s = np.asarray(b, np.int64) & 31
            a[...] = (a.astype(np.int64) + ((np.int64(1) << s) >> 1)) >> s
        elif op == AluOp.REQ:
            # the multiplier and shift rows, once per row the loop reads (a loop that reads the
            # same rows again has stride 0 there: they broadcast)
            sh = np.ndarray(shape, np.int32, acc, (f["src_base"] + 1) * row,
                            (f["src_so"] * row, f["src_si"] * row, 4))
            keep = tuple(slice(None) if st else slice(0, 1) for st in sh.strides)
            mult = b[keep].astype(np.int64)
            sh = sh[keep].astype(np.int64) & 63
            zp, lo, hi = isa.req_fields(imm)
            prod = a.astype(np.int64)
            prod *= mult                                            # |prod| <= 2**62
            if (sh == 63).any():                                    # the 65-bit case
                a[...] = requantize_lanes(prod, 1, sh, zp, lo, hi)
            else:                                                   # |sum| < 2**63
                prod += (np.int64(1) << sh) >> 1
                prod >>= sh
                prod += zp
                a[...] = np.clip(prod, lo, hi, out=prod)            # min(max(y, lo), hi)
        else:
            raise ValueError(f"ALU op {op} does not exist")

    def _alu_chunks(self, d: np.ndarray, s: np.ndarray | None, op: AluOp
                    ) -> list[tuple[int, int]]:
        """Consecutive iteration ranges that can be computed at once: no row written twice and
        no row read after an earlier iteration of the range wrote it."""
        m = d.size
        reads = [] if s is None else ([s, s + 1] if op == AluOp.REQ else [s])
        if _unique(d):
            first_write = np.full(self.cfg.acc_depth + 1, m, np.int64)
            first_write[d] = np.arange(m)
            idx = np.arange(m)
            if not any(bool((first_write[r] < idx).any()) for r in reads):
                return [(lo, min(m, lo + _BLOCK)) for lo in range(0, m, _BLOCK)]
        chunks = []
        start = 0
        written: set[int] = set()
        dl = d.tolist()
        rl = [r.tolist() for r in reads]
        for j in range(m):
            if dl[j] in written or any(r[j] in written for r in rl) or j - start >= _BLOCK:
                chunks.append((start, j))
                start = j
                written = set()
            written.add(dl[j])
        chunks.append((start, m))
        return chunks


def alu_op(op: AluOp, a: np.ndarray, b: np.ndarray | np.int64, shift: np.ndarray | None,
           imm: int) -> np.ndarray:
    """One ALU operation, lane by lane, on int32 values held in int64 arrays; int32 result.

    `b` is the source row or the sign-extended immediate; for REQ it is the multiplier row and
    `shift` the shift row, and `imm` holds zp, lo, hi.
    """
    if op == AluOp.ADD:
        r = a + b
    elif op == AluOp.MAX:
        r = np.maximum(a, b)
    elif op == AluOp.MIN:
        r = np.minimum(a, b)
    elif op == AluOp.MUL:
        r = a * b                                      # |a*b| <= 2**62: exact in int64
    elif op == AluOp.SHR:
        r = rounding_shift(a, np.asarray(b, np.int64) & 31)    # 33-bit sum: exact in int64
    elif op == AluOp.MOV:
        r = np.broadcast_to(b, a.shape)
    elif op == AluOp.REQ:
        assert shift is not None
        zp, lo, hi = isa.req_fields(imm)
        # exact 65-bit rounding sum; max first: lo > hi gives hi
        r = requantize_lanes(a, b, shift & 63, zp, lo, hi)
    else:
        raise ValueError(f"ALU op {op} does not exist")
    return _wrap32(r)


def xalu_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XALU DIV lane by lane (int32 values in int64 arrays, b nonzero): a / b truncated toward
    zero, wrapped to int32 (-2**31 / -1 = -2**31)."""
    q = np.abs(a) // np.abs(b)
    return _wrap32(np.where((a < 0) != (b < 0), -q, q))


def xalu_sqrt(b: np.ndarray) -> np.ndarray:
    """XALU SQRT lane by lane (b >= 0, int32 values): floor(sqrt(b)), exact (a float square
    root corrected by one either way)."""
    r = np.floor(np.sqrt(b.astype(np.float64))).astype(np.int64)
    r -= r * r > b
    r += (r + 1) * (r + 1) <= b
    return r.astype(np.int32)


# --- helpers -------------------------------------------------------------------------------------

def _as_u8(mem: bytearray | np.ndarray | memoryview) -> np.ndarray:
    if isinstance(mem, np.ndarray):
        if mem.dtype != np.uint8 or mem.ndim != 1:
            raise TypeError(f"card memory must be a 1-D uint8 array, got {mem.dtype} "
                            f"{mem.shape}")
        return mem
    arr = np.frombuffer(mem, np.uint8)
    if not arr.flags.writeable:
        raise TypeError("card memory must be writable (a bytearray, not bytes)")
    return arr


def _wrap32(v: np.ndarray) -> np.ndarray:
    return np.asarray(v).astype(np.int64).astype(np.int32)


def _row_starts(addr: int, rows: int, stride_bytes: int) -> np.ndarray:
    return (addr + np.arange(rows, dtype=np.int64) * stride_bytes) & _MASK32


def _loop_rows(base: int, outer: int, inner: int, so: int, si: int) -> np.ndarray:
    """Rows of the two-level loop `base + o * so + i * si`, in iteration order."""
    return (base + np.arange(outer, dtype=np.int64)[:, None] * so
            + np.arange(inner, dtype=np.int64)[None, :] * si).reshape(-1)


def _last(a: np.ndarray, idx: np.ndarray, axis: int = 0) -> np.ndarray:
    """ufunc.reduceat stand-in for MOV: the last value of each group."""
    ends = np.r_[idx[1:], a.shape[axis]] - 1
    return a[ends]


class _Last:
    reduceat = staticmethod(_last)


_FOLDS = {AluOp.ADD: np.add, AluOp.MAX: np.maximum, AluOp.MIN: np.minimum, AluOp.MOV: _Last}


def _group_reduce(keys: np.ndarray, vals: np.ndarray, ufunc) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, ufunc-reduction of the values of each key in iteration order)."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[starts], ufunc.reduceat(vals[order], starts, axis=0)


def _unique(rows: np.ndarray) -> bool:
    if rows.size < 2:
        return True
    if bool((np.diff(rows) > 0).all()):
        return True
    return np.unique(rows).size == rows.size


def _new_counters() -> dict[str, int]:
    return dict.fromkeys(COUNTER_NAMES, 0)


class _GemmBatch:
    """GEMMs a run has started whose arithmetic waits, so that consecutive ones are computed
    together (`AccelModel._gemm_many`). Their checks and counters are done when they start; the
    batch is computed before any instruction that could see or change what they touch, in the
    run's order, so the result is the one of computing each as it starts: another unit's LOAD,
    STORE or ALU runs at once only if the rows it touches lie outside the batch's row ranges
    (then the two commute); anything else first computes the batch (`sync`)."""

    __slots__ = ("fs", "acc", "inp", "wgt")

    def __init__(self) -> None:
        self.fs: list[dict[str, int]] = []
        self.acc = [1 << 30, -1]      # [lowest, highest] row of each scratchpad touched
        self.inp = [1 << 30, -1]
        self.wgt = [1 << 30, -1]

    def add(self, f: dict[str, int], a_last: int, i_last: int) -> None:
        self.fs.append(f)
        r = self.acc
        if f["acc_base"] < r[0]:
            r[0] = f["acc_base"]
        if a_last > r[1]:
            r[1] = a_last
        r = self.inp
        if f["inp_base"] < r[0]:
            r[0] = f["inp_base"]
        if i_last > r[1]:
            r[1] = i_last
        r = self.wgt
        w = f["wgt_base"]
        if w < r[0]:
            r[0] = w
        if w > r[1]:
            r[1] = w

    def flush(self, model: AccelModel) -> None:
        if self.fs:
            fs, self.fs = self.fs, []
            self.acc = [1 << 30, -1]
            self.inp = [1 << 30, -1]
            self.wgt = [1 << 30, -1]
            model._gemm_many(fs)

    def commutes(self, op: Opcode, f: dict[str, int]) -> bool:
        """Whether instruction (op, f) of another kind touches no row the batch touches."""
        def clear(r: list[int], lo: int, hi: int) -> bool:
            return hi < r[0] or lo > r[1]

        if op == Opcode.LOAD:
            total = (f["pad_top"] + f["y_size"] + f["pad_bottom"]) \
                * (f["pad_left"] + f["x_size"] + f["pad_right"])
            if not total:
                return True
            buf = f["buf"]
            r = self.inp if buf == Buffer.INP else self.wgt if buf == Buffer.WGT else self.acc
            return clear(r, f["sp_base"], f["sp_base"] + total - 1)
        if op == Opcode.STORE:
            total = f["y_size"] * f["x_size"]
            return not total or clear(self.acc, f["sp_base"], f["sp_base"] + total - 1)
        if op == Opcode.ALU:
            outer, inner = f["outer"], f["inner"]
            if not (outer and inner):
                return True
            d_last = f["dst_base"] + (outer - 1) * f["dst_so"] + (inner - 1) * f["dst_si"]
            if not clear(self.acc, f["dst_base"], d_last):
                return False
            if f["use_imm"]:
                return True
            s_last = f["src_base"] + (outer - 1) * f["src_so"] + (inner - 1) * f["src_si"] + 1
            return clear(self.acc, f["src_base"], s_last)
        return False                  # an instruction this batch knows nothing about


_LOAD, _STORE, _GEMM, _DW, _XALU = (int(Opcode.LOAD), int(Opcode.STORE), int(Opcode.GEMM),
                                    int(Opcode.DW), int(Opcode.XALU))


class _Run:
    """One run of a program: queues, token counters, the schedule, the timing estimate.

    Queue entries are (pc, instruction, dispatch time). The default schedule (round robin:
    fetcher, load, compute, store, repeated) is `_go_round_robin`, the same steps as the random
    one with the agents' conditions written out, since it runs once per instruction."""

    FETCH = 3     # agent index after the three units
    UNIT_NAMES = ("load", "compute", "store")

    def __init__(self, model: AccelModel, mem: _Memory, prog: _ProgramSource,
                 slots: list[int]) -> None:
        self.model = model
        self.mem = mem
        self.prog = prog
        self.slots = slots
        self.cap = model.cfg.queue_depth + 1
        self.queues: list[deque[tuple[int, _Op, int]]] = [deque(), deque(), deque()]
        self.tokens = [0, 0, 0, 0]
        self.pc = 0
        self._next: _Op | AccelError | None = None      # instruction pc, decoded and checked
        self.ended = False
        self.error = AccelError.NONE
        self.err_pc = 0
        self.c = _new_counters()
        self.batch = _GemmBatch()
        # timing estimate
        self.fetch_t = 0
        self.unit_t = [0, 0, 0]                          # when each unit is free again
        self.token_t: list[deque[int]] = [deque() for _ in TOKEN_QUEUES]
        self.finish_t: list[list[int]] = [[], [], []]    # finish time of each started insn
        self.dispatched = [0, 0, 0]
        self.last_t = 0
        self._busy = [f"{u}_busy" for u in self.UNIT_NAMES]
        self._stall = [f"{u}_stall" for u in self.UNIT_NAMES]
        #: whether the caller wants the timing estimate of a run without error; if not, the
        #: program-order path may skip it (`timing_skipped`: then the timing state is partial)
        self.want_timing = True
        self.timing_skipped = False

    # --- agents ------------------------------------------------------------------------------

    def fetch_enabled(self) -> bool:
        if self.ended or self.error:
            return False
        if self.pc >= self.prog.count:
            return True                                  # NO_END is progress (an error)
        item = self._peek()
        if isinstance(item, AccelError) or item.unit is None:
            return True
        return len(self.queues[item.unit]) < self.cap

    def fetch_step(self) -> None:
        if self.pc >= self.prog.count:
            self.fail(AccelError.NO_END, self.pc)
            return
        item = self._peek()
        if isinstance(item, AccelError):
            self.fail(item, self.pc)
            return
        self.c["insns"] += 1
        t = self.fetch_t + 1
        if item.unit is None:                            # END
            self.ended = True
            self.fetch_t = t
            return
        u = item.unit
        k = self.dispatched[u] - self.cap                # its queue entry frees when k finishes
        if k >= 0:
            t = max(t, self.finish_t[u][k])
        self.fetch_t = t
        self.dispatched[u] += 1
        self.queues[u].append((self.pc, item, t))
        self.pc += 1
        self._next = None

    def _peek(self) -> _Op | AccelError:
        if self._next is None:
            self._next = self.prog.get(self.pc)
        return self._next

    def unit_enabled(self, u: int) -> bool:
        q = self.queues[u]
        return bool(q) and not self.error and all(self.tokens[t] for t in q[0][1].pops)

    def unit_step(self, u: int) -> None:
        pc, op, dispatch_t = self.queues[u].popleft()
        tokens = self.tokens
        pops = op.pops
        for t in pops:
            tokens[t] -= 1
        m, f, c, code = self.model, op.f, self.c, op.op
        if code == _GEMM:
            err = m._gemm(f, c)
        else:
            if self.batch.fs and not self.batch.commutes(code, f):
                self.batch.flush(m)
            if code == _LOAD:
                err = m._load(f, self.mem, self.slots, c)
            elif code == _STORE:
                err = m._store(f, self.mem, self.slots, c)
            elif code == _DW:
                err = m._dw(f, c)
            elif code == _XALU:
                err = m._xalu(f)
            else:
                err = m._alu(f)
        if err:
            self.fail(err, pc)
            return
        # the timing estimate: start when the unit is free and the popped tokens are there
        ready = self.unit_t[u]
        if dispatch_t >= ready:
            ready = dispatch_t + 1
        start = ready
        for t in pops:
            pushed = self.token_t[t].popleft()
            if pushed > start:
                start = pushed
        dur = op.cycles
        finish = start + dur
        c[self._busy[u]] += dur
        if start != ready:
            c[self._stall[u]] += start - ready
        if code == _GEMM or code == _DW:
            c["gemm_busy"] += dur
        self.unit_t[u] = finish
        self.finish_t[u].append(finish)
        if finish > self.last_t:
            self.last_t = finish
        for t in op.pushes:
            tokens[t] += 1
            self.token_t[t].append(finish)
            if tokens[t] > isa.TOKEN_MAX:
                self.fail(AccelError.TOKEN_OVERFLOW, self.c["insns"])
                return

    def fail(self, err: AccelError, pc: int) -> None:
        if not self.error:
            self.error, self.err_pc = err, pc

    # --- the loop ----------------------------------------------------------------------------

    def go(self, seed: int | None) -> AccelResult:
        self.model._batch = self.batch if self.model.batch_gemms else None
        try:
            with blas.single_thread():
                if seed is None:
                    if self.model.fast:
                        ProgramOrder(self).go()
                    self._go_round_robin()
                else:
                    self._go_random(seed)
                self.batch.flush(self.model)
        finally:
            self.model._batch = None
        if self.timing_skipped and not self.error:
            for name in _TIMING_COUNTERS:
                self.c[name] = 0
        else:
            self.c["cycles"] = max(self.last_t, self.fetch_t)
        return AccelResult(self.error, self.err_pc if self.error else 0, dict(self.c))

    def _go_round_robin(self) -> None:
        """Each round: the fetcher, then the load, compute and store units, each stepping once
        if it can; stops at an error, or when no agent could move (done or DEADLOCK)."""
        queues, tokens, cap = self.queues, self.tokens, self.cap
        count = self.prog.count
        fetch_step, unit_step = self.fetch_step, self.unit_step
        while not self.error:
            moved = False
            if not self.ended:
                if self.pc >= count:
                    enabled = True
                else:
                    item = self._next
                    if item is None:
                        item = self._next = self.prog.get(self.pc)
                    enabled = isinstance(item, AccelError) or item.unit is None \
                        or len(queues[item.unit]) < cap
                if enabled:
                    fetch_step()
                    moved = True
            for u in (0, 1, 2):
                if self.error:
                    break
                q = queues[u]
                if q:
                    for t in q[0][1].pops:
                        if not tokens[t]:
                            break
                    else:
                        unit_step(u)
                        moved = True
            if not moved:
                if not (self.ended and not any(queues)):
                    self.fail(AccelError.DEADLOCK, self.c["insns"])
                break

    def _go_random(self, seed: int) -> None:
        agents: list[tuple[Callable[[], bool], Callable[[], None]]] = [
            (lambda u=u: self.unit_enabled(u), lambda u=u: self.unit_step(u)) for u in range(3)]
        agents.append((self.fetch_enabled, self.fetch_step))
        rng = random.Random(seed)
        while not self.error:
            live = [a for a in agents if a[0]()]
            if live:
                enabled, step = rng.choice(live)
                for _ in range(rng.choice((1, 1, 1, 2, 3, 8, 32))):
                    if self.error or not enabled():
                        break
                    step()
            else:
                if not (self.ended and not any(self.queues)):
                    self.fail(AccelError.DEADLOCK, self.c["insns"])
                break

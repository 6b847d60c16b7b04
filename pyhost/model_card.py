"""ModelCard: a pure-Python functional model of the card's BAR0 registers, DMA engine and memory.

It follows docs/dma.md and the register map of pyhost/spec/regs.py so that host software sees the
same results and errors as on the RTL, at numpy speed: a chain runs synchronously, inside the
mmio_write of RUN, with one slice copy per descriptor. With an accelerator (`accel=AccelConfig()`)
a program runs the same way, inside the mmio_write of ACC_CTRL.START, on the functional model
pyhost/accel/model.py.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pyhost.accel.model import AccelModel
from pyhost.accel.timing import PerfEstimate, perf_estimate_raw
from pyhost.backend import (
    DEFAULT_HOST_BASE,
    DEFAULT_HOST_SIZE,
    CardBackend,
    HostMemory,
    check_mmio,
)
from pyhost.card_timing import CardTiming, TimingEvent, dma_cycles
from pyhost.spec import isa, regs
from pyhost.spec.accel import BEAT_BYTES, DATA_WIDTH, AccelConfig
from pyhost.spec.dram import DramGeometry
from pyhost.spec.isa import AccelError
from pyhost.spec.regs import Access, Channel, DmaError

DEFAULT_MEM_SIZE = 1 << 30
DEFAULT_BUS_WIDTH = DATA_WIDTH

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1

_STATUS = {f.name: f for f in regs.CH_STATUS_FIELDS}
_CTRL = {f.name: f for f in regs.CH_CTRL_FIELDS}
#: The accelerator of the default RTL card build.
DEFAULT_ACCEL = AccelConfig()
_IRQ = {f.name: f for f in regs.IRQ_FIELDS}
_CAPS = {f.name: f for f in regs.BY_NAME["CAPS"].fields}
_ACC_CTRL = {f.name: f for f in regs.BY_NAME["ACC_CTRL"].fields}
_ACC_STATUS = {f.name: f for f in regs.BY_NAME["ACC_STATUS"].fields}
#: Programs whose performance estimate ModelCard keeps (oldest dropped first).
_PERF_CACHE = 64
#: The accelerator sees card memory through 32-bit addresses.
_ACCEL_SPACE = isa.ADDR_SPACE
#: Every defined IRQ_STATUS bit; IRQ_MASK holds only these, like the generated CSR.
IRQ_ALL = sum(f.mask for f in regs.IRQ_FIELDS)


def irq_done_bit(ch: Channel) -> int:
    return _IRQ[f"{Channel(ch).name}_DONE"].mask


def irq_err_bit(ch: Channel) -> int:
    return _IRQ[f"{Channel(ch).name}_ERR"].mask


def accel_status_word(*, busy: bool = False, done: bool = False, error: bool = False,
                      code: int = AccelError.NONE) -> int:
    """An ACC_STATUS word."""
    return ((int(busy) << _ACC_STATUS["BUSY"].lsb) | (int(done) << _ACC_STATUS["DONE"].lsb)
            | (int(error) << _ACC_STATUS["ERROR"].lsb)
            | ((int(code) << _ACC_STATUS["ERR_CODE"].lsb) & _ACC_STATUS["ERR_CODE"].mask))


def status_word(*, busy: bool = False, done: bool = False, error: bool = False,
                code: int = DmaError.NONE) -> int:
    """A channel STATUS word (also the second word of the status write-back)."""
    return ((int(busy) << _STATUS["BUSY"].lsb) | (int(done) << _STATUS["DONE"].lsb)
            | (int(error) << _STATUS["ERROR"].lsb)
            | ((int(code) << _STATUS["ERR_CODE"].lsb) & _STATUS["ERR_CODE"].mask))


@dataclass
class _ChannelState:
    busy: bool = False
    done: bool = False
    error: bool = False
    code: DmaError = DmaError.NONE
    completed: int = 0
    bytes: int = 0      # since card reset, 64-bit
    descs: int = 0      # since card reset, 32-bit

    @property
    def status(self) -> int:
        return status_word(busy=self.busy, done=self.done, error=self.error, code=self.code)


class ModelCard(CardBackend):
    """Functional model of the card (registers, DMA of docs/dma.md, card memory).

    - Card memory is a numpy uint8 array of `mem_size` bytes, zero-filled, allocated on first use.
    - A chain runs to its end inside the `mmio_write` that starts it. The channels share one data
      mover: a RUN that arrives while another chain holds it (only possible when that chain
      loops, see below) leaves the channel BUSY and waiting; waiting channels are served round
      robin when the mover is freed.
    - A chain that comes back to a descriptor address it already visited has no STOP and would
      run forever on the RTL; the model stops processing it there and leaves the channel BUSY
      (holding the mover) until RESET aborts it. (A chain that rewrites its own descriptors
      through C2H could legitimately revisit an address; the model does not support that.)
    - On an error the model writes nothing of the failing descriptor (the contract allows any
      partial write). If both the source and the destination of a descriptor are bad, the model
      reports SRC_READ. If the status write-back fails after an error, the original error code
      is kept (docs/dma.md names STATUS_WRITE only for a chain that otherwise completed).
    - A host access fails (like DECERR / SLVERR) outside `host` or where it overlaps a range set
      by `inject_host_error`; a card access fails if any byte is at or above `mem_size`.
    - DRAM counters: the model has no DRAM timing. `rd` / `wr` count the 64-byte lines each
      completed descriptor reads / writes in card memory (the RTL may count a line twice where
      it splits a descriptor at a point inside a line); row hit / miss / conflict, refresh,
      ref_stall and busy stay 0.
    - Accelerator: present by default in the RTL card's default configuration (`accel` is an
      AccelConfig; CAPS.ACCEL is 1, ACC_CFG_* report it and `self.accel` is the `AccelModel`,
      whose scratchpads are there for tests). `accel=None` builds a card without one (CAPS.ACCEL
      = 0, ACC_CFG_* and the other read-only ACC_* registers read 0).
      A write of ACC_CTRL.START restarts the counters and runs INSN_COUNT instructions from
      INSN_BASE on card memory to the end or the first error, inside that mmio_write (BAD_CONFIG
      without running if INSN_BASE is not 16-byte aligned or INSN_COUNT is 0), then sets
      ACC_STATUS, ACC_ERR_PC, the counters and IRQ_STATUS.ACCEL_DONE or ACCEL_ERR. The
      accelerator is never BUSY afterwards, so ABORT has nothing to stop and does nothing.
      `accel_schedule_seed` (None: the model's fixed round robin) picks a random interleaving of
      the units for every run.
    - Performance model (`perf_model`, default on; pyhost/card_timing.py): a successful run
      reports in ACC_CYCLES and the units' busy / stall counters the calibrated estimate of the
      RTL's (`pyhost.accel.timing.perf_estimate`); the exact counters (instructions, MACs,
      bytes) are the functional model's. Every chain and run is logged with its estimated
      cycles in `timing` (`estimated_cycles()`: the card's estimated clock). With
      `perf_model=False` the counters are AccelModel's own timing rules, as before.
    """

    def __init__(self, mem_size: int = DEFAULT_MEM_SIZE, *, host: HostMemory | None = None,
                 host_size: int = DEFAULT_HOST_SIZE, host_base: int = DEFAULT_HOST_BASE,
                 bus_width: int = DEFAULT_BUS_WIDTH, accel: AccelConfig | None = DEFAULT_ACCEL,
                 accel_schedule_seed: int | None = None, perf_model: bool = True) -> None:
        if mem_size <= 0 or mem_size > _U64:
            raise ValueError(f"card memory size must be 1..2^64-1 bytes, got {mem_size}")
        self.host = host if host is not None else HostMemory(host_size, host_base)
        self.mem_size = mem_size
        self.bus_width = bus_width
        self._line = DramGeometry(mem_size).line_bytes
        self._mem: np.ndarray | None = None
        self._host_errors: list[tuple[int, int]] = []
        #: The accelerator's functional model (None: the card has no accelerator).
        self.accel = AccelModel(accel) if accel is not None else None
        self.accel_schedule_seed = accel_schedule_seed
        self.perf_model = perf_model
        #: perf_estimate_raw of the programs run so far, by (program digest, place in its first
        #: beat): a model runs the same program each inference (the estimate depends on nothing
        #: else; at most _PERF_CACHE programs)
        self._perf_cache: dict[tuple[bytes, int], PerfEstimate] = {}
        #: Estimated cycles of every chain and accelerator run since construction.
        self.timing = CardTiming()
        self._reads = self._read_table()
        self.reset()

    # --- state ----------------------------------------------------------------------------------

    def reset(self) -> None:
        """The card's reset: every register to its reset value, channels idle, counters 0.

        Card memory keeps its contents (DRAM is not cleared by a reset either).
        """
        self._rw = {r.offset: r.reset for r in regs.REGISTERS if r.access == Access.RW}
        self._irq_status = 0
        self._ch = {ch: _ChannelState() for ch in Channel}
        self._dram = dict.fromkeys(regs.DRAM_COUNTERS, 0)
        self._active: Channel | None = None     # channel whose chain holds the data mover
        self._waiting: list[Channel] = []       # BUSY channels waiting for the mover
        self._last_served = Channel(len(Channel) - 1)
        self._acc_status = accel_status_word()
        self._acc_err_pc = 0
        self._acc_counters = dict.fromkeys((c for c, _ in regs.ACCEL_COUNTERS), 0)

    @property
    def card_memory(self) -> np.ndarray:
        """The card memory array (a backdoor for tests; host software uses DMA)."""
        if self._mem is None:
            self._mem = np.zeros(self.mem_size, dtype=np.uint8)
        return self._mem

    @property
    def irq(self) -> bool:
        """The interrupt line."""
        return bool(self._irq_status & self._rw[regs.offset("IRQ_MASK")])

    # --- CardBackend ----------------------------------------------------------------------------

    def mmio_read(self, offset: int) -> int:
        check_mmio(offset)
        if offset in self._rw:
            return self._rw[offset]
        read = self._reads.get(offset)
        return read() & _U32 if read else 0

    def mmio_write(self, offset: int, value: int) -> None:
        check_mmio(offset, value)
        if offset == regs.offset("IRQ_MASK"):
            self._rw[offset] = value & IRQ_ALL
        elif offset in self._rw:
            self._rw[offset] = value
        elif offset == regs.offset("IRQ_STATUS"):
            self._irq_status &= ~value
        elif offset == regs.offset("ACC_CTRL"):
            self._accel_ctrl(value)
        else:
            for ch in Channel:
                if offset == regs.channel_reg(ch, "CTRL"):
                    self._ctrl(ch, value)
        # Writes to read-only registers and unknown offsets are ignored, as on the RTL.

    def wait_irq(self, timeout_s: float) -> bool:
        # Chains run to completion inside mmio_write, so nothing can raise the line while we
        # wait: answer at once instead of sleeping out the timeout.
        return self.irq

    def inject_host_error(self, start: int, end: int) -> None:
        if not 0 <= start < end:
            raise ValueError(f"error range [{start:#x}, {end:#x}) is empty or negative")
        self._host_errors.append((start, end))

    def clear_host_errors(self) -> None:
        self._host_errors.clear()

    # --- registers ------------------------------------------------------------------------------

    def _read_table(self) -> dict[int, Callable[[], int]]:
        cfg = self.accel.cfg if self.accel is not None else None
        caps = ((len(Channel) << _CAPS["CHANNELS"].lsb) | (regs.MAX_TAGS << _CAPS["TAGS"].lsb)
                | (int(cfg is not None) << _CAPS["ACCEL"].lsb))
        t: dict[str, Callable[[], int]] = {
            "CARD_ID": lambda: regs.BY_NAME["CARD_ID"].reset,
            "VERSION": lambda: regs.BY_NAME["VERSION"].reset,
            "MEM_SIZE_LO": lambda: self.mem_size,
            "MEM_SIZE_HI": lambda: self.mem_size >> 32,
            "BUS_WIDTH": lambda: self.bus_width,
            "CAPS": lambda: caps,
            "IRQ_STATUS": lambda: self._irq_status,
        }
        for ch in Channel:
            s = ch.name

            def state(ch: Channel = ch) -> _ChannelState:
                return self._ch[ch]
            t[f"{s}_STATUS"] = lambda state=state: state().status
            t[f"{s}_COMPLETED"] = lambda state=state: state().completed
            t[f"{s}_BYTES_LO"] = lambda state=state: state().bytes
            t[f"{s}_BYTES_HI"] = lambda state=state: state().bytes >> 32
            t[f"{s}_DESCS"] = lambda state=state: state().descs
        for c in regs.DRAM_COUNTERS:
            t[f"DRAM_{c.upper()}_LO"] = lambda c=c: self._dram[c]
            t[f"DRAM_{c.upper()}_HI"] = lambda c=c: self._dram[c] >> 32
        t["ACC_STATUS"] = lambda: self._acc_status
        t["ACC_ERR_PC"] = lambda: self._acc_err_pc
        for reg, value in (("ACC_CFG_N", cfg and cfg.n), ("ACC_CFG_ISA", cfg and isa.ISA_VERSION),
                           ("ACC_CFG_INP_DEPTH", cfg and cfg.inp_depth),
                           ("ACC_CFG_WGT_DEPTH", cfg and cfg.wgt_depth),
                           ("ACC_CFG_ACC_DEPTH", cfg and cfg.acc_depth),
                           ("ACC_CFG_QUEUE_DEPTH", cfg and cfg.queue_depth)):
            t[reg] = lambda v=int(value or 0): v
        for c, _ in regs.ACCEL_COUNTERS:
            t[f"ACC_{c.upper()}_LO"] = lambda c=c: self._acc_counters[c]
            t[f"ACC_{c.upper()}_HI"] = lambda c=c: self._acc_counters[c] >> 32
        # A register added to the spec must be added to the model: fail loudly, not read 0.
        for r in regs.REGISTERS:
            handled = r.access in (Access.RW, Access.WO) or r.name in t
            if not handled:
                raise NotImplementedError(f"ModelCard does not model register {r.name}")
        return {regs.offset(name): fn for name, fn in t.items()}

    def _reg64(self, lo: str) -> int:
        return self._rw[regs.offset(lo)] | (self._rw[regs.offset(lo[:-2] + "HI")] << 32)

    def _ctrl(self, ch: Channel, value: int) -> None:
        # RESET takes precedence: a write with both bits resets the channel and does not start it.
        if value & _CTRL["RESET"].mask:
            self._reset_channel(ch)
        elif value & _CTRL["RUN"].mask and not self._ch[ch].busy:
            c = self._ch[ch]
            c.busy, c.done, c.error, c.code, c.completed = True, False, False, DmaError.NONE, 0
            self._waiting.append(ch)
            self._serve()

    # --- the accelerator -------------------------------------------------------------------------

    def _accel_ctrl(self, value: int) -> None:
        if self.accel is None or not value & _ACC_CTRL["START"].mask:
            return   # no accelerator; or ABORT, which finds the accelerator idle
        self._acc_counters = dict.fromkeys(self._acc_counters, 0)
        base = self._rw[regs.offset("ACC_INSN_BASE")]
        count = self._rw[regs.offset("ACC_INSN_COUNT")]
        if base % isa.INSN_BYTES or count == 0:
            self._accel_stop(AccelError.BAD_CONFIG, 0)
            return
        slots = [self._rw[regs.offset(f"ACC_SLOT{i}")] for i in range(isa.NUM_SLOTS)]
        mem = self.card_memory[:_ACCEL_SPACE]
        # With the performance model, a run without error reports its timing and the model's
        # own estimate is not needed; after an error the model's counters are reported.
        result = self.accel.run_array(mem, base, count, slots,
                                      schedule_seed=self.accel_schedule_seed,
                                      timing=not self.perf_model)
        counters = dict(result.counters)
        if self.perf_model and result.ok:
            prog = mem[base:base + count * isa.INSN_BYTES]
            key = (hashlib.blake2b(prog, digest_size=20).digest(), base % BEAT_BYTES)
            est = self._perf_cache.get(key)
            if est is None:
                est = perf_estimate_raw(prog, self.accel.cfg, insn_base=base)
                if len(self._perf_cache) >= _PERF_CACHE:
                    self._perf_cache.pop(next(iter(self._perf_cache)))
                self._perf_cache[key] = est
            counters.update(est.counters())
        self.timing.add(TimingEvent("ACCEL", int(counters["cycles"])))
        self._acc_counters = {c: v & _U64 for c, v in counters.items()}
        self._accel_stop(result.error, result.err_pc)

    def estimated_cycles(self) -> int:
        """The card's estimated clock: the sum of every chain's and run's estimated cycles."""
        return self.timing.cycles

    def _accel_stop(self, code: AccelError, pc: int) -> None:
        error = code != AccelError.NONE
        self._acc_status = accel_status_word(done=not error, error=error, code=code)
        self._acc_err_pc = pc & _U32
        self._irq_status |= _IRQ["ACCEL_ERR" if error else "ACCEL_DONE"].mask

    def _reset_channel(self, ch: Channel) -> None:
        c = self._ch[ch]
        if c.busy:
            # Abort: no new requests (so no status write-back), ERROR + ABORTED, ERR interrupt.
            if self._active == ch:
                self._active = None
            if ch in self._waiting:
                self._waiting.remove(ch)
            c.busy, c.done, c.error, c.code = False, False, True, DmaError.ABORTED
            self._irq_status |= irq_err_bit(ch)
            self._serve()
        else:
            # An idle channel drops the state of its last chain.
            c.done, c.error, c.code, c.completed = False, False, DmaError.NONE, 0

    # --- the data mover -------------------------------------------------------------------------

    def _serve(self) -> None:
        """Run waiting chains, round robin from the last channel served, while the mover is free."""
        while self._active is None and self._waiting:
            order = [Channel((self._last_served + i) % len(Channel))
                     for i in range(1, len(Channel) + 1)]
            ch = next(c for c in order if c in self._waiting)
            self._waiting.remove(ch)
            self._last_served = ch
            self._active = ch
            self._run_chain(ch)

    def _config_ok(self) -> bool:
        mps = self._rw[regs.offset("DMA_MPS")]
        mrrs = self._rw[regs.offset("DMA_MRRS")]
        tags = self._rw[regs.offset("DMA_TAGS")]

        def pow2_in(v: int, lo: int, hi: int) -> bool:
            return lo <= v <= hi and v & (v - 1) == 0
        return (pow2_in(mps, regs.MPS_MIN, regs.MPS_MAX)
                and pow2_in(mrrs, regs.MRRS_MIN, regs.MRRS_MAX) and 1 <= tags <= regs.MAX_TAGS)

    def _run_chain(self, ch: Channel) -> None:
        c = self._ch[ch]
        if not self._config_ok():
            self._stop(ch, DmaError.BAD_CONFIG)
            return
        addr = self._reg64(f"{ch.name}_DESC_LO")
        visited: set[int] = set()
        want_irq = False
        moved = descs = 0
        while True:
            if addr in visited:
                return  # a loop without STOP: stays BUSY, holding the mover, until RESET
            visited.add(addr)
            if not self._host_ok(addr, regs.DESC_SIZE):
                self._stop(ch, DmaError.DESC_READ)
                return
            d = regs.Descriptor.decode(self.host.read(addr, regs.DESC_SIZE))
            if d.magic != regs.DESC_MAGIC:
                self._stop(ch, DmaError.BAD_MAGIC)
                return
            if d.length == 0:
                self._stop(ch, DmaError.ZERO_LENGTH)
                return
            err = self._move(ch, d.src, d.dst, d.length)
            if err != DmaError.NONE:
                self._stop(ch, err)
                return
            c.completed += 1
            c.descs = (c.descs + 1) & _U32
            c.bytes = (c.bytes + d.length) & _U64
            moved += d.length
            descs += 1
            want_irq |= d.completed
            if d.stop:
                break
            addr = d.next
        self.timing.add(TimingEvent(ch.name, dma_cycles(ch, moved, descs), moved, descs))
        self._stop(ch, DmaError.NONE, done_irq=want_irq)

    def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
        """End the chain: status, write-back, then the interrupt (docs/dma.md steps 4, 5, 7)."""
        c = self._ch[ch]
        c.busy = False
        c.error = code != DmaError.NONE
        c.done = not c.error
        c.code = code
        self._active = None
        wb = self._reg64(f"{ch.name}_WB_LO")
        if wb and not self._host_write(wb, np.frombuffer(
                struct.pack(regs.WB_FORMAT, c.completed, c.status), dtype=np.uint8)):
            if not c.error:
                c.done, c.error, c.code = False, True, DmaError.STATUS_WRITE
        if c.error:
            self._irq_status |= irq_err_bit(ch)
        elif done_irq:
            self._irq_status |= irq_done_bit(ch)

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        """Move one descriptor's bytes; the error code if a side is out of range."""
        src_card = ch in (Channel.C2H, Channel.C2C)
        dst_card = ch in (Channel.H2C, Channel.C2C)
        if not (self._card_ok(src, n) if src_card else self._host_ok(src, n)):
            return DmaError.SRC_READ
        if not (self._card_ok(dst, n) if dst_card else self._host_ok(dst, n)):
            return DmaError.DST_WRITE
        mem = self.card_memory
        data = mem[src:src + n] if src_card else self.host.view(src, n)
        if dst_card:
            mem[dst:dst + n] = data   # numpy copies overlapping slices like memmove
            self._dram["wr"] += self._lines(dst, n)
        else:
            self.host.view(dst, n)[:] = data
        if src_card:
            self._dram["rd"] += self._lines(src, n)
        return DmaError.NONE

    def _lines(self, addr: int, n: int) -> int:
        return (addr + n - 1) // self._line - addr // self._line + 1

    def _card_ok(self, addr: int, n: int) -> bool:
        return 0 <= addr and addr + n <= self.mem_size

    def _host_ok(self, addr: int, n: int) -> bool:
        if not self.host.contains(addr, n):
            return False
        return not any(s < addr + n and addr < e for s, e in self._host_errors)

    def _host_write(self, addr: int, data: np.ndarray) -> bool:
        if not self._host_ok(addr, data.size):
            return False
        self.host.view(addr, data.size)[:] = data
        return True

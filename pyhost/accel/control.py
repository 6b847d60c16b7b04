"""The driver's accelerator half: program upload, slot binding, start, completion, counters and
abort, over BAR0's ACC_* registers.

`AccelControl` is a part of `pyhost.driver.PcieDriver` (which derives from it): it uses the
driver's MMIO accessors, lock, statistics and `write_data` for the upload, so the same calls work
on every CardBackend. The errors here derive from the driver's `DriverError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING

from pyhost.errors import CardRangeError, DriverError, cleanup_note
from pyhost.spec import isa, regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, Insn, Opcode

if TYPE_CHECKING:
    from pyhost.backend import CardBackend, HostMemory
    from pyhost.driver import DriverStats, HostRef

_IRQ = {f.name: f for f in regs.IRQ_FIELDS}
_ACC_CTRL = {f.name: f for f in regs.BY_NAME["ACC_CTRL"].fields}
_ACC_STATUS = {f.name: f for f in regs.BY_NAME["ACC_STATUS"].fields}
_IRQ_ACCEL_DONE = _IRQ["ACCEL_DONE"].mask
_IRQ_ACCEL_ERR = _IRQ["ACCEL_ERR"].mask
#: The accelerator addresses card memory with 32 bits.
_ACCEL_SPACE = isa.ADDR_SPACE


# --- errors -------------------------------------------------------------------------------------

class AccelUnavailable(DriverError):
    """The card has no accelerator (CAPS.ACCEL = 0) or one of another ISA version."""


class AccelProgramError(DriverError, ValueError):
    """A program the driver will not upload: not END-terminated, misaligned, illegal."""


class AccelSlotError(DriverError, ValueError):
    """A slot number outside 0..15 or a slot address that is not 32 bits."""


class AccelBusyError(DriverError):
    """START while the accelerator still runs a program (the card would ignore it)."""


class AccelIdleError(DriverError):
    """accel_wait with no program started since the last wait: there is nothing to wait for."""


class AccelProtocolError(DriverError):
    """The card broke the accelerator's contract (status and interrupt disagree)."""


class AccelTimeout(DriverError, TimeoutError):
    """No accelerator interrupt within the timeout; the driver has aborted the program."""

    def __init__(self, message: str, counters: dict[str, int]) -> None:
        super().__init__(message)
        #: The counters after the abort (how far the program got).
        self.counters = counters


class AccelRunError(DriverError):
    """The accelerator stopped on an error: `code` (the spec's AccelError), its `name`, the
    instruction index `pc` (ACC_ERR_PC), that instruction's text if the driver loaded the program,
    and the counters at the stop."""

    def __init__(self, message: str, code: AccelError | int, pc: int,
                 instruction: str | None, counters: dict[str, int]) -> None:
        super().__init__(message)
        self.code = code
        self.name = code.name if isinstance(code, AccelError) else f"code {code}"
        self.pc = pc
        self.instruction = instruction
        self.counters = counters

    @property
    def names_instruction(self) -> bool:
        """Whether `pc` is the index of the failing instruction (not, as for DEADLOCK,
        TOKEN_OVERFLOW, NO_END, ABORTED and BAD_CONFIG, a count of dispatched instructions or
        0)."""
        return isinstance(self.code, AccelError) and self.code not in PROGRAM_ERRORS


# --- value objects ------------------------------------------------------------------------------

@dataclass(frozen=True)
class AccelProgram:
    """A program in card memory: INSN_BASE and INSN_COUNT (END included).

    `accel_load_program` makes them; tests may build one by hand (any address and count) to
    reach the card's own checks (BAD_CONFIG, NO_END). `listing` is the disassembly, one line per
    instruction, when the driver uploaded the program (error messages quote it).
    """

    card_addr: int
    count: int
    listing: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        return self.count * isa.INSN_BYTES


@dataclass(frozen=True)
class AccelRunResult:
    """A program that reached END: the accelerator's counters for the run (regs.ACCEL_COUNTERS;
    on ModelCard the cycle counters are the functional model's estimate)."""

    counters: dict[str, int]

    @property
    def cycles(self) -> int:
        return self.counters["cycles"]


_ACCEL_HINTS = {
    AccelError.ILLEGAL_OPCODE: "opcode 0 or above XALU: INSN_BASE / INSN_COUNT do not match the "
                               "program, or its memory was overwritten",
    AccelError.ILLEGAL_FIELD: "a dependency flag the unit has no queue for, STORE from INP/WGT "
                              "or with padding, ALU op 7, REQ with use_imm, END with flags, or "
                              "DW with taps 0 or above N, tap_w 0 or taps off the INP banks' "
                              "rotation (pyhost.spec.isa.check_static)",
    AccelError.SP_RANGE: "the instruction touches a scratchpad row beyond the depth the card "
                         "reports (PcieDriver.accel_config)",
    AccelError.MISALIGNED: "slot address + offset is not a multiple of the element size "
                           "(INP N, WGT N*N, ACC 4N, ACC8 N bytes)",
    AccelError.FETCH_BUS: "the program lies (partly) outside card memory",
    AccelError.LOAD_BUS: "a LOAD row lies outside card memory: check the slot bindings and "
                         "offsets",
    AccelError.STORE_BUS: "a STORE row lies outside card memory: check the slot bindings and "
                          "offsets",
    AccelError.DEADLOCK: "every unit waits for a token no instruction can push, or the fetcher "
                         "is blocked on a full queue (ERR_PC counts the instructions "
                         "dispatched)",
    AccelError.NO_END: "INSN_COUNT instructions ran without END",
    AccelError.TOKEN_OVERFLOW: f"more than {isa.TOKEN_MAX} tokens pushed and not yet popped in "
                               "one queue",
    AccelError.ABORTED: "the program was aborted (ACC_CTRL.ABORT)",
    AccelError.BAD_CONFIG: "INSN_BASE must be 16-byte aligned and INSN_COUNT > 0 (upload "
                           "programs with PcieDriver.accel_load_program)",
}


#: Errors whose ERR_PC does not name a failing instruction.
PROGRAM_ERRORS = (AccelError.DEADLOCK, AccelError.TOKEN_OVERFLOW, AccelError.NO_END,
                  AccelError.ABORTED, AccelError.BAD_CONFIG)
_PROGRAM_ERRORS = PROGRAM_ERRORS


def instruction_text(raw: bytes) -> str:
    """The disassembly of one 16-byte instruction image, or what is wrong with it (an illegal
    opcode is exactly what an error report may need to show: never an exception here)."""
    try:
        return str(isa.decode(bytes(raw)))
    except (isa.IsaError, ValueError) as e:
        return f"<{bytes(raw).hex()}: {e}>"


def describe_accel_status(status: int) -> str:
    """An ACC_STATUS word in words, for messages."""
    flags = [n for n in ("BUSY", "DONE", "ERROR") if status & _ACC_STATUS[n].mask]
    code = _ACC_STATUS["ERR_CODE"].get(status)
    name = AccelError(code).name if code in AccelError._value2member_map_ else f"code {code}"
    return f"{status:#x} ({'|'.join(flags) or 'idle'}, {name})"


# --- the accelerator's calls -------------------------------------------------------------------

class AccelControl:
    """The accelerator calls of PcieDriver (a mixin: the attributes below are the driver's)."""

    backend: CardBackend
    host: HostMemory
    mem_size: int
    timeout_s: float
    has_accel: bool
    _lock: threading.RLock
    _accel_cfg: AccelConfig | None
    _accel_prog: AccelProgram | None
    _accel_started: bool
    stats: DriverStats

    if TYPE_CHECKING:
        def _rd(self, offset: int) -> int: ...
        def _wr(self, offset: int, value: int) -> None: ...
        def _rd64(self, lo_name: str) -> int: ...
        def write_data(self, host: HostRef, size: int, card_addr: int) -> None: ...

    def accel_config(self) -> AccelConfig:
        """The accelerator's configuration from ACC_CFG_*; AccelUnavailable without one."""
        with self._lock:
            if self._accel_cfg is None:
                if not self.has_accel:
                    raise AccelUnavailable("the card has no accelerator (CAPS.ACCEL = 0); use a "
                                           "card built with one (ModelCard(accel=AccelConfig()))")
                version = self._rd(regs.offset("ACC_CFG_ISA"))
                if version != isa.ISA_VERSION:
                    raise AccelUnavailable(
                        f"the accelerator implements ISA version {version}, the driver "
                        f"version {isa.ISA_VERSION}; use a driver built from the card's "
                        "pyhost.spec")
                vals = {k: self._rd(regs.offset(f"ACC_CFG_{k.upper()}")) for k in
                        ("n", "inp_depth", "wgt_depth", "acc_depth", "queue_depth")}
                try:
                    self._accel_cfg = AccelConfig(**vals)
                except ValueError as e:
                    raise AccelUnavailable(f"the accelerator reports an impossible "
                                           f"configuration {vals}: {e}") from None
            return self._accel_cfg

    def accel_load_program(self, program: bytes | bytearray | memoryview | Sequence[Insn],
                           card_addr: int, *, check: bool = True) -> AccelProgram:
        """Upload `program` (Insn list or its 16-byte images) to card memory at `card_addr`.

        Everything is checked before the card is touched: the program is a non-empty whole
        number of instructions ending with END, `card_addr` is 16-byte aligned and the program
        fits card memory below 4 GiB (the accelerator's address space). With `check` (the
        default) every instruction must also pass `isa.check_static` and END may only come last;
        `check=False` uploads illegal instructions, for tests of the card's own checks.
        """
        if isinstance(program, bytes | bytearray | memoryview):
            raw = bytes(program)
        else:
            parts = []
            for i, insn in enumerate(program):
                try:
                    parts.append(isa.encode(insn))
                except (isa.IsaError, AttributeError) as e:
                    raise AccelProgramError(f"instruction {i} ({insn!r}) cannot be encoded: "
                                            f"{e}") from None
            raw = b"".join(parts)
        if not raw or len(raw) % isa.INSN_BYTES:
            raise AccelProgramError(f"a program is a non-empty multiple of {isa.INSN_BYTES} "
                                    f"bytes, got {len(raw)}")
        count = len(raw) // isa.INSN_BYTES
        if not isinstance(card_addr, Integral) or card_addr < 0 \
                or card_addr % isa.INSN_BYTES:
            raise AccelProgramError(f"program address {card_addr!r} is not a non-negative "
                                    f"multiple of {isa.INSN_BYTES} (INSN_BASE)")
        limit = min(self.mem_size, _ACCEL_SPACE)
        if card_addr + len(raw) > limit:
            raise CardRangeError(f"program [{card_addr:#x}, +{len(raw):#x}) does not fit card "
                                 f"memory the accelerator can address [0, {limit:#x})")
        listing = []
        for i in range(count):
            img = raw[isa.INSN_BYTES * i:isa.INSN_BYTES * (i + 1)]
            try:
                insn = isa.decode(img)
            except isa.IsaError as e:
                if check:
                    raise AccelProgramError(f"instruction {i}: {e}") from None
                listing.append(f"<{e}>")
                continue
            listing.append(instruction_text(img))
            if check:
                # only DW's checks depend on the array size (reading it costs MMIO reads)
                n = self.accel_config().n if insn.op == Opcode.DW else 1
                err = isa.check_static(insn, n)
                if err != AccelError.NONE:
                    raise AccelProgramError(f"instruction {i} ({insn}) is {err.name}: "
                                            f"{_ACCEL_HINTS[err]}")
                if insn.op == Opcode.END and i != count - 1:
                    raise AccelProgramError(f"END at instruction {i} of {count}: the "
                                            "instructions after it would never run")
        if not listing[-1].startswith("END"):
            raise AccelProgramError(f"the program does not end with END (last instruction: "
                                    f"{listing[-1]}); the accelerator would stop with NO_END")
        with self._lock:
            buf = self.host.alloc(len(raw))
            try:
                buf.write(raw)
                self.write_data(buf, len(raw), int(card_addr))
            finally:
                self.host.free(buf)
        return AccelProgram(int(card_addr), count, tuple(listing))

    def accel_bind(self, slots: Mapping[int, int]) -> None:
        """Set slot registers: {slot: card address}; other slots keep their values."""
        checked = []
        for slot, addr in slots.items():
            if not isinstance(slot, Integral) or isinstance(slot, bool) \
                    or not 0 <= slot < isa.NUM_SLOTS:
                raise AccelSlotError(f"slot {slot!r} does not exist; slots are 0.."
                                     f"{isa.NUM_SLOTS - 1}")
            if not isinstance(addr, Integral) or isinstance(addr, bool) \
                    or not 0 <= addr < _ACCEL_SPACE:
                raise AccelSlotError(f"slot {slot}: address {addr!r} is not a 32-bit card "
                                     "address")
            checked.append((int(slot), int(addr)))
        with self._lock:
            self.accel_config()
            for slot, addr in checked:
                self._wr(regs.offset(f"ACC_SLOT{slot}"), addr)

    def accel_start(self, prog: AccelProgram) -> None:
        """Start `prog` (INSN_BASE, INSN_COUNT, ACC_CTRL.START); stale accelerator interrupts are
        cleared first. AccelBusyError if a program still runs; AccelProgramError (before any
        register is written) if its address or count does not fit the 32-bit registers: the
        driver never truncates, which would run the program at the aliased address."""
        for what, v in (("INSN_BASE", prog.card_addr), ("INSN_COUNT", prog.count)):
            if isinstance(v, bool) or not isinstance(v, Integral) or not 0 <= v < 1 << 32:
                raise AccelProgramError(f"{what} {v!r} does not fit the 32-bit register; the "
                                        "accelerator addresses 4 GiB (load programs with "
                                        "accel_load_program)")
        with self._lock:
            self.accel_config()
            status = self._rd(regs.offset("ACC_STATUS"))
            if status & _ACC_STATUS["BUSY"].mask:
                raise AccelBusyError(f"the accelerator is still running (ACC_STATUS "
                                     f"{describe_accel_status(status)}); accel_wait for it or "
                                     "accel_abort it first")
            self._wr(regs.offset("IRQ_STATUS"), _IRQ_ACCEL_DONE | _IRQ_ACCEL_ERR)
            self._wr(regs.offset("ACC_INSN_BASE"), int(prog.card_addr))
            self._wr(regs.offset("ACC_INSN_COUNT"), int(prog.count))
            self._wr(regs.offset("ACC_CTRL"), _ACC_CTRL["START"].mask)
            self._accel_prog = prog
            self._accel_started = True
            self.stats.accel_runs += 1

    def accel_wait(self, timeout_s: float | None = None) -> AccelRunResult:
        """Wait for the program started last: its counters, or AccelRunError / AccelTimeout.

        Waits for the interrupt like the DMA calls (`backend.wait_irq`; None: the driver's
        timeout), reads IRQ_STATUS, ACC_STATUS, ACC_ERR_PC and the counters, then clears the
        accelerator's interrupt bits. On a timeout the program is aborted first.
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if not self._accel_started:
                status = self._rd(regs.offset("ACC_STATUS"))
                raise AccelIdleError(
                    f"accel_wait: no program was started since the last wait (ACC_STATUS "
                    f"{describe_accel_status(status)}); call accel_start (or accel_run) first")
            self._accel_started = False
            t0 = time.monotonic()
            if not self.backend.wait_irq(timeout):
                status = self._rd(regs.offset("ACC_STATUS"))
                aborted: list[bool] = []
                note = cleanup_note("aborting the program",
                                     lambda: aborted.append(self.accel_abort()))
                self.stats.timeouts += 1
                self.stats.accel_timeouts += 1
                counters: dict[str, int] = {}
                note += cleanup_note("reading the counters",
                                      lambda: counters.update(self.accel_counters()))
                what = ("the program has been aborted" if aborted and aborted[0] else
                        "the accelerator was not running (nothing to abort): the program ended "
                        "without raising its interrupt" if aborted else
                        "the program could not be aborted")
                raise AccelTimeout(
                    f"accelerator: no interrupt after {time.monotonic() - t0:.3g} s (timeout_s="
                    f"{timeout}), ACC_STATUS {describe_accel_status(status)}; {what}{note}. A "
                    "slow simulation needs a larger timeout; a program that never ends waits "
                    "for tokens in a loop it cannot leave", counters)
            irq = self._rd(regs.offset("IRQ_STATUS"))
            bits = irq & (_IRQ_ACCEL_DONE | _IRQ_ACCEL_ERR)
            if not bits:
                raise AccelProtocolError(
                    f"accelerator: the interrupt is up but IRQ_STATUS {irq:#x} has no ACCEL bit; "
                    "another user of the card left interrupts pending")
            status = self._rd(regs.offset("ACC_STATUS"))
            pc = self._rd(regs.offset("ACC_ERR_PC"))
            counters = self.accel_counters()
            self._wr(regs.offset("IRQ_STATUS"), bits)
            self.stats.interrupts += 1
            if status & _ACC_STATUS["ERROR"].mask:
                self.stats.errors += 1
                self.stats.accel_errors += 1
                value = _ACC_STATUS["ERR_CODE"].get(status)
                code: AccelError | int = AccelError(value) \
                    if value in AccelError._value2member_map_ else value
                # ERR_PC names the failing instruction, except for the errors of the whole
                # program, where it counts the instructions dispatched (or is 0).
                prog = self._accel_prog
                names_insn = code not in _PROGRAM_ERRORS and prog is not None \
                    and pc < min(prog.count, len(prog.listing))
                insn = prog.listing[pc] if names_insn and prog is not None else None
                if code in (AccelError.DEADLOCK, AccelError.TOKEN_OVERFLOW,
                            AccelError.NO_END):
                    where = f"after {pc} dispatched instructions (ERR_PC counts them; it names " \
                        "no instruction)"
                elif code in _PROGRAM_ERRORS:
                    where = f"(ERR_PC {pc})"
                else:
                    where = f"at instruction {pc}" + (f" ({insn})" if insn else "")
                name = code.name if isinstance(code, AccelError) else f"code {code}"
                raise AccelRunError(
                    f"accelerator stopped with {name} {where}: "
                    f"{_ACCEL_HINTS.get(code, 'unknown error code')}", code, pc, insn, counters)
            if (status & (_ACC_STATUS["BUSY"].mask | _ACC_STATUS["DONE"].mask)) \
                    != _ACC_STATUS["DONE"].mask or bits != _IRQ_ACCEL_DONE:
                raise AccelProtocolError(
                    f"accelerator: after the interrupt ACC_STATUS is "
                    f"{describe_accel_status(status)} and IRQ_STATUS {irq:#x}; expected DONE "
                    "and only the ACCEL_DONE interrupt")
            return AccelRunResult(counters)

    def accel_run(self, prog: AccelProgram, slots: Mapping[int, int] | None = None,
                  timeout_s: float | None = None) -> AccelRunResult:
        """accel_bind(slots) (if given), accel_start(prog), accel_wait(timeout_s)."""
        with self._lock:
            if slots:
                self.accel_bind(slots)
            self.accel_start(prog)
            return self.accel_wait(timeout_s)

    def accel_counters(self) -> dict[str, int]:
        """The accelerator's counters (regs.ACCEL_COUNTERS; they restart at START)."""
        with self._lock:
            return {c: self._rd64(f"ACC_{c.upper()}_LO") for c, _ in regs.ACCEL_COUNTERS}

    def accel_abort(self) -> bool:
        """ACC_CTRL.ABORT: stop a running program, wait until the accelerator is idle, clear
        its interrupt bits. True if a program was running (it then reads ABORTED)."""
        with self._lock:
            if not self.has_accel:
                raise AccelUnavailable("the card has no accelerator (CAPS.ACCEL = 0)")
            busy = bool(self._rd(regs.offset("ACC_STATUS")) & _ACC_STATUS["BUSY"].mask)
            self._wr(regs.offset("ACC_CTRL"), _ACC_CTRL["ABORT"].mask)
            self._accel_started = False
            deadline = time.monotonic() + self.timeout_s
            status = self._rd(regs.offset("ACC_STATUS"))
            while status & _ACC_STATUS["BUSY"].mask:
                if time.monotonic() > deadline:
                    raise AccelProtocolError(
                        f"the accelerator is still BUSY {self.timeout_s} s after ABORT "
                        f"(ACC_STATUS {describe_accel_status(status)}); it does not drain")
                status = self._rd(regs.offset("ACC_STATUS"))
            if busy and status & _ACC_STATUS["ERROR"].mask:
                # The stop raises ACCEL_ERR with (or a cycle after) BUSY falling.
                while not self._rd(regs.offset("IRQ_STATUS")) & _IRQ_ACCEL_ERR:
                    if time.monotonic() > deadline:
                        raise AccelProtocolError("the accelerator stopped after ABORT but "
                                                 "IRQ_STATUS never showed ACCEL_ERR")
            self._wr(regs.offset("IRQ_STATUS"), _IRQ_ACCEL_DONE | _IRQ_ACCEL_ERR)
            return busy

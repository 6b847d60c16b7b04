"""The driver under hostile arguments and misbehaving cards: register values are range-checked
(never truncated), errors on the error path do not hide the original, and every message says
what happened. Also the accelerator ABI's static scratchpad check against the functional model.
"""

from __future__ import annotations

import random
import time

import pytest

from pyhost.accel import abi
from pyhost.accel.control import instruction_text
from pyhost.driver import (
    AccelIdleError,
    AccelProgram,
    AccelProgramError,
    AccelRunError,
    AccelSlotError,
    AccelTimeout,
    CardRangeError,
    DmaTimeout,
    PcieDriver,
    RawDescriptor,
    RegisterValueError,
    TransferSizeError,
)
from pyhost.model_card import ModelCard, accel_status_word
from pyhost.spec import isa, regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError
from pyhost.spec.regs import Channel
from tb.accel import randprog

MiB = 1 << 20
CFG = AccelConfig(n=8, inp_depth=512, wgt_depth=64, acc_depth=256, queue_depth=4)


def make(card_cls: type[ModelCard] = ModelCard, **kw: object) -> tuple[ModelCard, PcieDriver]:
    card = card_cls(4 * MiB, host_size=8 * MiB, accel=CFG, **kw)  # type: ignore[arg-type]
    return card, PcieDriver(card, timeout_s=0.05)


class Recording(ModelCard):
    """Records every register write."""

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self.writes: list[tuple[int, int]] = []

    def mmio_write(self, offset: int, value: int) -> None:
        self.writes.append((offset, value))
        super().mmio_write(offset, value)


# --- register values ------------------------------------------------------------------------------

@pytest.mark.parametrize(("addr", "count", "words"), [
    ((1 << 32) + 0x100, 2, "INSN_BASE 4294967552 does not fit the 32-bit register"),
    (0x100, 1 << 32, "INSN_COUNT 4294967296 does not fit"),
    (-16, 2, "INSN_BASE -16"),
    (0x100, -1, "INSN_COUNT -1"),
    (True, 2, "INSN_BASE True"),
    (0x100, 2.0, "INSN_COUNT 2.0"),
])
def test_insn_base_and_count_are_never_truncated(addr: object, count: object,
                                                 words: str) -> None:
    """Today's bug: 2**32 + 0x100 was written as 0x100 and the program there ran."""
    card, drv = make(Recording)
    drv.accel_load_program([isa.end()], 0x100)
    card.writes.clear()
    with pytest.raises(AccelProgramError) as e:
        drv.accel_start(AccelProgram(addr, count))  # type: ignore[arg-type]
    assert words in str(e.value), str(e.value)
    assert card.writes == []                      # refused before any register write
    assert card.mmio_read(regs.offset("ACC_STATUS")) == accel_status_word()  # nothing ran


@pytest.mark.parametrize("value", [1 << 32, -1, True, 1.5, "5", None])
def test_every_register_write_is_range_checked(value: object) -> None:
    card, drv = make(Recording)
    card.writes.clear()
    with pytest.raises(RegisterValueError, match="is not a 32-bit value"):
        drv._wr(regs.offset("ACC_SLOT3"), value)  # type: ignore[arg-type]
    assert card.writes == []


@pytest.mark.parametrize(("slots", "words"), [
    ({16: 0}, "slot 16 does not exist"), ({-1: 0}, "slot -1"), ({True: 0}, "slot True"),
    ({3: 1 << 32}, "is not a 32-bit card address"), ({3: -64}, "address -64"),
    ({3: "0x40"}, "address '0x40'"),
])
def test_slot_bindings(slots: dict[object, object], words: str) -> None:
    card, drv = make(Recording)
    card.writes.clear()
    with pytest.raises(AccelSlotError, match=words):
        drv.accel_bind(slots)  # type: ignore[arg-type]
    assert card.writes == []


@pytest.mark.parametrize(("field", "value"), [("length", -1), ("length", 1 << 32),
                                              ("src", -8), ("dst", 1 << 64), ("magic", 1 << 16),
                                              ("next", -1), ("length", "8")])
def test_raw_descriptor_fields_are_checked(field: str, value: object) -> None:
    card, drv = make()
    buf = card.host.alloc(64)
    kw: dict[str, object] = {"length": 8, "src": buf.address, "dst": 0, field: value}
    with pytest.raises(ValueError, match=f"raw descriptor 0: {field} = "):
        drv.run_raw(Channel.H2C, [RawDescriptor(**kw)])  # type: ignore[arg-type]


@pytest.mark.parametrize(("call", "exc", "words"), [
    (lambda d, b: d.write_data(b, True, 0), TransferSizeError, "size True"),
    (lambda d, b: d.write_data(b, 1.5, 0), TransferSizeError, "size 1.5"),
    (lambda d, b: d.write_data(b, 0, 0), TransferSizeError, "size 0"),
    (lambda d, b: d.write_data(b, 64, -64), CardRangeError, "card destination"),
    (lambda d, b: d.write_data(b, 64, "0x40"), CardRangeError, "'0x40'"),
    (lambda d, b: d.write_data(b, 64, True), CardRangeError, "True"),
    (lambda d, b: d.read_data(4 * MiB - 32, 64, b), CardRangeError, "outside card memory"),
    (lambda d, b: d.copy_on_card(0, 64, 1 << 40), CardRangeError, "outside card memory"),
])
def test_transfer_arguments(call: object, exc: type[Exception], words: str) -> None:
    card, drv = make()
    buf = card.host.alloc(4096)
    with pytest.raises(exc) as e:
        call(drv, buf)  # type: ignore[operator]
    assert words in str(e.value), str(e.value)
    assert drv.stats.doorbells == 0


# --- messages that say what happened --------------------------------------------------------------

class RunawayCard(ModelCard):
    """A chain that never stops: no interrupt, COMPLETED counts on past the chain's end."""

    def wait_irq(self, timeout_s: float) -> bool:
        return False

    def mmio_read(self, offset: int) -> int:
        if offset == regs.channel_reg(Channel.H2C, "COMPLETED"):
            return 2666
        return super().mmio_read(offset)


def test_a_runaway_chain_is_not_2666_of_1_descriptors() -> None:
    card, drv = make(RunawayCard)
    with pytest.raises(DmaTimeout) as e:
        drv.write_data(card.host.alloc(64), 64, 0)
    msg = str(e.value)
    assert "2666 of 1" not in msg
    assert "COMPLETED reads 2666 for a chain of 1 descriptor" in msg and "no STOP" in msg
    assert (e.value.completed, e.value.descriptors) == (2666, 1)


def deadlock_program() -> list[isa.Insn]:
    return [isa.gemm(pop_prev=1, outer=0, inner=0), isa.end()]


def test_deadlock_names_no_instruction() -> None:
    """ERR_PC of a DEADLOCK counts dispatched instructions: it is not quoted as the failing one."""
    card, drv = make()
    prog = drv.accel_load_program(deadlock_program(), 0)
    with pytest.raises(AccelRunError) as e:
        drv.accel_run(prog)
    assert e.value.code == AccelError.DEADLOCK and not e.value.names_instruction
    msg = str(e.value)
    assert "dispatched instructions" in msg and "names no instruction" in msg
    assert "GEMM" not in msg and "END" not in msg and e.value.instruction is None


def test_an_illegal_opcode_is_reported_not_an_isa_error() -> None:
    """The listing of an uploaded illegal program, and the error quoting it, never raise."""
    card, drv = make()
    bad = b"\x0f" + bytes(15)
    prog = drv.accel_load_program(bad + isa.encode(isa.end()), 0, check=False)
    with pytest.raises(AccelRunError) as e:
        drv.accel_run(prog)
    assert e.value.code == AccelError.ILLEGAL_OPCODE and e.value.names_instruction
    assert "illegal opcode 15" in str(e.value) and e.value.pc == 0
    assert instruction_text(bad) == f"<{bad.hex()}: illegal opcode 15>"
    assert instruction_text(isa.encode(isa.end())) == "END"


def test_accel_wait_with_nothing_running_says_so() -> None:
    card, drv = make()
    t0 = time.monotonic()
    with pytest.raises(AccelIdleError, match="no program was started since the last wait"):
        drv.accel_wait(timeout_s=5)
    assert time.monotonic() - t0 < 1            # it did not wait for an interrupt
    prog = drv.accel_load_program([isa.end()], 0)
    drv.accel_run(prog)
    with pytest.raises(AccelIdleError):         # the run's interrupt was consumed
        drv.accel_wait()


class SilentCard(ModelCard):
    """Finishes the program but never raises the interrupt line."""

    def wait_irq(self, timeout_s: float) -> bool:
        return False


def test_a_timeout_of_an_idle_accelerator_is_not_called_an_abort() -> None:
    card, drv = make(SilentCard)
    # the upload would need the DMA interrupt: put the program in card memory directly
    card.card_memory[0x1000:0x1010] = list(isa.encode(isa.end()))
    drv.accel_start(AccelProgram(0x1000, 1))
    with pytest.raises(AccelTimeout) as e:
        drv.accel_wait(timeout_s=0.01)
    msg = str(e.value)
    assert "has been aborted" not in msg and "was not running (nothing to abort)" in msg


class StuckAbortCard(ModelCard):
    """Never raises an interrupt and never leaves BUSY, even on ABORT."""

    def wait_irq(self, timeout_s: float) -> bool:
        return False

    def _accel_ctrl(self, value: int) -> None:
        self._acc_status = accel_status_word(busy=True)


def test_a_failing_abort_does_not_hide_the_timeout() -> None:
    card, drv = make(StuckAbortCard)
    drv.accel_start(AccelProgram(0, 1))
    with pytest.raises(AccelTimeout) as e:
        drv.accel_wait(timeout_s=0.01)
    msg = str(e.value)
    assert "no interrupt after" in msg
    assert "aborting the program failed as well: AccelProtocolError" in msg and "BUSY" in msg
    assert card.mmio_read(regs.offset("ACC_STATUS")) & 1   # still stuck, and said so


# --- the ABI's static scratchpad check agrees with the model --------------------------------------

def test_static_scratchpad_check_matches_the_model() -> None:
    """On random programs with one SP_RANGE instruction the static rule flags exactly that one;
    on valid random programs none; and check_program accepts the valid ones."""
    rng = random.Random(13)
    for _ in range(25):
        rp = randprog.generate_error(rng, CFG, AccelError.SP_RANGE, 4 * MiB)
        flagged = [pc for pc, i in enumerate(rp.program)
                   if isinstance(i, isa.Insn) and not abi.sp_range_ok(i, CFG)]
        assert flagged[:1] == [rp.expect_pc], (flagged, rp.expect_pc)
        ok = randprog.generate(rng, CFG, mem_size=4 * MiB)
        assert all(abi.sp_range_ok(i, CFG) for i in ok.program if isinstance(i, isa.Insn))
        raw = b"".join(i if isinstance(i, bytes) else isa.encode(i) for i in ok.program)
        abi.check_program("random", raw, CFG, isa.NUM_SLOTS)
        small = AccelConfig(n=8, inp_depth=1, wgt_depth=1, acc_depth=1, queue_depth=4)
        if any(not abi.sp_range_ok(i, small) for i in ok.program if isinstance(i, isa.Insn)):
            with pytest.raises(abi.AbiError, match="SP_RANGE"):
                abi.check_program("random", raw, small, isa.NUM_SLOTS)

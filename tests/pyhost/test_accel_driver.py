"""PcieDriver's accelerator calls on ModelCard: upload, bind, run, counters, every error path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pyhost.accel.model import AccelModel
from pyhost.accel.timing import perf_estimate
from pyhost.driver import (
    AccelBusyError,
    AccelProgram,
    AccelProgramError,
    AccelProtocolError,
    AccelRunError,
    AccelSlotError,
    AccelTimeout,
    AccelUnavailable,
    CardRangeError,
    PcieDriver,
)
from pyhost.model_card import ModelCard, accel_status_word
from pyhost.spec import isa, regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AccelError, AluOp, Buffer, Insn

MiB = 1 << 20
CFG = AccelConfig(n=8, inp_depth=512, wgt_depth=64, acc_depth=256, queue_depth=4)
_IRQ = {f.name: f.mask for f in regs.IRQ_FIELDS}
_CTRL = {f.name: f.mask for f in regs.BY_NAME["ACC_CTRL"].fields}


def make(card_cls: type[ModelCard] = ModelCard, cfg: AccelConfig | None = CFG,
         **kw: object) -> tuple[ModelCard, PcieDriver]:
    card = card_cls(4 * MiB, host_size=8 * MiB, accel=cfg, **kw)  # type: ignore[arg-type]
    return card, PcieDriver(card)


def upload(drv: PcieDriver, data: bytes, card_addr: int) -> None:
    buf = drv.host.alloc(len(data))
    buf.write(data)
    drv.write_data(buf, len(data), card_addr)
    drv.host.free(buf)


def download(drv: PcieDriver, card_addr: int, n: int) -> bytes:
    buf = drv.host.alloc(n)
    drv.read_data(card_addr, n, buf)
    out = buf.read(0, n)
    drv.host.free(buf)
    return out


def gemm_program(m: int = 64, kb: int = 2) -> list[Insn]:
    """out(int8) = (X(m x 8kb) @ W(8kb x 8) + 8) >> 4, X in slot 1, W tiles in slot 2, out in
    slot 3; the loads of W and X overlap nothing else, the store waits for the compute."""
    prog = [isa.load(Buffer.WGT, slot=2, y_size=1, x_size=kb),
            isa.load(Buffer.INP, slot=1, y_size=m, x_size=kb, y_stride=kb, push_next=1)]
    for b in range(kb):
        prog.append(isa.gemm(reset=int(b == 0), inp_base=b, wgt_base=b, outer=1, inner=m,
                             acc_si=1, inp_si=kb, pop_prev=int(b == 0)))
    prog += [isa.alu(AluOp.SHR, 4, outer=1, inner=m, dst_si=1, push_next=1),
             isa.store(Buffer.ACC8, slot=3, y_size=1, x_size=m, y_stride=m, pop_prev=1),
             isa.end()]
    return prog


def test_config_and_caps() -> None:
    """CAPS.ACCEL and ACC_CFG_* give the card's AccelConfig; without an accelerator every
    accelerator call says so."""
    card, drv = make()
    assert drv.has_accel and drv.accel_config() == CFG
    assert card.mmio_read(regs.offset("ACC_CFG_ISA")) == isa.ISA_VERSION
    _, plain = make(cfg=None)
    assert not plain.has_accel
    for call in (plain.accel_config, lambda: plain.accel_bind({0: 0}), plain.accel_abort,
                 lambda: plain.accel_start(AccelProgram(0, 1))):
        with pytest.raises(AccelUnavailable, match="no accelerator"):
            call()


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_load_run_counters(seed: int | None) -> None:
    """A program uploaded at a 16- (not 64-) byte aligned address runs on data placed by DMA and
    bound through slots; the result is the numpy one, the counters are the model's (exact
    ones checked by hand), the interrupt is cleared and the stats count the run."""
    card, drv = make(accel_schedule_seed=seed)
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (64, 16), dtype=np.int8)
    w = rng.integers(-128, 128, (16, 8), dtype=np.int8)
    upload(drv, x.tobytes(), 0x10000)
    upload(drv, w.tobytes(), 0x20040)
    prog_insns = gemm_program()
    prog = drv.accel_load_program(prog_insns, 0x30010)
    assert (prog.card_addr, prog.count) == (0x30010, len(prog_insns))
    drv.stats.reset()
    res = drv.accel_run(prog, {1: 0x10000, 2: 0x20040, 3: 0x40000})
    s = drv.stats.copy()
    assert (s.accel_runs, s.accel_errors, s.interrupts, s.doorbells) == (1, 0, 1, 0)
    got = np.frombuffer(download(drv, 0x40000, 64 * 8), np.int8).reshape(64, 8)
    want = ((x.astype(np.int64) @ w.astype(np.int64) + 8) >> 4).astype(np.int8)
    assert np.array_equal(got, want)
    c = res.counters
    assert (c["insns"], c["macs"]) == (len(prog_insns), 2 * 64 * 64)
    assert (c["bytes_loaded"], c["bytes_stored"]) == (128 + 64 * 16, 64 * 8)
    assert res.cycles == c["cycles"] > 0 and drv.accel_counters() == c
    # the exact counters are the functional model's for the same program and memory; the
    # timing ones the card's performance model (pyhost/card_timing.py)
    m = AccelModel(CFG)
    mem = bytearray(card.card_memory[:MiB].tobytes())
    slots = [0, 0x10000, 0x20040, 0x40000] + [0] * 12
    est = perf_estimate(prog_insns, CFG, insn_base=0x30010).counters()
    assert m.execute(prog_insns, mem, slots).counters | est == c
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    assert card.mmio_read(regs.offset("ACC_STATUS")) == accel_status_word(done=True)
    np.testing.assert_array_equal(card.accel.wgt[0:2].reshape(16, 8), w)   # backdoor


def failing_programs() -> list[tuple[str, list[Insn | bytes], int | None, AccelError, int]]:
    """(case, program, count override, expected code, expected pc); slot 1 is bound to 1 MiB."""
    nop = isa.load(Buffer.INP, y_size=0)
    end = isa.end()
    return [
        ("illegal opcode", [nop, (9).to_bytes(16, "little"), end], None,
         AccelError.ILLEGAL_OPCODE, 1),
        ("illegal field", [nop, nop, isa.store(Buffer.INP), end], None,
         AccelError.ILLEGAL_FIELD, 2),
        ("sp range", [nop, isa.gemm(acc_base=CFG.acc_depth, outer=1, inner=1), end], None,
         AccelError.SP_RANGE, 1),
        ("misaligned", [isa.load(Buffer.ACC, slot=1, offset=8, y_size=1, x_size=1), end], None,
         AccelError.MISALIGNED, 0),
        ("load bus", [nop, nop, nop, isa.load(Buffer.WGT, slot=1, offset=3 * MiB, y_size=1,
                                              x_size=1), end], None, AccelError.LOAD_BUS, 3),
        ("store bus", [isa.store(Buffer.ACC, slot=1, offset=3 * MiB - 32, y_size=1, x_size=2),
                       end], None, AccelError.STORE_BUS, 0),
        ("deadlock", [nop, isa.gemm(pop_prev=1), end], None, AccelError.DEADLOCK, 3),
        ("no end", [nop, nop, nop, end], 3, AccelError.NO_END, 3),
        ("token overflow", [isa.load(Buffer.INP, push_next=1)] * 300 + [end], None,
         AccelError.TOKEN_OVERFLOW, -1),
    ]


@pytest.mark.parametrize("case", failing_programs(), ids=lambda c: c[0])
def test_errors_surface_as_accel_run_error(case) -> None:
    """Each AccelError the card reports is an AccelRunError with its code, name, pc and the
    instruction's text; the interrupt is cleared and the next program runs."""
    name, insns, count, code, pc = case
    card, drv = make()
    raw = b"".join(i if isinstance(i, bytes) else isa.encode(i) for i in insns)
    prog = drv.accel_load_program(raw, 0x1000, check=False)
    if count is not None:
        prog = dataclasses.replace(prog, count=count)
    with pytest.raises(AccelRunError) as info:
        drv.accel_run(prog, {1: MiB})
    e = info.value
    assert (e.code, e.name) == (code, code.name), str(e)
    if pc >= 0:
        assert e.pc == pc, str(e)
    else:     # TOKEN_OVERFLOW: instructions dispatched when it happened
        assert isa.TOKEN_MAX < e.pc <= len(insns)
    assert code.name in str(e) and str(e.pc) in str(e)
    if code in (AccelError.DEADLOCK, AccelError.TOKEN_OVERFLOW, AccelError.NO_END):
        assert e.instruction is None, "ERR_PC of a whole-program error names no instruction"
    else:
        assert e.instruction == prog.listing[e.pc] and e.instruction in str(e)
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    assert drv.stats.accel_errors == 1
    ok = drv.accel_load_program([isa.end()], 0x8000)
    assert drv.accel_run(ok).counters["insns"] == 1


def test_fetch_bus_error() -> None:
    """A program reaching past card memory: FETCH_BUS at the first instruction outside."""
    card, drv = make()
    top = card.mem_size - 32
    upload(drv, isa.encode_program([isa.load(Buffer.INP, y_size=0)] * 2), top)
    with pytest.raises(AccelRunError) as info:
        drv.accel_run(AccelProgram(top, 5))
    assert (info.value.code, info.value.pc) == (AccelError.FETCH_BUS, 2)
    assert info.value.instruction is None, "no listing: the driver did not upload it"
    prog = drv.accel_load_program([isa.load(Buffer.INP, y_size=0), isa.end()], top)
    assert drv.accel_run(prog).counters["insns"] == 2


@pytest.mark.parametrize(("addr", "count"), [(0x1008, 2), (0x1004, 2), (0x1000, 0)])
def test_bad_config(addr: int, count: int) -> None:
    """INSN_BASE not 16-byte aligned or INSN_COUNT 0: BAD_CONFIG at pc 0, nothing runs."""
    card, drv = make()
    with pytest.raises(AccelRunError) as info:
        drv.accel_run(AccelProgram(addr, count))
    assert (info.value.code, info.value.pc) == (AccelError.BAD_CONFIG, 0)
    assert info.value.counters["insns"] == 0
    assert card.mmio_read(regs.offset("ACC_STATUS")) == accel_status_word(
        error=True, code=AccelError.BAD_CONFIG)


@pytest.mark.parametrize("slots", [{16: 0}, {-1: 0}, {True: 0}, {"1": 0}, {0: 1 << 32},
                                   {0: -4}, {3: 0x100, 4: 1.5}])
def test_invalid_slot(slots: dict) -> None:
    """Slot numbers outside 0..15 and addresses that are not 32-bit: AccelSlotError, and no
    slot register is written (the valid entries of the mapping neither)."""
    card, drv = make()
    before = drv.stats.mmio_writes
    with pytest.raises(AccelSlotError):
        drv.accel_bind(slots)
    assert drv.stats.mmio_writes == before
    assert all(card.mmio_read(regs.offset(f"ACC_SLOT{i}")) == 0 for i in range(16))
    drv.accel_bind({15: 0xFFFF_FFF0, 0: 64})
    assert card.mmio_read(regs.offset("ACC_SLOT15")) == 0xFFFF_FFF0
    assert card.mmio_read(regs.offset("ACC_SLOT0")) == 64


@pytest.mark.parametrize(("program", "addr", "exc", "match"), [
    ([isa.load(Buffer.INP, y_size=0)], 0x1000, AccelProgramError, "does not end with END"),
    (isa.encode(isa.gemm()), 0x1000, AccelProgramError, "does not end with END"),
    ([], 0x1000, AccelProgramError, "non-empty"),
    (b"\0" * 24, 0x1000, AccelProgramError, "multiple of 16"),
    ([isa.end()], 0x1008, AccelProgramError, "multiple of 16"),
    ([isa.end()], -16, AccelProgramError, "multiple of 16"),
    ([isa.load(Buffer.INP, x_size=1 << 12), isa.end()], 0, AccelProgramError, "encoded"),
    ([isa.store(Buffer.WGT), isa.end()], 0, AccelProgramError, "ILLEGAL_FIELD"),
    (bytes(16) + isa.encode(isa.end()), 0, AccelProgramError, "illegal opcode"),
    ([isa.end(), isa.gemm(), isa.end()], 0, AccelProgramError, "END at instruction 0"),
    ([isa.gemm(), isa.end()], 4 * MiB - 16, CardRangeError, "does not fit"),
])
def test_program_rejected_before_touching_the_card(program, addr: int, exc: type,
                                                   match: str) -> None:
    """Programs the driver refuses raise before any MMIO or DMA: not END-terminated, empty,
    ragged, misaligned, unencodable, illegal (with check), END in the middle, out of memory."""
    card, drv = make()
    snap = drv.stats.copy()
    with pytest.raises(exc, match=match):
        drv.accel_load_program(program, addr)
    assert drv.stats == snap
    assert not card.card_memory[:0x2000].any() and not card.card_memory[-64:].any()
    drv.close()
    assert card.host.allocated == []


class HungAccelCard(ModelCard):
    """An accelerator that never finishes: START leaves it BUSY until ABORT stops it."""

    def _accel_ctrl(self, value: int) -> None:
        busy = self._acc_status & 1
        if value & _CTRL["START"] and not busy:
            self._acc_counters = dict.fromkeys(self._acc_counters, 0)
            self._acc_counters["cycles"] = 12345
            self._acc_status = accel_status_word(busy=True)
        elif value & _CTRL["ABORT"] and busy:
            self._accel_stop(AccelError.ABORTED, 2)


def test_timeout_aborts_and_recovers() -> None:
    """No interrupt: AccelTimeout after aborting the program (ACC_STATUS reads ABORTED, no
    interrupt left pending); a START while running is refused; abort of an idle accelerator
    does nothing."""
    card, drv = make(HungAccelCard)
    prog = drv.accel_load_program([isa.end()], 0)
    drv.accel_start(prog)
    with pytest.raises(AccelBusyError, match="still running"):
        drv.accel_start(prog)
    with pytest.raises(AccelTimeout, match="aborted") as info:
        drv.accel_wait(timeout_s=0.01)
    assert info.value.counters["cycles"] == 12345
    assert card.mmio_read(regs.offset("ACC_STATUS")) == accel_status_word(
        error=True, code=AccelError.ABORTED)
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    assert drv.stats.accel_timeouts == 1
    assert drv.accel_abort() is False
    # A driver starting on a card with a program running aborts it.
    drv.accel_start(prog)
    drv2 = PcieDriver(card)
    assert not card.mmio_read(regs.offset("ACC_STATUS")) & 1
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    drv2.close()


def test_abort_on_the_model_card_is_harmless() -> None:
    """On ModelCard a program is over when START returns: ABORT finds it idle, changes nothing."""
    card, drv = make()
    prog = drv.accel_load_program([isa.end()], 0)
    drv.accel_run(prog)
    assert drv.accel_abort() is False
    assert card.mmio_read(regs.offset("ACC_STATUS")) == accel_status_word(done=True)


class NoDoneCard(ModelCard):
    """Raises ACCEL_DONE but leaves ACC_STATUS without DONE."""

    def _accel_stop(self, code: AccelError, pc: int) -> None:
        super()._accel_stop(code, pc)
        self._acc_status = 0


def test_protocol_error() -> None:
    """An interrupt with a status that is neither DONE nor ERROR is AccelProtocolError."""
    _, drv = make(NoDoneCard)
    with pytest.raises(AccelProtocolError, match="expected DONE"):
        drv.accel_run(drv.accel_load_program([isa.end()], 0))


def test_counters_are_64_bit() -> None:
    """accel_counters joins the LO/HI pairs."""
    card, drv = make()
    card._acc_counters["macs"] = (7 << 32) | 5
    card._acc_counters["cycles"] = 1 << 40
    c = drv.accel_counters()
    assert (c["macs"], c["cycles"]) == ((7 << 32) | 5, 1 << 40)
    assert list(c) == [n for n, _ in regs.ACCEL_COUNTERS]


def test_listing_and_raw_upload() -> None:
    """accel_load_program takes bytes too; the returned program knows its disassembly."""
    _, drv = make()
    insns = gemm_program(m=4, kb=1)
    prog = drv.accel_load_program(isa.encode_program(insns), 0x100)
    assert prog.listing == tuple(str(i) for i in insns) and prog.nbytes == 16 * len(insns)
    assert isa.decode_program(download(drv, 0x100, prog.nbytes)) == insns


def test_dw_checked_against_the_cards_array_size() -> None:
    """DW's static check depends on N, which the driver reads from ACC_CFG_N: 8 taps are legal on
    the default N = 8 card and refused (ILLEGAL_FIELD, naming the rule) on an N = 4 card; a DW
    whose taps leave the banks' rotation is refused on both; the card is not written."""
    dw8 = isa.dw(outer=1, inner=1, taps=8, tap_w=3, tap_pitch=11)
    off_rotation = isa.dw(outer=1, inner=1, taps=4, tap_w=3, tap_pitch=12)
    card, drv = make()
    drv.accel_load_program([dw8, isa.end()], 0x1000)
    with pytest.raises(AccelProgramError, match="ILLEGAL_FIELD.*banks' rotation"):
        drv.accel_load_program([off_rotation, isa.end()], 0x2000)
    drv.close()
    small = ModelCard(4 * MiB, accel=AccelConfig(n=4))
    drv = PcieDriver(small)
    with pytest.raises(AccelProgramError, match="ILLEGAL_FIELD.*taps 0 or above N"):
        drv.accel_load_program([dw8, isa.end()], 0x1000)
    assert not small.card_memory[:0x2000].any()
    drv.close()

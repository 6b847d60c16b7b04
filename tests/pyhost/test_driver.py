"""PcieDriver on ModelCard: the shared driver program, plus driver-only behaviour (timeouts,
write-back checks, stats, one doorbell per batch, hazards of a pipelined engine) and proof that
the program's checks fail on a broken card."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.backend import HostRangeError
from pyhost.driver import (
    DESC_DTYPE,
    CardNotFound,
    CardVersionError,
    DmaProtocolError,
    DmaTimeout,
    DmaTransferError,
    PcieDriver,
    Piece,
    RawDescriptor,
    RequestLimitError,
    plan_chains,
)
from pyhost.model_card import ModelCard, irq_done_bit, status_word
from pyhost.spec import regs
from pyhost.spec.regs import Channel, DmaError
from tb.card_top import driver_program as program

MiB = 1 << 20
H2C, C2H, C2C = Channel.H2C, Channel.C2H, Channel.C2C


def make(card_cls: type[ModelCard] = ModelCard, mem: int = 32 * MiB,
         **kw: object) -> tuple[ModelCard, PcieDriver]:
    card = card_cls(mem, host_size=32 * MiB)
    return card, PcieDriver(card, **kw)  # type: ignore[arg-type]


# --- the shared program -------------------------------------------------------------------------

@pytest.mark.parametrize("reduced", [False, True], ids=["full", "reduced"])
@pytest.mark.parametrize("check", program.ALL_CHECKS, ids=lambda c: c.name)
def test_program(check: program.Check, reduced: bool) -> None:
    """Each check of tb/card_top/driver_program.py passes on ModelCard, full and reduced."""
    card, drv = make()
    check.fn(drv, reduced=reduced)
    drv.close()
    assert card.host.allocated == [], "a check or the driver leaked host memory"


def test_program_in_sequence_elsewhere_with_small_chunks_and_pool() -> None:
    """All checks on one driver (they leave the card clean for the next), away from card 0,
    with 4 KiB descriptors and a 64-descriptor pool (so the 256-chains take several)."""
    card, drv = make(mem=64 * MiB, chunk_bytes=4096, pool_descriptors=64)
    names = program.run_all(drv, reduced=True, card_base=40 * MiB)
    assert names == [c.name for c in program.ALL_CHECKS]
    assert drv.stats.timeouts == 1 and drv.stats.errors > 10


# --- the checks can fail ------------------------------------------------------------------------

class OverrunCard(ModelCard):
    """Writes one byte past the end of every H2C destination."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        e = super()._move(ch, src, dst, n)
        if ch == H2C and e == DmaError.NONE and dst + n < self.mem_size:
            self.card_memory[dst + n] ^= 0xFF
        return e


class UnderrunCard(ModelCard):
    """Writes one byte before the start of every H2C destination."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        e = super()._move(ch, src, dst, n)
        if ch == H2C and e == DmaError.NONE and dst > 0:
            self.card_memory[dst - 1] ^= 0xFF
        return e


class OverrunC2HCard(ModelCard):
    """Writes one byte past the end of every C2H destination in host memory."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        e = super()._move(ch, src, dst, n)
        if ch == C2H and e == DmaError.NONE:
            self.host.write(dst + n, bytes([self.host.read(dst + n, 1)[0] ^ 0xFF]))
        return e


class StrayCopyCard(ModelCard):
    """Card-to-card copies of at least a page also flip a byte 12 KiB past the destination's
    end, outside the region read back after each copy."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        e = super()._move(ch, src, dst, n)
        if ch == C2C and e == DmaError.NONE and n >= 4096 and dst + n + 12288 < self.mem_size:
            self.card_memory[dst + n + 12288] ^= 0xFF
        return e


class ShortCopyCard(ModelCard):
    """Card-to-card copies leave their last byte alone."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        if ch == C2C and n > 1:
            return super()._move(ch, src, dst, n - 1)
        return super()._move(ch, src, dst, n)


class ShortC2HCard(ModelCard):
    """Drops the last byte of C2H transfers that end on a 4 KiB host boundary."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        if ch == C2H and (dst + n) % 4096 == 0 and n > 1:
            keep = self.host.read(dst + n - 1, 1)
            e = super()._move(ch, src, dst, n)
            self.host.write(dst + n - 1, keep)
            return e
        return super()._move(ch, src, dst, n)


class SwappedCodeCard(ModelCard):
    """Reports card-side destination errors as source errors."""

    def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
        super()._stop(ch, DmaError.SRC_READ if code == DmaError.DST_WRITE else code, done_irq)


class CountsFailedCard(ModelCard):
    """Counts the failing descriptor in DESCS."""

    def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
        if code not in (DmaError.NONE, DmaError.BAD_CONFIG, DmaError.STATUS_WRITE):
            self._ch[ch].descs += 1
        super()._stop(ch, code, done_irq)


class PipelinedCard(ModelCard):
    """The most pipelined engine the contract allows: a C2C chain reads every source before it
    writes any destination (so a descriptor reading what an earlier one writes sees old data)."""

    def _move(self, ch: Channel, src: int, dst: int, n: int) -> DmaError:
        if ch != C2C or not (self._card_ok(src, n) and self._card_ok(dst, n)):
            return super()._move(ch, src, dst, n)
        self._pending.append((dst, self.card_memory[src:src + n].copy()))
        return DmaError.NONE

    def _run_chain(self, ch: Channel) -> None:
        self._pending: list[tuple[int, np.ndarray]] = []
        super()._run_chain(ch)

    def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
        for dst, data in getattr(self, "_pending", []):
            self.card_memory[dst:dst + data.size] = data
        self._pending = []
        super()._stop(ch, code, done_irq)


class NaiveDriver(PcieDriver):
    """A driver that ignores the pipelining hazard (for the test that it matters)."""

    def _plan(self, ch: Channel, pieces: Sequence[Piece]) -> Iterator[tuple[int, int]]:
        return plan_chains(Channel.H2C, pieces, self.pool_descriptors)   # no C2C hazard split


@pytest.mark.parametrize("card_cls,check", [
    (OverrunCard, program.check_alignment),
    (UnderrunCard, program.check_alignment),
    (OverrunC2HCard, program.check_alignment),
    (StrayCopyCard, program.check_copy_on_card),
    (ShortCopyCard, program.check_copy_on_card),
    (ShortC2HCard, program.check_alignment),
    (SwappedCodeCard, program.check_errors),
    (CountsFailedCard, program.check_errors),
])
def test_checks_catch_broken_cards(card_cls: type[ModelCard], check: object) -> None:
    """The program fails on cards that are wrong in one small way."""
    _, drv = make(card_cls)
    with pytest.raises(AssertionError):
        check(drv, reduced=True)  # type: ignore[operator]


def test_pipelining_hazard_matters() -> None:
    """On the pipelined card, dependent copies give wrong data unless the driver splits them
    (which the program checks)."""
    card, drv = make(PipelinedCard)
    program.check_batched_calls(drv, reduced=True)
    program.check_copy_on_card(drv, reduced=True)
    card2 = PipelinedCard(32 * MiB, host_size=32 * MiB)
    naive = NaiveDriver(card2)
    with pytest.raises(AssertionError):
        program.check_batched_calls(naive, reduced=True)


# --- driver behaviour ---------------------------------------------------------------------------

class DeafCard(ModelCard):
    """An interrupt line that never rises while `deaf`."""

    deaf = True

    def wait_irq(self, timeout_s: float) -> bool:
        return False if self.deaf else super().wait_irq(timeout_s)


def test_timeout_names_channel_and_recovers() -> None:
    """No interrupt: DmaTimeout naming the channel and the pending work; the next call works."""
    card, drv = make(DeafCard, timeout_s=0.01)
    buf = card.host.alloc(8192)
    with pytest.raises(DmaTimeout) as ei:
        drv.read_data(0, 5000, buf)
    e = ei.value
    assert e.channel == C2H and (e.descriptors, e.completed) == (1, 1)
    assert "C2H" in str(e) and "1 of 1 descriptors (5000 bytes)" in str(e)
    assert "timeout_s=0.01" in str(e)
    assert drv.stats.timeouts == 1
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    card.deaf = False
    buf.view()[:] = 9
    drv.write_data(buf, 8192, 0)
    drv.read_data(0, 8192, buf.address)
    assert (buf.view() == 9).all()


def test_writeback_must_agree() -> None:
    """A write-back that disagrees with the registers (or is missing) is a protocol error."""
    class LyingCard(ModelCard):
        mode = "count"

        def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
            wb = self._reg64(f"{ch.name}_WB_LO")
            if self.mode == "none":
                self._rw[regs.channel_reg(ch, "WB_LO")] = 0
                self._rw[regs.channel_reg(ch, "WB_HI")] = 0
            super()._stop(ch, code, done_irq)
            if self.mode == "count":
                self.host.write(wb, struct.pack("<I", self._ch[ch].completed + 1))

    card, drv = make(LyingCard)
    buf = card.host.alloc(4096)
    with pytest.raises(DmaProtocolError, match="write-back .* completed=2"):
        drv.write_data(buf, 100, 0)
    card.mode = "none"
    with pytest.raises(DmaProtocolError, match="completed=0, status 0x0"):
        drv.write_data(buf, 100, 0)
    card.mode = "ok"
    drv.write_data(buf, 100, 0)


def test_completed_and_irq_must_agree() -> None:
    """COMPLETED short of the chain, or an interrupt of another channel, is a protocol error."""
    class ShortCard(ModelCard):
        def mmio_read(self, offset: int) -> int:
            v = super().mmio_read(offset)
            return v - 1 if offset == regs.channel_reg(H2C, "COMPLETED") else v

    card, drv = make(ShortCard)
    with pytest.raises(DmaProtocolError, match="COMPLETED 0 for 1 descriptors"):
        drv.write_data(card.host.alloc(64), 64, 0)

    class CrossedCard(ModelCard):
        def _stop(self, ch: Channel, code: DmaError, done_irq: bool = False) -> None:
            super()._stop(ch, code, done_irq)
            self._irq_status = irq_done_bit(C2C)

    card, drv = make(CrossedCard)
    with pytest.raises(DmaProtocolError, match="no H2C bit"):
        drv.write_data(card.host.alloc(64), 64, 0)


def test_card_identity() -> None:
    """A wrong CARD_ID or major version is refused with a clear error; MEM_SIZE comes from the
    card."""
    class Other(ModelCard):
        id_value, version = 0x1234_5678, regs.VERSION

        def mmio_read(self, offset: int) -> int:
            if offset == regs.offset("CARD_ID"):
                return self.id_value
            if offset == regs.offset("VERSION"):
                return self.version
            return super().mmio_read(offset)

    card = Other(1 * MiB, host_size=4 * MiB)
    with pytest.raises(CardNotFound, match="0x12345678"):
        PcieDriver(card)
    card.id_value = regs.CARD_ID
    card.version = (regs.VERSION_MAJOR + 1) << 16
    with pytest.raises(CardVersionError, match="version 2.0"):
        PcieDriver(card)
    card.version = regs.VERSION | 7       # a newer minor is fine
    drv = PcieDriver(card)
    assert drv.mem_size == 1 * MiB
    assert ModelCard(0x1_2345_6000, host_size=4 * MiB).mmio_read(regs.offset("MEM_SIZE_HI")) == 1
    drv2 = PcieDriver(ModelCard(0x1_2345_6000, host_size=4 * MiB))
    assert drv2.mem_size == 0x1_2345_6000


def test_init_resets_a_busy_card() -> None:
    """A driver starting on a card left with a hung chain and stale interrupts cleans up."""
    card = ModelCard(4 * MiB, host_size=4 * MiB)
    d = card.host.alloc(4096)
    card.host.write(d.address, regs.encode_descriptor(8, 0, d.address + 64, nxt=d.address))
    card.mmio_write(regs.channel_reg(C2H, "DESC_LO"), d.address & 0xFFFF_FFFF)
    card.mmio_write(regs.channel_reg(C2H, "DESC_HI"), d.address >> 32)
    card.mmio_write(regs.channel_reg(C2H, "CTRL"), 1)
    assert card.mmio_read(regs.channel_reg(C2H, "STATUS")) & 1
    drv = PcieDriver(card)
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
    drv.read_data(0, 16, card.host.alloc(16))


def test_stats_and_mmio_per_call() -> None:
    """Exact counts: a 3.5-chunk write is 4 descriptors, 1 doorbell, 1 interrupt, 6 MMIO writes
    (DESC, WB, RUN, IRQ clear) and 3 reads (IRQ_STATUS, STATUS, COMPLETED)."""
    card, drv = make(chunk_bytes=MiB)
    buf = card.host.alloc(4 * MiB)
    drv.stats.reset()
    drv.write_data(buf, 3 * MiB + MiB // 2, 123)
    s = drv.stats
    assert (s.calls, s.descriptors, s.doorbells, s.interrupts) == (1, 4, 1, 1)
    assert (s.bytes_h2c, s.bytes_c2h, s.bytes_c2c) == (3 * MiB + MiB // 2, 0, 0)
    assert (s.mmio_writes, s.mmio_reads) == (6, 3)
    snap = s.copy()
    drv.read_data(123, 10, buf)
    assert snap.calls == 1 and drv.stats.calls == 2 and drv.stats.bytes(C2H) == 10


def test_descriptor_image_matches_spec() -> None:
    """The driver's vectorised descriptors are byte for byte what the spec's encoder makes."""
    card, drv = make(chunk_bytes=4096)
    buf = card.host.alloc(3 * 4096)
    drv.write_data(buf, 4096 + 5, 77)
    pool = drv.descriptor_pool(H2C)
    assert DESC_DTYPE.itemsize == regs.DESC_SIZE
    assert pool.read(0, 32) == regs.encode_descriptor(4096, buf.address, 77,
                                                      nxt=pool.address + 32)
    assert pool.read(32, 32) == regs.encode_descriptor(5, buf.address + 4096, 77 + 4096, nxt=0,
                                                       stop=True, completed=True, eop=True)


class SpyCard(ModelCard):
    """Counts RUN / RESET writes and interrupt waits, independently of the driver's stats."""

    runs = 0
    resets = 0
    waits = 0

    def mmio_write(self, offset: int, value: int) -> None:
        if any(offset == regs.channel_reg(ch, "CTRL") for ch in Channel):
            self.runs += value == 1
            self.resets += value == 2
        super().mmio_write(offset, value)

    def wait_irq(self, timeout_s: float) -> bool:
        self.waits += 1
        return super().wait_irq(timeout_s)


@pytest.mark.parametrize("pool,chains", [(4096, 1), (100, 1), (99, 2), (32, 4)])
def test_batch_is_one_doorbell(pool: int, chains: int) -> None:
    """100 transfers in a batch: one RUN and one interrupt wait (more only if the pool is
    smaller than the batch); data lands in every destination."""
    card, drv = make(SpyCard, pool_descriptors=pool)
    buf = card.host.alloc(100 * 64)
    buf.view()[:] = np.arange(100 * 64) % 256
    for call, args in ((drv.write_batch, [(buf.address + 64 * i, 64, 4096 * i)
                                          for i in range(100)]),
                       (drv.copy_batch, [(4096 * i, 64, MiB + 64 * i) for i in range(100)])):
        card.runs = card.waits = 0
        call(args)
        assert (card.runs, card.waits) == (chains, chains)
    out = card.host.alloc(100 * 64)
    drv.read_data(MiB, 100 * 64, out)
    assert (out.view() == buf.view()).all()


def test_error_names_descriptor_across_chains() -> None:
    """With a 4-descriptor pool, a failure in transfer 6 is descriptor 6 of the call; transfers
    before it have landed."""
    card, drv = make(pool_descriptors=4)
    buf = card.host.alloc(10 * 100)
    buf.view()[:] = 0x3C
    card.inject_host_error(buf.address + 650, buf.address + 651)
    with pytest.raises(DmaTransferError) as ei:
        drv.write_batch([(buf.address + 100 * i, 100, 1000 * i) for i in range(10)])
    e = ei.value
    assert (e.channel, e.descriptor, e.code, e.transfer) == (H2C, 6, DmaError.SRC_READ, 6)
    assert "H2C DMA failed at descriptor 6 (transfer 6:" in str(e) and "SRC_READ" in str(e)
    assert drv.stats.doorbells == 2 and drv.stats.errors == 1
    for i in range(6):
        assert (card.card_memory[1000 * i:1000 * i + 100] == 0x3C).all()
    assert (card.card_memory[6000:6100] == 0).all()


def test_error_resets_the_channel() -> None:
    """After a DMA error the driver RESETs the channel (once) and clears its interrupt bits;
    the channel's last status is dropped."""
    card, drv = make(SpyCard)
    card.resets = 0
    with pytest.raises(DmaTransferError):
        drv.run_raw(C2C, [RawDescriptor(64, 0, card.mem_size - 32)])
    assert card.resets == 1
    assert card.mmio_read(regs.channel_reg(C2C, "STATUS")) == 0
    assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0


class SlowAbortCard(ModelCard):
    """An abort that takes `drain` STATUS reads to finish, like an engine draining reads."""

    drain = 3
    _pending_abort: Channel | None = None

    def _reset_channel(self, ch: Channel) -> None:
        if self._ch[ch].busy and self.drain:
            self._pending_abort, self._left = ch, self.drain
        else:
            super()._reset_channel(ch)

    def mmio_read(self, offset: int) -> int:
        ch = self._pending_abort
        if ch is not None and offset == regs.channel_reg(ch, "STATUS"):
            self._left -= 1
            if self._left < 0:
                self._pending_abort = None
                super()._reset_channel(ch)
        return super().mmio_read(offset)


def test_reset_waits_for_the_abort_to_drain() -> None:
    """After a timeout the driver waits until the aborted channel is idle and its ERR bit has
    come, then clears it; a card that never drains is not a hang: the timeout is reported with
    the failed reset in it (the error on the error path does not replace the original), and a
    reset on its own is a protocol error."""
    card, drv = make(SlowAbortCard, timeout_s=0.05)
    for drain, ok in ((3, True), (10**9, False)):
        card.drain = drain
        if not ok:
            drv.timeout_s = 0.05
        loop = drv.descriptor_pool(H2C).address
        buf = card.host.alloc(64)
        with pytest.raises(DmaTimeout) as e:
            drv.run_raw(H2C, [RawDescriptor(8, buf.address, 0, stop=False, next=loop)])
        assert ("does not drain" in str(e.value)) == (not ok), str(e.value)
        if not ok:
            with pytest.raises(DmaProtocolError, match="does not drain"):
                drv.reset_channel(H2C)
        if ok:
            assert card.mmio_read(regs.offset("IRQ_STATUS")) == 0
            assert card.mmio_read(regs.channel_reg(H2C, "STATUS")) == status_word(
                error=True, code=DmaError.ABORTED)
            drv.write_data(buf, 64, 0)


def test_argument_errors() -> None:
    card, drv = make()
    with pytest.raises(TypeError, match="HostBuffer or a bus address"):
        drv.write_data("0x100", 4, 0)  # type: ignore[arg-type]
    other = ModelCard(MiB, host_size=MiB)
    with pytest.raises(HostRangeError, match="another HostMemory"):
        drv.write_data(other.host.alloc(64), 64, 0)
    freed = card.host.alloc(64)
    card.host.free(freed)
    with pytest.raises(HostRangeError, match="not allocated"):
        drv.read_data(0, 64, freed)
    for kw in ({"mps": 64}, {"mrrs": 3000}, {"tags": 0}, {"tags": 33}):
        with pytest.raises(RequestLimitError):
            drv.set_request_limits(**kw)
    drv.set_request_limits(mps=4096, mrrs=128, tags=5)
    assert drv.request_limits() == (4096, 128, 5)
    for kw2 in ({"chunk_bytes": 0}, {"chunk_bytes": regs.DESC_MAX_LENGTH + 1},
                {"pool_descriptors": 0}):
        with pytest.raises(ValueError):
            PcieDriver(card, **kw2)  # type: ignore[arg-type]


def test_close_returns_memory() -> None:
    card, drv = make()
    assert len(card.host.allocated) == 4
    with drv:
        pass
    assert card.host.allocated == []
    assert card.mmio_read(regs.offset("IRQ_MASK")) == 0
    drv.close()


def test_counters_through_driver() -> None:
    card, drv = make()
    buf = card.host.alloc(4096)
    drv.write_batch([(buf, 100, 0), (buf, 28, 4096)])
    assert drv.channel_counters(H2C) == (128, 2)
    c = drv.dram_counters()
    assert c["wr"] == 2 + 1 and c["rd"] == 0 and c["row_hit"] == 0


# --- properties ---------------------------------------------------------------------------------

_CARD = PipelinedCard(8 * MiB, host_size=8 * MiB)
_DRV = PcieDriver(_CARD, chunk_bytes=1000, pool_descriptors=16)
_SRC = _CARD.host.alloc(MiB)
_DST = _CARD.host.alloc(MiB)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60_000), st.integers(1, 5000), st.integers(0, 3000)),
                min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_random_transfer_lists_round_trip(items: list[tuple[int, int, int]], seed: int) -> None:
    """Random batches up and down (sizes across the 1000-byte chunk, several chains per batch)
    come back bit-exact, with nothing written between the destinations."""
    rng = np.random.default_rng(seed)
    _SRC.view()[:] = rng.integers(0, 256, MiB, dtype=np.uint8)
    card, pos, ups = [], 0, []
    for h, n, gap in items:
        pos += gap
        card.append(pos)
        ups.append((_SRC.address + h, n, pos))
        pos += n
    _DRV.write_batch(ups)
    guard = rng.integers(0, 256, MiB, dtype=np.uint8)
    _DST.view()[:] = guard
    expected = guard.copy()
    downs, hpos = [], 0
    for (h, n, _), c in zip(items, card, strict=True):
        downs.append((c, n, _DST.sub(hpos, n)))
        expected[hpos:hpos + n] = _SRC.view(h, n)
        hpos += n + 3
    _DRV.read_batch(list(reversed(downs)))
    assert np.array_equal(_DST.view(), expected)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 4000), st.integers(0, 20_000)),
                min_size=1, max_size=12))
def test_copy_batches_behave_like_sequential_memmove(
        copies: list[tuple[int, int, int]]) -> None:
    """Any copy batch (overlapping, dependent) on the maximally pipelined card equals doing the
    copies one after another with memmove."""
    mem = _CARD.card_memory
    mem[:32_000] = np.arange(32_000) % 253
    ref = mem[:32_000].copy()
    for s, n, d in copies:
        ref[d:d + n] = ref[s:s + n].copy()
    _DRV.copy_batch(copies)
    assert np.array_equal(mem[:32_000], ref)

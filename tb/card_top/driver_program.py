"""The driver test program: one set of checks that runs unchanged on ModelCard and on RtlCard.

Each `check_*` function takes a `PcieDriver` (and reaches the card only through it and its
`backend`), asserts with messages that print actual and expected values, frees what it allocates
and leaves the card as it found it. tests/pyhost runs them on ModelCard; the cocotb card bench
runs them on the RTL from a `cocotb.task.bridge` thread. `reduced=True` picks smaller case sets
that keep every kind of case (host/card offsets 0-3 and 4092-4095, a 256-descriptor chain, every
error code) for the ~1000x slower RTL runs.

Card memory used: [card_base, card_base + CARD_WINDOW); card_base must be 4 KiB aligned. The error
checks also address bytes at and beyond the card's capacity (they must fail, and may leave the last
16 bytes of card memory changed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from pyhost.backend import HostBuffer, HostRangeError
from pyhost.driver import (
    CardRangeError,
    DmaTimeout,
    DmaTransferError,
    PcieDriver,
    RawDescriptor,
    TransferSizeError,
)
from pyhost.spec import regs
from pyhost.spec.regs import Channel, DmaError

PAGE = 4096
#: Card memory a check may use, from card_base.
CARD_WINDOW = 8 << 20

#: Offsets around a 4 KiB boundary (the PCIe split point), for the host and the card side.
EDGE_OFFSETS = (0, 1, 2, 3, 4092, 4093, 4094, 4095)
ALIGN_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511,
                 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 8191, 8192, 8193)
ALIGN_LENGTHS_REDUCED = (1, 3, 63, 64, 65, 4095, 4096, 4097, 8191)
CARD_OFFSETS_REDUCED = (0, 1, 4095)
#: Bytes of guard at least after each alignment case's destination (the next slot starts at a
#: page boundary after them).
ALIGN_GUARD = 64
#: check_copy_on_card reads back its whole span after this many copies (and after the last).
COPY_SPAN_EVERY = 8
CHAIN_LENGTHS = (*range(1, 18), 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 255, 256)
CHAIN_LENGTHS_REDUCED = (1, 2, 17, 256)
REQUEST_SIZES = (128, 256, 512, 1024, 2048, 4096)


# --- helpers ------------------------------------------------------------------------------------

def _irq_status(drv: PcieDriver) -> int:
    return drv.backend.mmio_read(regs.offset("IRQ_STATUS"))


def _status(drv: PcieDriver, ch: Channel) -> int:
    return drv.backend.mmio_read(regs.channel_reg(ch, "STATUS"))


def _field(value: int, reg: str, name: str) -> int:
    f = {f.name: f for f in regs.BY_NAME[reg].fields}[name]
    return (value & f.mask) >> f.lsb


def _random(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, n, dtype=np.uint8)


def _compare(what: str, got: np.ndarray, expected: np.ndarray,
             locate: Callable[[int], str] | None = None) -> None:
    """Assert two byte arrays are equal; the message names the first difference."""
    if np.array_equal(got, expected):
        return
    bad = np.flatnonzero(got != expected)
    i = int(bad[0])
    where = f" ({locate(i)})" if locate else ""
    raise AssertionError(f"{what}: {bad.size} bytes differ, first at +{i}{where}: got "
                         f"{int(got[i]):#04x}, expected {int(expected[i]):#04x}")


class _Scratch:
    """Host buffers of one check, all freed when the check ends."""

    def __init__(self, drv: PcieDriver) -> None:
        self.drv = drv
        self.bufs: list[HostBuffer] = []

    def alloc(self, n: int) -> HostBuffer:
        buf = self.drv.host.alloc(n)
        self.bufs.append(buf)
        return buf

    def free(self) -> None:
        for b in self.bufs:
            self.drv.host.free(b)
        self.bufs.clear()


@contextmanager
def _scratch(drv: PcieDriver) -> Iterator[_Scratch]:
    s = _Scratch(drv)
    try:
        yield s
    finally:
        s.free()


def _check_card_base(drv: PcieDriver, card_base: int) -> None:
    assert card_base % PAGE == 0, f"card_base {card_base:#x} must be 4 KiB aligned"
    assert card_base + CARD_WINDOW <= drv.mem_size, (
        f"the checks need card memory [{card_base:#x}, {card_base + CARD_WINDOW:#x}); the card "
        f"has {drv.mem_size:#x} bytes")


def _card_put(drv: PcieDriver, staging: HostBuffer, card_addr: int, data: np.ndarray) -> None:
    staging.view(0, data.size)[:] = data
    drv.write_data(staging, data.size, card_addr)


def _card_get(drv: PcieDriver, staging: HostBuffer, card_addr: int, n: int) -> np.ndarray:
    drv.read_data(card_addr, n, staging)
    return staging.view(0, n).copy()


@contextmanager
def _expect_dma_error(drv: PcieDriver, ch: Channel, code: DmaError, descriptor: int,
                      what: str) -> Iterator[None]:
    """The block must raise DmaTransferError for `ch` / `code` at `descriptor`."""
    try:
        yield
    except DmaTransferError as e:
        got = (e.channel, e.code, e.descriptor)
        assert got == (ch, code, descriptor), (
            f"{what}: got {e.channel.name} {e.code.name} at descriptor {e.descriptor}, expected "
            f"{ch.name} {code.name} at descriptor {descriptor} ({e})")
    else:
        raise AssertionError(f"{what}: expected {ch.name} {code.name} at descriptor "
                             f"{descriptor}, but the transfer succeeded")
    assert _irq_status(drv) == 0, (
        f"{what}: IRQ_STATUS {_irq_status(drv):#x} after the driver handled the error, expected 0")
    assert not _field(_status(drv, ch), f"{ch.name}_STATUS", "BUSY"), f"{what}: channel busy"


def _round_trip(drv: PcieDriver, s: _Scratch, rng: np.random.Generator, card_addr: int,
                n: int = 3000, what: str = "round trip") -> None:
    """Host -> card -> host through both channels and a card copy; data must survive."""
    src, dst = s.alloc(n), s.alloc(n)
    data = _random(rng, n)
    src.view()[:] = data
    drv.write_data(src, n, card_addr)
    drv.copy_on_card(card_addr, n, card_addr + 2 * PAGE + n)
    drv.read_data(card_addr + 2 * PAGE + n, n, dst)
    _compare(what, dst.view(), data)


# --- checks -------------------------------------------------------------------------------------

def check_card_info(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0) -> None:
    """Identification, scratch register, interrupt mask and unmapped offsets."""
    b = drv.backend
    assert b.mmio_read(regs.offset("CARD_ID")) == regs.CARD_ID
    assert drv.version == regs.VERSION, f"VERSION {drv.version:#x}, expected {regs.VERSION:#x}"
    assert drv.mem_size >= CARD_WINDOW, f"card memory {drv.mem_size:#x} is too small for checks"
    width = b.mmio_read(regs.offset("BUS_WIDTH"))
    assert width >= 32 and width & (width - 1) == 0, f"BUS_WIDTH {width} is not a power of two"
    caps = b.mmio_read(regs.offset("CAPS"))
    assert _field(caps, "CAPS", "CHANNELS") == len(Channel), f"CAPS {caps:#x}"
    assert _field(caps, "CAPS", "TAGS") >= 16, f"CAPS {caps:#x}: fewer than 16 tags"
    scratch = regs.offset("SCRATCH")
    old = b.mmio_read(scratch)
    for v in (0xFFFF_FFFF, 0xA5A5_5A5A, 0, 0x1234_5678):
        b.mmio_write(scratch, v)
        assert b.mmio_read(scratch) == v, f"SCRATCH reads {b.mmio_read(scratch):#x} after {v:#x}"
    b.mmio_write(scratch, old)
    irq_all = sum(f.mask for f in regs.IRQ_FIELDS)
    assert b.mmio_read(regs.offset("IRQ_MASK")) == irq_all, "driver did not enable interrupts"
    used = {r.offset for r in regs.REGISTERS}
    for off in (o for o in range(0, regs.BAR0_SIZE, 4) if o not in used):
        if reduced and off % 0x40:
            continue
        b.mmio_write(off, 0xFFFF_FFFF)
        assert b.mmio_read(off) == 0, f"unmapped offset {off:#x} reads {b.mmio_read(off):#x}"


def check_validation(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0) -> None:
    """Bad sizes and ranges are refused before anything reaches the card."""
    _check_card_base(drv, card_base)
    with _scratch(drv) as s:
        buf = s.alloc(PAGE)
        before = drv.stats.copy()
        bad: list[tuple[Callable[[], None], type[Exception], str]] = [
            (lambda: drv.write_data(buf, 0, card_base), TransferSizeError, "size 0"),
            (lambda: drv.read_data(card_base, -1, buf), TransferSizeError, "size -1"),
            (lambda: drv.write_data(buf, 1.5, card_base), TransferSizeError,  # type: ignore
             "size 1.5"),
            (lambda: drv.copy_on_card(card_base, 0, card_base + PAGE), TransferSizeError,
             "copy size 0"),
            (lambda: drv.write_data(buf, 16, drv.mem_size - 15), CardRangeError,
             "card range one byte past capacity"),
            (lambda: drv.read_data(-1, 16, buf), CardRangeError, "negative card address"),
            (lambda: drv.copy_on_card(drv.mem_size - 8, 16, card_base), CardRangeError,
             "copy source past capacity"),
            (lambda: drv.copy_on_card(card_base, 16, drv.mem_size), CardRangeError,
             "copy destination past capacity"),
            (lambda: drv.write_data(buf, PAGE + 1, card_base), HostRangeError,
             "size larger than the host buffer"),
            (lambda: drv.read_data(card_base, 16, buf.sub(PAGE - 8, 8)), HostRangeError,
             "size larger than a sub-buffer"),
            (lambda: drv.write_data(drv.host.end - 8, 16, card_base), HostRangeError,
             "host address range past host memory"),
            (lambda: drv.read_data(card_base, 16, drv.host.base - 16), HostRangeError,
             "host address below host memory"),
            (lambda: drv.read_data(card_base, 32, drv.descriptor_pool(Channel.H2C).address),
             HostRangeError, "host range over the driver's descriptors"),
            # One bad entry refuses the whole batch: the good first entry must not move either.
            (lambda: drv.write_batch([(buf, 16, card_base), (buf, 16, drv.mem_size)]),
             CardRangeError, "batch with one bad entry"),
        ]
        for fn, exc, what in bad:
            try:
                fn()
            except exc:
                pass
            else:
                raise AssertionError(f"{what}: expected {exc.__name__}, nothing was raised")
        assert drv.stats.doorbells == before.doorbells, (
            f"refused calls rang {drv.stats.doorbells - before.doorbells} doorbells")
        # The largest legal range is accepted: the last byte of card memory (restored after).
        last = drv.mem_size - 1
        drv.read_data(last, 1, buf.sub(2, 1))
        buf.view(0, 1)[:] = buf.view(2, 1) ^ 0x5A
        drv.write_data(buf, 1, last)
        drv.read_data(last, 1, buf.sub(1, 1))
        assert buf.view(1, 1)[0] == buf.view(0, 1)[0], "last card byte did not round-trip"
        drv.write_data(buf.sub(2, 1), 1, last)


def check_alignment(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                    lengths: Sequence[int] | None = None,
                    host_offsets: Sequence[int] | None = None,
                    card_offsets: Sequence[int] | None = None, seed: int = 1) -> None:
    """Host offsets 0-3 / 4092-4095 x card offsets x lengths, both directions, guard bytes.

    Every transfer is its own driver call into its own slot; the whole window around the slots
    (card memory for H2C, host memory for C2H) is compared, so a byte written outside any
    destination fails the check.
    """
    _check_card_base(drv, card_base)
    lengths = lengths or (ALIGN_LENGTHS_REDUCED if reduced else ALIGN_LENGTHS)
    host_offsets = host_offsets or EDGE_OFFSETS
    card_offsets = card_offsets or (CARD_OFFSETS_REDUCED if reduced else EDGE_OFFSETS)
    cases = [(ho, co, n) for n in lengths for ho in host_offsets for co in card_offsets]
    # Each case has a slot of whole pages on both sides, its destination at the case's offset
    # into the slot's first page and at least ALIGN_GUARD bytes after it; the bytes between two
    # destinations (and a guard page before the first) are guards, compared like the rest.
    sizes = [PAGE * math.ceil((max(ho, co) + n + ALIGN_GUARD) / PAGE) for ho, co, n in cases]
    limit = min(1 << 20, CARD_WINDOW)
    groups: list[list[int]] = [[]]
    span = PAGE                          # the current group's guard page and slots
    for k, size in enumerate(sizes):     # groups of at most 1 MiB of slots
        if groups[-1] and span + size > limit:
            groups.append([])
            span = PAGE
        groups[-1].append(k)
        span += size
    window = max(PAGE + sum(sizes[i] for i in g) for g in groups)
    rng = np.random.default_rng(seed)
    with _scratch(drv) as s:
        src, dst, staging = s.alloc(window), s.alloc(window), s.alloc(window)
        # What the card window holds: a random background once, then whatever the last H2C
        # phase left (checked byte for byte), so each group moves one window, not three.
        card = _random(rng, window)
        _card_put(drv, staging, card_base, card)
        for group in groups:
            starts = np.cumsum([PAGE] + [sizes[i] for i in group])   # slot starts, then the end
            span = int(starts[-1])

            def locate(i: int, group: list[int] = group, starts: np.ndarray = starts) -> str:
                if i < PAGE:
                    return f"the guard page before the first slot, byte {i}"
                j = int(np.searchsorted(starts, i, side="right")) - 1
                ho, co, n = cases[group[j]]
                return (f"slot {j}: host offset {ho}, card offset {co}, length {n}, "
                        f"byte {i - int(starts[j])} of the slot's 4 KiB-aligned start")

            # H2C: one call per case over the known card window, compare the group's span.
            data = _random(rng, span)
            src.view(0, span)[:] = data
            expected = card.copy()
            for j, k in enumerate(group):
                ho, co, n = cases[k]
                h, c = int(starts[j]) + ho, int(starts[j]) + co
                drv.write_data(src.address + h, n, card_base + c)
                expected[c:c + n] = data[h:h + n]
            _compare("H2C alignment", _card_get(drv, staging, card_base, span),
                     expected[:span], locate)
            card = expected

            # C2H: from the card window as checked, guard pattern in host memory, compare the
            # host span.
            guard = _random(rng, span)
            dst.view(0, span)[:] = guard
            expected = guard.copy()
            for j, k in enumerate(group):
                ho, co, n = cases[k]
                h, c = int(starts[j]) + ho, int(starts[j]) + co
                drv.read_data(card_base + c, n, dst.address + h)
                expected[h:h + n] = card[c:c + n]
            _compare("C2H alignment", dst.view(0, span), expected, locate)


def check_request_limits(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                         seed: int = 2) -> None:
    """Transfers crossing several 4 KiB pages at every max payload / read request size and a few
    tag limits (the RTL bench's host-port monitor checks the request sizes)."""
    _check_card_base(drv, card_base)
    if reduced:
        combos = [(128, 4096, 1), (4096, 128, 32), (256, 512, 3)]
    else:
        combos = [(mps, mrrs, tags) for mps in REQUEST_SIZES for mrrs in REQUEST_SIZES
                  for tags in (1, 32)] + [(256, 512, t) for t in (2, 3, 16, 31)]
    rng = np.random.default_rng(seed)
    old = drv.request_limits()
    with _scratch(drv) as s:
        src, dst = s.alloc(4 * PAGE), s.alloc(4 * PAGE)
        try:
            for mps, mrrs, tags in combos:
                drv.set_request_limits(mps=mps, mrrs=mrrs, tags=tags)
                for ho, co, n in ((4093, 5, 2 * PAGE + 7), (0, 4095, 3 * PAGE), (1, 0, 129)):
                    data = _random(rng, n)
                    src.view(ho, n)[:] = data
                    guard = _random(rng, 4 * PAGE)
                    dst.view()[:] = guard
                    drv.write_data(src.address + ho, n, card_base + co)
                    drv.read_data(card_base + co, n, dst.address + ho)
                    expected = guard.copy()
                    expected[ho:ho + n] = data
                    _compare(f"MPS {mps}, MRRS {mrrs}, tags {tags}: host offset {ho}, card "
                             f"offset {co}, {n} bytes", dst.view(), expected)
        finally:
            drv.set_request_limits(mps=old[0], mrrs=old[1], tags=old[2])


def check_chains(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                 chain_lengths: Sequence[int] | None = None, seed: int = 3) -> None:
    """Batched calls of 1..256 transfers: one doorbell and one interrupt per call, the card's
    descriptor and byte counters, data and guards for H2C, C2H and C2C."""
    _check_card_base(drv, card_base)
    chain_lengths = chain_lengths or (CHAIN_LENGTHS_REDUCED if reduced else CHAIN_LENGTHS)
    slot = 512
    max_n = max(chain_lengths)
    region = max_n * slot
    assert 3 * region <= CARD_WINDOW and slot <= drv.chunk_bytes
    rng = np.random.default_rng(seed)
    with _scratch(drv) as s:
        src, dst, staging = s.alloc(region), s.alloc(region), s.alloc(2 * region)
        for n in chain_lengths:
            sizes = rng.integers(1, slot // 2, n, endpoint=True)
            h_off = rng.integers(0, slot - sizes + 1)       # each transfer inside its slot
            c_off = rng.integers(0, slot - sizes + 1)
            k = np.arange(n) * slot
            reg = n * slot                                  # this chain's slots, each side
            data = _random(rng, reg)
            src.view(0, reg)[:] = data
            background = _random(rng, 2 * reg)
            _card_put(drv, staging, card_base, background)
            card_a = card_base + k + c_off                  # H2C destinations
            card_b = card_base + reg + k + (slot - sizes - c_off)  # C2C destinations
            expected_card = background.copy()
            for i in range(n):
                h, c, m = int(k[i] + h_off[i]), int(card_a[i] - card_base), int(sizes[i])
                expected_card[c:c + m] = data[h:h + m]
                cb = int(card_b[i] - card_base)
                expected_card[cb:cb + m] = data[h:h + m]

            for ch, call, args in (
                (Channel.H2C, drv.write_batch, [
                    (src.sub(int(k[i] + h_off[i]), int(sizes[i])) if i % 3 == 0
                     else src.address + int(k[i] + h_off[i]), int(sizes[i]), int(card_a[i]))
                    for i in range(n)]),
                (Channel.C2C, drv.copy_batch, [
                    (int(card_a[i]), int(sizes[i]), int(card_b[i])) for i in range(n)]),
            ):
                before, (b0, d0) = drv.stats.copy(), drv.channel_counters(ch)
                call(args)
                b1, d1 = drv.channel_counters(ch)
                st = drv.stats
                chains = math.ceil(n / drv.pool_descriptors)   # 1 unless the pool is tiny
                assert (st.doorbells - before.doorbells, st.interrupts - before.interrupts,
                        st.descriptors - before.descriptors) == (chains, chains, n), (
                    f"{ch.name} batch of {n}: doorbells/interrupts/descriptors "
                    f"{st.doorbells - before.doorbells}/{st.interrupts - before.interrupts}/"
                    f"{st.descriptors - before.descriptors}, expected {chains}/{chains}/{n}")
                assert (d1 - d0, b1 - b0) == (n, int(sizes.sum())), (
                    f"{ch.name} batch of {n}: card counted {d1 - d0} descriptors, {b1 - b0} "
                    f"bytes; expected {n}, {int(sizes.sum())}")
            _compare(f"card memory after H2C + C2C chains of {n}",
                     _card_get(drv, staging, card_base, 2 * reg), expected_card)

            # C2H: read the C2C copies back into guarded host slots.
            guard = _random(rng, reg)
            dst.view(0, reg)[:] = guard
            before = drv.stats.copy()
            drv.read_batch([(int(card_b[i]), int(sizes[i]),
                             dst.sub(int(k[i] + h_off[i]), int(sizes[i])) if i % 2
                             else dst.address + int(k[i] + h_off[i])) for i in range(n)])
            assert drv.stats.doorbells - before.doorbells == math.ceil(n / drv.pool_descriptors), (
                "C2H batch took more doorbells than its pool needs")
            _compare(f"host memory after a C2H chain of {n}", dst.view(0, reg),
                     np.where(_mask(reg, k + h_off, sizes), data, guard))


def _mask(size: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    m = np.zeros(size, dtype=bool)
    for a, n in zip(starts.tolist(), lengths.tolist(), strict=True):
        m[a:a + n] = True
    return m


def check_copy_on_card(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                       seed: int = 4) -> None:
    """Card-to-card copies: offsets and lengths, overlapping moves up and down (memmove), a copy
    of several descriptors; everything around the destination must be untouched."""
    _check_card_base(drv, card_base)
    offsets = (0, 1, 4095) if reduced else (0, 1, 63, 64, 4095)
    lengths = (1, 65, 4097) if reduced else (1, 64, 65, 4097, 3 * PAGE + 17)
    cases = [(so, 8 * PAGE + do, n) for so in offsets for do in offsets for n in lengths]
    distances = (64, 4096) if reduced else (1, 7, 64, 4096, 5000)
    for dist in distances:
        for n in ((300, 9000) if not reduced else (9000,)):
            cases.append((PAGE + dist, PAGE, n))          # move down over itself
            cases.append((PAGE, PAGE + dist, n))          # move up over itself
    span = 16 * PAGE
    # Longer than one descriptor: a full one and a partial one (capped so an RTL bench with a
    # 1 MiB chunk stays quick: its host memory serves about 200 KB per second of wall time).
    big = min(drv.chunk_bytes + 100, CARD_WINDOW // 4)
    big_span = 2 * big + 2 * PAGE                          # source, gap, destination, guards
    rng = np.random.default_rng(seed)
    with _scratch(drv) as s:
        staging = s.alloc(max(span, big_span))
        # The span's contents are known: random once, then what the last copy left (checked
        # byte for byte), so each case moves the span once; the destination and a line either
        # side get fresh bytes first, so a copy that leaves them alone cannot pass.
        # Each copy's destination and a line either side are read back after it; the whole
        # span every COPY_SPAN_EVERY copies and after the last, so a stray write anywhere in it
        # is caught within that many copies.
        card = _random(rng, span)
        _card_put(drv, staging, card_base, card)
        first = 0
        for k, (so, do, n) in enumerate(cases):
            lo, hi = max(0, do - 64), min(span, do + n + 64)
            card[lo:hi] = _random(rng, hi - lo)
            _card_put(drv, staging, card_base + lo, card[lo:hi])
            drv.copy_on_card(card_base + so, n, card_base + do)
            expected = card.copy()
            expected[do:do + n] = card[so:so + n]
            what = f"copy {n} bytes from +{so:#x} to +{do:#x}"
            _compare(f"{what} (its destination and a line either side, from +{lo:#x})",
                     _card_get(drv, staging, card_base + lo, hi - lo), expected[lo:hi])
            card = expected
            if k - first + 1 == COPY_SPAN_EVERY or k == len(cases) - 1:
                _compare(f"the {span}-byte span after copies {first}..{k} (the last: {what})",
                         _card_get(drv, staging, card_base, span), card)
                first = k + 1
        # Fresh source bytes and a fresh line either side of the destination; the destination
        # and those lines are read back (a copy that leaves the destination alone fails: its
        # old bytes are not the source's).
        dst = big + PAGE + 5
        source = _random(rng, 3 + big)
        guards = _random(rng, 128)
        _card_put(drv, staging, card_base, source)
        _card_put(drv, staging, card_base + dst - 64, guards[:64])
        _card_put(drv, staging, card_base + dst + big, guards[64:])
        before = drv.stats.descriptors
        drv.copy_on_card(card_base + 3, big, card_base + dst)
        want = math.ceil(big / drv.chunk_bytes)
        assert drv.stats.descriptors - before == want, (
            f"a {big}-byte copy used {drv.stats.descriptors - before} descriptors, "
            f"expected {want} of at most {drv.chunk_bytes} bytes")
        expected = np.concatenate([guards[:64], source[3:], guards[64:]])
        _compare("multi-descriptor copy (the destination and a line either side)",
                 _card_get(drv, staging, card_base + dst - 64, big + 128), expected)


def check_batched_calls(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                        seed: int = 5) -> None:
    """Batches mixing buffers, sub-buffers and addresses, transfers split into several
    descriptors, dependent card copies (split into two chains), empty batches, byte stats."""
    _check_card_base(drv, card_base)
    rng = np.random.default_rng(seed)
    big = min(drv.chunk_bytes + 123, CARD_WINDOW // 4)   # a full descriptor and a partial one
    sizes = [big, 1, 4096, 777, 3 * PAGE + 1]
    with _scratch(drv) as s:
        srcs = [s.alloc(n) for n in sizes]
        data = [_random(rng, n) for n in sizes]
        for b, d in zip(srcs, data, strict=True):
            b.view()[:] = d
        cards, addr = [], card_base
        for n in sizes:
            cards.append(addr + 3)
            addr += (n + 3 + PAGE) // PAGE * PAGE
        hosts: list[HostBuffer | int] = [srcs[0], srcs[1].address, srcs[2].sub(0, 4096),
                                         srcs[3], srcs[4].address]
        want_desc = sum(math.ceil(n / drv.chunk_bytes) for n in sizes)
        before = drv.stats.copy()
        drv.write_batch([(h, n, c) for h, n, c in zip(hosts, sizes, cards, strict=True)])
        st = drv.stats
        chains = math.ceil(want_desc / drv.pool_descriptors)
        assert (st.calls - before.calls, st.doorbells - before.doorbells,
                st.interrupts - before.interrupts, st.descriptors - before.descriptors) == (
            1, chains, chains, want_desc), f"write_batch stats {st} vs before {before}"
        assert st.bytes_h2c - before.bytes_h2c == sum(sizes)

        # Read back in reverse order into fresh buffers.
        outs = [s.alloc(n) for n in sizes]
        before = drv.stats.copy()
        drv.read_batch([(c, n, o) for c, n, o in reversed(list(zip(cards, sizes, outs,
                                                                     strict=True)))])
        assert drv.stats.doorbells - before.doorbells == chains
        assert drv.stats.bytes_c2h - before.bytes_c2h == sum(sizes)
        for i, (o, d) in enumerate(zip(outs, data, strict=True)):
            _compare(f"read_batch entry {i}", o.view(), d)

        # Dependent copies: entry 1 reads what entry 0 writes; the driver must not let the
        # pipelined engine read it early, so it splits the batch into two chains.
        a, b, c = cards[2], addr + 5, addr + 3 * PAGE
        before = drv.stats.copy()
        drv.copy_batch([(a, 4096, b), (b, 4096, c)])
        assert drv.stats.doorbells - before.doorbells == 2, "dependent copies shared a chain"
        assert drv.stats.bytes_c2c - before.bytes_c2c == 2 * 4096
        drv.read_data(c, 4096, outs[2])
        _compare("chained copy A -> B -> C", outs[2].view(), data[2])
        # Independent copies stay in one chain.
        before = drv.stats.copy()
        drv.copy_batch([(cards[1], 1, addr + 6 * PAGE), (cards[3], 777, addr + 7 * PAGE)])
        assert drv.stats.doorbells - before.doorbells == 1, "independent copies split"

        before = drv.stats.copy()
        drv.write_batch([])
        drv.read_batch([])
        drv.copy_batch([])
        assert drv.stats.doorbells == before.doorbells, "an empty batch rang the doorbell"


def check_errors(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                 seed: int = 6) -> None:
    """Every DMA error code from its cause, with the failing descriptor named; data before the
    failing descriptor is complete, nothing outside the chain's destinations is touched, and
    the next transfer works. Needs the backend's inject_host_error."""
    _check_card_base(drv, card_base)
    rng = np.random.default_rng(seed)
    b = drv.backend
    top = drv.mem_size
    H2C, C2H, C2C = Channel.H2C, Channel.C2H, Channel.C2C
    with _scratch(drv) as s:
        src, dst, staging = s.alloc(4 * PAGE), s.alloc(4 * PAGE), s.alloc(8 * PAGE)
        data = _random(rng, 4 * PAGE)
        src.view()[:] = data
        good = RawDescriptor(100, src.address + 1, card_base + 7)

        def card_unchanged(what: str, background: np.ndarray, written: list[tuple[int, int]],
                           may_write: list[tuple[int, int]]) -> None:
            """Card window = background except `written` (from src) and `may_write` (any)."""
            got = _card_get(drv, staging, card_base, background.size)
            expected = background.copy()
            for c, n in written:
                expected[c:c + n] = data[1:1 + n]
            for c, n in may_write:
                got[c:c + n] = expected[c:c + n]
            _compare(what, got, expected)

        # Card side out of range (DECERR): the descriptor before the bad one completes.
        background = _random(rng, 8 * PAGE)
        for bad_dst in (top - 16, top, top + PAGE, 1 << 40) if not reduced else (
                top - 16, top, 1 << 40):
            _card_put(drv, staging, card_base, background)
            d0 = drv.channel_counters(H2C)[1]
            with _expect_dma_error(drv, H2C, DmaError.DST_WRITE, 1, f"H2C to {bad_dst:#x}"):
                drv.run_raw(H2C, [good, RawDescriptor(64, src.address, bad_dst)])
            assert drv.channel_counters(H2C)[1] - d0 == 1, "H2C_DESCS counted a failed descriptor"
            card_unchanged("card memory after H2C DST_WRITE", background, [(7, 100)], [])
        with _expect_dma_error(drv, C2H, DmaError.SRC_READ, 0, "C2H from past the card's end"):
            drv.run_raw(C2H, [RawDescriptor(32, top - 16, dst.address)])
        with _expect_dma_error(drv, C2C, DmaError.SRC_READ, 1, "C2C from past the card's end"):
            drv.run_raw(C2C, [RawDescriptor(8, card_base, card_base + PAGE),
                              RawDescriptor(32, top - 8, card_base)])
        with _expect_dma_error(drv, C2C, DmaError.DST_WRITE, 0, "C2C to past the card's end"):
            drv.run_raw(C2C, [RawDescriptor(32, card_base, top - 31)])

        # Host side out of range (DECERR from the host port).
        with _expect_dma_error(drv, H2C, DmaError.SRC_READ, 0, "H2C from past host memory"):
            drv.run_raw(H2C, [RawDescriptor(16, drv.host.end - 8, card_base)])
        guard = _random(rng, 4 * PAGE)
        dst.view()[:] = guard
        # (a link whose host writes are posted, PCIe, cannot report a failed write to the card)
        writes_fail = b.host_write_errors
        if writes_fail:
            with _expect_dma_error(drv, C2H, DmaError.DST_WRITE, 1, "C2H to past host memory"):
                drv.run_raw(C2H, [RawDescriptor(50, card_base + 7, dst.address + 3),
                                  RawDescriptor(16, card_base, drv.host.end - 8)])
            expected = guard.copy()
            expected[3:53] = data[1:51]
            _compare("host memory after C2H DST_WRITE", dst.view(), expected)

        # Descriptor faults: bad magic, zero length, unreadable descriptor.
        background = _random(rng, 8 * PAGE)
        third = RawDescriptor(200, src.address + 1, card_base + 2 * PAGE)
        for code, bad in ((DmaError.BAD_MAGIC, RawDescriptor(64, src.address, card_base + PAGE,
                                                             magic=regs.DESC_MAGIC ^ 0x8000)),
                          (DmaError.BAD_MAGIC, RawDescriptor(64, src.address, card_base + PAGE,
                                                             magic=0)),
                          (DmaError.ZERO_LENGTH, RawDescriptor(0, src.address, card_base + PAGE)),
                          (DmaError.DESC_READ, None)):
            _card_put(drv, staging, card_base, background)
            if bad is None:   # the first descriptor's next points outside host memory
                chain = [dataclasses.replace(good, next=drv.host.end, stop=False), third]
            else:
                chain = [good, bad, third]
            with _expect_dma_error(drv, H2C, code, 1, f"{code.name} at descriptor 1"):
                drv.run_raw(H2C, chain)
            card_unchanged(f"card memory after {code.name}", background, [(7, 100)],
                           [(PAGE, 64), (2 * PAGE, 200)])
        with _expect_dma_error(drv, C2C, DmaError.ZERO_LENGTH, 0, "zero length first"):
            drv.run_raw(C2C, [RawDescriptor(0, card_base, card_base + PAGE)])

        # Injected SLVERR from host memory.
        pool = drv.descriptor_pool(H2C)
        n3 = [(src.address + 64 * i, 64, card_base + PAGE * i) for i in range(3)]
        try:
            b.inject_host_error(src.address + 64, src.address + 65)
            with _expect_dma_error(drv, H2C, DmaError.SRC_READ, 1, "H2C source SLVERR"):
                drv.write_batch(n3)
            b.clear_host_errors()
            b.inject_host_error(pool.address + 2 * regs.DESC_SIZE + 31,
                                pool.address + 3 * regs.DESC_SIZE)
            with _expect_dma_error(drv, H2C, DmaError.DESC_READ, 2, "descriptor SLVERR"):
                drv.write_batch(n3)
            # A chain that stops before the bad slot must not notice it (prefetch is allowed,
            # but a prefetch error only counts when the chain reaches that descriptor).
            drv.write_batch(n3[:2])
            b.clear_host_errors()
            drv.write_data(src.address + 1, 100, card_base + 7)
            if writes_fail:
                dst.view()[:] = guard
                b.inject_host_error(dst.address + PAGE + 100, dst.address + PAGE + 101)
                with _expect_dma_error(drv, C2H, DmaError.DST_WRITE, 1,
                                       "C2H destination SLVERR"):
                    drv.read_batch([(card_base + 7, 100, dst.address + 1),
                                    (card_base, 300, dst.address + PAGE)])
                got = dst.view().copy()
                got[PAGE:PAGE + 300] = guard[PAGE:PAGE + 300]   # the failing one may write
                expected = guard.copy()
                expected[1:101] = data[1:101]
                _compare("host memory after C2H destination SLVERR", got, expected)
                b.clear_host_errors()
                wb = drv.writeback_address(C2C)
                b.inject_host_error(wb, wb + regs.WB_SIZE)
                with _expect_dma_error(drv, C2C, DmaError.STATUS_WRITE, 2, "status write-back"):
                    drv.copy_batch([(card_base, 50, card_base + PAGE),
                                    (card_base + 50, 50, card_base + 2 * PAGE)])
        finally:
            b.clear_host_errors()

        # A bad request-limit register stops the chain at its start.
        mps = regs.offset("DMA_MPS")
        old = b.mmio_read(mps)
        for bad_mps in (64, 8192, 384) if not reduced else (8192,):
            b.mmio_write(mps, bad_mps)
            try:
                with _expect_dma_error(drv, H2C, DmaError.BAD_CONFIG, 0, f"MPS {bad_mps}"):
                    drv.write_data(src, 16, card_base)
            finally:
                b.mmio_write(mps, old)

        for i, ch in enumerate((H2C, C2H, C2C)):
            _round_trip(drv, s, rng, card_base + 4 * PAGE, what=f"recovery after errors ({i})")
            assert not _status(drv, ch) & 1, f"{ch.name} still busy"


def check_abort(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0,
                timeout_s: float = 0.5) -> None:
    """A chain that never stops (its descriptor points to itself): the driver times out, resets
    the channel, the channel reads ERROR + ABORTED, and then works again."""
    _check_card_base(drv, card_base)
    rng = np.random.default_rng(7)
    old = drv.timeout_s
    drv.timeout_s = timeout_s
    with _scratch(drv) as s:
        src = s.alloc(PAGE)
        try:
            pool = drv.descriptor_pool(Channel.H2C)
            try:
                drv.run_raw(Channel.H2C, [RawDescriptor(64, src.address, card_base, stop=False,
                                                        completed=False, next=pool.address)])
            except DmaTimeout as e:
                assert e.channel == Channel.H2C, f"timeout names {e.channel.name}"
            else:
                raise AssertionError("a chain without STOP completed")
        finally:
            drv.timeout_s = old
        st = _status(drv, Channel.H2C)
        code = _field(st, "H2C_STATUS", "ERR_CODE")
        assert _field(st, "H2C_STATUS", "ERROR") and code == DmaError.ABORTED, (
            f"H2C_STATUS {st:#x} after RESET of a running chain; expected ERROR and ABORTED")
        assert not _field(st, "H2C_STATUS", "BUSY"), f"H2C_STATUS {st:#x}: still busy"
        assert _irq_status(drv) == 0, f"IRQ_STATUS {_irq_status(drv):#x} left after the abort"
        # The other channels were not blocked by the aborted chain.
        _round_trip(drv, s, rng, card_base + PAGE, what="transfers after the abort")


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[..., None]


#: Every check, in a sensible order (cheap and basic first).
ALL_CHECKS: tuple[Check, ...] = tuple(Check(f.__name__, f) for f in (
    check_card_info, check_validation, check_alignment, check_request_limits, check_chains,
    check_copy_on_card, check_batched_calls, check_errors, check_abort))


def run_all(drv: PcieDriver, *, reduced: bool = False, card_base: int = 0) -> list[str]:
    """Run every check; return their names (an AssertionError stops at the first failure)."""
    for c in ALL_CHECKS:
        c.fn(drv, reduced=reduced, card_base=card_base)
    return [c.name for c in ALL_CHECKS]

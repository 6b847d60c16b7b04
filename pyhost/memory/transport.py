"""How the manager moves bytes: batched, coalesced driver calls, counted in one place.

`Transport` is the only code that calls the driver. It coalesces transfers that are adjacent on
both sides into one, sends each direction's transfers of a manager call as one batched driver call
(or, with batching off, one call per transfer, to measure what batching saves) and counts bytes,
transfers, driver calls and the time spent in the driver. The real PcieDriver and `DryRunDriver`
get exactly the same calls, so a dry run accounts exactly like a real one.

`DryRunDriver` has PcieDriver's transfer interface and statistics without a card: it validates
arguments and splits transfers into descriptors and chains with the driver's own functions
(`check_size`, `check_card_range`, `split_transfer`, `plan_chains`), and moves no payload.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol

from pyhost.driver import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_POOL_DESCRIPTORS,
    DriverStats,
    Piece,
    check_card_range,
    check_size,
    plan_chains,
    split_transfer,
)
from pyhost.spec import regs
from pyhost.spec.regs import Channel

#: MMIO accesses PcieDriver makes per chain: DESC_LO/HI, WB_LO/HI, CTRL, IRQ_STATUS clear; and
#: IRQ_STATUS, STATUS, COMPLETED. tests/memory checks DryRunDriver against the real driver.
_MMIO_WRITES_PER_CHAIN = 6
_MMIO_READS_PER_CHAIN = 3


class Driver(Protocol):
    """The part of PcieDriver the manager uses."""

    mem_size: int
    stats: DriverStats

    def write_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None: ...
    def read_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None: ...
    def copy_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None: ...
    def write_data(self, host: int, size: int, card_addr: int) -> None: ...
    def read_data(self, card_addr: int, size: int, host: int) -> None: ...
    def copy_on_card(self, src: int, size: int, dst: int) -> None: ...


class DryRunDriver:
    """PcieDriver's transfer calls and DriverStats, without a card or payload."""

    def __init__(self, mem_size: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 pool_descriptors: int = DEFAULT_POOL_DESCRIPTORS) -> None:
        if mem_size <= 0:
            raise ValueError(f"card memory size must be positive, got {mem_size}")
        self.mem_size = mem_size
        self.chunk_bytes = chunk_bytes
        self.pool_descriptors = pool_descriptors
        self.stats = DriverStats()

    # PcieDriver's argument checks, descriptor split and chain planning (pyhost.driver), shared.
    def _checked(self, i: int, size: int, card: int, what: str) -> int:
        size = check_size(size, i)
        check_card_range(card, size, self.mem_size, i, what)
        return size

    def write_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None:
        pieces = []
        for i, (_, size, card) in enumerate(transfers):
            size = self._checked(i, size, card, "destination")
            pieces += split_transfer(0, card, size, i, self.chunk_bytes)
        self._count(Channel.H2C, pieces)

    def read_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None:
        pieces = []
        for i, (card, size, _) in enumerate(transfers):
            size = self._checked(i, size, card, "source")
            pieces += split_transfer(card, 0, size, i, self.chunk_bytes)
        self._count(Channel.C2H, pieces)

    def copy_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None:
        pieces = []
        for i, (src, size, dst) in enumerate(transfers):
            size = self._checked(i, size, src, "source")
            check_card_range(dst, size, self.mem_size, i, "destination")
            if src < dst < src + size:
                raise NotImplementedError(
                    "DryRunDriver does not model an overlapping move up (PcieDriver splits it "
                    "into many descriptors); the memory manager never asks for one")
            pieces += split_transfer(src, dst, size, i, self.chunk_bytes)
        self._count(Channel.C2C, pieces)

    def write_data(self, host: int, size: int, card_addr: int) -> None:
        self.write_batch([(host, size, card_addr)])

    def read_data(self, card_addr: int, size: int, host: int) -> None:
        self.read_batch([(card_addr, size, host)])

    def copy_on_card(self, src: int, size: int, dst: int) -> None:
        self.copy_batch([(src, size, dst)])

    def _count(self, ch: Channel, pieces: list[Piece]) -> None:
        s = self.stats
        s.calls += 1
        for start, end in plan_chains(ch, pieces, self.pool_descriptors):
            s.descriptors += end - start
            s.doorbells += 1
            s.interrupts += 1
            s.mmio_writes += _MMIO_WRITES_PER_CHAIN
            s.mmio_reads += _MMIO_READS_PER_CHAIN
            nbytes = sum(p.length for p in pieces[start:end])
            setattr(s, f"bytes_{ch.name.lower()}", s.bytes(ch) + nbytes)


assert regs.DESC_SIZE == 32   # the pool arithmetic above assumes PcieDriver's descriptor size

# the channels' names, looked up once (an enum member's .name is a descriptor call)
_H2C, _C2H, _C2C = Channel.H2C.name, Channel.C2H.name, Channel.C2C.name
_CHUNK_FIRST = itemgetter(3, 0)       # (a, size, b, chunk) by chunk, then a


@dataclass
class TransportStats:
    """What the manager asked the driver for."""

    bytes_h2c: int = 0
    bytes_c2h: int = 0
    bytes_c2c: int = 0
    transfers_h2c: int = 0     # tensor transfers before coalescing
    transfers_c2h: int = 0
    transfers_c2c: int = 0
    descriptors_saved: int = 0  # transfers merged into a neighbour by coalescing
    driver_calls: int = 0
    driver_time_s: float = 0.0
    calls_by_channel: dict[str, int] = field(default_factory=lambda: {c.name: 0 for c in Channel})


class Transport:
    """Batched, coalesced transfers through a driver, with accounting."""

    def __init__(self, driver: Driver, *, batching: bool = True) -> None:
        self.driver = driver
        self.batching = batching
        self.stats = TransportStats()

    @staticmethod
    def _coalesce(items: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
        """(a, size, b, chunk) sorted by a; merge runs contiguous in a and b within one chunk."""
        out: list[tuple[int, int, int]] = []
        last_chunk = None
        for a, n, b, chunk in items:
            if out and chunk == last_chunk:
                pa, pn, pb = out[-1]
                if pa + pn == a and pb + pn == b:
                    out[-1] = (pa, pn + n, pb)
                    continue
            out.append((a, n, b))
            last_chunk = chunk
        return out

    def upload(self, items: list[tuple[int, int, int, int]]) -> None:
        """(host, size, card, host chunk) transfers host -> card."""
        if not items:
            return
        st = self.stats
        for it in items:
            st.bytes_h2c += it[1]
        st.transfers_h2c += len(items)
        if self.batching:
            merged = self._coalesce(sorted(items, key=_CHUNK_FIRST))
            st.descriptors_saved += len(items) - len(merged)
            self._call(_H2C, self.driver.write_batch, merged)
        else:
            for h, n, c, _ in items:
                self._call(_H2C, self.driver.write_batch, [(h, n, c)])

    def download(self, items: list[tuple[int, int, int, int]]) -> None:
        """(card, size, host, host chunk) transfers card -> host."""
        if not items:
            return
        st = self.stats
        for it in items:
            st.bytes_c2h += it[1]
        st.transfers_c2h += len(items)
        if self.batching:
            # coalesce on the host side (sorted by host address), keeping card adjacency
            flipped = sorted([(h, n, c, k) for c, n, h, k in items], key=_CHUNK_FIRST)
            merged = [(c, n, h) for h, n, c in self._coalesce(flipped)]
            st.descriptors_saved += len(items) - len(merged)
            self._call(_C2H, self.driver.read_batch, merged)
        else:
            for c, n, h, _ in items:
                self._call(_C2H, self.driver.read_batch, [(c, n, h)])

    def move(self, items: list[tuple[int, int, int]]) -> None:
        """(src, size, dst) card-to-card copies, in order (compaction)."""
        if not items:
            return
        st = self.stats
        st.bytes_c2c += sum(n for _, n, _ in items)
        st.transfers_c2c += len(items)
        if self.batching:
            self._call(_C2C, self.driver.copy_batch, list(items))
        else:
            for it in items:
                self._call(_C2C, self.driver.copy_batch, [it])

    def _call(self, ch: str, fn, arg: list[tuple[int, int, int]]) -> None:
        """fn(arg), timed and counted under channel name `ch`."""
        t0 = time.perf_counter()
        try:
            fn(arg)
        finally:
            st = self.stats
            st.driver_time_s += time.perf_counter() - t0
            st.driver_calls += 1
            st.calls_by_channel[ch] += 1

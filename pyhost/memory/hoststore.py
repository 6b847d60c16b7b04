"""Host copies of tensors: where the manager keeps each tensor's bytes while it is off the card.

`HostArena` decides the addresses: tensors up to `small` bytes are packed next to each other in
slabs (so tensors allocated together can move in one transfer), larger ones get their own block.
The arena takes its memory from a provider: `RealHost` (the card backend's DMA-able HostMemory) or
`VirtualHost` (addresses only, for dry runs). The arena logic is the same for both, so a dry run
places host copies exactly where a real run would (relative to each slab) and batches and
coalesces transfers the same way.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pyhost.backend import HostBuffer, HostMemory, HostOutOfMemory
from pyhost.memory.errors import HostAllocationError

#: Host copies start at multiples of this (one DMA burst / cache line).
HOST_ALIGN = 64


class HostBlock(Protocol):
    address: int
    size: int


class HostProvider(Protocol):
    """Where host memory comes from: alloc/free of blocks with a bus address."""

    payload: bool

    def alloc(self, size: int, align: int) -> HostBlock: ...
    def free(self, block: HostBlock) -> None: ...
    def view(self, address: int, size: int) -> np.ndarray: ...


class RealHost:
    """The card backend's HostMemory (DMA-able, with payload)."""

    payload = True

    def __init__(self, memory: HostMemory) -> None:
        self.memory = memory

    def alloc(self, size: int, align: int) -> HostBuffer:
        try:
            return self.memory.alloc(size, align)
        except HostOutOfMemory as e:
            raise HostAllocationError(
                f"host memory for {size} bytes could not be allocated ({e}); free tensors or "
                "give the card backend a larger HostMemory") from e

    def free(self, block: HostBlock) -> None:
        assert isinstance(block, HostBuffer)
        self.memory.free(block)

    def view(self, address: int, size: int) -> np.ndarray:
        return self.memory.view(address, size)


@dataclass(frozen=True, eq=False)
class VirtualBlock:
    address: int
    size: int


class VirtualHost:
    """Host address space without bytes behind it (dry run): first fit over [base, base+size)."""

    payload = False

    def __init__(self, size: int = 64 << 30, base: int = 1 << 40) -> None:
        self.size, self.base = size, base
        self._free: list[tuple[int, int]] = [(base, size)]

    def alloc(self, size: int, align: int) -> VirtualBlock:
        for i, (start, length) in enumerate(self._free):
            a = -(-start // align) * align
            if a + size <= start + length:
                pieces = [(start, a - start), (a + size, start + length - a - size)]
                self._free[i:i + 1] = [(s, n) for s, n in pieces if n > 0]
                return VirtualBlock(a, size)
        raise HostAllocationError(
            f"dry-run host memory ({self.size} bytes) has no free block of {size} bytes; free "
            "tensors or make the dry run's host_size larger")

    def free(self, block: HostBlock) -> None:
        i = bisect.bisect_left(self._free, (block.address, 0))
        start, end = block.address, block.address + block.size
        if i < len(self._free) and self._free[i][0] == end:
            end += self._free.pop(i)[1]
        if i > 0 and sum(self._free[i - 1]) == start:
            i -= 1
            start = self._free.pop(i)[0]
        self._free.insert(i, (start, end - start))

    def view(self, address: int, size: int) -> np.ndarray:
        raise RuntimeError("a dry run has no host bytes; this is a bug in the caller")

    def free_ranges(self) -> list[tuple[int, int]]:
        """(address, length) of the free ranges, in address order."""
        return list(self._free)


@dataclass(eq=False)
class HostHome:
    """A tensor's host copy: `size` bytes at bus address `address`, inside host block `chunk`.

    Two homes can be moved in one transfer only if they are in the same chunk and adjacent.
    """

    address: int
    size: int
    chunk: int
    owned: bool = True    # False: the user's HostBuffer, never freed by the manager


class _Slab:
    __slots__ = ("block", "free", "used")

    def __init__(self, block: HostBlock) -> None:
        self.block = block
        self.free: list[tuple[int, int]] = [(0, block.size)]   # (offset, length), by offset
        self.used = 0


class HostArena:
    """Allocates tensors' host copies from a provider: small ones packed in slabs.

    A host copy starts at a multiple of HOST_ALIGN. Tensors up to `small` bytes go, in order of
    preference, into the slab last allocated from (so tensors allocated together are adjacent
    and move in one transfer), into the smallest free range of any slab that holds them, or into
    a new slab of `slab` bytes. Larger tensors get their own provider block (page-aligned when
    the provider has room for that). Out of memory is reported only when the host really cannot
    hold the request: when a full slab or an aligned block does not fit, smaller slabs, a block
    of just the request, HOST_ALIGN alignment and the free ranges inside slabs are tried before
    `HostAllocationError`; so a refusal means that no free range of the provider and none inside
    a slab holds the request at HOST_ALIGN (`can_hold`, which the tests check every refusal
    against).
    """

    def __init__(self, provider: HostProvider, *, small: int = 64 << 10,
                 slab: int = 1 << 20) -> None:
        self.provider = provider
        self.small, self.slab_size = small, slab
        self._slabs: dict[int, _Slab] = {}       # chunk id -> slab
        self._big: dict[int, HostBlock] = {}     # chunk id -> block
        #: every free range inside a slab, (length, chunk, offset), sorted: best fit by bisect
        self._ranges: list[tuple[int, int, int]] = []
        self._current = 0                        # chunk id of the slab last allocated from
        self._next_chunk = 0
        self.bytes_allocated = 0

    def _chunk_id(self) -> int:
        self._next_chunk += 1
        return self._next_chunk

    # --- allocation ---------------------------------------------------------------------------

    def alloc(self, size: int) -> HostHome:
        n = -(-size // HOST_ALIGN) * HOST_ALIGN
        if n > self.small:
            block = self._provider_alloc(size, 4096)
            if block is not None:
                return self._own_block(block, size)
            home = self._best_fit(size, n)       # a slab's free range, as a last resort
            if home is not None:
                return home
            raise self._refusal(size)
        slab = self._slabs.get(self._current)
        if slab is not None:
            home = self._first_fit(self._current, slab, size, n)
            if home is not None:
                return home
        home = self._best_fit(size, n)
        if home is not None:
            return home
        # A new slab; when the host has no room for a whole one, a smaller one, down to a block
        # of just this tensor (4096 bytes or less are never split into smaller slabs).
        want = self.slab_size
        while True:
            block = self._provider_alloc(want, 4096)
            if block is not None:
                break
            if want <= max(n, 4096):
                block = self._provider_alloc(size, HOST_ALIGN)
                if block is None:
                    raise self._refusal(size)
                return self._own_block(block, size)
            want = max(want // 2, max(n, 4096))
        cid = self._chunk_id()
        self._slabs[cid] = slab = _Slab(block)
        bisect.insort(self._ranges, (block.size, cid, 0))
        self._current = cid
        home = self._first_fit(cid, slab, size, n)
        assert home is not None
        return home

    def _provider_alloc(self, size: int, align: int) -> HostBlock | None:
        """A provider block, page-aligned if possible, else HOST_ALIGN-aligned; None if no free
        range of the provider holds it."""
        for a in dict.fromkeys((align, HOST_ALIGN)):
            try:
                return self.provider.alloc(size, a)
            except HostAllocationError:
                continue
        return None

    def _own_block(self, block: HostBlock, size: int) -> HostHome:
        cid = self._chunk_id()
        self._big[cid] = block
        self.bytes_allocated += size
        return HostHome(block.address, size, cid)

    def _refusal(self, size: int) -> HostAllocationError:
        return HostAllocationError(
            f"host memory for a {size}-byte tensor could not be allocated: no free range of the "
            f"host memory nor of the manager's slabs holds it ({self.slab_free} bytes free in "
            f"slabs, largest range {self._ranges[-1][0] if self._ranges else 0}); free tensors "
            "or give the manager a larger host memory")

    def _take(self, cid: int, slab: _Slab, i: int, size: int, n: int) -> HostHome:
        off, length = slab.free[i]
        del self._ranges[bisect.bisect_left(self._ranges, (length, cid, off))]
        if length == n:
            slab.free.pop(i)
        else:
            slab.free[i] = (off + n, length - n)
            bisect.insort(self._ranges, (length - n, cid, off + n))
        slab.used += n
        self.bytes_allocated += size
        return HostHome(slab.block.address + off, size, cid)

    def _first_fit(self, cid: int, slab: _Slab, size: int, n: int) -> HostHome | None:
        for i, (_, length) in enumerate(slab.free):
            if length >= n:
                return self._take(cid, slab, i, size, n)
        return None

    def _best_fit(self, size: int, n: int) -> HostHome | None:
        j = bisect.bisect_left(self._ranges, (n, -1, -1))
        if j == len(self._ranges):
            return None
        _, cid, off = self._ranges[j]
        slab = self._slabs[cid]
        i = bisect.bisect_left(slab.free, (off, 0))
        self._current = cid
        return self._take(cid, slab, i, size, n)

    def adopt(self, buf: HostBuffer) -> HostHome:
        """The user's buffer as a tensor's host copy (not freed by the manager)."""
        return HostHome(buf.address, buf.size, self._chunk_id(), owned=False)

    def free(self, home: HostHome) -> None:
        if not home.owned:
            return
        self.bytes_allocated -= home.size
        big = self._big.pop(home.chunk, None)
        if big is not None:
            self.provider.free(big)
            return
        slab = self._slabs[home.chunk]
        cid = home.chunk
        n = -(-home.size // HOST_ALIGN) * HOST_ALIGN
        off = home.address - slab.block.address
        slab.used -= n
        if slab.used == 0:
            for o, length in slab.free:
                del self._ranges[bisect.bisect_left(self._ranges, (length, cid, o))]
            self.provider.free(slab.block)
            del self._slabs[cid]
            return
        i = bisect.bisect_left(slab.free, (off, 0))
        start, end = off, off + n
        if i < len(slab.free) and slab.free[i][0] == end:
            o, length = slab.free.pop(i)
            del self._ranges[bisect.bisect_left(self._ranges, (length, cid, o))]
            end += length
        if i > 0 and sum(slab.free[i - 1]) == start:
            i -= 1
            o, length = slab.free.pop(i)
            del self._ranges[bisect.bisect_left(self._ranges, (length, cid, o))]
            start = o
        slab.free.insert(i, (start, end - start))
        bisect.insort(self._ranges, (end - start, cid, start))

    # --- inspection ---------------------------------------------------------------------------

    @property
    def slab_free(self) -> int:
        """Bytes free inside slabs."""
        return sum(length for length, _, _ in self._ranges)

    def slab_ranges(self) -> list[tuple[int, int]]:
        """(bus address, length) of every free range inside a slab."""
        return sorted((self._slabs[c].block.address + o, n) for n, c, o in self._ranges)

    def check(self) -> None:
        """Raise AssertionError if the slabs' free lists and the range index disagree."""
        ranges = []
        for cid, slab in self._slabs.items():
            used = slab.block.size - sum(n for _, n in slab.free)
            assert used == slab.used, f"slab {cid}: used {slab.used}, free list says {used}"
            for (o1, n1), (o2, _) in zip(slab.free, slab.free[1:], strict=False):
                assert o1 + n1 < o2, f"slab {cid}: free ranges overlap or were not merged"
            ranges += [(n, cid, o) for o, n in slab.free]
        assert sorted(ranges) == self._ranges, "slab range index out of step"

    def close(self) -> None:
        """Return every owned block to the provider."""
        for block in [*self._big.values(), *(s.block for s in self._slabs.values())]:
            self.provider.free(block)
        self._big.clear()
        self._slabs.clear()
        self._ranges.clear()

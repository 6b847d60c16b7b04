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
        self.free: list[tuple[int, int]] = [(0, block.size)]   # (offset, length)
        self.used = 0


class HostArena:
    """Allocates tensors' host copies from a provider: small ones packed in slabs."""

    def __init__(self, provider: HostProvider, *, small: int = 64 << 10,
                 slab: int = 1 << 20) -> None:
        self.provider = provider
        self.small, self.slab_size = small, slab
        self._slabs: dict[int, _Slab] = {}       # chunk id -> slab
        self._big: dict[int, HostBlock] = {}     # chunk id -> block
        self._next_chunk = 0
        self.bytes_allocated = 0

    def _chunk_id(self) -> int:
        self._next_chunk += 1
        return self._next_chunk

    def alloc(self, size: int) -> HostHome:
        n = -(-size // HOST_ALIGN) * HOST_ALIGN
        if n > self.small:
            block = self.provider.alloc(size, 4096)
            cid = self._chunk_id()
            self._big[cid] = block
            self.bytes_allocated += size
            return HostHome(block.address, size, cid)
        for cid, slab in self._slabs.items():
            home = self._from_slab(cid, slab, size, n)
            if home is not None:
                return home
        cid = self._chunk_id()
        slab = self._slabs[cid] = _Slab(self.provider.alloc(self.slab_size, 4096))
        home = self._from_slab(cid, slab, size, n)
        assert home is not None
        return home

    def _from_slab(self, cid: int, slab: _Slab, size: int, n: int) -> HostHome | None:
        for i, (off, length) in enumerate(slab.free):
            if length >= n:
                if length == n:
                    slab.free.pop(i)
                else:
                    slab.free[i] = (off + n, length - n)
                slab.used += n
                self.bytes_allocated += size
                return HostHome(slab.block.address + off, size, cid)
        return None

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
        n = -(-home.size // HOST_ALIGN) * HOST_ALIGN
        off = home.address - slab.block.address
        slab.used -= n
        if slab.used == 0:
            self.provider.free(slab.block)
            del self._slabs[home.chunk]
            return
        i = bisect.bisect_left(slab.free, (off, 0))
        start, end = off, off + n
        if i < len(slab.free) and slab.free[i][0] == end:
            end += slab.free.pop(i)[1]
        if i > 0 and sum(slab.free[i - 1]) == start:
            i -= 1
            start = slab.free.pop(i)[0]
        slab.free.insert(i, (start, end - start))

    def close(self) -> None:
        """Return every owned block to the provider."""
        for block in [*self._big.values(), *(s.block for s in self._slabs.values())]:
            self.provider.free(block)
        self._big.clear()
        self._slabs.clear()

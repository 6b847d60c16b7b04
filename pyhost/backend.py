"""The card backend interface and the DMA-able host memory that every backend serves.

`CardBackend` is the whole contract between host software and a card: 32-bit BAR0 MMIO, the host
memory the card's DMA engine reads and writes, and the level interrupt line. `ModelCard` (a
functional model) and `RtlCard` (cocotb on the RTL) implement it; the driver and everything above
it see only this interface. `HostMemory` depends on numpy alone, so the RTL backend can serve its
AXI host port straight from `HostMemory.array` (the module's other import is the pure-Python spec).
"""

from __future__ import annotations

import abc
import bisect
import threading
from dataclasses import dataclass

import numpy as np

from pyhost.spec.regs import BAR0_SIZE

#: Default host memory: 256 MiB at bus address 4 GiB, so that host and card addresses (card
#: memory starts at 0) never look alike in a trace or a bug report.
DEFAULT_HOST_SIZE = 256 << 20
DEFAULT_HOST_BASE = 0x1_0000_0000
PAGE = 4096

#: BAR0 registers are 32 bits wide and 32-bit aligned.
MMIO_WIDTH = 4
MMIO_MASK = 0xFFFF_FFFF


class HostMemoryError(Exception):
    """Base class of host-memory errors."""


class HostRangeError(HostMemoryError, ValueError):
    """An address range lies (partly) outside host memory or outside the buffer it names."""


class HostOutOfMemory(HostMemoryError, MemoryError):
    """No free block of host memory is large enough for an allocation."""


class HostFreeError(HostMemoryError, ValueError):
    """`HostMemory.free` got a buffer that is not currently allocated (double free, foreign)."""


class MmioError(ValueError):
    """A BAR0 access with a misaligned or out-of-BAR offset, or a value that is not 32 bits."""


class ErrorInjectionUnsupported(NotImplementedError):
    """The backend cannot inject host-memory bus errors."""


@dataclass(frozen=True, eq=False)
class HostBuffer:
    """A handle to `size` bytes of host memory at bus address `address`.

    Handles compare by identity; `sub` makes a handle to part of a buffer (it is not itself
    allocated: free the parent).
    """

    address: int
    size: int
    memory: HostMemory

    @property
    def end(self) -> int:
        """Bus address one past the last byte."""
        return self.address + self.size

    def _range(self, offset: int, n: int | None) -> tuple[int, int]:
        if n is None:
            n = self.size - offset
        if offset < 0 or n < 0 or offset + n > self.size:
            raise HostRangeError(
                f"bytes [{offset}, {offset + n}) are outside the {self.size}-byte buffer at "
                f"{self.address:#x}; use offsets within 0..{self.size}")
        return self.address + offset, n

    def view(self, offset: int = 0, n: int | None = None) -> np.ndarray:
        """A writable uint8 view of bytes [offset, offset+n) of the buffer (default: to its end)."""
        return self.memory.view(*self._range(offset, n))

    def read(self, offset: int = 0, n: int | None = None) -> bytes:
        return self.memory.read(*self._range(offset, n))

    def write(self, data: bytes | bytearray | memoryview | np.ndarray, offset: int = 0) -> None:
        addr, _ = self._range(offset, len(_as_u8(data)))
        self.memory.write(addr, data)

    def sub(self, offset: int, size: int) -> HostBuffer:
        """A handle to bytes [offset, offset+size) of this buffer."""
        addr, n = self._range(offset, size)
        return HostBuffer(addr, n, self.memory)

    def __repr__(self) -> str:
        return f"HostBuffer(address={self.address:#x}, size={self.size})"


def _as_u8(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


class HostMemory:
    """Host memory at bus addresses [base, base+size), one numpy uint8 array, with an allocator.

    The allocator is first fit over an address-ordered free list with coalescing; every block
    starts at a multiple of its alignment (bus address, not offset). Fresh allocations are not
    cleared, like malloc. The array is zero-filled when created (numpy asks the OS for zero pages,
    so untouched memory costs nothing).
    """

    def __init__(self, size: int = DEFAULT_HOST_SIZE, base: int = DEFAULT_HOST_BASE) -> None:
        if size <= 0:
            raise ValueError(f"host memory size must be positive, got {size}")
        if base < 0 or base % PAGE:
            raise ValueError(f"host memory base {base:#x} must be a non-negative multiple of "
                             f"{PAGE}")
        self.base = base
        self.size = size
        self.array = np.zeros(size, dtype=np.uint8)
        self._free: list[tuple[int, int]] = [(base, size)]   # (address, size), address order
        self._starts: list[int] = []                          # allocated block addresses, sorted
        self._sizes: dict[int, int] = {}                      # allocated address -> size
        self._lock = threading.Lock()   # host threads may allocate while a bench runs

    @property
    def end(self) -> int:
        return self.base + self.size

    # --- address checks -----------------------------------------------------------------------

    def contains(self, addr: int, n: int) -> bool:
        """True if [addr, addr+n) lies inside host memory (n may be 0)."""
        return n >= 0 and self.base <= addr and addr + n <= self.end

    def offset(self, addr: int, n: int = 0) -> int:
        """Array index of bus address `addr`, checking that [addr, addr+n) is inside."""
        if not self.contains(addr, n):
            raise HostRangeError(
                f"host range [{addr:#x}, {addr + n:#x}) is outside host memory "
                f"[{self.base:#x}, {self.end:#x}); use an address from HostMemory.alloc")
        return addr - self.base

    # --- data access --------------------------------------------------------------------------

    def view(self, addr: int, n: int) -> np.ndarray:
        """A writable uint8 view of [addr, addr+n) (no copy)."""
        o = self.offset(addr, n)
        return self.array[o:o + n]

    def read(self, addr: int, n: int) -> bytes:
        return self.view(addr, n).tobytes()

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        src = _as_u8(data)
        self.view(addr, src.size)[:] = src

    # --- allocation ---------------------------------------------------------------------------

    def alloc(self, size: int, align: int = PAGE) -> HostBuffer:
        """Allocate `size` bytes at a bus address that is a multiple of `align` (a power of two)."""
        if size <= 0:
            raise ValueError(f"allocation size must be positive, got {size}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align}")
        with self._lock:
            for i, (start, length) in enumerate(self._free):
                addr = -(-start // align) * align
                if addr + size > start + length:
                    continue
                # Split the free block into the alignment gap before and the rest after.
                pieces = [(start, addr - start), (addr + size, start + length - addr - size)]
                self._free[i:i + 1] = [(a, n) for a, n in pieces if n > 0]
                bisect.insort(self._starts, addr)
                self._sizes[addr] = size
                return HostBuffer(addr, size, self)
        raise HostOutOfMemory(
            f"no free block of {size} bytes aligned to {align} in host memory of {self.size} "
            f"bytes ({self.free_bytes} bytes free in {len(self._free)} blocks); free buffers "
            f"or create HostMemory with a larger size")

    def free(self, buf: HostBuffer) -> None:
        """Return a buffer from `alloc` to the free list."""
        with self._lock:
            if buf.memory is not self or self._sizes.get(buf.address) != buf.size:
                raise HostFreeError(
                    f"{buf!r} is not an allocated block of this host memory (double free, a "
                    f"sub-buffer, or a buffer of another HostMemory); free the buffer alloc "
                    f"returned, once")
            del self._sizes[buf.address]
            self._starts.pop(bisect.bisect_left(self._starts, buf.address))
            i = bisect.bisect_left(self._free, (buf.address, 0))
            start, length = buf.address, buf.size
            # Coalesce with the neighbours so large allocations stay possible.
            if i < len(self._free) and start + length == self._free[i][0]:
                length += self._free.pop(i)[1]
            if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == start:
                i -= 1
                start, length = self._free[i][0], self._free[i][1] + length
                self._free.pop(i)
            self._free.insert(i, (start, length))

    def is_allocated(self, addr: int, n: int) -> bool:
        """True if [addr, addr+n) lies inside one allocated block."""
        with self._lock:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0:
                return False
            start = self._starts[i]
            return addr + n <= start + self._sizes[start]

    @property
    def free_bytes(self) -> int:
        return sum(n for _, n in self._free)

    @property
    def allocated(self) -> list[tuple[int, int]]:
        """(address, size) of every allocated block, in address order."""
        with self._lock:
            return [(a, self._sizes[a]) for a in self._starts]


def check_mmio(offset: int, value: int | None = None) -> None:
    """Raise MmioError unless `offset` is a 32-bit aligned BAR0 offset and `value` fits 32 bits."""
    if not (0 <= offset < BAR0_SIZE) or offset % MMIO_WIDTH:
        raise MmioError(f"BAR0 offset {offset:#x} is not a 4-byte aligned offset below "
                        f"{BAR0_SIZE:#x}; use the offsets of pyhost.spec.regs")
    if value is not None and not (0 <= value <= MMIO_MASK):
        raise MmioError(f"BAR0 write of {value:#x} to {offset:#x} does not fit 32 bits; split "
                        f"64-bit values into LO/HI registers")


class CardBackend(abc.ABC):
    """What host software needs from a card: BAR0 MMIO, DMA-able host memory, the interrupt.

    Backends must call `check_mmio` on every access so that misuse fails the same way on every
    backend. Reads of offsets with no register return 0 and writes to them are ignored.
    """

    #: Host memory the card's DMA engine reads and writes (descriptors, data, write-back).
    host: HostMemory

    #: Whether a DMA write to host memory that fails is reported to the card (an AXI host port
    #: answers it with SLVERR / DECERR). False on a PCIe link: memory writes are posted, so a
    #: write to a bad host address is dropped and reported at the root, never to the card.
    host_write_errors: bool = True

    @abc.abstractmethod
    def mmio_read(self, offset: int) -> int:
        """Read the 32-bit BAR0 register at byte `offset`."""

    @abc.abstractmethod
    def mmio_write(self, offset: int, value: int) -> None:
        """Write the 32-bit BAR0 register at byte `offset`."""

    @abc.abstractmethod
    def wait_irq(self, timeout_s: float) -> bool:
        """Block until the interrupt line is high; return False if `timeout_s` passes first.

        The line is level: high while IRQ_STATUS & IRQ_MASK != 0. If it is already high the call
        returns True at once. `timeout_s` is the caller's bound in seconds; a simulating backend
        may bound simulated time instead (a simulation's wall-clock speed says nothing about the
        card), but it must return False rather than wait forever.
        """

    def link_limits(self) -> tuple[int, int] | None:
        """The host link's max payload and read request sizes in bytes, as the link negotiated
        them (PCIe Device Control), or None when the link sets no limit (the driver then keeps
        the card's DMA_MPS / DMA_MRRS defaults)."""
        return None

    def inject_host_error(self, start: int, end: int) -> None:
        """Make the card's DMA accesses to host bus addresses [start, end) fail (SLVERR).

        For tests. CPU accesses through `host` are not affected. Optional: backends that cannot
        do it raise ErrorInjectionUnsupported.
        """
        raise ErrorInjectionUnsupported(
            f"{type(self).__name__} cannot inject host-memory errors")

    def clear_host_errors(self) -> None:
        """Remove every range set by `inject_host_error`."""
        raise ErrorInjectionUnsupported(
            f"{type(self).__name__} cannot inject host-memory errors")

"""PcieDriver: host-to-card, card-to-host and card-to-card DMA over any CardBackend, and the
accelerator: program upload, slot binding, start, completion and counters (those calls are
`pyhost.accel.control.AccelControl`, which PcieDriver derives from).

The driver builds scatter-gather descriptor chains in host memory it owns, rings one doorbell
(a RUN write) per chain, waits for the interrupt and checks the channel status against the
status write-back. It knows nothing about which backend it runs on: the same calls work on the
functional model and on the RTL under cocotb.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from pyhost.accel.control import (
    AccelBusyError,
    AccelControl,
    AccelIdleError,
    AccelProgram,
    AccelProgramError,
    AccelProtocolError,
    AccelRunError,
    AccelRunResult,
    AccelSlotError,
    AccelTimeout,
    AccelUnavailable,
    describe_accel_status,
)
from pyhost.backend import CardBackend, HostBuffer, HostRangeError
from pyhost.errors import (
    CardInfoError,
    CardNotFound,
    CardRangeError,
    CardVersionError,
    DmaProtocolError,
    DmaTimeout,
    DmaTransferError,
    DriverError,
    RegisterValueError,
    RequestLimitError,
    TransferSizeError,
    cleanup_note,
)
from pyhost.spec import regs
from pyhost.spec.accel import AccelConfig
from pyhost.spec.regs import Channel, DmaError

__all__ = ["DEFAULT_CHUNK_BYTES", "DEFAULT_POOL_DESCRIPTORS", "DEFAULT_TIMEOUT_S", "DESC_DTYPE",
           "AccelBusyError", "AccelIdleError", "AccelProgram", "AccelProgramError",
           "AccelProtocolError", "RegisterValueError",
           "AccelRunError", "AccelRunResult", "AccelSlotError", "AccelTimeout",
           "AccelUnavailable", "CardInfoError", "CardNotFound", "CardRangeError",
           "CardVersionError", "DmaProtocolError", "DmaTimeout", "DmaTransferError",
           "DriverError", "DriverStats", "HostRef", "PcieDriver", "Piece", "RawDescriptor",
           "RequestLimitError", "TransferSizeError", "check_card_range", "check_size",
           "describe_accel_status", "describe_status", "plan_chains", "split_transfer"]

#: A host memory location: a buffer from HostMemory.alloc (its start) or a bus address.
HostRef = HostBuffer | int

DEFAULT_TIMEOUT_S = 10.0
#: Bytes per descriptor: long transfers are split so one descriptor never holds the engine for
#: long and an error names a small range. DESC_MAX_LENGTH is the hard limit.
DEFAULT_CHUNK_BYTES = 1 << 20
#: Descriptors per channel pool: one chain (one doorbell) holds at most this many.
DEFAULT_POOL_DESCRIPTORS = 4096
#: Write-back slots are this far apart in the driver's write-back page.
_WB_STRIDE = 64

_STATUS = {f.name: f for f in regs.CH_STATUS_FIELDS}
_CTRL = {f.name: f for f in regs.CH_CTRL_FIELDS}
_IRQ = {f.name: f for f in regs.IRQ_FIELDS}
_VERSION = {f.name: f for f in regs.BY_NAME["VERSION"].fields}
_CAPS = {f.name: f for f in regs.BY_NAME["CAPS"].fields}
_IRQ_ALL = sum(f.mask for f in regs.IRQ_FIELDS)
_ACC_STATUS = {f.name: f for f in regs.BY_NAME["ACC_STATUS"].fields}

# The descriptor image as a numpy record, derived from the spec's struct format so a whole chain
# is built with a few vector operations instead of one struct.pack per descriptor.
_NP_CODES = {"I": "u4", "Q": "u8"}
DESC_DTYPE = np.dtype([
    (f.name, regs.DESC_FORMAT[0] + _NP_CODES[code])
    for f, code in zip(dataclasses.fields(regs.Descriptor), regs.DESC_FORMAT[1:], strict=True)])
assert DESC_DTYPE.itemsize == regs.DESC_SIZE, "descriptor dtype does not match DESC_SIZE"


# --- value objects ----------------------------------------------------------------------------

@dataclass
class DriverStats:
    """What the driver did; the memory manager's benchmark reads these.

    `descriptors` counts descriptors handed to the card; `bytes_*` count bytes of chains that
    completed without error.
    """

    calls: int = 0
    descriptors: int = 0
    doorbells: int = 0
    interrupts: int = 0
    errors: int = 0
    timeouts: int = 0
    bytes_h2c: int = 0
    bytes_c2h: int = 0
    bytes_c2c: int = 0
    mmio_reads: int = 0
    mmio_writes: int = 0
    accel_runs: int = 0
    accel_errors: int = 0
    accel_timeouts: int = 0

    def bytes(self, ch: Channel) -> int:
        return int(getattr(self, f"bytes_{Channel(ch).name.lower()}"))

    def copy(self) -> DriverStats:
        return dataclasses.replace(self)

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, 0)


@dataclass(frozen=True)
class RawDescriptor:
    """A descriptor exactly as given, for tests of the engine's error paths (`run_raw`).

    `stop` / `completed` default to True on the last descriptor of the list and False elsewhere;
    `next` defaults to the following descriptor's slot in the pool.
    """

    length: int
    src: int
    dst: int
    magic: int = regs.DESC_MAGIC
    stop: bool | None = None
    completed: bool | None = None
    eop: bool = False
    next: int | None = None


@dataclass(frozen=True)
class Piece:
    """One descriptor of a call: what it moves and which transfer of the call it belongs to."""

    src: int
    dst: int
    length: int
    transfer: int
    eop: bool


class _IntervalSet:
    """Disjoint, sorted [start, end) intervals: which card bytes a chain has written so far."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def overlaps(self, a: int, b: int) -> bool:
        i = bisect.bisect_left(self.starts, b) - 1   # last interval starting before b
        return i >= 0 and self.ends[i] > a

    def add(self, a: int, b: int) -> None:
        lo = bisect.bisect_left(self.ends, a)        # first interval that ends at/after a
        hi = bisect.bisect_right(self.starts, b)     # intervals from lo to hi touch [a, b)
        if lo < hi:
            a, b = min(a, self.starts[lo]), max(b, self.ends[hi - 1])
        self.starts[lo:hi] = [a]
        self.ends[lo:hi] = [b]


_HINTS = {
    DmaError.BAD_MAGIC: "the descriptor's control word lacks the magic "
                        "(build descriptors with pyhost.spec.regs.encode_descriptor)",
    DmaError.ZERO_LENGTH: "a descriptor must move at least one byte",
    DmaError.DESC_READ: "the descriptor address is not readable host memory",
    DmaError.SRC_READ: "the source range is not readable (outside card memory or host memory, "
                       "or host memory answered with an error)",
    DmaError.DST_WRITE: "the destination range is not writable (outside card memory or host "
                        "memory, or host memory answered with an error)",
    DmaError.STATUS_WRITE: "the status write-back address is not writable host memory",
    DmaError.ABORTED: "the channel was reset while it ran",
    DmaError.BAD_CONFIG: "DMA_MPS / DMA_MRRS must be powers of two in "
                         f"{regs.MPS_MIN}..{regs.MPS_MAX} and DMA_TAGS in 1..{regs.MAX_TAGS}; "
                         "set them with PcieDriver.set_request_limits",
}


def _reg_name(offset: int) -> str:
    names = [r.name for r in regs.REGISTERS if r.offset == offset]
    return f"{names[0]} ({offset:#x})" if names else f"{offset:#x}"


def describe_status(status: int) -> str:
    """A STATUS word in words, for messages."""
    flags = [n for n in ("BUSY", "DONE", "ERROR") if status & _STATUS[n].mask]
    code = _STATUS["ERR_CODE"].get(status)
    name = DmaError(code).name if code in DmaError._value2member_map_ else f"code {code}"
    return f"{status:#x} ({'|'.join(flags) or 'idle'}, {name})"


def _irq_bits(ch: Channel) -> tuple[int, int]:
    return _IRQ[f"{ch.name}_DONE"].mask, _IRQ[f"{ch.name}_ERR"].mask


# --- descriptors and chains: shared with the memory manager's dry run -------------------------

def check_size(size: int, i: int) -> int:
    """A transfer size as an int; TransferSizeError unless it is a positive integer."""
    if not isinstance(size, Integral) or isinstance(size, bool) or size <= 0:
        raise TransferSizeError(f"transfer {i}: size {size!r} is not a positive integer; "
                                "every transfer must move at least one byte")
    return int(size)


def check_card_range(addr: int, size: int, mem_size: int, i: int, what: str) -> int:
    """A card address as an int; CardRangeError unless [addr, addr + size) is card memory."""
    if not isinstance(addr, Integral) or isinstance(addr, bool):
        raise CardRangeError(f"transfer {i}: card {what} {addr!r} is not an integer address")
    if addr < 0 or addr + size > mem_size:
        raise CardRangeError(
            f"transfer {i}: card {what} [{addr:#x}, +{size:#x}) is outside card memory "
            f"[0, {mem_size:#x}) (the capacity the card reports in MEM_SIZE)")
    return int(addr)


def split_transfer(src: int, dst: int, size: int, i: int, chunk: int) -> list[Piece]:
    """Transfer `i` as descriptors of at most `chunk` bytes (the last one ends the packet)."""
    return [Piece(src + o, dst + o, min(chunk, size - o), i, o + chunk >= size)
            for o in range(0, size, chunk)]


def plan_chains(ch: Channel, pieces: Sequence[Piece], pool_descriptors: int
                ) -> Iterator[tuple[int, int]]:
    """(start, end) of each chain the pieces take: at most `pool_descriptors` per chain, and a
    C2C chain ends before a piece that reads card bytes an earlier piece of it writes.

    The engine pipelines descriptors (docs/dma.md): a later descriptor's source may be read
    before an earlier one's data is written, so such a pair must be in separate chains.
    """
    start = 0
    while start < len(pieces):
        end = min(len(pieces), start + pool_descriptors)
        if ch == Channel.C2C:
            written = _IntervalSet()
            for k in range(start, end):
                p = pieces[k]
                if k > start and written.overlaps(p.src, p.src + p.length):
                    end = k
                    break
                written.add(p.dst, p.dst + p.length)
        yield start, end
        start = end


# --- the driver -------------------------------------------------------------------------------

class PcieDriver(AccelControl):
    """DMA transfers between host memory and card memory through a `CardBackend`.

    Calls are blocking and serialised (one chain on the card at a time). Every single-transfer
    call is a batch of one: its descriptors form one chain, rung with one doorbell and finished
    by one interrupt, unless the transfer needs more descriptors than the pool holds
    (`pool_descriptors`), in which case it takes several chains one after the other.
    """

    def __init__(self, backend: CardBackend, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 pool_descriptors: int = DEFAULT_POOL_DESCRIPTORS) -> None:
        if not 0 < chunk_bytes <= regs.DESC_MAX_LENGTH:
            raise ValueError(f"chunk_bytes must be 1..{regs.DESC_MAX_LENGTH}, got {chunk_bytes}")
        if pool_descriptors < 1:
            raise ValueError(f"pool_descriptors must be at least 1, got {pool_descriptors}")
        self.backend = backend
        self.host = backend.host
        self.timeout_s = timeout_s
        self.chunk_bytes = chunk_bytes
        self.pool_descriptors = pool_descriptors
        self.stats = DriverStats()
        self._lock = threading.RLock()

        card_id = self._rd(regs.offset("CARD_ID"))
        if card_id != regs.CARD_ID:
            raise CardNotFound(f"CARD_ID reads {card_id:#010x}, expected {regs.CARD_ID:#010x}: "
                               "the backend is not this card (or its BAR0 is not mapped)")
        self.version = self._rd(regs.offset("VERSION"))
        major = _VERSION["MAJOR"].get(self.version)
        if major != regs.VERSION_MAJOR:
            raise CardVersionError(
                f"card register map version {major}.{_VERSION['MINOR'].get(self.version)} "
                f"is not major version {regs.VERSION_MAJOR}; use a driver built from the "
                "card's pyhost.spec")
        self.mem_size = self._rd64("MEM_SIZE_LO")
        if self.mem_size == 0:
            raise CardInfoError("the card reports 0 bytes of memory (MEM_SIZE); check the card's "
                                "memory size parameter")
        caps = self._rd(regs.offset("CAPS"))
        if _CAPS["CHANNELS"].get(caps) < len(Channel):
            raise CardInfoError(f"the card has {_CAPS['CHANNELS'].get(caps)} DMA channels, "
                                f"the driver needs {len(Channel)}")

        # Host memory the driver owns: a descriptor pool per channel and one write-back page.
        self._pools = {ch: self.host.alloc(pool_descriptors * regs.DESC_SIZE) for ch in Channel}
        self._wb_page = self.host.alloc(_WB_STRIDE * len(Channel))
        self._owned = [*self._pools.values(), self._wb_page]

        for ch in Channel:
            self.reset_channel(ch)    # a previous user may have left a chain running
        self.has_accel = bool(_CAPS["ACCEL"].get(caps))
        self._accel_cfg: AccelConfig | None = None
        self._accel_prog: AccelProgram | None = None   # the program started last
        self._accel_started = False                    # started and not yet waited for
        if self.has_accel and self._rd(regs.offset("ACC_STATUS")) & _ACC_STATUS["BUSY"].mask:
            self.accel_abort()        # ... or a program
        self._wr(regs.offset("IRQ_STATUS"), _IRQ_ALL)    # W1C: drop anything stale
        self._wr(regs.offset("IRQ_MASK"), _IRQ_ALL)

    # --- lifecycle and information -----------------------------------------------------------

    def close(self) -> None:
        """Disable the interrupt and return the driver's host memory."""
        with self._lock:
            if not self._owned:
                return
            self._wr(regs.offset("IRQ_MASK"), 0)
            for buf in self._owned:
                self.host.free(buf)
            self._owned = []

    def __enter__(self) -> PcieDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writeback_address(self, ch: Channel) -> int:
        """Host address the channel's status is written back to."""
        return self._wb_page.address + _WB_STRIDE * Channel(ch)

    def descriptor_pool(self, ch: Channel) -> HostBuffer:
        """The channel's descriptor pool; descriptor i of a chain is at 32 * i."""
        return self._pools[Channel(ch)]

    def set_request_limits(self, *, mps: int | None = None, mrrs: int | None = None,
                           tags: int | None = None) -> None:
        """Set max payload size, max read request size (bytes) and outstanding read tags."""
        for name, v, lo, hi in (("mps", mps, regs.MPS_MIN, regs.MPS_MAX),
                                ("mrrs", mrrs, regs.MRRS_MIN, regs.MRRS_MAX)):
            if v is not None and not (lo <= v <= hi and v & (v - 1) == 0):
                raise RequestLimitError(f"{name}={v}: must be a power of two in {lo}..{hi}")
        if tags is not None and not 1 <= tags <= regs.MAX_TAGS:
            raise RequestLimitError(f"tags={tags}: must be in 1..{regs.MAX_TAGS}")
        with self._lock:
            for reg, v in (("DMA_MPS", mps), ("DMA_MRRS", mrrs), ("DMA_TAGS", tags)):
                if v is not None:
                    self._wr(regs.offset(reg), v)

    def request_limits(self) -> tuple[int, int, int]:
        """(max payload size, max read request size, tags) as the card holds them."""
        with self._lock:
            mps, mrrs, tags = (self._rd(regs.offset(r)) for r in ("DMA_MPS", "DMA_MRRS",
                                                                    "DMA_TAGS"))
            return mps, mrrs, tags

    def channel_counters(self, ch: Channel) -> tuple[int, int]:
        """(bytes moved, descriptors completed) by the channel since card reset."""
        ch = Channel(ch)
        with self._lock:
            return (self._rd64(f"{ch.name}_BYTES_LO"),
                    self._rd(regs.channel_reg(ch, "DESCS")))

    def dram_counters(self) -> dict[str, int]:
        with self._lock:
            return {c: self._rd64(f"DRAM_{c.upper()}_LO") for c in regs.DRAM_COUNTERS}

    # --- transfers ----------------------------------------------------------------------------

    def write_data(self, host: HostRef, size: int, card_addr: int) -> None:
        """Copy `size` bytes from host memory to card memory at `card_addr`."""
        self.write_batch([(host, size, card_addr)])

    def read_data(self, card_addr: int, size: int, host: HostRef) -> None:
        """Copy `size` bytes from card memory at `card_addr` to host memory."""
        self.read_batch([(card_addr, size, host)])

    def copy_on_card(self, src: int, size: int, dst: int) -> None:
        """Copy `size` bytes inside card memory; overlapping ranges copy like memmove."""
        self.copy_batch([(src, size, dst)])

    def write_batch(self, transfers: Sequence[tuple[HostRef, int, int]]) -> None:
        """Many (host, size, card_addr) uploads as one chain: one doorbell, one interrupt."""
        checked = []
        for i, (host, size, card) in enumerate(transfers):
            size = check_size(size, i)
            checked.append((self._host_addr(host, size, i), size,
                            check_card_range(card, size, self.mem_size, i, "destination")))
        self._transfer(Channel.H2C, [p for i, (h, n, c) in enumerate(checked)
                                     for p in self._split(h, c, n, i)])

    def read_batch(self, transfers: Sequence[tuple[int, int, HostRef]]) -> None:
        """Many (card_addr, size, host) downloads as one chain: one doorbell, one interrupt."""
        checked = []
        for i, (card, size, host) in enumerate(transfers):
            size = check_size(size, i)
            checked.append((check_card_range(card, size, self.mem_size, i, "source"), size,
                            self._host_addr(host, size, i)))
        self._transfer(Channel.C2H, [p for i, (c, n, h) in enumerate(checked)
                                     for p in self._split(c, h, n, i)])

    def copy_batch(self, transfers: Sequence[tuple[int, int, int]]) -> None:
        """Many (src, size, dst) card-to-card copies, in list order, each like memmove."""
        pieces: list[Piece] = []
        for i, (src, size, dst) in enumerate(transfers):
            size = check_size(size, i)
            check_card_range(src, size, self.mem_size, i, "source")
            check_card_range(dst, size, self.mem_size, i, "destination")
            if src < dst < src + size:
                # Moving up over itself: descending pieces no longer than the distance, so no
                # piece reads what an earlier one wrote.
                step = min(self.chunk_bytes, dst - src)
                off = size
                while off > 0:
                    n = min(step, off)
                    off -= n
                    pieces.append(Piece(src + off, dst + off, n, i, off == 0))
            else:
                # Moving down (or disjoint): ascending pieces; a byte is read before any write
                # can reach it.
                pieces.extend(self._split(src, dst, size, i))
        self._transfer(Channel.C2C, pieces)

    def run_raw(self, ch: Channel, descriptors: Sequence[RawDescriptor]) -> None:
        """Run descriptors exactly as given (bad magic, zero length, any address) as one chain.

        For tests of the engine; raises DmaTransferError like the transfer calls.
        """
        ch = Channel(ch)
        n = len(descriptors)
        if not 0 < n <= self.pool_descriptors:
            raise ValueError(f"run_raw takes 1..{self.pool_descriptors} descriptors, got {n}")
        pool = self._pools[ch]
        arr = np.zeros(n, DESC_DTYPE)
        for i, d in enumerate(descriptors):
            for name, v, bits in (("magic", d.magic, 16), ("length", d.length, 32),
                                  ("src", d.src, 64), ("dst", d.dst, 64),
                                  ("next", 0 if d.next is None else d.next, 64)):
                if isinstance(v, bool) or not isinstance(v, Integral) or not 0 <= v < 1 << bits:
                    raise ValueError(f"raw descriptor {i}: {name} = {v!r} does not fit the "
                                     f"descriptor's {bits}-bit field")
            last = i == n - 1
            stop = last if d.stop is None else d.stop
            done = last if d.completed is None else d.completed
            arr[i] = (
                (d.magic << regs.DESC_MAGIC_SHIFT) | (regs.DESC_CTRL_STOP if stop else 0)
                | (regs.DESC_CTRL_COMPLETED if done else 0) | (regs.DESC_CTRL_EOP if d.eop else 0),
                d.length, d.src, d.dst,
                (0 if last else pool.address + regs.DESC_SIZE * (i + 1)) if d.next is None
                else d.next)
        with self._lock:
            self.stats.calls += 1

            def describe(i: int) -> tuple[int | None, str]:
                d = descriptors[i]
                return i, f"raw descriptor {i}: {d.src:#x} -> {d.dst:#x}, {d.length} bytes"
            self._run_chain(ch, arr, 0, describe, sum(d.length for d in descriptors))

    def reset_channel(self, ch: Channel) -> None:
        """RESET the channel (aborting a running chain) and clear its interrupt bits.

        An abort drains the requests in flight before the channel goes idle and raises its ERR
        interrupt, so the bits are cleared only after that, or a stale ERR bit would greet the
        next chain. The waits poll STATUS and IRQ_STATUS; they only happen after an abort.
        """
        ch = Channel(ch)
        with self._lock:
            self._wr(regs.channel_reg(ch, "CTRL"), _CTRL["RESET"].mask)
            deadline = time.monotonic() + self.timeout_s
            status = self._rd(regs.channel_reg(ch, "STATUS"))
            while status & _STATUS["BUSY"].mask:
                if time.monotonic() > deadline:
                    raise DmaProtocolError(
                        f"{ch.name} is still BUSY {self.timeout_s} s after RESET (STATUS "
                        f"{describe_status(status)}); the card does not drain an aborted chain")
                status = self._rd(regs.channel_reg(ch, "STATUS"))
            _, err_bit = _irq_bits(ch)
            if _STATUS["ERR_CODE"].get(status) == DmaError.ABORTED:
                # This RESET aborted a chain (an idle RESET clears the code): its ERR bit
                # follows BUSY = 0 by a cycle or so.
                while not self._rd(regs.offset("IRQ_STATUS")) & err_bit:
                    if time.monotonic() > deadline:
                        raise DmaProtocolError(
                            f"{ch.name} reads ABORTED after RESET but IRQ_STATUS never showed "
                            f"{ch.name}_ERR")
            self._wr(regs.offset("IRQ_STATUS"), sum(_irq_bits(ch)))

    # --- internals ----------------------------------------------------------------------------

    def _rd(self, offset: int) -> int:
        self.stats.mmio_reads += 1
        return self.backend.mmio_read(offset)

    def _wr(self, offset: int, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, Integral) \
                or not 0 <= value <= 0xFFFF_FFFF:
            raise RegisterValueError(f"register {_reg_name(offset)}: {value!r} is not a 32-bit "
                                     "value; the driver does not truncate register values")
        self.stats.mmio_writes += 1
        self.backend.mmio_write(offset, int(value))

    def _rd64(self, lo_name: str) -> int:
        """A LO/HI register pair; HI is read twice so a carry between the reads is not torn."""
        lo_off, hi_off = regs.offset(lo_name), regs.offset(lo_name[:-2] + "HI")
        while True:
            hi = self._rd(hi_off)
            lo = self._rd(lo_off)
            if self._rd(hi_off) == hi:
                return (hi << 32) | lo

    def _host_addr(self, host: HostRef, size: int, i: int) -> int:
        if isinstance(host, HostBuffer):
            if host.memory is not self.host:
                raise HostRangeError(f"transfer {i}: {host!r} belongs to another HostMemory "
                                     "than the card's; allocate it from backend.host")
            if size > host.size:
                raise HostRangeError(
                    f"transfer {i}: {size} bytes do not fit {host!r}; pass a larger buffer or "
                    "a smaller size")
            if not self.host.is_allocated(host.address, size):
                raise HostRangeError(f"transfer {i}: {host!r} is not allocated (freed?)")
            return host.address
        if not isinstance(host, Integral):
            raise TypeError(f"transfer {i}: host must be a HostBuffer or a bus address (int), "
                            f"got {type(host).__name__}")
        addr = int(host)
        self.host.offset(addr, size)   # raises HostRangeError outside host memory
        for buf in self._owned:
            if addr < buf.end and buf.address < addr + size:
                raise HostRangeError(
                    f"transfer {i}: host range [{addr:#x}, +{size:#x}) overlaps the driver's "
                    f"own descriptor / write-back memory {buf!r}; allocate transfer buffers "
                    "with backend.host.alloc")
        return addr

    def _split(self, src: int, dst: int, size: int, i: int) -> list[Piece]:
        return split_transfer(src, dst, size, i, self.chunk_bytes)

    def _transfer(self, ch: Channel, pieces: list[Piece]) -> None:
        """Run the pieces as few chains as the pool and the C2C data hazards allow."""
        with self._lock:
            self.stats.calls += 1
            for start, end in self._plan(ch, pieces):
                chain = pieces[start:end]
                arr = np.zeros(len(chain), DESC_DTYPE)
                arr["control"] = (regs.DESC_MAGIC << regs.DESC_MAGIC_SHIFT) | np.array(
                    [regs.DESC_CTRL_EOP if p.eop else 0 for p in chain], dtype=np.uint32)
                arr["control"][-1] |= regs.DESC_CTRL_STOP | regs.DESC_CTRL_COMPLETED
                arr["length"] = [p.length for p in chain]
                arr["src"] = [p.src for p in chain]
                arr["dst"] = [p.dst for p in chain]
                pool = self._pools[ch].address
                arr["next"][:-1] = pool + regs.DESC_SIZE * np.arange(1, len(chain), dtype=np.uint64)

                def describe(k: int, base: int = start) -> tuple[int | None, str]:
                    p = pieces[base + k]
                    return p.transfer, (f"transfer {p.transfer}: {p.src:#x} -> {p.dst:#x}, "
                                        f"{p.length} bytes")
                self._run_chain(ch, arr, start, describe, sum(p.length for p in chain))

    def _plan(self, ch: Channel, pieces: Sequence[Piece]) -> Iterator[tuple[int, int]]:
        """The chains of one call (`plan_chains`)."""
        return plan_chains(ch, pieces, self.pool_descriptors)

    def _run_chain(self, ch: Channel, arr: np.ndarray, first: int,
                   describe: Callable[[int], tuple[int | None, str]], nbytes: int) -> None:
        """Write the chain into the pool, ring the doorbell, wait, check; raise on failure."""
        n = len(arr)
        pool = self._pools[ch]
        pool.view(0, arr.nbytes)[:] = arr.view(np.uint8)
        wb = self.writeback_address(ch)
        # A status word of 0 is impossible after a stop, so zeros mark "not written back".
        self.host.view(wb, regs.WB_SIZE)[:] = 0
        self._wr(regs.channel_reg(ch, "DESC_LO"), pool.address & 0xFFFF_FFFF)
        self._wr(regs.channel_reg(ch, "DESC_HI"), pool.address >> 32)
        self._wr(regs.channel_reg(ch, "WB_LO"), wb & 0xFFFF_FFFF)
        self._wr(regs.channel_reg(ch, "WB_HI"), wb >> 32)
        self._wr(regs.channel_reg(ch, "CTRL"), _CTRL["RUN"].mask)
        self.stats.doorbells += 1
        self.stats.descriptors += n

        done_bit, err_bit = _irq_bits(ch)
        t0 = time.monotonic()
        if not self.backend.wait_irq(self.timeout_s):
            status = self._rd(regs.channel_reg(ch, "STATUS"))
            completed = self._rd(regs.channel_reg(ch, "COMPLETED"))
            note = cleanup_note("resetting the channel", lambda: self.reset_channel(ch))
            self.stats.timeouts += 1
            progress = (f"{completed} of {n} descriptors ({nbytes} bytes) had completed"
                        if completed <= n else
                        f"COMPLETED reads {completed} for a chain of {n} descriptor"
                        f"{'s' if n != 1 else ''}: the engine ran past the chain's end, which "
                        "means it has no STOP or links back to itself")
            raise DmaTimeout(
                f"{ch.name} DMA: no interrupt after {time.monotonic() - t0:.3g} s "
                f"(timeout_s={self.timeout_s}); {progress}, STATUS {describe_status(status)}. "
                f"The channel has been reset{note}. A slow simulation needs a larger "
                "PcieDriver(timeout_s=...); a chain that never ends has no STOP", ch, n,
                completed)
        irq = self._rd(regs.offset("IRQ_STATUS"))
        if not irq & (done_bit | err_bit):
            raise DmaProtocolError(
                f"{ch.name} DMA: the interrupt is up but IRQ_STATUS {irq:#x} has no {ch.name} "
                "bit; another user of the card left interrupts pending")
        status = self._rd(regs.channel_reg(ch, "STATUS"))
        completed = self._rd(regs.channel_reg(ch, "COMPLETED"))
        wb_completed, wb_status = struct.unpack(regs.WB_FORMAT, self.host.read(wb, regs.WB_SIZE))
        self._wr(regs.offset("IRQ_STATUS"), irq & (done_bit | err_bit))
        self.stats.interrupts += 1
        writeback_ok = (wb_completed, wb_status) == (completed, status)

        if status & _STATUS["ERROR"].mask:
            self.stats.errors += 1
            reset_note = cleanup_note("resetting the channel", lambda: self.reset_channel(ch))
            code_value = _STATUS["ERR_CODE"].get(status)
            code = DmaError(code_value) if code_value in DmaError._value2member_map_ \
                else DmaError.NONE
            if code == DmaError.BAD_CONFIG:
                transfer, where = None, "the start of the chain"
            elif completed < n:
                transfer, what = describe(completed)
                where = f"descriptor {first + completed} ({what})"
            else:
                transfer, where = None, f"the status write-back after all {n} descriptors"
            note = "" if writeback_ok else (
                f" [write-back reads completed={wb_completed}, status {describe_status(wb_status)}"
                "]")
            raise DmaTransferError(
                f"{ch.name} DMA failed at {where}: {code.name} (STATUS "
                f"{describe_status(status)}): {_HINTS.get(code, 'unknown error code')}. The "
                f"channel has been reset{reset_note}.{note}", ch, first + completed, code,
                transfer)
        if (status & (_STATUS["BUSY"].mask | _STATUS["DONE"].mask)) != _STATUS["DONE"].mask \
                or not irq & done_bit or irq & err_bit or completed != n:
            reset_note = cleanup_note("resetting the channel", lambda: self.reset_channel(ch))
            raise DmaProtocolError(
                f"{ch.name} DMA: after the interrupt STATUS is {describe_status(status)}, "
                f"COMPLETED {completed} for {n} descriptors, IRQ_STATUS {irq:#x}; expected "
                f"DONE, {n} completed and only the DONE interrupt{reset_note}")
        if not writeback_ok:
            raise DmaProtocolError(
                f"{ch.name} DMA: the status write-back at {wb:#x} reads completed="
                f"{wb_completed}, status {describe_status(wb_status)}, but the registers say "
                f"{completed}, {describe_status(status)}")
        setattr(self.stats, f"bytes_{ch.name.lower()}", self.stats.bytes(ch) + nbytes)

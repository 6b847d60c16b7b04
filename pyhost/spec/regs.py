"""BAR0 register map, DMA descriptor and status layouts, error codes: the card's host interface.

Defined once here; ``python -m pyhost.spec.gen`` writes rtl/include/card_regs.vh and
docs/registers.md from it, and a unit test fails when either is stale. Everything is little
endian. BAR0 is AXI4-Lite with 32-bit data; 64-bit values are two registers, low word first.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

CARD_ID = 0xDC0ACA2D
VERSION_MAJOR = 1
VERSION_MINOR = 0
VERSION = (VERSION_MAJOR << 16) | VERSION_MINOR


class Access:
    RO = "RO"      # read only
    RW = "RW"      # read / write
    W1C = "W1C"    # read; writing 1 clears the bit
    WO = "WO"      # write only (reads as 0); used for self-clearing commands


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple[Field, ...] = field(default_factory=tuple)
    reset: int = 0


# --- DMA channels ---------------------------------------------------------------------------------

class Channel(IntEnum):
    """DMA channels. H2C: host to card; C2H: card to host; C2C: card to card (compaction)."""

    H2C = 0
    C2H = 1
    C2C = 2


NUM_CHANNELS = len(Channel)
CHANNEL_BASE = 0x100
CHANNEL_STRIDE = 0x40


class DmaError(IntEnum):
    """Error codes in a channel's STATUS.ERR_CODE and status write-back."""

    NONE = 0
    BAD_MAGIC = 1        # descriptor control word has the wrong magic
    ZERO_LENGTH = 2      # descriptor length is 0
    DESC_READ = 3        # fetching a descriptor from host memory failed (SLVERR/DECERR)
    SRC_READ = 4         # reading the source failed (host for H2C, card for C2H/C2C)
    DST_WRITE = 5        # writing the destination failed (card for H2C/C2C, host for C2H)
    STATUS_WRITE = 6     # writing the status write-back to host memory failed
    ABORTED = 7          # the channel was reset while running
    BAD_CONFIG = 8       # MPS / MRRS / tag limit register out of range at start


# Descriptor: 32 bytes.
DESC_SIZE = 32
DESC_MAGIC = 0xAD4B
DESC_CTRL_STOP = 1 << 0        # last descriptor of the chain
DESC_CTRL_COMPLETED = 1 << 1   # raise the done interrupt when this descriptor completes
DESC_CTRL_EOP = 1 << 4         # end of packet (informational; kept for XDMA likeness)
DESC_MAGIC_SHIFT = 16
DESC_FORMAT = "<IIQQQ"         # control, length, source, destination, next
DESC_MAX_LENGTH = (1 << 28) - 1  # length field bits used by the engine

# Status write-back: 8 bytes written to the channel's WB address when the channel stops.
WB_SIZE = 8
WB_FORMAT = "<II"              # completed descriptor count, status word (same as STATUS)

# PCIe request limits (bytes), CSR-configurable.
MPS_MIN, MPS_MAX = 128, 4096
MRRS_MIN, MRRS_MAX = 128, 4096
DEFAULT_MPS = 256
DEFAULT_MRRS = 512
MAX_TAGS = 32                  # outstanding host reads the engine can track
DEFAULT_TAGS = 32


def encode_descriptor(length: int, src: int, dst: int, nxt: int = 0, stop: bool = False,
                      completed: bool = False, eop: bool = False,
                      magic: int = DESC_MAGIC) -> bytes:
    """The 32-byte descriptor image as it sits in host memory."""
    ctrl = (magic << DESC_MAGIC_SHIFT) | (DESC_CTRL_STOP if stop else 0) \
        | (DESC_CTRL_COMPLETED if completed else 0) | (DESC_CTRL_EOP if eop else 0)
    return struct.pack(DESC_FORMAT, ctrl, length, src, dst, nxt)


@dataclass(frozen=True)
class Descriptor:
    control: int
    length: int
    src: int
    dst: int
    next: int

    @classmethod
    def decode(cls, raw: bytes) -> Descriptor:
        return cls(*struct.unpack(DESC_FORMAT, raw[:DESC_SIZE]))

    @property
    def magic(self) -> int:
        return self.control >> DESC_MAGIC_SHIFT

    @property
    def stop(self) -> bool:
        return bool(self.control & DESC_CTRL_STOP)

    @property
    def completed(self) -> bool:
        return bool(self.control & DESC_CTRL_COMPLETED)


# --- the register map -----------------------------------------------------------------------------

CH_CTRL_FIELDS = (
    Field("RUN", 0, 1, "write 1: start processing the chain at DESC (ignored while BUSY)"),
    Field("RESET", 1, 1, "write 1: stop the channel, drop its state (ABORTED if it was running)"),
)
CH_STATUS_FIELDS = (
    Field("BUSY", 0, 1, "the channel is processing a chain"),
    Field("DONE", 1, 1, "the last chain completed without error"),
    Field("ERROR", 2, 1, "the last chain stopped on an error"),
    Field("ERR_CODE", 8, 8, "DmaError code of that error"),
)

IRQ_FIELDS = tuple(
    f for ch in Channel for f in (
        Field(f"{ch.name}_DONE", 2 * ch, 1, f"{ch.name} chain completed (descriptor with "
              "COMPLETED)"),
        Field(f"{ch.name}_ERR", 2 * ch + 1, 1, f"{ch.name} stopped on an error"),
    ))

#: DRAM controller counters exposed as 64-bit LO/HI pairs, in this order.
DRAM_COUNTERS = ("rd", "wr", "row_hit", "row_miss", "row_conflict", "refresh", "ref_stall",
                 "busy")
DRAM_COUNTER_BASE = 0x200


def _channel_registers(ch: Channel) -> list[Register]:
    b = CHANNEL_BASE + CHANNEL_STRIDE * ch
    n = ch.name
    return [
        Register(f"{n}_CTRL", b + 0x00, Access.WO, f"{n} control (self-clearing commands)",
                 CH_CTRL_FIELDS),
        Register(f"{n}_STATUS", b + 0x04, Access.RO, f"{n} status", CH_STATUS_FIELDS),
        Register(f"{n}_DESC_LO", b + 0x08, Access.RW, f"{n} first descriptor host address [31:0]"),
        Register(f"{n}_DESC_HI", b + 0x0C, Access.RW, f"{n} first descriptor host address "
                 "[63:32]"),
        Register(f"{n}_COMPLETED", b + 0x10, Access.RO, f"{n} descriptors completed in the current"
                 " or last chain"),
        Register(f"{n}_WB_LO", b + 0x14, Access.RW, f"{n} status write-back host address [31:0]"
                 " (0 = none)"),
        Register(f"{n}_WB_HI", b + 0x18, Access.RW, f"{n} status write-back host address [63:32]"),
        Register(f"{n}_BYTES_LO", b + 0x1C, Access.RO, f"{n} bytes moved since reset [31:0]"),
        Register(f"{n}_BYTES_HI", b + 0x20, Access.RO, f"{n} bytes moved since reset [63:32]"),
        Register(f"{n}_DESCS", b + 0x24, Access.RO, f"{n} descriptors completed since reset"),
    ]


REGISTERS: tuple[Register, ...] = tuple([
    Register("CARD_ID", 0x000, Access.RO, "card identification", reset=CARD_ID),
    Register("VERSION", 0x004, Access.RO, "register map version", (
        Field("MINOR", 0, 16, "minor version"), Field("MAJOR", 16, 16, "major version")),
        reset=VERSION),
    Register("MEM_SIZE_LO", 0x008, Access.RO, "card memory size in bytes [31:0]"),
    Register("MEM_SIZE_HI", 0x00C, Access.RO, "card memory size in bytes [63:32]"),
    Register("BUS_WIDTH", 0x010, Access.RO, "card AXI data bus width in bits"),
    Register("SCRATCH", 0x014, Access.RW, "scratch register for software"),
    Register("CAPS", 0x018, Access.RO, "capabilities", (
        Field("CHANNELS", 0, 4, "DMA channels"),
        Field("TAGS", 4, 8, "maximum outstanding host reads"),
        Field("ACCEL", 12, 1, "an accelerator is present"))),
    Register("IRQ_STATUS", 0x020, Access.W1C, "interrupt status; the interrupt line is high "
             "while any bit is set in both IRQ_STATUS and IRQ_MASK", IRQ_FIELDS),
    Register("IRQ_MASK", 0x024, Access.RW, "interrupt enables, bit per IRQ_STATUS bit", IRQ_FIELDS),
    Register("DMA_MPS", 0x030, Access.RW, f"max payload size of host writes in bytes "
             f"({MPS_MIN}..{MPS_MAX}, power of two)", reset=DEFAULT_MPS),
    Register("DMA_MRRS", 0x034, Access.RW, f"max read request size in bytes ({MRRS_MIN}.."
             f"{MRRS_MAX}, power of two)", reset=DEFAULT_MRRS),
    Register("DMA_TAGS", 0x038, Access.RW, f"outstanding host reads allowed (1..{MAX_TAGS})",
             reset=DEFAULT_TAGS),
    *[r for ch in Channel for r in _channel_registers(ch)],
    *[r for i, c in enumerate(DRAM_COUNTERS) for r in (
        Register(f"DRAM_{c.upper()}_LO", DRAM_COUNTER_BASE + 8 * i, Access.RO,
                 f"DRAM counter {c} [31:0]"),
        Register(f"DRAM_{c.upper()}_HI", DRAM_COUNTER_BASE + 8 * i + 4, Access.RO,
                 f"DRAM counter {c} [63:32]"))],
])

BY_NAME = {r.name: r for r in REGISTERS}
BAR0_SIZE = 0x1000


def offset(name: str) -> int:
    return BY_NAME[name].offset


def channel_reg(ch: Channel, reg: str) -> int:
    """Offset of a channel register by its short name (CTRL, STATUS, DESC_LO, ...)."""
    return BY_NAME[f"{Channel(ch).name}_{reg}"].offset


def _check() -> None:
    seen: dict[int, str] = {}
    for r in REGISTERS:
        assert r.offset % 4 == 0 and r.offset < BAR0_SIZE, r.name
        assert r.offset not in seen, f"{r.name} overlaps {seen.get(r.offset)}"
        seen[r.offset] = r.name


_check()

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

    def get(self, value: int) -> int:
        """This field of a register value."""
        return (value & self.mask) >> self.lsb


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
    )) + (
    Field("ACCEL_DONE", 2 * len(Channel), 1, "the accelerator reached END with every unit idle"),
    Field("ACCEL_ERR", 2 * len(Channel) + 1, 1, "the accelerator stopped on an error"),
)

#: DRAM controller counters exposed as 64-bit LO/HI pairs, in this order.
DRAM_COUNTERS = ("rd", "wr", "row_hit", "row_miss", "row_conflict", "refresh", "ref_stall",
                 "busy")
DRAM_COUNTER_BASE = 0x200

# --- accelerator (rtl/accel; the ISA is in pyhost/spec/isa.py) -----------------------------------

#: The accelerator's registers occupy [ACCEL_BASE, ACCEL_END); csr forwards them to rtl/accel.
ACCEL_BASE = 0x400
ACCEL_END = 0x800
ACCEL_SLOT_BASE = 0x440
#: Accelerator performance counters as 64-bit LO/HI pairs, in this order; they restart at START.
ACCEL_COUNTERS = (
    ("cycles", "cycles from START to done or error"),
    ("insns", "instructions dispatched"),
    ("load_busy", "cycles the load unit runs an instruction"),
    ("load_stall", "cycles the load unit waits for a dependency token"),
    ("compute_busy", "cycles the compute unit runs an instruction"),
    ("compute_stall", "cycles the compute unit waits for a dependency token"),
    ("store_busy", "cycles the store unit runs an instruction"),
    ("store_stall", "cycles the store unit waits for a dependency token"),
    ("gemm_busy", "cycles the compute unit runs GEMM instructions"),
    ("macs", "multiply-accumulates performed (N*N per GEMM iteration)"),
    ("bytes_loaded", "bytes LOAD read from card memory"),
    ("bytes_stored", "bytes STORE wrote to card memory"),
)
ACCEL_COUNTER_BASE = 0x480


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
        Field("ACCEL", 12, 1, "an accelerator is present (ACC_* registers)"))),
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
    Register("ACC_CTRL", 0x400, Access.WO, "accelerator control (self-clearing commands)", (
        Field("START", 0, 1, "write 1: run INSN_COUNT instructions from INSN_BASE (ignored "
              "while BUSY); restarts the counters"),
        Field("ABORT", 1, 1, "write 1: stop a running program with ABORTED"))),
    Register("ACC_STATUS", 0x404, Access.RO, "accelerator status", (
        Field("BUSY", 0, 1, "a program is running"),
        Field("DONE", 1, 1, "the last program reached END"),
        Field("ERROR", 2, 1, "the last program stopped on an error"),
        Field("ERR_CODE", 8, 8, "AccelError code of that error (pyhost/spec/isa.py)"))),
    Register("ACC_ERR_PC", 0x408, Access.RO, "index of the instruction that caused the error"),
    Register("ACC_INSN_BASE", 0x40C, Access.RW, "card address of the first instruction "
             "(16-byte aligned)"),
    Register("ACC_INSN_COUNT", 0x410, Access.RW, "instructions in the program (END included)"),
    Register("ACC_CFG_N", 0x420, Access.RO, "GEMM array size N (N x N int8 MACs per cycle)"),
    Register("ACC_CFG_ISA", 0x424, Access.RO, "ISA version"),
    Register("ACC_CFG_INP_DEPTH", 0x428, Access.RO, "input scratchpad rows (N int8 each)"),
    Register("ACC_CFG_WGT_DEPTH", 0x42C, Access.RO, "weight scratchpad rows (N x N int8 each)"),
    Register("ACC_CFG_ACC_DEPTH", 0x430, Access.RO, "accumulator scratchpad rows (N int32 "
             "each)"),
    Register("ACC_CFG_QUEUE_DEPTH", 0x434, Access.RO, "instructions per unit queue"),
    *[Register(f"ACC_SLOT{i}", ACCEL_SLOT_BASE + 4 * i, Access.RW,
               f"base-address slot {i} (card address)") for i in range(16)],
    *[r for i, (c, doc) in enumerate(ACCEL_COUNTERS) for r in (
        Register(f"ACC_{c.upper()}_LO", ACCEL_COUNTER_BASE + 8 * i, Access.RO, f"{doc} [31:0]"),
        Register(f"ACC_{c.upper()}_HI", ACCEL_COUNTER_BASE + 8 * i + 4, Access.RO,
                 f"{doc} [63:32]"))],
])

BY_NAME = {r.name: r for r in REGISTERS}
BAR0_SIZE = 0x1000


def offset(name: str) -> int:
    return BY_NAME[name].offset


def channel_reg(ch: Channel, reg: str) -> int:
    """Offset of a channel register by its short name (CTRL, STATUS, DESC_LO, ...)."""
    return BY_NAME[f"{Channel(ch).name}_{reg}"].offset


def _check() -> None:
    from pyhost.spec import isa
    assert sum(1 for r in REGISTERS if r.name.startswith("ACC_SLOT")) == isa.NUM_SLOTS
    assert ACCEL_COUNTER_BASE + 8 * len(ACCEL_COUNTERS) <= ACCEL_END
    for r in REGISTERS:
        assert (ACCEL_BASE <= r.offset < ACCEL_END) == r.name.startswith("ACC_"), r.name
    seen: dict[int, str] = {}
    for r in REGISTERS:
        assert r.offset % 4 == 0 and r.offset < BAR0_SIZE, r.name
        assert r.offset not in seen, f"{r.name} overlaps {seen.get(r.offset)}"
        seen[r.offset] = r.name


_check()

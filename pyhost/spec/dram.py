"""DDR4 timing, geometry and command-trace encoding of the card's DRAM controller.

The controller runs at one quarter of the DRAM clock (DDR4-3200: 1600 MHz DRAM clock, 400 MHz
controller clock). One BL8 burst on the 64-bit channel is 64 bytes and lasts 4 DRAM clocks, which
is exactly one controller cycle, so a 512-bit AXI data bus at the controller clock has the same
peak bandwidth as the DRAM channel (25.6 GB/s). Timings are given in DRAM clocks (tCK) as the
JEDEC tables give them and converted to controller cycles by rounding up, except tREFI, which is
a maximum interval and is rounded down.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: DRAM clocks per controller clock (the 1:4 ratio of a DDR4 PHY with a quarter-rate controller).
CLOCK_RATIO = 4
#: DRAM clock period of DDR4-3200 in nanoseconds.
TCK_NS = 0.625
#: Controller clock period in nanoseconds.
CTRL_CLK_NS = TCK_NS * CLOCK_RATIO

#: Command codes on the controller's command-trace ports.
CMD_NOP = 0
CMD_ACT = 1
CMD_PRE = 2
CMD_REF = 3
CMD_RD = 4
CMD_WR = 5
CMD_PREA = 6    # precharge all banks (before a refresh)
CMD_NAMES = {CMD_NOP: "NOP", CMD_ACT: "ACT", CMD_PRE: "PRE", CMD_REF: "REF", CMD_RD: "RD",
             CMD_WR: "WR", CMD_PREA: "PREA"}

#: Geometry of one rank of x8 DDR4 devices on a 64-bit channel: 4 bank groups of 4 banks, a
#: 1 KiB page per device (8 KiB per rank), i.e. 128 BL8 column bursts per row.
BG_BITS = 2
BA_BITS = 2
COL_BITS = 7
#: Refreshes that may be postponed (DDR4 allows up to 8).
REF_POSTPONE_MAX = 8
#: 1: the row bits are XOR-folded into the bank and bank-group bits (DramGeometry.decode).
ADDR_HASH = 1

#: The command trace packed into one vector (dram_ctrl's ``trace_packed``), so that a monitor
#: reads one signal per cycle: (field, width), from bit 0 up. ``trace_<field>`` are the
#: controller's trace ports (what was issued in cycle ``trace_cycle``, presented one cycle
#: later) and two live bits of its R channel: ``r_valid`` (RVALID) and ``r_beat`` (a beat taken
#: this cycle with an OKAY response).
TRACE_FIELDS: tuple[tuple[str, int], ...] = (
    ("cycle", 64),
    ("row_valid", 1), ("row_cmd", 3), ("row_bg", BG_BITS), ("row_ba", BA_BITS), ("row_row", 32),
    ("col_valid", 1), ("col_cmd", 3), ("col_bg", BG_BITS), ("col_ba", BA_BITS), ("col_col", 32),
    ("col_row", 32),
    ("r_valid", 1), ("r_beat", 1),
)
#: field -> (lsb, width) in the packed trace
TRACE_LAYOUT: dict[str, tuple[int, int]] = {}
_lsb = 0
for _name, _width in TRACE_FIELDS:
    TRACE_LAYOUT[_name] = (_lsb, _width)
    _lsb += _width
TRACE_WIDTH = _lsb
del _lsb, _name, _width


@dataclass(frozen=True)
class Ddr4Timing:
    """DDR4 timing parameters. Field names match the RTL parameters (T_CL, T_RCD, ...)."""

    CL: int
    CWL: int
    RCD: int
    RP: int
    RAS: int
    RC: int
    WR: int
    RTP: int
    CCD_S: int
    CCD_L: int
    RRD_S: int
    RRD_L: int
    FAW: int
    WTR_S: int
    WTR_L: int
    BURST: int
    RTW: int
    RFC: int
    REFI: int

    def parameters(self) -> dict[str, int]:
        """The RTL parameter assignments (``T_<NAME>``) for this timing set."""
        return {f"T_{f.name}": getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: int) -> Ddr4Timing:
        return dataclasses.replace(self, **changes)


#: DDR4-3200AA (22-22-22), x8 devices, 8 Gb density, in DRAM clocks (tCK = 0.625 ns).
DDR4_3200_TCK = Ddr4Timing(
    CL=22, CWL=16, RCD=22, RP=22,
    RAS=52,      # 32 ns
    RC=74,       # tRAS + tRP = 45.75 ns
    WR=24,       # 15 ns
    RTP=12,      # 7.5 ns
    CCD_S=4, CCD_L=8,     # tCCD_L = max(5 nCK, 5 ns)
    RRD_S=4, RRD_L=8,     # 1 KiB page: max(4 nCK, 2.5 ns) / max(4 nCK, 4.9 ns)
    FAW=34,               # 1 KiB page: 21 ns
    WTR_S=4, WTR_L=12,    # max(2 nCK, 2.5 ns) / max(4 nCK, 7.5 ns)
    BURST=4,              # BL8 = 4 clocks
    RTW=22 + 4 + 2 - 16,  # read to write turnaround: RL + BL/2 + 2 nCK - WL
    RFC=560,              # 8 Gb: 350 ns
    REFI=12480,           # 7.8 us
)


def to_controller_cycles(t: Ddr4Timing, ratio: int = CLOCK_RATIO) -> Ddr4Timing:
    """Convert DRAM-clock timings to controller cycles (ceil; tREFI floors, it is a maximum)."""
    vals = {}
    for f in dataclasses.fields(t):
        v = getattr(t, f.name)
        vals[f.name] = v // ratio if f.name == "REFI" else -(-v // ratio)
    return Ddr4Timing(**vals)


#: The controller's defaults: DDR4-3200 in controller cycles (2.5 ns).
DEFAULT_TIMING = to_controller_cycles(DDR4_3200_TCK)

#: Timing parameters whose value must be at least 1 controller cycle.
NONZERO = ("CL", "CWL", "RCD", "RP", "RAS", "RC", "CCD_S", "CCD_L", "BURST", "RFC", "REFI")


@dataclass(frozen=True)
class DramGeometry:
    """How a byte address maps to bank group, bank, row and column (must match dram_ctrl.v).

    From the bottom: the byte in the line, bank group, column, bank, row. With ``addr_hash`` the
    bank is XORed with the row folded to BA_BITS bits (the XOR of its 2-bit groups), the bank
    group with the same fold of the row shifted down one bit: two rows that differ in one bit
    never share a bank, so a copy's source and destination rows mostly use different banks.
    """

    mem_size: int
    line_bytes: int = 64
    addr_hash: bool = bool(ADDR_HASH)

    @property
    def row_bits(self) -> int:
        lines = self.mem_size // self.line_bytes
        return lines.bit_length() - 1 - BG_BITS - COL_BITS - BA_BITS

    def decode(self, addr: int) -> tuple[int, int, int, int]:
        """Return (bank group, bank, row, column) of a byte address."""
        la = addr // self.line_bytes
        bg = la & ((1 << BG_BITS) - 1)
        la >>= BG_BITS
        col = la & ((1 << COL_BITS) - 1)
        la >>= COL_BITS
        ba = la & ((1 << BA_BITS) - 1)
        la >>= BA_BITS
        if self.addr_hash:
            ba ^= _fold(la, BA_BITS)
            bg ^= _fold(la >> 1, BG_BITS)
        return bg, ba, la, col


def _fold(x: int, bits: int) -> int:
    """XOR of the ``bits``-bit groups of ``x``."""
    out = 0
    while x:
        out ^= x & ((1 << bits) - 1)
        x >>= bits
    return out

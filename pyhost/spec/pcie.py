"""The card's PCIe identity and host-link layout: what enumeration finds and what the RTL decodes.

Defined once here; ``python -m pyhost.spec.gen`` writes rtl/include/pcie_cfg.vh (the endpoint's
BAR decode, MSI-X table and PBA offsets, vector assignment) from it, and the simulated hard IP
(tb/common/pcie_link.py) is configured from the same values, so the configuration space the
driver reads and the logic behind the BARs cannot disagree.

BARs (32-bit, non-prefetchable memory):
- BAR0: the register block (pyhost.spec.regs) in its first ``regs.BAR0_SIZE`` bytes; the rest of
  the BAR is unmapped (a read there completes Unsupported Request, a write is dropped).
- BAR2: the MSI-X table (one 16-byte entry per vector) and the pending-bit array.

MSI-X: vector ``i`` is IRQ_STATUS bit ``i`` (regs.IRQ_FIELDS order: H2C_DONE, H2C_ERR, C2H_DONE,
C2H_ERR, C2C_DONE, C2C_ERR, ACCEL_DONE, ACCEL_ERR). A vector fires when its bit of
IRQ_STATUS & IRQ_MASK rises; a masked vector sets its pending bit and fires when unmasked.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyhost.spec import regs

VENDOR_ID = 0x10EE            # the hard IP's vendor (Xilinx), as an FPGA card of this kind has
DEVICE_ID = 0xD0CA            # this card
SUBSYSTEM_VENDOR_ID = 0x10EE
SUBSYSTEM_ID = 0x0001
REVISION_ID = 0x01
CLASS_CODE = 0x120000         # processing accelerator (base class 0x12), no programming interface


@dataclass(frozen=True)
class Bar:
    index: int
    size: int                 # bytes, a power of two >= 4 KiB
    doc: str

    @property
    def addr_bits(self) -> int:
        return (self.size - 1).bit_length()


BAR_REGS = Bar(0, 64 << 10, "registers (pyhost.spec.regs) in the first 4 KiB, the rest unmapped")
BAR_MSIX = Bar(2, 4 << 10, "MSI-X table and pending-bit array")
BARS = (BAR_REGS, BAR_MSIX)

MSIX_VECTORS = len(regs.IRQ_FIELDS)          # one vector per IRQ_STATUS bit
MSIX_ENTRY_SIZE = 16                         # address lo, address hi, data, vector control
MSIX_TABLE_OFFSET = 0x000                    # in BAR_MSIX
MSIX_PBA_OFFSET = 0x800                      # in BAR_MSIX
MSIX_VECTOR_NAMES = tuple(f.name for f in regs.IRQ_FIELDS)

# Link: the UltraScale+ hard IP's user interface is 512 bits at 250 MHz for Gen3 x16 and Gen4 x8.
USER_CLK_MHZ = 250
LINK_CONFIGS = {"gen3x16": (3, 16), "gen4x8": (4, 8)}
DEFAULT_LINK = "gen3x16"
MAX_PAYLOAD_SUPPORTED = 1024                 # Device Capabilities: what the endpoint can take

#: Straddling on the requester streams of the 512-bit user interface (PG213): card-to-host
#: requests two TLPs per beat (the second from DWORD 8), host-to-card completions up to four (from
#: DWORD 0, 4, 8 or 12). card_top_pcie's STRADDLE parameter and the hard IP's configuration
#: (tb/common/pcie_link.py) both default to it; without it a TLP takes its own run of beats.
STRADDLE = True

#: Completion timeout of the requester, in microseconds (PCIe range A: 50 us .. 10 ms).
CPL_TIMEOUT_US = 50

# The hard IP's receive buffer for completions (the UltraScale+ endpoint advertises infinite
# completion credits, so nothing on the link stops a completion from arriving: the requester
# must never have more completions outstanding than the buffer holds). cocotbext-pcie's
# UltraScalePlusPcieDevice: 256 completion headers, 32 KiB of data in 16-byte credits, each
# completion also taking one data credit beyond its payload's (rx_buf_cplh_fc_limit,
# rx_buf_cpld_fc_limit; a completion that does not fit is dropped, RX_CPL_BUF_OVF_ERR).
#: Completion headers the buffer holds.
RC_BUFFER_CPLH = 256
#: Data credits (16 bytes each) the buffer holds.
RC_BUFFER_CPLD = (32 << 10) // 16
#: The read completion boundary the requester budgets for: a completer may split a read at every
#: multiple of it, so a read reserves one header per RCB block it touches (64 bytes, the
#: smallest RCB, whatever Link Control says).
CPL_BUDGET_RCB = 64


def cpl_reservation(addr: int, n: int) -> tuple[int, int]:
    """What the requester (rtl/pcie_ep/pcie_rq_adapter.v) reserves of the completion buffer for a
    read of ``n`` bytes at ``addr``: (headers, data credits). The worst case of any split at
    CPL_BUDGET_RCB boundaries: one header per block touched, the 16-byte blocks touched plus one
    credit per header."""
    headers = (addr % CPL_BUDGET_RCB + n - 1) // CPL_BUDGET_RCB + 1
    return headers, (addr % 16 + n - 1) // 16 + 1 + headers


def payload_code(size: int) -> int:
    """The 3-bit Device Control encoding of a max payload / read request size (128 << code)."""
    if size not in (128, 256, 512, 1024, 2048, 4096):
        raise ValueError(f"{size} is not a PCIe payload size (128 .. 4096, a power of two)")
    return (size // 128).bit_length() - 1


def _check() -> None:
    assert MSIX_TABLE_OFFSET + MSIX_VECTORS * MSIX_ENTRY_SIZE <= MSIX_PBA_OFFSET
    assert MSIX_PBA_OFFSET + 8 <= BAR_MSIX.size
    assert BAR_REGS.size >= regs.BAR0_SIZE
    for b in BARS:
        assert b.size >= 4096 and b.size & (b.size - 1) == 0, b
    assert MSIX_VECTORS <= 32
    # the largest read (4 KiB MRRS, unaligned: 65 blocks of 64 bytes) fits the buffer alone
    assert RC_BUFFER_CPLH >= 4096 // CPL_BUDGET_RCB + 1
    assert RC_BUFFER_CPLD >= 4096 // 16 + 1 + 2 * (4096 // CPL_BUDGET_RCB + 1)


_check()

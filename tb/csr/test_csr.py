"""cocotb bench for csr, the BAR0 register block: every register kind through AXI4-Lite.

Drives the block's engine-side inputs directly (status, counters, interrupt events) and checks
what software reads, and checks the pulses and values the block hands to the DMA engine.
"""

from __future__ import annotations

import logging
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from pyhost.spec import regs
from pyhost.spec.regs import Channel
from tb.common.clocking import reset, start_clock

MEM_SIZE = 1 << 20


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        start_clock(dut)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        logging.getLogger("cocotb.csr.s_axil").setLevel(logging.WARNING)
        for n in ("ch_busy", "ch_done", "ch_error", "ch_err_code", "ch_completed", "ch_bytes",
                  "ch_descs", "irq_done", "irq_err", "dram_counters", "acc_reg_rdata",
                  "acc_irq_done", "acc_irq_err"):
            getattr(dut, n).value = 0
        self.pulses: dict[str, list[int]] = {"run": [], "reset": []}

    async def _watch(self) -> None:
        while True:
            await RisingEdge(self.dut.clk)
            for kind in ("run", "reset"):
                v = int(getattr(self.dut, f"ch_{kind}").value)
                if v:
                    self.pulses[kind].append(v)

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)
        cocotb.start_soon(self._watch())      # outputs are defined once reset is done

    async def rd(self, name: str) -> int:
        return await self.axil.read_dword(regs.offset(name))

    async def wr(self, name: str, value: int) -> None:
        await self.axil.write_dword(regs.offset(name), value)


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_identity_and_defaults(dut) -> None:
    """Read-only identity registers and reset values match the spec."""
    tb = TB(dut)
    await tb.reset()
    for r in regs.REGISTERS:
        if r.reset:
            got = await tb.axil.read_dword(r.offset)
            assert got == r.reset, f"{r.name}: read {got:#x}, reset value {r.reset:#x}"
    assert await tb.rd("MEM_SIZE_LO") == MEM_SIZE and await tb.rd("MEM_SIZE_HI") == 0
    assert await tb.rd("BUS_WIDTH") == 512
    caps = await tb.rd("CAPS")
    assert caps & 0xF == regs.NUM_CHANNELS and (caps >> 4) & 0xFF == regs.MAX_TAGS, hex(caps)
    accel_bit = regs.BY_NAME["CAPS"].fields[2]
    assert (caps >> accel_bit.lsb) & 1 == 1, f"CAPS {caps:#x}: ACCEL bit clear with ACCEL=1"
    await tb.wr("CARD_ID", 0)
    assert await tb.rd("CARD_ID") == regs.CARD_ID, "CARD_ID is writable"
    assert await tb.axil.read_dword(0xFFC) == 0, "unmapped offset does not read 0"


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_rw_registers_and_strobes(dut) -> None:
    """Scratch, DMA limits and channel address registers hold what is written, byte-wise."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(3)
    for _ in range(8):
        v = rng.getrandbits(32)
        await tb.wr("SCRATCH", v)
        assert await tb.rd("SCRATCH") == v
    await tb.axil.write(regs.offset("SCRATCH") + 1, b"\xab")     # one byte lane
    assert (await tb.rd("SCRATCH") >> 8) & 0xFF == 0xAB
    for ch in Channel:
        for reg, val in (("DESC_LO", 0x1234_5678 + ch), ("DESC_HI", 0x9 + ch),
                         ("WB_LO", 0xABC0 + ch), ("WB_HI", 0x7 + ch)):
            await tb.axil.write_dword(regs.channel_reg(ch, reg), val)
        assert await tb.axil.read_dword(regs.channel_reg(ch, "DESC_LO")) == 0x1234_5678 + ch
        desc = int(dut.ch_desc_addr.value) >> (64 * ch) & (2**64 - 1)
        wb = int(dut.ch_wb_addr.value) >> (64 * ch) & (2**64 - 1)
        assert desc == ((0x9 + ch) << 32) | (0x1234_5678 + ch), f"{ch.name} desc {desc:#x}"
        assert wb == ((0x7 + ch) << 32) | (0xABC0 + ch), f"{ch.name} wb {wb:#x}"
    await tb.wr("DMA_MPS", 1024)
    await tb.wr("DMA_MRRS", 2048)
    await tb.wr("DMA_TAGS", 7)
    assert (int(dut.cfg_mps.value), int(dut.cfg_mrrs.value), int(dut.cfg_tags.value)) == \
        (1024, 2048, 7)


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_ctrl_pulses(dut) -> None:
    """Writing RUN or RESET to a channel's CTRL gives one single-cycle pulse for that channel."""
    tb = TB(dut)
    await tb.reset()
    for ch in Channel:
        tb.pulses = {"run": [], "reset": []}
        await tb.axil.write_dword(regs.channel_reg(ch, "CTRL"), 1)
        await ClockCycles(dut.clk, 3)
        assert tb.pulses["run"] == [1 << ch] and not tb.pulses["reset"], tb.pulses
        await tb.axil.write_dword(regs.channel_reg(ch, "CTRL"), 2)
        await ClockCycles(dut.clk, 3)
        assert tb.pulses["reset"] == [1 << ch], tb.pulses
        assert await tb.axil.read_dword(regs.channel_reg(ch, "CTRL")) == 0, "CTRL reads back"


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_status_and_counters(dut) -> None:
    """Channel status, counters and the DRAM counters read back from the engine's values."""
    tb = TB(dut)
    await tb.reset()
    dut.ch_busy.value = 0b001
    dut.ch_done.value = 0b010
    dut.ch_error.value = 0b100
    dut.ch_err_code.value = regs.DmaError.DST_WRITE << 16
    dut.ch_completed.value = (77 << 64) | (5 << 32) | 3
    dut.ch_bytes.value = (0x1_2345_6789 << 128) | (0xAB << 64) | 0xCD
    dut.ch_descs.value = (9 << 64) | (8 << 32) | 7
    counters = [0x1_0000_0000 * (i + 1) + i for i in range(8)]
    dut.dram_counters.value = sum(c << (64 * i) for i, c in enumerate(counters))
    await ClockCycles(dut.clk, 1)
    assert await tb.rd("H2C_STATUS") == 0x1
    assert await tb.rd("C2H_STATUS") == 0x2
    assert await tb.rd("C2C_STATUS") == 0x4 | (regs.DmaError.DST_WRITE << 8)
    assert [await tb.rd(f"{c.name}_COMPLETED") for c in Channel] == [3, 5, 77]
    assert await tb.rd("C2C_BYTES_LO") == 0x2345_6789 and await tb.rd("C2C_BYTES_HI") == 1
    assert [await tb.rd(f"{c.name}_DESCS") for c in Channel] == [7, 8, 9]
    for i, name in enumerate(regs.DRAM_COUNTERS):
        lo = await tb.rd(f"DRAM_{name.upper()}_LO")
        hi = await tb.rd(f"DRAM_{name.upper()}_HI")
        assert (hi << 32) | lo == counters[i], f"DRAM {name}: {(hi << 32) | lo:#x}"


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_interrupts(dut) -> None:
    """Events set IRQ_STATUS bits, writing 1 clears them, the line follows status & mask, and
    an event in the same cycle as a clear is not lost."""
    tb = TB(dut)
    await tb.reset()
    dut.irq_done.value = 0b010
    await ClockCycles(dut.clk, 1)
    dut.irq_done.value = 0
    await ClockCycles(dut.clk, 1)
    assert await tb.rd("IRQ_STATUS") == 0b000100, "C2H_DONE not recorded"
    assert int(dut.irq.value) == 0, "interrupt line high while masked"
    await tb.wr("IRQ_MASK", 0b000100)
    await ClockCycles(dut.clk, 1)
    assert int(dut.irq.value) == 1, "interrupt line low while status & mask != 0"
    await tb.wr("IRQ_STATUS", 0b000100)
    await ClockCycles(dut.clk, 1)
    assert int(dut.irq.value) == 0 and await tb.rd("IRQ_STATUS") == 0, "W1C did not clear"
    # an error event arriving while software clears the same bit wins
    dut.irq_err.value = 0b001
    await tb.wr("IRQ_STATUS", 0b000010)
    dut.irq_err.value = 0
    assert await tb.rd("IRQ_STATUS") & 0b10, "event lost against a concurrent clear"
    await tb.wr("IRQ_MASK", 0)
    assert await tb.rd("IRQ_MASK") == 0


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_accel_window(dut) -> None:
    """ACC_* offsets are forwarded to the accelerator port: writes as one-cycle pulses with
    address, data and strobes; reads return the accelerator's word; its interrupt pulses set the
    ACCEL_DONE / ACCEL_ERR bits of IRQ_STATUS."""
    tb = TB(dut)
    await tb.reset()
    writes: list[tuple[int, int, int]] = []

    async def accel_writes() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.acc_reg_wr.value):
                writes.append((int(dut.acc_reg_waddr.value), int(dut.acc_reg_wdata.value),
                               int(dut.acc_reg_wstrb.value)))

    async def accel_reads() -> None:
        # a combinational register file: the word follows the address
        while True:
            addr = dut.acc_reg_raddr.value
            dut.acc_reg_rdata.value = 0xA5A5_0000 | (int(addr) if addr.is_resolvable else 0)
            await dut.acc_reg_raddr.value_change

    cocotb.start_soon(accel_writes())
    cocotb.start_soon(accel_reads())
    await tb.wr("ACC_SLOT3", 0x1234_5678)
    await tb.axil.write(regs.offset("ACC_INSN_COUNT") + 2, b"\x7f")
    await tb.wr("SCRATCH", 5)                      # outside the window: not forwarded
    await ClockCycles(dut.clk, 2)
    assert writes == [(regs.offset("ACC_SLOT3"), 0x1234_5678, 0xF),
                      (regs.offset("ACC_INSN_COUNT"), 0x7F << 16, 0b0100)], writes
    for name in ("ACC_STATUS", "ACC_BYTES_STORED_HI"):
        got = await tb.rd(name)
        assert got == 0xA5A5_0000 | regs.offset(name), f"{name}: {got:#x}"
    assert await tb.rd("SCRATCH") == 5
    done = regs.BY_NAME["IRQ_STATUS"].fields[-2].mask
    err = regs.BY_NAME["IRQ_STATUS"].fields[-1].mask
    dut.acc_irq_done.value = 1
    await RisingEdge(dut.clk)
    dut.acc_irq_done.value = 0
    dut.acc_irq_err.value = 1
    await RisingEdge(dut.clk)
    dut.acc_irq_err.value = 0
    await ClockCycles(dut.clk, 2)
    assert await tb.rd("IRQ_STATUS") == done | err
    await tb.wr("IRQ_MASK", done)
    await ClockCycles(dut.clk, 1)
    assert int(dut.irq.value) == 1
    await tb.wr("IRQ_STATUS", done | err)
    assert await tb.rd("IRQ_STATUS") == 0

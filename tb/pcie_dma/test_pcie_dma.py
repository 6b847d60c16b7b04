"""cocotb bench for pcie_dma on its own: the engine between the host-memory model and an AxiRam
standing for card memory, driven through its register-side ports (no csr, no DRAM timing).

Checks what the system bench cannot see: every card-port burst obeys AXI (at most 256 beats,
never across 4 KiB), and the status/interrupt outputs pulse exactly as docs/dma.md says.
"""

from __future__ import annotations

import logging
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from pyhost.backend import HostMemory
from pyhost.spec import regs
from pyhost.spec.regs import Channel, DmaError
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import HostMemoryAxiSlave, HostMemoryConfig, _on

PAGE = 4096


class TB:
    def __init__(self, dut) -> None:
        self.dut = dut
        start_clock(dut)
        self.host = HostMemory(8 << 20)
        self.hmem = HostMemoryAxiSlave(dut, "m_axi_host", self.host,
                                       HostMemoryConfig(read_latency=30, jitter=20,
                                                        out_of_order=True))
        self.card = AxiRam(AxiBus.from_prefix(dut, "m_axi_card"), dut.clk, dut.rst, size=1 << 24)
        logging.getLogger("cocotb.pcie_dma.m_axi_card").setLevel(logging.WARNING)
        self.card_errors: list[str] = []
        self.irq_done = [0, 0, 0]
        self.irq_err = [0, 0, 0]
        self.rng = random.Random(5)
        dut.ch_run.value = 0
        dut.ch_reset.value = 0
        dut.ch_desc_addr.value = 0
        dut.ch_wb_addr.value = 0
        self.config(256, 512, 32)

    def config(self, mps: int, mrrs: int, tags: int) -> None:
        self.dut.cfg_mps.value = mps
        self.dut.cfg_mrrs.value = mrrs
        self.dut.cfg_tags.value = tags

    async def reset(self) -> None:
        await reset(self.dut, hold=4, settle=2)
        cocotb.start_soon(self._monitor())

    async def _monitor(self) -> None:
        """AXI rules on the card port, and the interrupt pulses."""
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            for ch in ("ar", "aw"):
                if _on(getattr(d, f"m_axi_card_{ch}valid")) and \
                        _on(getattr(d, f"m_axi_card_{ch}ready")):
                    addr = int(getattr(d, f"m_axi_card_{ch}addr").value)
                    beats = int(getattr(d, f"m_axi_card_{ch}len").value) + 1
                    last = (addr // 64 + beats) * 64 - 1
                    if addr // PAGE != last // PAGE:
                        self.card_errors.append(f"{ch} burst at {addr:#x} x{beats} crosses 4 KiB")
            done, err = int(d.irq_done.value), int(d.irq_err.value)
            for i in range(3):
                self.irq_done[i] += done >> i & 1
                self.irq_err[i] += err >> i & 1

    def set64(self, sig, ch: int, value: int) -> None:
        v = int(sig.value)
        v &= ~((2**64 - 1) << (64 * ch))
        sig.value = v | (value << (64 * ch))

    async def run(self, ch: Channel, descs: list[bytes], wb: int = 0, cycles: int = 200_000
                  ) -> tuple[int, int, int]:
        """Lay descriptors out contiguously, start the channel, wait until it is idle.
        Returns (status word, completed, error code)."""
        buf = self.host.alloc(32 * len(descs) + 64, align=32)
        for i, d in enumerate(descs):
            buf.write(d, 32 * i)
        self.set64(self.dut.ch_desc_addr, ch, buf.address)
        self.set64(self.dut.ch_wb_addr, ch, wb)
        self.dut.ch_run.value = 1 << ch
        await RisingEdge(self.dut.clk)
        self.dut.ch_run.value = 0
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
            if not int(self.dut.ch_busy.value) >> ch & 1:
                break
        else:
            raise AssertionError(f"{ch.name} still busy after {cycles} cycles")
        await ClockCycles(self.dut.clk, 2)        # let the monitor see the interrupt pulse
        self.host.free(buf)
        code = int(self.dut.ch_err_code.value) >> (8 * ch) & 0xFF
        completed = int(self.dut.ch_completed.value) >> (32 * ch) & 0xFFFF_FFFF
        status = (int(self.dut.ch_done.value) >> ch & 1) << 1 | \
            (int(self.dut.ch_error.value) >> ch & 1) << 2 | code << 8
        return status, completed, code


async def _run_linked(tb: TB, ch: Channel, items, **kw):
    # allocate first to know the address, then write linked descriptors
    n = len(items)
    buf = tb.host.alloc(32 * n + 64, align=32)
    tb.host.free(buf)
    base = buf.address          # run() allocates the same first-fit block again
    descs = [regs.encode_descriptor(ln, s, d, base + 32 * (i + 1), stop=i == n - 1,
                                    completed=i == n - 1)
             for i, (ln, s, d) in enumerate(items)]
    return await tb.run(ch, descs, **kw)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_h2c_c2h_c2c(dut) -> None:
    """Unaligned transfers in all three directions land exactly, card bursts obey AXI."""
    tb = TB(dut)
    await tb.reset()
    src = tb.host.alloc(64 << 10)
    data = tb.rng.randbytes(64 << 10)
    src.write(data)
    items = [(5000, src.address + 3, 4093), (1, src.address + 4095, 20000),
             (9000, src.address + 100, 30001)]
    st, completed, code = await _run_linked(tb, Channel.H2C, items)
    assert (code, completed) == (0, 3), f"H2C: code {code}, completed {completed}"
    for n, s, d in items:
        got = tb.card.read(d, n)
        assert got == data[s - src.address:s - src.address + n], f"H2C {n} bytes at {d:#x}"
    # C2C, then C2H back
    st, completed, code = await _run_linked(tb, Channel.C2C, [(9000, 30001, 60003)])
    assert code == 0 and tb.card.read(60003, 9000) == tb.card.read(30001, 9000), "C2C differs"
    dst = tb.host.alloc(64 << 10)
    dst.write(bytes(64 << 10))
    st, completed, code = await _run_linked(tb, Channel.C2H, [(9000, 60003, dst.address + 7)])
    assert code == 0 and dst.read(7, 9000) == data[100:9100], "C2H differs"
    assert dst.read(0, 7) == bytes(7) and dst.read(9007, 10) == bytes(10), "C2H guard bytes"
    assert not tb.card_errors, tb.card_errors[:3]
    assert tb.irq_done == [1, 1, 1] and tb.irq_err == [0, 0, 0], (tb.irq_done, tb.irq_err)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_errors_and_write_back(dut) -> None:
    """BAD_CONFIG, ZERO_LENGTH at descriptor 1, the status write-back, one ERR pulse each."""
    tb = TB(dut)
    await tb.reset()
    wb = tb.host.alloc(64)
    tb.config(100, 512, 32)
    st, completed, code = await _run_linked(tb, Channel.H2C, [(64, tb.host.base, 0)],
                                            wb=wb.address)
    assert code == DmaError.BAD_CONFIG and completed == 0, f"code {code}"
    assert wb.read(0, 8) == (0).to_bytes(4, "little") + st.to_bytes(4, "little"), \
        f"write-back {wb.read(0, 8).hex()} vs status {st:#x}"
    tb.config(256, 512, 32)
    st, completed, code = await _run_linked(tb, Channel.H2C,
                                            [(64, tb.host.base, 0), (0, tb.host.base, 64)],
                                            wb=wb.address)
    assert code == DmaError.ZERO_LENGTH and completed == 1, f"code {code}, completed {completed}"
    assert int.from_bytes(wb.read(0, 4), "little") == 1, "write-back count"
    assert tb.irq_err[Channel.H2C] == 2 and tb.irq_done[Channel.H2C] == 0, tb.irq_err


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def test_reset_aborts(dut) -> None:
    """RESET of a running chain drains it and reports ABORTED; the channel then works."""
    tb = TB(dut)
    await tb.reset()
    src = tb.host.alloc(PAGE)
    buf = tb.host.alloc(64, align=32)
    buf.write(regs.encode_descriptor(PAGE, src.address, 0, buf.address))   # loops forever
    tb.set64(dut.ch_desc_addr, Channel.C2H, buf.address)
    dut.ch_run.value = 1 << Channel.H2C
    tb.set64(dut.ch_desc_addr, Channel.H2C, buf.address)
    await RisingEdge(dut.clk)
    dut.ch_run.value = 0
    await ClockCycles(dut.clk, 2000)
    assert int(dut.ch_busy.value) & 1, "looping chain stopped by itself"
    dut.ch_reset.value = 1
    await RisingEdge(dut.clk)
    dut.ch_reset.value = 0
    for _ in range(5000):
        await RisingEdge(dut.clk)
        if not int(dut.ch_busy.value) & 1:
            break
    await ClockCycles(dut.clk, 2)
    code = int(dut.ch_err_code.value) & 0xFF
    assert code == DmaError.ABORTED and tb.irq_err[0] == 1, f"code {code}, irq {tb.irq_err}"
    st, completed, code = await _run_linked(tb, Channel.H2C, [(PAGE, src.address, 8192)])
    assert code == 0 and completed == 1, f"after abort: code {code}"
    assert not tb.card_errors, tb.card_errors[:3]

"""BAR0 through RtlCard with the lean master (tb/common/axil_master.py) or cocotbext-axi's.

One scripted sequence of register accesses on card_top, issued from every kind of place a host
program or bench issues them: the bridge thread (PcieDriver's and the runtime's way), coroutines
right after a rising edge, a falling edge, a timer in mid-cycle and the read-only phase, back to
back and right after reset. A monitor samples the whole ``s_axil_*`` bus at every rising edge
(its values before the edge, as the RTL sees them), and every access records when it was called,
when it returned and what it read. ``CARD_TB_BAR0`` picks the master; the results go to
``$CARD_TB_OUT``: tests/rtl/test_card_bar0.py requires both masters to give the same bus at every
edge and the same times and values.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.task import bridge
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from pyhost.backend import HostMemory
from pyhost.spec import regs
from tb.common.clocking import reset, start_clock
from tb.common.rtl_card import RtlCard

SIGNALS = ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
           "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp", "rvalid",
           "rready")


def _val(h) -> str:
    return str(h.value)      # X and Z kept as they are: the sources start with X on data


@cocotb.test()
async def bar0_sequence(dut) -> None:
    """The accesses and the bus at every edge, for the master CARD_TB_BAR0 names."""
    start_clock(dut)
    card = RtlCard(dut, HostMemory(1 << 20), bar0=os.environ.get("CARD_TB_BAR0", "lean"))
    bus = [getattr(dut, f"s_axil_{s}") for s in SIGNALS]
    edges: list[list] = []
    log: list[list] = []
    stop = False

    async def monitor() -> None:
        while not stop:
            await RisingEdge(dut.clk)
            edges.append([get_sim_time("ps"), *(_val(h) for h in bus), _val(dut.rst)])

    cocotb.start_soon(monitor())

    async def write(tag: str, name: str, value: int) -> None:
        t0 = get_sim_time("ps")
        await card._write(regs.offset(name), value)
        log.append([tag, "w", name, value, t0, get_sim_time("ps")])

    async def read(tag: str, name: str) -> int:
        t0 = get_sim_time("ps")
        v = await card._read(regs.offset(name))
        log.append([tag, "r", name, v, t0, get_sim_time("ps")])
        return v

    # reset right after construction, as every bench does (before reset, under Icarus, the
    # slave's outputs are X, which cocotbext-axi's sinks cannot sample)
    await reset(dut)
    await write("after reset", "SCRATCH", 0x1234_5678)
    await read("after reset", "SCRATCH")
    await read("after reset", "CARD_ID")
    for k in range(4):                                  # back to back
        await write("burst", "SCRATCH", 0x100 + k)
        await read("burst", "SCRATCH")
    await write("burst", "IRQ_MASK", 0x3)
    await read("burst", "IRQ_MASK")
    await RisingEdge(dut.clk)
    await write("after rising", "SCRATCH", 0xA5A5_0001)
    await FallingEdge(dut.clk)
    await read("after falling", "SCRATCH")
    await Timer(1, unit="ns")                           # mid-cycle (the period is 2.5 ns)
    await write("mid-cycle", "SCRATCH", 0xA5A5_0002)
    await ReadOnly()
    await Timer(3, unit="ns")                           # leave the read-only phase
    await read("after timer", "SCRATCH")
    await RisingEdge(dut.clk)
    await ReadOnly()
    await RisingEdge(dut.clk)
    await write("after read-only", "SCRATCH", 0xA5A5_0003)
    await read("unmapped", "CARD_ID")
    log.append(["unmapped", "r", "0xFFC", await card._read(0xFFC), 0, 0])

    def host() -> None:                                 # the host program's way: the bridge
        card.mmio_write(regs.offset("SCRATCH"), 0xC0DE_0001)
        for k in range(3):
            card.mmio_write(regs.offset("SCRATCH"), 0xC0DE_0010 + k)
            log.append(["bridge", "w", "SCRATCH", 0xC0DE_0010 + k, 0, int(card.cycles())])
            log.append(["bridge", "r", "SCRATCH", card.mmio_read(regs.offset("SCRATCH")), 0,
                        int(card.cycles())])
        card.mmio_write(regs.offset("IRQ_MASK"), 0)

    await bridge(host)()
    await read("after bridge", "IRQ_MASK")
    # an access called while rst is high starts at the first edge after the release
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    pending = cocotb.start_soon(write("called in reset", "SCRATCH", 0xBEEF))
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await pending
    await read("after the release", "SCRATCH")
    for _ in range(3):
        await RisingEdge(dut.clk)
    stop = True
    out = {"master": os.environ.get("CARD_TB_BAR0", "lean"), "log": log, "edges": edges,
           "end_ps": get_sim_time("ps")}
    with open(os.environ["CARD_TB_OUT"], "w") as f:
        json.dump(out, f)


@cocotb.test(timeout_time=20, timeout_unit="us")   # a master that hangs fails here
async def bar0_errors(dut) -> None:
    """No hang and no stale VALID: an access while rst is held high gives up after the
    master's bound; one in flight when rst rises raises at once and drops its VALIDs; after
    the release the next access works."""
    from tb.common.axil_master import AxiLiteBar0, Bar0Error

    start_clock(dut)
    bar0 = AxiLiteBar0(dut, "s_axil", dut.clk, dut.rst, timeout_cycles=50)
    await reset(dut)
    scratch = regs.offset("SCRATCH")
    dut.rst.value = 1
    t0 = get_sim_time("ns")
    try:
        await bar0.write(scratch, 1)
    except Bar0Error as e:
        assert str(e) == f"BAR0 write of 0x1 to {scratch:#x}: rst held high for 50 clock " \
            "cycles", e
    else:
        raise AssertionError("an access while rst was held high completed")
    assert get_sim_time("ns") - t0 < 60 * 2.5             # gave up after its bound
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)

    async def raise_rst() -> None:                        # after the access has driven AR
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        dut.rst.value = 1
    cocotb.start_soon(raise_rst())
    try:
        await bar0.read(scratch)
    except Bar0Error as e:
        assert "rst rose during the access" in str(e), e
    else:
        raise AssertionError("a read cut by reset returned data")
    await ReadOnly()
    assert int(dut.s_axil_arvalid.value) == 0, "the cut read left ARVALID up"
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    await bar0.write(scratch, 0x5A)                       # the bus is clean after the reset
    assert await bar0.read(scratch) == 0x5A

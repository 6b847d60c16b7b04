"""The DDR4 timing monitor: a dram_ctrl instance's command trace, fed to the DDR4 checker.

Every bench with a dram_ctrl in it starts one: the dram_ctrl bench on its top level, the card
benches on ``<top>.core.dram`` (card_core's controller, under card_top and card_top_pcie). It
samples the command trace and the R channel (for tCL) at the falling clock edge, with one read per
cycle of ``trace_packed`` (the RTL packs the trace and the R channel's valid and OKAY-beat bits in
pyhost.spec.dram's TRACE_FIELDS layout: one VPI read instead of a dozen), but only while a command
or a read beat is presented: between them it sleeps on the valid signals' rising edges, with a timer
that wakes it when the next REF is due, so a card computing without memory traffic runs no Python
per cycle. Any rule broken raises :class:`~tb.dram_ctrl.ddr4_checker.TimingViolation` in the
monitor's task, which fails the test.
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from pyhost.spec import dram
from tb.dram_ctrl.ddr4_checker import Ddr4Checker


class Ddr4Monitor:
    """Checks every command ``ctrl`` (a dram_ctrl handle) issues against ``checker``."""

    def __init__(self, ctrl, clk, checker: Ddr4Checker, clk_ns: float = dram.CTRL_CLK_NS) -> None:
        self.ctrl = ctrl
        self.clk = clk
        self.checker = checker
        self.clk_ns = clk_ns
        self.task = None
        #: when a list, every command is appended as (cycle, cmd, bg, ba, row, col)
        self.log: list[tuple[int, int, int, int, int, int]] | None = None

    @classmethod
    def for_card(cls, dut) -> Ddr4Monitor:
        """The monitor of a card's DRAM controller (product timings): card_core's ``dram``, under
        card_top and card_top_pcie alike, on the card clock."""
        return cls(dut.core.dram, dut.clk, Ddr4Checker(dram.DEFAULT_TIMING))

    def start(self) -> Ddr4Monitor:
        """Start checking (call right after reset: trace cycle 0 is the first cycle out of it)."""
        self.task = cocotb.start_soon(self._run())
        return self

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def finish(self) -> None:
        """End-of-test check of the refresh debt and distance."""
        self.checker.finish(int(self.ctrl.trace_cycle.value))

    async def _run(self) -> None:
        c = self.ctrl
        ck = self.checker
        packed = c.trace_packed       # one read per cycle (layout: pyhost.spec.dram)
        # (lsb, mask) of each field, worked out once: this loop runs every busy cycle
        lay = {n: (lsb, (1 << w) - 1) for n, (lsb, w) in dram.TRACE_LAYOUT.items()}

        def field(v: int, name: str) -> int:
            lsb, mask = lay[name]
            return (v >> lsb) & mask

        row_fields = ("row_cmd", "row_bg", "row_ba", "row_row")
        col_fields = ("col_cmd", "col_bg", "col_ba", "col_row", "col_col")   # command()'s order
        rv, cv, rd = c.trace_row_valid, c.trace_col_valid, c.s_axi_rvalid
        while True:
            await FallingEdge(self.clk)
            v = int(packed.value)
            t = field(v, "cycle")
            busy = False
            if field(v, "row_valid"):
                busy = True
                cmd = (t, *(field(v, f) for f in row_fields), 0)
                ck.command(*cmd)
                if self.log is not None:
                    self.log.append(cmd)
            if field(v, "col_valid"):
                busy = True
                cmd = (t, *(field(v, f) for f in col_fields))
                ck.command(*cmd)
                if self.log is not None:
                    self.log.append(cmd)
            if field(v, "r_valid"):
                busy = True
                if field(v, "r_beat"):
                    ck.read_data(t + 1)
            if busy:
                continue
            ck.at(t)
            # nothing presented: sleep until something is, or the next REF is due
            wait = max(1, ck.refresh_deadline() - t + 1)
            await First(RisingEdge(rv), RisingEdge(cv), RisingEdge(rd),
                        Timer(wait * self.clk_ns, unit="ns"))

"""DDR4 command-trace checker: every command against every timing rule of the controller.

Pure Python, so it is unit-tested on hand-made traces (tests/tb/test_ddr4_checker.py) and then
used by the dram_ctrl and card benches, which feed it the controller's command-trace ports
(tb/dram_ctrl/monitor.py). All times are controller cycles; rules follow JEDEC DDR4 with the
controller's parameter names.

Refresh is checked both ways JEDEC limits postponing it: the debt (REFs due since ``start``
minus REFs issued) never exceeds ``ref_postpone_max + 1``, and no two REFs, nor ``start`` (reset,
when the DRAM is taken to be freshly refreshed) and the first REF, are more than
``(ref_postpone_max + 1) * tREFI`` apart. ``max_ref_gap`` is the longest such distance seen.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pyhost.spec import dram
from pyhost.spec.dram import Ddr4Timing

NEVER = -(10**12)


class TimingViolation(AssertionError):
    """A DRAM command broke a timing or protocol rule."""


@dataclass
class _Bank:
    open: bool = False
    row: int = -1
    act: int = NEVER
    pre: int = NEVER
    rd: int = NEVER
    wr: int = NEVER


@dataclass
class Ddr4Checker:
    """Checks a command stream; ``command()`` raises :class:`TimingViolation` on the first error."""

    timing: Ddr4Timing
    ref_postpone_max: int = dram.REF_POSTPONE_MAX
    bg_bits: int = dram.BG_BITS
    ba_bits: int = dram.BA_BITS
    start: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        nb = 1 << (self.bg_bits + self.ba_bits)
        self.banks = [_Bank() for _ in range(nb)]
        self.acts: deque[int] = deque(maxlen=4)
        self.act_bg = [NEVER] * (1 << self.bg_bits)
        self.col_bg = [NEVER] * (1 << self.bg_bits)
        self.wr_bg = [NEVER] * (1 << self.bg_bits)
        self.last_act = NEVER
        self.last_col = NEVER
        self.last_rd = NEVER
        self.last_wr = NEVER
        self.last_ref = NEVER
        self.prev_ref = self.start     # for the REF-to-REF distance: reset counts as a refresh
        self.max_ref_gap = 0
        self.refs = 0
        self.rd_times: deque[int] = deque()
        self.now = self.start
        self.counts = {n: 0 for n in dram.CMD_NAMES.values()}

    # -- helpers ---------------------------------------------------------------------------
    def _fail(self, t: int, what: str) -> None:
        raise TimingViolation(f"cycle {t}: {what}")

    def _gap(self, t: int, since: int, need: int, rule: str, what: str) -> None:
        if t - since < need:
            self._fail(t, f"{what} violates {rule}: {t - since} cycles after the previous "
                          f"command, need >= {need}")

    @property
    def ref_gap_limit(self) -> int:
        """The longest legal distance between two REFs (or reset and the first REF)."""
        return (self.ref_postpone_max + 1) * self.timing.REFI

    def refresh_deadline(self) -> int:
        """The last cycle by which the next REF must have been issued."""
        return self.prev_ref + self.ref_gap_limit

    def _refresh_due(self, t: int) -> None:
        if t > self.refresh_deadline():
            what = "reset" if self.refs == 0 else f"the REF at cycle {self.prev_ref}"
            self._fail(t, f"refresh late: no REF for {t - self.prev_ref} cycles since {what}, "
                          f"at most {self.ref_gap_limit} allowed ((postponed "
                          f"{self.ref_postpone_max} + 1) x tREFI={self.timing.REFI})")
        due = (t - self.start + 1) // self.timing.REFI
        owed = due - self.refs
        if owed > self.ref_postpone_max + 1:
            self._fail(t, f"refresh starved: {owed} REFs owed at cycle {t} "
                          f"({self.refs} issued, {due} due), at most "
                          f"{self.ref_postpone_max + 1} allowed (tREFI={self.timing.REFI}, "
                          f"{self.ref_postpone_max} may be postponed)")

    # -- API -------------------------------------------------------------------------------
    def command(self, t: int, cmd: int, bg: int, ba: int, row: int = 0, col: int = 0) -> None:
        """Check one command issued in cycle ``t`` and record it."""
        tm = self.timing
        if t < self.now:
            self._fail(t, f"command trace went back in time (previous cycle {self.now})")
        self.now = t
        self._refresh_due(t)
        name = dram.CMD_NAMES.get(cmd)
        if name is None or cmd == dram.CMD_NOP:
            self._fail(t, f"unknown command code {cmd}")
        self.counts[name] += 1
        b = (bg << self.ba_bits) | ba
        bank = self.banks[b]
        where = f"{name} bg{bg} ba{ba}"
        if cmd != dram.CMD_REF:
            self._gap(t, self.last_ref, tm.RFC, "tRFC", where)

        if cmd == dram.CMD_ACT:
            if bank.open:
                self._fail(t, f"{where} row {row}: bank already open (row {bank.row})")
            self._gap(t, bank.pre, tm.RP, "tRP", where)
            self._gap(t, bank.act, tm.RC, "tRC", where)
            self._gap(t, self.act_bg[bg], tm.RRD_L, "tRRD_L", where)
            self._gap(t, self.last_act, tm.RRD_S, "tRRD_S", where)
            if len(self.acts) == 4:
                self._gap(t, self.acts[0], tm.FAW, "tFAW", where + " (5th ACT in window)")
            bank.open, bank.row, bank.act = True, row, t
            self.acts.append(t)
            self.act_bg[bg] = t
            self.last_act = t
        elif cmd == dram.CMD_PRE:
            if not bank.open:
                self._fail(t, f"{where}: precharge of a closed bank")
            self._gap(t, bank.act, tm.RAS, "tRAS", where)
            self._gap(t, bank.rd, tm.RTP, "tRTP", where)
            self._gap(t, bank.wr, tm.CWL + tm.BURST + tm.WR, "tWR (tCWL+tBURST+tWR)", where)
            bank.open, bank.pre = False, t
        elif cmd == dram.CMD_PREA:
            for i, bk in enumerate(self.banks):
                if bk.open:
                    w = f"PREA (bank {i})"
                    self._gap(t, bk.act, tm.RAS, "tRAS", w)
                    self._gap(t, bk.rd, tm.RTP, "tRTP", w)
                    self._gap(t, bk.wr, tm.CWL + tm.BURST + tm.WR, "tWR (tCWL+tBURST+tWR)", w)
            for bk in self.banks:          # tRP from PREA holds for every bank
                bk.open, bk.pre = False, t
        elif cmd == dram.CMD_REF:
            for i, bk in enumerate(self.banks):
                if bk.open:
                    self._fail(t, f"REF with bank {i} open")
                self._gap(t, bk.pre, tm.RP, "tRP", f"REF (bank {i})")
                self._gap(t, bk.act, tm.RC, "tRC", f"REF (bank {i})")
            self._gap(t, self.last_ref, tm.RFC, "tRFC", "REF")
            self.max_ref_gap = max(self.max_ref_gap, t - self.prev_ref)
            self.last_ref = t
            self.prev_ref = t
            self.refs += 1
        elif cmd in (dram.CMD_RD, dram.CMD_WR):
            if not bank.open:
                self._fail(t, f"{where} col {col}: bank closed")
            if bank.row != row:
                self._fail(t, f"{where} row {row} col {col}: open row is {bank.row}")
            self._gap(t, bank.act, tm.RCD, "tRCD", where)
            self._gap(t, self.col_bg[bg], max(tm.CCD_L, tm.BURST), "tCCD_L", where)
            self._gap(t, self.last_col, max(tm.CCD_S, tm.BURST), "tCCD_S/tBURST", where)
            if cmd == dram.CMD_RD:
                self._gap(t, self.wr_bg[bg], tm.CWL + tm.BURST + tm.WTR_L,
                          "tWTR_L (tCWL+tBURST+tWTR_L)", where)
                self._gap(t, self.last_wr, tm.CWL + tm.BURST + tm.WTR_S,
                          "tWTR_S (tCWL+tBURST+tWTR_S)", where)
                bank.rd = t
                self.last_rd = t
                self.rd_times.append(t)
            else:
                self._gap(t, self.last_rd, tm.RTW, "tRTW (read to write turnaround)", where)
                bank.wr = t
                self.last_wr = t
                self.wr_bg[bg] = t
            self.col_bg[bg] = t
            self.last_col = t

    def read_data(self, t: int) -> None:
        """Check a read data beat (OKAY response) seen on the R channel in cycle ``t`` (tCL)."""
        if not self.rd_times:
            self._fail(t, "read data with no RD command issued for it")
        rd = self.rd_times.popleft()
        if t - rd < self.timing.CL:
            self._fail(t, f"read data {t - rd} cycles after its RD, violates tCL={self.timing.CL}")

    def at(self, t: int) -> None:
        """Check the refresh rules at cycle ``t`` with no command issued."""
        if t < self.now:
            self._fail(t, f"time went back (previous cycle {self.now})")
        self.now = t
        self._refresh_due(t)

    def finish(self, t: int) -> None:
        """Final checks at the end of a run (refresh debt and distance)."""
        self.at(t)

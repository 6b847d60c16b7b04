"""The DDR4 timing checker itself: legal traces pass, each broken rule is caught and named."""

from __future__ import annotations

import pytest

from pyhost.spec import dram
from pyhost.spec.dram import CMD_ACT, CMD_PRE, CMD_PREA, CMD_RD, CMD_REF, CMD_WR
from tb.dram_ctrl.ddr4_checker import Ddr4Checker, TimingViolation

# Distinct values so that an off-by-one in any rule is visible.
T = dram.Ddr4Timing(CL=9, CWL=5, RCD=7, RP=8, RAS=17, RC=27, WR=5, RTP=4, CCD_S=2, CCD_L=4,
                    RRD_S=3, RRD_L=5, FAW=20, WTR_S=3, WTR_L=7, BURST=2, RTW=5, RFC=40,
                    REFI=10_000)


def run(trace: list[tuple], timing: dram.Ddr4Timing = T, postpone: int = 8) -> Ddr4Checker:
    ck = Ddr4Checker(timing, postpone)
    for t, cmd, bg, ba, *rest in trace:
        ck.command(t, cmd, bg, ba, *rest)
    return ck


def legal() -> list[tuple]:
    """A trace that meets every rule with no slack."""
    return [
        (0, CMD_ACT, 0, 0, 3),
        (T.RRD_S, CMD_ACT, 1, 0, 4),                      # other bank group: tRRD_S
        (T.RCD, CMD_RD, 0, 0, 3, 0),                      # tRCD
        (T.RRD_S + T.RCD, CMD_RD, 1, 0, 4, 0),            # tRCD; other bank group: tCCD_S
        (T.RRD_S + T.RCD + T.RTW, CMD_WR, 1, 0, 4, 1),    # read to write: tRTW
        (T.RAS, CMD_PRE, 0, 0),                           # tRAS (>= tRCD + tRTP)
    ]


def test_legal_trace_passes() -> None:
    """A tight but legal trace raises nothing and is counted."""
    ck = run(legal())
    assert ck.counts["ACT"] == 2 and ck.counts["RD"] == 2 and ck.counts["WR"] == 1


BROKEN = {
    "tRCD": [(0, CMD_ACT, 0, 0, 1), (T.RCD - 1, CMD_RD, 0, 0, 1, 0)],
    "tRP": [(0, CMD_ACT, 0, 0, 1), (T.RC, CMD_PRE, 0, 0), (T.RC + T.RP - 1, CMD_ACT, 0, 0, 2)],
    "tRAS": [(0, CMD_ACT, 0, 0, 1), (T.RAS - 1, CMD_PRE, 0, 0)],
    "tRC": [(0, CMD_ACT, 0, 0, 1), (T.RAS, CMD_PRE, 0, 0),
            (max(T.RAS + T.RP, T.RC - 1), CMD_ACT, 0, 0, 2)],
    "tWR": [(0, CMD_ACT, 0, 0, 1), (T.RCD, CMD_WR, 0, 0, 1, 0),
            (T.RCD + T.CWL + T.BURST + T.WR - 1, CMD_PRE, 0, 0)],
    "tRTP": [(0, CMD_ACT, 0, 0, 1), (T.RAS - 1, CMD_RD, 0, 0, 1, 0),
             (T.RAS - 1 + T.RTP - 1, CMD_PRE, 0, 0)],
    "tCCD_L": [(0, CMD_ACT, 0, 0, 1), (T.RRD_L, CMD_ACT, 0, 1, 1), (20, CMD_RD, 0, 0, 1, 0),
               (20 + T.CCD_L - 1, CMD_RD, 0, 1, 1, 0)],
    "tCCD_S": [(0, CMD_ACT, 0, 0, 1), (T.RRD_S, CMD_ACT, 1, 0, 1), (20, CMD_RD, 0, 0, 1, 0),
               (20 + T.CCD_S - 1, CMD_RD, 1, 0, 1, 0)],
    "tRRD_L": [(0, CMD_ACT, 0, 0, 1), (T.RRD_L - 1, CMD_ACT, 0, 1, 1)],
    "tRRD_S": [(0, CMD_ACT, 0, 0, 1), (T.RRD_S - 1, CMD_ACT, 1, 0, 1)],
    "tFAW": [(0, CMD_ACT, 0, 0, 1), (5, CMD_ACT, 1, 0, 1), (10, CMD_ACT, 2, 0, 1),
             (15, CMD_ACT, 3, 0, 1), (T.FAW - 1, CMD_ACT, 0, 1, 1)],
    "tWTR_L": [(0, CMD_ACT, 0, 0, 1), (T.RRD_L, CMD_ACT, 0, 1, 1), (20, CMD_WR, 0, 0, 1, 0),
               (20 + T.CWL + T.BURST + T.WTR_L - 1, CMD_RD, 0, 1, 1, 0)],
    "tWTR_S": [(0, CMD_ACT, 0, 0, 1), (T.RRD_S, CMD_ACT, 1, 0, 1), (20, CMD_WR, 0, 0, 1, 0),
               (20 + T.CWL + T.BURST + T.WTR_S - 1, CMD_RD, 1, 0, 1, 0)],
    "tRTW": [(0, CMD_ACT, 0, 0, 1), (20, CMD_RD, 0, 0, 1, 0), (20 + T.RTW - 1, CMD_WR, 0, 0, 1, 1)],
    "tRFC": [(0, CMD_REF, 0, 0), (T.RFC - 1, CMD_ACT, 0, 0, 1)],
    "bank closed": [(0, CMD_RD, 0, 0, 1, 0)],
    "open row is": [(0, CMD_ACT, 0, 0, 1), (T.RCD, CMD_RD, 0, 0, 2, 0)],
    "already open": [(0, CMD_ACT, 0, 0, 1), (T.RC, CMD_ACT, 0, 0, 2)],
    "REF with bank": [(0, CMD_ACT, 0, 0, 1), (T.RC + 50, CMD_REF, 0, 0)],
    "precharge of a closed": [(0, CMD_PRE, 0, 0)],
    # PREA: every open bank's tRAS, tRTP and write recovery; then tRP for every bank
    "tRAS (PREA)": [(0, CMD_ACT, 0, 0, 1), (T.RRD_L, CMD_ACT, 0, 1, 1),
                      (T.RRD_L + T.RAS - 1, CMD_PREA, 0, 0)],
    "tRTP (PREA)": [(0, CMD_ACT, 1, 0, 1), (T.RAS - 1, CMD_RD, 1, 0, 1, 0),
                      (T.RAS - 1 + T.RTP - 1, CMD_PREA, 0, 0)],
    "tWR (PREA)": [(0, CMD_ACT, 2, 3, 1), (T.RCD, CMD_WR, 2, 3, 1, 0),
                     (T.RCD + T.CWL + T.BURST + T.WR - 1, CMD_PREA, 0, 0)],
    "tRP (PREA)": [(0, CMD_ACT, 0, 0, 1), (T.RC, CMD_PREA, 0, 0),
                   (T.RC + T.RP - 1, CMD_ACT, 3, 3, 2)],
}


@pytest.mark.parametrize("rule", list(BROKEN))
def test_violation_is_caught(rule: str) -> None:
    """Breaking one rule by one cycle raises a TimingViolation naming the rule."""
    rx = rule
    if rule.endswith(" (PREA)"):   # named by the PREA's bank, or by the ACT after it
        r = rule.removesuffix(" (PREA)")
        rx = f"violates {r}" if r == "tRP" else rf"PREA \(bank \d+\) violates {r}"
    with pytest.raises(TimingViolation, match=rx):
        run(BROKEN[rule])


@pytest.mark.parametrize("rule", [r for r in BROKEN if r.startswith("t")])
def test_one_cycle_later_is_legal(rule: str) -> None:
    """The same trace with its last command one cycle later is legal (no off-by-one)."""
    trace = BROKEN[rule][:-1] + [(BROKEN[rule][-1][0] + 1, *BROKEN[rule][-1][1:])]
    run(trace)


def test_refresh_starvation() -> None:
    """More than REF_POSTPONE_MAX + 1 owed refreshes is a violation, even when no two REFs are
    too far apart; paying one back is not."""
    t = T.replace(REFI=100)
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(299, CMD_ACT, 0, 0, 1)            # 3 owed: allowed (2 postponed + 1 due)
    ck = Ddr4Checker(t, ref_postpone_max=2)
    with pytest.raises(TimingViolation, match="refresh starved"):
        for r in (290, 580, 870):                # each within 3 x tREFI of the previous one
            ck.command(r, CMD_REF, 0, 0)         # at 580: 5 due, 1 issued
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(250, CMD_REF, 0, 0)
    ck.command(399, CMD_ACT, 0, 0, 1)


def test_refresh_distance() -> None:
    """No two REFs, nor reset and the first REF, more than (postponed + 1) x tREFI apart: the
    rule the debt count alone misses (a REF paid just after it fell due, then saturating
    traffic); the longest gap is kept."""
    t = T.replace(REFI=100)
    limit = 3 * t.REFI
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(limit, CMD_REF, 0, 0)             # first REF at the limit after reset
    ck.command(limit + 50, CMD_REF, 0, 0)
    assert ck.max_ref_gap == limit
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(100, CMD_REF, 0, 0)               # idle: paid as soon as it is due
    ck.command(100 + limit, CMD_REF, 0, 0)
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(100, CMD_REF, 0, 0)
    with pytest.raises(TimingViolation, match="refresh late.*since the REF at cycle 100"):
        ck.command(101 + limit, CMD_REF, 0, 0)   # only 3 owed: the debt rule allows it
    ck = Ddr4Checker(t, ref_postpone_max=2)
    with pytest.raises(TimingViolation, match="refresh late.*since reset"):
        ck.command(limit + 1, CMD_REF, 0, 0)
    # caught with no command at all, by the end-of-run check
    ck = Ddr4Checker(t, ref_postpone_max=2)
    ck.command(50, CMD_REF, 0, 0)
    ck.finish(50 + limit)
    with pytest.raises(TimingViolation, match="refresh late"):
        ck.finish(51 + limit)


def test_prea_closes_every_bank() -> None:
    """After PREA every bank is closed: REF is legal after tRP, a column command is not."""
    ck = run([(0, CMD_ACT, 0, 0, 1), (T.RRD_L, CMD_ACT, 0, 1, 2), (T.RC, CMD_PREA, 0, 0),
              (T.RC + T.RP, CMD_REF, 0, 0)])
    assert ck.counts["PREA"] == 1 and ck.counts["REF"] == 1
    with pytest.raises(TimingViolation, match="bank closed"):
        run([(0, CMD_ACT, 0, 0, 1), (T.RC, CMD_PREA, 0, 0), (T.RC + T.RP, CMD_RD, 0, 0, 1, 0)])


def test_read_latency() -> None:
    """Read data earlier than tCL after its RD is a violation."""
    ck = run([(0, CMD_ACT, 0, 0, 1), (T.RCD, CMD_RD, 0, 0, 1, 0)])
    with pytest.raises(TimingViolation, match="tCL"):
        ck.read_data(T.RCD + T.CL - 1)
    ck = run([(0, CMD_ACT, 0, 0, 1), (T.RCD, CMD_RD, 0, 0, 1, 0)])
    ck.read_data(T.RCD + T.CL)
    with pytest.raises(TimingViolation, match="no RD"):
        ck.read_data(100)

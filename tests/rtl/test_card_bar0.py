"""RtlCard's lean BAR0 master (tb/common/axil_master.py) against cocotbext-axi's AxiLiteMaster.

The lean master exists to leave nothing watched while the card computes; the claim is that it
is otherwise the same master. tb/card_top/test_card_bar0.py runs one access sequence (after
reset, back to back, from coroutines at every phase of a cycle, from the bridge thread) with
each, sampling the whole AXI4-Lite bus at every rising edge: the bus, every access's call and
return times and every value read must be identical, and the reads must return what was
written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyhost.spec import regs
from tb.card_top.test_card_bar0 import SIGNALS
from tb.common import simulator


@pytest.mark.rtl
def test_lean_bar0_master_is_cocotbext_axis_to_the_edge(sim: str, tmp_path: Path) -> None:
    build = simulator.card_build(sim, {"MEM_SIZE": "64'd1048576"}, waves=False)
    got = {}
    for master in ("cocotbext-axi", "lean"):
        out = tmp_path / f"{master}.json"
        simulator.test(build, "tb.card_top.test_card_bar0", "bar0_sequence",
                       run_name=f"bar0_{master}",
                       extra_env={"CARD_TB_BAR0": master, "CARD_TB_OUT": str(out),
                                  "COCOTB_LOG_LEVEL": "WARNING"})
        got[master] = json.loads(out.read_text())
    ref, lean = got["cocotbext-axi"], got["lean"]
    assert len(ref["log"]) == len(lean["log"]) > 20
    for a, b in zip(ref["log"], lean["log"], strict=True):
        assert a == b, f"access differs (cocotbext-axi, lean): {a} vs {b}"
    assert len(ref["edges"]) == len(lean["edges"]) > 100
    names = ["time", *SIGNALS, "rst"]
    bready, bvalid = names.index("bready"), names.index("bvalid")
    rready, rvalid = names.index("rready"), names.index("rvalid")
    rst = names.index("rst")
    ready_differs, prev_rst = 0, "1"
    for k, (a, b) in enumerate(zip(ref["edges"], lean["edges"], strict=True)):
        # BREADY / RREADY while their VALID is low mean nothing to the slave (AXI: a transfer
        # needs both; csr.v reads them only with its valid up). cocotbext-axi drops them while
        # rst is high and raises them at the first edge after; the lean master keeps them up.
        a, b = list(a), list(b)
        for ready, valid in ((bready, bvalid), (rready, rvalid)):
            if a[valid] == "0" and b[valid] == "0" and a[ready] != b[ready]:
                assert k == 0 or a[rst] == "1" or prev_rst == "1", \
                    f"READY differs outside a reset: {a} vs {b}"
                ready_differs += 1
                a[ready] = b[ready] = "-"
        assert a == b, f"bus differs at an edge (cocotbext-axi, lean): {a} vs {b}"
        prev_rst = a[rst]
    assert ready_differs > 0       # the comparison saw the resets (two in the sequence)
    assert ref["end_ps"] == lean["end_ps"]
    # and the accesses did what they say: each SCRATCH read returns the last SCRATCH write
    last = None
    for tag, kind, name, value, *_ in lean["log"]:
        if name == "SCRATCH" and kind == "w":
            last = value
        elif name == "SCRATCH":
            assert value == last, (tag, value, last)
        elif name == "CARD_ID":
            assert value == regs.CARD_ID
        elif name == "0xFFC":
            assert value == 0


@pytest.mark.rtl
def test_bar0_errors_neither_hang_nor_leave_a_valid_up(sim: str) -> None:
    """rst held high: Bar0Error after the bound; rst rising in an access: Bar0Error at once,
    its VALID dropped; the next access after the release works."""
    build = simulator.card_build(sim, {"MEM_SIZE": "64'd1048576"}, waves=False)
    simulator.test(build, "tb.card_top.test_card_bar0", "bar0_errors",
                   run_name="bar0_errors", extra_env={"COCOTB_LOG_LEVEL": "WARNING"})

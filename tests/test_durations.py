"""The test ordering helpers: pytest's --durations lines parsed, and the deal to the workers."""

from __future__ import annotations

from tests import durations


def test_parse_reads_call_lines_only() -> None:
    log = """============================= slowest 25 durations =============================
160.94s call     tests/rtl/test_card_top.py::test_card_top[verilator-inorder]
12.50s setup    tests/tb/test_sweep.py::test_sweep_on_an_existing_cluster
149.50s call     tests/rtl/test_golden_behaviour.py::test_demo_on_the_rtl_card[icarus]
=========================== short test summary info ============================"""
    assert durations.parse(log) == {
        "tests/rtl/test_card_top.py::test_card_top[verilator-inorder]": 160.94,
        "tests/rtl/test_golden_behaviour.py::test_demo_on_the_rtl_card[icarus]": 149.5}


def test_deal_gives_every_worker_a_long_test_first() -> None:
    order = list(range(9))                       # longest first
    laid = durations.deal(order, 2)
    assert sorted(laid) == order
    first, second = laid[:len(order) // 2], laid[len(order) // 2:]
    assert first[0] == 0 and second[0] in (1, 8)  # (xdist gives the first worker floor(n/2))
    assert laid[:5] == [0, 2, 4, 6, 8] and laid[5:] == [1, 3, 5, 7]
    assert durations.deal(order, 1) == order

"""PCIe regression: the card as a PCIe endpoint (card_top_pcie) behind the UltraScale+ hard IP
model and a root complex, on each simulator.

Verilator runs every test of the bench once, in one simulator process on the card build every card
bench shares (simulator.card_build: lean -O3, public only simulator.CARD_PUBLIC, which is what the
DDR4 monitor and the request monitor read): enumeration on Gen3 x16 and Gen4 x8, MMIO of every
register, unmapped BAR offsets, MSI-X on every source, the whole driver program (but the
card-to-card copies, which never leave the card) and every accelerator program on the out-of-order
host, the demo CNN, the idle link, the completion buffer, the default host's reordering, flow
control with few credits at the root port, the completion errors and the limits cases (MPS
128..1024 x MRRS 128..4096, the 4 KiB read settings on hosts that split every read into 64 and
128-byte completions), the RC two-TLP straddle mode and completions packed four a beat, all under
the request-TLP monitor, the RQ beat monitor and the DDR4 monitor, with the requester streams
straddled (the default); a build without straddling (STRADDLE 0) runs a subset of it
(NO_STRADDLE). Icarus, much
slower on this design, runs a smoke set: enumeration with a DMA each way, every register, MSI-X
on every source: every RTL block of the endpoint, both clocks.
"""

from __future__ import annotations

import json

import pytest

from tb.common import simulator

CARD_MEM = 16 << 20
def run_pcie(sim: str, tests: list[str] | None = None, waves: bool | None = None,
             straddle: bool | None = None) -> simulator.RunResult:
    """The bench on the card build; ``straddle`` None: the default (pcie.STRADDLE), else a build
    with card_top_pcie's STRADDLE set so (and the hard IP configured alike)."""
    params: dict = {} if straddle is None else {"STRADDLE": int(straddle)}
    b = simulator.card_build(sim, {"MEM_SIZE": f"64'd{CARD_MEM}", **params}, waves=waves,
                             top="card_top_pcie")
    return simulator.test(b, "tb.card_top_pcie.test_card_top_pcie", testcase=tests,
                          extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM,
                                                                   **params}),
                                     "SIM": sim})


def _indexed(name: str, checks) -> list[str]:
    return [f"{name}/check={i}" for i in range(len(checks))]


def verilator_tests() -> list[str]:
    """Every test of the bench (by name, so that one not collected fails the count)."""
    from tb.card_top.accel_program import ALL_CHECKS as ACCEL_CHECKS
    from tb.card_top_pcie import test_card_top_pcie as bench

    return (["test_enumeration/link=gen3x16", "test_enumeration/link=gen4x8",
             "test_mmio_every_register", "test_unmapped_bar_offsets", "test_msix_every_source"]
            + _indexed("test_driver_program", bench.LINK_CHECKS)
            + _indexed("test_accel_program", ACCEL_CHECKS)
            + ["test_idle_link_runs_no_python", "test_demo_model", "test_completion_buffer",
               "test_default_host_reorders", "test_flow_control", "test_rc_two_tlp_straddle",
               "test_rc_small_completions"]
            + [f"test_completion_errors/case={i}" for i in range(len(bench.ERROR_CASES))]
            + [f"test_request_limits/limits={i}" for i in range(len(bench.LIMITS))])


#: Icarus (about 25x slower on this design): a smoke run of every RTL block of the endpoint and
#: both clocks: enumeration with one DMA each way, MMIO of every register, MSI-X on every source.
ICARUS = ["test_enumeration/link=gen3x16", "test_mmio_every_register", "test_msix_every_source"]


#: Without straddling (card_top_pcie STRADDLE 0, the hard IP alike: one TLP per run of beats),
#: on Verilator: a DMA each way, the streams both ways on the default host, the completion buffer
#: on 64-byte completions, the completion errors, the limits on the split hosts.
NO_STRADDLE = (["test_enumeration/link=gen3x16", "test_completion_buffer",
                "test_default_host_reorders"]
               + [f"test_completion_errors/case={i}" for i in (0, 3, 4, 5)]
               + ["test_request_limits/limits=1", "test_request_limits/limits=5"])


@pytest.mark.rtl
def test_card_top_pcie(sim: str) -> None:
    """The PCIe card passes its bench (Verilator: all of it; Icarus: the smoke set), with the
    requester streams straddled (the default)."""
    selection = verilator_tests() if sim == "verilator" else ICARUS
    res = run_pcie(sim, selection)
    assert res.tests == len(selection)


@pytest.mark.rtl
def test_card_top_pcie_no_straddle(sim: str) -> None:
    """The PCIe card without straddling (STRADDLE 0): the subset NO_STRADDLE on Verilator."""
    if sim != "verilator":
        pytest.skip("Icarus runs the smoke set on the default build")
    res = run_pcie(sim, NO_STRADDLE, straddle=False)
    assert res.tests == len(NO_STRADDLE)

"""PCIe regression: the card as a PCIe endpoint (card_top_pcie) behind the UltraScale+ hard IP
model and a root complex, on each simulator.

Verilator runs every test of the bench once, in one simulator process on one lean build (only what
the bench reads is public: the DRAM controller's trace for the DDR4 monitor, the engine's request
limits for the request monitor's messages; verilated.mk's -Os, which builds in 64 CPU seconds here
against 82 at -O3, and the bench's time is mostly the link model's Python): enumeration on Gen3 x16
and Gen4 x8, MMIO of every register, unmapped BAR offsets, MSI-X on every source, the whole driver
program (but the card-to-card copies, which never leave the card) and every accelerator program on
the out-of-order host, the demo CNN, the idle link, the completion buffer, the default host's
reordering, the completion errors and the limits cases (MPS 128..1024 x MRRS 128..4096, the 4 KiB
read settings on hosts that split every read into 64 and 128-byte completions), all under the
request-TLP monitor and the DDR4 monitor. Icarus, much slower on this design, runs a smoke set:
enumeration with a DMA each way, every register, MSI-X on every source: every RTL block of the
endpoint, both clocks.
"""

from __future__ import annotations

import json

import pytest

from tb.common import simulator

CARD_MEM = 16 << 20
#: What the bench reads inside the card (a lean build keeps only these and the top's ports
#: visible): the DDR4 monitor's trace of dram_ctrl, the request monitor's engine limits.
PUBLIC = ["dram_ctrl:trace_*", "dram_ctrl:s_axi_rvalid", "dma_engine:mps", "dma_engine:mrrs"]


def pcie_sources():
    from tb.common.pcie_card import card_sources

    return card_sources()


def run_pcie(sim: str, tests: list[str] | None = None,
             waves: bool | None = None) -> simulator.RunResult:
    return simulator.run(sim, "card_top_pcie", pcie_sources(),
                         "tb.card_top_pcie.test_card_top_pcie",
                         parameters={"MEM_SIZE": f"64'd{CARD_MEM}"}, testcase=tests,
                         waves=waves, public=PUBLIC,
                         extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
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
               "test_default_host_reorders"]
            + [f"test_completion_errors/case={i}" for i in range(len(bench.ERROR_CASES))]
            + [f"test_request_limits/limits={i}" for i in range(len(bench.LIMITS))])


#: Icarus (about 25x slower on this design): a smoke run of every RTL block of the endpoint and
#: both clocks: enumeration with one DMA each way, MMIO of every register, MSI-X on every source.
ICARUS = ["test_enumeration/link=gen3x16", "test_mmio_every_register", "test_msix_every_source"]


@pytest.mark.rtl
def test_card_top_pcie(sim: str) -> None:
    """The PCIe card passes its bench (Verilator: all of it; Icarus: the smoke set)."""
    selection = verilator_tests() if sim == "verilator" else ICARUS
    res = run_pcie(sim, selection)
    assert res.tests == len(selection)

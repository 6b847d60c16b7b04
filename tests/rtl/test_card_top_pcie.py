"""PCIe regression: the card as a PCIe endpoint (card_top_pcie) behind the UltraScale+ hard IP
model and a root complex, on each simulator.

Verilator runs every test of the bench once with completions out of order (jittered latency,
split at MPS): enumeration on Gen3 x16 and Gen4 x8, MMIO of every register, unmapped BAR
offsets, MSI-X on every source, the whole driver program, every accelerator program, the demo
CNN, the completion buffer budget, the five completion errors and the limits cases (MPS
128..1024 x MRRS 128..4096), all under the request-TLP monitor; with completions split at 64
and at 128 bytes a reduced set (the chains check, one limits case each, poisoned data). Icarus,
much slower on this design, runs a smoke set: enumeration with a DMA each way, every register,
MSI-X on every source: every RTL block of the endpoint, both clocks.
"""

from __future__ import annotations

import json

import pytest

from tb.common import simulator

CARD_MEM = 16 << 20


def pcie_sources():
    from tb.common.pcie_card import card_sources

    return card_sources()


def run_pcie(sim: str, host: str, tests: list[str] | None = None,
             waves: bool | None = None) -> simulator.RunResult:
    return simulator.run(sim, "card_top_pcie", pcie_sources(),
                         "tb.card_top_pcie.test_card_top_pcie",
                         parameters={"MEM_SIZE": f"64'd{CARD_MEM}"}, testcase=tests,
                         waves=waves,
                         extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                    "CARD_TB_HOST": host, "SIM": sim})


def _indexed(name: str, checks, names: tuple[str, ...] | None) -> list[str]:
    return [f"{name}/check={i}" for i, c in enumerate(checks) if names is None or c.name in names]


def _driver_checks():
    from tb.card_top.driver_program import ALL_CHECKS

    return ALL_CHECKS


def _driver_tests(names: tuple[str, ...] | None) -> list[str]:
    return _indexed("test_driver_program", _driver_checks(), names)


def _accel_tests(names: tuple[str, ...] | None) -> list[str]:
    from tb.card_top.accel_program import ALL_CHECKS

    return _indexed("test_accel_program", ALL_CHECKS, names)


BASIC = ["test_enumeration/link=gen3x16", "test_enumeration/link=gen4x8",
         "test_mmio_every_register", "test_unmapped_bar_offsets", "test_msix_every_source"]
ERRORS = [f"test_completion_errors/kind={k}" for k in ("ur", "ca", "poison", "drop", "lose")]
LIMITS = [f"test_request_limits/limits={i}" for i in range(6)]

#: The Verilator runs: every test of the bench once on the out-of-order host, in two halves that
#: take about as long (pytest -n runs them side by side); the split-completion hosts a reduced
#: set that exercises what they change (the RC realignment of many small completions: the
#: chains check, the alignment sweep of one limits case with 4 KiB reads, which these hosts
#: split into 64 or 128-byte pieces, poisoned data across 128-byte pieces).
#: test_completion_buffer makes its own 64-byte-split host, so it runs in the full set.
PARTS = {
    "ooo-a": lambda: (BASIC + _driver_tests(None) + ["test_idle_link_runs_no_python"]),
    "ooo-b": lambda: (_accel_tests(None) + ["test_demo_model", "test_completion_buffer"]
                      + ERRORS + LIMITS),
    "split64": lambda: _driver_tests(("check_chains",)) + [LIMITS[1]],
    "split128": lambda: (_driver_tests(("check_chains",)) + [LIMITS[5]]
                         + ["test_completion_errors/kind=poison"]),
}
#: Icarus (about 25x slower on this design): a smoke run of every RTL block of the endpoint and
#: both clocks: enumeration with one DMA each way, MMIO of every register, MSI-X on every source.
ICARUS = ["test_enumeration/link=gen3x16", "test_mmio_every_register", "test_msix_every_source"]


def _selection(sim: str, part: str) -> list[str]:
    return PARTS[part]() if sim == "verilator" else ICARUS


@pytest.mark.rtl
@pytest.mark.parametrize("part", list(PARTS))
def test_card_top_pcie(sim: str, part: str) -> None:
    """The PCIe card passes its bench (this part of it) with this host behind the root complex."""
    if sim == "icarus" and part != "ooo-a":
        pytest.skip("Icarus runs a short smoke set once (ooo-a); the full set and the split "
                    "hosts run on Verilator, which is about 25x faster on this design")
    selection = _selection(sim, part)
    res = run_pcie(sim, part.split("-")[0], selection)
    assert res.tests == len(selection)

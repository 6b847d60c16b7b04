"""PCIe regression: the card as a PCIe endpoint (card_top_pcie) behind the UltraScale+ hard IP
model and a root complex, on each simulator.

Verilator runs every test of the bench: enumeration, MMIO of every register, unmapped BAR
offsets, MSI-X on every source, the whole driver program with completions out of order (and the
chains check and an alignment sweep again with completions split at 64 and at 128 bytes), the
request limits (MPS 128..1024 x MRRS 128..4096) under
the request-TLP monitor, and the four completion errors. Icarus, much slower on this design,
runs enumeration, every register, unmapped offsets, the chains check, a completer abort and the
128-byte limits case with its alignment sweep: every RTL block of the endpoint, both clocks.
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


def _driver_tests(names: tuple[str, ...] | None) -> list[str]:
    from tb.card_top.driver_program import ALL_CHECKS

    return [f"test_driver_program/check={i}" for i, c in enumerate(ALL_CHECKS)
            if names is None or c.name in names]


BASIC = ["test_enumeration", "test_mmio_every_register", "test_unmapped_bar_offsets",
         "test_msix_every_source"]
ERRORS = [f"test_completion_errors/kind={k}" for k in ("ur", "ca", "poison", "drop")]


def _selection(sim: str, host: str) -> list[str]:
    if sim == "verilator":
        if host == "ooo":
            return (BASIC + _driver_tests(None) + ERRORS
                    + [f"test_request_limits/limits={i}" for i in range(6)])
        return _driver_tests(("check_chains",)) + ["test_request_limits/limits=1"]
    return (BASIC[:3] + _driver_tests(("check_chains",))
            + ["test_completion_errors/kind=ca", "test_request_limits/limits=0"])


@pytest.mark.rtl
@pytest.mark.parametrize("host", ["ooo", "split64", "split128"])
def test_card_top_pcie(sim: str, host: str) -> None:
    """The PCIe card passes its bench with this host behind the root complex."""
    if sim == "icarus" and host != "ooo":
        pytest.skip("Icarus runs the smaller set once; split completions run on Verilator")
    selection = _selection(sim, host)
    res = run_pcie(sim, host, selection)
    assert res.tests == len(selection)

"""PCIe regression: the card as a PCIe endpoint (card_top_pcie) behind the UltraScale+ hard IP
model and a root complex, on each simulator.

Verilator runs every test of the bench once, spread over three host behaviours: with
completions out of order (jittered latency, split at MPS) enumeration on Gen3 x16 and Gen4 x8,
MMIO of every register, unmapped BAR offsets, MSI-X on every source, the whole driver program
and the demo CNN; with completions split at 64 bytes the chains check, every accelerator
program and one limits case; split at 128 bytes the alignment sweep, the four completion errors
and the other limits cases (MPS 128..1024 x MRRS 128..4096), all under the request-TLP monitor.
Icarus, much slower on this design, runs enumeration, every register, unmapped offsets, the
chains check, a completer abort and the 128-byte limits case with its alignment sweep: every
RTL block of the endpoint, both clocks.
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
ERRORS = [f"test_completion_errors/kind={k}" for k in ("ur", "ca", "poison", "drop")]
#: The driver checks that run with split completions (64, 128 bytes) instead of out of order
SPLIT_CHECKS = ("check_chains", "check_alignment")


def _selection(sim: str, host: str) -> list[str]:
    """Verilator: everything once, spread over the three hosts so that the three runs take
    about as long (pytest -n runs them side by side); Icarus: the smaller set."""
    if sim == "verilator":
        if host == "ooo":
            return (BASIC + _driver_tests(tuple(c.name for c in _driver_checks()
                                                if c.name not in SPLIT_CHECKS))
                    + ["test_idle_link_runs_no_python", "test_demo_model"])
        if host == "split64":
            return (_driver_tests(SPLIT_CHECKS[:1]) + _accel_tests(None)
                    + ["test_request_limits/limits=1"])
        return (_driver_tests(SPLIT_CHECKS[1:]) + ERRORS
                + [f"test_request_limits/limits={i}" for i in (0, 2, 3, 4, 5)])
    return (BASIC[:1] + BASIC[2:4] + _driver_tests(("check_chains",))
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

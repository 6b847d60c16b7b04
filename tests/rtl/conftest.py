"""pytest glue for the RTL regression: every bench runs on each simulator in ``SIMULATORS``.

A missing simulator is a visible skip with the reason, never a silent pass; with
``REQUIRE_SIMULATORS=1`` (set by .ci/run) a missing simulator is an error instead.
"""

from __future__ import annotations

import os

import pytest

from tb.common.simulator import SIMULATORS, simulator_available


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sim" in metafunc.fixturenames:
        wanted = os.environ.get("SIM", "")
        sims = [s for s in SIMULATORS if not wanted or s in wanted.split(",")]
        metafunc.parametrize("sim", sims)


@pytest.fixture(autouse=True)
def _need_simulator(request: pytest.FixtureRequest) -> None:
    sim = request.node.callspec.params.get("sim") if hasattr(request.node, "callspec") else None
    if sim and not simulator_available(sim):
        msg = (f"SKIPPED {sim} run: {sim} is not installed"
               + (" (apt-get install iverilog)" if sim == "icarus" else ""))
        if os.environ.get("REQUIRE_SIMULATORS", "0") == "1":
            pytest.fail(msg.replace("SKIPPED", "MISSING"))
        pytest.skip(msg)

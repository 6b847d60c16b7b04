"""The model's C++ host-memory slave against the Python one (tb/common/host_memory_axi.py).

Under Verilator a fixed-latency host memory is served from the model's main
(tb/common/cosim_main.cpp) instead of a Python coroutine. The claim is that nothing changes:
every driver check of the shared driver program (transfers of every alignment, chains, batched
calls, request limits, injected bus errors, the abort) runs on both, with the host-port monitor,
and each check must end at the same simulated time on both (a handshake one cycle off anywhere
moves it) and pass on both.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tb.common import simulator

CARD_MEM = 16 << 20
CHUNK = 64 << 10


def _sim_times(res: simulator.RunResult) -> dict[str, float]:
    out = {}
    for case in ET.parse(res.results_xml).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name", "?")] = float(props["sim_time_stop"])
    return out


@pytest.mark.rtl
def test_native_host_memory_matches_the_python_model(sim: str) -> None:
    """The driver checks end at the same simulated times on the C++ and the Python slave."""
    if sim != "verilator":
        pytest.skip("the C++ slave is part of the Verilator model's main")
    build = simulator.card_build(sim, {"MEM_SIZE": f"64'd{CARD_MEM}"}, waves=False)
    times = {}
    for native in ("1", "0"):
        res = simulator.test(build, "tb.card_top.test_card_top", run_name=f"host_memory_{native}",
                             extra_env={"CARD_TB_PARAMS": json.dumps({"MEM_SIZE": CARD_MEM}),
                                        "CARD_TB_MEMORY": "fixed", "CARD_TB_CHUNK": str(CHUNK),
                                        "COSIM_NATIVE_HOST_MEMORY": native,
                                        "CARD_TB_EXPECT_NATIVE": native})
        times[native] = _sim_times(res)
    assert len(times["1"]) == 10 and times["1"].keys() == times["0"].keys()
    diff = {k: (times["1"][k], times["0"][k]) for k in times["1"] if times["1"][k] != times["0"][k]}
    assert not diff, f"checks that ended at other times (native, python) ns: {diff}"

"""The cocotb side of an RTL sweep point: the compiled model on card_top through the runtime.

tb/sweep/worker.py builds card_top with the point's parameters and runs ``sweep_point`` with
the paths in the environment (SWEEP_XMODEL, SWEEP_INPUTS, SWEEP_IMAGES, SWEEP_POLICY,
SWEEP_LINK, SWEEP_OUT, SWEEP_OUT_NPZ). The host program is tb/sweep/host.py's `run_images`, the
same code the functional-card points run, in a ``cocotb.task.bridge`` thread.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cocotb
import numpy as np

from tb.sweep.spec import DEFAULT_LINK


def _host_main(card: Any, env: dict[str, str]) -> dict[str, Any]:
    from compiler import xmodel
    from pyhost.spec import dram
    from tb.sweep.host import run_images

    graph = xmodel.load(env["SWEEP_XMODEL"])
    with np.load(env["SWEEP_INPUTS"]) as z:
        feeds = {k: z[k] for k in z.files}
    ns = dram.CTRL_CLK_NS
    runs, outs, cycles = run_images(card, graph, feeds, int(env["SWEEP_IMAGES"]),
                                    env["SWEEP_POLICY"],
                                    clock=lambda: card.cycles() * ns * 1e-9)
    np.savez(env["SWEEP_OUT_NPZ"], **outs)
    return {"runs": runs, "cycles": cycles}


@cocotb.test()
async def sweep_point(dut) -> None:
    """One sweep point on the RTL card; statistics and outputs written for the worker."""
    from cocotb.task import bridge

    from pyhost.backend import HostMemory
    from tb.common.clocking import reset, start_clock
    from tb.common.host_memory_axi import HostMemoryConfig
    from tb.common.rtl_card import RtlCard
    from tb.sweep.host import HOST_BYTES, HOST_LATENCY

    env = dict(os.environ)
    link = env.get("SWEEP_LINK", DEFAULT_LINK)
    extra = {} if link == DEFAULT_LINK else {"link": link}
    start_clock(dut)
    card = RtlCard(dut, HostMemory(HOST_BYTES), HostMemoryConfig(read_latency=HOST_LATENCY),
                   irq_timeout_ns=10**12, **extra)
    await reset(dut)
    r = await bridge(_host_main)(card, env)
    Path(env["SWEEP_OUT"]).write_text(json.dumps(r))

"""Measurements for the performance model: accelerator runs on a card, with their cycle counters.

Driver-level like tb/card_top/accel_program.py, so the same code measures the RTL card (cocotb,
tb/card_top/test_perf_model.py) and the functional card (whose counters are the model's
estimate). Two kinds of case:

- `random_cases`: constrained-random programs (tb/accel/randprog.py): small, irregular loads,
  stores, GEMMs and ALU passes with arbitrary token chains;
- `layer_cases`: every layer of the demo CNN as its own accelerator subgraph
  (``max_layers=1``), run through the card runtime (compiler/runtime/card.py).

Each case is a dict: name, the program (hex of its 16-byte instructions), the slots it ran with,
and the card's counters.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from pyhost.driver import PcieDriver
from pyhost.spec import isa
from tb.accel import randprog
from tb.card_top.accel_program import TIMEOUT_S, WORK, upload


def random_cases(drv: PcieDriver, seeds: range, n_insns: int = 60) -> list[dict[str, Any]]:
    """Random programs (seeded) on the card: their counters."""
    cfg = drv.accel_config()
    out = []
    for seed in seeds:
        rp = randprog.generate(random.Random(7000 + seed), cfg, mem_size=WORK, n_insns=n_insns)
        image = rp.memory(WORK)
        lo, hi = rp.footprint
        upload(drv, lo, bytes(image[lo:hi]))
        prog = drv.accel_load_program(rp.image(), rp.insn_base)
        run = drv.accel_run(prog, dict(enumerate(rp.slots)), TIMEOUT_S)
        out.append({"name": f"random-{seed}", "program": rp.image().hex(),
                    "slots": list(rp.slots), "counters": dict(run.counters)})
    return out


def layer_cases(drv: PcieDriver) -> list[dict[str, Any]]:
    """The demo CNN, one layer per accelerator subgraph, through the runtime: per layer its
    program, the slots the runtime bound and the counters."""
    from compiler import zoo
    from compiler.pipeline import compile_model
    from compiler.runtime.card import CardExecutor, CardSession, accel_image

    cfg = drv.accel_config()
    opts = {"plugin": "accel", "quantize": {"samples": 2, "seed": 0},
            "plugin_options": {"accel": {**cfg.__dict__, "max_layers": 1}}}
    graph = compile_model(zoo.demo_cnn(), opts).graph
    images = {s.name: accel_image(s) for s in graph.root_subgraph.children_topological_sort()
              if s.get_attr("device") == "ACCEL"}
    session = CardSession(drv)
    bound: dict[str, list[int]] = {}
    bind = drv.accel_bind

    def recording_bind(slots: Any) -> None:          # which addresses each launch used
        bound["last"] = [int(slots.get(k, 0)) for k in range(isa.NUM_SLOTS)]
        bind(slots)

    drv.accel_bind = recording_bind  # type: ignore[method-assign]
    starts: list[list[int]] = []
    start = drv.accel_start

    def recording_start(prog: Any) -> None:
        starts.append(bound.get("last", []))
        start(prog)

    drv.accel_start = recording_start  # type: ignore[method-assign]
    try:
        ex = CardExecutor(graph, session)
        ex.run({"input": np.asarray(zoo.demo_input(1))})
        steps = [s for s in ex.stats.steps if s.counters]
        ex.close()
    finally:
        drv.accel_bind = bind  # type: ignore[method-assign]
        drv.accel_start = start  # type: ignore[method-assign]
    out = []
    for step, slots in zip(steps, starts, strict=True):
        img = images[step.name]
        out.append({"name": f"demo-{step.name}", "program": bytes(img.program).hex(),
                    "slots": slots, "counters": dict(step.counters or {})})
    return out


def decode_program(hexed: str) -> list[isa.Insn]:
    return isa.decode_program(bytes.fromhex(hexed))

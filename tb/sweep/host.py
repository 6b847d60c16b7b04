"""What one sweep point does on a card, the same on the functional card and on the RTL.

`run_images` is the host program: a `CardExecutor` through the memory manager (the point's
policy) and the PCIe driver runs the point's inputs one after the other and returns the
statistics of every run and the outputs. On the RTL it runs inside a cocotb bridge thread
(tb/sweep/rtl_point.py); on the functional card in the calling process. `summarize` turns the
statistics into the point's figures (cycles per subgraph, MAC utilization, bytes moved each way,
evictions), `compare` checks outputs against onnxruntime and against the functional card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

#: Host memory of the simulated machine (manager's host copies and DMA buffers).
HOST_BYTES = 256 << 20
#: Host read latency seen by the card (cycles of 2.5 ns): 500 ns, a PCIe round trip.
HOST_LATENCY = 200


def run_images(card: Any, graph: Any, feeds: Mapping[str, np.ndarray], images: int,
               policy: str, clock: Callable[[], float] | None = None
               ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], int]:
    """Run ``images`` inputs (feeds' first axis) of ``graph`` on ``card``. Returns (the stats
    of every run as dicts, outputs as ``name/i`` -> array, the card's simulated cycles over the
    whole run: card.cycles() where the card has a clock, else 0)."""
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver

    drv = PcieDriver(card, timeout_s=100_000)
    session = CardSession(drv, policy=policy, clock=clock, timeline=False)
    ex = CardExecutor(graph, session)
    cycles = getattr(card, "cycles", None)
    c0 = cycles() if cycles else 0
    outs: dict[str, np.ndarray] = {}
    stats = []
    try:
        for i in range(images):
            for k, v in ex.run({k: v[i] for k, v in feeds.items()}).items():
                outs[f"{k}/{i}"] = v
            stats.append(ex.stats.to_dict())
    finally:
        ex.close()
        drv.close()
    return stats, outs, (cycles() - c0) if cycles else 0


def summarize(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The point's figures: the last run's subgraphs (cycles, MACs, MAC utilization and the
    unit counters), its accelerator totals, and the memory traffic summed over all runs."""
    last = runs[-1]
    steps = []
    for s in last["steps"]:
        c = s.get("counters") or {}
        row: dict[str, Any] = {"name": s["name"], "device": s["device"], "wall_s": s["wall_s"]}
        if c:
            row.update(cycles=c["cycles"], macs=c["macs"],
                       mac_utilization=c["macs"] / (n * n * c["cycles"]) if c["cycles"] else 0.0,
                       counters=dict(c))
        steps.append(row)
    accel = [s for s in steps if "cycles" in s]
    cycles = sum(s["cycles"] for s in accel)
    macs = sum(s["macs"] for s in accel)
    memory: dict[str, int] = {}
    for r in runs:
        for k, v in r["memory"].items():
            memory[k] = memory.get(k, 0) + int(v)
    return {"steps": steps, "accel_cycles": cycles, "macs": macs,
            "mac_utilization": macs / (n * n * cycles) if cycles else 0.0,
            "last_memory": dict(last["memory"]), "memory": memory,
            "bytes_h2c": memory.get("bytes_h2c", 0), "bytes_c2h": memory.get("bytes_c2h", 0),
            "bytes_c2c": memory.get("bytes_c2c", 0), "evictions": memory.get("evictions", 0),
            "writebacks": memory.get("writebacks", 0)}


#: Largest difference of a Softmax probability from onnxruntime's fp32 that counts as correct
#: (the int8 quantization error the demo allows, tb/demo.py).
MAX_PROB_DIFF = 0.05


def compare(outs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
            exact: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Outputs against onnxruntime in fp32 (``reference``, same ``name/i`` keys): the largest
    difference and top-1 per output; and, with ``exact``, bit-exactness against it (the
    functional card's outputs)."""
    per: dict[str, Any] = {}
    top1 = True
    prob_ok = True
    for k, ref in reference.items():
        if k not in outs:
            raise KeyError(f"the run produced no output {k!r} (has {sorted(outs)})")
        got = np.asarray(outs[k], np.float64)
        r = np.asarray(ref, np.float64)
        diff = float(np.max(np.abs(got - r))) if got.size else 0.0
        same = int(np.argmax(got)) == int(np.argmax(r))
        cos = float(np.dot(got.ravel(), r.ravel())
                    / max(np.linalg.norm(got) * np.linalg.norm(r), 1e-30))
        per[k] = {"max_abs_diff": diff, "top1_agrees": same, "cosine": cos}
        top1 &= same
        # probabilities (a Softmax output sums to 1): the demo's tolerance applies
        if r.size > 1 and abs(float(r.sum()) - 1.0) < 1e-3:
            prob_ok &= diff <= MAX_PROB_DIFF
    res: dict[str, Any] = {"outputs": per, "top1_agrees": top1, "correct": top1 and prob_ok}
    if exact is not None:
        res["bit_exact"] = all(k in exact and np.array_equal(outs[k], exact[k]) for k in outs) \
            and set(outs) == set(exact)
    return res

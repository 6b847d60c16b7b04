"""Functional-card benchmark: the fast path every quick check uses, on ResNet-50 and the demo.

``python -m bench model`` compiles each model once (not timed), then times the run on the
functional card (``ModelCard`` through the real driver, memory manager and runtime:
``CardExecutor`` + ``CardSession``), median of ``--repeat`` runs of a fresh executor, against
onnxruntime's single-thread fp32 time on the same input (and the run's CPU seconds, the figure
to compare on a busy machine):

- ResNet-50 (``compiler.zoo.light_model``, random weights, int8, the e2e benchmark's compile
  options and seeded input), 64 MiB card memory, one image. Target: at most TARGET_S seconds
  (issue 19: 10x the functional card of main 7edd54e, 49.8 s on an AMD EPYC).
- The demo CNN as ``make sim`` runs it (80 KiB card memory: the manager evicts; two images).

Reported per model: wall seconds, the accelerator's exact counters summed over the steps
(instructions, MACs, bytes loaded and stored, the timing estimate's cycles) and a SHA-256 of the
outputs, so that a comparison with an older commit (``python -m bench.compare model
--bench-code head``) also shows the results unchanged. Only uses what main 7edd54e already had.
Results: bench/results/model.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TARGET_S = 5.0
RESNET_OPTIONS: dict[str, Any] = {"plugin": "accel", "quantize": {"samples": 1, "seed": 0}}
COUNTERS = ("insns", "macs", "bytes_loaded", "bytes_stored", "cycles")


def _resnet() -> tuple[Any, Any, list[dict[str, np.ndarray]], int]:
    from compiler import zoo
    from compiler.pipeline import compile_model

    model = zoo.light_model("resnet50")
    model, _ = zoo.with_logits(model)
    graph = compile_model(model, RESNET_OPTIONS).graph
    inp = graph.inputs[0]
    x = np.random.default_rng(7).standard_normal(tuple(inp.output.shape)).astype(np.float32)
    return model, graph, [{inp.name: x}], 64 << 20


def _demo() -> tuple[Any, Any, list[dict[str, np.ndarray]], int]:
    from compiler import zoo
    from compiler.pipeline import compile_model
    from tb.demo import make_inputs

    model = zoo.demo_cnn()
    options = {"plugin": "accel", "quantize": {"samples": 4, "seed": 0},
               "plugin_options": {"accel": {"max_layers": 2}}}
    graph = compile_model(model, options).graph
    feeds = make_inputs(graph, 2, "demo")
    return model, graph, [{k: v[i] for k, v in feeds.items()} for i in range(2)], 80 << 10


MODELS = {"resnet50": _resnet, "demo": _demo}


def _card_run(graph: Any, feeds: list[dict[str, np.ndarray]], card_mem: int
              ) -> tuple[float, float, dict[str, int], str]:
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    totals = dict.fromkeys(COUNTERS, 0)
    h = hashlib.sha256()
    with PcieDriver(ModelCard(card_mem, host_size=192 << 20)) as drv:
        ex = CardExecutor(graph, CardSession(drv))
        t0, c0 = time.perf_counter(), time.process_time()
        outs = [ex.run(f) for f in feeds]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        for s in ex.stats.to_dict()["steps"]:
            for c in COUNTERS:
                totals[c] += s.get("counters", {}).get(c, 0)
        ex.close()
    for out in outs:
        for k in sorted(out):
            h.update(k.encode())
            h.update(np.ascontiguousarray(out[k]).tobytes())
    return wall, cpu, totals, h.hexdigest()[:20]


def _ort_s(model: Any, feeds: list[dict[str, np.ndarray]], repeat: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds[0])                                     # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for f in feeds:
            sess.run(None, f)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=str(RESULTS / "model.json"))
    args = ap.parse_args(argv)
    rows = []
    missed = []
    print(f"Functional card (ModelCard + runtime), median of {args.repeat}")
    print(f"{'model':10} {'wall':>8} {'onnxrt 1T':>9} {'x ort':>7} {'insns':>9} {'MACs':>14} "
          f"{'cycles':>11}  target")
    for name in args.models.split(","):
        model, graph, feeds, mem = MODELS[name]()
        walls, cpus = [], []
        for _ in range(args.repeat):
            wall, cpu, totals, digest = _card_run(graph, feeds, mem)
            walls.append(wall)
            cpus.append(cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        ort_s = _ort_s(model, feeds, max(3, args.repeat))
        row = {"model": name, "wall_s": round(wall, 3), "walls_s": [round(w, 3) for w in walls],
               "cpu_s": round(cpu, 3),
               "images": len(feeds), "card_mem": mem, "onnxruntime_1thread_s": round(ort_s, 4),
               "x_onnxruntime": round(wall / ort_s, 1), "counters": totals,
               "outputs_sha1": digest}
        verdict = ""
        if name == "resnet50":
            row["target_s"] = TARGET_S
            row["target_met"] = wall <= TARGET_S
            verdict = f"<= {TARGET_S:.0f} s {'met' if row['target_met'] else 'MISSED'}"
            if not row["target_met"]:
                missed.append(name)
        rows.append(row)
        print(f"{name:10} {wall:>7.2f}s {ort_s:>8.3f}s {wall / ort_s:>7.0f} {totals['insns']:>9,} "
              f"{totals['macs']:>14,} {totals['cycles']:>11,}  {verdict}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "model", "repeat": args.repeat, "target_s": TARGET_S,
           "environment": {"python": platform.python_version(), "numpy": np.__version__,
                           "machine": platform.machine(), "cpus": os.cpu_count()},
           "results": rows}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {os.path.relpath(args.out)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep scaling: one sweep of functional-card points on a local Dask cluster, 1, 2, ... workers.

``python -m bench sweep`` (``make bench BENCH=sweep``): 24 points (the demo CNN, N = 4, 8, 16,
card memory 80 KiB and 1 MiB, four memory-manager policies) on the functional card. The
compiles (3, one per N) are made first into a shared compile cache, so each measured run
executes exactly the 24 points (a fresh run cache each time). Wall time per worker count, the
efficiency T(1) / (k * T(k)), and the occupancy: the CPU seconds the points got per
worker-second (1.0: every worker had a core all the time). On a bigger machine, the same command
with more workers:

    python -m bench.sweep_bench --workers 1 2 4 8 16

or on an existing Dask cluster (one run with the workers it has; the efficiency against its
first worker count is then not measured): ``python -m bench.sweep_bench --scheduler
tcp://HOST:PORT``. Results: bench/results/sweep.json. The load average of the machine is
recorded with each run: on a shared machine the figure says as much about the neighbours as
about the engine (docs/sweep.md, "Scaling").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tb.sweep.cache import Cache
from tb.sweep.cluster import connect
from tb.sweep.engine import run_sweep
from tb.sweep.spec import from_mapping

RESULTS = Path(__file__).parent / "results"

SPEC = {"name": "sweep-scaling",
        "grid": {"model": ["demo"], "backend": ["model"], "n": [4, 8, 16],
                 "card_mem": ["80K", "1M"], "policy": ["belady", "lru", "gds", "naive"]},
        "fixed": {"images": 1, "max_layers": 2, "samples": 4, "timeout_s": 1800}}


def _load() -> float:
    return os.getloadavg()[0]


def run(workers: list[int], keep: Path | None = None, scheduler: str | None = None
        ) -> dict[str, Any]:
    """``workers``: local cluster sizes to measure; with ``scheduler`` one run on that cluster
    (``workers`` is then ignored)."""
    spec = from_mapping(SPEC)
    assert len(spec) >= 24, len(spec)
    work = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    try:
        compiles = Cache(work / "compiles")
        print(f"compiling {len({(p.n,) for p in spec.points})} builds of the demo ...",
              flush=True)
        # the compiles once (and one point per build, to warm nothing but the compile cache)
        warm = from_mapping({**SPEC, "grid": {**SPEC["grid"], "card_mem": ["1M"],
                                               "policy": ["belady"]}})
        with connect(scheduler, None if scheduler else max(workers)) as client:
            run_sweep(warm, client, compiles)
            if scheduler:
                workers = [len(client.nthreads())]
        shutil.rmtree(work / "compiles" / "run", ignore_errors=True)
        runs = []
        for k in workers:
            cache_dir = work / f"run-{k}"
            shutil.copytree(work / "compiles", cache_dir)
            with connect(scheduler, None if scheduler else k) as client:
                load0 = _load()
                t0 = time.perf_counter()
                res = run_sweep(spec, client, Cache(cache_dir))
                wall = time.perf_counter() - t0
            point_s = [r["wall_s"] for r in res.records if r["status"] == "ok"]
            cpu_s = sum(r.get("cpu_s") or 0.0 for r in res.records if r["status"] == "ok")
            runs.append({"workers": k, "wall_s": round(wall, 2), "points": len(spec),
                         "points_cpu_s": round(cpu_s, 2),
                         # the CPU our points got per worker-second: 1.0 = each worker had a
                         # core all the time; less = waiting (for neighbours' processes, for
                         # the scheduler, at the tail)
                         "occupancy": round(cpu_s / (k * wall), 3),
                         "points_run": res.points_run, "compiles_run": res.compiles_run,
                         "failed": res.failed, "mean_point_s": round(sum(point_s)
                                                                     / max(len(point_s), 1), 2),
                         "load_before": round(load0, 2), "load_after": round(_load(), 2)})
            print(f"  {k} worker(s): {wall:7.1f} s for {res.points_run} points "
                  f"(mean {runs[-1]['mean_point_s']:.1f} s each, {cpu_s:.1f} CPU s in all, "
                  f"occupancy {runs[-1]['occupancy']:.2f}), {res.failed} failed, "
                  f"load average {load0:.1f} -> {_load():.1f}", flush=True)
            if keep is not None and k == workers[-1]:
                keep.mkdir(parents=True, exist_ok=True)
                from tb.sweep import report

                report.write_all(res.records, keep, {"bench": "sweep scaling", "workers": k})
        # against the first run as if it had run on one worker (exact when it did)
        t1 = runs[0]["wall_s"] * runs[0]["workers"]
        for r in runs:
            known = not scheduler and runs[0]["workers"] == 1
            r["speedup"] = round(t1 / r["wall_s"], 3) if known else None
            r["efficiency"] = round(t1 / (r["workers"] * r["wall_s"]), 3) if known else None
        return {"spec": SPEC, "cores": os.cpu_count(), "scheduler": scheduler or "local",
                "runs": runs}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep_bench")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                    help="one run on this existing Dask cluster instead of local clusters")
    ap.add_argument("--keep", type=Path, help="write the last run's table and plots here")
    args = ap.parse_args(argv)
    if min(args.workers) < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    res = run(sorted(set(args.workers)), args.keep, args.scheduler)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sweep.json").write_text(json.dumps(res, indent=1))
    print(f"\nsweep scaling ({res['runs'][0]['points']} functional-card points, "
          f"{res['cores']} cores):")
    print(f"  {'workers':>7} {'wall s':>8} {'points/min':>10} {'speedup':>8} {'efficiency':>10} "
          f"{'CPU s':>7} {'occupancy':>9} {'load':>10}")
    for r in res["runs"]:
        sp = f"{r['speedup']:8.2f}" if r["speedup"] is not None else f"{'-':>8}"
        ef = f"{100 * r['efficiency']:9.1f}%" if r["efficiency"] is not None else f"{'-':>10}"
        print(f"  {r['workers']:>7} {r['wall_s']:>8.1f} {60 * r['points'] / r['wall_s']:>10.1f} "
              f"{sp} {ef} {r['points_cpu_s']:>7.1f} "
              f"{r['occupancy']:>9.2f} {r['load_before']:>4.1f}-{r['load_after']:<4.1f}")
    print(f"  results: {RESULTS / 'sweep.json'}")
    return 1 if any(r["failed"] for r in res["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

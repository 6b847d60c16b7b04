"""Performance-model accuracy: the functional card's cycle estimate against the RTL's cycles.

``python -m bench perf_model`` (``make bench BENCH=perf_model``):

1. **Networks** (the targets): every accelerator subgraph of the demo CNN (``max_layers: 2``)
   and of light ResNet-50 (``max_layers: 8``) for N = 4, 8, 16 and two scratchpad sizes
   (64 MiB), run on card_top under Verilator: the points of the committed study,
   tb/sweep/examples/study.yaml, through the sweep engine (so they come from the sweep cache
   when the study ran). By default it runs the demo's points (minutes) and takes ResNet-50's
   from the cache, where a cluster may have put them (CPU hours per point here; ``--all``
   runs them); what is in neither is reported missing and the target not met.
   The estimate is `pyhost.accel.timing.perf_estimate_raw` on each subgraph's program (what
   ModelCard reports in ACC_CYCLES, here with the program at card address 0). Targets: within
   5 % on each subgraph, within 2 % on the whole network.
2. **Calibration cases** (bench/calibration/perf_cases_n{4,8,16}.json, or ``--cases FILE...``):
   the demo's layers one by one (``max_layers: 1``) and 12 random programs on card_top (lean
   Verilator build, 64 MiB, the sweep's host latency), measured by
   tb/card_top/test_perf_model.py's ``perf_measure``; ``--measure 4 8 16`` measures them again.
   ``--fit`` refits `PerfParams` on them by coordinate descent: the base on the N = 8 cases,
   then per N the parameters that differ (``by_n``), and writes pyhost/accel/perf_params.json.
   The networks above are not fitted on: they validate the fit.

``--from-study DIR`` takes the networks from a finished study's output instead (DIR/subgraphs.csv,
`python -m tb.sweep`'s: per RTL point and subgraph the RTL's cycles and the functional card's
estimate of the same program in the same run, ``model_cycles``), so the committed study
(docs/sweep-study) is checked without its CPU hours and whatever the sweep cache holds.

Results: bench/results/perf_model.json and a printed table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from pyhost.accel import timing
from pyhost.spec.accel import AccelConfig

ROOT = Path(__file__).resolve().parent.parent

RESULTS = Path(__file__).parent / "results"
CALIBRATION = Path(__file__).parent / "calibration"
CALIBRATION_NS = (4, 8, 16)
SUBGRAPH_TARGET = 0.05
NETWORK_TARGET = 0.02

#: The RTL points whose subgraphs are measured: the committed study's.
STUDY = ROOT / "tb" / "sweep" / "examples" / "study.yaml"


def network_rows(records: list[dict[str, Any]], cache: Any,
                 p: timing.PerfParams | None = None) -> list[dict[str, Any]]:
    """Per RTL point and accelerator subgraph: RTL cycles, the estimate, the error."""
    from compiler import xmodel
    from compiler.runtime.card import accel_image
    from tb.sweep.cache import compile_key
    from tb.sweep.spec import Point

    rows = []
    for rec in records:
        if rec["status"] != "ok" or rec["point"]["backend"] != "rtl":
            continue
        point = Point(**rec["point"])
        files = cache.get_compile(compile_key(point))
        if files is None:
            continue
        graph = xmodel.loads(files["model.xmodel"])
        images = {s.name: accel_image(s) for s in graph.root_subgraph.children_topological_sort()
                  if s.get_attr("device") == "ACCEL"}
        cfg = AccelConfig(**point.accel)
        for step in rec["result"]["summary"]["steps"]:
            if "cycles" not in step:
                continue
            est = timing.perf_estimate_raw(images[step["name"]].program, cfg, p).cycles
            rows.append({"model": point.model, "n": point.n, "inp_depth": point.inp_depth,
                         "subgraph": step["name"],
                         "rtl": step["cycles"], "estimate": est,
                         "error": est / step["cycles"] - 1})
    return rows


def study_rows(study_dir: Path) -> list[dict[str, Any]]:
    """Per RTL point and accelerator subgraph of a finished study (its subgraphs.csv): RTL
    cycles, the functional card's estimate recorded beside them, the error."""
    import csv

    path = study_dir / "subgraphs.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: no such file; give the output directory of a finished sweep")
    rows = []
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["backend"] != "rtl" or not r.get("model_cycles"):
                continue
            rtl, est = int(r["cycles"]), int(r["model_cycles"])
            rows.append({"model": r["model"], "n": int(r["N"]), "inp_depth": int(r["inp"]),
                         "subgraph": r["subgraph"], "rtl": rtl, "estimate": est,
                         "error": est / rtl - 1})
    return rows


def networks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r["model"], r["n"], r["inp_depth"]) for r in rows}):
        sel = [r for r in rows if (r["model"], r["n"], r["inp_depth"]) == key]
        rtl = sum(r["rtl"] for r in sel)
        est = sum(r["estimate"] for r in sel)
        out.append({"model": key[0], "n": key[1], "inp_depth": key[2], "subgraphs": len(sel),
                    "rtl": rtl,
                    "estimate": est, "error": est / rtl - 1,
                    "worst_subgraph_error": max((r["error"] for r in sel), key=abs)})
    return out


def load_cases(paths: list[Path]) -> list[dict[str, Any]]:
    """The calibration cases of ``paths``: file, N, name, program image, RTL cycles."""
    out = []
    for path in paths:
        data = json.loads(path.read_text())
        for c in data["cases"]:
            out.append({"file": path.name, "n": int(data["n"]), "name": c["name"],
                        "program": bytes.fromhex(c["program"]),
                        "rtl": int(c["counters"]["cycles"])})
    return out


def case_errors(cases: list[dict[str, Any]], p: timing.PerfParams | None
                ) -> list[dict[str, Any]]:
    """Per calibration case: RTL cycles, the estimate (``p``; None: the calibrated constants of
    the case's N), the error."""
    out = []
    for c in cases:
        est = timing.perf_estimate_raw(c["program"], AccelConfig(n=c["n"]), p).cycles
        out.append({"file": c["file"], "n": c["n"], "name": c["name"], "rtl": c["rtl"],
                    "estimate": est, "error": est / c["rtl"] - 1})
    return out


def measure(n: int, out: Path, randoms: int = 12) -> None:
    """The calibration cases on card_top at array size ``n`` (the study's card: 64 MiB, lean
    build, the sweep's host latency), written to ``out``."""
    import tempfile

    from tb.common import simulator
    from tb.sweep.spec import make_point

    point = make_point({"n": n, "card_mem": "64M", "backend": "rtl"})
    b = simulator.card_build("verilator", point.rtl_parameters(), waves=False)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "cases.json"
        res = simulator.test(b, "tb.card_top.test_perf_model", testcase="perf_measure",
                             run_name=f"perf-{n}", check=True,
                             extra_env={"PERF_OUT": str(raw), "PERF_RANDOM": str(randoms),
                                        "COCOTB_LOG_LEVEL": "WARNING"})
        assert res.tests == 1, res
        cases = json.loads(raw.read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"n": n, "about": "tb/card_top/test_perf_model.py perf_measure on "
                               "card_top (Verilator lean build, 64 MiB, host read latency "
                               "500 ns): the demo's layers (max_layers 1) and random programs",
                               "cases": cases}) + "\n")


#: The values coordinate descent tries per parameter.
FIT_RANGES: dict[str, Any] = {
    "fetch_latency": range(10, 80, 2), "dispatch": range(0, 8), "compute_extra": range(0, 3),
    "compute_push": range(0, 6), "load_start": range(0, 6), "read_latency": range(6, 40),
    "load_end": range(0, 5), "store_start": range(0, 6), "write_latency": range(0, 40),
    "load_gap": range(0, 6), "compute_gap": range(0, 4), "store_gap": range(0, 6),
    "token_latency": range(0, 6), "end": range(0, 8),
    "load_row": [x / 4 for x in range(0, 17)]}


def fit(paths: list[Path], start: timing.PerfParams | None = None,
        keys: tuple[str, ...] | None = None) -> timing.PerfParams:
    """Coordinate descent on the calibration cases: sum of |relative error|, layers weighted 3x
    (they are what networks are made of). ``keys``: the parameters it may change."""
    cases = load_cases(paths)

    def loss(q: timing.PerfParams) -> float:
        return sum(abs(e["error"]) * (3 if e["name"].startswith("demo") else 1)
                   for e in case_errors(cases, q))

    p = start or timing.PERF_PARAMS
    best = loss(p)
    for _ in range(2):
        for k, r in FIT_RANGES.items():
            if keys is not None and k not in keys:
                continue
            for v in r:
                q = dataclasses.replace(p, **{k: v})
                lq = loss(q)
                if lq < best - 1e-9:
                    best, p = lq, q
    return p


#: What a per-N fit may change: the load and store units' costs, which depend on N in ways the
#: rules do not capture (element sizes, rows per tile); the rest is the base fit's.
BY_N_KEYS = ("read_latency", "load_start", "load_end", "load_gap", "load_row", "store_start",
             "store_gap", "write_latency", "fetch_latency", "dispatch")


def fit_all(paths: dict[int, Path]) -> dict[str, Any]:
    """The calibration file's contents: the base fitted on N = 8, per other N the changes."""
    base = fit([paths[8]]) if 8 in paths else timing.PERF_PARAMS
    by_n: dict[str, dict[str, Any]] = {}
    for n, path in sorted(paths.items()):
        if n == 8:
            continue
        q = fit([path], base, BY_N_KEYS)
        diff = {k: v for k, v in dataclasses.asdict(q).items()
                if v != getattr(base, k)}
        if diff:
            by_n[str(n)] = diff
    return {"about": "fitted by bench/perf_model_bench.py --fit on "
                     + ", ".join(str(p.relative_to(ROOT)) for p in paths.values()),
            "params": dataclasses.asdict(base), "by_n": by_n}


#: The study points the benchmark runs by default (minutes on 2 cores; the ResNet-50 points
#: are CPU hours each: --all, or a cluster through the sweep, and they come from the cache).
DEFAULT_RUN = ("model=demo",)


def _run(spec: Any, cache: Any, workers: int | None) -> list[dict[str, Any]]:
    from tb.sweep.cluster import connect
    from tb.sweep.engine import run_sweep
    from tb.sweep.progress import ProgressBar

    bar = ProgressBar()
    try:
        with connect(workers=workers) as client:
            return run_sweep(spec, client, cache, on_progress=bar).records
    finally:
        bar.close()


def _cached(spec: Any, cache: Any) -> list[dict[str, Any]]:
    from tb.sweep.cache import compile_key, run_key

    out = []
    for pt in spec.points:
        files = cache.get_compile(compile_key(pt))
        if files is None:
            continue
        rec = cache.get_run(run_key(pt, json.loads(files["meta.json"])["program_hash"]))
        if rec is not None:
            out.append(rec)
    return out


def _fmt(e: float) -> str:
    return f"{100 * e:+6.2f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.perf_model_bench")
    ap.add_argument("--cases", type=Path, nargs="*", default=None,
                    help="calibration cases (default bench/calibration/perf_cases_n*.json)")
    ap.add_argument("--measure", type=int, nargs="+", metavar="N",
                    help="measure the calibration cases on the RTL for these N first")
    ap.add_argument("--fit", action="store_true",
                    help="refit PerfParams on the calibration cases (writes perf_params.json)")
    ap.add_argument("--no-rtl", action="store_true",
                    help="only what is in the sweep cache: run nothing")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--only", action="append", default=[], metavar="AXIS=V[,V...]",
                    help="run these points of the study (python -m tb.sweep's --only; "
                         "default model=demo); the others only from the sweep cache")
    ap.add_argument("--all", action="store_true",
                    help="run every point of the study (ResNet-50: CPU hours per point)")
    ap.add_argument("--workers", type=int, default=None,
                    help="local cluster workers for the RTL points (default: one per core)")
    ap.add_argument("--from-study", type=Path, default=None, metavar="DIR",
                    help="take the networks from a finished study's subgraphs.csv (RTL cycles "
                         "and the functional card's estimate of each subgraph); run nothing")
    args = ap.parse_args(argv)
    from tb.sweep.__main__ import DEFAULT_CACHE
    from tb.sweep.cache import Cache
    from tb.sweep.spec import load, select

    for n in args.measure or []:
        print(f"measuring the calibration cases on card_top, N = {n} ...", flush=True)
        measure(n, CALIBRATION / f"perf_cases_n{n}.json")
    default_cases = {n: CALIBRATION / f"perf_cases_n{n}.json" for n in CALIBRATION_NS}
    if args.cases is None:
        args.cases = [c for c in default_cases.values() if c.exists()]
    p = None
    if args.fit:
        by_n = {json.loads(c.read_text())["n"]: c for c in args.cases}
        doc = fit_all(by_n)
        timing.PERF_PARAMS_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        timing._PERF_BY_N.clear()
        timing._PERF_BY_N.update(timing.load_perf_params())
        print(f"fitted: {doc['params']}, per N {doc['by_n']}\nwrote {timing.PERF_PARAMS_FILE}")
    study = load(STUDY)
    if args.from_study is not None:
        rows = study_rows(args.from_study)
    else:
        cache = Cache(args.cache or DEFAULT_CACHE)
        run_spec = study if args.all else select(study, args.only or list(DEFAULT_RUN))
        records = [] if args.no_rtl else _run(run_spec, cache, args.workers)
        ran = {tuple(sorted(r["point"].items())) for r in records}
        # the study's other points: whatever the sweep cache has of them (a cluster ran them)
        records += [r for r in _cached(study, cache)
                    if tuple(sorted(r["point"].items())) not in ran]
        rows = network_rows(records, cache, p)
    nets = networks(rows)
    cases = case_errors(load_cases(args.cases), p) if args.cases else []
    print("\nperformance model against card_top (Verilator): cycles per accelerator subgraph")
    print(f"  {'model':10} {'N':>3} {'inp':>5} {'subgraph':24} {'RTL':>12} {'estimate':>12} "
          f"{'error':>8}")
    for r in rows:
        print(f"  {r['model']:10} {r['n']:>3} {r['inp_depth']:>5} {r['subgraph'][:24]:24} "
              f"{r['rtl']:>12,} {r['estimate']:>12,} {_fmt(r['error'])}")
    print(f"\n  {'network':10} {'N':>3} {'inp':>5} {'subgraphs':>9} {'RTL':>12} "
          f"{'estimate':>12} {'error':>8} {'worst subgraph':>14}")
    for r in nets:
        print(f"  {r['model']:10} {r['n']:>3} {r['inp_depth']:>5} {r['subgraphs']:>9} "
              f"{r['rtl']:>12,} {r['estimate']:>12,} {_fmt(r['error'])} "
              f"{_fmt(r['worst_subgraph_error']):>14}")
    if cases:
        print("\n  calibration cases:")
        for c in cases:
            print(f"  {c['file']:14} N={c['n']:<3} {c['name']:22} {c['rtl']:>9,} "
                  f"{c['estimate']:>9,} {_fmt(c['error'])}")
    missing = [f"{pt.model} N={pt.n} inp_depth={pt.inp_depth}" for pt in study.points
               if not any((r["model"], r["n"], r["inp_depth"]) == (pt.model, pt.n, pt.inp_depth)
                          for r in nets)]
    sub_ok = all(abs(r["error"]) <= SUBGRAPH_TARGET for r in rows)
    net_ok = all(abs(r["error"]) <= NETWORK_TARGET for r in nets)
    worst_sub = max((abs(r["error"]) for r in rows), default=0.0)
    worst_net = max((abs(r["error"]) for r in nets), default=0.0)
    print(f"\n  worst subgraph {100 * worst_sub:.2f} % (target {100 * SUBGRAPH_TARGET:.0f} %: "
          f"{'met' if sub_ok else 'MISSED'}), worst network {100 * worst_net:.2f} % (target "
          f"{100 * NETWORK_TARGET:.0f} %: {'met' if net_ok else 'MISSED'})"
          + (f"; no RTL result for {', '.join(missing)}" if missing else ""))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "perf_model.json").write_text(json.dumps(
        {"params": json.loads(timing.PERF_PARAMS_FILE.read_text()), "subgraphs": rows,
         "networks": nets, "cases": cases, "missing": missing,
         "targets": {"subgraph": SUBGRAPH_TARGET, "network": NETWORK_TARGET},
         "met": sub_ok and net_ok and not missing}, indent=1))
    print(f"  results: {RESULTS / 'perf_model.json'}")
    return 0 if sub_ok and net_ok and not missing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

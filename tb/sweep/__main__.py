"""``python -m tb.sweep SPEC [options]``: run a sweep spec and write its table, CSVs and plots.

    python -m tb.sweep tb/sweep/examples/example.yaml              # local cluster, one worker
                                                                    # per core
    python -m tb.sweep study.yaml --scheduler tcp://host:8786      # an existing Dask cluster
    python -m tb.sweep study.yaml --workers 16 --out build/study   # a bigger machine

Exit status: 0 when every point ran and passed its checks, 1 when a point failed (the others
still ran; the table says which and where its log is), 2 for a bad spec or bad options.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tb.sweep import report
from tb.sweep.cache import ROOT, Cache
from tb.sweep.spec import SpecError, load, select

DEFAULT_OUT = ROOT / "build" / "sweep"
DEFAULT_CACHE = ROOT / "build" / "sweep-cache"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tb.sweep", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", help="the sweep spec (YAML or JSON; docs/sweep.md)")
    ap.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                    help="run on this existing Dask scheduler (default: a local cluster)")
    ap.add_argument("--workers", type=int, metavar="N",
                    help="worker processes of the local cluster (default: one per core)")
    ap.add_argument("--out", type=Path, help="output directory (default build/sweep/<name>)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="result cache directory (default build/sweep-cache)")
    ap.add_argument("--rerun", action="store_true",
                    help="run every point again, ignoring cached results")
    ap.add_argument("--no-plots", action="store_true", help="write no PNGs")
    ap.add_argument("--pip-install", action="store_true",
                    help="have the workers pip-install requirements.lock (Dask PipInstall)")
    ap.add_argument("--only", action="append", default=[], metavar="AXIS=V[,V...]",
                    help="run only the points with these values (repeatable: all must match)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    return ap.parse_args(argv)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        spec = load(args.spec)
        if args.only:
            spec = select(spec, args.only)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.scheduler and args.workers:
        print("error: --workers sizes the local cluster; an existing cluster (--scheduler) has "
              "the workers it has", file=sys.stderr)
        return 2
    out = args.out or DEFAULT_OUT / spec.name
    from tb.sweep.cluster import connect
    from tb.sweep.engine import run_sweep
    from tb.sweep.progress import ProgressBar

    where = args.scheduler or "a local Dask cluster on 127.0.0.1"
    if not args.quiet:
        print(f"sweep {spec.name}: {len(spec)} points on {where}; cache {args.cache}",
              flush=True)
    bar = None if args.quiet else ProgressBar()
    t0 = time.perf_counter()
    # SIGTERM (and SIGINT, even where a shell started us with it ignored) stops the sweep like
    # Ctrl-C: pending points cancelled, the cluster closed, what finished stays cached
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupt)
    try:
        with connect(args.scheduler, args.workers, pip_install=args.pip_install) as client:
            res = run_sweep(spec, client, Cache(args.cache), rerun=args.rerun, on_progress=bar,
                            log_dir=out / "logs")
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print("\ninterrupted: the finished points are cached; run the same command again to "
              "resume", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"error: cannot reach the Dask scheduler {args.scheduler}: {e}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    meta: dict[str, Any] = {"spec": str(args.spec), "name": spec.name, "points": len(spec),
                            "scheduler": args.scheduler or "local", "workers": res.workers,
                            "executed": res.executed, "compiles_run": res.compiles_run,
                            "points_run": res.points_run, "cached": res.cached,
                            "failed": res.failed, "wall_s": round(time.perf_counter() - t0, 3)}
    paths = report.write_all(res.records, out, meta, make_plots=not args.no_plots)
    # the FSTs that came back
    for rec in res.records:
        if rec.get("status") == "ok" and rec.get("waves") and rec.get("key"):
            src = Cache(args.cache).fst_path(rec["key"])
            if src.exists():
                dst = out / "waves" / f"{rec['label'].replace(' ', '_')}.fst"
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(src.read_bytes())
    if not args.quiet:
        print(report.table(res.records))
        print(f"\n{len(spec)} points: {res.points_run} run, {res.cached} from the cache, "
              f"{res.failed} failed; {res.compiles_run} compiles; {meta['wall_s']:.1f} s on "
              f"{res.workers} worker(s)")
        print("wrote " + ", ".join(str(p.relative_to(Path.cwd()) if p.is_relative_to(Path.cwd())
                                       else p) for p in paths.values()))
    bad = [r for r in res.records if r["status"] != "ok"
           or not (r.get("result") or {}).get("check", {}).get("correct", True)
           or (r.get("result") or {}).get("check", {}).get("bit_exact", True) is False]
    json.dumps(meta)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

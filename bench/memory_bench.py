"""Memory-manager benchmark: bytes moved by each eviction policy against the interval bound.

``python -m bench memory`` (part of ``make bench``) replays, in dry run, at card capacities that
oversubscribe them:

- the nine onnx light/ models, inference (batch 32) and training (batch 8), three iterations
  each (weights persist, activations are reallocated every iteration);
- cyclic traces over a working set of 1.05x and 1.5x the card, uniform and mixed sizes;
- a many-small-layers trace (2000 layers) and a many-small-tensors trace (10,000 x 64 B);

with every online policy (no hint) and the schedule-aware ones (given the trace), against the
interval-program lower bound: of the whole trace, and of the bytes from the second iteration
on (`lower_bound(count_from=...)`), which is what the online targets are judged on; beside it
(not a target), the online default against the bound of managers that write back every dirty
tensor they evict (`hold_dead`): one that cannot see the future cannot drop a dead one. A latency
micro-benchmark measures the need-in-device overhead with 100k live tensors on the hit path and
on a miss-heavy workload. Prints a summary with the targets marked met / MISSED, writes
bench/results/memory.json and the plot bench/results/memory.png; exit status 1 when a target is
missed. ``--compare before.json after.json`` prints the before/after table of two runs;
``--latency`` runs only the latency part.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.memory_traces import cyclic_trace, many_small_trace, onnx_trace, small_tensors_trace
from compiler.zoo import LIGHT
from pyhost.memory import DEFAULT_POLICY, POLICIES, MemoryManager
from pyhost.memory.bound import lower_bound
from pyhost.memory.stats import LatencyHistogram
from pyhost.memory.trace import Trace
from tb.memory.replay import replay

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: Policies run without a hint: every registered policy that does not need a schedule.
ONLINE = tuple(dict.fromkeys([*(n for n, p in POLICIES.items() if not p.uses_schedule),
                              DEFAULT_POLICY]))
#: Policies given the trace as their schedule hint ("planned" is the schedule-aware default).
HINTED = ("belady", "planned")
POLICY_RUNS = tuple((p, False) for p in ONLINE) + tuple((p, True) for p in HINTED)
SCHEDULE_AWARE = "planned"
INFER_BATCH = 32
TRAIN_BATCH = 8
ITERATIONS = 3
#: Card capacity: the largest call (+5 %) plus this fraction of the rest of the peak live bytes.
FRACTIONS = (0.5, 0.1)
#: HiGHS time limit for the integer program per bound; past it the bound is its dual bound.
MILP_SECONDS = 3.0
#: Targets (issues 4 and 18).
SCHED_TARGET = 1.05
ONLINE_TARGET = 1.25
ONLINE_GEOMEAN_TARGET = 1.10
LRU_MARGIN = 0.02
BATCHING_TARGET = 10.0
NEED_US_TARGET = 20.0
MISS_US_TARGET = 40.0
LATENCY_LIVE = 100_000
#: The miss-heavy latency is also shown (not judged) with fewer live tensors: the card then
#: holds fewer, larger-in-proportion blocks, which the placement searches differently.
LATENCY_SCAN = (100, 1_000, 10_000)
#: Independent latency runs (seeds 0, 1, ...); the figures judged are the medians of the runs'
#: medians: one run's median moves by up to 10 % from process to process on a shared machine,
#: and now and then one run is 20-60 % slow throughout (the host's doing: the same code and
#: seed before and after it are not); five runs keep two such out of the median.
LATENCY_RUNS = 5
#: Where the online default misses ONLINE_TARGET on a model trace, the data-keeping optimum's
#: cost per iteration in the steady state is computed on this many iterations (see periodic).
PERIODIC_ITERATIONS = 5
PERIODIC_MILP_SECONDS = 60.0


@dataclass
class Case:
    trace: Trace
    capacity: int
    kind: str           # "model", "cyclic", "small"
    #: the same workload with `iterations` iterations (model traces), for the periodic bound
    longer: Callable[..., Trace] | None = None


def capacity_for(tr: Trace, frac: float) -> int:
    floor = tr.max_need() * 1.05
    cap = int(floor + frac * max(tr.peak_live() - floor, 0))
    return -(-cap // (64 << 10)) * (64 << 10)


def _need_hist(st) -> LatencyHistogram:
    """The manager's need-call times (a histogram; older managers kept a list)."""
    h = getattr(st, "need_hist", None)
    return h if h is not None else LatencyHistogram.of(st.need_times_s)


def late_start(tr: Trace) -> int:
    """Record index where the second iteration starts (0: a single iteration)."""
    starts = tr.meta.get("iteration_starts", [0])
    return starts[1] if len(starts) > 1 else 0


def run_policy(tr: Trace, cap: int, policy: str, schedule: bool,
               batching: bool = True) -> tuple[dict[str, object], LatencyHistogram]:
    m = MemoryManager.dry_run(cap, policy=policy, batching=batching)
    s, st = m.transport.stats, m.stats
    late = late_start(tr)
    mark: dict[str, int] = {}
    starts = set(tr.meta.get("iteration_starts", [0])[1:])
    per_iteration: list[int] = []            # PCIe bytes moved before each iteration start

    def after(i: int) -> None:
        if i + 1 == late:
            mark.update(h2c=s.bytes_h2c, c2h=s.bytes_c2h, c2c=s.bytes_c2c)
        if i + 1 in starts:
            per_iteration.append(s.bytes_h2c + s.bytes_c2h)
    t0 = time.perf_counter()
    replay(tr, m, schedule=schedule, after=after if late else None)
    wall = time.perf_counter() - t0
    calls = sum(st.calls.values())
    hist = _need_hist(st)
    total = s.bytes_h2c + s.bytes_c2h
    row = {
        "policy": policy, "schedule_hint": schedule, "batching": batching,
        "bytes_h2c": s.bytes_h2c, "bytes_c2h": s.bytes_c2h, "bytes": total,
        "bytes_late": total - mark.get("h2c", 0) - mark.get("c2h", 0),
        "bytes_by_iteration": [b - a for a, b in zip([0, *per_iteration],
                                                     [*per_iteration, total], strict=True)],
        "bytes_c2c": s.bytes_c2c, "bytes_c2c_late": s.bytes_c2c - mark.get("c2c", 0),
        "driver_calls": s.driver_calls, "calls_by_channel": dict(s.calls_by_channel),
        "descriptors": m.driver.stats.descriptors, "api_calls": calls,
        "evictions": st.evictions, "writebacks": st.writebacks, "compactions": st.compactions,
        "prefetched": st.prefetched, "plan_s": st.plan_s,
        "manager_us_per_call": 1e6 * sum(st.time_s.values()) / max(calls, 1),
        "manager_us_per_call_by_op": {op: 1e6 * st.time_s[op] / st.calls[op] for op in st.calls},
        "need_median_us": 1e6 * hist.median(),
        "wall_s": wall,
    }
    for k in ("repeats_detected", "planned_repeats", "deferred_uploads", "gathered_reads"):
        if hasattr(st, k):
            row[k] = getattr(st, k)
    return row, hist


def cases(quick: bool) -> list[Case]:
    out = []
    models = LIGHT[:3] if quick else LIGHT
    for name in models:
        for training, batch in ((False, INFER_BATCH), (True, TRAIN_BATCH)):
            tr = onnx_trace(name, batch=batch, training=training, iterations=ITERATIONS)
            longer = functools.partial(onnx_trace, name, batch=batch, training=training)
            for f in FRACTIONS:
                out.append(Case(tr, capacity_for(tr, f), "model", longer))
    for mixed in (False, True):
        for ratio in (1.05, 1.5):
            tr = cyclic_trace(1 << 20, ratio, mixed=mixed)
            out.append(Case(tr, tr.meta["capacity"], "cyclic"))
    small = many_small_trace(2000)
    out.append(Case(small, capacity_for(small, 0.25), "small"))
    out.append(Case(small_tensors_trace(), 1 << 20, "small"))
    return out


def latency(live: int, miss_heavy: bool, calls: int = 20_000, seed: int = 0
            ) -> dict[str, float]:
    """Median need-in-device overhead (driver time excluded) with `live` tensors allocated:
    on the hit path (the card holds them all) or miss-heavy (the card holds a fifth of them,
    random triples, one output updated per call). Exact quantiles of every call's time (the
    manager's own histogram rounds to its 10 % buckets)."""
    # the previous runs' managers are garbage in cycles: collected now, not by a full
    # collection (200-600 ms with them) in the middle of this run's calls
    gc.collect()
    rng = np.random.default_rng(seed)
    sizes = (rng.integers(1, 65, live) * 64).tolist()
    total = sum(sizes)
    cap = int(total * (1.2 if not miss_heavy else 0.2)) // (64 << 10) * (64 << 10) + (64 << 10)
    m = MemoryManager.dry_run(cap)
    ts = [m.allocate_tensor(n) for n in sizes]
    for t in ts:
        m.write_tensor(t, t.size, None)
    if not miss_heavy:
        for i in range(0, live, 3):
            m.need_in_device(*ts[i:i + 3])
    hits0, miss0 = m.stats.need_hits, m.stats.need_misses
    picks = rng.integers(0, live, (calls, 3))
    wall_s, cpu_s, need_s = [], [], []
    drv = m.transport.stats
    # The driver's part (the dry run's descriptor split and chain planning: about 13 us of a
    # miss-heavy call) is left out of both: it is timed by the transport in wall time, which
    # for a dry run's pure computation is its CPU time. The CPU clock (a system call here) is
    # read outside the wall interval.
    thread_time, perf_counter = time.thread_time, time.perf_counter
    for a, b, c in picks.tolist():
        d0 = drv.driver_time_s
        c0 = thread_time()
        t0 = perf_counter()
        m.need_in_device(ts[a], ts[b], ts[c])
        tn = perf_counter()
        m.tensor_updated(ts[c])
        t1 = perf_counter()
        c1 = thread_time()
        dd = drv.driver_time_s - d0               # (all of it in the need call)
        wall_s.append(t1 - t0 - dd)
        cpu_s.append(c1 - c0 - dd)
        need_s.append(tn - t0 - dd)
    hits, misses = m.stats.need_hits - hits0, m.stats.need_misses - miss0
    wall, cpu, need = 1e6 * np.array(wall_s), 1e6 * np.array(cpu_s), 1e6 * np.array(need_s)
    return {"live": live, "capacity": cap, "calls": calls, "seed": seed,
            "median_us": float(np.median(wall)), "p90_us": float(np.quantile(wall, 0.9)),
            "cpu_median_us": float(np.median(cpu)), "cpu_p90_us": float(np.quantile(cpu, 0.9)),
            "cpu_p99_us": float(np.quantile(cpu, 0.99)),
            # the mean too: work deferred to some calls (the shadows' log) shows only there
            "cpu_mean_us": float(cpu.mean()),
            # the need_in_device call alone (wall; the figures above add tensor_updated)
            "need_only_median_us": float(np.median(need)),
            "miss_fraction": misses / max(hits + misses, 1)}


def latency_runs(live: int, miss_heavy: bool, calls: int = 20_000, runs: int = LATENCY_RUNS
                 ) -> dict[str, object]:
    """`latency` with seeds 0 .. runs-1; each figure is the median over the runs (each run's
    own figures under "runs")."""
    each = [latency(live, miss_heavy, calls, seed) for seed in range(runs)]
    out: dict[str, object] = {k: float(np.median([r[k] for r in each]))
                              for k in each[0] if k.endswith("_us") or k == "miss_fraction"}
    out.update(live=live, capacity=each[0]["capacity"], calls=calls, runs=each)
    return out


def latency_scan(calls: int = 1500) -> dict[int, dict[str, float]]:
    """The miss-heavy `latency` (one run) for each of LATENCY_SCAN live tensor counts."""
    return {live: latency(live, miss_heavy=True, calls=calls) for live in LATENCY_SCAN}


def latency_all() -> dict[str, object]:
    """The latency part: the judged 100k runs (hit path, miss-heavy) and the scan."""
    return {"hit": latency_runs(LATENCY_LIVE, miss_heavy=False),
            "miss": latency_runs(LATENCY_LIVE, miss_heavy=True, calls=5000),
            "miss_by_live": latency_scan()}


def latency_fresh() -> dict[str, object]:
    """latency_all in a fresh interpreter (the full run's latency part): its figures do not
    depend on what ran before them. After the full run's nine minutes of trace replays, in the
    same process, the miss-heavy median read 38-41 us where a fresh process reads 36-38 (the
    heap those replays leave behind); `--latency` is such a fresh process too."""
    code = "import json, bench.memory_bench as m; print(json.dumps(m.latency_all()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the latency run failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def _latency_met(lat: dict) -> bool:
    return (lat["hit"]["cpu_median_us"] <= NEED_US_TARGET
            and lat["miss"]["cpu_median_us"] <= MISS_US_TARGET)


def _scan_line(scan: dict[int, dict[str, float]]) -> str:
    return ", ".join(f"{live}: {r['cpu_median_us']:.1f} us (mean {r['cpu_mean_us']:.1f})"
                     for live, r in scan.items())


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['trace']}\n{r['capacity'] >> 20} MiB" for r in rows]
    fig, ax = plt.subplots(figsize=(max(10, 0.45 * len(rows)), 5.5))
    width = 0.8 / len(POLICY_RUNS)
    for k, (pol, sched) in enumerate(POLICY_RUNS):
        key = f"{pol}+hint" if sched else pol
        ys = [r["policies"][key]["bytes_late"] / max(r["bound_late"], 1) for r in rows]
        ax.bar([i + (k - (len(POLICY_RUNS) - 1) / 2) * width for i in range(len(rows))], ys,
               width, label=key)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(ONLINE_TARGET, color="tab:purple", lw=0.8, ls=":", label=f"{ONLINE_TARGET}x")
    ax.set_yscale("log")
    ax.set_ylabel("bytes moved (H2C + C2H) from the 2nd iteration / lower bound")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_title(f"Memory manager: bytes relative to the interval-program lower bound "
                 f"(online default: {DEFAULT_POLICY})")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def periodic(c: Case) -> dict[str, object]:
    """What the optimal data-keeping manager (`hold_dead`: it writes back every dirty tensor it
    evicts, as one without the future must) moves per iteration in the steady state: on the
    same workload run PERIODIC_ITERATIONS times, the bound from the 2nd iteration on minus the
    bound from the 4th on, halved (iterations 2 and 3 with iterations before and after them).
    The targets' three-iteration bound also counts a last iteration, which costs less than a
    middle one because nothing follows it: a manager that does not know which iteration is
    the last cannot have that."""
    assert c.longer is not None
    t0 = time.perf_counter()
    tr = c.longer(iterations=PERIODIC_ITERATIONS)
    st = tr.meta["iteration_starts"]
    b2, b4 = (lower_bound(tr, c.capacity, integer=True, time_limit=PERIODIC_MILP_SECONDS,
                          count_from=st[k], hold_dead=True) for k in (1, 3))
    return {"per_iteration": (b2.bound - b4.bound) / 2, "optimal": b2.optimal and b4.optimal,
            "iterations": PERIODIC_ITERATIONS, "seconds": time.perf_counter() - t0}


def _ratio(r: dict, key: str, late: bool = True) -> float:
    p = r["policies"][key]
    if late:
        return p["bytes_late"] / r["bound_late"] if r["bound_late"] else 1.0
    return p["bytes"] / r["bound"] if r["bound"] else 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="three models only")
    ap.add_argument("--out", default=str(RESULTS / "memory.json"))
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="print the before/after table of two result files and exit")
    ap.add_argument("--latency", action="store_true",
                    help="run only the need-in-device latency part and print it (JSON)")
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return 0
    if args.latency:
        lat = latency_all()
        print(json.dumps(lat, indent=1))
        return 0 if _latency_met(lat) else 1
    t_start = time.perf_counter()
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    keys = [f"{p}+hint" if s else p for p, s in POLICY_RUNS]
    need_hists = {k: LatencyHistogram() for k in keys}
    print(f"{'trace':30} {'card':>8} {'bound2+':>9} " + " ".join(f"{k:>9}" for k in keys)
          + f" {'c2c/pcie':>8} {'calls':>6} {'us/need':>7}   (bytes from the 2nd iteration "
          "/ bound; hint policies: whole trace / bound)")
    for c in cases(args.quick):
        tr, cap = c.trace, c.capacity
        b = lower_bound(tr, cap, integer=True, time_limit=MILP_SECONDS)
        late = late_start(tr)
        bl = lower_bound(tr, cap, integer=True, time_limit=MILP_SECONDS, count_from=late) \
            if late else b
        # the bound of managers that write back every dirty tensor they evict: one that cannot
        # see the future cannot tell a dead dirty tensor (never read or needed again, freed
        # later) from a live one, so this is what an online manager can reach
        bh = lower_bound(tr, cap, integer=True, time_limit=MILP_SECONDS, count_from=late,
                         hold_dead=True)
        pols = {}
        for (pol, sched), key in zip(POLICY_RUNS, keys, strict=True):
            r, h = run_policy(tr, cap, pol, sched)
            need_hists[key].merge(h)
            pols[key] = r
        row = {"trace": tr.name, "kind": c.kind, "capacity": cap, "peak_live": tr.peak_live(),
               "iterations": tr.meta.get("iterations", 1), "late_from_record": late,
               "bound": b.bound, "bound_lp": b.lp, "bound_optimal": b.optimal,
               "bound_schedule": b.schedule, "compulsory": b.compulsory,
               "bound_seconds": b.seconds, "lp_variables": b.variables,
               "bound_late": bl.bound, "bound_late_optimal": bl.optimal,
               "bound_late_hold": bh.bound, "policies": pols}
        if c.longer is not None and _ratio(row, DEFAULT_POLICY) > ONLINE_TARGET:
            row["periodic_hold"] = periodic(c)
        rows.append(row)
        d = pols[DEFAULT_POLICY]
        print(f"{tr.name:30} {cap >> 10:>6}Ki {bl.bound / 2**20:>8.1f}M "
              + " ".join(f"{_ratio(row, k, late=not k.endswith('+hint')):>8.3f}x" for k in keys)
              + f" {d['bytes_c2c'] / max(d['bytes'], 1):>8.2f} {d['driver_calls']:>6}"
              f" {d['need_median_us']:>7.1f}", flush=True)

    # batching: the many-small-layers trace with and without batched driver calls
    small = many_small_trace(2000)
    cap_small = capacity_for(small, 0.25)
    batching = {}
    for pol, sched in ((SCHEDULE_AWARE, True), (DEFAULT_POLICY, False)):
        on, _ = run_policy(small, cap_small, pol, sched, batching=True)
        off, _ = run_policy(small, cap_small, pol, sched, batching=False)
        batching[pol] = {"batched": on, "unbatched": off,
                         "call_ratio": off["driver_calls"] / max(on["driver_calls"], 1)}
    lat = latency_fresh()
    print(f"need-in-device overhead (need_in_device + tensor_updated), {LATENCY_LIVE} live "
          f"tensors, median of {LATENCY_RUNS} runs: hit path median "
          f"{lat['hit']['median_us']:.1f} us (p90 {lat['hit']['p90_us']:.1f}; CPU "
          f"{lat['hit']['cpu_median_us']:.1f}, mean {lat['hit']['cpu_mean_us']:.1f}; the need "
          f"call alone {lat['hit']['need_only_median_us']:.1f}); miss-heavy "
          f"({lat['miss']['miss_fraction']:.0%} misses) median {lat['miss']['median_us']:.1f} us "
          f"(p90 {lat['miss']['p90_us']:.1f}; CPU {lat['miss']['cpu_median_us']:.1f}, mean "
          f"{lat['miss']['cpu_mean_us']:.1f}; the need call alone "
          f"{lat['miss']['need_only_median_us']:.1f})",
          flush=True)
    print(f"miss-heavy CPU median by live tensors (shown, not judged): "
          f"{_scan_line(lat['miss_by_live'])}", flush=True)

    # targets
    checks = []
    online_rows = [r for r in rows]
    sched_worst = max(_ratio(r, f"{SCHEDULE_AWARE}+hint", late=False) for r in rows)
    online = [_ratio(r, DEFAULT_POLICY) for r in online_rows]
    worst_i = int(np.argmax(online))
    over = [f"{r['trace']}@{r['capacity'] >> 10}Ki {x:.2f}x" for r, x in zip(online_rows, online,
                                                                              strict=True)
            if x > ONLINE_TARGET]
    sched_vs_lru = [r["trace"] for r in rows if r["policies"][f"{SCHEDULE_AWARE}+hint"]["bytes"]
                    > r["policies"]["lru"]["bytes"]]
    vs_lru = [(r, r["policies"][DEFAULT_POLICY]["bytes"] / max(r["policies"]["lru"]["bytes"], 1))
              for r in rows]
    lru_bad = [f"{r['trace']}@{r['capacity'] >> 10}Ki +{(x - 1) * 100:.1f}%" for r, x in vs_lru
               if x > 1 + LRU_MARGIN]
    checks.append((f"schedule-aware ({SCHEDULE_AWARE}, hint) <= {SCHED_TARGET}x bound on every "
                   "trace", sched_worst <= SCHED_TARGET, f"worst {sched_worst:.3f}x"))
    checks.append(("schedule-aware never worse than LRU", not sched_vs_lru,
                   f"worse on {sched_vs_lru}" if sched_vs_lru else "on every trace"))
    checks.append((f"online default ({DEFAULT_POLICY}, no hint) <= {ONLINE_TARGET}x bound from "
                   "the 2nd iteration on every trace", not over,
                   f"worst {online[worst_i]:.3f}x ({online_rows[worst_i]['trace']}); over on "
                   f"{len(over)}: {', '.join(over)}" if over else
                   f"worst {online[worst_i]:.3f}x ({online_rows[worst_i]['trace']})"))
    gm = statistics.geometric_mean(online)
    checks.append((f"online default geometric mean <= {ONLINE_GEOMEAN_TARGET}x",
                   gm <= ONLINE_GEOMEAN_TARGET, f"{gm:.3f}x over {len(online)} cases"))
    worst_lru = max(vs_lru, key=lambda x: x[1])
    checks.append((f"online default never worse than LRU by more than {LRU_MARGIN:.0%}",
                   not lru_bad, f"worse on {len(lru_bad)}: {', '.join(lru_bad)}" if lru_bad
                   else f"worst {(worst_lru[1] - 1) * 100:+.1f}% ({worst_lru[0]['trace']})"))

    def by_channel(r: dict) -> str:
        return "/".join(str(r["calls_by_channel"][c]) for c in ("H2C", "C2H", "C2C"))
    sa, on = batching[SCHEDULE_AWARE], batching[DEFAULT_POLICY]
    ratio = sa["call_ratio"]
    checks.append((f"batching cuts driver calls >= {BATCHING_TARGET:.0f}x on {small.name} "
                   "(schedule hint)", ratio >= BATCHING_TARGET,
                   f"{SCHEDULE_AWARE}: {sa['unbatched']['driver_calls']} -> "
                   f"{sa['batched']['driver_calls']} calls, {ratio:.1f}x (H2C/C2H/C2C "
                   f"{by_channel(sa['unbatched'])} -> {by_channel(sa['batched'])}); online "
                   f"{DEFAULT_POLICY}: {on['call_ratio']:.1f}x ({by_channel(on['unbatched'])} -> "
                   f"{by_channel(on['batched'])})"))
    st_row = next(r for r in rows if r["trace"].startswith("small-"))
    n_small = sum(1 for x in small_tensors_trace().records if x[0] == "alloc")
    calls = st_row["policies"][DEFAULT_POLICY]["driver_calls"]
    checks.append((f"online default: >= {BATCHING_TARGET:.0f}x fewer driver calls than one per "
                   f"tensor on {st_row['trace']} (no hint)",
                   calls * BATCHING_TARGET <= n_small,
                   f"{calls} calls for {n_small} tensors "
                   f"({by_channel(st_row['policies'][DEFAULT_POLICY])} H2C/C2H/C2C), "
                   f"{n_small / max(calls, 1):.0f}x"))
    med_default = need_hists[DEFAULT_POLICY].median() * 1e6
    med_sched = need_hists[f"{SCHEDULE_AWARE}+hint"].median() * 1e6
    checks.append((f"median need_in_device overhead <= {NEED_US_TARGET:.0f} us over the traces "
                   "(dry run)", max(med_default, med_sched) <= NEED_US_TARGET,
                   f"{DEFAULT_POLICY} {med_default:.1f} us, {SCHEDULE_AWARE} {med_sched:.1f} us"))
    # judged on the calling thread's CPU time: on a shared machine the wall time also counts
    # the time other processes hold the core (both are reported)
    checks.append((f"median need_in_device overhead (thread CPU time, median of "
                   f"{LATENCY_RUNS} runs), {LATENCY_LIVE} live tensors: <= {NEED_US_TARGET:.0f} "
                   f"us hit path, <= {MISS_US_TARGET:.0f} us miss-heavy",
                   _latency_met(lat),
                   f"hit {lat['hit']['cpu_median_us']:.1f} us, miss-heavy "
                   f"{lat['miss']['cpu_median_us']:.1f} us (wall {lat['hit']['median_us']:.1f}"
                   f" / {lat['miss']['median_us']:.1f} us; "
                   f"{lat['miss']['miss_fraction']:.0%} of tensors missing)"))
    hold = [r["policies"][DEFAULT_POLICY]["bytes_late"] / max(r["bound_late_hold"], 1)
            for r in rows]
    hold_i = int(np.argmax(hold))
    hold_over = [f"{r['trace']}@{r['capacity'] >> 10}Ki {x:.2f}x"
                 for r, x in zip(rows, hold, strict=True) if x > ONLINE_TARGET]
    hold_note = (f"online default ({DEFAULT_POLICY}) against the bound of managers that write "
                 f"back every dirty tensor they evict (hold_dead), from the 2nd iteration: worst "
                 f"{hold[hold_i]:.3f}x ({rows[hold_i]['trace']}), geometric mean "
                 f"{statistics.geometric_mean(hold):.3f}x; over {ONLINE_TARGET}x on "
                 f"{len(hold_over)}" + (f": {', '.join(hold_over)}" if hold_over else ""))
    per = []
    for r in rows:
        if "periodic_hold" in r:
            p = r["periodic_hold"]
            its = r["policies"][DEFAULT_POLICY]["bytes_by_iteration"][1:]
            per.append(f"{r['trace']}@{r['capacity'] >> 10}Ki: "
                       + " / ".join(f"{b / 2**20:.1f}" for b in its)
                       + f" MiB against {p['per_iteration'] / 2**20:.1f} MiB per iteration "
                       + "(" + ", ".join(f"{b / p['per_iteration']:.3f}x" for b in its)
                       + ("" if p["optimal"] else "; MILP not proven") + ")")
    per_note = ("where the online default misses, its bytes in iterations 2 and 3 against the "
                "data-keeping optimum per iteration in the steady state (bench.memory_bench."
                "periodic): " + "; ".join(per)) if per else ""
    ratios_late = {k: [_ratio(r, k) for r in rows] for k in keys}
    ratios_all = {k: [_ratio(r, k, late=False) for r in rows] for k in keys}
    summary = {"targets": [{"target": t, "met": ok, "value": v} for t, ok, v in checks],
               "default_policy": DEFAULT_POLICY, "rows": rows, "batching": batching,
               "latency": lat,
               "median_need_us": {k: h.median() * 1e6 for k, h in need_hists.items() if h.n},
               "ratio_worst_late": {k: max(v) for k, v in ratios_late.items()},
               "ratio_geomean_late": {k: statistics.geometric_mean(v)
                                      for k, v in ratios_late.items()},
               "ratio_worst": {k: max(v) for k, v in ratios_all.items()},
               "ratio_geomean": {k: statistics.geometric_mean(v) for k, v in ratios_all.items()},
               "periodic_note": per_note,
               "ratio_hold_late": {"worst": hold[hold_i],
                                   "geomean": statistics.geometric_mean(hold),
                                   "over": hold_over},
               "seconds": time.perf_counter() - t_start}
    Path(args.out).write_text(json.dumps(summary, indent=1))
    png = Path(args.out).with_suffix(".png")
    plot(rows, png)
    print(f"\nbytes / bound over {len(rows)} cases, from the 2nd iteration: worst (geometric "
          "mean): " + ", ".join(f"{k} {summary['ratio_worst_late'][k]:.3f}x "
                                f"({summary['ratio_geomean_late'][k]:.3f})" for k in keys))
    print("whole traces: " + ", ".join(f"{k} {summary['ratio_worst'][k]:.3f}x "
                                       f"({summary['ratio_geomean'][k]:.3f})" for k in keys))
    for t, ok, v in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {t}: {v}")
    print(f"  (not a target) {hold_note}")
    if per_note:
        print(f"  (not a target) {per_note}")
    print(f"JSON {args.out}, plot {png}, {summary['seconds']:.0f} s")
    return 0 if all(ok for _, ok, _ in checks) else 1


def compare(before_path: str, after_path: str) -> None:
    """The before/after table of two result files (bytes / bound from the 2nd iteration for
    the online policies, whole trace for the hinted ones; driver calls; compaction bytes)."""
    before = json.loads(Path(before_path).read_text())
    after = json.loads(Path(after_path).read_text())
    bkeys = list(before["rows"][0]["policies"])
    akeys = list(after["rows"][0]["policies"])
    print(f"before: default {before['default_policy']}; after: default "
          f"{after['default_policy']}")
    head = "| trace | card | " + " | ".join(f"{k} before | {k} after" if k in bkeys
                                              else f"{k} after" for k in akeys)
    print(head + " | default calls b/a | default c2c MB b/a |")
    print("|" + "---|" * (head.count("|") + 1))
    brows = {(r["trace"], r["capacity"]): r for r in before["rows"]}
    for r in after["rows"]:
        b = brows.get((r["trace"], r["capacity"]))
        cells = []
        for k in akeys:
            late = not k.endswith("+hint")
            a = f"{_ratio(r, k, late):.3f}"
            if k in bkeys:
                cells.append((f"{_ratio(b, k, late):.3f}" if b else "-") + " | " + a)
            else:
                cells.append(a)
        bd = b["policies"][before["default_policy"]] if b else None
        ad = r["policies"][after["default_policy"]]
        calls = f"{bd['driver_calls'] if bd else '-'} / {ad['driver_calls']}"
        c2c = (f"{bd['bytes_c2c'] / 1e6:.1f}" if bd else "-") + f" / {ad['bytes_c2c'] / 1e6:.1f}"
        print(f"| {r['trace']} | {r['capacity'] >> 10} KiB | " + " | ".join(cells)
              + f" | {calls} | {c2c} |")
    for name, res in (("before", before), ("after", after)):
        print(f"{name}: worst (geomean) from the 2nd iteration: "
              + ", ".join(f"{k} {v:.3f} ({res['ratio_geomean_late'][k]:.3f})"
                          for k, v in res["ratio_worst_late"].items()))
        for t in res["targets"]:
            print(f"  {name} [{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']}")


if __name__ == "__main__":
    raise SystemExit(main())

"""The sweep engine: every point of a spec, compiled once per build and run once per content hash.

`run_sweep(spec, client, cache)` groups the points by what their compile depends on, takes
compiles and runs from the cache where their key is there, submits the rest to ``client`` and
collects the results as they finish, caching each one at once. ``client`` is a
``distributed.Client``: the engine uses only its futures API (``submit``, ``scatter``,
``cancel``, ``nthreads``, ``processing``) and ``distributed.as_completed``, which is the same
whether the scheduler is a LocalCluster on this machine or a cluster elsewhere
(tb/sweep/cluster.py makes either). A point whose compile or run fails (error, crash, timeout,
a lost worker) is recorded with its log; the others go on.

Each `run_sweep` call has task keys of its own (the content key's prefix, for the dashboard,
and a random suffix). The tasks of an interrupted sweep are cancelled asynchronously: the
scheduler confirms the cancellation to the client later, and a task already running goes on
until its child process notices. Under the same keys, a sweep run again at once on the same
client would have its new futures cancelled by that late confirmation (FutureCancelledError),
and a worker still running a cancelled task would resume it for the new one (handing over
"stopped: the sweep was cancelled" if it had already stopped the child). Nor can a forced
cancel of one client's sweep reach another client's tasks of the same points.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tb.sweep import tasks
from tb.sweep.cache import Cache, compile_key, run_key
from tb.sweep.spec import Point, SweepSpec

#: Dask priorities (higher first): compiles unblock points, then RTL points (the slow ones
#: that other points wait for least), each kind the cheapest first (the compiler's cycle
#: estimate), so results arrive early and an interrupted sweep has done the most points.
PRIORITY = {"compile": 3 * 10**12, "rtl": 2 * 10**12, "model": 10**12}


def _priority(backend: str, meta: dict[str, Any]) -> int:
    est = sum(int(v) for v in (meta.get("estimate") or {}).values())
    return PRIORITY[backend] - min(est, 10**12 - 1)


@dataclass
class Progress:
    """The sweep's state as the progress bar shows it."""

    total: int
    done: int = 0              # finished: ok (run now or from the cache)
    cached: int = 0            # of done, taken from the cache
    failed: int = 0
    running: int = 0
    compiling: int = 0
    eta_s: float | None = None
    elapsed_s: float = 0.0


@dataclass
class SweepResult:
    """Every point's record (spec order) and what the sweep did."""

    records: list[dict[str, Any]]
    executed: int = 0          # tasks run (compiles + points)
    compiles_run: int = 0
    points_run: int = 0
    compile_cpu_s: float = 0.0   # CPU seconds of the compiles run
    cached: int = 0
    failed: int = 0
    wall_s: float = 0.0
    workers: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed == 0


def _record(point: Point, key: str | None, status: str, **kw: Any) -> dict[str, Any]:
    return {"point": point.to_dict(), "label": point.label(), "key": key, "status": status,
            **kw}


class _Sweep:
    def __init__(self, spec: SweepSpec, client: Any, cache: Cache, rerun: bool,
                 on_progress: Callable[[Progress], None] | None,
                 log_dir: Path | None) -> None:
        from distributed import as_completed

        self.spec = spec
        self.client = client
        self.cache = cache
        self.rerun = rerun
        self.on_progress = on_progress
        self.log_dir = log_dir
        self.records: list[dict[str, Any] | None] = [None] * len(spec.points)
        self.ac = as_completed()
        self.futures: dict[Any, tuple] = {}
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.durations: dict[str, list[float]] = {"model": [], "rtl": []}
        self.prog = Progress(len(spec.points))
        self.result = SweepResult([])
        self.threads = max(1, sum(client.nthreads().values()))
        self.result.workers = len(client.nthreads())
        self.run_id = uuid.uuid4().hex[:12]      # this call's task keys (module docstring)

    # scheduling --------------------------------------------------------------------------------
    def start(self) -> None:
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(self.spec.points):
            groups.setdefault(compile_key(p), []).append(i)
        for ckey, idx in groups.items():
            files = self.cache.get_compile(ckey)
            if files is not None:
                self._schedule_runs(idx, files)
            else:
                p = self.spec.points[idx[0]]
                fut = self.client.submit(tasks.compile_task, p.to_dict(), _model_bytes(p),
                                         pure=False, key=f"compile-{ckey[:16]}-{self.run_id}",
                                         priority=PRIORITY["compile"])
                self.futures[fut] = ("compile", ckey, idx)
                self.ac.add(fut)
                self.prog.compiling += 1
        self._report()

    def _schedule_runs(self, idx: list[int], files: dict[str, bytes]) -> None:
        import json

        meta = json.loads(files["meta.json"])
        todo = []
        for i in idx:
            p = self.spec.points[i]
            rkey = run_key(p, meta["program_hash"])
            rec = None if self.rerun else self.cache.get_run(rkey)
            if rec is not None:
                rec = dict(rec, cached=True)
                self.records[i] = rec
                self.prog.done += 1
                self.prog.cached += 1
                self.result.cached += 1
            else:
                todo.append((i, rkey))
        if not todo:
            return
        [ref] = self.client.scatter([files], hash=False)
        for i, rkey in todo:
            p = self.spec.points[i]
            fut = self.client.submit(tasks.run_task, p.to_dict(), ref, pure=False,
                                     key=f"point-{rkey[:16]}-{i}-{self.run_id}",
                                     priority=_priority(p.backend, meta))
            self.futures[fut] = ("run", rkey, i, meta)
            self.ac.add(fut)

    # results -----------------------------------------------------------------------------------
    def collect(self) -> None:
        for fut in self.ac:
            what = self.futures.pop(fut)
            try:
                res = fut.result()
            except Exception as e:               # a lost worker, a task the cluster gave up
                res = {"status": "failed", "error": f"{type(e).__name__}: {e}", "log": "",
                       "wall_s": 0.0}
            with self.lock:
                if what[0] == "compile":
                    self._compiled(what[1], what[2], res)
                else:
                    self._ran(what[1], what[2], what[3], res)
            self._report()

    def _compiled(self, ckey: str, idx: list[int], res: dict[str, Any]) -> None:
        self.prog.compiling -= 1
        self.result.executed += 1
        self.result.compiles_run += 1
        self.result.compile_cpu_s += res.get("cpu_s") or 0.0
        if res["status"] == "ok":
            self.cache.put_compile(ckey, res["files"])
            self._schedule_runs(idx, res["files"])
            return
        log = self._write_log(f"compile-{ckey[:12]}", res.get("log", ""))
        for i in idx:
            p = self.spec.points[i]
            self.records[i] = _record(p, None, res["status"], stage="compile",
                                      error=res.get("error", ""), log_path=log,
                                      wall_s=res.get("wall_s", 0.0), cached=False)
            self.prog.failed += 1
            self.result.failed += 1

    def _ran(self, rkey: str, i: int, meta: dict[str, Any], res: dict[str, Any]) -> None:
        p = self.spec.points[i]
        self.result.executed += 1
        self.result.points_run += 1
        if res["status"] == "ok":
            rec = _record(p, rkey, "ok", wall_s=res["wall_s"], cpu_s=res.get("cpu_s"),
                          compile=meta,
                          result=res["result"], host=res.get("host"),
                          code_root=res.get("code_root"),
                          waves=bool(res.get("fst")))
            self.cache.put_run(rkey, rec, res.get("fst"))
            self.records[i] = dict(rec, cached=False)
            self.durations[p.backend].append(res["wall_s"])
            self.prog.done += 1
            return
        log = self._write_log(p.label().replace(" ", "_"), res.get("log", ""))
        self.records[i] = _record(p, rkey, res["status"], stage="run", error=res.get("error", ""),
                                  log_path=log, wall_s=res.get("wall_s", 0.0), cached=False,
                                  log_tail=res.get("log", "")[-2000:])
        self.prog.failed += 1
        self.result.failed += 1

    def _write_log(self, name: str, text: str) -> str | None:
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{name}.log"
        path.write_text(text)
        return str(path)

    # progress ----------------------------------------------------------------------------------
    def _running(self) -> int:
        try:
            ours = {f.key for f in list(self.futures)}
            busy = sum(len([k for k in keys if k in ours])
                       for keys in self.client.processing().values())
        except Exception:                        # the scheduler is gone: nothing runs
            return 0
        return min(busy, self.threads)

    def _eta(self) -> float | None:
        remaining = {"model": 0, "rtl": 0}
        for i, r in enumerate(self.records):
            if r is None:
                remaining[self.spec.points[i].backend] += 1
        if not any(remaining.values()):
            return 0.0
        work = 0.0
        for backend, count in remaining.items():
            # an RTL point is 10-1000x a functional-card one (and may build a model first):
            # no estimate for a backend before one of its own points has finished
            d = self.durations[backend]
            if count and not d:
                return None
            if count:
                work += count * sum(d) / len(d)
        return work / self.threads

    def _report(self) -> None:
        if self.on_progress is None:
            return
        self.prog.elapsed_s = time.perf_counter() - self.t0
        self.prog.running = self._running()
        self.prog.eta_s = self._eta()
        self.on_progress(self.prog)

    def cancel(self) -> None:
        pending = list(self.futures)
        if pending:
            self.client.cancel(pending, force=True)


def _model_bytes(p: Point) -> bytes | None:
    """An .onnx file's bytes (the worker may not see the client's files)."""
    from compiler import zoo

    if p.model == "demo" or p.model in zoo.LIGHT:
        return None
    path = Path(p.model)
    return path.read_bytes() if path.is_file() else None


def run_sweep(spec: SweepSpec, client: Any, cache: Cache, *, rerun: bool = False,
              on_progress: Callable[[Progress], None] | None = None,
              log_dir: Path | None = None, tick_s: float = 1.0) -> SweepResult:
    """Run every point of ``spec`` on ``client``'s cluster; records in spec order.

    ``rerun`` runs every point again (compiles still come from the cache). ``on_progress`` gets
    the state after every event and every ``tick_s`` while the sweep runs. A KeyboardInterrupt
    (or any exception in ``on_progress``) cancels what is still pending and propagates; what
    finished is in the cache, so running the sweep again resumes it, also at once on the same
    client (this call's task keys are its own: module docstring).
    """
    sw = _Sweep(spec, client, cache, rerun, on_progress, log_dir)
    stop = threading.Event()

    def ticker() -> None:
        while not stop.wait(tick_s):
            with sw.lock:
                try:
                    sw._report()
                except Exception:                # a failing progress bar must not kill us
                    return

    th = threading.Thread(target=ticker, daemon=True) if on_progress else None
    try:
        sw.start()
        if th is not None:
            th.start()
        sw.collect()
    except BaseException:
        sw.cancel()
        raise
    finally:
        stop.set()
        if th is not None and th.is_alive():     # not started when start() raised
            th.join()
    sw.result.records = [r for r in sw.records if r is not None]
    sw.result.wall_s = time.perf_counter() - sw.t0
    return sw.result

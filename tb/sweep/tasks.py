"""The sweep's tasks: what a Dask worker (or any executor) runs. Plain data in, plain data out.

`compile_task` and `run_task` never raise for a bad point: each runs tb/sweep/worker.py in a
child process of its own (new session, so a timeout kills the simulator under it too) and
returns a dict with ``status`` "ok", "failed" or "timeout", the child's ``log`` and the wall
time; artefacts travel as bytes, so the task needs no file system shared with the client.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Compile artefacts a run needs (written by the compile child, sent to run tasks as bytes).
ARTEFACTS = ("model.xmodel", "inputs.npz", "reference.npz", "meta.json")
#: The tail of a child's log that a result keeps.
LOG_TAIL = 20_000
#: Wall seconds a compile may take.
COMPILE_TIMEOUT_S = 1800.0


def code_root() -> Path:
    """The project tree this worker imports (an upload or the installed checkout)."""
    import tb

    return Path(tb.__file__).resolve().parents[1]


#: Seconds between two checks of a running child (finished? the task cancelled?); the
#: timeout is checked at its own deadline, not at the next poll.
POLL_S = 0.5


def _cancelled_check() -> Any:
    """A function that says whether the Dask task this thread runs was cancelled (its key no
    longer wanted: the client cancelled it or went away); always False outside a worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
        key = worker.get_current_task()
    except Exception:                            # not in a Dask task: nothing cancels us
        return lambda: False

    def cancelled() -> bool:
        ts = worker.state.tasks.get(key)
        return ts is None or ts.state in ("cancelled", "released", "forgotten")
    return cancelled


def _die_with_parent() -> None:
    """In the child (preexec): SIGTERM when the worker that started it dies (Linux); the
    child then kills its process group (tb/sweep/worker.py)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _child(mode: str, payload: dict[str, Any], work: Path, timeout_s: float
           ) -> tuple[str, str, float, float]:
    """Run the worker child; (status, log, wall seconds, CPU seconds). The child is stopped
    (with the simulator under it) on timeout, when the task is cancelled, and when the worker
    dies. ``timeout_s`` (any positive number of seconds, fractions too) counts from just before
    the child starts: its Python start-up is part of it. The CPU seconds are the child's and its
    descendants' (RUSAGE_CHILDREN around it: a worker runs one task at a time, one thread per
    worker)."""
    inp = work / "in.json"
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    inp.write_text(json.dumps(payload))
    root = code_root()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    log_path = work / "log.txt"
    t0 = time.perf_counter()
    cpu0 = _children_cpu_s()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tb.sweep.worker", mode, str(inp),
                                 str(out)], cwd=root, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)
        cancelled = _cancelled_check()
        rc: int | None = None
        status = "ok"
        try:
            while True:
                # wake at the deadline if it comes before the next poll: a timeout below
                # POLL_S (or not a multiple of it) is enforced as given, not rounded up
                left = timeout_s - (time.perf_counter() - t0)
                try:
                    rc = proc.wait(timeout=max(0.0, min(POLL_S, left)))
                    status = "ok" if rc == 0 else "failed"
                    break
                except subprocess.TimeoutExpired:
                    if time.perf_counter() - t0 >= timeout_s:
                        status = "timeout"
                    elif cancelled():
                        status = "cancelled"
                    else:
                        continue
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)      # leave no child behind
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    cpu = max(0.0, _children_cpu_s() - cpu0)
    text = log_path.read_text(errors="replace")
    if status == "timeout":
        text += f"\n[sweep] stopped after {timeout_s:g} s (the point's timeout_s)\n"
    elif status == "cancelled":
        text += "\n[sweep] stopped: the sweep was cancelled\n"
    elif status == "failed":
        text += f"\n[sweep] the point's process exited with {rc}\n"
    return status, text[-LOG_TAIL:], wall, round(cpu, 3)


def _error(status: str, log: str, out: Path) -> str:
    err = out / "error.txt"
    if err.exists():
        return err.read_text()
    if status == "timeout":
        return "timeout: " + log.strip().splitlines()[-1]
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return lines[-2] if len(lines) >= 2 else (lines[-1] if lines else "failed without output")


def compile_task(point: dict[str, Any], model_bytes: bytes | None = None) -> dict[str, Any]:
    """Compile a point's model for its accelerator build; the artefacts as bytes.
    ``model_bytes``: the .onnx file of a point whose model is a file on the client."""
    work = Path(tempfile.mkdtemp(prefix="dnncard-compile-"))
    try:
        if model_bytes is not None:
            (work / "model.onnx").write_bytes(model_bytes)
            point = dict(point, model=str(work / "model.onnx"))
        # one compile serves every point of its group: a point's own timeout does not bound it
        status, log, wall, cpu = _child("compile", point, work, COMPILE_TIMEOUT_S)
        out = work / "out"
        if status == "ok" and not all((out / a).exists() for a in ARTEFACTS):
            status = "failed"
        if status != "ok":
            return {"status": status, "error": _error(status, log, out), "log": log,
                    "wall_s": wall, "cpu_s": cpu}
        files = {a: (out / a).read_bytes() for a in ARTEFACTS}
        return {"status": "ok", "meta": json.loads(files["meta.json"]), "files": files,
                "log": log, "wall_s": wall, "cpu_s": cpu}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_task(point: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    """Run one point on its backend; its result, and its FST when the point asks for waves."""
    work = Path(tempfile.mkdtemp(prefix="dnncard-point-"))
    try:
        art = work / "artefacts"
        art.mkdir()
        for name, data in files.items():
            (art / name).write_bytes(data)
        status, log, wall, cpu = _child("run", {"point": point, "artefacts": str(art)}, work,
                                        float(point.get("timeout_s", 3600.0)))
        out = work / "out"
        if status == "ok" and not (out / "result.json").exists():
            status = "failed"
        if status != "ok":
            return {"status": status, "error": _error(status, log, out), "log": log,
                    "wall_s": wall, "cpu_s": cpu}
        fst = out / "dump.fst"
        return {"status": "ok", "result": json.loads((out / "result.json").read_text()),
                "log": log, "wall_s": wall, "cpu_s": cpu,
                "fst": fst.read_bytes() if fst.exists() else None,
                "host": os.uname().nodename, "code_root": str(code_root())}
    finally:
        shutil.rmtree(work, ignore_errors=True)

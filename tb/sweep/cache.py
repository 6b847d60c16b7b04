"""Content-addressed results of a sweep: a point runs again only when what decides it changed.

Two kinds of entries, each named by a SHA-256 over JSON of what decides it:

- a **compile** (model.xmodel, the inputs, onnxruntime's outputs, meta.json): the model (its
  name, or an .onnx file's bytes), the compile options (accelerator build, layers per subgraph,
  calibration), the sources of compiler/ and of what it imports of pyhost/ (pyhost/spec,
  pyhost/accel, fixed-point arithmetic) and the versions of onnx, onnxruntime and numpy;
- a **run**: the point's parameters, the compiled program (SHA-256 of the .xmodel), the
  backend, and for an RTL point the simulator (name and version) and the RTL sources
  (rtl/**/*.v, the generated includes, the lint waivers) with the host software that drives
  the card (driver, memory manager, card runtime, RtlCard and the host-memory model, the sweep's
  host program); for a functional-card point the sources of the functional card (pyhost/).

An RTL point's key deliberately leaves out the functional card's timing model: changing
pyhost/accel/timing.py re-runs the cheap functional-card points, not hours of RTL. Entries are
written atomically (a temporary file renamed), one file per run, as each point finishes, so an
interrupted sweep loses at most the points that were running. Failed points are not cached:
they run again next time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Bump when a result's layout or what a point measures changes: every run entry re-runs.
RESULT_VERSION = 1

_RTL_GLOBS = ("rtl/**/*.v", "rtl/include/*.vh", "rtl/*.vlt")
_HOST_STACK_GLOBS = ("pyhost/driver.py", "pyhost/errors.py", "pyhost/backend.py",
                     "pyhost/memory/*.py", "pyhost/accel/abi.py", "pyhost/accel/control.py",
                     "pyhost/accel/layout.py", "pyhost/spec/*.py", "compiler/runtime/*.py",
                     "compiler/plugins/accel/runner.py", "tb/common/rtl_card.py",
                     "tb/common/host_memory_axi.py", "tb/common/clocking.py",
                     "tb/sweep/host.py", "tb/sweep/rtl_point.py")
_CARD_MODEL_GLOBS = ("pyhost/**/*.py", "compiler/runtime/*.py",
                     "compiler/plugins/accel/runner.py", "tb/sweep/host.py",
                     "tb/sweep/worker.py")
#: What compile_model uses: the compiler and the parts of pyhost it imports (the contract, the
#: accelerator's ABI, layouts and timing rules, fixed-point arithmetic), the model loader.
_COMPILER_GLOBS = ("compiler/**/*.py", "pyhost/spec/*.py", "pyhost/accel/*.py",
                   "pyhost/fixedpoint.py", "pyhost/__init__.py", "tb/demo.py",
                   "tb/sweep/worker.py")


def digest(obj: Any) -> str:
    """SHA-256 of an object's canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def files_digest(globs: Iterable[str], root: Path = ROOT) -> str:
    """SHA-256 over the relative paths and contents of the files the globs match."""
    h = hashlib.sha256()
    paths = sorted({p for g in globs for p in root.glob(g) if p.is_file()
                    and "__pycache__" not in p.parts})
    for p in paths:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def source_digests(root: Path = ROOT) -> dict[str, str]:
    """The digests of the source sets the keys use (computed once per process)."""
    return {"rtl": files_digest(_RTL_GLOBS, root),
            "host_stack": files_digest(_HOST_STACK_GLOBS, root),
            "card_model": files_digest(_CARD_MODEL_GLOBS, root),
            "compiler": files_digest(_COMPILER_GLOBS, root)}


@functools.cache
def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("onnx", "onnxruntime", "numpy")}


@functools.cache
def simulator_version(sim: str) -> str:
    from tb.common.simulator import _tool_version

    return _tool_version(sim)


def model_identity(model: str) -> str:
    """A built-in model's name (its builder is in the compiler's sources), or a file's hash."""
    from compiler import zoo

    if model == "demo" or model in zoo.LIGHT:
        return model
    p = Path(model)
    if not p.exists():
        return f"missing:{model}"            # the compile fails and says so; nothing cached
    return "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()


def compile_key(point: Any) -> str:
    return digest({"kind": "compile", "model": model_identity(point.model),
                   "options": point.compile_options(), "images": point.images,
                   "sources": source_digests()["compiler"], "versions": _versions()})


def run_key(point: Any, program_hash: str) -> str:
    d = source_digests()
    ident = point.identity()
    ident.pop("samples")                     # in the program already
    key: dict[str, Any] = {"kind": "run", "version": RESULT_VERSION, "point": ident,
                           "program": program_hash, "backend": point.backend}
    if point.backend == "rtl":
        key.update(simulator=point.simulator, simulator_version=simulator_version(
            point.simulator), rtl=d["rtl"], host=d["host_stack"])
    else:
        key.update(card_model=d["card_model"])
    return digest(key)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Cache:
    """The cache directory: ``compile/<key>/`` and ``run/<key[:2]>/<key>.json`` (+ ``.fst``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # compile entries ------------------------------------------------------------------------
    def _compile_dir(self, key: str) -> Path:
        return self.root / "compile" / key

    def get_compile(self, key: str) -> dict[str, bytes] | None:
        d = self._compile_dir(key)
        if not (d / "complete").exists():
            return None
        from tb.sweep.tasks import ARTEFACTS

        try:
            return {a: (d / a).read_bytes() for a in ARTEFACTS}
        except OSError:
            return None

    def put_compile(self, key: str, files: Mapping[str, bytes]) -> None:
        d = self._compile_dir(key)
        for name, data in files.items():
            _atomic_write(d / name, data)
        _atomic_write(d / "complete", b"")

    # run entries ------------------------------------------------------------------------------
    def _run_path(self, key: str) -> Path:
        return self.root / "run" / key[:2] / f"{key}.json"

    def get_run(self, key: str) -> dict[str, Any] | None:
        p = self._run_path(key)
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def put_run(self, key: str, record: Mapping[str, Any], fst: bytes | None = None) -> None:
        if fst is not None:
            _atomic_write(self.fst_path(key), fst)
        _atomic_write(self._run_path(key), json.dumps(record).encode())

    def fst_path(self, key: str) -> Path:
        return self._run_path(key).with_suffix(".fst")

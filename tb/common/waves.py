"""Waveforms: pair an FST with its bench's GTKWave save file, and ``make waves``.

Each bench keeps a save file next to it (tb/<block>/<toplevel>.gtkw) naming signals as both
simulators write them (``<toplevel>.<signal>[msb:0]``); :func:`save_file_for` writes a copy next
to an FST that points at that FST.
``python -m tb.common.waves`` (``make waves``) opens the most recent FST under sim_build/ in
GTKWave with that copy; ``WAVE=<path.fst>`` picks another one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tb.common.simulator import BUILD_ROOT, ROOT


def _toplevel(fst: Path) -> str:
    """sim_build/<sim>/<toplevel>-<hash>[-waves]/runs/<run>/<file>.fst -> toplevel."""
    key = fst.resolve().relative_to(BUILD_ROOT.resolve()).parts[1]
    return re.sub(r"-[0-9a-f]{10}(-waves)?$", "", key)


def template_for(toplevel: str) -> Path:
    found = sorted((ROOT / "tb").glob(f"*/{toplevel}.gtkw"))
    if not found:
        raise FileNotFoundError(f"no GTKWave save file tb/*/{toplevel}.gtkw")
    return found[0]


def save_file_for(fst: Path) -> Path:
    """Write ``<fst>.gtkw``: the bench's save file adapted to this FST and simulator."""
    toplevel = _toplevel(fst)
    text = template_for(toplevel).read_text()
    text = re.sub(r'^\[dumpfile\].*$', f'[dumpfile] "{fst.resolve()}"', text, flags=re.M)
    out = fst.with_suffix(".gtkw")
    out.write_text(text)
    return out


def latest_fst() -> Path | None:
    files = list(BUILD_ROOT.glob("*/*/runs/*/*.fst"))
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def main() -> int:
    wave = os.environ.get("WAVE")
    fst = Path(wave) if wave else latest_fst()
    if fst is None or not fst.exists():
        print("no waveform yet: run `make sim` (or a bench with WAVES=1) first", file=sys.stderr)
        return 1
    gtkw = save_file_for(fst)
    cmd = ["gtkwave", str(fst), str(gtkw)]
    print(" ".join(cmd))
    if shutil.which("gtkwave") is None:
        print("gtkwave is not installed (apt-get install gtkwave); run the command above once "
              "it is", file=sys.stderr)
        return 1
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        print("no display: run the command above on a machine with one", file=sys.stderr)
        return 1
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())

"""Waveforms: pair an FST with its bench's GTKWave save file, and ``make waves``.

Each bench keeps a save file next to it (tb/<block>/<toplevel>.gtkw) naming signals as both
simulators write them (``<toplevel>.<signal>[msb:0]``); :func:`save_file_for` writes a copy next
to an FST that points at that FST.
``python -m tb.common.waves`` (``make waves``) opens the most recent FST under sim_build/ in
GTKWave with that copy; ``WAVE=<path.fst>`` picks another one.
"""

from __future__ import annotations

import gzip
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


def save_file_signals(toplevel: str) -> list[str]:
    """The signals the bench's save file shows, as ``scope.sub.name`` (bit ranges dropped)."""
    names = (re.sub(r"\[\d+:\d+\]$", "", line.strip())
             for line in template_for(toplevel).read_text().splitlines())
    return [n for n in names if n.startswith(toplevel + ".") and re.fullmatch(r"[\w$.]+", n)]


def save_file_scopes(toplevel: str) -> list[str]:
    """The scopes whose signals the bench's save file shows, in order of first appearance
    (``card_top.core.dma.engine.state[2:0]`` is in ``card_top.core.dma.engine``)."""
    return list(dict.fromkeys(n.rsplit(".", 1)[0] for n in save_file_signals(toplevel)))


def save_file_for(fst: Path) -> Path:
    """Write ``<fst>.gtkw``: the bench's save file adapted to this FST and simulator."""
    toplevel = _toplevel(fst)
    text = template_for(toplevel).read_text()
    text = re.sub(r'^\[dumpfile\].*$', f'[dumpfile] "{fst.resolve()}"', text, flags=re.M)
    out = fst.with_suffix(".gtkw")
    out.write_text(text)
    return out


class FstError(ValueError):
    """A file that is not an FST this reader understands."""


def _lz4_block(src: bytes, size: int) -> bytes:
    """Decompress one LZ4 block (the format FST's hierarchy section uses) of ``size`` bytes."""
    out = bytearray()
    i, n = 0, len(src)

    def length(i: int, base: int) -> tuple[int, int]:
        if base == 15:
            while True:
                if i >= n:
                    raise FstError("LZ4 block ends inside a length")
                b = src[i]
                i += 1
                base += b
                if b != 255:
                    break
        return i, base

    while i < n:
        token = src[i]
        i += 1
        i, lit = length(i, token >> 4)
        out += src[i:i + lit]
        i += lit
        if i >= n:
            break
        if i + 2 > n:
            raise FstError("LZ4 block ends inside an offset")
        off = src[i] | src[i + 1] << 8
        i += 2
        i, match = length(i, token & 15)
        match += 4
        start = len(out) - off
        if off == 0 or start < 0:
            raise FstError("LZ4 block refers before its start")
        for k in range(match):           # may overlap its own output
            out.append(out[start + k])
        if len(out) > size:
            raise FstError("LZ4 block longer than its section says")
    if len(out) != size:
        raise FstError(f"LZ4 block: {len(out)} bytes, the section says {size}")
    return bytes(out)


def fst_signals(fst: Path) -> list[str]:
    """Every signal an FST declares, as ``scope.sub.name`` (bit ranges dropped), in order: its
    hierarchy section read directly (gzip or LZ4, as fstapi writes them)."""
    data = Path(fst).read_bytes()
    hier = None
    i = 0
    while i + 9 <= len(data):
        kind, seclen = data[i], int.from_bytes(data[i + 1:i + 9], "big")
        if seclen < 8 or i + 1 + seclen > len(data):
            raise FstError(f"{fst}: section of {seclen} bytes at {i} runs past the end")
        body = data[i + 9:i + 1 + seclen]
        if kind == 4:                      # FST_BL_HIER: gzip
            hier = gzip.decompress(body[8:])
        elif kind == 6:                    # FST_BL_HIER_LZ4
            hier = _lz4_block(body[8:], int.from_bytes(body[:8], "big"))
        elif kind == 7:
            raise FstError(f"{fst}: a doubly LZ4-compressed hierarchy (not written here)")
        i += 1 + seclen
    if hier is None:
        raise FstError(f"{fst}: no hierarchy section")
    names: list[str] = []
    scope: list[str] = []
    j = 0

    def cstr(j: int) -> tuple[int, str]:
        end = hier.index(0, j)
        return end + 1, hier[j:end].decode("utf-8", "replace")

    def varint(j: int) -> int:
        while hier[j] & 0x80:
            j += 1
        return j + 1

    while j < len(hier):
        tag = hier[j]
        j += 1
        if tag == 254:                     # scope: type, name, component
            j, name = cstr(j + 1)
            j, _ = cstr(j)
            scope.append(name)
        elif tag == 255:                   # upscope
            scope.pop()
        elif tag == 252:                   # attribute: type, subtype, name, argument
            j, _ = cstr(j + 2)
            j = varint(j)
        elif tag == 253:                   # attribute end
            pass
        elif tag <= 29:                    # a variable: direction, name, length, alias
            j, name = cstr(j + 1)
            j = varint(varint(j))
            names.append(".".join([*scope, re.sub(r"\s*\[[^\]]*\]$", "", name)]))
        else:
            raise FstError(f"{fst}: unknown hierarchy tag {tag}")
    return names


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

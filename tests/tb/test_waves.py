"""GTKWave save files: every signal they name exists, and the per-FST copy points at its FST."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tb.common import waves
from tb.common.simulator import ROOT

SAVE_FILES = sorted((ROOT / "tb").glob("*/*.gtkw"))


def _signals(gtkw: Path) -> list[str]:
    return [ln.strip() for ln in gtkw.read_text().splitlines()
            if ln.strip() and ln[0] not in "[@-*"]


@pytest.mark.parametrize("gtkw", SAVE_FILES, ids=lambda p: p.name)
def test_save_file_signals_exist(gtkw: Path) -> None:
    """Each signal of a bench's save file is declared in that top level's Verilog."""
    top = gtkw.stem
    src = "".join(p.read_text() for p in (ROOT / "rtl").glob("*/*.v"))
    src += "".join(p.read_text() for p in (ROOT / "tb").glob("*/*.v"))
    sigs = _signals(gtkw)
    assert sigs, f"{gtkw.name} names no signals"
    for s in sigs:
        assert s.startswith(f"{top}."), f"{gtkw.name}: {s} is not under {top}"
        name = re.sub(r"\[\d+:\d+\]$", "", s.split(".", 1)[1]).split(".")[-1]
        assert re.search(rf"\b{re.escape(name)}\b", src), f"{gtkw.name}: no signal {name}"


def test_save_file_for_points_at_fst(tmp_path, monkeypatch) -> None:
    """The copy written next to an FST names that FST as its dump file."""
    monkeypatch.setattr(waves, "BUILD_ROOT", tmp_path)
    run = tmp_path / "icarus" / "dram_ctrl-0123456789-waves" / "runs" / "sim"
    run.mkdir(parents=True)
    fst = run / "dram_ctrl.fst"
    fst.write_bytes(b"")
    out = waves.save_file_for(fst)
    text = out.read_text()
    assert f'[dumpfile] "{fst.resolve()}"' in text
    assert _signals(out) == _signals(waves.template_for("dram_ctrl"))

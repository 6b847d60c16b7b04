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


def test_save_file_scopes() -> None:
    """The scopes whose signals a save file shows, each once, in order."""
    assert waves.save_file_scopes("card_top_pcie") == ["card_top_pcie"]
    scopes = waves.save_file_scopes("card_top")
    assert scopes[0] == "card_top" and "card_top.core.dma.engine" in scopes
    assert len(scopes) == len(set(scopes))
    assert waves.save_file_scopes("pcie_dma") == ["pcie_dma", "pcie_dma.core.engine"]


def test_wave_control_text_and_refusals() -> None:
    """The tracing control file: off below the top, on for each scope at its levels; a name
    that could break out of the file's quotes, or is not under the top, is refused."""
    from tb.common.simulator import wave_control

    text = wave_control("card_top", [("card_top", 1), ("card_top.core.accel", None)])
    assert text.splitlines()[0] == "`verilator_config"
    assert 'tracing_off -scope "card_top.*"' in text
    assert 'tracing_on -scope "card_top" -levels 1' in text
    assert 'tracing_on -scope "card_top.core.accel"\n' in text
    for bad in ('card_top" -levels 9\ntracing_on -scope "*', "card_top.core\nx", "other.core",
                "card_topx.core", "card_top..core", "", "card_top.core.*", "card_top.co re"):
        with pytest.raises(ValueError):
            wave_control("card_top", [(bad, None)])
    with pytest.raises(ValueError):
        wave_control("card_top", [("card_top", 0)])


def test_lz4_block() -> None:
    """LZ4 blocks as FST's hierarchy section has them: literals, an overlapping match (the
    same bytes repeated), a long literal run; a block that ends early or points before its
    start is refused."""
    # "ab", then 6 bytes copied from 2 back (overlapping), then the final literals "xyz"
    block = bytes([0x22]) + b"ab" + bytes([2, 0]) + bytes([0x30]) + b"xyz"
    assert waves._lz4_block(block, 11) == b"abababab" + b"xyz"
    long = bytes(range(256)) * 2 + b"tail"                 # 516 literals: 15 + 255 + 246
    assert waves._lz4_block(bytes([0xF0, 255, 246]) + long, 516) == long
    for bad in (bytes([0x22]) + b"ab" + bytes([9, 0]),    # offset before the start
                bytes([0x22]) + b"ab" + bytes([2]),       # offset cut off
                bytes([0xF0, 255])):                      # length cut off
        with pytest.raises(waves.FstError):
            waves._lz4_block(bad, 100)
    with pytest.raises(waves.FstError):
        waves._lz4_block(block, 12)                        # not the size the section says


def test_fst_signals_refuses_what_is_not_an_fst(tmp_path: Path) -> None:
    bad = tmp_path / "x.fst"
    bad.write_bytes(b"\x00" + (1 << 40).to_bytes(8, "big"))
    with pytest.raises(waves.FstError):
        waves.fst_signals(bad)
    bad.write_bytes(b"")
    with pytest.raises(waves.FstError, match="no hierarchy"):
        waves.fst_signals(bad)

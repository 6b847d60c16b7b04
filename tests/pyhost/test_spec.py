"""The hardware/software spec: generated Verilog is current and matches the RTL's parameters."""

from __future__ import annotations

import re
from pathlib import Path

from pyhost.spec import dram, gen

ROOT = Path(__file__).resolve().parents[2]


def test_generated_includes_are_current() -> None:
    """rtl/include/ is exactly what the Python spec generates (run `make gen` if this fails)."""
    stale = gen.stale_files()
    assert not stale, f"stale generated files: {[str(p.relative_to(ROOT)) for p in stale]}"


def test_stale_check_detects_edit(tmp_path, monkeypatch) -> None:
    """The staleness check really compares contents, for the includes and the docs."""
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.stale_files(), "empty tree reported as current"
    assert gen.main([]) == 0
    assert not gen.stale_files()
    f = tmp_path / "rtl" / "include" / "dram_defs.vh"
    f.write_text(f.read_text().replace("DRAM_T_CL 6", "DRAM_T_CL 7"))
    assert gen.stale_files() == [f]
    f.write_text(f.read_text().replace("DRAM_T_CL 7", "DRAM_T_CL 6"))
    doc = tmp_path / "docs" / "registers.md"
    doc.write_text(doc.read_text().replace("SCRATCH", "SCRATCHPAD"))
    assert gen.stale_files() == [doc]


def test_ddr4_3200_conversion() -> None:
    """DDR4-3200 in controller cycles: rounded up, tREFI rounded down."""
    t = dram.DEFAULT_TIMING
    assert (t.CL, t.RCD, t.RP, t.RAS, t.RC) == (6, 6, 6, 13, 19)
    assert (t.CCD_S, t.CCD_L, t.RRD_S, t.RRD_L, t.FAW) == (1, 2, 1, 2, 9)
    assert (t.WTR_S, t.WTR_L, t.WR, t.RTP, t.BURST) == (1, 3, 6, 3, 1)
    assert t.RFC == 140 and t.REFI == 3120
    for f in t.__dataclass_fields__:
        ns_spec = getattr(dram.DDR4_3200_TCK, f) * dram.TCK_NS
        ns_ctrl = getattr(t, f) * dram.CTRL_CLK_NS
        if f == "REFI":
            assert ns_ctrl <= ns_spec, f"tREFI lengthened: {ns_ctrl} > {ns_spec} ns"
        else:
            assert ns_ctrl >= ns_spec, f"t{f} shortened: {ns_ctrl} < {ns_spec} ns"


def test_rtl_timing_parameters_come_from_the_spec() -> None:
    """Every timing field is a dram_ctrl parameter defaulting to the generated macro."""
    src = (ROOT / "rtl" / "dram_ctrl" / "dram_ctrl.v").read_text()
    params = dict(re.findall(r"parameter integer (T_\w+)\s*=\s*(`\w+)", src))
    for name in dram.DEFAULT_TIMING.parameters():
        assert params.get(name) == f"`DRAM_{name}", f"{name}: RTL default {params.get(name)}"
    assert set(params) == set(dram.DEFAULT_TIMING.parameters()), "RTL has extra T_ parameters"


def test_geometry_decode() -> None:
    """Consecutive lines rotate through the bank groups, then columns, banks and rows."""
    g = dram.DramGeometry(1 << 30, addr_hash=False)
    assert g.row_bits == 13
    assert [g.decode(64 * i)[0] for i in range(5)] == [0, 1, 2, 3, 0]
    assert g.decode(64 * 4) == (0, 0, 0, 1)
    assert g.decode(64 * 4 * 128) == (0, 1, 0, 0)
    assert g.decode(64 * 4 * 128 * 4) == (0, 0, 1, 0)


def test_geometry_hash() -> None:
    """The XOR mapping: row 0 is the plain mapping; inside a row the lines still spread over
    all 16 banks, 4 KiB at a time in one bank of each group; two rows that differ in one bit
    never share a bank index."""
    g = dram.DramGeometry(1 << 30)
    plain = dram.DramGeometry(1 << 30, addr_hash=False)
    row = 64 << (dram.BG_BITS + dram.COL_BITS + dram.BA_BITS)    # 128 KiB per row
    assert all(g.decode(a) == plain.decode(a) for a in range(0, row, 64))
    for r in (1, 5, 1000, 8191):
        banks = [g.decode(r * row + a)[:2] for a in range(0, row, 64)]
        assert len(set(banks)) == 16 and all(banks.count(b) == 128 for b in set(banks))
        chunk = {g.decode(r * row + a)[:2] for a in range(0, 4096, 64)}
        assert len(chunk) == 4 and len({bg for bg, _ in chunk}) == 4
        assert all(g.decode(r * row + a)[2:] == plain.decode(r * row + a)[2:]
                   for a in range(0, row, 64 * 37))
    for r in range(0, 8192, 97):
        for k in range(13):
            assert g.decode(r * row)[1] != g.decode((r ^ (1 << k)) * row)[1], (r, k)

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


# --- the accelerator's default build -------------------------------------------------------------

#: RTL files and, per parameter, the generated macro its default must be.
_ACCEL_PARAMS = {
    "rtl/accel/accel.v": {"N": "N", "INP_DEPTH": "INP_DEPTH", "WGT_DEPTH": "WGT_DEPTH",
                          "ACC_DEPTH": "ACC_DEPTH", "QUEUE_DEPTH": "QUEUE_DEPTH",
                          "DATA_WIDTH": "DATA_WIDTH"},
    "rtl/accel/accel_compute.v": {"N": "N", "INP_DEPTH": "INP_DEPTH", "WGT_DEPTH": "WGT_DEPTH",
                                  "ACC_DEPTH": "ACC_DEPTH"},
    "rtl/accel/accel_mem_decode.v": {"N": "N", "INP_DEPTH": "INP_DEPTH",
                                     "WGT_DEPTH": "WGT_DEPTH", "ACC_DEPTH": "ACC_DEPTH"},
    "rtl/accel/accel_gemm_array.v": {"N": "N"},
    "rtl/accel/accel_vector.v": {"N": "N"},
    "rtl/accel/accel_fetch.v": {"N": "N", "DATA_WIDTH": "DATA_WIDTH",
                                "MAX_BURST": "FETCH_MAX_BURST"},
    "rtl/accel/accel_burst_walker.v": {"DATA_WIDTH": "DATA_WIDTH", "MAX_BURST": "MEM_MAX_BURST",
                                       "MAX_OUTSTANDING": "MEM_MAX_OUTSTANDING"},
    "rtl/card_top/card_top.v": {"ACC_N": "N", "ACC_INP_DEPTH": "INP_DEPTH",
                                "ACC_WGT_DEPTH": "WGT_DEPTH", "ACC_ACC_DEPTH": "ACC_DEPTH",
                                "ACC_QUEUE_DEPTH": "QUEUE_DEPTH"},
}
for _unit in ("rtl/accel/accel_load.v", "rtl/accel/accel_store.v", "tb/accel/accel_ls_wrap.v"):
    _ACCEL_PARAMS[_unit] = {"N": "N", "INP_DEPTH": "INP_DEPTH", "WGT_DEPTH": "WGT_DEPTH",
                            "ACC_DEPTH": "ACC_DEPTH", "DATA_WIDTH": "DATA_WIDTH",
                            "MAX_BURST": "MEM_MAX_BURST", "MAX_OUTSTANDING": "MEM_MAX_OUTSTANDING"}


def test_rtl_accel_defaults_come_from_the_spec() -> None:
    """Every accelerator parameter list that software also knows defaults to the generated
    `ACCEL_*` macro (never a number typed again), and the include holds the spec's values."""
    from pyhost.spec import accel

    for path, params in _ACCEL_PARAMS.items():
        src = (ROOT / path).read_text()
        assert '`include "accel_cfg.vh"' in src, f"{path} does not include accel_cfg.vh"
        found = dict(re.findall(r"parameter integer (\w+)\s*=\s*([^,\s)]+)", src))
        for name, macro in params.items():
            assert found.get(name) == f"`ACCEL_{macro}", \
                f"{path}: {name} defaults to {found.get(name)}, expected `ACCEL_{macro}"
    inc = (ROOT / "rtl" / "include" / "accel_cfg.vh").read_text()
    for name, value in accel.RTL_DEFAULTS.items():
        assert f"`define ACCEL_{name} {value}\n" in inc
    cfg = accel.AccelConfig()
    assert (cfg.n, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.queue_depth) == tuple(
        accel.RTL_DEFAULTS[k] for k in ("N", "INP_DEPTH", "WGT_DEPTH", "ACC_DEPTH",
                                        "QUEUE_DEPTH"))


def test_changing_a_default_changes_the_rtl_build(tmp_path, monkeypatch) -> None:
    """A default changed in the spec reaches the elaborated RTL through `make gen`: with N = 4 and
    a queue depth and fetch burst of 4 in pyhost.spec.accel, the regenerated include makes the
    elaborated accel's parameters 4 (elaborated by Icarus; Verilator reads the same include)."""
    import shutil
    import subprocess

    from pyhost.spec import accel

    if not (shutil.which("iverilog") and shutil.which("vvp")):
        import pytest
        pytest.skip("iverilog is not installed (apt-get install iverilog)")
    defaults = {**accel.RTL_DEFAULTS, "N": 4, "QUEUE_DEPTH": 4, "FETCH_MAX_BURST": 4}
    monkeypatch.setattr(accel, "RTL_DEFAULTS", defaults)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main([]) == 0
    inc = tmp_path / "rtl" / "include"
    assert "`define ACCEL_N 4\n" in (inc / "accel_cfg.vh").read_text()
    probe = tmp_path / "probe.v"
    probe.write_text("module probe;\n  accel dut ();\n"
                     "  initial $display(\"%0d %0d %0d %0d\", dut.N, dut.QUEUE_DEPTH,"
                     " dut.fetch.MAX_BURST, dut.INP_DEPTH);\nendmodule\n")
    srcs = sorted(str(p) for p in (ROOT / "rtl" / "accel").glob("*.v"))
    out = tmp_path / "probe.vvp"
    subprocess.run(["iverilog", "-g2012", "-I", str(inc), "-s", "probe", "-o", str(out),
                    str(probe), *srcs], check=True, capture_output=True)
    shown = subprocess.run(["vvp", "-n", str(out)], check=True, capture_output=True,
                           text=True).stdout.split()
    assert shown[:4] == ["4", "4", "4", str(accel.DEFAULT_INP_DEPTH)], shown


def test_trace_layout_covers_the_trace_ports() -> None:
    """The packed trace has every trace port of dram_ctrl, at its width, back to back."""
    src = (ROOT / "rtl" / "dram_ctrl" / "dram_ctrl.v").read_text()
    ports = {m[2]: m[1] for m in re.finditer(
        r"output wire\s*(\[[^\]]*\])?\s*trace_(\w+)", src)}
    widths = {"[63:0]": 64, "[31:0]": 32, "[2:0]": 3, None: 1,
              "[`DRAM_BG_BITS-1:0]": dram.BG_BITS, "[`DRAM_BA_BITS-1:0]": dram.BA_BITS}
    fields = dict(dram.TRACE_FIELDS)
    assert {k: widths[v] for k, v in ports.items()} == {
        k: w for k, w in fields.items() if not k.startswith("r_")}
    lsb = 0
    for name, width in dram.TRACE_FIELDS:
        assert dram.TRACE_LAYOUT[name] == (lsb, width)
        lsb += width
    assert dram.TRACE_WIDTH == lsb

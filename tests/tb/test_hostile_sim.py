"""``make sim`` options: every value, as a flag or a variable (command line or environment), is
checked before anything is built: a bad one is a one-line error and exit status 2, never run
as something else."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from tb import sim
from tb.demo import DemoError, DemoOptions, check_demo_options

ROOT = Path(__file__).resolve().parents[2]
VARS = ("DEMO", "MODEL", "SIM", "CARD_MEM", "BACKEND", "LINK", "IMAGES", "CYCLES", "WAVES",
        "WAVE_SCOPES", "SEQ")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in VARS:
        monkeypatch.delenv(v, raising=False)


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace both demos: a test fails if a bad value reaches either."""
    ran: list[str] = []
    monkeypatch.setattr(sim, "e2e", lambda args: ran.append("e2e") or 0)
    monkeypatch.setattr(sim, "card_demos", lambda args: ran.append("card") or 0)
    return ran


BAD = [
    # (variable, value, key words of the message)
    ("DEMO", "cards", ["DEMO='cards'", "e2e, card"]),
    ("DEMO", "E2E", ["DEMO='E2E'"]),
    ("SIM", "vcs", ["SIM='vcs'", "verilator, icarus"]),
    ("SIM", "Verilator", ["SIM='Verilator'"]),
    ("BACKEND", "fpga", ["BACKEND='fpga'", "rtl, model"]),
    ("LINK", "cxl", ["LINK='cxl'", "pcie, axi"]),
    ("LINK", "PCIe", ["LINK='PCIe'"]),
    ("WAVES", "yes", ["WAVES='yes'", "1, all, 0"]),
    ("WAVES", "2", ["WAVES='2'"]),
    ("WAVE_SCOPES", "card_top_pcie.core\" -levels 9", ["WAVE_SCOPES", "hierarchical name"]),
    ("WAVE_SCOPES", "card_top.core", ["WAVE_SCOPES", "under card_top_pcie"]),
    ("IMAGES", "0", ["IMAGES='0'", "1 to 1000"]),
    ("IMAGES", "-2", ["IMAGES='-2'"]),
    ("IMAGES", "two", ["IMAGES='two'"]),
    ("IMAGES", "1.5", ["IMAGES='1.5'"]),
    ("IMAGES", "100000", ["IMAGES='100000'"]),
    ("CYCLES", "0", ["CYCLES='0'"]),
    ("CYCLES", "1e6", ["CYCLES='1e6'"]),
    ("CARD_MEM", "100G", ["CARD_MEM='100G'", "at most 1 GiB"]),
    ("CARD_MEM", "0", ["CARD_MEM='0'", "positive multiple of 4 KiB"]),
    ("CARD_MEM", "1000", ["CARD_MEM='1000'", "multiple of 4 KiB"]),
    ("CARD_MEM", "-64M", ["CARD_MEM='-64M'", "byte count"]),
    ("CARD_MEM", "lots", ["CARD_MEM='lots'", "byte count"]),
    ("CARD_MEM", "64X", ["CARD_MEM='64X'", "byte count"]),
    ("CARD_MEM", "1.5G", ["CARD_MEM='1.5G'"]),
    ("SEQ", "0", ["SEQ='0'", "1 to 512"]),
    ("SEQ", "1024", ["SEQ='1024'"]),
    ("SEQ", "twelve", ["SEQ='twelve'"]),
    ("SEQ", "12", ["SEQ=12", "multiple of 8"]),
]


@pytest.mark.parametrize(("var", "value", "words"), BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
@pytest.mark.parametrize("where", ["env", "flag"])
def test_a_bad_value_is_refused_before_anything_runs(
        var: str, value: str, words: list[str], where: str, nothing_runs: list[str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv: list[str] = []
    if where == "env":
        monkeypatch.setenv(var, value)
    else:
        argv = [f"--{var.lower().replace('_', '-')}={value}"]
    assert sim.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("make sim: error: "), err
    for w in words:
        assert w in err, (w, err)
    assert nothing_runs == []


def test_icarus_card_memory_is_bounded(nothing_runs: list[str],
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SIM", "icarus")
    monkeypatch.setenv("CARD_MEM", "1G")
    assert sim.main([]) == 2
    assert "SIM=icarus" in capsys.readouterr().err and nothing_runs == []


def test_good_values_reach_the_right_demo(nothing_runs: list[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert sim.main([]) == 0 and nothing_runs == ["e2e"]
    monkeypatch.setenv("DEMO", "card")
    monkeypatch.setenv("CARD_MEM", "64M")
    assert sim.main([]) == 0 and nothing_runs == ["e2e", "card"]
    monkeypatch.setenv("SIM", "")           # empty means unset, as in make
    assert sim.main(["--demo", "e2e", "--images", "3"]) == 0
    args = sim.check_options(argparse.Namespace(
        demo="e2e", model="demo", sim="icarus", card_mem="80K", backend="model", link="axi",
        images="2", cycles="40000"))
    assert (args.card_mem, args.images, args.cycles) == (80 << 10, 2, 40000)
    assert args.waves is True  # a caller that gives no WAVES gets the default
    assert sim.parse_size("1G") == 1 << 30 and sim.parse_size("64MiB") == 64 << 20


def test_waves_reach_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """WAVES=0 turns the FST off, the default keeps it (the demo's options get it)."""
    seen: list[bool] = []
    monkeypatch.setattr(sim, "e2e", lambda args: seen.append(args.waves) or 0)
    assert sim.main([]) == 0
    monkeypatch.setenv("WAVES", "0")
    assert sim.main([]) == 0
    assert sim.main(["--waves", "1"]) == 0
    assert seen == [True, False, True]
    monkeypatch.delenv("WAVES")
    assert sim.main(["--model", "minilm"]) == 0       # 30 M cycles: no FST unless asked
    assert sim.main(["--model", "minilm", "--waves", "1"]) == 0
    assert seen[3:] == [False, True]


def test_what_the_waves_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """WAVES=1 (default): the save file's scopes plus WAVE_SCOPES; WAVES=all: the whole design
    (None); WAVE_SCOPES with WAVES=0 or all is refused rather than ignored."""
    seen: list[tuple[bool, object]] = []
    monkeypatch.setattr(sim, "e2e", lambda args: seen.append((args.waves, args.wave_scopes)) or 0)
    assert sim.main([]) == 0
    assert sim.main(["--waves", "all"]) == 0
    monkeypatch.setenv("WAVE_SCOPES", "card_top_pcie.core.accel, card_top_pcie.core.dma")
    assert sim.main([]) == 0
    assert sim.main(["--link", "axi", "--wave-scopes", "card_top.core"]) == 0
    assert seen == [(True, ()), (True, None),
                    (True, ("card_top_pcie.core.accel", "card_top_pcie.core.dma")),
                    (True, ("card_top.core",))]
    assert sim.main(["--waves", "0"]) == 2
    assert sim.main(["--waves", "all"]) == 2


def test_the_demo_refuses_a_bad_wave_scope(tmp_path: Path) -> None:
    with pytest.raises(DemoError, match="under card_top"):
        check_demo_options(DemoOptions(out=tmp_path, link="axi", wave_scopes=("card_top_pcie",)))
    with pytest.raises(DemoError, match="tuple"):
        check_demo_options(DemoOptions(out=tmp_path, wave_scopes=["card_top_pcie"]))  # type: ignore[arg-type]
    check_demo_options(DemoOptions(out=tmp_path, wave_scopes=None))
    check_demo_options(DemoOptions(out=tmp_path, wave_scopes=("card_top_pcie.core",)))


def test_the_flag_wins_over_the_environment(nothing_runs: list[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGES", "0")
    assert sim.main(["--images", "1"]) == 0


def test_make_sim_from_the_command_line_exits_2() -> None:
    """Through make itself: a variable on make's command line reaches the check (no build)."""
    proc = subprocess.run(["make", "-s", "sim", "SIM=nonesuch"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode != 0
    assert "SIM='nonesuch' is not one of verilator, icarus" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_options_are_checked_for_library_callers(tmp_path: Path) -> None:
    for kw, words in [({"images": 0}, "images 0"), ({"images": True}, "images True"),
                      ({"card_mem": 100 << 30}, "up to 1 GiB"), ({"sim": "vcs"}, "sim 'vcs'"),
                      ({"backend": "x"}, "backend 'x'"), ({"link": "cxl"}, "link 'cxl'"),
                      ({"max_layers": 0}, "max_layers"),
                      ({"model": ""}, "model ''")]:
        with pytest.raises(DemoError, match=words):
            check_demo_options(DemoOptions(out=tmp_path, **kw))  # type: ignore[arg-type]
    check_demo_options(DemoOptions(out=tmp_path))


def test_a_bad_model_is_refused_before_simulation(tmp_path: Path) -> None:
    from tb.demo import load_model

    with pytest.raises(DemoError, match="no such file, and not 'demo' or a light model"):
        load_model(str(tmp_path / "none.onnx"), tmp_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01garbage")
    with pytest.raises(DemoError, match="is not a valid ONNX model"):
        load_model(str(junk), tmp_path)
    with pytest.raises(DemoError, match="is not a valid ONNX model"):
        load_model(str(tmp_path), tmp_path)



def test_a_sequence_too_short_for_minilm_is_refused(tmp_path: Path) -> None:
    """SEQ shorter than MiniLM's sentences: a DemoError naming the length to give, before
    anything is compiled."""
    from tb.demo import DemoError, DemoOptions, run_demo

    with pytest.raises(DemoError, match="SEQ=8: .* give SEQ=24 or more"):
        run_demo(DemoOptions(model="minilm", backend="model", seq=8, out=tmp_path,
                             quiet=True))

"""The command line under hostile input: every value a user gives is checked up front with a
one-line message that names it, exit status 2 for a bad value and 1 for a model that cannot be
compiled or run, never a traceback, never an input or a foreign file overwritten."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler import cli, xmodel
from compiler.pipeline import compile_model
from tests.compiler.helpers import conv_net


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout, stderr of one CLI call (argparse's own errors included)."""
    try:
        status = cli.main(argv)
    except SystemExit as e:
        status = int(e.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    return status, out, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], status: int,
            *words: str, internal: bool = False) -> str:
    got, _, err = run(argv, capsys)
    assert got == status, (argv, got, err)
    assert err.count("\n") == 1 and "error: " in err, err     # one line
    assert ("internal error" in err) == internal, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    p = tmp_path / "net.onnx"
    onnx.save(conv_net(), str(p))
    return p


@pytest.fixture
def xm(tmp_path: Path) -> Path:
    p = tmp_path / "net.xmodel"
    xmodel.save(compile_model(conv_net(), {"plugin": "softmax_ip"}).graph, p)
    return p


@pytest.fixture(scope="module")
def accel_xm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("accel") / "accel.xmodel"
    xmodel.save(compile_model(conv_net(), {"plugin": "accel", "quantize": {"samples": 1}}).graph,
                p)
    return p


# --- compile: inputs and outputs ------------------------------------------------------------------

def test_compile_never_overwrites_its_input(tmp_path: Path, onnx_file: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """An ONNX file named net.xmodel: the default output would be the input itself."""
    named = tmp_path / "model.xmodel"
    shutil.copy(onnx_file, named)
    before = named.read_bytes()
    refused(["compile", str(named)], capsys, 2, "default output", "is the model itself", "-o")
    refused(["compile", str(named), "-o", str(named)], capsys, 2, "is the input",
            "destroy the input")
    link = tmp_path / "alias.xmodel"
    link.symlink_to(named)
    refused(["compile", str(named), "-o", str(link)], capsys, 2, "is the input")
    assert named.read_bytes() == before


def test_compile_does_not_replace_a_foreign_file(tmp_path: Path, onnx_file: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.xmodel"
    notes.write_text("my notes")
    refused(["compile", str(onnx_file), "-o", str(notes)], capsys, 2,
            "exists and is not a xmodel file", "--force")
    assert notes.read_text() == "my notes"
    status, out, _ = run(["compile", str(onnx_file), "-o", str(notes), "--force"], capsys)
    assert status == 0 and "replaced the existing" in out
    status, out, _ = run(["compile", str(onnx_file), "-o", str(notes)], capsys)  # now ours
    assert status == 0 and f"replaced the existing {notes}" in out
    report = tmp_path / "r.json"
    report.write_text("precious")
    refused(["compile", str(onnx_file), "-o", str(notes), "--report", str(report)], capsys, 2,
            "--report", "not a JSON file")
    refused(["compile", str(onnx_file), "-o", str(notes), "--report", str(notes)], capsys, 2)
    assert report.read_text() == "precious"


def test_compile_paths(tmp_path: Path, onnx_file: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    refused(["compile", str(tmp_path / "missing.onnx")], capsys, 2, "missing.onnx",
            "does not exist")
    refused(["compile", str(tmp_path)], capsys, 2, "is not a file")
    refused(["compile", str(onnx_file), "-o", str(tmp_path / "no" / "dir" / "m.xmodel")],
            capsys, 2, "directory", "does not exist", "create it first")
    refused(["compile", str(onnx_file), "-o", str(tmp_path)], capsys, 2, "is a directory")
    refused(["compile", str(onnx_file), "--report", str(tmp_path / "none" / "r.json")], capsys, 2,
            "does not exist")
    refused(["compile", ""], capsys, 2, "is not a file name")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x96\x01garbage" * 50)
    refused(["compile", str(junk), "-o", str(tmp_path / "j.xmodel")], capsys, 1,
            "not a readable ONNX model")
    assert not (tmp_path / "j.xmodel").exists()   # nothing left behind on failure


def test_a_failed_compile_keeps_the_previous_output(tmp_path: Path, onnx_file: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "net.xmodel"
    assert run(["compile", str(onnx_file), "-o", str(out), "-q"], capsys)[0] == 0
    good = out.read_bytes()
    refused(["compile", str(onnx_file), "-o", str(out), "--options",
             '{"quantize": {"calibration": "' + str(tmp_path / "none.npz") + '"}}'], capsys, 2)
    assert out.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx", "net.xmodel"]


# --- compile: option values -----------------------------------------------------------------------

OPTION_CASES = [
    ("{plugin: x}", "options are not valid JSON"),
    ("[1, 2]", "options must be a JSON object"),
    ('"accel"', "options must be a JSON object"),
    ('{"plugn": "x"}', "unknown option(s) ['plugn']"),
    ('{"plugin": ""}', "names no plugin"),
    ('{"plugin": " , "}', "names no plugin"),
    ('{"plugins": []}', "names no plugin"),
    ('{"plugin": [1]}', "comma-separated string or a list of strings"),
    ('{"plugin": "a", "plugins": "b"}', "not both"),
    ('{"plugin": "nope_xyz"}', "no built-in plugin"),
    ('{"plugin": "cpu"}', "built-in CPU target"),
    ('{"plugin": "softmax_ip,softmax_ip"}', "listed twice"),
    ('{"passes": {"fold_constants": "no"}}', "must be true or false"),
    ('{"passes": {"fold_constants": 0}}', "must be true or false"),
    ('{"passes": {"no_such_pass": true}}', "unknown pass name"),
    ('{"passes": []}', "map pass names to true/false"),
    ('{"input_shapes": {"x": [true, 3, 8, 8]}}', "input_shapes"),
    ('{"input_shapes": {"x": [1, 3.5, 8, 8]}}', "input_shapes"),
    ('{"input_shapes": {"x": [1, -3, 8, 8]}}', "input_shapes"),
    ('{"input_shapes": {"ghost": [1]}}', "which are not model inputs"),
    ('{"name": 5}', '"name" must be a non-empty string'),
    ('{"name": ""}', '"name" must be a non-empty string'),
    ('{"quantize": "yes"}', '"quantize" must be true, false or an object'),
    ('{"quantize": 1}', '"quantize" must be true, false or an object'),
    ('{"quantize": {"samples": "4"}}', '"quantize.samples" must be a positive integer, got "4"'),
    ('{"quantize": {"samples": true}}', '"quantize.samples" must be a positive integer, got true'),
    ('{"quantize": {"samples": 0}}', '"quantize.samples"'),
    ('{"quantize": {"samples": 2.5}}', '"quantize.samples"'),
    ('{"quantize": {"seed": -1}}', '"quantize.seed" must be an integer >= 0'),
    ('{"quantize": {"seed": "x"}}', '"quantize.seed"'),
    ('{"quantize": {"symmetric_activations": "false"}}',
     '"quantize.symmetric_activations" must be true or false, got "false"'),
    ('{"quantize": {"symmetric_activations": 1}}', '"quantize.symmetric_activations"'),
    ('{"quantize": {"percentile": "99"}}', '"quantize.percentile" must be a number'),
    ('{"quantize": {"percentile": true}}', '"quantize.percentile" must be a number'),
    ('{"quantize": {"percentile": 10}}', "(50, 100]"),
    ('{"quantize": {"method": 3}}', '"quantize.method"'),
    ('{"quantize": {"method": "kl"}}', '"minmax" or "percentile"'),
    ('{"quantize": {"calibration": 7}}', '"quantize.calibration" must be a string'),
    ('{"quantize": {"calibration": "/no/such.npz"}}', "is not a file"),
    ('{"quantize": {"bits": 4}}', 'unknown "quantize" option'),
    ('{"plugin": "softmax_ip", "plugin_options": {"accel": {}}}', "not among the listed"),
    ('{"plugin": "softmax_ip", "plugin_options": {"softmax_ip": {"x": 1}}}',
     "softmax_ip options are ['max_cols'], got ['x']"),
    ('{"plugin": "accel", "plugin_options": {"accel": {"n": "8"}}}', "positive int"),
    ('{"plugin": "accel", "plugin_options": {"accel": {"n": true}}}', "positive int"),
    ('{"plugin": "accel", "plugin_options": {"accel": {"n": 5}}}', "4, 8 or 16"),
    ('{"plugin": "accel", "plugin_options": {"accel": {"max_layers": 0}}}', "positive int"),
    ('{"plugin_options": []}', "map plugin names to objects"),
]


@pytest.mark.parametrize(("options", "words"), OPTION_CASES, ids=[o for o, _ in OPTION_CASES])
def test_option_values_are_typed(options: str, words: str, onnx_file: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.xmodel"
    refused(["compile", str(onnx_file), "-o", str(out), "--options", options], capsys, 2, words)
    assert not out.exists()


def test_option_files(onnx_file: Path, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    refused(["compile", str(onnx_file), "--options", f"@{tmp_path / 'none.json'}"], capsys, 2,
            "cannot read options file")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    refused(["compile", str(onnx_file), "--options", f"@{bad}"], capsys, 2, "options")


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: np.savez(p, y=np.zeros((1, 3, 8, 8), np.float32)), "no array for input 'x'"),
    (lambda p: np.savez(p, x=np.zeros((2, 3, 8, 9), np.float32)), "(samples, *(1, 3, 8, 8))"),
    (lambda p: np.savez(p, x=np.zeros((0, 3, 8, 8), np.float32)), "at least one sample"),
    (lambda p: np.savez(p, x=np.full((1, 3, 8, 8), np.nan, np.float32)), "NaN or Inf"),
    (lambda p: np.savez(p, x=np.array(["a"] * 192).reshape(1, 3, 8, 8)), "expected numbers"),
    (lambda p: np.save(p, np.zeros((1, 3, 8, 8), np.float32)), "single .npy array"),
    (lambda p: p.write_bytes(b"PK\x03\x04 broken zip"), "not a readable .npz"),
    (lambda p: np.savez(p, x=np.array([{"a": 1}] * 192, dtype=object).reshape(1, 3, 8, 8)),
     "cannot be read"),
], ids=["missing", "shape", "empty", "nan", "strings", "npy", "broken", "pickle"])
def test_calibration_files(make: object, words: str, onnx_file: Path, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    cal = tmp_path / "cal.npz"
    make(cal)  # type: ignore[operator]
    if not cal.exists():                       # np.save appends .npy
        cal = tmp_path / "cal.npz.npy"
    opts = json.dumps({"quantize": {"calibration": str(cal)}})
    refused(["compile", str(onnx_file), "-o", str(tmp_path / "c.xmodel"), "--options", opts],
            capsys, 2, "calibration", words)


# --- inspect, graph -------------------------------------------------------------------------------

def test_inspect_and_graph_inputs(tmp_path: Path, xm: Path, onnx_file: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("inspect", "graph", "run"):
        refused([cmd, str(tmp_path / "none.xmodel")], capsys, 2, "does not exist")
        refused([cmd, str(tmp_path)], capsys, 2, "is not a file")
        refused([cmd, str(onnx_file), "--no-svg"] if cmd == "graph" else [cmd, str(onnx_file)],
                capsys, 1, "not an .xmodel file")


def test_graph_outputs(tmp_path: Path, xm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dotted = tmp_path / "model.dot"        # an .xmodel named .dot: the default output
    shutil.copy(xm, dotted)
    refused(["graph", str(dotted)], capsys, 2, "is the input")
    refused(["graph", str(xm), "-o", str(xm)], capsys, 2, "is the input")
    other = tmp_path / "keep.dot"
    other.write_text("not dot at all")
    refused(["graph", str(xm), "-o", str(other)], capsys, 2, "not a DOT file", "--force")
    assert other.read_text() == "not dot at all"
    refused(["graph", str(xm), "-o", str(tmp_path / "x" / "g.dot")], capsys, 2,
            "does not exist")
    if shutil.which("dot"):
        refused(["graph", str(xm), "-o", str(tmp_path / "g.svg")], capsys, 2, "ends in .svg")
    assert run(["graph", str(xm), "-o", str(tmp_path / "g.svg"), "--no-svg"], capsys)[0] == 0


# --- run ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    (["--seed", "-1"], "argument --seed: -1 is out of range; give a seed >= 0"),
    (["--seed", "abc"], "argument --seed: 'abc' is not an integer"),
    (["--seed", "1.5"], "argument --seed"),
    (["--card-mem", "0"], "argument --card-mem: 0 is out of range; give the card memory in MiB"),
    (["--card-mem", "-4"], "argument --card-mem"),
    (["--card-mem", "100000"], "1 to 4096"),
    (["--card-mem", "64M"], "is not an integer"),
    (["--bogus"], "unrecognized arguments: --bogus"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_run_flags(args: list[str], words: str, xm: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    refused(["run", str(xm), *args], capsys, 2, words, "--help)")


def test_run_inputs_file(tmp_path: Path, xm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = np.zeros((1, 3, 8, 8), np.float32)
    cases = [
        (lambda p: np.savez(p, y=good), "holds ['y']", "missing ['x'], unknown ['y']"),
        (lambda p: np.savez(p, x=good, extra=good), "unknown ['extra']"),
        (lambda p: np.savez(p, x=good.astype(np.float64)), "'x' is float64[1, 3, 8, 8]",
         "expects float32[1, 3, 8, 8]"),
        (lambda p: np.savez(p, x=good[:, :2]), "'x' is float32[1, 2, 8, 8]"),
        (lambda p: np.save(p, good), "single .npy array"),
        (lambda p: p.write_bytes(b"garbage" * 10), "not a readable .npz"),
        (lambda p: np.savez(p, x=np.array([None], dtype=object)), "'x' cannot be read"),
    ]
    for i, (make, *words) in enumerate(cases):
        p = tmp_path / f"in{i}.npz"
        make(p)  # type: ignore[operator]
        if not p.exists():
            p.with_name(p.name + ".npy").rename(p)
        refused(["run", str(xm), "--inputs", str(p)], capsys, 2, "--inputs", *words)
    refused(["run", str(xm), "--inputs", str(tmp_path / "none.npz")], capsys, 2,
            "does not exist")


def test_run_outputs(tmp_path: Path, xm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["run", str(xm), "-o", str(tmp_path / "nodir" / "o.npz")], capsys, 2,
            "directory", "does not exist")
    refused(["run", str(xm), "-o", str(xm)], capsys, 2, "is the input")
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    refused(["run", str(xm), "--inputs", str(tmp_path / "in.npz"), "-o",
             str(tmp_path / "in.npz")], capsys, 2, "is the input")
    refused(["run", str(xm), "-o", str(tmp_path / "a.npz"), "--trace", str(tmp_path / "a.npz")],
            capsys, 2, "same file")
    keep = tmp_path / "keep.npz"
    keep.write_text("text, not an npz")
    refused(["run", str(xm), "-o", str(keep)], capsys, 2, "not a npz file")
    assert keep.read_text() == "text, not an npz"


def test_nan_inputs_on_the_cpu_give_nan(tmp_path: Path, xm: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "nan.npz", x=np.full((1, 3, 8, 8), np.nan, np.float32))
    status, out, _ = run(["run", str(xm), "--inputs", str(tmp_path / "nan.npz"), "-o",
                          str(tmp_path / "o.npz")], capsys)
    assert status == 0
    with np.load(tmp_path / "o.npz") as o:
        assert np.isnan(o["prob"]).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inputs_on_the_accelerator_are_refused(bad: float, tmp_path: Path, accel_xm: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Never finite probabilities from a NaN input: a clear error naming the tensor."""
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    x[0, 1, 2, 3] = bad
    np.savez(tmp_path / "bad.npz", x=x)
    err = refused(["run", str(accel_xm), "--inputs", str(tmp_path / "bad.npz"), "-o",
                   str(tmp_path / "o.npz")], capsys, 1, "'x' holds 1 NaN or Inf")
    assert "int8" in err
    assert not (tmp_path / "o.npz").exists()


def test_nothing_unexpected_becomes_a_traceback(xm: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A bug deep inside is one line naming it as an internal error (and a MemoryError says the
    machine lacks memory)."""
    def boom(*a: object, **k: object) -> None:
        raise KeyError("surprise")

    monkeypatch.setattr(cli, "summarize", boom)
    refused(["inspect", str(xm)], capsys, 1, "internal error KeyError", "DNNCARD_TRACEBACK",
            internal=True)

    def oom(*a: object, **k: object) -> None:
        raise MemoryError

    monkeypatch.setattr(cli, "summarize", oom)
    refused(["inspect", str(xm)], capsys, 1, "out of host memory")

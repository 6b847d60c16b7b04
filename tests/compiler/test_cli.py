"""The command line: compile, inspect, graph, run, list, and error reporting."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler import cli, xmodel
from compiler.runtime import GraphExecutor


@pytest.fixture
def model_file(conv_model: onnx.ModelProto, tmp_path: Path) -> Path:
    p = tmp_path / "net.onnx"
    onnx.save(conv_model, str(p))
    return p


@pytest.fixture
def compiled_file(model_file: Path, tmp_path: Path) -> Path:
    out = tmp_path / "net.xmodel"
    assert cli.main(["compile", str(model_file), "-o", str(out), "-q",
                     "--options", '{"plugin": "softmax_ip"}']) == 0
    return out


def test_compile_writes_model_and_report(model_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    opts = tmp_path / "opts.json"
    opts.write_text('{"plugins": ["softmax_ip"], "passes": {"fold_batchnorm": false}}')
    assert cli.main(["compile", str(model_file), "--options", f"@{opts}",
                     "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "net.xmodel" in out and "1 SOFTMAX_IP subgraph" in out and "CPU subgraph" in out
    g = xmodel.load(model_file.with_suffix(".xmodel"))
    assert "BatchNormalization" in g.get_op_types()
    rep = json.loads(report.read_text())
    assert [p["name"] for p in rep["plugins"]] == ["softmax_ip", "cpu"]
    assert [p["name"] for p in rep["passes"] if not p["enabled"]] == ["fold_batchnorm"]


def test_inspect_text_and_json(compiled_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(compiled_file)]) == 0
    text = capsys.readouterr().out
    assert "device=SOFTMAX_IP" in text and "device=CPU" in text
    assert "input   x float32(1, 3, 8, 8)" in text and "attr ip_descriptor = <16 bytes>" in text
    assert cli.main(["inspect", str(compiled_file), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["devices"] == {"CPU": 1, "SOFTMAX_IP": 1}
    assert [sub["device"] for sub in s["subgraphs"]] == ["CPU", "SOFTMAX_IP"]
    ip = s["subgraphs"][1]
    assert ip["inputs"] == [{"name": "logits", "shape": [1, 10], "dtype": "float32"}]
    assert ip["op_types"] == {"Softmax": 1}


def test_graph_writes_dot_coloured_by_device(compiled_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    dot = tmp_path / "g.dot"
    assert cli.main(["graph", str(compiled_file), "-o", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith('digraph "net"') and text.count("subgraph cluster_") == 2
    assert 'fillcolor="#fdb462"' in text and 'fillcolor="#d9d9d9"' in text
    assert '"r1" -> "c2" [label="X"];' in text
    assert '"w2"' not in text  # weights hidden unless --consts
    out = capsys.readouterr().out
    svg = dot.with_suffix(".svg")
    if shutil.which("dot"):
        assert svg.is_file() and svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    else:
        assert not svg.exists() and "no SVG" in out
    assert cli.main(["graph", str(compiled_file), "-o", str(dot), "--consts", "--no-svg"]) == 0
    assert '"w2"' in dot.read_text()


def test_graph_without_graphviz_writes_dot_only(compiled_file: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    dot = tmp_path / "h.dot"
    assert cli.main(["graph", str(compiled_file), "-o", str(dot)]) == 0
    assert dot.is_file() and not dot.with_suffix(".svg").exists()
    assert "Graphviz 'dot' is not installed" in capsys.readouterr().out


def test_run_with_npz_inputs(compiled_file: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert cli.main(["run", str(compiled_file), "--inputs", str(tmp_path / "in.npz"),
                     "-o", str(tmp_path / "out.npz")]) == 0
    want = GraphExecutor(xmodel.load(compiled_file)).run({"x": x})["prob"]
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_array_equal(got["prob"], want)
    assert "prob float32(1, 10)" in capsys.readouterr().out


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.index("infer_shapes") < out.index("fold_constants") < out.index("remove_dead_ops")
    assert "softmax_ip" in out


def test_errors_exit_with_a_message(model_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value the user gave exits 2; a model that cannot be compiled exits 1."""
    assert cli.main(["compile", str(tmp_path / "missing.onnx")]) == 2
    assert "error: model" in capsys.readouterr().err
    assert cli.main(["compile", str(model_file), "--options", "{plugin: x}"]) == 2
    assert "options are not valid JSON" in capsys.readouterr().err
    assert cli.main(["compile", str(model_file), "--options", '{"plugin": "nope_xyz"}']) == 2
    assert "no built-in plugin" in capsys.readouterr().err
    assert cli.main(["compile", str(model_file), "--options", '{"plugn": "x"}']) == 2
    assert "unknown option(s) ['plugn']" in capsys.readouterr().err
    assert cli.main(["inspect", str(model_file)]) == 1
    assert "not an .xmodel file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["frobnicate"])
    assert e.value.code == 2

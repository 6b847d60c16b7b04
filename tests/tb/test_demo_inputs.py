"""`make sim`'s bad-input handling: each case stops with a specific message and exit status 2
before any simulator is built or run (tb/demo.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tb import sim
from tb.common import simulator


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("a simulator build started despite bad input")
    monkeypatch.setattr(simulator, "build", refuse)


def _unknown_op_model(path: Path) -> Path:
    n = helper.make_node("Frobnicate", ["x"], ["y"], domain="my.domain")
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                  helper.make_opsetid("my.domain", 1)]), str(path))
    return path


def test_bad_inputs_stop_before_simulation(tmp_path: Path, no_simulation: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not ONNX, an op nobody can run, and a step larger than the card each give
    exit status 2 and a message naming the problem; nothing is simulated."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    assert sim.main(["--model", str(bad)]) == 2
    assert "is not a valid ONNX model" in capsys.readouterr().err
    assert sim.main(["--model", str(_unknown_op_model(tmp_path / "op.onnx"))]) == 2
    err = capsys.readouterr().err
    assert "Frobnicate" in err and "no kernel" in err, err
    assert sim.main(["--card-mem", "16K"]) == 2
    err = capsys.readouterr().err
    assert "CardMemoryError" in err and "16384" in err, err
    assert sim.main(["--model", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err

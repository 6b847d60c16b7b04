"""The small BERT-like encoder the repository builds (compiler.zoo.bert_tiny, fixed seeds):
deterministic, with the decomposed LayerNorm and Erf GELU patterns, and on the CPU target
within 1e-5 of onnxruntime (issue 16; the accelerator plugin's part is still to come)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from compiler import zoo
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.goldens import float_reference


def test_bert_tiny_is_deterministic_and_has_the_patterns() -> None:
    a, b = zoo.bert_tiny(), zoo.bert_tiny()
    assert a.SerializeToString() == b.SerializeToString()
    assert zoo.bert_tiny(seed=1).SerializeToString() != a.SerializeToString()
    ops = [n.op_type for n in a.graph.node]
    # per layer: 2 LayerNorms of 2 ReduceMeans each, one GELU, one Softmax; plus the embeddings'
    assert ops.count("ReduceMean") == 2 * (1 + 2 * 2)
    assert ops.count("Erf") == 2 and ops.count("Softmax") == 2
    assert ops.count("MatMul") == 2 * (4 + 2 + 2)          # Q K V O, QK^T, PV, FFN x2
    onnx.checker.check_model(a, full_check=True)
    with pytest.raises(ValueError, match="multiple of heads"):
        zoo.bert_tiny(hidden=30, heads=4)


@pytest.mark.parametrize("length", [32, 11])
def test_bert_tiny_on_the_cpu_target_matches_onnxruntime(length: int) -> None:
    """The hidden states within 1e-5 of onnxruntime's (relative to the largest), a full and a
    padded sentence (the mask's bias at work)."""
    model = zoo.bert_tiny()
    feeds = zoo.bert_inputs(length=length)
    want = float_reference(model, feeds)[zoo.BERT_OUTPUT]
    graph = compile_model(model, {"input_shapes": {k: list(v.shape) for k, v in feeds.items()}}
                          ).graph
    got = GraphExecutor(graph).run(feeds)[zoo.BERT_OUTPUT]
    assert got.shape == want.shape == (1, 32, 64)
    scale = float(np.abs(want).max())
    assert scale > 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def test_zoo_command_line_errors_are_messages(tmp_path, capsys) -> None:
    """python -m compiler.zoo: an unknown model name or an unwritable output is a usage
    error naming the problem (exit 2), not a traceback; a good name writes the model."""
    with pytest.raises(SystemExit) as e:
        zoo.main(["nosuch", str(tmp_path / "x.onnx")])
    assert e.value.code == 2 and "unknown light model 'nosuch'" in capsys.readouterr().err
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as e:
        zoo.main(["bert", str(tmp_path / "f" / "x.onnx")])
    assert e.value.code == 2 and "cannot write" in capsys.readouterr().err
    assert zoo.main(["bert", str(tmp_path / "b.onnx")]) == 0
    assert onnx.load(str(tmp_path / "b.onnx")).graph.name == "bert_tiny"

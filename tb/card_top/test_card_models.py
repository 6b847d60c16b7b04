"""Whole models on the RTL card through the real runtime: the demo CNN and the onnx package's
PyTorch-exported layers, compiled with the accelerator plugin and run by
compiler.runtime.card.CardExecutor on RtlCard; every result must be bit-identical to the same
run on the functional card (ModelCard of the same size) and agree with the reference outputs.

CARD_TB_PARAMS gives the card's MEM_SIZE; DEMO_EXPECT_EVICT says whether the demo must make the
memory manager evict (a card smaller than the demo's working set).
"""

from __future__ import annotations

import json
import os
from typing import Any

import cocotb
import numpy as np

from tb.card_top.test_card_top import TB


def _mem_size() -> int:
    return int(json.loads(os.environ.get("CARD_TB_PARAMS", "{}")).get("MEM_SIZE", 16 << 20))


def _run(drv: Any, graph: Any, feeds: dict[str, np.ndarray]) -> tuple[dict, Any]:
    from compiler.runtime.card import CardExecutor, CardSession

    ex = CardExecutor(graph, CardSession(drv))
    out = ex.run(feeds)
    stats = ex.stats
    ex.close()
    return out, stats


def _on_both(card_drv: Any, graph: Any, feeds: dict[str, np.ndarray]) -> tuple[dict, Any]:
    """Run on the RTL card and on a ModelCard of the same size; require bit-identical outputs."""
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    rtl, stats = _run(card_drv, graph, feeds)
    with PcieDriver(ModelCard(_mem_size())) as drv:
        model, mstats = _run(drv, graph, feeds)
    for k in model:
        assert np.array_equal(rtl[k], model[k]), (
            f"{k}: RTL and functional card differ (max |diff| "
            f"{np.max(np.abs(rtl[k].astype(np.float64) - model[k])):.4g})")
    assert stats.memory.get("evictions", 0) == mstats.memory.get("evictions", 0)
    return rtl, stats


def _demo(drv: Any) -> dict[str, Any]:
    from compiler.pipeline import compile_model
    from compiler.zoo import demo_cnn, demo_input
    from tests.compiler.test_card_runtime import ort_run

    model = demo_cnn()
    graph = compile_model(model, {"plugin": "accel", "quantize": {"samples": 4, "seed": 0},
                                  "plugin_options": {"accel": {"max_layers": 2}}}).graph
    feeds = {"input": demo_input(1)}
    out, stats = _on_both(drv, graph, feeds)
    (got,) = out.values()
    (want,) = ort_run(model, feeds).values()
    assert int(np.argmax(got)) == int(np.argmax(want)), "top-1 differs from onnxruntime"
    assert float(np.max(np.abs(got - want))) < 0.05, "softmax far from onnxruntime fp32"
    return {"evictions": stats.memory.get("evictions", 0),
            "accel_steps": sum(1 for s in stats.steps if s.device == "ACCEL")}


@cocotb.test(timeout_time=20, timeout_unit="sec")
async def test_demo(dut) -> None:
    """The demo CNN end to end on the RTL card equals the functional card bit for bit, agrees
    with onnxruntime, and evicts exactly when the card is smaller than its working set."""
    tb = TB(dut)
    await tb.reset()
    r = await tb.host(_demo)
    assert r["accel_steps"] == 4, r
    expect = os.environ.get("DEMO_EXPECT_EVICT") == "1"
    assert (r["evictions"] > 0) == expect, (
        f"{r['evictions']} evictions on a {_mem_size()}-byte card, expected "
        f"{'some' if expect else 'none'}")


#: The PyTorch-exported layers the issues name; all of them run on the accelerator.
LAYERS = ("Conv2d", "Conv2d_strided", "Conv2d_padding", "Conv2d_no_bias", "Linear", "ReLU",
          "MaxPool2d", "Conv2d_groups", "Conv2d_depthwise", "AvgPool2d")


def _compile_calibrated(model: Any, feeds: dict[str, np.ndarray]) -> tuple[Any, set[str]]:
    """``model`` compiled for the accelerator, calibrated on ``feeds``; the devices of its
    subgraphs that compute (not only constants and inputs)."""
    import tempfile
    from pathlib import Path

    from compiler.pipeline import compile_model

    with tempfile.TemporaryDirectory() as d:
        npz = Path(d) / "calib.npz"
        np.savez(npz, **{k: v[None] for k, v in feeds.items()})
        graph = compile_model(model, {"plugin": "accel", "quantize": {
            "calibration": str(npz), "samples": 1}}).graph
    devices = {str(c.get_attr("device")) for c in graph.root_subgraph.children
               if any(op.type not in ("const", "data") for op in c.ops)}
    return graph, devices


def _layer(drv: Any, name: str) -> str:
    from tests.compiler.test_card_runtime import PYTORCH, load_case, tolerance

    model, feeds, want = load_case(name)
    graph, devices = _compile_calibrated(model, feeds)
    assert devices == {PYTORCH[name]}, f"{name}: runs on {devices}, expected {PYTORCH[name]}"
    (got,), _ = (lambda o: (tuple(o[0].values()), o[1]))(_on_both(drv, graph, feeds))
    if PYTORCH[name] == "ACCEL":
        err = np.abs(got.astype(np.float64) - want)
        tol = tolerance(graph, next(iter(feeds.values())))
        assert (err <= tol).all(), f"{name}: error {err.max():.4g} beyond the tolerance"
    else:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    return PYTORCH[name]


@cocotb.test(timeout_time=20, timeout_unit="sec")
@cocotb.parametrize(layer=list(LAYERS))
async def test_pytorch_layer(dut, layer: str) -> None:
    """A PyTorch-exported layer of the onnx package on the RTL card: bit-identical to the
    functional card, within the quantization tolerance of the shipped output."""
    tb = TB(dut)
    await tb.reset()
    await tb.host(_layer, layer)


def _mobilenet(drv: Any) -> dict[str, Any]:
    from compiler.pipeline import compile_model
    from compiler.zoo import MOBILENET_INPUT, mobilenet_cnn, mobilenet_input
    from tests.compiler.test_card_runtime import ort_run

    model = mobilenet_cnn(size=8, width=8)
    graph = compile_model(model, {"plugin": "accel", "quantize": {"samples": 4,
                                                                   "seed": 0}}).graph
    feeds = {MOBILENET_INPUT: mobilenet_input(8)}
    out, stats = _on_both(drv, graph, feeds)
    (got,) = out.values()
    (want,) = ort_run(model, feeds).values()
    assert int(np.argmax(got)) == int(np.argmax(want)), "top-1 differs from onnxruntime"
    return {"accel_steps": sum(1 for s in stats.steps if s.device == "ACCEL"),
            "cpu": sorted({op.type for c in graph.root_subgraph.children if c.device != "ACCEL"
                           for op in c.ops} - {"const", "data"})}


@cocotb.test(timeout_time=40, timeout_unit="sec")
async def test_mobilenet(dut) -> None:
    """The MobileNet-class CNN (depthwise-separable blocks, stride 2, an inverted residual,
    global average pool, FC; 8 x 8 input, width 8) on the RTL card equals the functional
    card bit for bit: one accelerator step, only the Softmax on the CPU."""
    tb = TB(dut)
    await tb.reset()
    r = await tb.host(_mobilenet)
    assert r == {"accel_steps": 1, "cpu": ["Softmax"]}, r


#: pytorch-operator elementwise tests: lane spreading (a (2, 1) operand), a constant operand
#: in the kernel's blob, Max; and two ops of tests/compiler/test_accel_plugin.py's
#: row_and_column_model: a constant (1, 1, 1, 6) row added (broadcast along H and channels)
#: and a product with a (1, 12, 5, 1) column (broadcast along W).
ROW_COLUMN = {"bcast_row": "hb", "bcast_column": "wb"}
ELTWISE = ("add_size1_broadcast", "addconstant", "max", *ROW_COLUMN)


def _eltwise(drv: Any, name: str) -> None:

    from tests.compiler.test_accel_plugin import row_and_column_model
    from tests.compiler.test_card_runtime import _float32_case

    model, feeds = row_and_column_model([ROW_COLUMN[name]]) if name in ROW_COLUMN \
        else _float32_case(name)
    graph, devices = _compile_calibrated(model, feeds)
    assert devices == {"ACCEL"}, f"{name}: runs on {devices}"
    _on_both(drv, graph, feeds)


@cocotb.test(timeout_time=20, timeout_unit="sec")
@cocotb.parametrize(case=list(ELTWISE))
async def test_elementwise(dut, case: str) -> None:
    """A broadcasting elementwise operator on the RTL card: bit-identical to the functional
    card (which tests/compiler/test_card_runtime.py and test_accel_plugin.py check against
    qbinary)."""
    tb = TB(dut)
    await tb.reset()
    await tb.host(_eltwise, case)


def _encoder_run(drv: Any, model: Any, feeds: dict[str, np.ndarray], min_cos: float
                 ) -> dict[str, Any]:
    """An encoder compiled (calibrated on its input) and run on both cards (bit-identical); the
    output's cosine against onnxruntime fp32 at least ``min_cos``."""
    from tests.goldens import float_reference

    graph, _ = _compile_calibrated(model, feeds)
    out, stats = _on_both(drv, graph, feeds)
    (name,) = out
    got = out[name].astype(np.float64).reshape(-1)
    want = float_reference(model, feeds)[name].astype(np.float64).reshape(-1)
    cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos >= min_cos, f"{name}: cosine against onnxruntime fp32 {cos:.5f}"
    return {"accel_steps": sum(1 for s in stats.steps if s.device == "ACCEL"),
            "cycles": sum(s.cycles for s in stats.steps if s.device == "ACCEL")}


def _bert(drv: Any, layers: int) -> dict[str, Any]:
    from compiler import zoo

    return _encoder_run(drv, zoo.bert_tiny(layers=layers), zoo.bert_inputs(), 0.999)


@cocotb.test(timeout_time=60, timeout_unit="sec")
async def test_bert_tiny(dut) -> None:
    """The small BERT-like encoder (compiler.zoo.bert_tiny: BERT_LAYERS layers, default 2) on
    the RTL card: linear layers, LayerNorm, GELU and masked multi-head attention on the
    accelerator, bit-identical to the functional card, cosine >= 0.999 against fp32."""
    tb = TB(dut)
    await tb.reset()
    r = await tb.host(_bert, int(os.environ.get("BERT_LAYERS", "2")))
    assert r["accel_steps"] == 2, r
    dut._log.info("bert_tiny: %s", r)


def _encoder_layer(drv: Any, tokens: int) -> dict[str, Any]:
    from tests.compiler.helpers import encoder_model

    return _encoder_run(drv, *encoder_model(tokens=tokens, full_mask=True), 0.997)


@cocotb.test(timeout_time=60, timeout_unit="sec")
async def test_encoder_layer(dut) -> None:
    """A torch-style encoder layer at 128 tokens (tests/compiler/helpers.encoder_model: a full
    (1, 1, S, S) mask written once in the scores' layout, attention in groups of query blocks,
    per-feature activations, LayerNorm and GELU in chunks) on the RTL card: bit-identical to the
    functional card, cosine >= 0.997 against fp32."""
    tb = TB(dut)
    await tb.reset()
    r = await tb.host(_encoder_layer, 128)
    assert r["accel_steps"] == 1, r
    dut._log.info("encoder layer: %s", r)

"""The card runtime on the functional card (PcieDriver(ModelCard(...))): the onnx package's
PyTorch-exported layers within quantization tolerance, the demo CNN under memory pressure,
ResNet-50 light end to end, the errors raised before anything runs, the runner interface,
statistics, the schedule hint and the timeline."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from compiler import cli
from compiler.errors import FrontendError, RunnerError, UnsupportedOpError
from compiler.ops.op_conv import conv_nd
from compiler.pipeline import compile_model
from compiler.runtime import GraphExecutor
from compiler.runtime.card import (
    AccelConfigMismatch,
    CardExecutor,
    CardMemoryError,
    CardSession,
    accel_image,
    chrome_trace,
    write_chrome_trace,
)
from compiler.xir import CONST, Graph
from compiler.zoo import DEMO_INPUT, ONNX_DATA, demo_cnn, demo_input
from pyhost.accel.abi import AccelImage
from pyhost.driver import AccelUnavailable, PcieDriver
from pyhost.model_card import ModelCard
from pyhost.spec.accel import AccelConfig
from tests import golden_behaviour as G
from tests.compiler.helpers import make_model, tensor_info
from tests.goldens import float_reference

ACCEL = {"plugin": "accel", "quantize": {"samples": 2}}
DEFAULT = AccelConfig()


def driver(mem: int, accel: AccelConfig | None = DEFAULT, host: int = 32 << 20
           ) -> PcieDriver:
    return PcieDriver(ModelCard(mem, host_size=host, accel=accel))


def accel_images(g: Graph) -> list[AccelImage]:
    return [accel_image(c) for c in g.root_subgraph.children_topological_sort()
            if c.device == "ACCEL"]


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime fp32 (tests/goldens.py): the int8 results are compared with it at
    tolerances set by int8 rounding, far above what another CPU changes in float32."""
    return float_reference(model, feeds)


# --- the onnx package's PyTorch-exported layers -------------------------------------------------

#: Case -> where its layer must run: the accelerator, or (reported, not silently passed) the CPU.
PYTORCH = {
    "Conv2d": "ACCEL", "Conv2d_strided": "ACCEL", "Conv2d_padding": "ACCEL",
    "Conv2d_no_bias": "ACCEL", "Conv2d_dilated": "ACCEL", "Linear": "ACCEL",
    "Linear_no_bias": "ACCEL", "MaxPool2d": "ACCEL", "ReLU": "ACCEL",
    "Conv2d_groups": "ACCEL", "Conv2d_depthwise": "ACCEL",
    "AvgPool2d": "ACCEL",
    # a 60 x 80 window dilated 10 on a 1000 x 1000 image: one output row needs 591 input rows
    # of 1040 pixels, far more than the accumulator scratchpad holds (and a row stride beyond
    # the ALU's stride field): the CPU's
    "MaxPool2d_stride_padding_dilation": "CPU",
}


def load_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    d = ONNX_DATA / "pytorch-converted" / f"test_{name}"
    model = onnx.load(str(d / "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    (x_name,) = [i.name for i in model.graph.input if i.name not in inits]
    x = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / "output_0.pb")))
    return model, {x_name: x}, y


def tolerance(g: Graph, x: np.ndarray) -> np.ndarray:
    """Per output element: 1.5 LSB of the output scale (its rounding, plus one LSB for the
    integer requantization's ties) + the first-order effect of quantizing the input
    (|dx| <= s_in/2 through |W|), the weights (|dW| <= s_w/2 per channel through |x|) and the
    bias (s_in*s_w/2). Max pool: half an input LSB. A standalone Relu (requantized from the
    input's scale to its own): 1.5 output LSB (as above) + half an input LSB (|dx| <= s_in/2,
    Relu is 1-Lipschitz)."""
    (head,) = [op for op in g.ops if op.type in ("Conv", "Gemm", "MatMul", "MaxPool", "Relu",
                                                  "AveragePool")]
    out = g.outputs[0]
    s_out = out.attrs["quant"]["scale"]
    if head.type == "MaxPool":
        return np.full(out.shape, 0.5 * s_out + 1e-6)
    if head.type == "AveragePool":   # the mean of inputs each within s_in/2, then rounded
        s_in = head.input_tensors()[0].attrs["quant"]["scale"]
        return np.full(out.shape, 1.5 * s_out + 0.5 * s_in + 1e-6)
    if head.type == "Relu":
        s_in = head.input_tensors()[0].attrs["quant"]["scale"]
        return np.full(out.shape, 1.5 * s_out + 0.5 * s_in + 1e-6)
    q = head.attrs["quant"]
    s_in = float(q["input_scale"])
    s_w = np.asarray(q["weight_scale"], np.float64)
    w = np.abs(np.asarray(head.input_tensors("W" if head.type == "Conv" else "B")[0]
                          .producer.attrs["data"], np.float64))
    ax = np.abs(np.asarray(x, np.float64))
    if head.type == "Conv":
        args = ([int(v) for v in head.attrs["strides"]], [int(v) for v in head.attrs["pads"]],
                [int(v) for v in head.attrs["dilations"]], int(head.attrs.get("group", 1)))
        e_x = conv_nd(np.full_like(ax, s_in / 2), w, *args)
        e_w = conv_nd(ax, np.ones_like(w) * (s_w / 2)[:, None, None, None], *args)
        e_b = (s_in * s_w / 2)[None, :, None, None]
        e_2 = conv_nd(np.full_like(ax, s_in / 2), np.ones_like(w) * (s_w / 2)[:, None, None, None],
                      *args)
    else:
        w_kn = w.T if int(q["weight_axis"]) == 0 else w
        e_x = np.full_like(ax, s_in / 2) @ w_kn
        e_w = ax @ np.ones_like(w_kn) * (s_w / 2)[None, :]
        e_b = (s_in * s_w / 2)[None, :]
        e_2 = np.full_like(ax, s_in / 2) @ np.ones_like(w_kn) * (s_w / 2)[None, :]
    return 1.5 * s_out + e_x + e_w + e_b + e_2


@pytest.mark.parametrize("name", sorted(PYTORCH))
def test_pytorch_converted_layer(name: str, tmp_path: Path) -> None:
    """Calibrated on the test's own input, compiled with the accel plugin and run through
    CardExecutor: the layer runs where PYTORCH says and matches the shipped output within the
    quantization tolerance (CPU layers: within float rounding)."""
    model, feeds, want = load_case(name)
    npz = tmp_path / "calib.npz"
    np.savez(npz, **{k: v[None] for k, v in feeds.items()})
    g = compile_model(model, {"plugin": "accel", "quantize": {"calibration": str(npz),
                                                               "samples": 1}}).graph
    layer_devices = {str(c.device) for c in g.root_subgraph.children
                     if any(op.type not in (CONST, "data") for op in c.ops)}
    assert layer_devices == {PYTORCH[name]}, layer_devices
    session = CardSession(driver(8 << 20))
    ex = CardExecutor(g, session)
    (got,) = ex.run(feeds).values()
    assert got.shape == want.shape and got.dtype == np.float32
    if PYTORCH[name] == "CPU":
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
        assert session.driver.stats.accel_runs == 0
        return
    assert session.driver.stats.accel_runs == 1
    tol = tolerance(g, next(iter(feeds.values())))
    err = np.abs(got.astype(np.float64) - want)
    s_out = g.outputs[0].attrs["quant"]["scale"]
    assert (err <= tol).all(), (f"max error {err.max():.4g} ({err.max() / s_out:.2f} output "
                                f"LSB), tolerance there {tol.flat[err.argmax()]:.4g}")
    # and the tolerance is not vacuous: a few output LSB at most
    assert err.max() < 3 * s_out and tol.max() < 8 * s_out


#: The onnx package's PyTorch operator tests of elementwise ops: broadcasting along rows, columns
#: and singletons, a constant operand, Max and Min.
PYTORCH_ELTWISE = ("add_broadcast", "add_size1_broadcast", "add_size1_right_broadcast",
                   "add_size1_singleton_broadcast", "addconstant", "max", "min")


def _float32_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A pytorch-operator test as a float32 model with seeded normal inputs: most of these are
    float64 (which has no int8 form on the card) with inputs of uninitialized memory (values
    like 1e-316 and 1e223, see the test data), so only the graph is taken from the package."""
    model = onnx.load(str(ONNX_DATA / "pytorch-operator" / f"test_operator_{name}"
                          / "model.onnx"))
    rng = np.random.default_rng(len(name))
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for node in model.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    return model, feeds


@pytest.mark.parametrize("name", PYTORCH_ELTWISE)
def test_pytorch_operator_elementwise(name: str, tmp_path: Path) -> None:
    """On the accelerator (one run, nothing on the CPU), bit-exact with `qbinary` on the
    quantized inputs, and within the quantization tolerance of the shipped output: 1.5 output
    LSB plus half an LSB of each input (a constant operand is quantized on its own range)."""
    from compiler.plugins.accel import kernels as K
    from compiler.quantize.params import ActQuant, activation_params
    from compiler.quantize.reference import qbinary

    model, feeds = _float32_case(name)
    npz = tmp_path / "calib.npz"
    np.savez(npz, **{k: v[None] for k, v in feeds.items()})
    g = compile_model(model, {"plugin": "accel", "quantize": {"calibration": str(npz),
                                                               "samples": 1}}).graph
    layer_devices = {str(c.device) for c in g.root_subgraph.children
                     if any(op.type not in (CONST, "data") for op in c.ops)}
    assert layer_devices == {"ACCEL"}, layer_devices
    session = CardSession(driver(8 << 20))
    (got,) = CardExecutor(g, session).run(feeds).values()
    assert session.driver.stats.accel_runs == 1
    (head,) = [op for op in g.ops if op.type in ("Add", "Max", "Min")]
    qs = []
    ints = []
    for t in head.input_tensors():
        if t.producer.type == CONST:
            v = np.asarray(t.producer.attrs["data"], np.float64)
            q = activation_params(float(v.min()), float(v.max()), False)
        else:
            q = ActQuant.from_attr(t.attrs["quant"])
            v = feeds[t.name]
        qs.append(q)
        ints.append(q.quantize(v).astype(np.int8))
    # numpy's broadcasting (the opset-6 Adds' broadcast/axis attributes mean the same here;
    # onnxruntime has no float Add-6)
    vals = [np.asarray(t.producer.attrs["data"], np.float64) if t.producer.type == CONST
            else feeds[t.name].astype(np.float64) for t in head.input_tensors()]
    want = {"Add": np.add, "Max": np.maximum, "Min": np.minimum}[head.type](*vals)
    qo = ActQuant.from_attr(g.outputs[0].attrs["quant"])
    op = head.type.lower()
    p = {**K.binary_params(op, qs[0].scale, qs[1].scale, qo.scale),
         "input_zero_points": [q.zero_point for q in qs], "output_zero_point": qo.zero_point}
    assert np.array_equal(qo.quantize(got), qbinary(*ints, p)), "not bit-exact with qbinary"
    tol = 1.5 * qo.scale + 0.5 * sum(q.scale for q in qs) + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= tol).all(), f"max error {err.max():.4g} ({err.max() / qo.scale:.2f} LSB)"


def test_mobilenet_class_model_on_the_functional_card() -> None:
    """compiler.zoo's MobileNet-class CNN: every MAC on the accelerator (its depthwise,
    pointwise, strided and residual layers and the FC in one accelerator step; only Softmax on
    the CPU), top-1 equal to onnxruntime fp32 and the probabilities' cosine at least 0.999."""
    from compiler.zoo import MOBILENET_INPUT, mobilenet_cnn, mobilenet_input

    model = mobilenet_cnn()
    g = compile_model(model, {"plugin": "accel", "quantize": {"samples": 4, "seed": 0}}).graph
    (acc,) = [c for c in g.root_subgraph.children if c.device == "ACCEL"]
    macs = sum(math.prod(op.output.shape) * math.prod(op.input_tensors()[1].shape[1:])
               if op.type == "Conv" else
               math.prod(op.output.shape) * op.input_tensors()[0].shape[-1]
               for op in g.ops if op.type in ("Conv", "Gemm"))
    assert acc.get_attr("accel_stats")["macs"] == macs
    assert sum(op.type == "Conv" and op.attrs.get("group", 1) > 1 for op in acc.ops) == 4
    assert {op.type for c in g.root_subgraph.children if c is not acc
            for op in c.ops} == {"data", "Softmax"}
    feeds = {MOBILENET_INPUT: mobilenet_input()}
    with driver(16 << 20) as drv:
        (got,) = CardExecutor(g, CardSession(drv)).run(feeds).values()
    (want,) = ort_run(model, feeds).values()
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert np.argmax(a) == np.argmax(b)
    assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.999


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v2"])
def test_light_model_on_the_accelerator_within_tolerance(name: str) -> None:
    """Light models of the onnx package (random weights) compiled with the accelerator plugin
    and int8, run on the functional card: at least 95 % of the model's MACs on the
    accelerator, top-1 equal to onnxruntime fp32 and the logits' cosine at least 0.999 (the
    issue 15 criteria; `python -m bench cnn --run` checks all nine light models the same way,
    these three are the quick ones: a plain CNN, grouped and depthwise convolutions with
    channel shuffles, and Inception's concatenations)."""
    from bench.cnn_bench import COSINE_TARGET, SHARE_TARGET, one

    r = one(name, True)
    assert r["accel_share"] >= SHARE_TARGET, r["cpu_ops"]
    assert r["top1_agrees"] and r["cosine"] >= COSINE_TARGET, (r["top1_agrees"], r["cosine"])


# --- the demo CNN ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_split() -> Graph:
    """The demo in four accelerator subgraphs of two layers (so steps hand tensors over on the
    card and a small card must evict)."""
    return compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {"max_layers": 2}}}
                         ).graph


def test_demo_two_card_sizes(demo_split: Graph) -> None:
    """A card that holds everything and one that must evict give bit-identical outputs, equal
    to the single-subgraph compile's too (tensors between accelerator subgraphs stay int8 on
    the card); close to onnxruntime in fp32."""
    x = {DEMO_INPUT: demo_input()}
    sizes = [img.card_bytes(64) for img in accel_images(demo_split)]
    assert len(sizes) == 4
    small = -(-(max(sizes) + 4096) // 64) * 64
    assert small < sum(sizes)
    outs, evictions = [], []
    for mem in (1 << 20, small):
        session = CardSession(driver(mem))
        ex = CardExecutor(demo_split, session)
        for _ in range(2):
            outs.append(ex.run(x)["probs"])
            evictions.append(ex.stats.memory["evictions"])
            assert ex.stats.memory["accel_runs"] == 4
        session.manager.check()
    assert evictions[:2] == [0, 0] and min(evictions[2:]) > 0, evictions
    whole = compile_model(demo_cnn(), ACCEL).graph
    outs.append(CardExecutor(whole, CardSession(driver(1 << 20))).run(x)["probs"])
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    ref = ort_run(demo_cnn(), x)["probs"]
    assert int(outs[0].argmax()) == int(ref.argmax())
    assert np.abs(outs[0] - ref).max() < 0.03, np.abs(outs[0] - ref).max()


def test_second_run_uploads_only_the_input(demo_split: Graph) -> None:
    """Programs, constants and scratch are created once; on a card that holds them, a second
    run moves only the input up and the logits down. Statistics are consistent."""
    session = CardSession(driver(1 << 20))
    ex = CardExecutor(demo_split, session)
    x = {DEMO_INPUT: demo_input()}
    ex.run(x)
    first = ex.stats
    ex.run(x)
    st = ex.stats
    # the 16 bytes of logits are one 64-byte allocation (every tensor is beat-aligned)
    assert st.memory["bytes_h2c"] == 8192 and st.memory["bytes_c2h"] == 64
    assert first.memory["bytes_h2c"] > 8192
    accel = [s for s in st.steps if s.device == "ACCEL"]
    assert [s.device for s in st.steps] == ["CPU", "ACCEL", "ACCEL", "ACCEL", "ACCEL", "CPU"]
    for s in accel:
        assert s.counters is not None and s.cycles > 0
        assert s.mac_utilization == pytest.approx(s.macs / (64 * s.cycles))
    stats = {img.name: img.stats for img in accel_images(demo_split)}
    for s in accel:     # the accelerator did exactly the GEMM work the compiler planned
        assert s.macs == stats[s.name]["array_macs"]
    assert st.accel_macs == sum(s.macs for s in accel)
    text = st.format()
    assert all(s.name[:32] in text for s in st.steps) and "evictions" in text
    json.dumps(st.to_dict())


def test_schedule_hint_is_the_run_needs(demo_split: Graph) -> None:
    """The need calls the manager sees are exactly the schedule the executor gave it."""
    rec = io.StringIO()
    session = CardSession(driver(1 << 20), record=rec)
    ex = CardExecutor(demo_split, session)
    given = []
    orig = session.manager.set_schedule

    def spy(needs, reads=()):  # type: ignore[no-untyped-def]
        given.append(([list(n) for n in needs], list(reads)))
        orig(needs, reads=reads)

    session.manager.set_schedule = spy  # type: ignore[method-assign]
    ex.run({DEMO_INPUT: demo_input()})
    names: dict[int, str] = {}
    needs = []
    for line in rec.getvalue().splitlines():
        r = json.loads(line)
        if r["op"] == "alloc":
            names[r["t"]] = r["name"]
        elif r["op"] == "need":
            needs.append([names[t] for t in r["ts"]])
    (sched,) = given
    assert needs == sched[0]
    assert sched[1] == [n for n in sched[1] if n.endswith("/logits")]


def test_runner_interface_with_a_card(demo_split: Graph) -> None:
    """GraphExecutor with AccelRunners on a card session gives the same outputs (int8 values
    survive the host round trip exactly) but moves every intermediate through the host."""
    x = {DEMO_INPUT: demo_input()}
    a = CardSession(driver(1 << 20))
    card_ex = CardExecutor(demo_split, a)
    want = card_ex.run(x)["probs"]
    b = CardSession(driver(1 << 20))
    got = GraphExecutor(demo_split, {"card": b}).run(x)["probs"]
    np.testing.assert_array_equal(got, want)
    assert b.manager.transport.stats.bytes_c2h > a.manager.transport.stats.bytes_c2h
    with pytest.raises(RunnerError, match="give its runner a card session"):
        GraphExecutor(demo_split)


def test_timeline(demo_split: Graph, tmp_path: Path) -> None:
    """Host, DMA, accelerator and CPU events from the session's clock, as Chrome trace JSON."""
    ticks = iter(range(10**6))
    session = CardSession(driver(1 << 20), clock=lambda: float(next(ticks)))
    CardExecutor(demo_split, session).run({DEMO_INPUT: demo_input()})
    assert session.events is not None
    cats = [e.category for e in session.events]
    assert set(cats) == {"host", "dma", "accel", "cpu"} and cats.count("accel") == 4
    starts = [e.start for e in session.events if e.category == "accel"]
    assert starts == sorted(starts) and all(e.duration > 0 for e in session.events)
    dma = [e for e in session.events if e.category == "dma"]
    assert sum(e.args["bytes"] for e in dma if e.name == "H2C") == \
        session.manager.transport.stats.bytes_h2c
    trace = chrome_trace(session.events, time_scale=1.0)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(session.events) and xs[0]["ts"] == 0
    path = tmp_path / "trace.json"
    write_chrome_trace(session.events, path)
    assert json.loads(path.read_text())["traceEvents"]
    quiet = CardSession(driver(1 << 20), timeline=False)
    CardExecutor(demo_split, quiet).run({DEMO_INPUT: demo_input()})
    assert quiet.events is None


def test_cli_runs_accel_models_on_the_functional_card(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    src, out = tmp_path / "demo.onnx", tmp_path / "demo.xmodel"
    onnx.save(demo_cnn(), str(src))
    assert cli.main(["compile", str(src), "-o", str(out), "--options", json.dumps(ACCEL),
                     "-q"]) == 0
    np.savez(tmp_path / "in.npz", **{DEMO_INPUT: demo_input()})
    assert cli.main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--card-mem", "1",
                     "--trace", str(tmp_path / "t.json"), "-o", str(tmp_path / "o.npz")]) == 0
    text = capsys.readouterr().out
    assert "functional card (1 MiB, N=8)" in text and "ACCEL" in text
    assert (tmp_path / "t.json").is_file()
    want = CardExecutor(compile_model(demo_cnn(), ACCEL).graph,
                        CardSession(driver(1 << 20))).run({DEMO_INPUT: demo_input()})["probs"]
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["probs"], want)


# --- ResNet-50 ---------------------------------------------------------------------------------

def test_resnet50_end_to_end() -> None:
    """ResNet-50 light with random weights: compiled with the accel plugin, run on ModelCard;
    its logits against onnxruntime fp32 by cosine similarity and top-1; the accelerator ran
    every GEMM the compiler planned (all of the model's convolutions and the FC). The same run
    is the functional card's recorded behaviour (tests/golden_behaviour.py, part
    model/resnet50): outputs, every exact counter and the manager's traffic."""
    model, logits = G.resnet_model()
    g, feeds = G.resnet_graph_and_feeds(model)
    (img,) = accel_images(g)
    session = CardSession(driver(G.RESNET_CARD_MEM, host=G.RESNET_HOST_MEM))
    ex = CardExecutor(g, session)
    got = ex.run(feeds)
    assert G.runs_record([got], [ex.stats.to_dict()]) == G.load("model/resnet50"), \
        "ResNet-50's outputs, counters or memory traffic changed from the recorded run"
    want = ort_run(model, feeds)
    a, b = got[logits].reshape(-1), want[logits].reshape(-1)
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert cos > 0.999, cos
    assert int(a.argmax()) == int(b.argmax())
    (accel,) = [s for s in ex.stats.steps if s.device == "ACCEL"]
    assert accel.macs == img.stats["array_macs"] >= img.stats["macs"]
    model_macs = sum(math.prod(op.output.shape) * math.prod(op.input_tensors("W")[0].shape[1:])
                     for op in g.ops if op.type == "Conv") + 2048 * 1000
    assert img.stats["macs"] == model_macs
    assert accel.mac_utilization > 0.85


# --- errors before anything runs ----------------------------------------------------------------

def test_errors_before_running(tmp_path: Path) -> None:
    """Unreadable model, an op nobody can run, a step larger than the card, an accelerator of
    another configuration, a card without one: each a specific error, and nothing reached the
    card."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00 this is not a protobuf \xff" * 10)
    with pytest.raises(FrontendError, match="not a readable ONNX model"):
        compile_model(bad, ACCEL)
    weird = make_model([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
                       [tensor_info("x", [1, 4])], [tensor_info("y", [1, 4])])
    weird.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        compile_model(weird, ACCEL)
    g = compile_model(demo_cnn(), ACCEL).graph
    (img,) = accel_images(g)
    drv = driver(64 << 10)
    with pytest.raises(CardMemoryError, match=rf"step 'subgraph_c1' needs {img.card_bytes(64)} "
                                              rf"bytes .* card's {64 << 10} bytes.*max_step"):
        CardExecutor(g, CardSession(drv))
    assert drv.stats.calls == 0 and drv.stats.accel_runs == 0
    other = driver(1 << 20, accel=AccelConfig(acc_depth=2048))
    with pytest.raises(AccelConfigMismatch, match="acc_depth: compiled 4096, card 2048"):
        CardExecutor(g, CardSession(other))
    assert other.stats.calls == 0 and other.stats.accel_runs == 0
    with pytest.raises(AccelUnavailable, match="no accelerator"):
        CardSession(driver(1 << 20, accel=None))

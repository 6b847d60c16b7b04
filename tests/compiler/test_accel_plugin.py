"""The accelerator plugin: what it claims (demo CNN, ResNet-50 light, edge cases), the program
it generates (deterministic, race-free, position independent, .xmodel round trip), the memory
plan, the limits that split subgraphs, and its option errors."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from compiler import xmodel
from compiler.errors import OptionsError
from compiler.pipeline import compile_model
from compiler.plugin_api import load_plugin
from compiler.plugins.accel import AccelPlugin, lower, memplan
from compiler.plugins.accel.layers import Layer, layers_of
from compiler.runtime.card import accel_image
from compiler.xir import CONST, Graph, Subgraph
from compiler.zoo import demo_cnn, light_model
from pyhost.accel import layout, timing
from pyhost.accel.abi import MAX_IO
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tb.accel import races
from tests.compiler.helpers import make_model, tensor_info

ACCEL = {"plugin": "accel", "quantize": {"samples": 2}}


def children(g: Graph) -> list[Subgraph]:
    return g.root_subgraph.children_topological_sort()


def device_of(g: Graph) -> dict[str, str]:
    """Op name -> device of the subgraph holding it (constants left out)."""
    return {op.name: str(c.device) for c in children(g) for op in c.ops if op.type != CONST}


def accel_subgraphs(g: Graph) -> list[Subgraph]:
    return [c for c in children(g) if c.device == "ACCEL"]


@pytest.fixture(scope="module")
def demo() -> Graph:
    return compile_model(demo_cnn(), ACCEL).graph


def test_loaded_by_name_like_any_plugin() -> None:
    """The built-in name, the module path and the Vitis-style .so name all give the plugin."""
    for spec in ("accel", "compiler.plugins.accel", "libaccel.so"):
        p = load_plugin(spec)
        assert isinstance(p, AccelPlugin)
        assert (p.get_device(), p.get_runner()) == ("ACCEL",
                                                    "compiler.plugins.accel.runner:AccelRunner")


def test_demo_partition(demo: Graph) -> None:
    """Every layer of the demo but Softmax goes to one accelerator subgraph; ReLUs are fused,
    the Flatten is absorbed into the FC, the input and Softmax stay on the CPU."""
    dev = device_of(demo)
    on_accel = {"c1", "r1", "c2", "r2", "c3", "s3", "r3", "p3", "c4", "r4", "p4", "f", "logits"}
    assert {n for n, d in dev.items() if d == "ACCEL"} == on_accel
    assert dev["probs"] == "CPU" and dev["input"] == "CPU"
    (sub,) = accel_subgraphs(demo)
    layers = layers_of(sub.ops)
    assert [(ly.kind, [op.type for op in ly.ops]) for ly in layers] == [
        ("conv", ["Conv", "Relu"]), ("conv", ["Conv", "Relu"]), ("conv", ["Conv"]),
        ("add", ["Add", "Relu"]), ("maxpool", ["MaxPool"]), ("conv", ["Conv", "Relu"]),
        ("maxpool", ["MaxPool"]), ("gemm", ["Flatten", "Gemm"])]
    io = sub.get_attr("accel_io")
    assert [(d["name"], d["role"], d["slot"]) for d in io] == [("input", "in", 2),
                                                               ("logits", "out", 3)]
    assert io[0]["nbytes"] == layout.act_bytes(3, 32, 32, 8) and io[1]["nbytes"] == 16
    # the weights moved into the subgraph with their layers
    assert {op.name for op in sub.ops if op.type == CONST} == {
        "w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4", "fc_w", "fc_b"}


def test_demo_with_softmax_ip_after_accel() -> None:
    """Plugins compose: the Softmax the accelerator leaves goes to the next plugin."""
    g = compile_model(demo_cnn(), {**ACCEL, "plugin": "accel,softmax_ip"}).graph
    dev = device_of(g)
    assert dev["probs"] == "SOFTMAX_IP" and dev["logits"] == "ACCEL"


def test_demo_program(demo: Graph) -> None:
    """The program is END-terminated, race-free, uses only slots 0..3, and its statistics
    agree with the kernels' estimate; the constant blob holds each layer's blob at an aligned
    offset."""
    (sub,) = accel_subgraphs(demo)
    prog = isa.decode_program(sub.get_attr("accel_program"))
    assert prog[-1].op == isa.Opcode.END
    assert sum(i.op == isa.Opcode.END for i in prog) == 1
    races.check_races(prog)
    slots = {i.fields.get("slot", 0) for i in prog if i.op in (isa.Opcode.LOAD,
                                                              isa.Opcode.STORE)}
    assert slots == {0, 1, 2, 3}
    st = sub.get_attr("accel_stats")
    est = timing.estimate(prog)
    assert st["instructions"] == len(prog) and st["layers"] == 8
    # the layers are drained one after the other: the sum of their estimates is the program's
    assert abs(st["estimated_cycles"] - est.cycles) <= 8 * st["layers"], (st, est)
    assert st["array_macs"] == est.gemm_iterations * 64
    model_macs = (16 * 27 + 2 * 16 * 144) * 32 * 32 + 32 * 144 * 16 * 16 + 2048 * 10
    assert st["macs"] == model_macs
    for ly in st["per_layer"]:
        assert 0 <= ly["mac_utilization"] <= 1
        assert ly["macs"] <= ly["array_macs"]
    assert sub.get_attr("accel_config") == {"n": 8, "inp_depth": 8192, "wgt_depth": 1024,
                                            "acc_depth": 4096, "queue_depth": 8}
    img = accel_image(sub)
    assert img.insns == len(prog)


def test_compile_is_deterministic_and_survives_the_xmodel(demo: Graph) -> None:
    """Two compiles give the same bytes; an .xmodel round trip keeps program, constants and
    every accel attribute (and writing it again gives the same file)."""
    again = compile_model(demo_cnn(), ACCEL).graph
    assert xmodel.dumps(again) == xmodel.dumps(demo)
    back = xmodel.loads(xmodel.dumps(demo))
    (a,), (b,) = accel_subgraphs(demo), accel_subgraphs(back)
    for key in ("accel_program", "accel_consts", "accel_scratch_bytes", "accel_io",
                "accel_config", "accel_stats", "device", "runner", "plugin"):
        assert b.get_attr(key) == a.get_attr(key), key
    assert isinstance(b.get_attr("accel_program"), bytes)
    assert xmodel.dumps(back) == xmodel.dumps(demo)


def test_scratch_is_reused_by_liveness(demo: Graph) -> None:
    """Internal activations share the scratch arena: it is smaller than their sum, and no
    two tensors that are live together overlap."""
    (sub,) = accel_subgraphs(demo)
    layers = layers_of(sub.ops)
    plan = memplan.plan_step(layers, 8)
    internal = [ly.output for ly in layers if plan.refs[ly.output].slot == 1]
    total = sum(lower.tensor_bytes(t.shape, 8) for t in internal)
    assert plan.scratch_bytes == sub.get_attr("accel_scratch_bytes")
    assert 0 < plan.scratch_bytes < total
    born = {ly.output: i for i, ly in enumerate(layers)}
    last = {t: max(i for i, ly in enumerate(layers) if t in ly.inputs) for t in internal}
    for x in internal:
        for y in internal:
            if x is y or not (born[x] <= last[y] and born[y] <= last[x]):
                continue
            ax, ay = plan.refs[x].offset, plan.refs[y].offset
            nx, ny = lower.tensor_bytes(x.shape, 8), lower.tensor_bytes(y.shape, 8)
            assert ax + nx <= ay or ay + ny <= ax, f"{x.name} and {y.name} overlap"


def test_a_relocated_kernel_is_the_kernel_generated_there() -> None:
    """relocate moves a kernel generated at the placeholder places to others: the same stream
    as the kernel generated at those places, and the same cycle estimate (the code generator
    estimates the program the layers were checked with, once for the layers sharing it)."""
    from compiler.plugins.accel import kernels as K
    from tb.accel.randprog import random_conv_quant, random_gemm_quant

    rng = np.random.default_rng(11)
    cq, gq = random_conv_quant(rng, 24, 16, 3, 3), random_gemm_quant(rng, 200, 40)

    def make(inp: K.Ref, out: K.Ref, consts: K.Ref) -> list[K.Kernel]:
        return [K.conv2d((1, 16, 9, 9), cq, inp=inp, out=out, consts=consts,
                         pads=(1, 1, 1, 1)),
                K.gemm(3, gq, inp=inp, out=out, consts=consts),
                K.maxpool2d((1, 16, 9, 9), (3, 3), inp=inp, out=out, strides=(2, 2),
                            zero_point=-3)]

    where = (K.Ref(6, 4096), K.Ref(7, 1 << 20), K.Ref(0, 1 << 16))
    for placed, there in zip(make(K.Ref(2), K.Ref(3), K.Ref(0)), make(*where), strict=True):
        moved = lower.relocate(placed, [where[0]], where[1], where[2])
        assert isa.Stream.of(moved.insns) == isa.Stream.of(there.insns)
        assert moved.insns != placed.insns
        for lat in (0, timing.RTL_MEM_LATENCY):
            assert timing.estimate(moved.insns, mem_latency=lat) == \
                timing.estimate(placed.insns, mem_latency=lat)


@pytest.mark.parametrize("columns", [1, 3, 128])
def test_blocked_fc_weight_reads_the_blocked_tensor(columns: int, monkeypatch) -> None:
    """The FC weights permuted to the blocked layout give flatten(x) @ W from the packed x,
    whether they are permuted a few outputs at a time or all at once, from a (K, Nout) array
    or the transposed view of an (Nout, K) one, with and without padding channels."""
    monkeypatch.setattr(lower, "FC_PERMUTE_COLUMNS", columns)
    rng = np.random.default_rng(0)
    for n, shape in ((8, (2, 13, 3, 5)), (4, (1, 8, 2, 2)), (16, (3, 20, 1, 1)),
                     (8, (1, 16, 2, 3))):
        x = rng.integers(-128, 128, shape).astype(np.int8)
        k = math.prod(shape[1:])
        for w in (rng.integers(-127, 128, (k, 7)).astype(np.int64),
                  rng.integers(-127, 128, (7, k)).astype(np.int8).T):
            wb = lower.blocked_fc_weight(w, shape, n)
            assert wb.dtype == w.dtype and wb.flags.c_contiguous
            xb = np.frombuffer(layout.pack_act(x, n, fill=99), np.int8).reshape(shape[0], -1)
            np.testing.assert_array_equal(xb.astype(np.int64) @ wb.astype(np.int64),
                                          x.reshape(shape[0], -1).astype(np.int64) @ w)


def test_resnet50_partition() -> None:
    """ResNet-50 light: every Conv, Relu, residual Sum, the pools, the Reshape and the FC in
    one accelerator subgraph (the stem's MaxPool and the 7x7 AveragePool included), Softmax on
    the CPU; the plugin accounts for all of the model's MACs."""
    g = compile_model(light_model("resnet50"), {"plugin": "accel", "quantize": {"samples": 1}}
                      ).graph
    dev = device_of(g)
    kinds: dict[str, set[str]] = {}
    for op in g.ops:
        if op.type != CONST:
            kinds.setdefault(op.type, set()).add(dev[op.name])
    assert kinds == {"data": {"CPU"}, "Conv": {"ACCEL"}, "Relu": {"ACCEL"}, "Sum": {"ACCEL"},
                     "MaxPool": {"ACCEL"}, "AveragePool": {"ACCEL"}, "Reshape": {"ACCEL"},
                     "Gemm": {"ACCEL"}, "Softmax": {"CPU"}}
    (sub,) = accel_subgraphs(g)
    st = sub.get_attr("accel_stats")
    macs = 0
    for op in g.ops:
        if op.type == "Conv":
            macs += math.prod(op.output.shape) * math.prod(op.input_tensors("W")[0].shape[1:])
        elif op.type == "Gemm":
            macs += math.prod(op.output.shape) * op.input_tensors("A")[0].shape[1]
    assert st["macs"] == macs and st["layers"] == 53 + 16 + 3
    assert st["mac_utilization"] > 0.8, st["mac_utilization"]
    prog = sub.get_attr("accel_program")
    assert len(prog) == 16 * st["instructions"]


# --- small models for edge cases ------------------------------------------------------------------

def conv_node(name: str, x: str, w: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [name], name=name, **attrs)


def branches(k: int) -> onnx.ModelProto:
    """One input, k 1x1 convolutions each a model output: 1 + k external tensors."""
    rng = np.random.default_rng(0)
    inits = {f"w{i}": rng.standard_normal((8, 8, 1, 1)).astype(np.float32) for i in range(k)}
    nodes = [conv_node(f"y{i}", "x", f"w{i}") for i in range(k)]
    return make_model(nodes, [tensor_info("x", [1, 8, 4, 4])],
                      [tensor_info(f"y{i}", [1, 8, 4, 4]) for i in range(k)], inits)


def test_subgraphs_are_split_at_fourteen_external_tensors() -> None:
    """15 branches (16 external tensors) need two subgraphs, each within the 14 I/O slots."""
    g = compile_model(branches(15), ACCEL).graph
    subs = accel_subgraphs(g)
    assert len(subs) == 2
    assert sum(len(s.get_attr("accel_io")) for s in subs) == 17  # the input is read by both
    for s in subs:
        assert len(s.get_attr("accel_io")) <= MAX_IO
    g = compile_model(branches(13), ACCEL).graph
    assert len(accel_subgraphs(g)) == 1


def test_max_layers_and_max_step_bytes_split() -> None:
    """The limits cut the demo's run into more subgraphs without changing what is claimed."""
    full = compile_model(demo_cnn(), ACCEL).graph
    two = compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {"max_layers": 2}}}
                        ).graph
    assert [len(layers_of(s.ops)) for s in accel_subgraphs(two)] == [2, 2, 2, 2]
    assert device_of(two) == device_of(full)
    (sub,) = accel_subgraphs(full)
    whole = accel_image(sub).card_bytes(64)
    cap = whole // 2
    small = compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {
        "max_step_bytes": cap}}}).graph
    subs = accel_subgraphs(small)
    assert len(subs) > 1 and device_of(small) == device_of(full)
    for s in subs:
        assert accel_image(s).card_bytes(64) <= cap


def test_what_stays_on_the_cpu_and_why() -> None:
    """A Clip with a non-constant bound is not claimed (nor the reductions that make its bounds).
    A standalone Relu is (its own layer), and so are a grouped conv, an Add of a per-channel
    constant and an Add of a (1, 1, 1, W) row (broadcast along H and channels; nothing is
    rejected for it)."""
    rng = np.random.default_rng(1)
    inits = {"wg": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
             "w": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
             "bias": rng.standard_normal((1, 8, 1, 1)).astype(np.float32),
             "row": rng.standard_normal((1, 1, 1, 6)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "wg"], ["g"], name="g", group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["x"], ["r"], name="r"),
        helper.make_node("Add", ["r", "bias"], ["a"], name="a"),
        helper.make_node("Add", ["r", "row"], ["wb"], name="wb"),
        conv_node("c", "a", "w"),
        helper.make_node("Clip", ["c", "x_min", "g_max"], ["y"], name="y"),
        helper.make_node("ReduceMin", ["x"], ["x_min"], name="x_min", keepdims=0),
        helper.make_node("ReduceMax", ["g"], ["g_max"], name="g_max", keepdims=0),
    ]
    model = make_model(nodes, [tensor_info("x", [1, 8, 6, 6])],
                       [tensor_info("y", [1, 8, 6, 6]), tensor_info("wb", [1, 8, 6, 6])], inits)
    plugin = AccelPlugin()
    from compiler.frontend import import_onnx
    from compiler.options import QuantizeOptions
    from compiler.passes import run_pipeline
    from compiler.plugin_api import partition_graph
    from compiler.quantize import quantize_graph

    g = import_onnx(model)
    run_pipeline(g)
    quantize_graph(g, QuantizeOptions(samples=2))
    partition_graph(g, [plugin])
    dev = device_of(g)
    assert dev["c"] == dev["r"] == dev["g"] == dev["a"] == dev["wb"] == "ACCEL"
    assert {n: d for n, d in dev.items() if n not in ("c", "r", "g", "a", "wb")} == \
        dict.fromkeys(["x", "y", "x_min", "g_max"], "CPU")
    assert "wb" not in plugin.rejected, plugin.rejected


#: row_and_column_model's outputs: the op computing each and the Relu after it, if any.
ROW_COLUMN = {"hb": ("hb", None), "wb": ("wb", None), "hm": ("hm", None), "ws": ("d", "ws")}


def row_and_column_model(outputs: Sequence[str] = tuple(ROW_COLUMN)
                         ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Elementwise ops whose second operand broadcasts along H alone or W alone, and seeded
    inputs: hb = x + a (1, 1, 1, 6) constant row (H and channels: lane spreading), wb = x * z
    with z a (1, 12, 5, 1) input column (W alone), hm = max(x, c) with c a rank-3 (12, 1, 6)
    constant (H alone: numpy aligns it to (1, 12, 1, 6)), and ws = Relu(z - x) (a column
    minuend, a fused Relu); only the ops of `outputs` (the RTL card runs one at a time)."""
    rng = np.random.default_rng(5)
    inits = {"row": rng.standard_normal((1, 1, 1, 6)).astype(np.float32),
             "c": rng.standard_normal((12, 1, 6)).astype(np.float32)}
    nodes = {"hb": [helper.make_node("Add", ["x", "row"], ["hb"], name="hb")],
             "wb": [helper.make_node("Mul", ["x", "z"], ["wb"], name="wb")],
             "hm": [helper.make_node("Max", ["x", "c"], ["hm"], name="hm")],
             "ws": [helper.make_node("Sub", ["z", "x"], ["d"], name="d"),
                    helper.make_node("Relu", ["d"], ["ws"], name="ws")]}
    used = [n for o in outputs for n in nodes[o]]
    reads = {i for n in used for i in n.input}
    shapes = {"x": [1, 12, 5, 6], "z": [1, 12, 5, 1]}
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()
             if k in reads}
    model = make_model(used, [tensor_info(k, v.shape) for k, v in feeds.items()],
                       [tensor_info(o, shapes["x"]) for o in outputs],
                       {k: v for k, v in inits.items() if k in reads})
    return model, feeds


def test_h_and_w_broadcasts_run_on_the_accelerator(tmp_path: Path) -> None:
    """Operands broadcast along H alone or W alone (constants and activations, one channel and
    many, a fused Relu) are claimed and run in one accelerator step on ModelCard: bit-exact with
    `qbinary` on the quantized operands, and within the quantization tolerance of onnxruntime's
    float result."""
    from compiler.plugins.accel import kernels as K
    from compiler.quantize.params import ActQuant, activation_params
    from compiler.quantize.reference import qbinary
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard
    from tests.compiler.test_card_runtime import ort_run

    model, feeds = row_and_column_model()
    npz = tmp_path / "calib.npz"
    np.savez(npz, **{k: v[None] for k, v in feeds.items()})
    g = compile_model(model, {"plugin": "accel", "quantize": {"calibration": str(npz),
                                                               "samples": 1}}).graph
    dev = device_of(g)
    assert {n for n, d in dev.items() if d == "ACCEL"} == {"hb", "wb", "hm", "d", "ws"}, dev
    (sub,) = accel_subgraphs(g)
    assert [(ly.kind, [op.type for op in ly.ops]) for ly in layers_of(sub.ops)] == [
        ("add", ["Add"]), ("add", ["Mul"]), ("add", ["Max"]), ("add", ["Sub", "Relu"])]
    races.check_races(isa.decode_program(sub.get_attr("accel_program")))
    with PcieDriver(ModelCard(1 << 20)) as drv:
        session = CardSession(drv)
        got = CardExecutor(g, session).run(feeds)
        assert drv.stats.accel_runs == 1
    want = ort_run(model, feeds)
    for out, (name, relu) in ROW_COLUMN.items():
        head = g.get_op(name)
        qs, ints, vals = [], [], []
        for t in head.input_tensors():
            if t.producer.type == CONST:
                v = np.asarray(t.producer.attrs["data"], np.float64)
                q = activation_params(float(v.min()), float(v.max()), False)
            else:
                v = feeds[t.name].astype(np.float64)
                q = ActQuant.from_attr(t.attrs["quant"])
            qs.append(q)
            vals.append(v)
            ints.append(q.quantize(v).astype(np.int8))
        qo = ActQuant.from_attr(g.get_op(out).output.attrs["quant"])
        p = {**K.binary_params(head.type.lower(), qs[0].scale, qs[1].scale, qo.scale),
             "input_zero_points": [q.zero_point for q in qs], "output_zero_point": qo.zero_point}
        bounds = K.relu_bounds(qo.zero_point) if relu is not None else (-128, 127)
        ref = qbinary(*ints, p, bounds)
        assert ref.shape == (1, 12, 5, 6)
        assert np.array_equal(qo.quantize(got[out]), ref), f"{out}: not bit-exact with qbinary"
        a, b = np.broadcast_arrays(*vals)
        if head.type == "Mul":
            slack = 0.5 * (qs[0].scale * np.abs(b) + qs[1].scale * np.abs(a)) \
                + 0.25 * qs[0].scale * qs[1].scale
        else:
            slack = 0.5 * (qs[0].scale + qs[1].scale)
        err = np.abs(got[out].astype(np.float64) - want[out])
        assert (err <= 1.5 * qo.scale + slack + 1e-6).all(), \
            f"{out}: max error {err.max():.4g} ({err.max() / qo.scale:.2f} LSB)"
        assert (ref > bounds[0]).mean() > 0.3, f"{out}: the output is mostly clamped"


def relu_chain() -> onnx.ModelProto:
    """x -> Relu r0 -> Conv c1 -> Relu r1 -> Conv c2 -> Relu r2; r0 and c1 are model outputs
    too, so r0 and r1 cannot be fused (their input must exist), r2 can."""
    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2,
             "w2": rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3}
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"], name="r0"),
        conv_node("c1", "r0", "w1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        conv_node("c2", "r1", "w2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="r2"),
    ]
    return make_model(nodes, [tensor_info("x", [2, 8, 7, 6])],
                      [tensor_info("r0", [2, 8, 7, 6]), tensor_info("c1", [2, 8, 7, 6]),
                       tensor_info("r2", [2, 16, 7, 6])], inits)


def test_standalone_relu_is_a_layer() -> None:
    """A Relu that nothing fuses is a layer of its own (a requantization from its input's scale
    and zero point to its own, clamped at its zero point), in the same subgraph as the
    fused layers; on the functional card its int8 outputs equal that formula exactly."""
    from compiler.quantize.requant import quantize_multiplier, requantize
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    g = compile_model(relu_chain(), ACCEL).graph
    dev = device_of(g)
    assert {n for n, d in dev.items() if d == "ACCEL"} == {"r0", "c1", "r1", "c2", "r2"}
    (sub,) = accel_subgraphs(g)
    assert [(ly.kind, [op.type for op in ly.ops]) for ly in layers_of(sub.ops)] == [
        ("relu", ["Relu"]), ("conv", ["Conv"]), ("relu", ["Relu"]), ("conv", ["Conv", "Relu"])]
    races.check_races(isa.decode_program(sub.get_attr("accel_program")))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    with PcieDriver(ModelCard(1 << 20)) as drv:
        out = CardExecutor(g, CardSession(drv)).run({"x": x})

    def qp(name: str) -> tuple[float, int]:
        q = g.get_op(name).output.attrs["quant"]
        return float(q["scale"]), int(q["zero_point"])

    def to_int(name: str, v: np.ndarray) -> np.ndarray:
        s, z = qp(name)
        return np.rint(v.astype(np.float64) / s).astype(np.int64) + z

    (sx, zx), (s0, z0), (sc, zc), (sr, zr) = qp("x"), qp("r0"), qp("c1"), qp("r1")
    xq = np.clip(np.rint(x.astype(np.float64) / sx) + zx, -128, 127).astype(np.int64)
    m, s = quantize_multiplier(sx / s0)
    r0 = to_int("r0", out["r0"])
    assert np.array_equal(r0, requantize(xq - zx, m, s, z0, z0, 127)), "r0 differs"
    assert (r0 > z0).mean() > 0.3, "the Relu clamps nearly everything"
    # r1 is internal: check it through the CPU-visible c1 and the quantized c2 + r2 instead
    c1 = to_int("c1", out["c1"])
    m, s = quantize_multiplier(sc / sr)
    r1 = requantize(c1 - zc, m, s, zr, zr, 127)
    from compiler.quantize.quantizer import requant_params
    from compiler.quantize.reference import qconv

    c2 = g.get_op("c2")
    q2 = dict(c2.attrs["quant"])
    s2, z2 = qp("r2")
    q2["multiplier"], q2["shift"] = requant_params(q2["input_scale"], q2["weight_scale"], s2)
    q2["output_zero_point"] = z2
    y = np.maximum(qconv(r1.astype(np.int8), q2, (1, 1), (0, 0, 0, 0), (1, 1), 1), z2)
    assert np.array_equal(to_int("r2", out["r2"]), y), "r1 -> c2 + r2 differs"


def test_relu_is_not_claimed_alone_after_a_claimed_producer_it_fuses_into(monkeypatch) -> None:
    """If a Conv + Relu cannot be generated but the Conv alone can, the Relu stays on the CPU
    (layers_of would fuse it into the claimed Conv, whose kernel was made without it)."""
    real = lower.check_layer

    def no_fusion(layer: Layer, cfg: AccelConfig):  # type: ignore[no-untyped-def]
        return (None, "fusion disabled by the test") if layer.act is not None \
            else real(layer, cfg)

    monkeypatch.setattr(lower, "check_layer", no_fusion)
    plugin = AccelPlugin()
    from compiler.frontend import import_onnx
    from compiler.options import QuantizeOptions
    from compiler.passes import run_pipeline
    from compiler.plugin_api import partition_graph
    from compiler.quantize import quantize_graph

    g = import_onnx(relu_chain())
    run_pipeline(g)
    quantize_graph(g, QuantizeOptions(samples=2))
    partition_graph(g, [plugin])
    dev = device_of(g)
    assert dev["r0"] == dev["r1"] == dev["c2"] == "ACCEL" and dev["r2"] == "CPU", dev
    assert "could not be generated with this Relu fused" in plugin.rejected["r2"]


def test_needs_quantization_and_valid_options() -> None:
    with pytest.raises(OptionsError, match='needs a quantized graph: add "quantize"'):
        compile_model(demo_cnn(), {"plugin": "accel"})
    with pytest.raises(OptionsError, match=r"unknown \['depth'\]"):
        compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {"depth": 3}}})
    with pytest.raises(OptionsError, match="'n' must be 4, 8 or 16"):
        compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {"n": 6}}})
    with pytest.raises(OptionsError, match="positive int"):
        compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": {"max_layers": 0}}})


@pytest.mark.parametrize("cfg", [AccelConfig(n=4, inp_depth=2048, wgt_depth=256,
                                             acc_depth=1024, queue_depth=4),
                                 AccelConfig(n=16)])
def test_other_card_configurations(cfg: AccelConfig) -> None:
    """The plugin tiles for the configuration it is given (and records it)."""
    opts = {k: getattr(cfg, k) for k in ("n", "inp_depth", "wgt_depth", "acc_depth",
                                         "queue_depth")}
    g = compile_model(demo_cnn(), {**ACCEL, "plugin_options": {"accel": opts}}).graph
    (sub,) = accel_subgraphs(g)
    img = accel_image(sub)
    assert img.config == cfg
    assert all(s.n == cfg.n for s in img.io)
    assert len(img.consts) > 0 and img.insns > 0
    races.check_races(isa.decode_program(img.program), cfg.n)

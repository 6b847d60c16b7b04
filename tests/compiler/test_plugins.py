"""The plugin driver: claims, ordering, validation, constants, the CPU target, Softmax IP."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest

from compiler.errors import OptionsError, PartitionError, RunnerError
from compiler.frontend import import_onnx
from compiler.passes import run_pipeline
from compiler.pipeline import compile_model
from compiler.plugin_api import Plugin, partition_graph
from compiler.plugins.softmax_ip import DESCRIPTOR, SoftmaxIpPlugin
from compiler.runtime import GraphExecutor
from compiler.xir import Graph, Subgraph
from tests.compiler import sample_plugins as sp


def prepared(model: onnx.ModelProto) -> Graph:
    g = import_onnx(model)
    run_pipeline(g)
    return g


def owners(g: Graph) -> dict[str, str]:
    """op name -> device, for non-constant ops."""
    out = {}
    for s in g.root_subgraph.children:
        for op in s.ops:
            if op.type != "const":
                out[op.name] = s.get_attr("device")
    return out


def feeds(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {op.name: rng.standard_normal(op.output.shape).astype(np.float32) for op in g.inputs}


def run(g: Graph, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return GraphExecutor(g).run(x)


def partitioned(model: onnx.ModelProto, plugins: Sequence[Plugin]) -> Graph:
    g = prepared(model)
    partition_graph(g, plugins)
    return g


def test_plugin_claims_and_cpu_takes_the_rest(conv_model: onnx.ModelProto) -> None:
    """Conv+Relu fused where the template matches, lone Convs too; everything else on CPU."""
    plugin = sp.ConvReluPlugin()
    g = partitioned(conv_model, [plugin])
    own = owners(g)
    # ops are named after their output tensors; BN was folded into conv1, which took the
    # BN's output name n1; the residual Add sits between conv2 and relu2
    assert own["n1"] == own["r1"] == own["c2"] == "TEST_ACCEL"
    assert {own[n] for n in ("x", "a2", "r2", "p2", "f", "logits", "prob")} == {"CPU"}
    accel = [s for s in g.root_subgraph.children if s.get_attr("device") == "TEST_ACCEL"]
    assert len(accel) == 1 and accel[0].get_attr("plugin") == "test_accel"
    assert accel[0].get_attr("runner") == "cpu"
    assert accel[0].get_attr("instructions") == b"n1;r1;c2"
    # device is set after compile, not before
    assert plugin.seen_device_in_compile == [None]
    assert all(s.get_attr("device") for s in g.root_subgraph.children)


def test_weights_move_into_the_subgraph_that_reads_them(conv_model: onnx.ModelProto) -> None:
    g = partitioned(conv_model, [sp.ConvReluPlugin()])
    (accel,) = [s for s in g.root_subgraph.children if s.get_attr("device") == "TEST_ACCEL"]
    consts = {op.name for op in accel.ops if op.type == "const"}
    assert consts == {"n1/W", "n1/B", "w2", "b2"}
    assert all(t.producer.type != "const" for t in accel.input_tensors)


def test_partitioned_model_computes_what_the_cpu_computes(conv_model: onnx.ModelProto) -> None:
    cpu = prepared(conv_model)
    x = feeds(cpu)
    want = run(cpu, x)["prob"]
    g = partitioned(conv_model, [sp.ConvReluPlugin(), SoftmaxIpPlugin()])
    assert {s.get_attr("device") for s in g.root_subgraph.children} == {
        "CPU", "TEST_ACCEL", "SOFTMAX_IP"}
    np.testing.assert_allclose(run(g, x)["prob"], want, rtol=1e-6, atol=1e-7)


def test_conv_only_merge_stops_at_cpu_ops_between(conv_model: onnx.ModelProto) -> None:
    """conv1 -> r1 (CPU) -> conv2: the convs cannot share a subgraph (A -> X -> C)."""
    g = partitioned(conv_model, [sp.ConvOnlyPlugin()])
    accel = [s for s in g.root_subgraph.children if s.get_attr("device") == "TEST_ACCEL"]
    assert sorted(len([o for o in s.ops if o.type != "const"]) for s in accel) == [1, 1]
    # the CPU leftovers form as few subgraphs as legal: before, between, after
    cpu = [s for s in g.root_subgraph.children_topological_sort() if s.device == "CPU"]
    assert len(cpu) == 3


def test_plugins_see_only_what_earlier_plugins_left(conv_model: onnx.ModelProto) -> None:
    relu = sp.ReluPlugin()
    g = partitioned(conv_model, [sp.ConvReluPlugin(), relu])
    own = owners(g)
    assert own["r1"] == "TEST_ACCEL" and own["r2"] == "RELU_IP"
    assert "Conv" not in relu.saw_types and "Relu" in relu.saw_types


def test_swapping_plugin_order_changes_ownership(conv_model: onnx.ModelProto) -> None:
    """Overlapping claims (both want r1): whoever runs first gets it."""
    g = partitioned(conv_model, [sp.ReluPlugin(), sp.ConvReluPlugin()])
    own = owners(g)
    assert own["r1"] == own["r2"] == "RELU_IP"
    assert own["n1"] == own["c2"] == "TEST_ACCEL"
    relu_subs = [s for s in g.root_subgraph.children if s.device == "RELU_IP"]
    assert all(s.get_attr("lanes") == 16 for s in relu_subs) and len(relu_subs) == 2


@pytest.mark.parametrize("plugin, message", [
    (sp.ReturnsStale(), "not a child of the root"),
    (sp.ReturnsOverlapping(), "overlap"),
    (sp.ReturnsNone(), "must return a set of Subgraph"),
    (sp.ReturnsOps(), "returned a Op"),
    (sp.RaisesInPartition(), r"partition\(\) raised ValueError: boom"),
    (sp.RaisesInCompile(), r"compile\('r.*'\) raised RuntimeError"),
])
def test_broken_plugins_are_named_in_clear_errors(conv_model: onnx.ModelProto, plugin: Plugin,
                                                  message: str) -> None:
    with pytest.raises(PartitionError, match=message) as e:
        partitioned(conv_model, [plugin])
    assert plugin.get_plugin_name() in str(e.value)


def test_claiming_another_plugins_subgraph_is_an_error(conv_model: onnx.ModelProto) -> None:
    with pytest.raises(PartitionError, match="already claimed by plugin 'test_accel'"):
        partitioned(conv_model, [sp.ConvReluPlugin(), sp.ReturnsAssigned()])


def test_filter_helper_result_must_come_from_the_free_set(conv_model: onnx.ModelProto) -> None:
    g = partitioned(conv_model, [sp.FilterEverything()])
    assert owners(g)["r2"] == "RELU_IP"


def test_repartitioning_is_refused(conv_model: onnx.ModelProto) -> None:
    g = partitioned(conv_model, [])
    with pytest.raises(PartitionError, match="already partitioned"):
        partition_graph(g, [])


def test_softmax_ip_example(conv_model: onnx.ModelProto) -> None:
    """The custom-IP example: one subgraph per Softmax, descriptor attached, runner uses it."""
    r = compile_model(conv_model, {"plugin": "softmax_ip"})
    (ip,) = [s for s in r.graph.root_subgraph.children if s.device == "SOFTMAX_IP"]
    assert [op.type for op in ip.ops] == ["Softmax"]
    assert ip.get_attr("runner") == "compiler.plugins.softmax_ip:SoftmaxIpRunner"
    magic, version, _, rows, cols = DESCRIPTOR.unpack(ip.get_attr("ip_descriptor"))
    assert (magic, version, rows, cols) == (b"SMAX", 1, 1, 10)
    x = feeds(r.graph)
    want = run(prepared(conv_model), x)["prob"]
    np.testing.assert_allclose(run(r.graph, x)["prob"], want, rtol=1e-6, atol=1e-7)
    # the runner computes from the descriptor: a wrong one gives a clear error
    ip.set_attr("ip_descriptor", DESCRIPTOR.pack(b"SMAX", 1, 0, 2, 10))
    with pytest.raises(RunnerError, match="descriptor says 2 x 10"):
        run(r.graph, x)
    ip.set_attr("ip_descriptor", b"short")
    with pytest.raises(RunnerError, match="malformed ip_descriptor"):
        run(r.graph, x)


def test_plugin_options_reach_the_plugin(conv_model: onnx.ModelProto) -> None:
    r = compile_model(conv_model, {"plugin": "softmax_ip",
                                   "plugin_options": {"softmax_ip": {"max_cols": 8}}})
    assert "SOFTMAX_IP" not in {s.device for s in r.graph.root_subgraph.children}
    with pytest.raises(OptionsError, match="max_cols"):
        compile_model(conv_model, {"plugin": "softmax_ip",
                                   "plugin_options": {"softmax_ip": {"rows": 1}}})
    with pytest.raises(OptionsError, match="not among the listed plugins"):
        compile_model(conv_model, {"plugin_options": {"softmax_ip": {}}})


def test_device_subgraphs_are_leaves_of_the_root(conv_model: onnx.ModelProto) -> None:
    g = partitioned(conv_model, [sp.ConvReluPlugin()])
    root = g.root_subgraph
    subs: list[Subgraph] = root.children_topological_sort()
    assert all(s.is_leaf and s.parent is root for s in subs)
    assert sum(len(s.ops) for s in subs) == len(g)


def test_shared_weights_stay_outside_and_arrive_as_inputs() -> None:
    """Two Convs reading one weight, split by a CPU op: the weight is not absorbed into either
    device subgraph (it would have to be in both) and reaches them as an input tensor."""
    from onnx import helper

    from tests.compiler.helpers import make_model, tensor_info

    w = np.random.default_rng(0).standard_normal((3, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"]),
             helper.make_node("Sigmoid", ["c1"], ["s"]),
             helper.make_node("Conv", ["s", "w"], ["y"])]
    m = make_model(nodes, [helper.make_tensor_value_info("x", 1, [1, 3, 4, 4])],
                   [tensor_info("y", [1, 3, 4, 4])], {"w": w})
    g = partitioned(m, [sp.ConvOnlyPlugin()])
    accel = [s for s in g.root_subgraph.children_topological_sort() if s.device == "TEST_ACCEL"]
    assert len(accel) == 2
    assert all("w" in [t.name for t in s.input_tensors] for s in accel)
    assert g.root_subgraph.child_of(g.get_op("w")).device == "CPU"
    x = feeds(g)
    want = run(prepared(m), x)["y"]
    np.testing.assert_allclose(run(g, x)["y"], want, rtol=1e-6)

"""The CPU runtime: the onnx package's PyTorch-exported tests, and the runner interface."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from compiler.errors import RunnerError, UntrustedRunnerError
from compiler.ops import OPS
from compiler.pipeline import compile_model
from compiler.runtime import CpuRunner, GraphExecutor, Runner, create_runner, resolve_runner
from tests.compiler.helpers import ONNX_DATA

CASE_DIRS = sorted(p for d in ("pytorch-converted", "pytorch-operator")
                   for p in (ONNX_DATA / d).iterdir() if (p / "model.onnx").is_file())


def _load_case(d: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    model = onnx.load(str(d / "model.onnx"))
    data = d / "test_data_set_0"
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    ins = [numpy_helper.to_array(onnx.load_tensor(str(p)))
           for p in sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
    outs = [numpy_helper.to_array(onnx.load_tensor(str(p)))
            for p in sorted(data.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
    return model, dict(zip(names, ins, strict=True)), outs


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cpu_runner_matches_expected_outputs(case_dir: Path) -> None:
    """Outputs equal the expected ones shipped with onnx (PyTorch's results), within onnx's own
    backend-test tolerance; ops with a numpy kernel must be run by it."""
    model, feeds, expected = _load_case(case_dir)
    graph = compile_model(model).graph
    outs = GraphExecutor(graph).run(feeds)
    assert len(outs) == len(expected)
    for got, want in zip(outs.values(), expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    for s in graph.root_subgraph.children:
        for op_type, impl in (s.get_attr("kernels") or {}).items():
            assert impl == ("numpy" if op_type in OPS else "onnx-reference")


def test_most_pytorch_tests_need_no_fallback() -> None:
    """The numpy kernels cover the bulk of the exported ops (the rest uses onnx's reference)."""
    types: dict[str, bool] = {}
    for d in CASE_DIRS:
        g = compile_model(onnx.load(str(d / "model.onnx"))).graph
        types[d.name] = all(op.type in OPS or op.type in ("data", "const") for op in g.ops)
    assert sum(types.values()) >= 0.85 * len(types), sorted(k for k, v in types.items() if not v)


def test_runner_interface_and_input_checks(conv_model: onnx.ModelProto) -> None:
    g = compile_model(conv_model).graph
    (cpu,) = g.root_subgraph.children
    runner = create_runner(cpu)
    assert isinstance(runner, CpuRunner) and isinstance(runner, Runner)
    assert [t.name for t in runner.input_tensors] == ["x"]
    assert [t.name for t in runner.output_tensors] == ["prob"]
    x = np.zeros((1, 3, 8, 8), np.float32)
    out = runner.run({"x": x})
    assert set(out) == {"prob"} and out["prob"].shape == (1, 10)
    with pytest.raises(RunnerError, match="missing input 'x'"):
        runner.run({})
    with pytest.raises(RunnerError, match=r"is \(1, 3, 8, 9\)/float32, expected \(1, 3, 8, 8\)"):
        runner.run({"x": np.zeros((1, 3, 8, 9), np.float32)})
    with pytest.raises(RunnerError, match="float64"):
        runner.run({"x": x.astype(np.float64)})
    ex = GraphExecutor(g)
    with pytest.raises(RunnerError, match="missing \\['x'\\], unknown \\['y'\\]"):
        ex.run({"y": x})


def test_runner_names_resolve() -> None:
    assert resolve_runner("cpu") is CpuRunner
    from compiler.plugins.softmax_ip import SoftmaxIpRunner

    assert resolve_runner("compiler.plugins.softmax_ip:SoftmaxIpRunner") is SoftmaxIpRunner
    with pytest.raises(RunnerError, match="no runner named 'dpu'"):
        resolve_runner("dpu")
    with pytest.raises(UntrustedRunnerError, match="refusing to import 'no_such_mod'"):
        resolve_runner("no_such_mod:Runner")
    with pytest.raises(RunnerError, match="cannot import 'no_such_mod'"):
        resolve_runner("no_such_mod:Runner", trust_runners=True)
    with pytest.raises(RunnerError, match="has no callable 'Nope'"):
        resolve_runner("compiler.runtime:Nope", trust_runners=True)


def test_builtin_plugins_runners_are_on_the_allow_list() -> None:
    from compiler.plugin_api.loader import BUILTIN as PLUGINS
    from compiler.plugin_api.loader import load_plugin
    from compiler.runtime.loader import TRUSTED, check_runner_name

    for name in PLUGINS:
        runner = load_plugin(name).get_runner()
        assert runner in TRUSTED or runner == "cpu", runner
        assert check_runner_name(runner) == runner


def test_unpartitioned_graph_runs_as_one_cpu_subgraph(conv_model: onnx.ModelProto) -> None:
    from compiler.frontend import import_onnx
    from compiler.passes import run_pipeline

    g = import_onnx(conv_model)
    run_pipeline(g)
    seen = []
    runner = CpuRunner(g.root_subgraph, observer=lambda t, v: seen.append(t.name))
    runner.run({"x": np.ones((1, 3, 8, 8), np.float32)})
    assert seen[0] == "x" and seen[-1] == "prob" and "r1" in seen
    assert runner.implementations["c2"] == "numpy"


def test_a_subgraph_without_runner_attribute_is_refused(conv_model: onnx.ModelProto) -> None:
    g = compile_model(conv_model).graph
    (cpu,) = g.root_subgraph.children
    del cpu.attrs["runner"]
    with pytest.raises(RunnerError, match="has no runner attribute"):
        GraphExecutor(g)

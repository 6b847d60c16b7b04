"""Hostile models for the compiler: shapes that explode or overflow, constants that would fill a
disk, names that would break the DOT file or the terminal, plugins that return the wrong
types."""

from __future__ import annotations

import json
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from compiler import cli, xmodel
from compiler.errors import (
    CompilerError,
    PartitionError,
    PassError,
    ShapeInferenceError,
    XmodelError,
)
from compiler.passes import fold_constants
from compiler.pipeline import compile_model
from compiler.plugin_api import Plugin, partition_graph
from compiler.plugin_api.helpers import filter_by_type
from compiler.summary import format_summary, printable, summarize, to_dot
from compiler.xir import Graph, Subgraph
from tests.compiler.helpers import conv_net, make_model, tensor_info


def const_of_shape(shape: list[int], dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """A model whose only output is ConstantOfShape(shape): a few bytes of ONNX."""
    node = helper.make_node("ConstantOfShape", ["s"], ["big"],
                            value=helper.make_tensor("v", dtype, [1], [1]))
    return make_model([node], [], [helper.make_tensor_value_info("big", dtype, None)],
                      {"s": np.array(shape, np.int64)})


# --- size caps ------------------------------------------------------------------------------------

def test_a_tiny_model_cannot_fold_into_a_gigabyte(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """1 GiB of float32 from ConstantOfShape: refused before it is computed, naming the op;
    no file is written."""
    m = const_of_shape([16384, 16384])
    path = tmp_path / "tiny.onnx"
    onnx.save(m, str(path))
    assert path.stat().st_size < 200
    with pytest.raises(PassError, match=r"folding op 'big' \(ConstantOfShape.*1\.0 GiB.*"
                                        r"limit of 512\.0 MiB"):
        compile_model(m)
    out = tmp_path / "tiny.xmodel"
    assert cli.main(["compile", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "op 'big' (ConstantOfShape" in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(("shape", "words"), [
    ([1 << 34], "64.0 GiB, above the compiler's limit of 16.0 GiB"),
    ([1 << 20, 1 << 20], "above the compiler's limit"),
    ([1 << 62, 1 << 62, 4], "overflows int64"),
    ([-1, 4], "invalid dimension"),
])
def test_shape_inference_refuses_huge_or_overflowing_shapes(shape: list[int],
                                                            words: str) -> None:
    with pytest.raises((ShapeInferenceError, PassError)) as e:
        compile_model(const_of_shape(shape))
    assert "op 'big' (ConstantOfShape" in str(e.value) and words in str(e.value), str(e.value)


def test_expand_and_declared_inputs_are_capped() -> None:
    nodes = [helper.make_node("Expand", ["x", "s"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [1])], [tensor_info("y", [1 << 40])],
                   {"s": np.array([1 << 40], np.int64)})
    with pytest.raises(ShapeInferenceError, match="op 'y' \\(Expand.*above the compiler's limit"):
        compile_model(m)
    m = make_model([helper.make_node("Relu", ["x"], ["y"])],
                   [tensor_info("x", [1, 3, 100000, 100000])], [tensor_info("y", [1])])
    with pytest.raises(ShapeInferenceError, match="op 'x' \\(data\\).*above the compiler's limit"):
        compile_model(m)


def test_the_total_of_folded_constants_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many constants each under the per-constant cap still cannot exceed the total."""
    monkeypatch.setattr(fold_constants, "MAX_FOLDED_BYTES", 3000)
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"c{i}"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
             for i in range(4)]
    nodes.append(helper.make_node("Sum", [f"c{i}" for i in range(4)], ["y"]))
    m = make_model(nodes, [], [tensor_info("y", [256])], {"s": np.array([256], np.int64)})
    with pytest.raises(PassError, match="folded constants to .*above the limit of 2.9 KiB"):
        compile_model(m)
    monkeypatch.setattr(fold_constants, "MAX_FOLDED_BYTES", 1 << 20)
    assert compile_model(m).graph.get_op("y").type == "const"


# --- names in text outputs ------------------------------------------------------------------------

NASTY = ['a"b', "new\nline", "esc\x1b[2J", "back\\slash\\l", "}; digraph x {", "rlo\u202eevil",
         "nul\x00", "tab\tx", "surrogate\ud800"]


def nasty_graph(names: list[str] = NASTY) -> Graph:
    g = Graph('graph "name"\n')
    x = g.create_data(names[0], (2,))
    prev = x
    for name in names[1:]:
        prev = g.create_op(name, "Relu", {"X": prev}, shape=(2,))
    g.set_outputs([prev])
    root = g.root_subgraph
    root.create_children()
    for c in root.children:
        c.set_attr("device", 'DEV"\n')
        c.set_attr("runner", "cpu")
    return g


def _dot_is_well_formed(text: str) -> None:
    """Every string closes, braces balance outside strings, no raw control character."""
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u202e\ud800-\udfff]", text), "raw control"
    in_str = esc = False
    depth = 0
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            elif ch == "\n":
                raise AssertionError("a string spans a line")
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            assert depth >= 0
    assert not in_str and depth == 0


def test_names_are_escaped_in_dot_and_text() -> None:
    g = nasty_graph()
    dot = to_dot(g)
    _dot_is_well_formed(dot)
    dot.encode("utf-8")                                   # writable as a file
    assert '"a\\"b"' in dot and "esc\\\\x1b[2J" in dot and "back\\\\slash\\\\l" in dot
    text = format_summary(summarize(g))
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u202e\ud800-\udfff]", text)
    text.encode("utf-8")
    assert "esc\\x1b[2J" in text and "rlo\\u202eevil" in text and "new\\x0aline" in text
    assert printable("plain name") == "plain name"


def test_names_survive_the_xmodel_and_the_cli(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Every name but the lone surrogate (not Unicode: refused by save, and by load when a
    file spells it as an escape) round-trips."""
    p = tmp_path / "nasty.xmodel"
    with pytest.raises(XmodelError, match="lone surrogate"):
        xmodel.save(nasty_graph(), p)
    assert not p.exists()
    g = nasty_graph([*NASTY[:-1], "surrogate"])
    xmodel.save(g, p)
    back = xmodel.load(p)
    assert [op.name for op in back.topological_sort()] == [*NASTY[:-1], "surrogate"]
    text = json.dumps({"format": "dnncard-xmodel", "version": 1, "graph": {"name": "\ud800"}})
    with zipfile.ZipFile(tmp_path / "s.xmodel", "w") as z:
        z.writestr("xmodel.json", text)
    with pytest.raises(XmodelError, match="lone surrogate"):
        xmodel.load(tmp_path / "s.xmodel")
    assert cli.main(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert cli.main(["graph", str(p), "-o", str(tmp_path / "n.dot"), "--no-svg"]) == 0
    _dot_is_well_formed((tmp_path / "n.dot").read_text())


# --- plugins that return the wrong types ----------------------------------------------------------

class BadPlugin(Plugin):
    def __init__(self, name: object = "bad", device: object = "DEV", runner: object = "cpu"
                 ) -> None:
        self._name, self._device, self._runner = name, device, runner

    def get_plugin_name(self) -> str:
        return self._name  # type: ignore[return-value]

    def get_device(self) -> str:
        return self._device  # type: ignore[return-value]

    def get_runner(self) -> str:
        return self._runner  # type: ignore[return-value]

    def partition(self, graph: Graph) -> set[Subgraph]:
        return filter_by_type(graph, "Relu")

    def compile(self, subgraph: Subgraph) -> None:
        pass


@pytest.mark.parametrize(("kw", "words"), [
    ({"device": 7}, "get_device() must return a non-empty printable str, got int 7"),
    ({"device": ""}, "get_device()"),
    ({"device": None}, "get_device()"),
    ({"runner": b"cpu"}, "get_runner() must return a non-empty printable str, got bytes"),
    ({"runner": ["cpu"]}, "get_runner()"),
    ({"runner": "cpu\n"}, "get_runner()"),
    ({"name": 3}, "get_plugin_name()"),
])
def test_plugins_returning_non_strings_are_refused_at_compile_time(kw: dict[str, object],
                                                                   words: str) -> None:
    from compiler.frontend import import_onnx
    from compiler.passes import run_pipeline

    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2])],
                   [tensor_info("y", [2])])
    g = import_onnx(m)
    run_pipeline(g)
    with pytest.raises(PartitionError) as e:
        partition_graph(g, [BadPlugin(**kw)])  # type: ignore[arg-type]
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("var", [-0.5, -2e-5, float("nan")])
def test_a_batch_norm_variance_below_minus_epsilon_is_refused(var: float) -> None:
    """BatchNormalization divides by sqrt(var + epsilon): a corrupt running variance (negative
    beyond epsilon, or NaN) is a clear error naming the channel, not a NaN folded into the
    weights (a byte mutation found it: numpy's 'invalid value in sqrt' warning and a NaN
    model); a variance of zero is valid."""
    m = conv_net()
    init = next(i for i in m.graph.initializer if i.name == "bn_v")
    v = onnx.numpy_helper.to_array(init).copy()
    v[3] = var
    init.CopyFrom(onnx.numpy_helper.from_array(v, "bn_v"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)       # refused before any sqrt
        with pytest.raises(ShapeInferenceError, match=r"bn1.*channel 3 has variance"):
            compile_model(m, {"plugin": "softmax_ip"})
    v[3] = 0.0
    init.CopyFrom(onnx.numpy_helper.from_array(v, "bn_v"))
    compile_model(m, {"plugin": "softmax_ip"})


# --- random ONNX bytes ----------------------------------------------------------------------------

_ONNX = conv_net().SerializeToString()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
                min_size=1, max_size=5))
def test_random_onnx_byte_mutations_raise_only_compiler_errors(
        edits: list[tuple[float, int]]) -> None:
    """Whatever the bytes, the compiler says what is wrong with them in its own error."""
    b = bytearray(_ONNX)
    for where, value in edits:
        b[int(where * len(b))] = value
    try:
        model = onnx.load_from_string(bytes(b))
    except Exception:  # noqa: BLE001 - not even protobuf: load_model reports that (tested)
        return
    try:
        compile_model(model, {"plugin": "softmax_ip"})
    except CompilerError:
        pass

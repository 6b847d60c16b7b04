"""Compile options through the Python API: each malformed value raises the exact error class
(the CLI cases in test_hostile_cli.py check the same values end to end), and a value of the
wrong JSON type is never taken for another (a string is not a boolean, true is not a count, a
bool is not a dimension)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compiler.errors import (
    CalibrationFileError,
    InputShapesError,
    OptionsError,
    PluginLoadError,
    QuantizationError,
)
from compiler.options import CompileOptions, QuantizeOptions
from compiler.pipeline import compile_model
from tests.compiler.helpers import conv_net

PARSE_CASES: list[tuple[Any, type[Exception], str]] = [
    ({"quantize": {"samples": "4"}}, OptionsError, '"quantize.samples"'),
    ({"quantize": {"samples": True}}, OptionsError, "got true"),
    ({"quantize": {"samples": False}}, OptionsError, "got false"),
    ({"quantize": {"seed": True}}, OptionsError, '"quantize.seed"'),
    ({"quantize": {"seed": 1.0}}, OptionsError, '"quantize.seed"'),
    ({"quantize": {"symmetric_activations": "true"}}, OptionsError, 'got "true"'),
    ({"quantize": {"symmetric_activations": 0}}, OptionsError, "got 0"),
    ({"quantize": {"percentile": None}}, OptionsError, "got null"),
    ({"quantize": {"method": None}}, OptionsError, '"quantize.method"'),
    ({"quantize": {"calibration": None}}, OptionsError, '"quantize.calibration"'),
    ({"quantize": []}, OptionsError, '"quantize" must be true, false or an object'),
    ({"input_shapes": {"x": [True]}}, OptionsError, "input_shapes"),
    ({"input_shapes": {"x": "1,3"}}, OptionsError, "input_shapes"),
    ({"input_shapes": []}, OptionsError, "input_shapes"),
    ({"passes": {"fold_constants": 1}}, OptionsError, "true or false"),
    ({"plugin": ""}, OptionsError, "names no plugin"),
    ({"plugins": [" "]}, OptionsError, "names no plugin"),
    ({"plugin": 5}, OptionsError, "comma-separated string"),
    ({"name": ["a"]}, OptionsError, '"name"'),
    ("not json", OptionsError, "not valid JSON"),
    ("[]", OptionsError, "must be a JSON object"),
    (7, OptionsError, "must be a JSON object"),
]


@pytest.mark.parametrize(("options", "exc", "words"), PARSE_CASES,
                         ids=[repr(c[0])[:60] for c in PARSE_CASES])
def test_parse_refuses(options: Any, exc: type[Exception], words: str) -> None:
    with pytest.raises(exc) as e:
        CompileOptions.parse(options)
    assert type(e.value) is exc and words in str(e.value), str(e.value)


def test_good_values_keep_their_types() -> None:
    q = QuantizeOptions.from_value({"samples": 2, "seed": 0, "percentile": 99,
                                    "symmetric_activations": True, "method": "percentile"})
    assert q is not None and (q.samples, q.percentile, q.symmetric_activations) == (2, 99, True)
    opts = CompileOptions.parse('{"plugin": "softmax_ip, accel", "input_shapes": {"x": [1, 3]}}')
    assert opts.plugins == ("softmax_ip", "accel") and opts.input_shapes == {"x": (1, 3)}


@pytest.mark.parametrize(("options", "exc", "words"), [
    ({"plugin": "nope_xyz"}, PluginLoadError, "no built-in plugin"),
    ({"plugin": "/no/such/plugin.py"}, PluginLoadError, "does not exist"),
    ({"plugin": "compiler.plugins.accel:nothing"}, PluginLoadError, "has no nothing()"),
    ({"plugin": "json:dumps"}, PluginLoadError, "its factory raised"),
    ({"input_shapes": {"ghost": [1]}}, InputShapesError, "not model inputs"),
])
def test_compile_refuses(options: dict[str, Any], exc: type[Exception], words: str) -> None:
    with pytest.raises(exc) as e:
        compile_model(conv_net(), options)
    assert type(e.value) is exc and words in str(e.value), str(e.value)


def test_calibration_file_errors_are_option_errors(tmp_path: Path) -> None:
    """Both an OptionsError (the option names a bad file: exit 2) and a QuantizationError (what
    it was before)."""
    p = tmp_path / "cal.npz"
    np.savez(p, x=np.full((1, 3, 8, 8), np.inf, np.float32))
    with pytest.raises(CalibrationFileError, match="NaN or Inf") as e:
        compile_model(conv_net(), {"quantize": {"calibration": str(p)}})
    assert isinstance(e.value, OptionsError) and isinstance(e.value, QuantizationError)


def test_a_model_that_overflows_on_the_samples_has_no_scale() -> None:
    """Calibration that sees Inf in an activation refuses instead of writing an Inf scale."""
    from onnx import helper

    from tests.compiler.helpers import make_model, tensor_info

    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    m = make_model(nodes, [tensor_info("x", [4])], [tensor_info("y", [4])])
    p_samples = {"quantize": {"samples": 1}}
    compile_model(m, p_samples)                    # random normals: finite
    big = make_model([helper.make_node("Mul", ["x", "k"], ["e"]),
                      helper.make_node("Exp", ["e"], ["y"])], [tensor_info("x", [4])],
                     [tensor_info("y", [4])], {"k": np.array(1e4, np.float32)})
    with pytest.raises(QuantizationError, match="not finite"):
        compile_model(big, p_samples)

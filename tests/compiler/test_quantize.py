"""int8 quantization: integer requantization, per-channel weights, calibration, and integer
kernels that match the float reference within 1 LSB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from compiler.errors import OptionsError, QuantizationError
from compiler.ops._common_matmul import widening_matmul
from compiler.ops.op_conv import conv_nd
from compiler.pipeline import compile_model
from compiler.quantize import (
    ActQuant,
    activation_params,
    qadd,
    qconv,
    qgemm,
    quantize_multiplier,
    quantize_multipliers,
    requantize,
    requantize_reference,
    tensor_quant,
    weight_params,
)
from compiler.xir import Graph
from tests.compiler.helpers import make_model, tensor_info


# ---- requantization ----------------------------------------------------------------------------
@pytest.mark.parametrize("m, mult, shift", [
    (0.5, 2**30, 31), (1.0, 2**30, 30), (0.75, 3 * 2**29, 31), (2.0**-20, 2**30, 50),
    (1 - 2.0**-40, 2**30, 30),  # the fraction rounds up to 1.0: renormalized
])
def test_quantize_multiplier_known_values(m: float, mult: int, shift: int) -> None:
    assert quantize_multiplier(m) == (mult, shift)


@given(st.floats(min_value=2.0**-31, max_value=2.0**30, allow_nan=False))
def test_quantize_multiplier_is_a_q31_fraction(m: float) -> None:
    mult, shift = quantize_multiplier(m)
    assert 2**30 <= mult < 2**31 and 0 <= shift <= 62
    assert abs(mult * 2.0**-shift - m) <= m * 2.0**-31


def test_quantize_multiplier_errors_and_underflow() -> None:
    for bad in (0.0, -0.1, float("inf"), float("nan")):
        with pytest.raises(QuantizationError, match="must be finite and > 0"):
            quantize_multiplier(bad)
    with pytest.raises(QuantizationError, match=">= 2\\*\\*31"):
        quantize_multiplier(2.0**31)
    assert quantize_multiplier(2.0**-40) == (0, 0)  # maps every int32 accumulator to 0


@settings(max_examples=400)
@given(st.integers(-(2**31) + 1, 2**31 - 1), st.floats(min_value=1e-9, max_value=0.999),
       st.integers(-128, 127))
def test_requantize_within_one_lsb_of_float(acc: int, m: float, zp: int) -> None:
    mult, shift = quantize_multiplier(m)
    got = int(requantize(np.array([acc], np.int32), mult, shift, zp)[0])
    want = int(requantize_reference(np.array([acc]), m, zp)[0])
    assert abs(got - want) <= 1


def test_requantize_is_exact_away_from_ties() -> None:
    """Only exact .5 ties may differ (half up vs half even): a mismatch rate near zero."""
    rng = np.random.default_rng(0)
    acc = rng.integers(-(2**20), 2**20, 100_000).astype(np.int32)
    m = rng.uniform(1e-5, 2e-4, 100_000)
    mult, shift = quantize_multipliers(m)
    got = requantize(acc, mult, shift, 3).astype(np.int64)
    want = requantize_reference(acc, m, 3)
    assert np.abs(got - want).max() <= 1
    assert np.count_nonzero(got != want) <= 10
    ties = np.array([-5, -3, -1, 1, 3, 5], np.int32)  # acc * 0.5 = k + 0.5
    np.testing.assert_array_equal(requantize(ties, 2**30, 31), [-2, -1, 0, 1, 2, 3])


def test_requantize_refuses_float_and_out_of_range_accumulators() -> None:
    with pytest.raises(QuantizationError, match="integer accumulators"):
        requantize(np.array([1.5]), 2**30, 31)
    with pytest.raises(QuantizationError, match="int32 range"):
        requantize(np.array([2**33], np.int64), 2**30, 31)


# ---- parameters --------------------------------------------------------------------------------
def test_activation_params_represent_zero_exactly() -> None:
    for lo, hi in [(-1.0, 3.0), (0.2, 5.0), (-7.0, -1.0), (0.0, 0.0)]:
        for sym in (False, True):
            p = activation_params(lo, hi, sym)
            assert p.dequantize(p.quantize(np.zeros(1)))[0] == 0.0
            assert -128 <= p.zero_point <= 127
            if sym:
                assert p.zero_point == 0
    p = activation_params(0.0, 2.55, False)
    assert p.zero_point == -128 and p.scale == pytest.approx(0.01)
    q = p.quantize(np.array([0.0, 2.55, 3.0, -1.0]))
    np.testing.assert_array_equal(q, [-128, 127, 127, -128])


def test_weight_params_per_channel() -> None:
    w = np.array([[[[1.0, -2.0]]], [[[0.5, 0.25]]], [[[0.0, 0.0]]]], np.float32)
    q, s = weight_params(w, 0)
    np.testing.assert_allclose(s, [2 / 127, 0.5 / 127, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(q.reshape(3, 2), [[64, -127], [127, 64], [0, 0]])
    q1, s1 = weight_params(np.array([[1.0, 4.0], [-2.0, 0.5]], np.float32), 1)
    np.testing.assert_array_equal(q1, [[64, 127], [-127, 16]])
    assert q1.dtype == np.int8 and s1.shape == (2,)


# ---- integer kernels against the float reference -----------------------------------------------
def _quantized_layer(tmp_path: Path, nodes: list[onnx.NodeProto], x: np.ndarray,
                     out_shape: list[int], inits: dict[str, np.ndarray]) -> Graph:
    """Compile a one-layer model, calibrated on exactly ``x``."""
    m = make_model(nodes, [tensor_info("x", list(x.shape))], [tensor_info("y", out_shape)],
                   inits)
    np.savez(tmp_path / "calib.npz", x=x[None])
    r = compile_model(m, {"quantize": {"calibration": str(tmp_path / "calib.npz"),
                                       "samples": 1}})
    return r.graph


def _float_reference(acc_float: np.ndarray, out: ActQuant) -> np.ndarray:
    return out.quantize(acc_float).astype(np.int64)


@pytest.mark.parametrize("attrs, w_shape, positive_input", [
    ({"pads": [1, 1, 1, 1]}, (6, 4, 3, 3), False),
    ({"pads": [2, 0, 1, 1], "strides": [2, 1]}, (5, 4, 3, 2), True),
    ({"group": 4, "pads": [1, 1, 1, 1]}, (8, 1, 3, 3), True),
    ({"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}, (6, 2, 3, 3), False),
])
def test_qconv_within_one_lsb(tmp_path: Path, attrs: dict[str, Any], w_shape: tuple[int, ...],
                              positive_input: bool) -> None:
    rng = np.random.default_rng(sum(w_shape))
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    if positive_input:  # post-ReLU data: zero point -128, so padding must use it
        x = np.abs(x)
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)]
    g = _quantized_layer(tmp_path, nodes, x, [], {"w": w, "b": b})
    conv = g.get_op("y")
    q = conv.attrs["quant"]
    qi, qo = tensor_quant(g.get_tensor("x")), tensor_quant(g.get_tensor("y"))
    assert qi is not None and qo is not None
    assert (qi.zero_point == -128) == positive_input
    a = conv.attrs
    x_q = qi.quantize(x)
    got = qconv(x_q, q, a["strides"], a["pads"], a["dilations"], a["group"]).astype(np.int64)
    # float reference on the same integers: dequantized input, weights and bias
    s_w = q["weight_scale"].astype(np.float64)
    w_deq = q["weight"].astype(np.float64) * s_w.reshape(-1, 1, 1, 1)
    acc = conv_nd(qi.dequantize(x_q).astype(np.float64), w_deq, a["strides"], a["pads"],
                  a["dilations"], a["group"])
    acc += (q["bias"] * qi.scale * s_w).reshape(1, -1, 1, 1)
    want = _float_reference(acc, qo)
    assert np.abs(got - want).max() <= 1
    assert np.mean(got == want) > 0.99
    # and the int8 result is close to the original float layer (quantization error only)
    y = conv_nd(x.astype(np.float64), w.astype(np.float64), a["strides"], a["pads"],
                a["dilations"], a["group"]) + b.reshape(1, -1, 1, 1)
    assert np.abs(qo.dequantize(got.astype(np.int8)) - y).max() <= 4 * qo.scale


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_qgemm_within_one_lsb(tmp_path: Path, op: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    if op == "Gemm":
        w = rng.standard_normal((10, 16)).astype(np.float32) * 0.2
        nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5)]
        inits = {"w": w, "c": rng.standard_normal(10).astype(np.float32)}
        w_kn = w.T * 0.5
    else:
        w = rng.standard_normal((16, 10)).astype(np.float32) * 0.2
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        inits = {"w": w}
        w_kn = w
    g = _quantized_layer(tmp_path, nodes, x, [3, 10], inits)
    q = g.get_op("y").attrs["quant"]
    assert q["weight_axis"] == (0 if op == "Gemm" else 1)
    qi, qo = tensor_quant(g.get_tensor("x")), tensor_quant(g.get_tensor("y"))
    assert qi is not None and qo is not None
    x_q = qi.quantize(x)
    got = qgemm(x_q, q).astype(np.int64)
    wq = q["weight"].astype(np.float64)
    w_deq = (wq * q["weight_scale"].reshape(-1, 1)).T if op == "Gemm" else \
        wq * q["weight_scale"].reshape(1, -1)
    acc = qi.dequantize(x_q).astype(np.float64) @ w_deq + q["bias"] * qi.scale * \
        q["weight_scale"].astype(np.float64)
    assert np.abs(got - _float_reference(acc, qo)).max() <= 1
    y = x.astype(np.float64) @ w_kn + inits.get("c", np.zeros(10))
    assert np.abs(qo.dequantize(got.astype(np.int8)) - y).max() <= 4 * qo.scale


def test_qadd_within_one_lsb(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["x", "k"], ["s"]),
             helper.make_node("Add", ["r", "s"], ["y"])]
    g = _quantized_layer(tmp_path, nodes, x, [1, 4, 5, 5], {"k": np.array(3.0, np.float32)})
    q = g.get_op("y").attrs["quant"]
    qr, qs, qo = (tensor_quant(g.get_tensor(n)) for n in "rsy")
    assert qr is not None and qs is not None and qo is not None
    assert qr.scale != qs.scale
    r_q, s_q = qr.quantize(np.maximum(x, 0)), qs.quantize(3 * x)
    got = qadd([r_q, s_q], q).astype(np.int64)
    want = _float_reference(qr.dequantize(r_q).astype(np.float64)
                            + qs.dequantize(s_q).astype(np.float64), qo)
    assert np.abs(got - want).max() <= 1


# ---- the quantizer on a whole graph ------------------------------------------------------------
def test_quantize_graph_annotates_the_accelerator_ops(conv_model: onnx.ModelProto) -> None:
    r = compile_model(conv_model, {"quantize": {"samples": 3, "seed": 1}})
    g = r.graph
    assert r.report["quantize"]["ops"] == {"Add": 1, "Conv": 2, "Gemm": 1}
    assert "quantization" in g.attrs
    for name in ("n1", "c2", "logits"):
        q = g.get_op(name).attrs["quant"]
        assert q["weight"].dtype == np.int8 and q["bias_corrected"].dtype == np.int32
        assert np.all((q["multiplier"] >= 2**30) & (q["multiplier"] < 2**31))
    # scale-preserving ops hand their input's parameters on: no requantization needed there
    assert g.get_tensor("p2").attrs["quant"] == g.get_tensor("r2").attrs["quant"]
    assert g.get_tensor("f").attrs["quant"] == g.get_tensor("p2").attrs["quant"]
    assert g.get_tensor("r1").attrs["quant"]["zero_point"] == -128  # post-ReLU: all >= 0


def test_quantize_options(conv_model: onnx.ModelProto, tmp_path: Path) -> None:
    sym = compile_model(conv_model, {"quantize": {"symmetric_activations": True}}).graph
    assert all(t.attrs["quant"]["zero_point"] == 0 for t in sym.tensors if "quant" in t.attrs)
    mm = compile_model(conv_model, {"quantize": {"samples": 2}}).graph
    pc = compile_model(conv_model, {"quantize": {"samples": 2, "method": "percentile",
                                                 "percentile": 90.0}}).graph
    assert pc.get_tensor("c2").attrs["quant"]["scale"] < mm.get_tensor("c2").attrs["quant"]["scale"]
    with pytest.raises(OptionsError, match="unknown \"quantize\" option"):
        compile_model(conv_model, {"quantize": {"bits": 4}})
    with pytest.raises(OptionsError, match="minmax"):
        compile_model(conv_model, {"quantize": {"method": "kl"}})
    with pytest.raises(OptionsError, match="is not a file"):  # checked before compiling
        compile_model(conv_model, {"quantize": {"calibration": str(tmp_path / "none.npz")}})
    np.savez(tmp_path / "wrong.npz", y=np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(QuantizationError, match="no array for input 'x'"):
        compile_model(conv_model, {"quantize": {"calibration": str(tmp_path / "wrong.npz")}})
    np.savez(tmp_path / "shape.npz", x=np.zeros((2, 3, 8, 9), np.float32))
    with pytest.raises(QuantizationError, match="expected \\(samples, \\*\\(1, 3, 8, 8\\)\\)"):
        compile_model(conv_model, {"quantize": {"calibration": str(tmp_path / "shape.npz")}})


def test_random_calibration_needs_float_inputs() -> None:
    nodes = [helper.make_node("Cast", ["i"], ["y"], to=onnx.TensorProto.FLOAT)]
    m = make_model(nodes, [tensor_info("i", [2], onnx.TensorProto.INT64)],
                   [tensor_info("y", [2])])
    with pytest.raises(QuantizationError, match="give real samples as an .npz"):
        compile_model(m, {"quantize": True})


# ---- quantization that degrades gracefully (issue 15) ------------------------------------------
def _tiny_weight_conv(bias: float = 0.11) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """A 1x1 conv whose output channel 0 has weights ~5e-8 and a bias of 0.11 (the DenseNet
    case): at the weights' own scale the bias would need ~2**40 int32 units."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 16, 1, 1)).astype(np.float32) * 0.2
    w[0] *= 2.5e-7
    b = np.array([bias, 0.01, -0.02, 0.03], np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")],
                   [tensor_info("x", [1, 16, 6, 6])], [tensor_info("y", [1, 4, 6, 6])],
                   {"w": w, "b": b})
    return m, w, b


def test_bias_overflow_raises_that_channels_weight_scale(tmp_path: Path) -> None:
    """A bias that overflows int32 at the weight scale gets the standard remedy (that channel's
    weight scale raised until it fits), reported, and the integer conv stays within the float
    result's rounding: the tiny weights are worth less than an output LSB."""
    m, w, b = _tiny_weight_conv()
    x = np.random.default_rng(4).standard_normal((1, 16, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x[None])
    r = compile_model(m, {"quantize": {"calibration": str(tmp_path / "c.npz")}})
    rep = r.report["quantize"]
    assert rep["ops"] == {"Conv": 1} and "float_ops" not in rep
    assert list(rep["adjusted"]) == ["y"] and "1 of 4 output channel" in rep["adjusted"]["y"]
    q = r.graph.get_op("y").attrs["quant"]
    assert np.abs(q["bias"].astype(np.int64)).max() <= 2**30
    assert float(q["weight_scale"][0]) > float(np.abs(w[0]).max()) / 127   # raised
    np.testing.assert_array_equal(q["weight_scale"][1:],
                                  (np.abs(w[1:]).max(axis=(1, 2, 3)) / 127).astype(np.float32))
    qi, qo = tensor_quant(r.graph.get_tensor("x")), tensor_quant(r.graph.get_tensor("y"))
    assert qi is not None and qo is not None
    got = qo.dequantize(qconv(qi.quantize(x), q, [1, 1], [0] * 4, [1, 1], 1)).astype(np.float64)
    want = conv_nd(x.astype(np.float64), w.astype(np.float64), [1, 1], [0] * 4, [1, 1], 1) \
        + b.reshape(1, -1, 1, 1)
    # input rounding through |W| plus the output's rounding (+1 LSB at ties)
    tol = 0.5 * qi.scale * np.abs(w).sum(axis=(1, 2, 3)).reshape(1, -1, 1, 1) + 1.5 * qo.scale
    assert (np.abs(got - want) <= tol).all()


def test_the_light_densenet_quantizes() -> None:
    """The issue's case: DenseNet-121 light used to stop with 'the quantized bias overflows
    int32' (op r380); now it quantizes every conv, naming the adjusted ones."""
    from compiler.zoo import light_model
    r = compile_model(light_model("densenet121"), {"quantize": {"samples": 1}})
    rep = r.report["quantize"]
    assert rep["ops"]["Conv"] == sum(op.type == "Conv" for op in r.graph.ops)
    assert "r380" in rep["adjusted"] and "float_ops" not in rep


def test_an_op_without_an_int8_form_stays_in_float() -> None:
    """A Sum whose output is 2**31 times finer than its inputs (x - x + e, e < 1e-30) has no
    int8 requantization: that one op is left in float (the CPU runs it) with the reason in the
    report, and the rest of the model still quantizes."""
    m = make_model([helper.make_node("Neg", ["x"], ["n"]),
                    helper.make_node("Sigmoid", ["x"], ["sg"]),
                    helper.make_node("Mul", ["sg", "c"], ["e"]),
                    helper.make_node("Sum", ["x", "n", "e"], ["s"], name="sum"),
                    helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                   [tensor_info("x", [1, 3, 4, 4])],
                   [tensor_info("s", [1, 3, 4, 4]), tensor_info("y", [1, 2, 4, 4])],
                   {"c": np.array(1e-30, np.float32),
                    "w": np.ones((2, 3, 1, 1), np.float32)})
    r = compile_model(m, {"quantize": {"samples": 1}})
    rep = r.report["quantize"]
    # the conv and the constant Mul (affine_to_conv makes it a depthwise 1x1 Conv) quantize
    assert rep["ops"] == {"Conv": 2} and r.graph.get_op("e").type == "Conv"
    assert list(rep["float_ops"]) == ["s"] and ">= 2**31" in rep["float_ops"]["s"]
    assert "quant" not in r.graph.get_op("s").attrs
    assert "quant" in r.graph.get_tensor("s").attrs      # its tensors keep their parameters


def test_weights_that_are_not_finite_have_no_int8_form() -> None:
    w = np.ones((2, 3, 1, 1))
    w[1, 2] = np.nan
    with pytest.raises(QuantizationError, match="not all finite"):
        weight_params(w, 0)


def test_nan_during_calibration_names_the_tensor() -> None:
    """Random calibration through Sqrt makes NaN: a QuantizationError that names the tensor and
    the op, instead of numpy's 'cannot convert float NaN to integer'."""
    m = make_model([helper.make_node("Sqrt", ["x"], ["s"], name="root"),
                    helper.make_node("Relu", ["s"], ["y"], name="relu")],
                   [tensor_info("x", [3, 4])], [tensor_info("y", [3, 4])])
    with pytest.raises(QuantizationError, match=r"tensor 's' \(output of Sqrt 's'\) has NaN"):
        compile_model(m, {"quantize": {"samples": 2}})


@pytest.mark.parametrize("bad, what", [(np.nan, "non-finite"), (np.inf, "non-finite"),
                                       (1e200, "outside float32")])
def test_bad_calibration_data_names_the_input(tmp_path: Path, bad: float, what: str) -> None:
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [2, 3])],
                   [tensor_info("y", [2, 3])])
    a = np.zeros((1, 2, 3), np.float64)
    a[0, 1, 2] = bad
    np.savez(tmp_path / "c.npz", x=a)
    with pytest.raises(QuantizationError, match=f"calibration array 'x'.*{what}"):
        compile_model(m, {"quantize": {"calibration": str(tmp_path / "c.npz")}})


def test_extreme_but_finite_ranges() -> None:
    """Ranges at the ends of float32 give usable parameters, never a zero or infinite scale: a
    tensor of subnormal values quantizes to its zero point, one near float32's maximum keeps a
    finite scale; a range that is not finite is a QuantizationError."""
    tiny = activation_params(-1e-44, 1e-44, False)
    assert tiny.scale == float(np.finfo(np.float32).tiny) and -128 <= tiny.zero_point <= 127
    assert np.all(tiny.quantize(np.array([1e-44, -1e-44])) == tiny.zero_point)
    huge = activation_params(-1e38, 3e38, False)
    assert np.isfinite(huge.scale) and huge.scale > 1e35
    assert activation_params(0.0, 0.0, True) == ActQuant(1.0, 0)
    for lo, hi in ((float("nan"), 1.0), (0.0, float("inf"))):
        with pytest.raises(QuantizationError, match="not finite"):
            activation_params(lo, hi, False)


def test_a_saturating_multiplier_is_clamped() -> None:
    """M = s_in * s_w / s_out at or above 2**31 (a nearly constant output) has no Q31 form;
    every nonzero accumulator saturates either way, so it is stored as 2**31 - 1 (same int8
    results) instead of failing."""
    from compiler.quantize.quantizer import requant_params
    mult, shift = requant_params(1.0, np.array([1.0, 1e-3]), 1e-12)
    assert (int(mult[0]), int(shift[0])) == (2**31 - 1, 0)
    acc = np.array([-3, -1, 0, 1, 2], np.int32)
    np.testing.assert_array_equal(requantize(acc, int(mult[0]), int(shift[0]), 5),
                                  [-128, -128, 5, 127, 127])


def test_cli_prints_what_the_quantizer_adjusted(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from compiler import cli
    m, _, _ = _tiny_weight_conv()
    onnx.save(m, str(tmp_path / "m.onnx"))
    assert cli.main(["compile", str(tmp_path / "m.onnx"), "--options",
                     '{"quantize": {"samples": 1}}']) == 0
    out = capsys.readouterr().out
    assert "quantization adjusted 'y': Conv: bias up to 0.11 would overflow int32" in out


# --- calibration does not depend on the CPU --------------------------------------------------

_RANGES_SCRIPT = """
import ctypes, glob, json, os, sys
import numpy
from compiler import zoo
from compiler.frontend import import_onnx
from compiler.options import QuantizeOptions
from compiler.passes import run_pipeline
from compiler.quantize.calibrate import calibration_samples, collect_ranges
lib = glob.glob(os.path.join(os.path.dirname(numpy.__file__), "..", "numpy.libs",
                             "*openblas*"))
core = None
if lib:
    f = getattr(ctypes.CDLL(lib[0]), "scipy_openblas_get_corename64_", None)
    if f is not None:
        f.restype = ctypes.c_char_p
        core = f().decode()
g = import_onnx(zoo.light_model(sys.argv[1]) if sys.argv[1] != "demo" else zoo.demo_cnn())
run_pipeline(g)
opts = QuantizeOptions(samples=2, seed=0)
r = collect_ranges(g, calibration_samples(g, opts))
print(json.dumps({"core": core,
                  "ranges": {t.name: [v.hex() for v in lohi] for t, lohi in r.items()}}))
"""


def _cores() -> list[str]:
    """OpenBLAS kernels this CPU can run: SSE3's always, AVX2's and AVX-512's where present."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return ["Prescott"] + (["Haswell"] if " avx2" in flags else []) \
        + (["SkylakeX"] if " avx512f" in flags else [])


@pytest.mark.parametrize("model", ["demo", "squeezenet"])
def test_calibration_does_not_depend_on_the_blas_kernel(model: str) -> None:
    """The ranges calibration records are the same whichever OpenBLAS kernel numpy runs (forced
    with OPENBLAS_CORETYPE in a fresh process: the SSE3 kernel, and AVX2's and AVX-512's where
    the CPU has them). Float32 products sum in a kernel-specific order, so calibrating in
    float32 gave this AVX-512 machine other scales, programs and outputs than the AVX2 machine
    the goldens were recorded on; calibration now runs in float64 and rounds the ranges to
    float32."""
    import json
    import os
    import subprocess
    import sys

    cores = _cores()
    if len(cores) < 2:
        pytest.skip("this CPU runs only one OpenBLAS kernel family")
    seen = {}
    for core in cores:
        env = {**os.environ, "OPENBLAS_CORETYPE": core}
        out = subprocess.run([sys.executable, "-c", _RANGES_SCRIPT, model], env=env, check=True,
                             capture_output=True, text=True, timeout=600).stdout
        rec = json.loads(out.strip().splitlines()[-1])
        seen[rec["core"] or core] = rec["ranges"]
    assert len(seen) == len(cores), f"the kernels forced were not distinct: {sorted(seen)}"
    first, *rest = seen.items()
    for name, ranges in rest:
        diff = sorted(k for k in ranges if ranges[k] != first[1].get(k))
        assert not diff, f"{first[0]} and {name} calibrate {len(diff)} tensors differently, " \
            f"e.g. {diff[:3]}"


def test_the_wide_cpu_runner_computes_in_float64() -> None:
    """CpuRunner(wide=True) widens inputs and constants and keeps every float tensor in
    float64 (the observer sees float64), agreeing with the float32 run to float32 precision;
    integer tensors keep their types."""
    from compiler.frontend import import_onnx
    from compiler.passes import run_pipeline
    from compiler.runtime.cpu import CpuRunner
    from compiler.zoo import DEMO_INPUT, demo_cnn, demo_input

    g = import_onnx(demo_cnn())
    run_pipeline(g)
    seen: dict[str, np.dtype] = {}
    wide = CpuRunner(g.root_subgraph, observer=lambda t, v: seen.__setitem__(t.name, v.dtype),
                     wide=True)
    narrow = CpuRunner(g.root_subgraph)
    x = {DEMO_INPUT: demo_input()}
    (a,), (b,) = wide.run(x).values(), narrow.run(x).values()
    assert a.dtype == np.float64 and b.dtype == np.float32
    assert {str(d) for d in seen.values()} == {"float64"}, seen
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_wide_runner_widens_large_constants_where_used(monkeypatch) -> None:
    """A constant above the cache size stays float32 in the runner and is widened for each op
    that reads it, a Gemm's weight by the Gemm itself (`widening_matmul`): every tensor the
    observer sees, and the outputs, are exactly those of the run that widens every constant up
    front (run twice: nothing large is kept between runs)."""
    from compiler.frontend import import_onnx
    from compiler.ops import op_gemm
    from compiler.passes import run_pipeline
    from compiler.runtime import cpu
    from compiler.zoo import DEMO_INPUT, demo_cnn, demo_input

    g = import_onnx(demo_cnn())
    run_pipeline(g)
    x = {DEMO_INPUT: demo_input()}
    weights: list[np.dtype] = []

    def spy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        weights.append(b.dtype)
        return widening_matmul(a, b)

    monkeypatch.setattr(op_gemm, "widening_matmul", spy)

    def run(cache_bytes: int) -> tuple[dict[str, np.ndarray], list[np.ndarray], dict[str, Any]]:
        monkeypatch.setattr(cpu, "WIDE_CACHE_BYTES", cache_bytes)
        seen: dict[str, np.ndarray] = {}
        r = cpu.CpuRunner(g.root_subgraph, observer=lambda t, v: seen.__setitem__(t.name, v),
                          wide=True)
        outs = [r.run(x), r.run(x)]
        return seen, [o for d in outs for o in d.values()], dict(r._wide_consts)

    big = run(1 << 40)
    assert weights and set(weights) == {np.dtype(np.float64)}
    weights.clear()
    small = run(0)
    assert weights and set(weights) == {np.dtype(np.float32)}     # no float64 copy of it
    assert big[2] and not small[2]           # every constant kept, then none
    assert big[0].keys() == small[0].keys()
    for k, v in big[0].items():
        assert v.dtype == small[0][k].dtype == np.float64 and np.array_equal(v, small[0][k]), k
    for a, b in zip(big[1], small[1], strict=True):
        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)


@pytest.mark.parametrize("block_bytes", [1, 64 * 40 * 8, 200 * 40 * 8, 16 << 20])
def test_widening_matmul_is_the_product_of_the_widened_weight(block_bytes: int) -> None:
    """widening_matmul(a, b) widens b a block of columns at a time (one block or several, the
    last one short) and gives np.matmul(a, b widened): on integer-valued data, where every
    order of summation is exact, bit for bit; for a weight and for the transposed view of one
    (Gemm's transB), 1-D to 3-D activations, float32 and float16 weights."""
    rng = np.random.default_rng(7)
    k = 40
    for n in (1, 63, 64, 130, 333):
        for dtype in (np.float32, np.float16):
            w = rng.integers(-60, 61, (k, n)).astype(dtype)
            for b in (w, np.ascontiguousarray(w.T).T):
                for shape in ((k,), (1, k), (5, k), (2, 3, k)):
                    a = rng.integers(-100, 101, shape).astype(np.float64)
                    got = widening_matmul(a, b, block_bytes)
                    want = np.matmul(a, b.astype(np.float64))
                    assert got.dtype == np.float64 and got.shape == want.shape
                    assert np.array_equal(got, want), (n, dtype, shape, b.strides)


def test_widening_matmul_leaves_other_operands_to_numpy() -> None:
    """Operands of one type, integers, a 1-D weight or a narrow activation: np.matmul itself."""
    rng = np.random.default_rng(8)
    a32 = rng.standard_normal((3, 20)).astype(np.float32)
    for a, b in ((a32, rng.standard_normal((20, 6)).astype(np.float32)),
                 (a32.astype(np.float64), rng.standard_normal((20, 6))),
                 (a32.astype(np.float64), rng.standard_normal(20).astype(np.float32)),
                 (a32, rng.standard_normal((20, 6))),
                 (rng.integers(0, 9, (3, 20)), rng.integers(0, 9, (20, 6)))):
        got = widening_matmul(a, b, 1)
        want = np.matmul(a, b)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("op_type", ["Gemm", "MatMul"])
def test_gemm_and_matmul_widen_a_narrow_weight_in_blocks(op_type: str, monkeypatch) -> None:
    """Gemm (transB, alpha, beta, C) and MatMul with a float64 input and a float32 weight: the
    product of the widened weight, computed in blocks (integer-valued data: exact)."""
    from compiler.ops import _common_matmul
    from compiler.ops.registry import get_opdef
    from compiler.xir import Graph

    monkeypatch.setattr(_common_matmul, "WIDEN_BLOCK_BYTES", 1)
    rng = np.random.default_rng(9)
    g = Graph("g")
    a = rng.integers(-9, 10, (2, 30)).astype(np.float64)
    w = rng.integers(-9, 10, (150, 30)).astype(np.float32)          # (N, K): transB
    c = rng.integers(-9, 10, 150).astype(np.float32)
    x = g.create_op("x", "data", shape=(2, 30), dtype="float32")
    wt = g.create_op("w", "const", attrs={"data": w})
    opdef = get_opdef(op_type)
    if op_type == "Gemm":
        ct = g.create_op("c", "const", attrs={"data": c})
        op = g.create_op("y", "Gemm", {"A": [x], "B": [wt], "C": [ct]},
                         {"transB": 1, "alpha": 2.0, "beta": 3.0})
        got = opdef.run(op, a, w, c.astype(np.float64))
        want = 2.0 * (a @ w.T.astype(np.float64)) + 3.0 * c.astype(np.float64)
    else:
        op = g.create_op("y", "MatMul", {"A": [x], "B": [wt]})
        got = opdef.run(op, a, np.ascontiguousarray(w.T))
        want = a @ w.T.astype(np.float64)
    assert 1 in opdef.narrow_inputs
    assert got.dtype == np.float64 and np.array_equal(got, want)


@pytest.mark.parametrize("block_bytes", [1, 4096, 8 << 20])
def test_weight_params_in_blocks_are_the_float64_computation(block_bytes: int,
                                                             monkeypatch) -> None:
    """weight_params quantizes a block of rows at a time without a float64 copy of the
    weights: the int8 weights and scales are exactly those of the whole computation in float64
    (float32, float16 and float64 weights, either axis, zero channels, raised minimum
    scales, integer weights)."""
    from compiler.quantize import params

    monkeypatch.setattr(params, "QUANTIZE_BLOCK_BYTES", block_bytes)

    def whole(w: np.ndarray, axis: int, min_scale: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray]:
        w64 = np.array(w, np.float64)
        axes = tuple(i for i in range(w64.ndim) if i != axis)
        amax = np.maximum(w64.max(axis=axes), -w64.min(axis=axes)) if axes else np.abs(w64)
        scale = np.where(amax > 0, amax / params.WMAX, 1.0)
        if min_scale is not None:
            scale = np.maximum(scale, min_scale)
        scale = np.maximum(scale.astype(np.float32), np.float32(params.MIN_SCALE))
        if min_scale is not None:
            low = scale.astype(np.float64) < min_scale
            scale = np.where(low, np.nextafter(scale, np.float32(np.inf)), scale).astype(
                np.float32)
        shape = [1] * w64.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w64 / scale.astype(np.float64).reshape(shape)), -127, 127)
        return q.astype(np.int8), scale

    rng = np.random.default_rng(10)
    for shape, axis in (((16, 3, 3, 3), 0), ((40, 70), 0), ((70, 40), 1), ((9,), 0),
                        ((5, 30, 3), 1)):
        spread = rng.uniform(0.01, 3, shape[axis]).reshape(
            [-1 if i == axis else 1 for i in range(len(shape))])
        for dtype in (np.float32, np.float16, np.float64, np.int16):
            w = (rng.standard_normal(shape) * spread * (40 if dtype == np.int16 else 1))
            w = w.astype(dtype)
            w.reshape(-1)[::7] = 0
            if len(shape) > 1:
                w[(slice(None),) * axis + (0,)] = 0                 # a channel of zeros
            for min_scale in (None, rng.uniform(0, 0.05, shape[axis])):
                q, sc = weight_params(w, axis, min_scale)
                q0, s0 = whole(w, axis, min_scale)
                assert q.dtype == np.int8 and np.array_equal(q, q0)
                assert np.array_equal(sc.view(np.uint32), s0.view(np.uint32))

"""Golden references that give the same answer on every x86-64 CPU.

Two kinds, chosen by what a model computes:

- :func:`exact_reference`: the onnx package's reference evaluator (numpy, no instruction-set
  dispatch). Every integer or quantized op is checked against it (or against the integer formula
  written out in the test), and compared bit for bit. onnxruntime is never the reference for
  those: its u8s8 integer GEMM kernels (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
  and the DequantizeLinear -> op -> QuantizeLinear patterns its graph optimizer fuses into
  them) saturate 16-bit pair sums on CPUs without AVX-512-VNNI, so the "golden" value itself
  differs between an AVX2 and an AVX-512 machine (31 of 72 QLinearConv outputs, up to 27 LSB).

- :func:`float_reference`: onnxruntime on a float32 model. Its float kernels differ between
  instruction sets only in how float32 sums are grouped (vector width, FMA contraction); every
  product and partial sum is still an IEEE float32 operation. Regrouping a sum of K terms moves
  it by at most about K * 2**-24 * sum|terms| in the worst case and by sqrt(K) * 2**-24 *
  sum|terms| typically, so the float tolerances of the tests (rtol/atol 1e-5 for one-node
  models whose reductions have at most 54 terms of order 1; rtol 1e-4 of the logit scale for
  the light models, whose longest reduction is VGG's 25088-term FC: sqrt(25088) * 6e-8 = 1e-5)
  sit at least ten times above what a different CPU changes. The quantized end-to-end tests
  compare int8 results with the fp32 model at a tolerance set by int8 rounding (0.03-0.05 on
  probabilities), four orders of magnitude above any float32 regrouping. A model containing a
  quantized op is refused here, so an integer golden cannot slip back onto onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

#: Op types whose onnxruntime kernels are integer kernels chosen per instruction set (or are
#: fused into them by its graph optimizer).
QUANTIZED_OPS = frozenset({
    "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QuantizeLinear",
    "DequantizeLinear", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QGemm",
})


class GoldenError(AssertionError):
    """A test asked for a reference that would depend on the CPU."""


def quantized_ops(model: onnx.ModelProto) -> list[str]:
    """The quantized (or contrib-domain) op types in ``model``, sorted."""
    return sorted({n.op_type for n in model.graph.node
                   if n.op_type in QUANTIZED_OPS or n.domain not in ("", "ai.onnx")})


def float_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                    ) -> dict[str, np.ndarray]:
    """onnxruntime's outputs by name for a float model (see the module docstring)."""
    bad = quantized_ops(model)
    if bad:
        raise GoldenError(f"model has quantized ops {bad}: onnxruntime's integer kernels differ "
                          "per CPU; use exact_reference() or the integer formula")
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, dict(feeds)), strict=True))


def exact_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
                    ) -> dict[str, np.ndarray]:
    """The onnx reference evaluator's outputs by name: the same on every CPU."""
    ref = ReferenceEvaluator(model)
    return dict(zip(ref.output_names, ref.run(None, dict(feeds)), strict=True))


"""Post-training int8 quantization: calibration, per-channel weights, integer requantization,
and the integer reference kernels an accelerator must match."""

from compiler.quantize.params import ActQuant, activation_params, weight_params
from compiler.quantize.quantizer import quantize_graph, requant_params, tensor_quant
from compiler.quantize.reference import qadd, qconv, qgemm
from compiler.quantize.requant import (
    quantize_multiplier,
    quantize_multipliers,
    requantize,
    requantize_reference,
)

__all__ = [
    "ActQuant",
    "activation_params",
    "qadd",
    "qconv",
    "qgemm",
    "quantize_graph",
    "quantize_multiplier",
    "quantize_multipliers",
    "requant_params",
    "requantize",
    "requantize_reference",
    "tensor_quant",
    "weight_params",
]

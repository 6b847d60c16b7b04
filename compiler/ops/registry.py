"""The op definitions the compiler knows, by op type: an explicit list, no import-time magic."""

from __future__ import annotations

from compiler.ops.base import OpDef
from compiler.ops.op_average_pool import AveragePool
from compiler.ops.op_batch_norm import BatchNormalization
from compiler.ops.op_cast import Cast
from compiler.ops.op_clip import Clip
from compiler.ops.op_concat import Concat
from compiler.ops.op_constant_of_shape import ConstantOfShape
from compiler.ops.op_conv import Conv
from compiler.ops.op_dequantize_linear import DequantizeLinear
from compiler.ops.op_elementwise import BINARY, UNARY, VARIADIC
from compiler.ops.op_expand import Expand
from compiler.ops.op_flatten import Flatten
from compiler.ops.op_gather import Gather, GatherND
from compiler.ops.op_gemm import Gemm
from compiler.ops.op_global_pool import GlobalAveragePool, GlobalMaxPool
from compiler.ops.op_identity import Dropout, Identity
from compiler.ops.op_lrn import LRN
from compiler.ops.op_matmul import MatMul
from compiler.ops.op_max_pool import MaxPool
from compiler.ops.op_norm import Gelu, LayerNormalization
from compiler.ops.op_pad import Pad
from compiler.ops.op_qlinear_conv import QLinearConv
from compiler.ops.op_qlinear_matmul import QLinearMatMul
from compiler.ops.op_quantize_linear import QuantizeLinear
from compiler.ops.op_reduce import REDUCE
from compiler.ops.op_reshape import Reshape
from compiler.ops.op_shape import Shape
from compiler.ops.op_slice import Slice
from compiler.ops.op_softmax import LogSoftmax, Softmax
from compiler.ops.op_squeeze import Squeeze, Unsqueeze
from compiler.ops.op_tile import Tile
from compiler.ops.op_transpose import Transpose


def _definitions() -> list[OpDef]:
    return [
        Conv(), Gemm(), MatMul(), MaxPool(), AveragePool(), GlobalAveragePool(),
        GlobalMaxPool(), BatchNormalization(), LRN(), Softmax(), LogSoftmax(), Clip(),
        Reshape(), Flatten(), Transpose(), Concat(), Squeeze(), Unsqueeze(), Slice(), Pad(),
        Gather(), GatherND(), Shape(), Cast(), Tile(), Expand(), ConstantOfShape(), Identity(),
        Dropout(),
        QuantizeLinear(), DequantizeLinear(), QLinearConv(), QLinearMatMul(),
        LayerNormalization(), Gelu(),
        *UNARY, *BINARY, *VARIADIC, *REDUCE,
    ]


OPS: dict[str, OpDef] = {d.op_type: d for d in _definitions()}


def get_opdef(op_type: str) -> OpDef | None:
    """The numpy definition of ``op_type``, or None (then onnx's reference is the fallback)."""
    return OPS.get(op_type)

"""Op library: shape functions and numpy reference kernels, one op (or one op family) per file.

``get_opdef(type)`` gives the numpy definition; ops without one fall back to onnx's shape
inference and reference evaluator (:mod:`compiler.ops.onnx_bridge`).
"""

from compiler.ops.base import OpDef, TensorType
from compiler.ops.infer import infer_op, known_value, op_kernel
from compiler.ops.onnx_bridge import CANONICAL_OPSET, reference_supports
from compiler.ops.registry import OPS, get_opdef

__all__ = [
    "CANONICAL_OPSET",
    "OPS",
    "OpDef",
    "TensorType",
    "get_opdef",
    "infer_op",
    "known_value",
    "op_kernel",
    "reference_supports",
]

"""Per-op type inference and kernel selection: numpy definition first, ONNX reference second."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.limits import check_tensor_size
from compiler.ops.base import TensorType, Types, Values, describe
from compiler.ops.onnx_bridge import ReferenceKernel, fallback_infer, reference_supports
from compiler.ops.registry import get_opdef
from compiler.xir import CONST, DATA, Op, Tensor

Kernel = Callable[..., np.ndarray]


def input_types(op: Op) -> list[TensorType | None]:
    out: list[TensorType | None] = []
    for t in op.positional_inputs():
        if t is None:
            out.append(None)
        elif t.shape is None:
            raise ShapeInferenceError(f"{describe(op)}: input {t.name!r} has no shape yet "
                                      "(its producer was not inferred)")
        else:
            out.append(TensorType(t.shape, t.dtype))
    return out


def known_value(t: Tensor | None, extra: Mapping[Tensor, np.ndarray] | None = None
                ) -> np.ndarray | None:
    """The compile-time value of ``t``: a const's data, or one computed by value propagation."""
    if t is None:
        return None
    if t.producer.type == CONST:
        return t.producer.attrs["data"]
    return None if extra is None else extra.get(t)


def infer_op(op: Op, extra: Mapping[Tensor, np.ndarray] | None = None) -> TensorType:
    """Output type of ``op`` from its inputs' types and known values; ShapeInferenceError
    naming the op when the shape is invalid or above `compiler.limits.MAX_TENSOR_BYTES`."""
    t = _infer_op(op, extra)
    if t.shape is not None:
        check_tensor_size(t.shape, t.dtype, describe(op), ShapeInferenceError)
    return t


def _infer_op(op: Op, extra: Mapping[Tensor, np.ndarray] | None = None) -> TensorType:
    if op.type == DATA:
        if op.output.shape is None:
            raise ShapeInferenceError(f"model input {op.name!r} has no static shape; give one "
                                      "with the input_shapes option")
        return TensorType(op.output.shape, op.output.dtype)
    if op.type == CONST:
        data = op.attrs["data"]
        return TensorType(tuple(data.shape), data.dtype.name)
    ins = input_types(op)
    vals = [known_value(t, extra) for t in op.positional_inputs()]
    opdef = get_opdef(op.type)
    if opdef is not None:
        opdef.canonicalize(op, ins)
        return opdef.infer(op, ins, vals)
    return fallback_infer(op, ins, vals)


def cpu_can_run(op: Op) -> bool:
    return (op.type in (DATA, CONST) or get_opdef(op.type) is not None
            or reference_supports(op.type, op.graph))


def op_kernel(op: Op, ins: Types | None = None) -> tuple[Kernel, str]:
    """A callable computing ``op`` from positional input arrays, and which implementation it is
    (``"numpy"`` or ``"onnx-reference"``)."""
    opdef = get_opdef(op.type)
    if opdef is not None:
        return partial(opdef.run, op), "numpy"
    types = input_types(op) if ins is None else ins
    out = (TensorType(op.output.shape, op.output.dtype) if op.output.shape is not None else None)
    return ReferenceKernel(op, types, out).run, "onnx-reference"


def evaluate(op: Op, xs: list[np.ndarray | None], values: Values | None = None) -> np.ndarray:
    """Run ``op`` once on concrete inputs (constant folding, value propagation)."""
    kernel, _ = op_kernel(op, [None if x is None else TensorType(x.shape, x.dtype.name)
                               for x in xs])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        return np.asarray(kernel(*xs))

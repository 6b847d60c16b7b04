"""Cast to the ONNX data type in ``to``."""

from __future__ import annotations

import numpy as np
from onnx import helper

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.xir import Op


def target_dtype(op: Op) -> str:
    to = op.attrs.get("to")
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(to))).name
    except (KeyError, TypeError, ValueError):
        raise ShapeInferenceError(f"{describe(op)}: unsupported cast target {to!r}") from None


class Cast(OpDef):
    op_type = "Cast"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        return TensorType(need(op, ins, 0).shape, target_dtype(op))

    def run(self, op: Op, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return x.astype(target_dtype(op))

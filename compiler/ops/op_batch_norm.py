"""BatchNormalization in inference mode (training_mode=1 is refused)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.xir import Op


def _epsilon(op: Op) -> float:
    return float(op.attrs.get("epsilon", 1e-5))


def bn_scale_shift(op: Op, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                   var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (a, b) with BN(x) = a * x + b; float64, for folding and for the kernel."""
    eps = _epsilon(op)
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return a, bias.astype(np.float64) - mean.astype(np.float64) * a


class BatchNormalization(OpDef):
    op_type = "BatchNormalization"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        if op.attrs.get("training_mode", 0):
            raise ShapeInferenceError(f"{describe(op)}: training_mode=1 is not supported; "
                                      "export the model in eval mode")
        if x.rank < 2:
            raise ShapeInferenceError(f"{describe(op)}: input must be (N, C, ...), got {x.shape}")
        for i in range(1, 5):
            p = need(op, ins, i, "parameter")
            if p.shape != (x.shape[1],):
                raise ShapeInferenceError(f"{describe(op)}: parameter #{i} has shape {p.shape},"
                                          f" expected ({x.shape[1]},)")
        var = vals[4] if len(vals) > 4 else None
        if var is not None:
            # BN divides by sqrt(var + epsilon): a negative, zero or NaN one is a corrupt model
            # (onnxruntime would compute NaN or inf for the whole channel), not a value to fold
            eps = _epsilon(op)
            v = np.asarray(var, np.float64).reshape(-1)
            bad = np.flatnonzero(~(v + eps > 0))
            if bad.size:
                c = int(bad[0])
                raise ShapeInferenceError(
                    f"{describe(op)}: input_var + epsilon must be positive (the normalisation "
                    f"divides by its square root), but channel {c} has variance "
                    f"{float(v[c])!r} with epsilon {eps!r} ({bad.size} of {v.size} channels "
                    "like it); the model's running variance is corrupt")
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, *params: np.ndarray | None) -> np.ndarray:
        assert x is not None and all(p is not None for p in params[:4])
        a, b = bn_scale_shift(op, *params[:4])  # type: ignore[arg-type]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return (x * a.astype(x.dtype).reshape(shape)
                + b.astype(x.dtype).reshape(shape)).astype(x.dtype, copy=False)

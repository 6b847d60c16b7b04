"""What MaxPool and AveragePool share: attribute canonicalization, the output shape and the
sliding windows (after onnx/reference's _op_common_pool)."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import TensorType, Types, describe, need
from compiler.ops.geometry import output_size, resolve_window_attrs, windows
from compiler.xir import Op


def pool_out_shape(op: Op, x: TensorType) -> tuple[int, ...]:
    a = op.attrs
    nd = x.rank - 2
    if x.rank < 3:
        raise ShapeInferenceError(f"{describe(op)}: input must be (N, C, ...), got {x.shape}")
    out = [output_size(op, x.shape[2 + i], a["kernel_shape"][i], a["strides"][i],
                       a["dilations"][i], a["pads"][i], a["pads"][i + nd],
                       bool(a.get("ceil_mode", 0)))
           for i in range(nd)]
    return (*x.shape[:2], *out)


def canonicalize_pool(op: Op, ins: Types) -> None:
    x = need(op, ins, 0)
    kernel = op.attrs.get("kernel_shape")
    if kernel is None or len(kernel) != x.rank - 2:
        raise ShapeInferenceError(f"{describe(op)}: kernel_shape {kernel} must have "
                                  f"{x.rank - 2} entries")
    resolve_window_attrs(op, x.shape[2:], kernel)


def pool_windows(op: Op, x: np.ndarray, fill: float | int) -> np.ndarray:
    if op.attrs.get("auto_pad", "NOTSET") != "NOTSET" or "dilations" not in op.attrs:
        canonicalize_pool(op, [TensorType(x.shape, x.dtype.name)])
    a = op.attrs
    out = pool_out_shape(op, TensorType(x.shape, x.dtype.name))[2:]
    return windows(x, a["kernel_shape"], a["strides"], a["dilations"], a["pads"], out, fill)

"""Window geometry shared by Conv and the pooling ops: padding, output sizes, sliding windows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from compiler.errors import ShapeInferenceError
from compiler.ops.base import describe
from compiler.xir import Op


def resolve_window_attrs(op: Op, spatial: Sequence[int], kernel: Sequence[int]) -> None:
    """Write explicit ``kernel_shape``, ``strides``, ``dilations`` and ``pads`` (auto_pad
    resolved, as ONNX defines SAME_UPPER / SAME_LOWER / VALID) into the op's attributes."""
    nd = len(spatial)
    strides = [int(s) for s in op.attrs.get("strides") or [1] * nd]
    dil = [int(d) for d in op.attrs.get("dilations") or [1] * nd]
    if len(strides) != nd or len(dil) != nd or len(kernel) != nd:
        raise ShapeInferenceError(f"{describe(op)}: strides {strides}, dilations {dil} and "
                                  f"kernel {list(kernel)} must each have {nd} entries")
    auto = op.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto == "NOTSET":
        pads = [int(p) for p in op.attrs.get("pads") or [0] * (2 * nd)]
    else:
        raise ShapeInferenceError(f"{describe(op)}: unknown auto_pad {auto!r}")
    if len(pads) != 2 * nd:
        raise ShapeInferenceError(f"{describe(op)}: pads {pads} must have {2 * nd} entries")
    op.attrs["kernel_shape"] = [int(k) for k in kernel]
    op.attrs["strides"] = strides
    op.attrs["dilations"] = dil
    op.attrs["pads"] = pads
    op.attrs["auto_pad"] = "NOTSET"


def output_size(op: Op, size: int, k: int, s: int, d: int, pb: int, pe: int,
                ceil_mode: bool = False) -> int:
    """Output length of one spatial axis (PyTorch/ONNX Runtime rule for ceil_mode: the last
    window must start inside the input or its begin padding)."""
    span = (k - 1) * d + 1
    num = size + pb + pe - span
    if num < 0:
        raise ShapeInferenceError(f"{describe(op)}: window {span} is larger than the padded "
                                  f"input {size + pb + pe}")
    out = (math.ceil(num / s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], pads: Sequence[int], out: Sequence[int],
            fill: float | int) -> np.ndarray:
    """A view (N, C, *out, *kernel) of the padded input, one window per output position.

    Pads with ``fill`` at the begin by the explicit pads and at the end by whatever the output
    size needs (covers ceil_mode's partial last window).
    """
    nd = len(kernel)
    widths = [(0, 0), (0, 0)]
    for i in range(nd):
        span = (kernel[i] - 1) * dilations[i] + 1
        need = (out[i] - 1) * strides[i] + span
        end = max(need - x.shape[2 + i] - pads[i], 0)
        widths.append((pads[i], end))
    xp = np.pad(x, widths, constant_values=fill) if any(a or b for a, b in widths) else x
    spans = [(kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    v = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    sel = (slice(None), slice(None))
    sel += tuple(slice(0, (out[i] - 1) * strides[i] + 1, strides[i]) for i in range(nd))
    sel += tuple(slice(None, None, dilations[i]) for i in range(nd))
    return v[sel]

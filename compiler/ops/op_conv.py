"""Conv (N-d, groups, dilations, padding) as one batched GEMM per group over im2col windows."""

from __future__ import annotations

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.ops.geometry import output_size, resolve_window_attrs, windows
from compiler.xir import Op


def conv_nd(x: np.ndarray, w: np.ndarray, strides: list[int], pads: list[int],
            dilations: list[int], group: int, acc_dtype: np.dtype | None = None) -> np.ndarray:
    """Convolution without bias: (N, C, *S) * (M, C/group, *K) -> (N, M, *O).

    ``acc_dtype`` sets the GEMM type; integer convolutions use float64, which is exact while
    every partial sum stays below 2**53 (true for int8 x int8 products over any real layer) and
    runs on BLAS, unlike numpy's integer matmul.
    """
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = list(w.shape[2:])
    nd = len(kernel)
    out = [output_size_raw(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i],
                           pads[i + nd]) for i in range(nd)]
    acc = np.dtype(acc_dtype or x.dtype)
    win = windows(x.astype(acc, copy=False), kernel, strides, dilations, pads, out, 0)
    k = int(np.prod(kernel, dtype=np.int64))
    mg = m // group
    wmat = w.astype(acc, copy=False).reshape(group, mg, cg * k).transpose(0, 2, 1)
    # im2col a block of output rows (first output axis) at a time, each block at most
    # IM2COL_BYTES: each output element is still one dot product over Cg*K, without a matrix of
    # every window at once (VGG-19's second convolution would need 231 MB of it in float64, and
    # as much again for its copies)
    inner = int(np.prod(out[1:], dtype=np.int64))
    row_bytes = max(n * group * inner * cg * k * acc.itemsize, 1)
    rows = max(1, min(out[0], IM2COL_BYTES // row_bytes))
    y = np.empty((n, group, mg, out[0], inner), dtype=np.result_type(acc, wmat.dtype))
    # the im2col matrix is built transposed, (G, Cg*K, N*Pb): copied so, an output row of the
    # input is one contiguous run in both arrays (built (G, N*Pb, Cg*K), the runs are a row of
    # taps, 3 values for a 3x3 kernel, at half the speed); the GEMM reads it transposed, the
    # same product over Cg*K for every output
    perm = (1, 2, *range(3 + nd, 3 + 2 * nd), 0, *range(3, 3 + nd))
    for r0 in range(0, out[0], rows):
        r1 = min(out[0], r0 + rows)
        pb = (r1 - r0) * inner
        # (N, G, Cg, *O_block, *K) -> (G, Cg, *K, N, *O_block)
        src = win[:, :, r0:r1].reshape(n, group, cg, r1 - r0, *out[1:], *kernel) \
            .transpose(perm)
        cols_t = np.empty(src.shape, acc)
        np.copyto(cols_t, src)
        cols = cols_t.reshape(group, cg * k, n * pb).transpose(0, 2, 1)
        yb = np.matmul(cols, wmat)  # (G, N*Pb, Mg)
        y[:, :, :, r0:r1] = yb.reshape(group, n, r1 - r0, inner, mg).transpose(1, 0, 4, 2, 3)
    return y.reshape(n, m, *out)


#: The largest im2col block conv_nd builds at once.
IM2COL_BYTES = 32 << 20


def output_size_raw(size: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    return (size + pb + pe - ((k - 1) * d + 1)) // s + 1


class Conv(OpDef):
    op_type = "Conv"

    def canonicalize(self, op: Op, ins: Types) -> None:
        x, w = need(op, ins, 0), need(op, ins, 1, "weights")
        resolve_window_attrs(op, x.shape[2:], w.shape[2:])
        op.attrs["group"] = int(op.attrs.get("group", 1))

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x, w = need(op, ins, 0), need(op, ins, 1, "weights")
        if x.rank < 3 or w.rank != x.rank:
            raise ShapeInferenceError(f"{describe(op)}: input rank {x.rank} and weight rank "
                                      f"{w.rank} must be equal and at least 3")
        group = int(op.attrs.get("group", 1))
        if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
            raise ShapeInferenceError(
                f"{describe(op)}: {x.shape[1]} input channels do not fit weights {w.shape} "
                f"with group={group}")
        if len(ins) > 2 and ins[2] is not None and ins[2].shape != (w.shape[0],):
            raise ShapeInferenceError(f"{describe(op)}: bias shape {ins[2].shape} must be "
                                      f"({w.shape[0]},)")
        self.canonicalize(op, ins)
        a = op.attrs
        nd = x.rank - 2
        out = [output_size(op, x.shape[2 + i], w.shape[2 + i], a["strides"][i],
                           a["dilations"][i], a["pads"][i], a["pads"][i + nd])
               for i in range(nd)]
        return TensorType((x.shape[0], w.shape[0], *out), x.dtype)

    def run(self, op: Op, x: np.ndarray | None, w: np.ndarray | None = None,
            b: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and w is not None
        a = op.attrs
        nd = x.ndim - 2
        strides = a.get("strides") or [1] * nd
        dil = a.get("dilations") or [1] * nd
        pads = a.get("pads") or [0] * (2 * nd)
        if a.get("auto_pad", "NOTSET") != "NOTSET":
            self.canonicalize(op, [TensorType(x.shape, x.dtype.name),
                                   TensorType(w.shape, w.dtype.name)])
            strides, dil, pads = a["strides"], a["dilations"], a["pads"]
        y = conv_nd(x, w, strides, pads, dil, int(a.get("group", 1)))
        if b is not None:
            y += b.reshape((1, -1) + (1,) * nd)
        return y.astype(x.dtype, copy=False)

"""What Gemm and MatMul share: the product of a float64 operand and a narrower float weight
(a wide run's large constant, see `compiler.runtime.cpu`) without a float64 copy of the whole
weight.

numpy's ``a @ b`` with ``a`` float64 and ``b`` float32 first casts all of ``b`` to float64: for
VGG-19's first fully connected weight (103 M values) an 822 MB temporary, most of whose cost on
a VM is the first touch of that much fresh memory. `widening_matmul` widens ``b`` a block of
output columns at a time into one reused buffer and multiplies each block on its own. Every
output is still one BLAS product over the whole inner dimension, in the same orientation and
with the same rows as the direct product; only the number of output columns per call differs.
The blocks are whole multiples of `BLOCK_COLUMNS` columns, so that they are aligned to the
groups of outputs the BLAS kernels compute together and to the halves their threads split
them into (OpenBLAS's Haswell and SSE3 kernels give the same bits with and without blocks on
the light models' shapes; on integer-valued data every order is exact, which the tests use).
"""

from __future__ import annotations

import numpy as np

#: Largest float64 block of the weight `widening_matmul` widens at once.
WIDEN_BLOCK_BYTES = 16 << 20
#: Blocks are whole multiples of this many output columns (the last one: what is left).
BLOCK_COLUMNS = 64


def widening_matmul(a: np.ndarray, b: np.ndarray, block_bytes: int = WIDEN_BLOCK_BYTES
                    ) -> np.ndarray:
    """``np.matmul(a, b.astype(np.float64))`` for a float64 ``a`` and a 2-D float ``b`` of
    another (narrower) type, computed a block of ``b``'s columns at a time (at most
    ``block_bytes`` of float64, at least `BLOCK_COLUMNS` columns), each widened into one reused
    buffer. Any other operands: ``np.matmul(a, b)`` as it is."""
    if (a.dtype != np.float64 or b.dtype.kind != "f" or b.dtype == np.float64 or b.ndim != 2
            or a.ndim < 1 or a.shape[-1] != b.shape[0]):
        return np.matmul(a, b)
    k, n = b.shape
    cols = max(BLOCK_COLUMNS, block_bytes // max(8 * k, 1) // BLOCK_COLUMNS * BLOCK_COLUMNS)
    if cols >= n:
        return np.matmul(a, b.astype(np.float64))
    # the buffer in b's orientation: a transposed weight (Gemm's transB) stays transposed, so
    # that BLAS sees the same kind of product as with the whole weight
    by_columns = b.strides[0] < b.strides[1]
    buf = np.empty((cols, k) if by_columns else (k, cols), np.float64)
    y = np.empty((*a.shape[:-1], n), np.float64)
    for c0 in range(0, n, cols):
        c1 = min(n, c0 + cols)
        if by_columns:
            part = buf[:c1 - c0]
            np.copyto(part, b[:, c0:c1].T)
            part = part.T
        else:
            part = buf[:, :c1 - c0]
            np.copyto(part, b[:, c0:c1])
        y[..., c0:c1] = np.matmul(a, part)
    return y

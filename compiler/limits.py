"""Size limits of the compiler: the largest tensor it will type, fold or read from a file.

A model is data from anywhere: a 113-byte ONNX file can declare a `ConstantOfShape` of a
gigabyte, or a shape whose element count overflows int64. Shape inference, constant folding
and the .xmodel reader check every shape against these limits before anything is allocated,
and refuse with a message naming the op, instead of writing a gigabyte file or dying in a
MemoryError.

- `MAX_TENSOR_BYTES` (16 GiB): any tensor shape inference types or a file declares. The card
  has 1 GiB and the host 64 GiB; nothing this system runs has a tensor near it.
- `MAX_CONST_BYTES` (512 MiB): one constant that folding materializes (and the .xmodel then
  stores). The largest folded weight of the light models is VGG-19's first FC layer, 411 MB.
- `MAX_FOLDED_BYTES` (2 GiB): all constants folding materializes in one model (VGG-19: 575 MB).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_TENSOR_BYTES = 16 << 30
MAX_CONST_BYTES = 512 << 20
MAX_FOLDED_BYTES = 2 << 30
#: Element counts are Python ints here; a shape whose count exceeds int64 is refused outright.
_INT64_MAX = (1 << 63) - 1


def fmt_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def tensor_bytes(shape: Sequence[int], dtype: np.dtype | str) -> int:
    """Bytes of a tensor (exact, Python ints: no overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def check_tensor_size(shape: Sequence[int], dtype: np.dtype | str, what: str,
                      error: type[Exception], limit: int = MAX_TENSOR_BYTES) -> int:
    """The tensor's bytes if its shape is sane and at most ``limit``; ``error`` naming
    ``what`` otherwise (a negative or non-integer dimension, an element count that overflows
    int64, or too many bytes)."""
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise error(f"{what}: shape {list(shape)} has an invalid dimension {d!r}")
        dims.append(int(d))
    count = math.prod(dims)
    if count > _INT64_MAX:
        raise error(f"{what}: shape {dims} has {count} elements, which overflows int64")
    nbytes = count * np.dtype(dtype).itemsize
    if nbytes > limit:
        raise error(f"{what}: shape {dims} ({np.dtype(dtype).name}) is {fmt_bytes(nbytes)}, "
                    f"above the compiler's limit of {fmt_bytes(limit)} per tensor; the model "
                    "declares a tensor no card or host here can hold")
    return nbytes

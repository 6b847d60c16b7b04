"""Keep OpenBLAS on the calling thread while the functional model multiplies.

The model's batched GEMM (pyhost/accel/model.py) does many thin matrix products ([rows, T*N] x
[T*N, N]); OpenBLAS splits them across threads, whose start-up and spinning cost far more than
the product, and on a shared machine several times more again (25x CPU time measured on a busy
2-core machine). `single_thread()` sets OpenBLAS's thread count for the calling thread only
(`openblas_set_num_threads_local`, OpenBLAS >= 0.3.27) for the duration and restores it; where
numpy uses another BLAS, or an older OpenBLAS, it does nothing. Results never depend on it: the
model's products are exact in floating point whatever the order of the sums.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from pathlib import Path

_setter: object | None = None
_looked = False


def _find() -> object | None:
    """`openblas_set_num_threads_local` of the OpenBLAS numpy loaded, if any."""
    import numpy  # noqa: F401  (loads its BLAS)

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    libs = sorted({line.split()[-1] for line in maps.splitlines()
                   if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    for lib in libs:
        try:
            fn = ctypes.CDLL(lib).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes = (ctypes.c_int,)
        fn.restype = ctypes.c_int
        return fn
    return None


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """OpenBLAS calls made by this thread inside the block run on it alone."""
    global _setter, _looked
    if not _looked:
        _setter, _looked = _find(), True
    if _setter is None:
        yield
        return
    before = _setter(1)  # type: ignore[operator]
    try:
        yield
    finally:
        _setter(before if before > 0 else 0)  # type: ignore[operator]

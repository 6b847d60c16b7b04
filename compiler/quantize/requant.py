"""The quantizer's view of fixed-point requantization: pyhost.fixedpoint (the accelerator's
arithmetic, defined once) with the compiler's errors, and the float reference it approximates.

See pyhost/fixedpoint.py for the representation: a real multiplier M ~= m * 2**-s with an int32
``m`` in [2**30, 2**31), applied as ``(acc * m + 2**(s - 1)) >> s``, within 1 LSB of
round(acc * M).
"""

from __future__ import annotations

import numpy as np

from compiler.errors import QuantizationError
from pyhost import fixedpoint
from pyhost.fixedpoint import rounding_shift

__all__ = ["quantize_multiplier", "quantize_multipliers", "requantize", "requantize_reference",
           "rounding_shift"]


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(int32 multiplier, right shift) for a real multiplier ``m`` > 0; QuantizationError when
    it has no fixed-point form."""
    try:
        return fixedpoint.quantize_multiplier(m)
    except fixedpoint.FixedPointError as e:
        raise QuantizationError(str(e)) from None


def quantize_multipliers(ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier`: (int32 multipliers, int32 shifts)."""
    try:
        return fixedpoint.quantize_multipliers(ms)
    except fixedpoint.FixedPointError as e:
        raise QuantizationError(str(e)) from None


def requantize(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
               zero_point: int = 0, qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """int32 accumulators -> int8 (or [qmin, qmax]) the way the accelerator does it.

    ``multiplier``/``shift`` broadcast against ``acc`` (per-channel: shape (C, 1, 1)).
    """
    acc = np.asarray(acc)
    if acc.dtype.kind not in "iu":
        raise QuantizationError(f"requantize expects integer accumulators, got {acc.dtype}")
    if np.any(np.abs(acc.astype(np.int64)) > 2**31):
        raise QuantizationError("accumulator exceeds the int32 range; the layer is too deep "
                                "for a 32-bit accumulator")
    y = fixedpoint.requantize_lanes(acc, multiplier, shift, zero_point, qmin, qmax)
    return y.astype(np.int8 if (qmin, qmax) == (-128, 127) else np.int32)


def requantize_reference(acc: np.ndarray, m: np.ndarray | float, zero_point: int = 0,
                         qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """The float reference: clip(round_half_even(acc * m) + zp)."""
    y = np.rint(np.asarray(acc, np.float64) * np.asarray(m, np.float64)) + zero_point
    return np.clip(y, qmin, qmax).astype(np.int64)

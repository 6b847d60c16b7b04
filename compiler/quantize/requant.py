"""Fixed-point requantization, as an integer accelerator computes it.

A real multiplier M > 0 (e.g. s_in * s_w / s_out) is represented as an int32 ``multiplier`` m
in [2**30, 2**31) and a right ``shift`` s with M ~= m * 2**-s, so that

    y = (acc * m + 2**(s - 1)) >> s        (int64 product, arithmetic shift)

rounds acc * M to the nearest integer, ties toward +infinity ("round half up"). The relative
error of m is below 2**-31, so for every result in the int8 range the integer value equals the
float reference round(acc * M) except possibly at exact ties, i.e. within 1 LSB.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.errors import QuantizationError

#: The multiplier's fractional bits: m = round(frac * 2**31) with frac in [0.5, 1).
MULT_BITS = 31
#: Largest right shift an int64 datapath allows with a 31-bit multiplier.
MAX_SHIFT = 62


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(int32 multiplier, right shift) for a real multiplier ``m`` > 0."""
    if not math.isfinite(m) or m <= 0:
        raise QuantizationError(f"requantization multiplier {m!r} must be finite and > 0 "
                                "(a zero or negative scale reached the requantizer)")
    frac, exp = math.frexp(m)  # m = frac * 2**exp, frac in [0.5, 1)
    mult = round(frac * (1 << MULT_BITS))
    if mult == 1 << MULT_BITS:  # frac rounded up to 1.0
        mult //= 2
        exp += 1
    shift = MULT_BITS - exp
    if shift < 0:
        raise QuantizationError(f"requantization multiplier {m:g} is >= 2**31; the scales are "
                                "inconsistent (check the calibration ranges)")
    if shift > MAX_SHIFT:
        # below 2**-31 every int32 accumulator maps to 0: represent it as exactly that
        return 0, 0
    return int(mult), int(shift)


def quantize_multipliers(ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier`: (int32 multipliers, int32 shifts)."""
    pairs = [quantize_multiplier(float(m)) for m in np.asarray(ms, np.float64).reshape(-1)]
    mult = np.array([p[0] for p in pairs], np.int32)
    shift = np.array([p[1] for p in pairs], np.int32)
    return mult, shift


def rounding_shift(prod: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """(prod + 2**(shift-1)) >> shift on int64, with shift 0 meaning no rounding term."""
    prod = np.asarray(prod, np.int64)
    s = np.asarray(shift, np.int64)
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return np.right_shift(prod + half, s)


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
    prod = acc.astype(np.int64) * np.asarray(multiplier, np.int64)
    y = rounding_shift(prod, shift) + zero_point
    return np.clip(y, qmin, qmax).astype(np.int8 if (qmin, qmax) == (-128, 127) else np.int32)


def requantize_reference(acc: np.ndarray, m: np.ndarray | float, zero_point: int = 0,
                         qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """The float reference: clip(round_half_even(acc * m) + zp)."""
    y = np.rint(np.asarray(acc, np.float64) * np.asarray(m, np.float64)) + zero_point
    return np.clip(y, qmin, qmax).astype(np.int64)

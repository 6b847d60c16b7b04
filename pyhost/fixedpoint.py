"""Fixed-point requantization as the accelerator computes it, defined once for the functional
model (ALU SHR and REQ), the quantizer and the kernels' reference arithmetic.

A real multiplier M > 0 (e.g. s_in * s_w / s_out) is represented as an int32 ``multiplier`` m
in [2**30, 2**31) and a right ``shift`` s with M ~= m * 2**-s, so that

    y = (acc * m + 2**(s - 1)) >> s        (exact product, arithmetic shift)

rounds acc * M to the nearest integer, ties toward +infinity ("round half up"). The relative
error of m is below 2**-31, so for every result in the int8 range the integer value equals the
float reference round(acc * M) except possibly at exact ties, i.e. within 1 LSB.
"""

from __future__ import annotations

import math

import numpy as np

#: The multiplier's fractional bits: m = round(frac * 2**31) with frac in [0.5, 1).
MULT_BITS = 31
#: Largest right shift `quantize_multiplier` produces and the kernels emit: an int64 product of
#: an int32 accumulator and a 31-bit multiplier (REQ itself takes the low 6 bits, 0..63).
MAX_SHIFT = 62


class FixedPointError(ValueError):
    """A real multiplier that has no fixed-point form (zero, negative, not finite, >= 2**31)."""


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(int32 multiplier, right shift) for a real multiplier ``m`` > 0."""
    if not math.isfinite(m) or m <= 0:
        raise FixedPointError(f"requantization multiplier {m!r} must be finite and > 0 "
                              "(a zero or negative scale reached the requantizer)")
    frac, exp = math.frexp(m)  # m = frac * 2**exp, frac in [0.5, 1)
    mult = round(frac * (1 << MULT_BITS))
    if mult == 1 << MULT_BITS:  # frac rounded up to 1.0
        mult //= 2
        exp += 1
    shift = MULT_BITS - exp
    if shift < 0:
        raise FixedPointError(f"requantization multiplier {m:g} is >= 2**31; the scales are "
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


def rounding_shift(prod: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """(prod + 2**(shift-1)) >> shift, exactly, for int64 ``prod`` with |prod| <= 2**62 and
    shifts 0..63 (0: no rounding term).

    The sum needs 65 bits only for prod = 2**62 with shift 63 (2**62 + 2**62 leaves int64), where
    the exact result is 1; that case is computed separately, as the RTL's 65-bit adder does.
    """
    p = np.asarray(prod, np.int64)
    s = np.asarray(shift, np.int64)
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    with np.errstate(over="ignore"):
        y = np.right_shift(p + half, s)
    return np.where((p == 1 << 62) & (s == 63), 1, y)


def requantize_lanes(acc: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
                     zero_point: int, lo: int, hi: int) -> np.ndarray:
    """min(max(rounding_shift(acc * multiplier, shift) + zero_point, lo), hi) on int64 values of
    int32 range (the REQ formula of docs/isa.md; lo > hi gives hi). Returns int64."""
    prod = np.asarray(acc, np.int64) * np.asarray(multiplier, np.int64)  # |prod| <= 2**62
    y = rounding_shift(prod, shift) + zero_point
    return np.minimum(np.maximum(y, lo), hi)

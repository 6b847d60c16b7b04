"""Quantization parameters: how activations and weights map to int8."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.errors import QuantizationError

#: int8 range of activations; weights use the symmetric [-127, 127] so that negating a weight
#: never overflows.
QMIN, QMAX = -128, 127
WMAX = 127


@dataclass(frozen=True)
class ActQuant:
    """Activation parameters: real = scale * (q - zero_point), per tensor; or, with
    ``feature_scales`` (one per element of the last axis, zero point 0), real =
    feature_scales[f] * q for feature f: the per-feature form of a transformer's (1, tokens,
    features) activations, whose few outlier features would leave the others a handful of
    levels at one scale per tensor. ``scale`` is then the largest feature scale."""

    scale: float
    zero_point: int
    feature_scales: tuple[float, ...] | None = None

    def to_attr(self) -> dict[str, object]:
        d: dict[str, object] = {"dtype": "int8", "scale": self.scale,
                                "zero_point": self.zero_point}
        if self.feature_scales is not None:
            d["feature_scales"] = list(self.feature_scales)
        return d

    @classmethod
    def from_attr(cls, d: dict[str, object]) -> ActQuant:
        fs = d.get("feature_scales")
        return cls(float(d["scale"]), int(d["zero_point"]),  # type: ignore[arg-type]
                   tuple(float(v) for v in fs) if fs is not None else None)  # type: ignore

    @property
    def scales(self) -> np.ndarray | float:
        """The scale to divide by, broadcast along the last axis when per feature."""
        if self.feature_scales is None:
            return self.scale
        return np.asarray(self.feature_scales, np.float64)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        q = np.rint(np.asarray(x, np.float64) / self.scales) + self.zero_point
        return np.clip(q, QMIN, QMAX).astype(np.int8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return ((q.astype(np.int64) - self.zero_point) * self.scales).astype(np.float32)


def feature_params(absmax: np.ndarray, ratio: float = math.inf) -> ActQuant:
    """Per-feature symmetric parameters from each feature's largest magnitude, no scale below
    the largest / ``ratio`` (see `quantizer._feature_ratio`)."""
    a = np.asarray(absmax, np.float64).reshape(-1)
    if not np.isfinite(a).all():
        raise QuantizationError("a feature's calibrated range is not finite")
    if a.size and math.isfinite(ratio):
        a = np.maximum(a, float(a.max()) / ratio)
    fs = tuple(max(f32(v / QMAX), MIN_SCALE) if v > 0 else 1.0 for v in a)
    return ActQuant(max(fs), 0, fs)


def f32(x: float) -> float:
    """Round a scale to float32, so that every consumer (numpy, hardware tables) sees the
    same value."""
    return float(np.float32(x))


#: Smallest activation scale: the smallest normal float32. A range narrower than 255 times this
#: (every value within about 3e-36 of 0) is quantized with it: the tensor is 0 in int8, as it is
#: to float32 precision.
MIN_SCALE = float(np.finfo(np.float32).tiny)
#: Largest activation scale: a range whose scale would not be a finite float32 has no int8 form.
MAX_SCALE = float(np.finfo(np.float32).max)


def activation_params(lo: float, hi: float, symmetric: bool) -> ActQuant:
    """Parameters covering [lo, hi] (widened to include 0, so that 0 is exact).

    QuantizationError for a range that is not finite or whose scale is beyond float32; a range
    too narrow for a normal float32 scale gets `MIN_SCALE` (never a zero or subnormal scale,
    which would divide by zero downstream)."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise QuantizationError(f"the calibrated range [{lo:g}, {hi:g}] is not finite")
    if lo > hi:
        raise QuantizationError(f"the calibrated range [{lo:g}, {hi:g}] is empty")
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if symmetric:
        amax = max(-lo, hi)
        if amax == 0:
            return ActQuant(1.0, 0)
        return ActQuant(_scale(amax / QMAX, lo, hi), 0)
    if hi == lo:
        return ActQuant(1.0, 0)
    scale = _scale((hi - lo) / (QMAX - QMIN), lo, hi)
    zp = int(np.clip(round(QMIN - lo / scale), QMIN, QMAX))
    return ActQuant(scale, zp)


def _scale(s: float, lo: float, hi: float) -> float:
    if not math.isfinite(s) or s > MAX_SCALE:
        raise QuantizationError(f"the calibrated range [{lo:g}, {hi:g}] is too wide for a "
                                "float32 scale (values beyond float32)")
    with np.errstate(over="ignore"):
        v = f32(s)
    if not math.isfinite(v):
        raise QuantizationError(f"the calibrated range [{lo:g}, {hi:g}] is too wide for a "
                                "float32 scale (values beyond float32)")
    return max(v, MIN_SCALE)


def weight_params(w: np.ndarray, axis: int, min_scale: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8: (int8 weights, float32 scales along ``axis``).

    ``min_scale`` (per channel, optional) raises a channel's scale to at least that value (the
    quantizer's remedy for a bias that would overflow int32 at the weights' own scale).
    QuantizationError for weights that are not finite."""
    w = np.asarray(w)
    if w.dtype.kind != "f":
        w = w.astype(np.float64)        # (integers: -min could overflow in their own type)
    axes = tuple(i for i in range(w.ndim) if i != axis)
    # max |w| per channel from its max and min (a NaN or Inf weight makes it not finite),
    # taken in w's own type: widening to float64 is exact and keeps the order, so these are
    # the float64 extremes without a float64 copy of the weights
    amax = (np.maximum(w.max(axis=axes), -w.min(axis=axes)) if axes else np.abs(w)) \
        .astype(np.float64)
    if not np.isfinite(amax).all():
        raise QuantizationError("the weights are not all finite (NaN or Inf)")
    scale = np.where(amax > 0, amax / WMAX, 1.0)
    if min_scale is not None:
        scale = np.maximum(scale, np.asarray(min_scale, np.float64))
    scale = np.maximum(scale.astype(np.float32), np.float32(MIN_SCALE))
    if min_scale is not None:
        # float32 rounding may land just below the requested minimum: step up one ulp
        low = scale.astype(np.float64) < np.asarray(min_scale, np.float64)
        scale = np.where(low, np.nextafter(scale, np.float32(np.inf)), scale).astype(np.float32)
    return _quantize_weights(w, scale.astype(np.float64), axis), scale


#: Largest float64 block `_quantize_weights` works on at once.
QUANTIZE_BLOCK_BYTES = 8 << 20


def _quantize_weights(w: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    """clip(rint(w / scale), -WMAX, WMAX) as int8 (``scale`` per channel along ``axis``),
    computed in float64 a block of the first axis at a time in one reused buffer: each element
    is exactly what the whole float64 computation gives, without an 8-byte copy of every
    weight (VGG-19's first FC: 822 MB)."""
    out = np.empty(w.shape, np.int8)
    if w.size == 0:
        return out
    shape = [1] * w.ndim
    shape[axis] = -1
    s = scale.reshape(shape)
    row = w[0].size if w.ndim else 1
    step = max(1, QUANTIZE_BLOCK_BYTES // (8 * max(row, 1)))
    wv, ov = (w, out) if w.ndim else (w.reshape(1), out.reshape(1))
    buf = np.empty((min(step, wv.shape[0]), *wv.shape[1:]), np.float64)
    for r0 in range(0, wv.shape[0], step):
        r1 = min(wv.shape[0], r0 + step)
        q = buf[:r1 - r0]
        sb = s[r0:r1] if axis == 0 and s.ndim else s
        np.divide(wv[r0:r1], sb, out=q)
        np.clip(np.rint(q, out=q), -WMAX, WMAX, out=q)
        ov[r0:r1] = q
    return out

"""Quantization parameters: how activations and weights map to int8."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: int8 range of activations; weights use the symmetric [-127, 127] so that negating a weight
#: never overflows.
QMIN, QMAX = -128, 127
WMAX = 127


@dataclass(frozen=True)
class ActQuant:
    """Per-tensor activation parameters: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int

    def to_attr(self) -> dict[str, object]:
        return {"dtype": "int8", "scale": self.scale, "zero_point": self.zero_point}

    @classmethod
    def from_attr(cls, d: dict[str, object]) -> ActQuant:
        return cls(float(d["scale"]), int(d["zero_point"]))  # type: ignore[arg-type]

    def quantize(self, x: np.ndarray) -> np.ndarray:
        q = np.rint(np.asarray(x, np.float64) / self.scale) + self.zero_point
        return np.clip(q, QMIN, QMAX).astype(np.int8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return ((q.astype(np.int64) - self.zero_point) * self.scale).astype(np.float32)


def f32(x: float) -> float:
    """Round a scale to float32, so that every consumer (numpy, hardware tables) sees the
    same value."""
    return float(np.float32(x))


def activation_params(lo: float, hi: float, symmetric: bool) -> ActQuant:
    """Parameters covering [lo, hi] (widened to include 0, so that 0 is exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if symmetric:
        amax = max(-lo, hi)
        return ActQuant(f32(amax / QMAX) if amax > 0 else 1.0, 0)
    if hi == lo:
        return ActQuant(1.0, 0)
    scale = f32((hi - lo) / (QMAX - QMIN))
    zp = int(np.clip(round(QMIN - lo / scale), QMIN, QMAX))
    return ActQuant(scale, zp)


def weight_params(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8: (int8 weights, float32 scales along ``axis``)."""
    w64 = np.asarray(w, np.float64)
    axes = tuple(i for i in range(w64.ndim) if i != axis)
    amax = np.abs(w64).max(axis=axes) if axes else np.abs(w64)
    scale = np.where(amax > 0, amax / WMAX, 1.0).astype(np.float32)
    shape = [1] * w64.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w64 / scale.astype(np.float64).reshape(shape)), -WMAX, WMAX)
    return q.astype(np.int8), scale

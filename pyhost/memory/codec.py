"""Reduced-precision transfer codecs: fp32 data crosses PCIe as int8 (affine), fp16 or bf16.

A tensor opts in with `allocate_tensor(..., precision=Fp16())` (or `Bf16()`, `Int8Affine()`,
`Int8Affine(channels=C)`). The host copy stays fp32; the card copy is the encoded form, so it also
takes less card memory. Int8 card copies are self-describing: a header of `channels` (scale fp32,
zero point int32) pairs precedes the int8 values, so a card-side consumer (or a card kernel that
updates the tensor) knows how to restore floats. Decoding happens where a float consumer needs the
data: on the host, when the tensor is written back or read.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from pyhost.memory.errors import PrecisionError

FP32 = 4


@dataclass(frozen=True)
class PrecisionReport:
    """Error of the last encoding of a tensor, measured against its fp32 host copy."""

    codec: str
    raw_bytes: int        # fp32 bytes on the host
    encoded_bytes: int    # bytes sent over PCIe and held on the card
    max_abs_error: float
    rms_error: float
    max_abs_value: float  # scale of the data, to judge the error against

    @property
    def relative_rms(self) -> float:
        rms = self.rms_error
        return rms / self.max_abs_value if self.max_abs_value else rms


class Codec(abc.ABC):
    """fp32 <-> narrow representation. Sizes are in bytes; `nbytes` is a multiple of 4."""

    name: str

    def check(self, nbytes: int) -> None:
        """Raise PrecisionError unless a tensor of `nbytes` fp32 bytes can use this codec."""
        if nbytes <= 0 or nbytes % FP32:
            raise PrecisionError(
                f"{self.name} transfer needs an fp32 tensor (a positive multiple of 4 bytes), "
                f"got {nbytes} bytes; allocate it without precision= to keep it bit-exact")

    @abc.abstractmethod
    def encoded_size(self, nbytes: int) -> int:
        """Bytes of the encoded form of `nbytes` fp32 bytes."""

    @abc.abstractmethod
    def encode(self, x: np.ndarray) -> np.ndarray:
        """fp32 array -> uint8 array of encoded_size bytes."""

    @abc.abstractmethod
    def decode(self, data: np.ndarray, nbytes: int) -> np.ndarray:
        """uint8 encoded bytes -> fp32 array of nbytes // 4 values."""

    def report(self, x: np.ndarray, encoded: np.ndarray) -> PrecisionReport:
        y = self.decode(encoded, x.nbytes)
        err = np.abs(y.astype(np.float64) - x.astype(np.float64))
        return PrecisionReport(self.name, x.nbytes, encoded.size,
                               float(err.max(initial=0.0)),
                               float(np.sqrt(np.mean(err * err))) if err.size else 0.0,
                               float(np.abs(x).max(initial=0.0)))

    def to_json(self) -> dict[str, object]:
        return {"codec": self.name}


@dataclass(frozen=True)
class Fp16(Codec):
    """IEEE half precision, round to nearest even (numpy's conversion)."""

    name: str = "fp16"

    def encoded_size(self, nbytes: int) -> int:
        return nbytes // 2

    def encode(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float16).view(np.uint8)

    def decode(self, data: np.ndarray, nbytes: int) -> np.ndarray:
        return data.view(np.float16).astype(np.float32)


@dataclass(frozen=True)
class Bf16(Codec):
    """bfloat16: the top 16 bits of fp32, rounded to nearest even (NaN stays NaN)."""

    name: str = "bf16"

    def encoded_size(self, nbytes: int) -> int:
        return nbytes // 2

    def encode(self, x: np.ndarray) -> np.ndarray:
        u = x.view(np.uint32).astype(np.uint64)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        nan = np.isnan(x)
        out = rounded.astype(np.uint16)
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)   # keep NaN a (quiet) NaN
        return out.view(np.uint8)

    def decode(self, data: np.ndarray, nbytes: int) -> np.ndarray:
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class Int8Affine(Codec):
    """Asymmetric int8: q = round(x / scale) + zero_point, per tensor or per channel.

    `channels` splits the fp32 values into that many equal rows (the first axis of the tensor,
    e.g. a weight's output channels), each with its own scale and zero point. The encoded form is
    `channels` (scale fp32, zero point int32) pairs followed by the int8 values.
    """

    channels: int = 1
    name: str = "int8"

    def check(self, nbytes: int) -> None:
        super().check(nbytes)
        if self.channels < 1 or (nbytes // FP32) % self.channels:
            raise PrecisionError(
                f"int8 per-channel transfer with {self.channels} channels needs a value count "
                f"divisible by it; {nbytes // FP32} values are not. Pass the tensor's first "
                "dimension as channels")

    def encoded_size(self, nbytes: int) -> int:
        return 8 * self.channels + nbytes // FP32

    def encode(self, x: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(x)):
            raise PrecisionError("int8 transfer cannot represent inf or NaN; use fp16/bf16 or "
                                 "no precision= for this tensor")
        rows = x.reshape(self.channels, -1).astype(np.float64)
        lo = np.minimum(rows.min(axis=1), 0.0)
        hi = np.maximum(rows.max(axis=1), 0.0)     # 0 is exactly representable (padding, relu)
        scale = (hi - lo) / 255.0
        scale[scale == 0] = 1.0
        scale = scale.astype(np.float32).astype(np.float64)
        zp = np.clip(np.round(-128 - lo / scale), -128, 127).astype(np.int32)
        q = np.clip(np.round(rows / scale[:, None]) + zp[:, None], -128, 127).astype(np.int8)
        head = np.empty(self.channels, dtype=[("scale", "<f4"), ("zp", "<i4")])
        head["scale"], head["zp"] = scale, zp
        return np.concatenate([head.view(np.uint8), q.reshape(-1).view(np.uint8)])

    def decode(self, data: np.ndarray, nbytes: int) -> np.ndarray:
        head = data[:8 * self.channels].view([("scale", "<f4"), ("zp", "<i4")])
        q = data[8 * self.channels:].view(np.int8).reshape(self.channels, -1)
        y = (q.astype(np.float32) - head["zp"].astype(np.float32)[:, None]) \
            * head["scale"][:, None]
        return y.reshape(-1).astype(np.float32)

    def to_json(self) -> dict[str, object]:
        return {"codec": self.name, "channels": self.channels}


def codec_from_json(obj: dict[str, object] | None) -> Codec | None:
    """The codec a trace record names (None: bit-exact)."""
    if obj is None:
        return None
    name = obj.get("codec")
    if name == "fp16":
        return Fp16()
    if name == "bf16":
        return Bf16()
    if name == "int8":
        return Int8Affine(channels=int(obj.get("channels", 1)))   # type: ignore[arg-type]
    raise PrecisionError(f"unknown codec {name!r}; use fp16, bf16 or int8")

"""What a kernel is made of (`Ref`, `TensorInfo`, `ConstBlob`, `Kernel`), the errors, the ISA
field limits the kernels keep to, and the constant blob builder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyhost.accel import layout
from pyhost.fixedpoint import MAX_SHIFT
from pyhost.spec import isa
from pyhost.spec.accel import DEFAULT_CONFIG
from pyhost.spec.isa import Insn, Opcode

Quant = Mapping[str, Any]
#: The default accelerator build (the ISA's default parameters).
DEFAULT_CFG = DEFAULT_CONFIG

class AccelKernelError(ValueError):
    """A layer that the accelerator kernels cannot map (shape, parameters or scratchpad sizes);
    the message says what does not fit and what would."""


# --- values a kernel is made of ----------------------------------------------------------------

@dataclass(frozen=True)
class Ref:
    """Where a tensor or blob lives: slot register `slot` plus a byte `offset`."""

    slot: int
    offset: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.slot < isa.NUM_SLOTS:
            raise AccelKernelError(f"slot {self.slot} is not one of the {isa.NUM_SLOTS} slot "
                                   "registers")
        if not 0 <= self.offset < 1 << 32:
            raise AccelKernelError(f"offset {self.offset} is not a 32-bit byte offset")

    def __add__(self, delta: int) -> Ref:
        return Ref(self.slot, self.offset + int(delta))


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a kernel in card memory.

    `shape` is the logical NCHW shape (a matrix (M, K) is (M, K, 1, 1)); the bytes are the
    blocked layout of `layout` with `elem` bytes per lane; padding channels hold `fill`.
    """

    name: str
    ref: Ref
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fill: int


@dataclass(frozen=True)
class ConstBlob:
    """The constants of a kernel, to be copied to card memory at `ref` before it runs."""

    ref: Ref
    data: bytes
    #: (name, byte offset in the blob, bytes) of each section.
    sections: tuple[tuple[str, int, int], ...]

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Kernel:
    """One layer: instructions without END (the kernels give an `isa.Stream`; any sequence of
    Insn will do), its tensors, constants and tiling."""

    name: str
    insns: Sequence[Insn]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    consts: ConstBlob | None
    #: Tile parameters (rows per tile, blocks per group, steps, ...) for reports and docs.
    tiling: Mapping[str, Any] = field(default_factory=dict)


# --- field limits (from the ISA formats, never by hand) -------------------------------------------

def _limit(op: Opcode, name: str) -> int:
    for f in isa.FORMATS[op]:
        if f.name == name:
            return (1 << (f.width - 1)) - 1 if f.signed else (1 << f.width) - 1
    raise KeyError(f"{op.name}.{name}")


_LOOP = _limit(Opcode.GEMM, "outer")          # GEMM/ALU outer and inner
_SO = _limit(Opcode.GEMM, "acc_so")           # outer strides
_SI = _limit(Opcode.GEMM, "inp_si")           # inner strides
_XY = _limit(Opcode.LOAD, "x_size")           # LOAD/STORE x_size, y_size
_YSTRIDE = _limit(Opcode.LOAD, "y_stride")
_PAD = _limit(Opcode.LOAD, "pad_top")
_IMM_MAX = _limit(Opcode.ALU, "imm")
_IMM_MIN = -_IMM_MAX - 1
assert _LOOP == _limit(Opcode.ALU, "inner") and _XY == _limit(Opcode.LOAD, "y_size")


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise AccelKernelError(msg)


def _int8(name: str, v: int) -> int:
    v = int(v)
    _need(-128 <= v <= 127, f"{name} = {v} is not an int8")
    return v


def _bounds(act: tuple[int, int] | None) -> tuple[int, int]:
    lo, hi = act if act is not None else (-128, 127)
    lo, hi = _int8("activation lower bound", lo), _int8("activation upper bound", hi)
    _need(lo <= hi, f"activation bounds lo={lo} > hi={hi}")
    return lo, hi


def relu_bounds(output_zero_point: int) -> tuple[int, int]:
    """REQ bounds of a fused ReLU: nothing below the output zero point (real 0)."""
    return _int8("output zero point", output_zero_point), 127


def clip_bounds(lo: float, hi: float, output_scale: float, output_zero_point: int
                ) -> tuple[int, int]:
    """REQ bounds of a fused Clip(lo, hi) (real values) in the quantized output domain."""
    q = [int(np.clip(np.rint(v / output_scale) + output_zero_point, -128, 127)) for v in (lo, hi)]
    return q[0], q[1]


def _check_ref(r: Ref, elem: int, what: str) -> None:
    _need(r.offset % elem == 0, f"{what} offset {r.offset:#x} is not a multiple of its element "
          f"size {elem} bytes (the LOAD/STORE would be MISALIGNED)")


def _requant_rows(mult: np.ndarray, shift: np.ndarray, nb: int, n: int) -> np.ndarray:
    """ACC rows for REQ: per block, the multiplier row then the shift row (padding lanes 0)."""
    m = np.asarray(mult, np.int64).reshape(-1)
    s = np.asarray(shift, np.int64).reshape(-1)
    _need(m.size == s.size, f"{m.size} multipliers but {s.size} shifts")
    _need(bool(((m >= 0) & (m < 2**31)).all()), "requantization multipliers must be in "
          "[0, 2**31) (pyhost/fixedpoint.py)")
    _need(bool(((s >= 0) & (s <= MAX_SHIFT)).all()),
          f"requantization shifts must be in [0, {MAX_SHIFT}]")
    rows = np.zeros((nb, 2, n), np.int32)
    rows[:, 0] = layout.lane_rows(m, n)[:nb] if m.size else 0
    rows[:, 1] = layout.lane_rows(s, n)[:nb] if s.size else 0
    return rows.reshape(2 * nb, n)


class _Blob:
    """Builds a ConstBlob: sections aligned to a weight tile (N*N bytes, the largest element)."""

    def __init__(self, ref: Ref, n: int) -> None:
        _check_ref(ref, n * n, "constant blob")
        self.ref = ref
        self.align = n * n
        #: the sections and their padding, joined once by `done` (a layer's weights can be
        #: 100 MB: VGG-19's first FC)
        self.parts: list[bytes] = []
        self.size = 0
        self.sections: list[tuple[str, int, int]] = []

    def add(self, name: str, data: bytes) -> int:
        """Append a section; its offset from the slot base (for LOAD.offset)."""
        pad = -self.size % self.align
        if pad:
            self.parts.append(bytes(pad))
        off = self.size + pad
        self.parts.append(bytes(data))
        self.size = off + len(data)
        self.sections.append((name, off, len(data)))
        return self.ref.offset + off

    def done(self) -> ConstBlob:
        return ConstBlob(self.ref, b"".join(self.parts), tuple(self.sections))

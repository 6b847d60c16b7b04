"""The accelerator's software ABI: how a compiled program meets the card.

A subgraph compiled for the accelerator is a position-independent program that addresses card
memory only through the 16 slot registers: slot 0 holds its constant blob, slot 1 a scratch arena
for the activations that stay inside it, slots 2.. its external inputs and then outputs, each at
offset 0 (`CONST_SLOT`, `SCRATCH_SLOT`, `FIRST_IO_SLOT`). Every tensor is aligned to
`card_align(n)`. The compiler plugin writes this contract into the subgraph's ``accel_*``
attributes (`IoSpec` per external tensor); the runtime reads it back as an `AccelImage`, binds the
slots to wherever the memory manager placed the tensors and starts the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyhost.accel import layout
from pyhost.spec import isa
from pyhost.spec.accel import BEAT_BYTES, AccelConfig


class AbiError(ValueError):
    """A subgraph's accelerator attributes are missing or malformed (recompile it)."""


#: Slot registers of an accelerator subgraph: constants, scratch, then inputs and outputs.
CONST_SLOT, SCRATCH_SLOT, FIRST_IO_SLOT = 0, 1, 2
MAX_IO = isa.NUM_SLOTS - FIRST_IO_SLOT
#: The memory manager's allocation unit: one bus beat, or a whole weight tile when N*N is larger
#: (a slot base must be a multiple of the largest element a LOAD reads through it).
MIN_ALIGN = BEAT_BYTES
#: The accelerator addresses card memory with 32 bits.
ACCEL_SPACE = isa.ADDR_SPACE
#: The attribute that marks a subgraph compiled for the accelerator.
PROGRAM_ATTR = "accel_program"


def align_up(x: int, a: int) -> int:
    return -(-int(x) // a) * a


def card_align(n: int) -> int:
    """Alignment of every accelerator tensor in card memory for an array of size N."""
    return max(MIN_ALIGN, n * n)



@dataclass(frozen=True)
class IoSpec:
    """An external tensor of an accelerator subgraph (one entry of ``accel_io``).

    Its bytes are the blocked int8 layout of `pyhost.accel.layout` ("nchwc": channel blocks of
    N lanes; a (M, K) matrix is (M, K, 1, 1)) with real = scale * (q - zero_point); padding lanes
    hold `fill`.
    """

    name: str
    role: str                 # "in" | "out"
    slot: int
    nbytes: int
    shape: tuple[int, ...]
    scale: float
    zero_point: int
    n: int
    fill: int
    layout: str = "nchwc"

    def to_attr(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_attr(cls, d: Mapping[str, Any]) -> IoSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(names - set(d) - {"layout"})
        if missing:
            raise AbiError(f"accel_io entry {dict(d)!r} lacks {missing}; recompile")
        spec = cls(**{k: d[k] for k in names if k in d})
        spec = dataclasses.replace(spec, shape=tuple(int(v) for v in spec.shape))
        if spec.layout != "nchwc" or spec.role not in ("in", "out"):
            raise AbiError(f"accel_io entry {spec.name!r}: layout {spec.layout!r} / "
                           f"role {spec.role!r} unknown to this runtime; recompile")
        return spec

    @property
    def nchw(self) -> tuple[int, int, int, int]:
        return layout.nchw_view(self.shape)

    def pack(self, x: np.ndarray) -> np.ndarray:
        """Float array -> quantized blocked bytes (uint8 array of `nbytes`)."""
        x = np.asarray(x)
        if x.shape != self.shape:
            raise AbiError(f"tensor {self.name!r} is {x.shape}, expected {self.shape}")
        q = np.clip(np.rint(x.astype(np.float64) / self.scale) + self.zero_point, -128, 127)
        raw = layout.pack_act(q.astype(np.int8).reshape(self.nchw), self.n, self.zero_point)
        return np.frombuffer(raw, np.uint8)

    def unpack(self, raw: np.ndarray | bytes) -> np.ndarray:
        """Blocked bytes -> the dequantized float32 array of `shape`."""
        q = layout.unpack_act(raw, self.nchw, self.n).reshape(self.shape)
        return ((q.astype(np.int64) - self.zero_point) * self.scale).astype(np.float32)


@dataclass(frozen=True)
class AccelImage:
    """The ``accel_*`` attributes of one accelerator subgraph, checked."""

    name: str
    program: bytes
    consts: bytes
    scratch_bytes: int
    io: tuple[IoSpec, ...]
    config: AccelConfig
    stats: Mapping[str, Any]

    @classmethod
    def from_attrs(cls, name: str, a: Mapping[str, Any]) -> AccelImage:
        """The image in a subgraph's attributes (``name`` for messages); AbiError when one is
        missing or malformed."""
        need = ("accel_program", "accel_consts", "accel_scratch_bytes", "accel_io",
                "accel_config")
        missing = [k for k in need if k not in a]
        if missing:
            raise AbiError(f"subgraph {name!r} lacks {missing}: it was not compiled "
                           "by the accel plugin (or by an older one); recompile")
        prog = a["accel_program"]
        if not isinstance(prog, bytes) or not prog or len(prog) % isa.INSN_BYTES:
            raise AbiError(f"subgraph {name!r}: accel_program is not a whole number "
                           f"of {isa.INSN_BYTES}-byte instructions")
        try:
            cfg = AccelConfig(**a["accel_config"])
        except (TypeError, ValueError) as e:
            raise AbiError(f"subgraph {name!r}: bad accel_config "
                           f"{a['accel_config']!r}: {e}") from None
        io = tuple(IoSpec.from_attr(d) for d in a["accel_io"])
        return cls(name, prog, bytes(a["accel_consts"]), int(a["accel_scratch_bytes"]), io,
                   cfg, dict(a.get("accel_stats") or {}))

    @property
    def inputs(self) -> list[IoSpec]:
        return [s for s in self.io if s.role == "in"]

    @property
    def outputs(self) -> list[IoSpec]:
        return [s for s in self.io if s.role == "out"]

    @property
    def insns(self) -> int:
        return len(self.program) // isa.INSN_BYTES

    def card_bytes(self, align: int) -> int:
        """Card bytes of one launch: program, constants, scratch, inputs, outputs."""
        return sum(align_up(x, align) for x in (len(self.program), len(self.consts),
                                                self.scratch_bytes,
                                                *(s.nbytes for s in self.io)))

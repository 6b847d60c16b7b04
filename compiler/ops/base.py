"""The op-definition interface: per op type, a shape function and a numpy reference kernel.

After XIR's OpDef registry and onnx/reference: one :class:`OpDef` per op type says how to
canonicalize the op's attributes, infer its output type from its inputs, and compute it. Shape
inference, constant folding, quantization calibration and the CPU runner all use the same
definitions, so they cannot disagree. Op semantics are those of ONNX at the graph's opset
(18 or newer; the frontend upgrades older models).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from compiler.errors import KernelError, ShapeInferenceError
from compiler.xir import Op


@dataclass(frozen=True)
class TensorType:
    """Static type of a tensor: shape and numpy dtype name."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)


Types = Sequence["TensorType | None"]
Values = Sequence["np.ndarray | None"]


class OpDef:
    """Definition of one op type. Subclasses set ``op_type`` and implement infer/run."""

    op_type: ClassVar[str] = ""
    #: whether constant folding may evaluate it (False for ops with side effects or randomness)
    foldable: ClassVar[bool] = True
    #: input positions a wide run (`CpuRunner(wide=True)`) may pass a large constant to in its
    #: own, narrower float type: the kernel widens it to float64 in blocks as it reads it
    narrow_inputs: ClassVar[frozenset[int]] = frozenset()

    def canonicalize(self, op: Op, ins: Types) -> None:
        """Fill defaulted attributes explicitly (e.g. resolve ``auto_pad``). Default: nothing."""

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        """Output type from input types and the values of constant inputs (None if unknown)."""
        raise NotImplementedError

    def run(self, op: Op, *xs: np.ndarray | None) -> np.ndarray:
        """Compute the output from positional inputs (None for an omitted optional input)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op_type})"


# ---- helpers shared by the op files ---------------------------------------------------------
def need(op: Op, ins: Types, i: int, what: str = "input") -> TensorType:
    """Input type ``i``, or a :class:`ShapeInferenceError` that names the op."""
    if i >= len(ins) or ins[i] is None:
        raise ShapeInferenceError(f"{describe(op)}: {what} #{i} is missing or has no known type")
    t = ins[i]
    assert t is not None
    return t


def need_value(op: Op, vals: Values, i: int, what: str) -> np.ndarray:
    """Value of constant input ``i`` (shape-determining inputs such as Reshape's ``shape``)."""
    if i >= len(vals) or vals[i] is None:
        raise ShapeInferenceError(
            f"{describe(op)}: its output shape depends on input #{i} ({what}), whose value is "
            "not known at compile time; the accelerator flow needs static shapes, so make that "
            "input a constant (or let constant folding compute it)")
    v = vals[i]
    assert v is not None
    return v


def describe(op: Op) -> str:
    node = op.attrs.get("onnx_node")
    return f"op {op.name!r} ({op.type}" + (f", ONNX node {node!r})" if node else ")")


def broadcast(op: Op, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeInferenceError(f"{describe(op)}: input shapes {list(shapes)} do not "
                                  "broadcast (numpy/ONNX multidirectional rules)") from None


def norm_axis(op: Op, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeInferenceError(f"{describe(op)}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def attr_ints(op: Op, key: str, default: Sequence[int] | None = None) -> list[int] | None:
    v = op.attrs.get(key)
    if v is None:
        return None if default is None else list(default)
    return [int(x) for x in v]


def kernel_fail(op: Op, msg: str) -> KernelError:
    return KernelError(f"{describe(op)}: {msg}")


def ints(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]

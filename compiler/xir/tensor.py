"""XIR tensors: the single output of an op, with a static shape, a dtype and attributes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from compiler.errors import XirError
from compiler.xir.attrs import AttrMap

if TYPE_CHECKING:
    from compiler.xir.op import Op


def canonical_dtype(dtype: object) -> str:
    """The numpy name of ``dtype`` (``"float32"``, ``"int8"``, ...), or :class:`XirError`."""
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as e:
        raise XirError(f"{dtype!r} is not a numpy dtype; use e.g. 'float32' or 'int8'") from e
    if dt.hasobject or dt.kind in "USV":
        raise XirError(f"dtype {dt} is not supported for tensors; use a numeric or bool dtype")
    return dt.name


class Tensor:
    """The output of one op. Created by :meth:`Graph.create_op`; named like its producer."""

    __slots__ = ("name", "_shape", "_dtype", "attrs", "_producer", "_uses")

    def __init__(self, name: str, shape: tuple[int, ...] | None, dtype: str, producer: Op) -> None:
        self.name = name
        self._shape: tuple[int, ...] | None = None
        self._dtype = canonical_dtype(dtype)
        self.shape = shape
        self.attrs = AttrMap(f"tensor {name!r}")
        self._producer = producer
        # consumer op -> number of input slots that read this tensor (Add(x, x) counts 2)
        self._uses: dict[Op, int] = {}

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Static shape, or None until shape inference has run."""
        return self._shape

    @shape.setter
    def shape(self, shape: tuple[int, ...] | list[int] | None) -> None:
        if shape is None:
            self._shape = None
            return
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise XirError(f"tensor {self.name!r}: shape {dims} has a negative dimension")
        self._shape = dims

    @property
    def dtype(self) -> str:
        """numpy dtype name."""
        return self._dtype

    @dtype.setter
    def dtype(self, dtype: object) -> None:
        self._dtype = canonical_dtype(dtype)

    @property
    def producer(self) -> Op:
        """The op whose output this tensor is."""
        return self._producer

    @property
    def consumers(self) -> list[Op]:
        """Ops reading this tensor, in creation order (each op once)."""
        return sorted(self._uses, key=lambda o: o.index)

    @property
    def ndim(self) -> int:
        if self._shape is None:
            raise XirError(f"tensor {self.name!r} has no shape yet; run shape inference first")
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        if self._shape is None:
            raise XirError(f"tensor {self.name!r} has no shape yet; run shape inference first")
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self._dtype).itemsize

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self._shape}, dtype={self._dtype})"

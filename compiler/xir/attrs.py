"""Attribute maps of XIR objects: the value types an .xmodel can store, checked when they are set.

Graphs, ops, tensors and subgraphs carry attributes the way Xilinx XIR does (``device``,
``runner``, kernel parameters, instruction streams). Values are normalized on assignment so that
what a pass stores is exactly what comes back from an .xmodel: tuples become lists, numpy scalars
become Python scalars, ``bytearray`` becomes ``bytes``; numpy arrays and ``bytes`` are kept and
are written as binary blobs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np

from compiler.errors import XirError

#: Keys of this form are reserved for the .xmodel encoding of arrays and bytes.
RESERVED_PREFIX = "__"


def normalize_value(value: Any, where: str) -> Any:
    """Return ``value`` in its canonical storable form, or raise :class:`XirError`."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject or value.dtype.kind in "USV":
            raise XirError(f"{where}: arrays of dtype {value.dtype} cannot be stored; "
                           "store numeric arrays, or a list of str")
        return value
    if isinstance(value, (list, tuple)):
        return [normalize_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str) or k.startswith(RESERVED_PREFIX):
                raise XirError(f"{where}: dict keys must be str not starting with "
                               f"{RESERVED_PREFIX!r}, got {k!r}")
            out[k] = normalize_value(v, f"{where}.{k}")
        return out
    raise XirError(f"{where}: a value of type {type(value).__name__} cannot be stored as an "
                   "attribute; use None, bool, int, float, str, bytes, a numpy array, or "
                   "lists/dicts of those")


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality that treats arrays as equal when dtype, shape and every element match."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        return (a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN round-trips as NaN
    return type(a) is type(b) and a == b


class AttrMap(MutableMapping[str, Any]):
    """A ``dict`` of attributes whose values are validated and normalized on assignment."""

    __slots__ = ("_data", "_owner")

    def __init__(self, owner: str, initial: Mapping[str, Any] | None = None) -> None:
        self._owner = owner
        self._data: dict[str, Any] = {}
        if initial:
            for k, v in initial.items():
                self[k] = v

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key or key.startswith(RESERVED_PREFIX):
            raise XirError(f"{self._owner}: attribute names must be non-empty str not starting "
                           f"with {RESERVED_PREFIX!r}, got {key!r}")
        self._data[key] = normalize_value(value, f"{self._owner} attr {key!r}")

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"AttrMap({self._data!r})"

    def copy(self) -> dict[str, Any]:
        """A plain-dict shallow copy (arrays are shared, not copied)."""
        return dict(self._data)

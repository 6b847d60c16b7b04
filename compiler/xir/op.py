"""XIR ops: a typed node with named input arguments, attributes and at most one output tensor.

Input arguments are named as in the op's schema (for ONNX-derived ops, the ONNX formal input
names: ``Conv(X, W, B)``), each holding a list of tensors so that variadic inputs
(``Concat(inputs...)``) fit. An omitted optional input is an empty list, so positions survive:
``Clip(input=[x], min=[], max=[m])``. Templates match on these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from compiler.errors import XirError
from compiler.xir.attrs import AttrMap
from compiler.xir.tensor import Tensor

if TYPE_CHECKING:
    from compiler.xir.graph import Graph


class Op:
    """One operation of a :class:`Graph`; create it with :meth:`Graph.create_op`."""

    __slots__ = ("name", "type", "attrs", "_inputs", "output", "graph", "index", "__weakref__")

    def __init__(self, graph: Graph, name: str, op_type: str, index: int,
                 attrs: Mapping[str, Any] | None) -> None:
        self.graph = graph
        self.name = name
        self.type = op_type
        #: creation order: the deterministic tie-break of every ordering in the compiler
        self.index = index
        self.attrs = AttrMap(f"op {name!r} ({op_type})", attrs)
        self._inputs: dict[str, list[Tensor]] = {}
        self.output: Tensor = None  # type: ignore[assignment]  # set right after by Graph

    # ---- inputs -------------------------------------------------------------------------
    @property
    def inputs(self) -> dict[str, tuple[Tensor, ...]]:
        """Argument name -> tensors, in argument order (a copy)."""
        return {k: tuple(v) for k, v in self._inputs.items()}

    @property
    def input_args(self) -> list[str]:
        return list(self._inputs)

    def input_tensors(self, arg: str | None = None) -> list[Tensor]:
        """Tensors of one argument, or of all arguments in order (repeats kept)."""
        if arg is not None:
            return list(self._inputs.get(arg, ()))
        return [t for ts in self._inputs.values() for t in ts]

    def input_ops(self, arg: str | None = None) -> list[Op]:
        """Producers of :meth:`input_tensors`, each once, in argument order."""
        seen: dict[Op, None] = {}
        for t in self.input_tensors(arg):
            seen.setdefault(t.producer, None)
        return list(seen)

    def positional_inputs(self) -> list[Tensor | None]:
        """Inputs in schema position order: an empty argument is None, a variadic one expands."""
        out: list[Tensor | None] = []
        for ts in self._inputs.values():
            if ts:
                out.extend(ts)
            else:
                out.append(None)
        while out and out[-1] is None:
            out.pop()
        return out

    def get_input_num(self, arg: str | None = None) -> int:
        return len(self.input_tensors(arg))

    def replace_input(self, old: Tensor, new: Tensor) -> None:
        """Make every slot that reads ``old`` read ``new`` instead."""
        self.graph._replace_input(self, old, new)

    # ---- outputs and attributes ---------------------------------------------------------
    @property
    def fanout_ops(self) -> list[Op]:
        """Ops that read this op's output, in creation order."""
        return self.output.consumers

    def has_attr(self, key: str) -> bool:
        return key in self.attrs

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def set_attr(self, key: str, value: Any) -> None:
        self.attrs[key] = value

    def __repr__(self) -> str:
        args = ", ".join(f"{k}=[{', '.join(t.name for t in v)}]" for k, v in self._inputs.items())
        return f"Op({self.name!r}, {self.type}, {args})"


def check_arg_name(op_name: str, arg: object) -> str:
    if not isinstance(arg, str) or not arg:
        raise XirError(f"op {op_name!r}: input argument names must be non-empty str, got {arg!r}")
    return arg

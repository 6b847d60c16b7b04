"""XIR graphs: an acyclic set of ops, each with one output tensor, plus the subgraph tree root.

Naming follows Xilinx XIR with Pythonic spelling: ``create_op``, ``get_op``, ``topological_sort``,
``root_subgraph``. An op and its output tensor share one name. Two op types are special: ``data``
(a model input, fed at run time) and ``const`` (its ``data`` attribute holds the value).
Ops may be created and removed only while the root subgraph has no children: passes run before
partitioning, plugins only group ops.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.errors import XirError
from compiler.xir.attrs import AttrMap
from compiler.xir.op import Op, check_arg_name
from compiler.xir.tensor import Tensor, canonical_dtype

if TYPE_CHECKING:
    from compiler.xir.subgraph import Subgraph

#: Op types with a fixed meaning in every stage of the compiler.
DATA = "data"
CONST = "const"

InputSpec = Mapping[str, "Op | Tensor | Sequence[Op | Tensor]"]


class Graph:
    """A named DAG of :class:`Op`; owns every op, tensor and subgraph made from it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.attrs = AttrMap(f"graph {name!r}")
        self._ops: dict[str, Op] = {}
        self._next_index = 0
        self._outputs: list[Tensor] = []
        self._root: Subgraph | None = None
        self._version = 0  # bumped by every structural change; invalidates the caches below
        self._topo_cache: tuple[int, list[Op], dict[Op, int]] | None = None

    # ---- construction -------------------------------------------------------------------
    def create_op(self, name: str, op_type: str, inputs: InputSpec | None = None,
                  attrs: Mapping[str, Any] | None = None, *,
                  shape: Sequence[int] | None = None, dtype: object = "float32") -> Op:
        """Add an op whose output tensor is called ``name``; inputs map argument -> op(s)."""
        self._check_mutable("create an op")
        if not isinstance(name, str) or not name:
            raise XirError(f"op names must be non-empty str, got {name!r}")
        if name in self._ops:
            raise XirError(f"graph {self.name!r} already has an op named {name!r}; op names "
                           "are unique (use Graph.unique_name() to derive one)")
        if not isinstance(op_type, str) or not op_type:
            raise XirError(f"op {name!r}: the op type must be a non-empty str, got {op_type!r}")
        op = Op(self, name, op_type, self._next_index, attrs)
        resolved: dict[str, list[Tensor]] = {}
        for arg, spec in (inputs or {}).items():
            check_arg_name(name, arg)
            items = [spec] if isinstance(spec, (Op, Tensor)) else list(spec)
            resolved[arg] = [self._as_tensor(x, name, arg) for x in items]
        self._next_index += 1
        op._inputs = resolved
        op.output = Tensor(name, tuple(shape) if shape is not None else None,
                           canonical_dtype(dtype), op)
        for ts in resolved.values():
            for t in ts:
                t._uses[op] = t._uses.get(op, 0) + 1
        self._ops[name] = op
        self._changed()
        return op

    def create_const(self, name: str, data: np.ndarray | float | int) -> Op:
        """A ``const`` op holding ``data`` (kept as given; shape and dtype follow it)."""
        arr = np.asarray(data)
        return self.create_op(name, CONST, attrs={"data": arr}, shape=arr.shape, dtype=arr.dtype)

    def create_data(self, name: str, shape: Sequence[int], dtype: object = "float32") -> Op:
        """A ``data`` op: a model input with a static shape."""
        return self.create_op(name, DATA, shape=shape, dtype=dtype)

    def remove_op(self, op: Op) -> None:
        """Remove an op nobody reads and that is not a graph output."""
        self._check_mutable("remove an op")
        self._check_owned(op)
        if op.output._uses:
            users = ", ".join(o.name for o in op.output.consumers)
            raise XirError(f"cannot remove op {op.name!r}: its output is read by {users}; "
                           "rewire them first (Graph.replace_uses)")
        if op.output in self._outputs:
            raise XirError(f"cannot remove op {op.name!r}: its output is a graph output")
        for ts in op._inputs.values():
            for t in ts:
                t._uses.pop(op, None)
        del self._ops[op.name]
        self._changed()

    def rewrite_op(self, op: Op, op_type: str, inputs: InputSpec | None = None,
                   attrs: Mapping[str, Any] | None = None) -> Op:
        """Turn ``op`` into another op in place: same name, same output tensor (so its readers
        and the graph outputs are untouched), new type, inputs and attributes."""
        self._check_mutable("rewrite an op")
        self._check_owned(op)
        resolved: dict[str, list[Tensor]] = {}
        for arg, spec in (inputs or {}).items():
            check_arg_name(op.name, arg)
            items = [spec] if isinstance(spec, (Op, Tensor)) else list(spec)
            resolved[arg] = [self._as_tensor(x, op.name, arg) for x in items]
        new_attrs = AttrMap(f"op {op.name!r} ({op_type})", attrs)
        sources = {t.producer for ts in resolved.values() for t in ts}
        if self._reaches(op, sources):
            raise XirError(f"rewriting op {op.name!r} would create a cycle: one of its new "
                           "inputs depends on it")
        self._set_inputs(op, resolved)
        op.type, op.attrs = op_type, new_attrs
        self._changed()
        return op

    def make_const(self, op: Op, data: np.ndarray) -> Op:
        """Replace ``op`` in place by a ``const`` op holding ``data`` (constant folding)."""
        arr = np.asarray(data)
        self.rewrite_op(op, CONST, None, {"data": arr})
        op.output.shape = arr.shape
        op.output.dtype = arr.dtype
        return op

    def _set_inputs(self, op: Op, inputs: dict[str, list[Tensor]]) -> None:
        for ts in op._inputs.values():
            for t in ts:
                t._uses.pop(op, None)
        op._inputs = inputs
        for ts in inputs.values():
            for t in ts:
                t._uses[op] = t._uses.get(op, 0) + 1

    def replace_uses(self, old: Tensor, new: Tensor, *, exclude: Iterable[Op] = ()) -> None:
        """Make every reader of ``old`` (and the graph outputs) use ``new`` instead."""
        self._check_mutable("rewire ops")
        skip = set(exclude)
        for consumer in old.consumers:
            if consumer not in skip:
                self._replace_input(consumer, old, new)
        self._outputs = [new if t is old else t for t in self._outputs]
        self._changed()

    def _replace_input(self, op: Op, old: Tensor, new: Tensor) -> None:
        self._check_mutable("rewire ops")
        self._check_owned(op)
        self._check_owned(new.producer)
        if op not in old._uses:
            return
        if self._reaches(op, {new.producer}):
            raise XirError(f"making op {op.name!r} read {new.name!r} instead of {old.name!r} "
                           "would create a cycle")
        n = 0
        for ts in op._inputs.values():
            for i, t in enumerate(ts):
                if t is old:
                    ts[i] = new
                    n += 1
        if not n:
            return
        old._uses.pop(op, None)
        new._uses[op] = new._uses.get(op, 0) + n
        self._changed()

    def _reaches(self, start: Op, targets: set[Op]) -> bool:
        """Whether any of ``targets`` is ``start`` or depends on it (forward search).

        Ops without inputs (const, data) cannot depend on anything, so they are skipped, which
        keeps constant folding and weight rewrites free of graph-wide searches.
        """
        targets = {t for t in targets if t is start or t._inputs and any(t._inputs.values())}
        if not targets:
            return False
        if start in targets:
            return True
        seen = {start}
        stack = [start]
        while stack:
            for c in stack.pop().output._uses:
                if c in targets:
                    return True
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return False

    def set_outputs(self, tensors: Iterable[Tensor | Op]) -> None:
        """Declare the graph outputs (model outputs, in order)."""
        outs = [self._as_tensor(t, "<graph outputs>", "outputs") for t in tensors]
        self._outputs = outs
        self._changed()

    def unique_name(self, base: str) -> str:
        """``base`` if free, else ``base_1``, ``base_2``, ..."""
        if base not in self._ops:
            return base
        i = 1
        while f"{base}_{i}" in self._ops:
            i += 1
        return f"{base}_{i}"

    # ---- queries ------------------------------------------------------------------------
    @property
    def ops(self) -> list[Op]:
        """All ops in creation order."""
        return list(self._ops.values())

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(list(self._ops.values()))

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._ops
        return isinstance(item, Op) and self._ops.get(item.name) is item

    def get_op(self, name: str) -> Op:
        try:
            return self._ops[name]
        except KeyError:
            raise XirError(f"graph {self.name!r} has no op named {name!r}") from None

    def get_tensor(self, name: str) -> Tensor:
        try:
            return self._ops[name].output
        except KeyError:
            raise XirError(f"graph {self.name!r} has no tensor named {name!r}") from None

    @property
    def tensors(self) -> list[Tensor]:
        return [op.output for op in self._ops.values()]

    @property
    def inputs(self) -> list[Op]:
        """The ``data`` ops, in creation order."""
        return [op for op in self._ops.values() if op.type == DATA]

    @property
    def outputs(self) -> list[Tensor]:
        return list(self._outputs)

    def get_op_types(self) -> set[str]:
        return {op.type for op in self._ops.values()}

    def const_value(self, tensor: Tensor) -> np.ndarray | None:
        """The value of a tensor produced by a ``const`` op, else None."""
        op = tensor.producer
        return op.attrs["data"] if op.type == CONST else None

    def topological_sort(self) -> list[Op]:
        """Ops in dependency order; ties broken by creation order, so it is deterministic."""
        return list(self._topo()[1])

    def topo_position(self, op: Op) -> int:
        """Index of ``op`` in :meth:`topological_sort` (cached)."""
        return self._topo()[2][op]

    def _topo(self) -> tuple[int, list[Op], dict[Op, int]]:
        cache = self._topo_cache
        if cache is not None and cache[0] == self._version:
            return cache
        indeg: dict[Op, int] = {}
        for op in self._ops.values():
            indeg[op] = len({t.producer for ts in op._inputs.values() for t in ts})
        heap = [(op.index, op.name) for op, d in indeg.items() if d == 0]
        heapq.heapify(heap)
        order: list[Op] = []
        while heap:
            _, name = heapq.heappop(heap)
            op = self._ops[name]
            order.append(op)
            for c in op.output._uses:
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, (c.index, c.name))
        if len(order) != len(self._ops):
            stuck = sorted(op.name for op, d in indeg.items() if d > 0)[:5]
            raise XirError(f"graph {self.name!r} has a cycle through {stuck}")
        self._topo_cache = (self._version, order, {op: i for i, op in enumerate(order)})
        return self._topo_cache

    # ---- subgraphs ----------------------------------------------------------------------
    @property
    def root_subgraph(self) -> Subgraph:
        """The subgraph holding every op; plugins partition its children."""
        if self._root is None:
            from compiler.xir.subgraph import Subgraph

            self._root = Subgraph._make_root(self)
        return self._root

    def get_root_subgraph(self) -> Subgraph:  # XIR spelling
        return self.root_subgraph

    # ---- checks -------------------------------------------------------------------------
    def check(self, *, shapes: bool = True) -> None:
        """Raise :class:`XirError` unless the graph is well formed (acyclic, shapes known)."""
        self.topological_sort()
        for op in self._ops.values():
            for t in op.input_tensors():
                if self._ops.get(t.name) is not t.producer:
                    raise XirError(f"op {op.name!r} reads {t.name!r}, which is not in the graph")
            if op.type == CONST:
                data = op.attrs.get("data")
                if not isinstance(data, np.ndarray):
                    raise XirError(f"const op {op.name!r} has no array 'data' attribute")
                if data.shape != op.output.shape or data.dtype.name != op.output.dtype:
                    raise XirError(f"const op {op.name!r}: data is {data.shape}/{data.dtype} "
                                   f"but its tensor says {op.output.shape}/{op.output.dtype}")
            if op.type == DATA and op.input_tensors():
                raise XirError(f"data op {op.name!r} must not have inputs")
            if shapes and op.output.shape is None:
                raise XirError(f"tensor {op.name!r} ({op.type}) has no shape; run the "
                               "infer_shapes pass")
        for t in self._outputs:
            if self._ops.get(t.name) is not t.producer:
                raise XirError(f"graph output {t.name!r} is not in the graph")

    # ---- internals ----------------------------------------------------------------------
    def _as_tensor(self, x: Op | Tensor, op_name: str, arg: str) -> Tensor:
        if isinstance(x, Op):
            x = x.output
        if not isinstance(x, Tensor):
            raise XirError(f"op {op_name!r} input {arg!r}: expected an Op or Tensor, got "
                           f"{type(x).__name__}")
        self._check_owned(x.producer)
        return x

    def _check_owned(self, op: Op) -> None:
        if self._ops.get(op.name) is not op:
            raise XirError(f"op {op.name!r} does not belong to graph {self.name!r}")

    def _check_mutable(self, what: str) -> None:
        if self._root is not None and self._root._children is not None:
            raise XirError(f"cannot {what} in graph {self.name!r}: it is already partitioned "
                           "into subgraphs; change the graph before partitioning")

    def _changed(self) -> None:
        self._version += 1

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._ops)} ops)"

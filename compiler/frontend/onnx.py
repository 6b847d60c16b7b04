"""ONNX frontend: an ONNX model becomes an XIR graph of ONNX-typed ops at opset 18 or newer.

Models older than opset 18 are first upgraded with onnx's version converter (weights detached, so
a large model converts in milliseconds), which gives every op one set of semantics (axes as
inputs, Softmax without 2-D coercion, ...). Then:

- initializers and ``Constant`` nodes become ``const`` ops; graph inputs become ``data`` ops;
- each node becomes one op of the same type (another domain: ``"<domain>.<OpType>"``), its inputs
  named by the ONNX schema's formal names (``Conv``: ``X``, ``W``, ``B``), attributes as values;
- a pre-opset-7 PRelu with a (C,) slope (PyTorch's per-channel export) gets a (C, 1, ...) slope;
- ``Split`` becomes one ``Slice`` per used output, since an XIR op has one output; other
  multi-output nodes are accepted when only their first output is used (Dropout's mask,
  MaxPool's indices, BatchNormalization's training outputs);
- an op without a numpy kernel is kept for the CPU target when onnx's reference evaluator can run
  it; otherwise :class:`UnsupportedOpError` names the op type and the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper, version_converter
from onnx.defs import OpSchema

from compiler.errors import (
    CompilerError,
    FrontendError,
    InputShapesError,
    ShapeInferenceError,
    UnsupportedOpError,
)
from compiler.ops.infer import cpu_can_run, infer_op
from compiler.ops.onnx_bridge import CANONICAL_OPSET
from compiler.xir import Graph, Op, Tensor

#: Initializers at least this large are detached while the version converter runs.
DETACH_ELEMENTS = 64
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def load_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise FrontendError(f"ONNX model {str(path)!r} does not exist")
    try:
        return onnx.load(str(path))
    except Exception as e:  # protobuf's DecodeError and friends
        raise FrontendError(f"{str(path)!r} is not a readable ONNX model: {e}") from None


def import_onnx(model: str | Path | onnx.ModelProto, *,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                name: str | None = None) -> Graph:
    """Import an ONNX model (path or ModelProto) into a new :class:`Graph`."""
    proto = load_model(model)
    if name is None:
        name = Path(model).stem if not isinstance(model, onnx.ModelProto) else (
            proto.graph.name or "model")
    try:
        proto, detached = _upgrade(proto)
        return _Importer(proto, detached, input_shapes or {}, name).run()
    except CompilerError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, UnicodeError,
            OverflowError, RecursionError) as e:
        # what onnx's helpers raise on a malformed proto (an unknown tensor type, a field that
        # is not UTF-8, data that does not fit its dims): the model's defect, said as such
        raise FrontendError(f"model {name!r} is malformed and cannot be imported "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                            "; check it with onnx.checker.check_model") from e


def default_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise FrontendError("the model imports no default-domain (ai.onnx) opset; it is not a "
                        "standard ONNX model")


def _upgrade(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Bring the model to the canonical opset; returns it and the detached initializers."""
    version = default_opset(proto)
    detached: dict[str, np.ndarray] = {}
    if version >= CANONICAL_OPSET:
        return proto, detached
    # Copy everything but the large initializers: copying the weights just to drop them
    # would cost more than the conversion itself.
    light = _without_graph(proto)
    g = light.graph
    for fd, value in proto.graph.ListFields():
        if fd.name != "initializer":
            if fd.is_repeated:
                getattr(g, fd.name).extend(value)
            elif fd.message_type is not None:
                getattr(g, fd.name).CopyFrom(value)
            else:
                setattr(g, fd.name, value)
    declared = {i.name for i in g.input}
    for init in proto.graph.initializer:
        n = int(np.prod(init.dims, dtype=np.int64))
        if n >= DETACH_ELEMENTS:
            detached[init.name] = numpy_helper.to_array(init)
            if init.name not in declared:
                g.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                             list(init.dims)))
        else:
            g.initializer.append(init)
    # IR 3 requires every initializer to be a graph input; from IR 4 on they need not be
    light.ir_version = max(light.ir_version, 4)
    if version < 7:
        _per_channel_prelu(light, detached)
    try:
        upgraded = version_converter.convert_version(light, CANONICAL_OPSET)
    except Exception as e:
        raise FrontendError(f"cannot upgrade the model from opset {version} to "
                            f"{CANONICAL_OPSET} with onnx's version converter: {e}; export it "
                            f"at opset {CANONICAL_OPSET} or newer") from None
    return upgraded, detached


def _per_channel_prelu(model: onnx.ModelProto, detached: dict[str, np.ndarray]) -> None:
    """Before opset 7, exporters (PyTorch, Caffe2) wrote PRelu's per-channel slope as a (C,)
    vector; from opset 7 on it broadcasts numpy-style, which would apply it to the last axis.
    Reshape such slopes to (C, 1, ..., 1) so that the upgraded model keeps its meaning."""
    g = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # without shapes there is nothing safe to do
        return
    ranks: dict[str, list[int]] = {}
    for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
        if vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    inits = {i.name: i for i in g.initializer}
    for node in g.node:
        if node.op_type != "PRelu" or len(node.input) < 2:
            continue
        x, slope = node.input[0], node.input[1]
        xs = ranks.get(x)
        if not xs or len(xs) < 3:
            continue
        arr = detached.get(slope)
        if arr is None and slope in inits:
            arr = numpy_helper.to_array(inits[slope])
        if arr is None or arr.ndim != 1 or arr.size != xs[1]:
            continue
        new = arr.reshape((arr.size,) + (1,) * (len(xs) - 2))
        if slope in detached:
            detached[slope] = new
        else:
            inits[slope].CopyFrom(numpy_helper.from_array(new, slope))
        for vi in g.input:
            if vi.name == slope:
                vi.CopyFrom(helper.make_tensor_value_info(slope, vi.type.tensor_type.elem_type,
                                                          list(new.shape)))


def _without_graph(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model's top-level fields (opsets, IR version, metadata), no graph."""
    out = onnx.ModelProto()
    for fd, value in proto.ListFields():
        if fd.name == "graph":
            continue
        if fd.is_repeated:
            getattr(out, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)
    return out


def attribute_value(attr: AttributeProto, where: str) -> Any:
    """An ONNX attribute as a storable value (strings decoded, tensors as arrays)."""
    kind = attr.type
    if kind in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise UnsupportedOpError(f"{where}: attribute {attr.name!r} is a subgraph; control "
                                 "flow is not supported by the compiler")
    if kind in (AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS,
                AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
        raise UnsupportedOpError(f"{where}: attribute {attr.name!r} has an unsupported kind "
                                 f"({AttributeProto.AttributeType.Name(kind)})")
    v = helper.get_attribute_value(attr)
    if kind == AttributeProto.STRING:
        return v.decode("utf-8", "replace")
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in v]
    if kind == AttributeProto.TENSOR:
        return numpy_helper.to_array(v)
    if kind == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in v]
    return v


class _Importer:
    def __init__(self, proto: onnx.ModelProto, detached: dict[str, np.ndarray],
                 input_shapes: Mapping[str, Sequence[int]], name: str) -> None:
        self.proto = proto
        self.detached = detached
        self.input_shapes = dict(input_shapes)
        self.graph = Graph(name)
        self.imports = {("" if i.domain == "ai.onnx" else i.domain): int(i.version)
                        for i in proto.opset_import}
        self.tensors: dict[str, Tensor] = {}
        self.used: set[str] = set()

    def run(self) -> Graph:
        g = self.proto.graph
        graph = self.graph
        graph.attrs["opset_imports"] = self.imports
        graph.attrs["source"] = {"format": "onnx", "producer": self.proto.producer_name,
                                 "producer_version": self.proto.producer_version,
                                 "graph": g.name}
        for node in g.node:
            self.used.update(i for i in node.input if i)
        self.used.update(o.name for o in g.output)
        inits = {i.name: i for i in g.initializer}
        unknown = set(self.input_shapes) - {i.name for i in g.input}
        if unknown:
            raise InputShapesError(f"input_shapes names {sorted(unknown)}, which are not model "
                                   f"inputs; the inputs are {[i.name for i in g.input]}")
        for vi in g.input:
            if vi.name in inits:
                continue
            if vi.name in self.detached:
                self._const(vi.name, self.detached[vi.name])
            else:
                self._data(vi)
        for name, init in inits.items():
            self._const(name, numpy_helper.to_array(init))
        for index, node in enumerate(self._sorted_nodes()):
            self._node(node, index)
        missing = [o.name for o in g.output if o.name not in self.tensors]
        if missing:
            raise FrontendError(f"graph outputs {missing} are produced by no node")
        graph.set_outputs([self.tensors[o.name] for o in g.output])
        return graph

    # ---- values -------------------------------------------------------------------------
    def _data(self, vi: onnx.ValueInfoProto) -> None:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"model input {vi.name!r} is not a tensor; only tensor inputs "
                                "are supported")
        if vi.name in self.input_shapes:
            shape = [int(d) for d in self.input_shapes[vi.name]]
        else:
            shape = []
            for d in tt.shape.dim:
                if not d.HasField("dim_value"):
                    raise FrontendError(
                        f"model input {vi.name!r} has a symbolic dimension "
                        f"{d.dim_param or '?'!r}; give static shapes, e.g. --options "
                        f"'{{\"input_shapes\": {{\"{vi.name}\": [1, ...]}}}}'")
                shape.append(int(d.dim_value))
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        self.tensors[vi.name] = self.graph.create_data(vi.name, shape, dtype).output

    def _const(self, name: str, data: np.ndarray) -> Tensor:
        op = self.graph.create_const(name, np.array(data, order="C", copy=None))
        self.tensors[name] = op.output
        return op.output

    def _sorted_nodes(self) -> list[onnx.NodeProto]:
        """Nodes in dependency order (ONNX requires it, but not every exporter obeys)."""
        nodes = list(self.proto.graph.node)
        produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        known = set(self.tensors)
        done: set[int] = set()
        order: list[onnx.NodeProto] = []
        pending = list(range(len(nodes)))
        while pending:
            rest = []
            for i in pending:
                ready = all(x in known or x == "" for x in nodes[i].input)
                if ready:
                    order.append(nodes[i])
                    done.add(i)
                    known.update(o for o in nodes[i].output if o)
                else:
                    rest.append(i)
            if len(rest) == len(pending):
                n = nodes[rest[0]]
                bad = [x for x in n.input if x and x not in known]
                why = ("a cycle" if all(x in produced for x in bad) else
                       "inputs that no node, initializer or graph input defines")
                raise FrontendError(f"ONNX node {_node_name(n, rest[0])!r} ({n.op_type}) "
                                    f"reads {bad}: {why}")
            pending = rest
        return order

    # ---- nodes --------------------------------------------------------------------------
    def _node(self, node: onnx.NodeProto, index: int) -> None:
        where = f"ONNX node {_node_name(node, index)!r} ({node.op_type})"
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        op_type = node.op_type if not domain else f"{domain}.{node.op_type}"
        if node.op_type in CONTROL_FLOW and not domain:
            raise UnsupportedOpError(f"{where}: control flow is not supported; unroll or "
                                     "remove it before compiling")
        attrs = {a.name: attribute_value(a, where) for a in node.attribute}
        if not domain and node.op_type == "Constant":
            self._constant(node, attrs, where)
            return
        if not domain and node.op_type == "Split":
            self._split(node, attrs, where)
            return
        used = [i for i, o in enumerate(node.output) if o and o in self.used]
        if any(i > 0 for i in used) or not node.output or not node.output[0]:
            raise UnsupportedOpError(
                f"{where}: outputs {[node.output[i] for i in used]} are used, but an XIR op has "
                "one output; only the first output of a multi-output op may be used")
        inputs = self._named_inputs(node, domain, where)
        if node.name:
            attrs["onnx_node"] = node.name
        out = node.output[0]
        if out in self.tensors:
            raise FrontendError(f"{where}: output {out!r} is defined twice")
        op = self.graph.create_op(out, op_type, inputs, attrs)
        if not cpu_can_run(op):
            raise UnsupportedOpError(
                f"{where}: op type {node.op_type!r}"
                + (f" of domain {domain!r}" if domain else "")
                + " has no kernel in the CPU target (numpy or onnx reference) and the frontend "
                "does not know it; rewrite it with standard ops, or add a kernel in "
                "compiler/ops/")
        self.tensors[out] = op.output
        self._try_infer(op)

    def _named_inputs(self, node: onnx.NodeProto, domain: str, where: str
                      ) -> dict[str, list[Tensor]]:
        try:
            schema = onnx.defs.get_schema(node.op_type, self.imports.get(domain, 1), domain)
            formal = [(f.name, f.option == OpSchema.FormalParameterOption.Variadic)
                      for f in schema.inputs]
        except onnx.defs.SchemaError:
            formal = []
        named: dict[str, list[Tensor]] = {}
        for i, name in enumerate(node.input):
            if i < len(formal):
                arg = formal[i][0]
            elif formal and formal[-1][1]:
                arg = formal[-1][0]
            else:
                arg = f"input_{i}"
            lst = named.setdefault(arg, [])
            if not name:
                continue
            if name not in self.tensors:
                raise FrontendError(f"{where}: input {name!r} is undefined")
            lst.append(self.tensors[name])
        return named

    def _constant(self, node: onnx.NodeProto, attrs: dict[str, Any], where: str) -> None:
        if "value" in attrs:
            data = np.asarray(attrs["value"])
        elif "value_float" in attrs:
            data = np.array(attrs["value_float"], np.float32)
        elif "value_floats" in attrs:
            data = np.array(attrs["value_floats"], np.float32)
        elif "value_int" in attrs:
            data = np.array(attrs["value_int"], np.int64)
        elif "value_ints" in attrs:
            data = np.array(attrs["value_ints"], np.int64)
        else:
            raise UnsupportedOpError(f"{where}: only numeric Constant values are supported, "
                                     f"got attributes {sorted(attrs)}")
        self._const(node.output[0], data)

    def _split(self, node: onnx.NodeProto, attrs: dict[str, Any], where: str) -> None:
        """Split -> one Slice per used output (XIR ops have a single output)."""
        src = self.tensors.get(node.input[0])
        if src is None:
            raise FrontendError(f"{where}: input {node.input[0]!r} is undefined")
        if src.shape is None:
            raise FrontendError(f"{where}: the shape of {src.name!r} is not known at import, "
                                "so the split cannot be lowered to slices; fix the input "
                                "shapes (input_shapes option)")
        axis = int(attrs.get("axis", 0)) % len(src.shape)
        dim = src.shape[axis]
        n_out = len(node.output)
        if len(node.input) > 1 and node.input[1]:
            sizes_t = self.tensors[node.input[1]]
            if sizes_t.producer.type != "const":
                raise UnsupportedOpError(f"{where}: split sizes must be constant")
            sizes = [int(s) for s in sizes_t.producer.attrs["data"].reshape(-1)]
        else:
            n = int(attrs.get("num_outputs", n_out))
            chunk = -(-dim // n)
            sizes = [min(chunk, dim - i * chunk) for i in range(n)]
        if len(sizes) != n_out or sum(sizes) != dim:
            raise FrontendError(f"{where}: split sizes {sizes} do not cover dimension {dim} "
                                f"with {n_out} outputs")
        start = 0
        for out, size in zip(node.output, sizes, strict=True):
            if out and out in self.used:
                g = self.graph
                consts = [g.create_const(g.unique_name(f"{out}/{k}"), np.array([v], np.int64))
                          for k, v in (("starts", start), ("ends", start + size),
                                       ("axes", axis))]
                attrs_s = {"onnx_node": node.name} if node.name else {}
                op = g.create_op(out, "Slice", {"data": [src], "starts": [consts[0]],
                                                "ends": [consts[1]], "axes": [consts[2]]},
                                 attrs_s)
                self.tensors[out] = op.output
                self._try_infer(op)
            start += size

    def _try_infer(self, op: Op) -> None:
        # Best effort at import (Split lowering needs shapes); the infer_shapes pass does the
        # complete job with value propagation and reports what cannot be inferred.
        try:
            t = infer_op(op)
        except ShapeInferenceError:
            return
        op.output.shape = t.shape
        op.output.dtype = t.dtype


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index}:{node.op_type}->{node.output[0] if node.output else ''}"

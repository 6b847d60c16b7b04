"""The way back to ONNX for ops without a numpy kernel: one-node models for onnx's own shape
inference and reference evaluator.

XIR op types are ONNX op types; ops from another domain are typed ``"<domain>.<OpType>"``.
Attributes that are not part of the ONNX schema (the compiler's own, such as ``onnx_node`` or
``quant``) are left out of the rebuilt node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.defs import OpSchema

from compiler.errors import KernelError, ShapeInferenceError
from compiler.ops.base import TensorType, Types, Values, describe
from compiler.xir import Graph, Op

#: Default-domain opset the compiler works at; older models are upgraded to it on import.
CANONICAL_OPSET = 18
#: Op attributes the compiler adds for itself; never passed to ONNX.
INTERNAL_ATTRS = frozenset({"onnx_node", "quant"})


def split_type(op_type: str) -> tuple[str, str]:
    """``"Conv"`` -> ("", "Conv"); ``"com.example.Foo"`` -> ("com.example", "Foo")."""
    if "." in op_type:
        domain, name = op_type.rsplit(".", 1)
        return domain, name
    return "", op_type


def opset_imports(graph: Graph) -> dict[str, int]:
    imports = dict(graph.attrs.get("opset_imports") or {})
    imports.setdefault("", CANONICAL_OPSET)
    return imports


def schema_for(op_type: str, graph: Graph) -> OpSchema | None:
    domain, name = split_type(op_type)
    version = opset_imports(graph).get(domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(name, version, domain)
    except onnx.defs.SchemaError:
        return None


def reference_supports(op_type: str, graph: Graph) -> bool:
    """Whether onnx's reference evaluator has an implementation for this op type."""
    from onnx.reference.ops import load_op

    domain, name = split_type(op_type)
    try:
        load_op(domain, name, opset_imports(graph).get(domain))
    except (NotImplementedError, ValueError, RuntimeError, KeyError):
        return False
    return True


def _attr(key: str, value: Any, attr_type: int | None) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, bool):
        value = int(value)
    if attr_type is not None and isinstance(value, list) and not value:
        return helper.make_attribute(key, [], attr_type=attr_type)
    return helper.make_attribute(key, value, attr_type=attr_type)


def to_onnx_node(op: Op, inputs: Sequence[str], output: str) -> onnx.NodeProto:
    schema = schema_for(op.type, op.graph)
    domain, name = split_type(op.type)
    attrs = []
    for key, value in op.attrs.items():
        if key in INTERNAL_ATTRS:
            continue
        if schema is not None:
            if key not in schema.attributes:
                continue
            attrs.append(_attr(key, value, int(schema.attributes[key].type)))
        else:
            attrs.append(_attr(key, value, None))
    node = helper.make_node(name, list(inputs), [output], name=op.name, domain=domain)
    node.attribute.extend(attrs)
    return node


def _tensor_type(name: str, t: TensorType) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return helper.make_tensor_value_info(name, elem, list(t.shape))


def one_node_model(op: Op, ins: Types, vals: Values | None = None,
                   out_type: TensorType | None = None) -> onnx.ModelProto:
    """A model holding just ``op``; known input values become initializers."""
    names = [f"in{i}" if t is not None else "" for i, t in enumerate(ins)]
    node = to_onnx_node(op, names, "out")
    inputs, inits = [], []
    for i, t in enumerate(ins):
        if t is None:
            continue
        v = vals[i] if vals is not None and i < len(vals) else None
        if v is not None:
            inits.append(numpy_helper.from_array(np.asarray(v), names[i]))
        else:
            inputs.append(_tensor_type(names[i], t))
    out = (_tensor_type("out", out_type) if out_type is not None
           else helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None))
    g = helper.make_graph([node], f"single_{op.type}", inputs, [out], initializer=inits)
    imports = [helper.make_opsetid(d, v) for d, v in sorted(opset_imports(op.graph).items())]
    return helper.make_model(g, opset_imports=imports, ir_version=10)


def fallback_infer(op: Op, ins: Types, vals: Values) -> TensorType:
    """Output type by onnx's C++ shape inference (with data propagation)."""
    model = one_node_model(op, ins, vals)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:  # onnx raises several unrelated types here
        raise ShapeInferenceError(f"{describe(op)}: ONNX shape inference failed: {e}") from None
    tt = inferred.graph.output[0].type.tensor_type
    if tt.elem_type == TensorProto.UNDEFINED or not tt.HasField("shape") or any(
            not d.HasField("dim_value") for d in tt.shape.dim):
        raise ShapeInferenceError(
            f"{describe(op)}: the output shape is not static (ONNX inferred {tt}); the "
            "compiler needs static shapes: fix the input shapes with the input_shapes option")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
    return TensorType(tuple(int(d.dim_value) for d in tt.shape.dim), dtype)


class ReferenceKernel:
    """Runs one op with onnx.reference.ReferenceEvaluator (built once, reused per call)."""

    def __init__(self, op: Op, ins: Types, out_type: TensorType | None = None) -> None:
        from onnx.reference import ReferenceEvaluator

        self.op = op
        self.names = [f"in{i}" for i, t in enumerate(ins) if t is not None]
        model = one_node_model(op, ins, None, out_type)
        try:
            self.session = ReferenceEvaluator(model)
        except Exception as e:
            raise KernelError(f"{describe(op)}: onnx's reference evaluator cannot run it: "
                              f"{e}") from None

    def run(self, *xs: np.ndarray | None) -> np.ndarray:
        feeds = {n: x for n, x in zip(self.names, (x for x in xs if x is not None), strict=True)}
        try:
            (y,) = self.session.run(None, feeds)[:1]
        except Exception as e:
            raise KernelError(f"{describe(self.op)}: reference evaluation failed: {e}") from None
        return np.asarray(y)

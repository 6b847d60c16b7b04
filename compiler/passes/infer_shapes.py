"""``infer_shapes``: static shape and dtype of every tensor, with value propagation.

Walks the graph in topological order and asks each op's definition (or onnx's shape inference)
for its output type. Small integer tensors whose inputs are all known at compile time (shape
arithmetic such as ``Shape -> Gather -> Concat -> Reshape``) are evaluated on the way, so that
ops whose output shape depends on such values can be typed before constant folding has run.
Also makes Conv/pool attributes explicit (auto_pad resolved, defaults filled).
"""

from __future__ import annotations

import numpy as np

from compiler.errors import CompilerError, ShapeInferenceError
from compiler.ops.infer import evaluate, infer_op, known_value
from compiler.ops.op_shape import shape_slice
from compiler.ops.registry import get_opdef
from compiler.passes.base import Pass, PassResult
from compiler.xir import CONST, DATA, Graph, Op, Tensor

#: Largest tensor (elements) that value propagation computes; shape math is far smaller.
PROPAGATE_MAX_ELEMENTS = 4096


class InferShapes(Pass):
    name = "infer_shapes"
    description = "static shapes and dtypes for every tensor (with shape-value propagation)"

    def run(self, graph: Graph) -> PassResult:
        values: dict[Tensor, np.ndarray] = {}
        changed = propagated = 0
        for op in graph.topological_sort():
            t = infer_op(op, values)
            if op.output.shape != t.shape or op.output.dtype != t.dtype:
                changed += 1
            op.output.shape = t.shape
            op.output.dtype = t.dtype
            if op.type in (DATA, CONST):
                continue
            v = self._propagate(op, values, t.shape)
            if v is not None:
                if v.shape != t.shape or v.dtype.name != t.dtype:
                    raise ShapeInferenceError(
                        f"op {op.name!r} ({op.type}): inferred {t.shape}/{t.dtype} but its "
                        f"value is {v.shape}/{v.dtype}; the shape function is wrong")
                values[op.output] = v
                propagated += 1
        return PassResult(changed, {"propagated_values": propagated})

    @staticmethod
    def _propagate(op: Op, values: dict[Tensor, np.ndarray], shape: tuple[int, ...]
                   ) -> np.ndarray | None:
        if op.type == "Shape":
            src = op.input_tensors()[0]
            return None if src.shape is None else shape_slice(op, src.shape)
        if int(np.prod(shape, dtype=np.int64)) > PROPAGATE_MAX_ELEMENTS:
            return None
        opdef = get_opdef(op.type)
        if opdef is None or not opdef.foldable:
            return None
        ins = op.positional_inputs()
        xs = [known_value(t, values) for t in ins]
        if any(x is None and t is not None for x, t in zip(xs, ins, strict=True)):
            return None
        try:
            return evaluate(op, xs)
        except CompilerError:
            return None

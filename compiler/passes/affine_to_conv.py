"""``affine_to_conv``: a per-channel affine map that no Conv before it can absorb becomes a
depthwise 1x1 Conv (what Vitis AI's quantizer does with a BatchNormalization it cannot fold).

DenseNet normalizes each concatenation (BatchNormalization, then a constant per-channel Mul and
Add) before its ReLU: nothing to fold into, so these stay as they are after ``fold_batchnorm``
and would leave the accelerator for every dense layer. As y = a[c] * x + b[c] they are a Conv
with group = C, a 1x1 kernel, W = a and B = b: an op the quantizer and the accelerator know. A
chain of such ops becomes one Conv (the first is rewritten, the rest fold into it as
``fold_batchnorm`` folds). Handled: BatchNormalization (inference), and Mul, Add, Sub and Div of
a 3-D or 4-D float activation by a constant that varies at most along the channel axis (a
scalar too, except next to a MatMul: the scaling of attention scores or of Q and K, which the
accelerator's attention layer takes as it is), when the result keeps the activation's shape.
The op is rewritten in place (same name and output); float64 arithmetic, rounded once to the
activation's dtype.
"""

from __future__ import annotations

import numpy as np

from compiler.ops.op_batch_norm import bn_scale_shift
from compiler.passes.base import Pass, PassResult
from compiler.passes.fold_batchnorm import FoldBatchNorm, _const, _per_channel
from compiler.xir import Graph, Op, Tensor

FLOATS = ("float32", "float64", "float16")


def _affine(op: Op) -> tuple[Tensor, np.ndarray, np.ndarray] | None:
    """(x, a, b) with op(x) = a[c] * x + b[c], or None."""
    if op.type == "BatchNormalization":
        x = op.input_tensors("X")
        params = [_const(op.input_tensors(k)[0] if op.input_tensors(k) else None)
                  for k in ("scale", "B", "input_mean", "input_var")]
        if not x or any(p is None for p in params) or op.attrs.get("training_mode", 0):
            return None
        xs = x[0].shape
        if xs is None or len(xs) not in (3, 4) or any(p.size != xs[1] for p in params):
            return None
        a, b = bn_scale_shift(op, *params)  # type: ignore[arg-type]
        return x[0], a, b
    if op.type not in ("Mul", "Add", "Sub", "Div"):
        return None
    ins = op.input_tensors()
    if len(ins) != 2:
        return None
    for k, (x, other) in enumerate(((ins[0], ins[1]), (ins[1], ins[0]))):
        c = _const(other)
        if c is None or _const(x) is not None or x.shape is None or len(x.shape) not in (3, 4):
            continue
        if op.output.shape != x.shape or x.dtype not in FLOATS:
            continue
        if np.asarray(c).size == 1 and (x.producer.type == "MatMul" or any(
                u.type == "MatMul" for u in op.output.consumers)):
            continue                               # attention's scaling (a MatMul's operand)
        vec = _per_channel(np.asarray(c), len(x.shape), int(x.shape[1]))
        if vec is None:
            continue
        one, zero = np.ones_like(vec), np.zeros_like(vec)
        if op.type == "Mul":
            return x, vec, zero
        if op.type == "Add":
            return x, one, vec
        if op.type == "Sub":
            return (x, one, -vec) if k == 0 else (x, -one, vec)
        if k == 0 and np.all(vec != 0):            # x / c
            return x, 1.0 / vec, zero
    return None


class AffineToConv(Pass):
    name = "affine_to_conv"
    description = "turn a per-channel affine map nothing folds (BN, constant Mul/Add) into a " \
        "depthwise 1x1 Conv"

    def run(self, graph: Graph) -> PassResult:
        counts = {"converted": 0, "folded": 0}
        fold = FoldBatchNorm()
        made: set[Op] = set()
        for op in graph.topological_sort():
            if op.type not in ("BatchNormalization", "Mul", "Add", "Sub", "Div"):
                continue
            if fold.fold(graph, op, made):       # into the depthwise Conv made just before
                made.add(op)
                counts["folded"] += 1
                continue
            if op.type in ("BatchNormalization", "Mul", "Add") \
                    and fold._match(graph, op)[0] is not None:
                continue                         # fold_batchnorm's (switched off?) business
            m = _affine(op)
            if m is None:
                continue
            x, a, b = m
            c = int(x.shape[1])                  # type: ignore[index]
            dt = np.dtype(x.dtype)
            nd = len(x.shape) - 2                # type: ignore[arg-type]
            w = graph.create_const(graph.unique_name(f"{op.name}/W"),
                                   a.reshape((c, 1) + (1,) * nd).astype(dt))
            bias = graph.create_const(graph.unique_name(f"{op.name}/B"), b.astype(dt))
            attrs = {"group": c, "kernel_shape": [1] * nd, "strides": [1] * nd,
                     "pads": [0] * (2 * nd), "dilations": [1] * nd}
            graph.rewrite_op(op, "Conv", {"X": [x], "W": [w], "B": [bias]}, attrs)
            made.add(op)
            counts["converted"] += 1
        return PassResult(sum(counts.values()), counts)

"""``fold_batchnorm``: fold BatchNormalization, and per-channel Mul/Add by constants, into the
Conv before them.

With BN(x) = a * x + b per output channel c, Conv(W, B) followed by BN equals Conv with
W'[c] = a[c] * W[c] and B'[c] = a[c] * B[c] + b[c]; a constant Mul or Add that varies only along
the channel axis folds the same way (the Caffe2 models in onnx's test data follow each BN with
such a pair). The BN/Mul/Add op is rewritten in place into the folded Conv (keeping its name);
the original Conv and its constants become dead and are left to ``remove_dead_ops``. Folding
happens only when the Conv's output has no other reader and weights and parameters are
constants. Arithmetic is float64, rounded once to the weights' dtype.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from compiler.ops.op_batch_norm import bn_scale_shift
from compiler.passes.base import Pass, PassResult
from compiler.xir import CONST, Graph, Op, Tensor


def _const(t: Tensor | None) -> np.ndarray | None:
    return t.producer.attrs["data"] if t is not None and t.producer.type == CONST else None


def _per_channel(c: np.ndarray, out_rank: int, channels: int) -> np.ndarray | None:
    """``c`` as a (channels,) vector if it broadcasts along the channel axis only."""
    if c.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1)[: shape[1]], (channels,)).astype(np.float64)


class FoldBatchNorm(Pass):
    name = "fold_batchnorm"
    description = "fold BatchNormalization and per-channel constant Mul/Add into Conv"

    def run(self, graph: Graph) -> PassResult:
        counts = {"BatchNormalization": 0, "Mul": 0, "Add": 0}
        for op in graph.topological_sort():
            if op.type not in counts:
                continue
            kind = op.type
            if self.fold(graph, op):
                counts[kind] += 1
        return PassResult(sum(counts.values()), counts)

    def fold(self, graph: Graph, op: Op, into: Collection[Op] | None = None) -> bool:
        """Fold ``op`` (a BatchNormalization, Mul or Add) into the Conv before it, if it can
        (and that Conv is one of ``into``, when given)."""
        if op.type not in ("BatchNormalization", "Mul", "Add"):
            return False
        conv, scale, shift = self._match(graph, op)
        if conv is None or (into is not None and conv not in into):
            return False
        w = conv.input_tensors("W")[0].producer.attrs["data"]
        b_t = conv.input_tensors("B")
        b = (_const(b_t[0]) if b_t else np.zeros(w.shape[0], w.dtype)).astype(np.float64)
        w2 = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1)))
        b2 = b * scale + shift
        w_op = graph.create_const(graph.unique_name(f"{op.name}/W"), w2.astype(w.dtype))
        b_op = graph.create_const(graph.unique_name(f"{op.name}/B"), b2.astype(w.dtype))
        attrs = conv.attrs.copy()
        graph.rewrite_op(op, "Conv", {"X": conv.input_tensors("X"), "W": [w_op],
                                      "B": [b_op]}, attrs)
        return True

    def _match(self, graph: Graph, op: Op) -> tuple[Op | None, np.ndarray, np.ndarray]:
        none = (None, np.empty(0), np.empty(0))
        if op.type == "BatchNormalization":
            src = op.input_tensors("X")[0]
            params = [_const(op.input_tensors(k)[0] if op.input_tensors(k) else None)
                      for k in ("scale", "B", "input_mean", "input_var")]
            if any(p is None for p in params) or op.attrs.get("training_mode", 0):
                return none
            conv = self._conv_feeding(graph, src)
            if conv is None:
                return none
            a, b = bn_scale_shift(op, *params)  # type: ignore[arg-type]
            return conv, a, b
        ins = op.input_tensors()
        if len(ins) != 2:
            return none
        for src, other in ((ins[0], ins[1]), (ins[1], ins[0])):
            conv = self._conv_feeding(graph, src)
            c = _const(other)
            if conv is None or c is None or src is other:
                continue
            if op.output.shape != src.shape or src.shape is None:
                continue  # the constant would broadcast the output to a larger shape
            vec = _per_channel(c, len(src.shape), src.shape[1])
            if vec is None:
                continue
            if op.type == "Mul":
                return conv, vec, np.zeros_like(vec)
            return conv, np.ones_like(vec), vec
        return none

    @staticmethod
    def _conv_feeding(graph: Graph, t: Tensor) -> Op | None:
        conv = t.producer
        if conv.type != "Conv" or t in graph.outputs or len(t.consumers) != 1:
            return None
        if conv.output.dtype not in ("float32", "float64", "float16"):
            return None
        w = conv.input_tensors("W")
        b = conv.input_tensors("B")
        if not w or _const(w[0]) is None or (b and _const(b[0]) is None):
            return None
        return conv

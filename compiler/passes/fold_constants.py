"""``fold_constants``: evaluate every op whose inputs are all constants, once, at compile time.

Each folded op becomes a ``const`` op in place (same name, so readers and graph outputs are
untouched); ``Shape`` folds whenever its input's shape is static. This is what turns the light
models' ``ConstantOfShape`` weight generators into weights. Ops with randomness never fold.
A constant above `compiler.limits.MAX_CONST_BYTES`, or folding more than `MAX_FOLDED_BYTES` in
all, is refused (PassError naming the op) before it is computed: the .xmodel would store it.
"""

from __future__ import annotations

import numpy as np

from compiler.errors import PassError
from compiler.limits import MAX_CONST_BYTES, MAX_FOLDED_BYTES, check_tensor_size, fmt_bytes
from compiler.ops.base import describe
from compiler.ops.infer import evaluate
from compiler.ops.op_shape import shape_slice
from compiler.ops.registry import get_opdef
from compiler.passes.base import Pass, PassResult
from compiler.xir import CONST, DATA, Graph, Op

NONDETERMINISTIC_PREFIXES = ("Random", "Bernoulli", "Multinomial")


def foldable(op: Op) -> bool:
    if op.type in (DATA, CONST) or op.type.startswith(NONDETERMINISTIC_PREFIXES):
        return False
    opdef = get_opdef(op.type)
    return opdef is None or opdef.foldable


class FoldConstants(Pass):
    name = "fold_constants"
    description = "evaluate ops whose inputs are all constants; fold Shape of static shapes"

    def run(self, graph: Graph) -> PassResult:
        folded = total = 0
        for op in graph.topological_sort():
            if not foldable(op):
                continue
            ins = op.positional_inputs()
            if op.type == "Shape" and ins and ins[0] is not None and ins[0].shape is not None:
                graph.make_const(op, shape_slice(op, ins[0].shape))
                folded += 1
                continue
            if any(t is not None and t.producer.type != CONST for t in ins):
                continue
            total += self._check_size(op, total)
            xs = [None if t is None else t.producer.attrs["data"] for t in ins]
            value = np.array(evaluate(op, xs), order="C", copy=None)
            if op.output.shape is None:
                total += check_tensor_size(value.shape, value.dtype, f"folding {describe(op)}",
                                           PassError, MAX_CONST_BYTES)
            graph.make_const(op, value)
            folded += 1
        return PassResult(folded, {"folded": folded})

    @staticmethod
    def _check_size(op: Op, total: int) -> int:
        """Bytes folding ``op`` will materialize (its inferred type), refused above the
        limits before it is computed."""
        t = op.output
        if t.shape is None:
            return 0  # infer_shapes switched off: the value is checked after evaluation
        nbytes = check_tensor_size(t.shape, t.dtype, f"folding {describe(op)}", PassError,
                                   MAX_CONST_BYTES)
        if total + nbytes > MAX_FOLDED_BYTES:
            raise PassError(f"folding {describe(op)} would bring the model's folded constants "
                            f"to {fmt_bytes(total + nbytes)}, above the limit of "
                            f"{fmt_bytes(MAX_FOLDED_BYTES)}; the model generates more weights "
                            "than a card can hold")
        return nbytes

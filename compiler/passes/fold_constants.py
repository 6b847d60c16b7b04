"""``fold_constants``: evaluate every op whose inputs are all constants, once, at compile time.

Each folded op becomes a ``const`` op in place (same name, so readers and graph outputs are
untouched); ``Shape`` folds whenever its input's shape is static. This is what turns the light
models' ``ConstantOfShape`` weight generators into weights. Ops with randomness never fold.
"""

from __future__ import annotations

import numpy as np

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
        folded = 0
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
            xs = [None if t is None else t.producer.attrs["data"] for t in ins]
            value = np.array(evaluate(op, xs), order="C", copy=None)
            graph.make_const(op, value)
            folded += 1
        return PassResult(folded, {"folded": folded})

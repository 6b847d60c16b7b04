"""``remove_identity``: bypass Identity and inference-mode Dropout ops.

An op whose output is a graph output stays, so that model outputs keep their names.
"""

from __future__ import annotations

import numpy as np

from compiler.passes.base import Pass, PassResult
from compiler.xir import CONST, Graph

IDENTITY_TYPES = frozenset({"Identity", "Dropout"})


class RemoveIdentity(Pass):
    name = "remove_identity"
    description = "bypass Identity and inference-mode Dropout"

    def run(self, graph: Graph) -> PassResult:
        outputs = set(graph.outputs)
        removed = 0
        for op in graph.topological_sort():
            if op.type not in IDENTITY_TYPES or op.output in outputs:
                continue
            if op.type == "Dropout":
                mode = op.input_tensors("training_mode")
                if mode and (mode[0].producer.type != CONST
                             or bool(np.asarray(mode[0].producer.attrs["data"]).any())):
                    continue  # a training-mode dropout is not an identity
            (src,) = op.input_tensors(op.input_args[0])
            graph.replace_uses(op.output, src)
            graph.remove_op(op)
            removed += 1
        return PassResult(removed, {"removed": removed})

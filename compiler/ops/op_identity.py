"""Identity, and Dropout in inference mode (an identity; training_mode=True is refused)."""

from __future__ import annotations

import numpy as np

from compiler.errors import KernelError
from compiler.ops.base import OpDef, TensorType, Types, Values, describe, need
from compiler.xir import Op


class Identity(OpDef):
    op_type = "Identity"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, *rest: np.ndarray | None) -> np.ndarray:
        assert x is not None
        return x


class Dropout(Identity):
    op_type = "Dropout"

    def run(self, op: Op, x: np.ndarray | None, *rest: np.ndarray | None) -> np.ndarray:
        assert x is not None
        if len(rest) > 1 and rest[1] is not None and bool(np.asarray(rest[1]).reshape(-1)[0]):
            raise KernelError(f"{describe(op)}: training_mode=True dropout is random; the "
                              "compiler runs inference graphs only")
        return x

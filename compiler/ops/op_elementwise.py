"""Elementwise ops (unary, broadcasting binary, variadic), defined by table.

These differ only in the numpy expression, so one class per arity with a table of expressions
reads better than forty near-identical files; every op with its own logic has its own file.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import numpy as np

from compiler.errors import ShapeInferenceError
from compiler.ops.base import OpDef, TensorType, Types, Values, broadcast, describe, need
from compiler.xir import Op

Fn1 = Callable[[Op, np.ndarray], np.ndarray]
Fn2 = Callable[[np.ndarray, np.ndarray], np.ndarray]


class Unary(OpDef):
    """y = f(x), same shape and dtype."""

    def __init__(self, op_type: str, fn: Fn1, out_dtype: str | None = None) -> None:
        self.op_type = op_type  # type: ignore[misc]  # per-instance: one table row per type
        self.fn = fn
        self.out_dtype = out_dtype

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x = need(op, ins, 0)
        return TensorType(x.shape, self.out_dtype or x.dtype)

    def run(self, op: Op, x: np.ndarray | None, *rest: np.ndarray | None) -> np.ndarray:
        assert x is not None
        y = np.asarray(self.fn(op, x))
        return y.astype(self.out_dtype or x.dtype, copy=False)


class Binary(OpDef):
    """y = f(a, b) with numpy broadcasting; bool output for comparisons."""

    def __init__(self, op_type: str, fn: Fn2, bool_out: bool = False) -> None:
        self.op_type = op_type  # type: ignore[misc]
        self.fn = fn
        self.bool_out = bool_out

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        a, b = need(op, ins, 0), need(op, ins, 1)
        return TensorType(broadcast(op, a.shape, b.shape), "bool" if self.bool_out else a.dtype)

    def run(self, op: Op, a: np.ndarray | None, b: np.ndarray | None = None) -> np.ndarray:
        assert a is not None and b is not None
        y = np.asarray(self.fn(a, b))
        return y if self.bool_out else y.astype(a.dtype, copy=False)


class Variadic(OpDef):
    """y = f(x0, x1, ...) folded pairwise with broadcasting (Sum, Max, Min, Mean)."""

    def __init__(self, op_type: str, fn: Fn2, mean: bool = False) -> None:
        self.op_type = op_type  # type: ignore[misc]
        self.fn = fn
        self.mean = mean

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        if not ins or any(t is None for t in ins):
            raise ShapeInferenceError(f"{describe(op)}: needs at least one input, all typed")
        shapes = [t.shape for t in ins if t is not None]
        return TensorType(broadcast(op, *shapes), need(op, ins, 0).dtype)

    def run(self, op: Op, *xs: np.ndarray | None) -> np.ndarray:
        arrays = [x for x in xs if x is not None]
        y = reduce(self.fn, arrays)
        if self.mean:
            y = y / len(arrays)
        return np.asarray(y).astype(arrays[0].dtype, copy=False)


class Where(OpDef):
    op_type = "Where"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        c, x, y = need(op, ins, 0), need(op, ins, 1), need(op, ins, 2)
        return TensorType(broadcast(op, c.shape, x.shape, y.shape), x.dtype)

    def run(self, op: Op, c: np.ndarray | None, x: np.ndarray | None = None,
            y: np.ndarray | None = None) -> np.ndarray:
        assert c is not None and x is not None and y is not None
        return np.where(c, x, y).astype(x.dtype, copy=False)


class PRelu(OpDef):
    """PRelu: slope broadcasts to X (unidirectionally)."""

    op_type = "PRelu"

    def infer(self, op: Op, ins: Types, vals: Values) -> TensorType:
        x, s = need(op, ins, 0), need(op, ins, 1, "slope")
        if broadcast(op, x.shape, s.shape) != x.shape:
            raise ShapeInferenceError(f"{describe(op)}: slope {s.shape} must broadcast to "
                                      f"{x.shape}")
        return TensorType(x.shape, x.dtype)

    def run(self, op: Op, x: np.ndarray | None, s: np.ndarray | None = None) -> np.ndarray:
        assert x is not None and s is not None
        return np.where(x < 0, x * s, x).astype(x.dtype, copy=False)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        q = np.floor_divide(a, b)
        # ONNX (like C) truncates integer division toward zero; numpy floors
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return q + fix
    return np.divide(a, b)


def _alpha(op: Op, default: float) -> float:
    return float(op.attrs.get("alpha", default))


def _special():
    """scipy.special, imported on first use (scipy takes about a second to import, and every
    compile and every simulation's host program would pay it otherwise)."""
    from scipy import special

    return special


def _sigmoid(op: Op, x: np.ndarray) -> np.ndarray:
    return _special().expit(x)


def _hard_sigmoid(op: Op, x: np.ndarray) -> np.ndarray:
    a, b = _alpha(op, 0.2), float(op.attrs.get("beta", 0.5))
    return np.clip(x * a + b, 0, 1)


def _elu(op: Op, x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, _alpha(op, 1.0) * np.expm1(np.minimum(x, 0)), x)


def _selu(op: Op, x: np.ndarray) -> np.ndarray:
    a = _alpha(op, 1.67326319217681884765625)
    g = float(op.attrs.get("gamma", 1.05070102214813232421875))
    return g * np.where(x <= 0, a * np.expm1(np.minimum(x, 0)), x)


UNARY: list[OpDef] = [
    Unary("Relu", lambda op, x: np.maximum(x, 0)),
    Unary("LeakyRelu", lambda op, x: np.where(x < 0, x * _alpha(op, 0.01), x)),
    Unary("Sigmoid", _sigmoid),
    Unary("HardSigmoid", _hard_sigmoid),
    Unary("HardSwish", lambda op, x: x * np.clip(x / 6 + 0.5, 0, 1)),
    Unary("Tanh", lambda op, x: np.tanh(x)),
    Unary("Elu", _elu),
    Unary("Selu", _selu),
    Unary("Softplus", lambda op, x: np.logaddexp(0, x)),
    Unary("Softsign", lambda op, x: x / (1 + np.abs(x))),
    Unary("Exp", lambda op, x: np.exp(x)),
    Unary("Log", lambda op, x: np.log(x)),
    Unary("Neg", lambda op, x: np.negative(x)),
    Unary("Abs", lambda op, x: np.abs(x)),
    Unary("Sqrt", lambda op, x: np.sqrt(x)),
    Unary("Reciprocal", lambda op, x: np.reciprocal(x)),
    Unary("Floor", lambda op, x: np.floor(x)),
    Unary("Ceil", lambda op, x: np.ceil(x)),
    Unary("Round", lambda op, x: np.round(x)),  # half to even, as ONNX specifies
    Unary("Sign", lambda op, x: np.sign(x)),
    Unary("Erf", lambda op, x: _special().erf(x)),
    Unary("Not", lambda op, x: np.logical_not(x), out_dtype="bool"),
    Unary("IsNaN", lambda op, x: np.isnan(x), out_dtype="bool"),
    Where(),
    PRelu(),
]

BINARY: list[OpDef] = [
    Binary("Add", np.add),
    Binary("Sub", np.subtract),
    Binary("Mul", np.multiply),
    Binary("Div", _int_div),
    Binary("Pow", np.power),
    Binary("Equal", np.equal, bool_out=True),
    Binary("Less", np.less, bool_out=True),
    Binary("LessOrEqual", np.less_equal, bool_out=True),
    Binary("Greater", np.greater, bool_out=True),
    Binary("GreaterOrEqual", np.greater_equal, bool_out=True),
    Binary("And", np.logical_and, bool_out=True),
    Binary("Or", np.logical_or, bool_out=True),
    Binary("Xor", np.logical_xor, bool_out=True),
]

VARIADIC: list[OpDef] = [
    Variadic("Sum", np.add),
    Variadic("Max", np.maximum),
    Variadic("Min", np.minimum),
    Variadic("Mean", np.add, mean=True),
]

"""Post-training int8 quantization of a float graph, as attributes an integer accelerator uses.

After calibration every float activation tensor gets ``attrs["quant"] = {"dtype": "int8",
"scale", "zero_point"}`` (per tensor; asymmetric unless symmetric_activations, or an
operand of a MatMul of two activations: see `_matmul_operands`). Ops whose scale
cannot change (MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity) pass their
input's parameters to their output, so a device needs no requantization there.

Conv, Gemm and MatMul with a constant weight get ``attrs["quant"]`` with: int8 ``weight``
(per output channel symmetric, [-127, 127]) and float32 ``weight_scale``, ``weight_axis``,
int32 ``bias`` = round(b / (s_in * s_w)), int32 ``bias_corrected`` = bias - zp_in * sum(w_q)
(so the datapath may pad with zp_in and skip the zero-point subtraction), and per-channel int32
``multiplier`` / ``shift`` for M = s_in * s_w / s_out (see :mod:`compiler.quantize.requant`),
plus the input and output scales and zero points. Add and Sum of two or more tensors get
per-input multipliers and shifts (M_i = s_i / s_out). A device that fuses an activation into a
Conv recomputes the requantization against the activation's output with :func:`requant_params`.
The float graph itself is unchanged, so the CPU path still computes in float.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.errors import QuantizationError
from compiler.options import QuantizeOptions
from compiler.quantize.calibrate import calibration_samples, collect_ranges
from compiler.quantize.params import (
    QMAX,
    ActQuant,
    activation_params,
    feature_params,
    weight_params,
)
from compiler.quantize.requant import quantize_multipliers
from compiler.xir import CONST, Graph, Op, Tensor

SCALE_PRESERVING = frozenset({"MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose",
                              "Squeeze", "Unsqueeze", "Identity", "Dropout"})
SCHEME = {
    "activations": "int8 per tensor, real = scale * (q - zero_point)",
    "weights": "int8 per output channel, symmetric [-127, 127]",
    "bias": "int32, scale s_in * s_w",
    "requant": "int32 multiplier m and right shift s: (acc * m + 2**(s-1)) >> s, half up",
}


#: A requantization multiplier at or above this saturates every nonzero accumulator (|acc * M|
#: >= 256 for |acc| >= 1), so it is stored as the largest one the requantizer has, 2**31 - 1,
#: which gives the same int8 results (zero stays the zero point).
SATURATING_MULTIPLIER = float(2**31 - 1)


def requant_params(s_in: float, s_w: np.ndarray, s_out: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (multiplier, shift) for M = s_in * s_w / s_out (a saturating M clamped to
    `SATURATING_MULTIPLIER`, see there)."""
    m = float(s_in) * np.asarray(s_w, np.float64) / float(s_out)
    return quantize_multipliers(np.minimum(m, SATURATING_MULTIPLIER))


def tensor_quant(t: Tensor) -> ActQuant | None:
    q = t.attrs.get("quant")
    return ActQuant.from_attr(q) if isinstance(q, dict) else None


def quantize_graph(graph: Graph, opts: QuantizeOptions) -> dict[str, Any]:
    """Calibrate on the options' samples and annotate ``graph``; returns a small report."""
    samples = calibration_samples(graph, opts)
    sym = _matmul_operands(graph)
    per_feature = _feature_tensors(graph, sym)
    absmax: dict[Tensor, np.ndarray] = {}
    kept: dict[Tensor, list[np.ndarray]] = {}
    ranges = collect_ranges(graph, samples, opts.method, opts.percentile, per_feature, absmax,
                            kept)
    params: dict[Tensor, ActQuant] = {}
    shared = _shared_params(graph, ranges, opts.symmetric_activations)
    for op in graph.topological_sort():
        t = op.output
        if op.type == CONST or t not in ranges:
            continue
        src = op.input_tensors()[0] if op.type in SCALE_PRESERVING and op.input_tensors() else None
        if src is not None and src in params and params[src].feature_scales is not None \
                and (t.shape is None or src.shape is None or t.shape[-1:] != src.shape[-1:]):
            src = None                   # a view that moves features: its own parameters
        if t in shared:
            params[t] = shared[t]
        elif t in absmax:
            params[t] = feature_params(absmax[t], _feature_ratio(t, absmax[t], kept.get(t)))
        elif src is not None and src in params:
            params[t] = params[src]
        else:
            try:
                params[t] = activation_params(*ranges[t],
                                              opts.symmetric_activations or t in sym)
            except QuantizationError as e:
                raise QuantizationError(f"tensor {t.name!r} (output of {op.type} {op.name!r}): "
                                        f"{e}") from None
    for t, p in params.items():
        t.attrs["quant"] = p.to_attr()
    counts: dict[str, int] = {}
    notes: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for op in graph.topological_sort():
        done = False
        if any(params.get(t) is not None and params[t].feature_scales is not None
               for t in (*op.input_tensors(), op.output)):
            continue                     # the encoder kernels quantize these ops themselves
        try:
            if op.type in ("Conv", "Gemm", "MatMul"):
                done = _quantize_linear_op(op, params, notes)
            elif op.type in ("Add", "Sum"):
                done = _quantize_add(op, params)
        except QuantizationError as e:
            # this op has no int8 form: it stays in float (on the CPU), the model still compiles
            op.attrs.pop("quant", None)
            skipped[op.name] = f"{op.type}: {e}"
            continue
        if done:
            counts[op.type] = counts.get(op.type, 0) + 1
    graph.attrs["quantization"] = dict(SCHEME)
    report: dict[str, Any] = {"samples": len(samples), "calibration": opts.calibration,
                              "method": opts.method, "tensors": len(params),
                              "ops": dict(sorted(counts.items()))}
    if notes:
        report["adjusted"] = notes
    if skipped:
        report["float_ops"] = skipped
    return report


#: Ops of a transformer encoder that make or read a per-feature activation (`_feature_tensors`).
FEATURE_MAKERS = frozenset({"MatMul", "Add", "LayerNormalization", "Gelu", "Reshape"})
FEATURE_READERS = frozenset({"MatMul", "Add", "LayerNormalization", "Gelu", "Identity"})


def _feature_tensors(graph: Graph, operands: set[Tensor]) -> set[Tensor]:
    """The activations quantized per feature (`ActQuant.feature_scales`): (1, tokens, features)
    float tensors of a transformer encoder, made by a linear layer (a MatMul by constant
    weights), an Add of two such tensors (or one and a constant), a LayerNormalization, a
    Gelu or the Reshape that merges attention heads, and read only by those (a MatMul as its
    activation operand): the residual stream, LayerNorm's outputs and the feed-forward
    activations, where a few outlier features are orders of magnitude above the rest (the
    model's outputs among them, and an Identity of one). Not the
    operands of attention's products (`_matmul_operands`), which stay per tensor."""
    out: set[Tensor] = set()

    def encoder_tensor(t: Tensor) -> bool:
        s = t.shape
        return (t.dtype == "float32" and s is not None and len(s) == 3 and int(s[0]) == 1
                and int(s[2]) > 1 and t not in operands)

    def linear(op: Op) -> bool:
        b = op.input_tensors("B")
        return (bool(b) and b[0].producer.type == CONST and b[0].shape is not None
                and len(b[0].shape) == 2)

    for op in graph.ops:
        t = op.output
        if op.type not in FEATURE_MAKERS or not encoder_tensor(t):
            continue
        if op.type == "MatMul" and not linear(op):
            continue
        if op.type == "Add" and not all(encoder_tensor(x) or x.producer.type == CONST
                                        for x in op.input_tensors()):
            continue
        readers = t.consumers
        if (not readers and t not in graph.outputs) or any(u.type not in FEATURE_READERS
                                                           for u in readers):
            continue
        if any(u.type == "MatMul" and (not linear(u) or u.input_tensors("A")[0] is not t)
               for u in readers):
            continue
        out.add(t)
    return out


#: Candidate caps on the ratio of a per-feature tensor's largest to smallest scale.
FEATURE_RATIOS = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, math.inf)


def _feature_ratio(t: Tensor, absmax: np.ndarray, values: list[np.ndarray] | None) -> float:
    """The cap on t's feature scales (`feature_params`) that the linear layers reading it
    compute most accurately with. A linear layer folds its input's feature scales into its
    weights (the encoder kernels' per-output-feature int8 weights), so a few large-scale
    features make every weight row coarse; capping the ratio trades the small features'
    resolution against the weights'. Measured on the calibration values: the relative error
    of X W with both quantized, summed over the readers; no linear reader: no cap."""
    mats = []
    for u in t.consumers:
        b = u.input_tensors("B") if u.type == "MatMul" else []
        if b and b[0].producer.type == CONST:
            mats.append(np.asarray(b[0].producer.attrs["data"], np.float64))
    if not mats or not values:
        return math.inf
    x = np.concatenate([v.reshape(-1, v.shape[-1]) for v in values]).astype(np.float64)
    ys = [x @ w for w in mats]
    best, best_err = math.inf, math.inf
    for r in FEATURE_RATIOS:
        a = np.maximum(absmax, absmax.max() / r) if math.isfinite(r) else absmax
        s = np.where(a > 0, a / QMAX, 1.0)
        xi = np.clip(np.rint(x / s), -QMAX, QMAX)
        err = 0.0
        for w, y in zip(mats, ys, strict=True):
            wq, sw = weight_params(w * s[:, None], 1)
            err += float(np.linalg.norm(xi @ (wq * sw[None, :]) - y)
                         / max(np.linalg.norm(y), 1e-30))
        if err < best_err * (1 - 1e-6):
            best, best_err = r, err
    return best


def _matmul_operands(graph: Graph) -> set[Tensor]:
    """The tensors behind both operands of a MatMul of two activations (attention's Q K^T and
    P V), followed back through scale-preserving ops and scalings by a constant: they are
    quantized symmetrically (zero point 0), so that the accelerator multiplies them as they are
    (an int8 zero point would need a correction per row and column), as I-BERT does."""
    out: set[Tensor] = set()
    for op in graph.ops:
        if op.type != "MatMul" or any(t.producer.type == CONST for t in op.input_tensors()):
            continue
        for t in op.input_tensors():
            while True:
                out.add(t)
                p = t.producer
                ins = p.input_tensors()
                if p.type in SCALE_PRESERVING and ins:
                    t = ins[0]
                elif p.type in ("Mul", "Div") and len(ins) == 2 and \
                        ins[1].producer.type == CONST and _const(ins[1]).size == 1:
                    t = ins[0]
                else:
                    break
    return out


def _shared_params(graph: Graph, ranges: dict[Tensor, tuple[float, float]], symmetric: bool
                   ) -> dict[Tensor, ActQuant]:
    """One set of parameters for every tensor a Concat joins (its inputs and output, and
    through scale-preserving ops the tensors those pass on), from the union of their ranges:
    a concatenation is then a copy of int8 bytes, or no copy at all when the producers write
    straight into the output (the accelerator's channel-offset writes). DenseNet's chains of
    concatenations become one group per dense block. Tensors in no Concat's group are left to
    the usual per-tensor rule (empty result)."""
    parent: dict[Tensor, Tensor] = {}

    def find(t: Tensor) -> Tensor:
        while parent.get(t, t) is not t:
            parent[t] = parent.get(parent[t], parent[t])
            t = parent[t]
        return t

    def union(a: Tensor, b: Tensor) -> None:
        ra, rb = find(a), find(b)
        if ra is not rb:
            parent[rb] = ra

    joined: set[Tensor] = set()
    for op in graph.topological_sort():
        ins = [t for t in op.input_tensors() if t in ranges]
        if op.type == "Concat" and op.output in ranges:
            for t in ins:
                union(op.output, t)
            joined.add(op.output)
        elif op.type in SCALE_PRESERVING and ins and op.output in ranges:
            union(ins[0], op.output)
    roots = {find(t) for t in joined}
    if not roots:
        return {}
    members: dict[Tensor, list[Tensor]] = {}
    for t in ranges:
        r = find(t)
        if r in roots:
            members.setdefault(r, []).append(t)
    out: dict[Tensor, ActQuant] = {}
    for ts in members.values():
        lo = min(ranges[t][0] for t in ts)
        hi = max(ranges[t][1] for t in ts)
        try:
            q = activation_params(lo, hi, symmetric)
        except QuantizationError as e:
            raise QuantizationError(f"tensors {sorted(t.name for t in ts)[:4]} (joined by a "
                                    f"Concat): {e}") from None
        out.update(dict.fromkeys(ts, q))
    return out


def _const(t: Tensor | None) -> np.ndarray | None:
    return t.producer.attrs["data"] if t is not None and t.producer.type == CONST else None


#: Largest |quantized bias| (int32 units). Half the int32 range: the other half is headroom for
#: the products (|sum x*w| + |zp * sum w| <= 2 * 128 * 127 * K < 2**30 for a fan-in K below
#: 33026), so the accumulator never wraps.
BIAS_LIMIT = 2**30


def bias_weight_floor(bias: np.ndarray, s_in: float) -> np.ndarray:
    """Per channel, the smallest weight scale at which round(bias / (s_in * s_w)) fits
    BIAS_LIMIT: raising a channel's weight scale to it is the standard remedy for a bias that
    would overflow int32 (its weights are then so small next to its bias that the coarser grid
    costs at most K * 64 * |b| / 2**30 of the output, e.g. 1e-4 of the bias for K = 2048)."""
    return np.abs(np.asarray(bias, np.float64)) / (float(s_in) * (BIAS_LIMIT - 1))


def _quantize_linear_op(op: Op, params: dict[Tensor, ActQuant],
                        notes: dict[str, str] | None = None) -> bool:
    x = op.input_tensors()[0]
    w_arg = {"Conv": "W", "Gemm": "B", "MatMul": "B"}[op.type]
    ws = op.input_tensors(w_arg)
    w = _const(ws[0]) if ws else None
    qi, qo = params.get(x), params.get(op.output)
    if w is None or qi is None or qo is None or w.dtype.kind != "f":
        return False
    if op.type == "Conv":
        axis = 0
        bias_t = op.input_tensors("B")
        bias = _const(bias_t[0]) if bias_t else np.zeros(w.shape[0])
        alpha = 1.0
    else:
        if w.ndim != 2 or (op.type == "Gemm" and op.attrs.get("transA", 0)):
            return False
        axis = 0 if op.type == "Gemm" and op.attrs.get("transB", 0) else 1
        n = w.shape[axis]
        alpha = float(op.attrs.get("alpha", 1.0)) if op.type == "Gemm" else 1.0
        c_t = op.input_tensors("C") if op.type == "Gemm" else []
        c = _const(c_t[0]) if c_t else None
        if c_t and (c is None or c.size not in (1, n)):
            return False  # a bias that is not a constant vector stays a float op
        beta = float(op.attrs.get("beta", 1.0)) if op.type == "Gemm" else 1.0
        bias = (np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (n,)) * beta
                if c is not None else np.zeros(n))
    if bias is None:
        return False
    bias = np.asarray(bias, np.float64)
    if not np.isfinite(bias).all():
        raise QuantizationError("the bias is not all finite (NaN or Inf)")
    wa = w * alpha if alpha != 1.0 else w
    w_q, s_w = weight_params(wa, axis)
    s_acc = qi.scale * s_w.astype(np.float64)
    b_q = np.rint(bias / s_acc)
    over = np.abs(b_q) > BIAS_LIMIT
    if over.any():
        # the bias would overflow int32 at this weight scale (tiny folded weights next to a
        # large bias): raise those channels' weight scales until it fits
        floor = np.where(over, bias_weight_floor(bias, qi.scale), 0.0)
        old = s_w.astype(np.float64)
        w_q, s_w = weight_params(wa, axis, min_scale=floor)
        s_acc = qi.scale * s_w.astype(np.float64)
        b_q = np.rint(bias / s_acc)
        if np.any(np.abs(b_q) > BIAS_LIMIT):  # pragma: no cover - the floor guarantees it
            raise QuantizationError("the quantized bias overflows int32 even with raised "
                                    "weight scales")
        ratio = float((s_w.astype(np.float64)[over] / old[over]).max())
        if notes is not None:
            notes[op.name] = (f"{op.type}: bias up to {float(np.abs(bias).max()):.3g} would "
                              f"overflow int32 at input scale {qi.scale:.3g}; raised the weight "
                              f"scale of {int(over.sum())} of {over.size} output channel(s) "
                              f"(up to {ratio:.3g}x)")
    sum_axes = tuple(i for i in range(w_q.ndim) if i != axis)
    w_sum = w_q.sum(axis=sum_axes, dtype=np.int64)
    corrected = b_q.astype(np.int64) - qi.zero_point * w_sum
    mult, shift = requant_params(qi.scale, s_w, qo.scale)
    op.attrs["quant"] = {
        "weight": w_q, "weight_scale": s_w, "weight_axis": axis,
        "bias": b_q.astype(np.int32),
        "bias_corrected": np.clip(corrected, -(2**31), 2**31 - 1).astype(np.int32),
        "multiplier": mult, "shift": shift,
        "input_scale": qi.scale, "input_zero_point": qi.zero_point,
        "output_scale": qo.scale, "output_zero_point": qo.zero_point,
    }
    return True


def _quantize_add(op: Op, params: dict[Tensor, ActQuant]) -> bool:
    ins = op.input_tensors()
    qo = params.get(op.output)
    qs = [params.get(t) for t in ins]
    if qo is None or len(ins) < 2 or any(q is None for q in qs):
        return False
    ms = np.array([q.scale / qo.scale for q in qs if q is not None])
    mult, shift = quantize_multipliers(ms)
    op.attrs["quant"] = {
        "input_multipliers": mult, "input_shifts": shift,
        "input_zero_points": [q.zero_point for q in qs if q is not None],
        "output_scale": qo.scale, "output_zero_point": qo.zero_point,
    }
    return True

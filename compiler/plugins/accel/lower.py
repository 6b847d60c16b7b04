"""Lowering one layer to one kernel of `compiler.plugins.accel.kernels`: its quantizer parameters,
fused activation and weights in the accelerator's layouts; `check_layer` says whether a layer maps
at all, `relocate` moves a kernel to the slots and offsets of its subgraph."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.errors import QuantizationError
from compiler.plugins.accel import kernels as K
from compiler.plugins.accel.attention_match import NoMatch
from compiler.plugins.accel.layers import Layer, is_byte_view, shuffle_views
from compiler.quantize.params import ActQuant, activation_params
from compiler.quantize.quantizer import requant_params
from compiler.quantize.requant import quantize_multiplier, quantize_multipliers
from compiler.xir import CONST, Op, Tensor
from pyhost.accel import layout
from pyhost.accel.abi import (
    CONST_SLOT,
    FIRST_IO_SLOT,
    SCRATCH_SLOT,
)
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig

#: The layer kinds of the transformer encoder (`kernels.encoder`).
ENCODER_KINDS = frozenset({"linear", "layernorm", "gelu", "attention"})


class LoweringError(ValueError):
    """A layer the plugin cannot give to the accelerator (missing quantization parameters, an
    attribute the kernels do not implement); the message says which."""


def block_shape(shape: Sequence[int] | None) -> tuple[int, int, int, int]:
    """The NCHW view of a tensor in the blocked layout (`layout.nchw_view`): (B, C, H, W),
    (N, C, L) as (N, C, 1, L), (M, K) as (M, K, 1, 1), (K,) as (1, K, 1, 1)."""
    if shape is None or not 1 <= len(shape) <= 4:
        raise LoweringError(f"shape {shape} has no blocked layout (ranks 1 to 4 do)")
    return layout.nchw_view(shape)


def tensor_bytes(shape: Sequence[int] | None, n: int) -> int:
    b, c, h, w = block_shape(shape)
    return layout.act_bytes(c, h, w, n, b)


def act_quant(t: Tensor) -> ActQuant:
    q = t.attrs.get("quant")
    if not isinstance(q, dict) or q.get("dtype") != "int8":
        raise LoweringError(f"tensor {t.name!r} has no int8 quantization parameters")
    if t.dtype != "float32":
        raise LoweringError(f"tensor {t.name!r} is {t.dtype}, not float32")
    return ActQuant.from_attr(q)


def _op_quant(op: Op, keys: Sequence[str]) -> dict[str, Any]:
    q = op.attrs.get("quant")
    if not isinstance(q, dict) or any(k not in q for k in keys):
        raise LoweringError(f"{op.type} {op.name!r} has no quantization parameters (is it "
                            "quantized? it needs constant weights and calibrated tensors)")
    return dict(q)


def _const_scalar(t: Tensor | None, default: float) -> float:
    if t is None:
        return default
    if t.producer.type != CONST:
        raise LoweringError(f"Clip bound {t.name!r} is not a constant")
    return float(np.asarray(t.producer.attrs["data"]).reshape(-1)[0])


def _act(layer: Layer, oq: ActQuant) -> tuple[int, int] | None:
    """REQ bounds of the fused activation in the output's quantized domain."""
    act = layer.act
    if act is None:
        return None
    if act.type == "Relu":
        return K.relu_bounds(oq.zero_point)
    lo_t, hi_t = act.input_tensors("min"), act.input_tensors("max")
    lo = _const_scalar(lo_t[0] if lo_t else None, -math.inf)
    hi = _const_scalar(hi_t[0] if hi_t else None, math.inf)
    return K.clip_bounds(lo, hi, oq.scale, oq.zero_point)


def _fused_requant(q: dict[str, Any], oq: ActQuant) -> dict[str, Any]:
    """Requantization against the fused activation's output parameters."""
    mult, shift = requant_params(q["input_scale"], q["weight_scale"], oq.scale)
    return {**q, "multiplier": mult, "shift": shift, "output_scale": oq.scale,
            "output_zero_point": oq.zero_point}


def _ints(op: Op, key: str, n: int) -> tuple[int, ...]:
    v = op.attrs.get(key)
    if not isinstance(v, list) or len(v) != n:
        raise LoweringError(f"{op.type} {op.name!r}: {key}={v!r} is not {n} values (2-D only)")
    return tuple(int(x) for x in v)


def _window(head: Op, shape: Sequence[int] | None
            ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int],
                       tuple[int, int], bool]:
    """(kernel, strides, pads (top, left, bottom, right), dilations, ceil_mode) of a pool over
    a 2-D (NCHW) or 1-D (N, C, L, pooled as (N, C, 1, L)) input; GlobalMaxPool: the whole
    image."""
    if shape is None or len(shape) not in (3, 4):
        raise LoweringError(f"{head.type} {head.name!r}: only 1-D and 2-D pooling (input "
                            f"{shape})")
    if head.type == "GlobalMaxPool":
        _, _, h, w = block_shape(shape)
        return (h, w), (1, 1), (0, 0, 0, 0), (1, 1), False
    if head.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", None):
        raise LoweringError(f"{head.type} {head.name!r}: auto_pad was not resolved")
    nd = len(shape) - 2
    k = _ints(head, "kernel_shape", nd)
    st = _ints(head, "strides", nd) if "strides" in head.attrs else (1,) * nd
    pd = _ints(head, "pads", 2 * nd) if "pads" in head.attrs else (0,) * (2 * nd)
    dl = _ints(head, "dilations", nd) if "dilations" in head.attrs else (1,) * nd
    ceil = bool(head.attrs.get("ceil_mode", 0))
    if nd == 1:
        return (1, k[0]), (1, st[0]), (0, pd[0], 0, pd[1]), (1, dl[0]), ceil
    return (k[0], k[1]), (st[0], st[1]), (pd[0], pd[1], pd[2], pd[3]), (dl[0], dl[1]), ceil


def blocked_fc_weight(w_kn: np.ndarray, x_shape: tuple[int, int, int, int], n: int
                      ) -> np.ndarray:
    """(K, Nout) weights of an FC reading a flattened (B, C, H, W) tensor -> (K', Nout) rows
    in the order of the blocked layout (k' = ((cb*H + h)*W + w)*N + lane, zero rows for the
    padding channels), so the FC reads the blocked tensor directly.

    Copied a block of `FC_PERMUTE_COLUMNS` outputs at a time: the quantizer's weight is
    usually (Nout, K) (Gemm's transB), whose (K, Nout) view is a transposition, and a block of
    its rows stays in the cache while it is spread (VGG-19's first FC: 103 M weights)."""
    _, c, h, w = x_shape
    nout = w_kn.shape[1]
    cb = layout.blocks(c, n)
    full = c // n
    out = (np.empty if full == cb else np.zeros)((cb, h, w, n, nout), w_kn.dtype)
    dst = out.transpose(0, 3, 1, 2, 4)                      # (cb, lane, h, w, Nout)
    for o0 in range(0, nout, FC_PERMUTE_COLUMNS):
        o1 = min(nout, o0 + FC_PERMUTE_COLUMNS)
        src = w_kn[:, o0:o1].reshape(c, h, w, o1 - o0)      # a view: (c, h, w) split from K
        if full:
            dst[:full, :, :, :, o0:o1] = src[:full * n].reshape(full, n, h, w, o1 - o0)
        if full < cb:
            dst[full, :c - full * n, :, :, o0:o1] = src[full * n:]
    return out.reshape(cb * h * w * n, nout)


#: Outputs `blocked_fc_weight` permutes at a time.
FC_PERMUTE_COLUMNS = 128


def residual_add(layer: Layer) -> bool:
    """An Add/Sum of two activations of the output's shape: the residual add kernel (the
    quantizer's per-input multipliers); anything else is `kernels.binary`."""
    head = layer.head
    xs = head.input_tensors()
    return (head.type in ("Add", "Sum") and len(xs) == 2
            and all(t.shape == head.output.shape and t.producer.type != CONST for t in xs))


def _bview(shape: Sequence[int] | None, rank: int) -> tuple[int, int, int, int]:
    """An operand's blocked view after numpy's broadcasting aligned it to the output rank."""
    s = tuple(int(v) for v in (shape or ()))
    return block_shape((1,) * (rank - len(s)) + s)


def _binary(layer: Layer, ins: Sequence[K.Ref], out: K.Ref, consts: K.Ref, oq: ActQuant,
            bounds: tuple[int, int] | None, cfg: AccelConfig) -> K.Kernel:
    """Add / Sub / Mul with broadcasting or a constant operand (`kernels.binary`); a constant
    is quantized here with the parameters of its own range."""
    head = layer.head
    rank = len(head.output.shape or ())
    if rank > 4:
        raise LoweringError(f"{head.type} {head.name!r}: rank {rank} has no blocked layout")
    operands = []
    it = iter(ins)
    for t in head.input_tensors():
        v = _bview(t.shape, rank)
        if t.producer.type == CONST:
            if t.dtype != "float32":
                raise LoweringError(f"{head.type} {head.name!r}: constant {t.name!r} is "
                                    f"{t.dtype}, not float32")
            data = np.asarray(t.producer.attrs["data"], np.float64)
            if not np.isfinite(data).all():
                raise LoweringError(f"{head.type} {head.name!r}: constant {t.name!r} is not "
                                    "finite")
            cq = activation_params(float(data.min()), float(data.max()), False)
            operands.append(K.Operand(v, cq.scale, cq.zero_point,
                                      data=cq.quantize(data).reshape(v)))
        else:
            q = act_quant(t)
            operands.append(K.Operand(v, q.scale, q.zero_point, ref=next(it)))
    if all(o.data is not None for o in operands):
        raise LoweringError(f"{head.type} {head.name!r}: both operands are constants (fold it)")
    op = {"Add": "add", "Sum": "add", "Sub": "sub", "Mul": "mul", "Max": "max",
          "Min": "min"}[head.type]
    return K.binary(op, block_shape(head.output.shape), operands[0], operands[1], out=out,
                    consts=consts, output_scale=oq.scale, output_zero_point=oq.zero_point,
                    act=bounds, cfg=cfg, name=head.name)


def concat_axis(layer: Layer) -> int:
    """The axis of a Concat layer in the blocked view (0: images, 1: channels); a view layer
    is a concat of one input along channels."""
    if layer.kind == "view":
        return 1
    rank = len(layer.output.shape or ())
    axis = int(layer.head.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if rank not in (2, 3, 4) or axis not in (0, 1):
        raise LoweringError(f"Concat {layer.name!r}: only along images or channels (axis "
                            f"{layer.head.attrs.get('axis')} of a rank-{rank} tensor)")
    return axis


def in_place_offsets(layer: Layer, n: int) -> list[int | None]:
    """Per input of a Concat / view layer: the byte offset in the output at which its producer
    could write it directly (its bytes are a contiguous piece of the output's), or None where
    only a copy can put it there (a channel offset in a batch of images)."""
    shapes = [block_shape(t.shape) for t in layer.inputs]
    out = block_shape(layer.output.shape)
    axis = concat_axis(layer)
    try:
        offs = K.concat_offsets(shapes, axis, n)
    except K.AccelKernelError:
        return [None] * len(shapes)
    b, c, h, w = out
    if axis == 0:
        return [o * layout.act_bytes(c, h, w, n) for o in offs]
    if b != 1:
        return [None] * len(shapes)
    return [(o // n) * h * w * n for o in offs]


def temp_bytes(layer: Layer) -> int:
    """Card memory a layer's kernel needs for itself while it runs (the attention's
    probabilities: tokens x tokens bytes); 0 for the others."""
    if layer.kind != "attention":
        return 0
    s = layer.sources[0].shape
    return K.encoder.attention_scratch(int(s[1]), len(layer.sources) > 3) if s else 0


def _tokens_features(t: Tensor, what: str) -> tuple[int, int]:
    s = t.shape
    if s is None or len(s) != 3 or int(s[0]) != 1:
        raise LoweringError(f"{what} {t.name!r} of shape {s} is not (1, tokens, features)")
    return int(s[1]), int(s[2])


def _const_vector(t: Tensor, size: int, what: str) -> np.ndarray:
    if t.producer.type != CONST:
        raise LoweringError(f"{what} {t.name!r} is not a constant")
    v = np.asarray(t.producer.attrs["data"], np.float64).reshape(-1)
    if v.size not in (1, size) or not np.isfinite(v).all():
        raise LoweringError(f"{what} {t.name!r}: {v.size} values for {size} features, or not "
                            "finite")
    return np.broadcast_to(v, (size,)).copy()


def _encoder_kernel(layer: Layer, cfg: AccelConfig, ins: Sequence[K.Ref], out: K.Ref,
                    consts: K.Ref, temp: K.Ref | None) -> K.Kernel:
    """The kernels of `kernels.encoder`: linear, layernorm, gelu, attention, and the residual
    add of (1, tokens, features) tensors."""
    head, kind = layer.head, layer.kind
    oq = act_quant(layer.output)
    enc = K.encoder
    if kind == "linear":
        x = layer.inputs[0]
        tokens, d_in = _tokens_features(x, "MatMul input")
        w = head.input_tensors("B")[0]
        if w.producer.type != CONST:
            raise LoweringError(f"MatMul {head.name!r}: the weights are not a constant")
        wf = np.asarray(w.producer.attrs["data"], np.float64)
        bias = None
        if layer.post is not None:
            b_t = next(t for t in layer.post.input_tensors() if t is not head.output)
            bias = _const_vector(b_t, wf.shape[1], "bias")
        return enc.linear(tokens, wf, bias, act_quant(x), oq, inp=ins[0], out=out,
                          consts=consts, cfg=cfg, name=head.name)
    if kind == "layernorm":
        x = layer.inputs[0]
        tokens, h = _tokens_features(x, "LayerNormalization input")
        if int(head.attrs.get("axis", -1)) not in (-1, 2):
            raise LoweringError(f"LayerNormalization {head.name!r}: only over the last axis")
        gamma = _const_vector(head.input_tensors("Scale")[0], h, "gamma")
        b_in = head.input_tensors("B")
        beta = _const_vector(b_in[0], h, "beta") if b_in else np.zeros(h)
        return enc.layernorm(tokens, h, act_quant(x), float(head.attrs.get("epsilon", 1e-5)),
                             gamma, beta, oq, inp=ins[0], out=out, consts=consts, cfg=cfg,
                             name=head.name)
    if kind == "gelu":
        x = layer.inputs[0]
        tokens, h = _tokens_features(x, "Gelu input")
        if head.attrs.get("approximate", "none") != "none":
            raise LoweringError(f"Gelu {head.name!r}: only the erf form (approximate='none')")
        return enc.gelu(tokens, h, act_quant(x), oq, inp=ins[0], out=out, consts=consts,
                        cfg=cfg, name=head.name)
    if kind == "add":
        tokens, h = _tokens_features(layer.output, "Add output")
        xs = head.input_tensors()
        acts = [t for t in xs if t.producer.type != CONST]
        cst = [t for t in xs if t.producer.type == CONST]
        if len(xs) != 2 or not acts or head.type != "Add":
            raise LoweringError(f"{head.type} {head.name!r}: only the sum of two tensors")
        for t in acts:
            if tuple(t.shape or ()) != (1, tokens, h):
                raise LoweringError(f"Add {head.name!r}: {t.name!r} of shape {t.shape} is not "
                                    f"(1, {tokens}, {h})")
        b_const = None
        if cst:
            b_const = np.asarray(cst[0].producer.attrs["data"], np.float64)
            if b_const.size not in (h, tokens * h):
                raise LoweringError(f"Add {head.name!r}: a constant of shape "
                                    f"{b_const.shape} (only per feature or per element)")
        return enc.add(tokens, h, act_quant(acts[0]),
                       act_quant(acts[1]) if len(acts) > 1 else None, oq, a=ins[0],
                       b=ins[1] if len(acts) > 1 else None, out=out, consts=consts,
                       b_const=b_const, cfg=cfg, name=head.name)
    # attention
    m = layer.match
    if m is None:
        raise LoweringError(f"Softmax {head.name!r}: an attention layer without its block")
    qq, kq, vq = (act_quant(t) for t in (m.q, m.k, m.v))
    for t, tq in ((m.q, qq), (m.k, kq), (m.v, vq)):
        if tq.zero_point != 0 or tq.feature_scales is not None:
            raise LoweringError(f"attention {head.name!r}: {t.name!r} is not symmetric per "
                                "tensor (Q, K and V must be: is the graph quantized by this "
                                "compiler?)")
    mq = act_quant(m.mask) if m.mask is not None else None
    if temp is None:
        raise LoweringError(f"attention {head.name!r}: no scratch memory for the probabilities")
    return enc.attention(
        m.tokens, m.heads * m.head_size, m.heads, qq.scale * kq.scale * m.factor, vq.scale,
        oq, q=ins[0], k=ins[1], v=ins[2], out=out, scratch=temp,
        consts=consts, mask=ins[3] if mq is not None else None,
        mask_full=m.mask is not None and int((m.mask.shape or (1,))[-2]) > 1,
        mask_scale=mq.scale if mq is not None else 0.0,
        mask_zero_point=mq.zero_point if mq is not None else 0, cfg=cfg, name=head.name)


def _per_feature(layer: Layer) -> bool:
    return any(isinstance(t.attrs.get("quant"), dict) and "feature_scales" in t.attrs["quant"]
               for t in (*layer.inputs, layer.output))


def encoder_add(layer: Layer) -> bool:
    """An Add that the encoder's add kernel computes: a (1, tokens, features) sum with a
    per-feature tensor among its operands or its output."""
    s = layer.output.shape
    return (layer.kind == "add" and layer.head.type == "Add" and layer.act is None
            and s is not None and len(s) == 3 and _per_feature(layer))


def build_kernel(layer: Layer, cfg: AccelConfig, ins: Sequence[K.Ref], out: K.Ref,
                 consts: K.Ref, in_place: Sequence[bool] = (),
                 temp: K.Ref | None = None) -> K.Kernel:
    """The kernel of one layer with its tensors at the given Refs. Raises LoweringError,
    K.AccelKernelError or QuantizationError if the layer cannot be mapped. ``in_place``
    (Concat and view layers): which inputs their producers already wrote into the output,
    so that the kernel copies only the others. ``temp``: the layer's own scratch memory
    (`temp_bytes`)."""
    head, kind = layer.head, layer.kind
    if kind in ENCODER_KINDS or encoder_add(layer):
        for t in layer.inputs:
            act_quant(t)
        kern = _encoder_kernel(layer, cfg, ins, out, consts, temp)
        got = tuple(kern.outputs[0].shape)
        if got != block_shape(layer.output.shape):
            raise LoweringError(f"{head.type} {head.name!r}: the kernel computes {got}, the "
                                f"graph says {layer.output.shape}")
        return kern
    if _per_feature(layer):
        raise LoweringError(f"{head.type} {head.name!r}: a tensor is quantized per feature (a "
                            "transformer's activations), which only the encoder kernels read")
    if kind == "add" and len(head.input_tensors()) != 2:
        raise LoweringError(f"{head.type} {head.name!r}: only two operands "
                            f"({len(head.input_tensors())} given)")
    oq = act_quant(layer.output)
    for t in layer.inputs:
        act_quant(t)
    bounds = _act(layer, oq)
    if kind == "conv":
        q = _op_quant(head, ("weight", "weight_scale", "bias_corrected", "multiplier", "shift"))
        x = layer.inputs[0]
        if x.shape is None or len(x.shape) != 4:
            raise LoweringError(f"Conv {head.name!r}: only 2-D convolutions (NCHW input)")
        if layer.act is not None:
            q = _fused_requant(q, oq)
        kern = K.conv2d(x.shape, q, inp=ins[0], out=out, consts=consts,
                        strides=_ints(head, "strides", 2), pads=_ints(head, "pads", 4),
                        dilations=_ints(head, "dilations", 2),
                        group=int(head.attrs.get("group", 1)), act=bounds, cfg=cfg,
                        name=head.name)
    elif kind == "gemm":
        q = _op_quant(head, ("weight", "weight_scale", "bias_corrected", "multiplier", "shift",
                             "weight_axis"))
        w = np.asarray(q["weight"])
        w_kn = w.T if int(q["weight_axis"]) == 0 else w
        x = layer.inputs[0]
        if layer.view is not None:
            xs = block_shape(x.shape)
            w_kn = blocked_fc_weight(w_kn, xs, cfg.n)
            m = xs[0]
        else:
            if x.shape is None or len(x.shape) != 2:
                raise LoweringError(f"{head.type} {head.name!r}: the input must be (M, K)")
            m = int(x.shape[0])
        q = {**q, "weight": w_kn, "weight_axis": 1}
        if layer.act is not None:
            q = _fused_requant(q, oq)
        kern = K.gemm(m, q, inp=ins[0], out=out, consts=consts, act=bounds, cfg=cfg,
                      name=head.name)
    elif kind == "add" and not residual_add(layer):
        kern = _binary(layer, ins, out, consts, oq, bounds, cfg)
    elif kind == "add":
        q = _op_quant(head, ("input_multipliers", "input_shifts", "input_zero_points"))
        xs = layer.inputs
        if layer.act is not None:
            mult, shift = quantize_multipliers(np.array([act_quant(t).scale / oq.scale
                                                         for t in xs]))
            q = {**q, "input_multipliers": mult, "input_shifts": shift,
                 "output_scale": oq.scale, "output_zero_point": oq.zero_point}
        kern = K.add(block_shape(head.output.shape), q, a=ins[0], b=ins[1], out=out,
                     consts=consts, act=bounds, cfg=cfg, name=head.name)
    elif kind == "maxpool":
        x = layer.inputs[0]
        iq = act_quant(x)
        if iq != oq:
            raise LoweringError(f"{head.type} {head.name!r}: input and output quantization "
                                "differ")
        xs = block_shape(x.shape)
        kshape, strides, pads, dils, ceil = _window(head, x.shape)
        kern = K.maxpool2d(xs, kshape, inp=ins[0], out=out, strides=strides, pads=pads,
                           dilations=dils, ceil_mode=ceil, zero_point=iq.zero_point, cfg=cfg,
                           name=head.name)
    elif kind == "relu":
        x = layer.inputs[0]
        if x.producer.type == CONST:
            raise LoweringError(f"Relu {head.name!r}: the input is a constant (fold it)")
        iq = act_quant(x)
        mult, shift = quantize_multiplier(iq.scale / oq.scale)
        kern = K.requant_act(block_shape(x.shape), multiplier=mult, shift=shift,
                             input_zero_point=iq.zero_point, output_zero_point=oq.zero_point,
                             inp=ins[0], out=out, consts=consts,
                             act=K.relu_bounds(oq.zero_point), cfg=cfg, name=head.name)
    elif kind == "avgpool":
        x = layer.inputs[0]
        iq = act_quant(x)
        xs = block_shape(x.shape)
        b, c, h, w = xs
        window = None if head.type == "GlobalAveragePool" else _window(head, x.shape)
        if window is None or (window[0] == (h, w) and not any(window[2])
                              and window[3] == (1, 1) and not window[4]):
            # the whole image: a reduction tree (GlobalAveragePool, or a window that covers
            # exactly the image without padding)
            mult, shift = quantize_multiplier(iq.scale / (h * w * oq.scale))
            kern = K.global_avgpool(xs, multiplier=mult, shift=shift,
                                    input_zero_point=iq.zero_point,
                                    output_zero_point=oq.zero_point, inp=ins[0], out=out,
                                    consts=consts, act=bounds, cfg=cfg, name=head.name)
        else:
            kshape, strides, pads, dils, ceil = window
            kern = K.avgpool2d(xs, kshape, input_scale=iq.scale,
                               input_zero_point=iq.zero_point, output_scale=oq.scale,
                               output_zero_point=oq.zero_point, inp=ins[0], out=out,
                               consts=consts, strides=strides, pads=pads, dilations=dils,
                               count_include_pad=bool(head.attrs.get("count_include_pad", 0)),
                               ceil_mode=ceil, act=bounds, cfg=cfg, name=head.name)
    elif kind in ("concat", "view"):
        if kind == "view" and not is_byte_view(head):
            raise LoweringError(f"{head.type} {head.name!r}: {layer.inputs[0].shape} -> "
                                f"{head.output.shape} moves bytes of the blocked layout (only "
                                "views that keep images, channels and pixels are free)")
        for t in layer.inputs:
            if t.producer.type == CONST:
                raise LoweringError(f"{head.type} {head.name!r}: input {t.name!r} is a "
                                    "constant")
            if act_quant(t) != oq:
                raise LoweringError(f"{head.type} {head.name!r}: input {t.name!r} is quantized "
                                    "differently from the output (the quantizer unifies a "
                                    "Concat's tensors; is the graph quantized?)")
        axis = concat_axis(layer)
        shapes = [block_shape(t.shape) for t in layer.inputs]
        offs = K.concat_offsets(shapes, axis, cfg.n)
        done = list(in_place) or [False] * len(shapes)
        parts = [K.ConcatPart(r, sh, o) for r, sh, o, d
                 in zip(ins, shapes, offs, done, strict=True) if not d]
        kern = K.concat(block_shape(layer.output.shape), parts, axis, out=out,
                        zero_point=oq.zero_point, cfg=cfg, name=head.name)
    elif kind == "permute":
        sv = shuffle_views(head)
        if sv is None or layer.view is not sv[0] or layer.post is not sv[1]:
            raise LoweringError(f"Transpose {head.name!r}: only a Reshape -> Transpose -> "
                                "Reshape that permutes channels (a channel shuffle)")
        x = layer.inputs[0]
        if act_quant(x) != oq:
            raise LoweringError(f"Transpose {head.name!r}: input and output quantization "
                                "differ")
        kern = K.permute_channels(block_shape(x.shape), sv[2], inp=ins[0], out=out,
                                  consts=consts, zero_point=oq.zero_point, cfg=cfg,
                                  name=head.name)
    else:  # pragma: no cover - KIND_OF covers every head type
        raise LoweringError(f"unknown layer kind {kind!r}")
    got = tuple(kern.outputs[0].shape)
    if got != block_shape(layer.output.shape):
        raise LoweringError(f"{head.type} {head.name!r}: the kernel computes {got}, the graph "
                            f"says {layer.output.shape}")
    return kern


def layer_macs(layer: Layer) -> int:
    """Multiply-accumulates of the layer as the model defines them (no padding channels)."""
    head = layer.head
    if layer.kind == "linear":
        x = layer.inputs[0].shape or ()
        return math.prod(head.output.shape or ()) * int(x[-1] if x else 0)
    if layer.kind == "attention":
        s = layer.sources[0].shape or (0, 0, 0)
        return 2 * int(s[1]) * int(s[1]) * int(s[2])           # Q K^T and P V
    if layer.kind == "conv":
        w = head.input_tensors("W")[0].shape or ()
        return math.prod(layer.output.shape or ()) * math.prod(w[1:])
    if layer.kind == "gemm":
        x = layer.inputs[0].shape or ()
        return math.prod(layer.output.shape or ()) * math.prod(x[1:])
    return 0


def check_layer(layer: Layer, cfg: AccelConfig) -> tuple[K.Kernel | None, str | None]:
    """(kernel at placeholder Refs, None) if the layer maps onto the accelerator, else (None,
    the reason). Placeholders: constants at slot 0, input i at slot 2 + i, the output after the
    inputs, all at offset 0 (`relocate` moves them)."""
    refs = [K.Ref(FIRST_IO_SLOT + i) for i in range(len(layer.inputs))]
    temp = K.Ref(SCRATCH_SLOT) if temp_bytes(layer) else None
    try:
        return build_kernel(layer, cfg, refs, K.Ref(FIRST_IO_SLOT + len(refs)),
                            K.Ref(CONST_SLOT), temp=temp), None
    except (LoweringError, K.AccelKernelError, QuantizationError, NoMatch) as e:
        return None, str(e)


def _mem_field(name: str) -> tuple[np.uint64, np.uint64]:
    """(lsb, mask) of a LOAD/STORE field, which lies in an instruction's low 64 bits."""
    lsb = isa.field_lsb(isa.Opcode.LOAD, name)
    width = next(f.width for f in isa.FORMATS[isa.Opcode.LOAD] if f.name == name)
    assert lsb + width <= 64 and isa.field_lsb(isa.Opcode.STORE, name) == lsb
    return np.uint64(lsb), np.uint64((1 << width) - 1)


_SLOT, _OFFSET = _mem_field("slot"), _mem_field("offset")


def relocate(kern: K.Kernel, ins: Sequence[K.Ref], out: K.Ref, consts: K.Ref,
             temp: K.Ref | None = None) -> K.Kernel:
    """A `check_layer` kernel moved to real Refs: LOAD/STORE slots and offsets rewritten (the
    kernels' code depends on where the tensors are only through these two fields), on the
    encoded stream at once. ``temp``: where the layer's own scratch memory went."""
    where = {CONST_SLOT: consts, FIRST_IO_SLOT + len(ins): out}
    if temp is not None:
        where[SCRATCH_SLOT] = temp
    where.update({FIRST_IO_SLOT + i: r for i, r in enumerate(ins)})
    known = np.zeros(isa.NUM_SLOTS, bool)
    new_slot = np.zeros(isa.NUM_SLOTS, np.uint64)
    delta = np.zeros(isa.NUM_SLOTS, np.uint64)
    for s, r in where.items():
        known[s], new_slot[s], delta[s] = True, r.slot, r.offset
    words = np.frombuffer(isa.Stream.of(kern.insns).raw, "<u8").reshape(-1, 2).copy()
    lo = words[:, 0]                                    # a view: the low 64 bits
    op = lo & np.uint64(0xF)
    mem = (op == isa.Opcode.LOAD) | (op == isa.Opcode.STORE)
    (s_lsb, s_mask), (o_lsb, o_mask) = _SLOT, _OFFSET
    slot = ((lo[mem] >> s_lsb) & s_mask).astype(np.intp)
    assert known[slot].all(), "a check_layer kernel uses only its placeholder slots"
    offset = ((lo[mem] >> o_lsb) & o_mask) + delta[slot]
    if (offset > o_mask).any():
        raise isa.IsaError(f"a relocated LOAD/STORE offset, {int(offset.max()):#x}, does not "
                           "fit 32 bits")
    keep = ~((s_mask << s_lsb) | (o_mask << o_lsb))
    lo[mem] = (lo[mem] & keep) | (new_slot[slot] << s_lsb) | (offset << o_lsb)

    def moved(t: K.TensorInfo, r: K.Ref) -> K.TensorInfo:
        return dataclasses.replace(t, ref=r)

    return dataclasses.replace(
        kern, insns=isa.Stream(words.tobytes()),
        inputs=tuple(moved(t, r) for t, r in zip(kern.inputs, ins, strict=True)),
        outputs=(moved(kern.outputs[0], out),),
        consts=dataclasses.replace(kern.consts, ref=consts) if kern.consts else None)

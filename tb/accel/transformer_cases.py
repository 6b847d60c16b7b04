"""Random transformer layers laid out in card memory for compiler/plugins/accel/kernels/:
an attention head (attention.py: int8 Q, K, V, symmetric per tensor) and a linear layer
(linear_t.py: int8 X, per-output-feature int8 weights, int32 bias), in the tile-major
transposed layout, with their programs and readers for their outputs. Used by tests/compiler
(functional card against float and the integer arithmetic) and tb/accel/test_accel.py (RTL
against the model)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels.attention import P_BITS, attention_head
from compiler.plugins.accel.kernels.linear_t import linear_t
from compiler.quantize.requant import quantize_multipliers, requantize
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig


@dataclass
class HeadCase:
    program: list[isa.Insn]
    memory: bytearray
    q: int
    k: int
    v: int
    p: int
    out: int
    seq: int
    d: int
    n: int
    qf: np.ndarray                  # the dequantized inputs (seq x d)
    kf: np.ndarray
    vf: np.ndarray
    out_scale: float                # real value of one unit of the output

    def output(self, mem: bytes | bytearray | np.ndarray) -> np.ndarray:
        """out (seq x d, int32 units) from the program's out^T rows in ``mem``."""
        nb = self.seq // self.n
        raw = np.frombuffer(bytes(mem[self.out:self.out + self.seq * self.d * 4]), "<i4")
        return raw.reshape(nb, self.d, self.n).transpose(0, 2, 1).reshape(self.seq, self.d)


def _random_qkv(rng: np.random.Generator, seq: int, width: int, spread: float = 1.0
                ) -> tuple[list[np.ndarray], list[np.ndarray], list[float]]:
    """Q, K, V (normal, sigma ``spread``, seq x width) quantized symmetrically to int8: their
    integers, the values those stand for, and the scales."""
    ints, floats, scales = [], [], []
    for _ in range(3):
        x = rng.standard_normal((seq, width)) * spread
        s = float(np.abs(x).max()) / 127
        qx = np.clip(np.round(x / s), -127, 127).astype(np.int64)
        ints.append(qx)
        floats.append(qx * s)
        scales.append(s)
    return ints, floats, scales


def multi_head_memory(cfg: AccelConfig, rng: np.random.Generator, seq: int, heads: int,
                      d: int) -> tuple[list[HeadCase], bytearray]:
    """Q, K, V of ``heads`` heads of ``d`` features each in one tensor per role (seq x heads*d,
    tile-major transposed int8), and one HeadCase per head whose program reads its slice
    (``width`` = heads * d) into its own P and output buffers; all in one memory."""
    n, width = cfg.n, heads * d
    ints, floats, scales = _random_qkv(rng, seq, width)
    size = seq * width
    q, k, v = 0, size, 2 * size
    scratch = 3 * size
    per_head = -(-seq * seq // 64) * 64 + seq * d * 4
    mem = bytearray(scratch + heads * per_head)
    for off, x in zip((q, k, v), ints, strict=True):
        mem[off:off + size] = tile_major(x, n)
    score = scales[0] * scales[1] / math.sqrt(d)
    cases = []
    for h in range(heads):
        p = scratch + h * per_head
        out = p + -(-seq * seq // 64) * 64
        program = attention_head(cfg, seq, d, score, q=q + h * d * n, k=k + h * d * n,
                                 v=v + h * d * n, p=p, out=out, width=width)
        cols = slice(h * d, (h + 1) * d)
        cases.append(HeadCase(program, mem, q, k, v, p, out, seq, d, n, floats[0][:, cols],
                              floats[1][:, cols], floats[2][:, cols],
                              out_scale=scales[2] * 2.0 ** -P_BITS))
    return cases, mem


def tile_major(x: np.ndarray, n: int) -> bytes:
    """(seq x d) int8 as its transpose in the tile-major layout: element (J, e) = tokens
    J*n .. J*n + n-1 of feature e at byte (J * d + e) * n."""
    seq, d = x.shape
    return x.reshape(seq // n, n, d).transpose(0, 2, 1).astype(np.int8).tobytes()


def head_memory(cfg: AccelConfig, rng: np.random.Generator, seq: int, d: int,
                spread: float = 1.0, base: int = 0, mem_size: int | None = None) -> HeadCase:
    """Random Q, K, V (normal, sigma ``spread``) quantized to int8, placed from ``base`` in a
    memory of ``mem_size`` bytes (default: just large enough), with the program."""
    n = cfg.n
    ints, floats, scales = _random_qkv(rng, seq, d, spread)
    size = seq * d
    q, k, v = base, base + size, base + 2 * size
    p = base + 3 * size
    out = p + -(-seq * seq // 64) * 64
    end = out + size * 4
    mem = bytearray(mem_size if mem_size is not None else end)
    for off, x in zip((q, k, v), ints, strict=True):
        mem[off:off + size] = tile_major(x, n)
    score = scales[0] * scales[1] / math.sqrt(d)
    program = attention_head(cfg, seq, d, score, q=q, k=k, v=v, p=p, out=out)
    return HeadCase(program, mem, q, k, v, p, out, seq, d, n, *floats,
                    out_scale=scales[2] * 2.0 ** -P_BITS)


@dataclass
class LinearCase:
    program: list[isa.Insn]
    memory: bytearray
    y: int
    tokens: int
    d_out: int
    n: int
    expect: np.ndarray              # the int8 output by the accelerator's arithmetic (t x e)
    float_out: np.ndarray           # the float output in output units (t x e)

    def output(self, mem: bytes | bytearray | np.ndarray) -> np.ndarray:
        """Y (tokens x d_out, int8) from the program's tile-major Y^T in ``mem``."""
        nb = self.tokens // self.n
        raw = np.frombuffer(bytes(mem[self.y:self.y + self.tokens * self.d_out]), np.int8)
        return raw.reshape(nb, self.d_out, self.n).transpose(0, 2, 1).reshape(
            self.tokens, self.d_out).astype(np.int64)


def linear_case(cfg: AccelConfig, rng: np.random.Generator, tokens: int, d_in: int,
                d_out: int, base: int = 0) -> LinearCase:
    """A random quantized linear layer: int8 X (scale sx), per-output-feature symmetric int8
    weights, int32 bias, the output scale from the float output's range; placed from
    ``base``."""
    n = cfg.n
    xf = rng.standard_normal((tokens, d_in))
    wf = rng.standard_normal((d_out, d_in)) / np.sqrt(d_in)
    bf = rng.standard_normal(d_out) * 0.1
    sx = float(np.abs(xf).max()) / 127
    sw = np.abs(wf).max(1) / 127
    qx = np.clip(np.round(xf / sx), -127, 127).astype(np.int64)
    qw = np.clip(np.round(wf / sw[:, None]), -127, 127).astype(np.int64)
    qb = np.round(bf / (sx * sw)).astype(np.int64)
    acc = qx @ qw.T + qb                                  # tokens x d_out, int64
    real = acc * (sx * sw)                                # the float the layer computes
    sy = float(np.abs(real).max()) / 127
    m, s = quantize_multipliers(sx * sw / sy)
    expect = requantize(acc, m[None, :], s[None, :]).astype(np.int64)
    x_off = base
    y_off = x_off + _align64(tokens * d_in)
    c_off = y_off + _align64(tokens * d_out)
    layer = linear_t(cfg, tokens, qw.astype(np.int8), qb, m, s, x=x_off, consts=c_off, y=y_off)
    mem = bytearray(c_off + len(layer.blob))
    mem[x_off:x_off + tokens * d_in] = tile_major(qx, n)
    mem[c_off:] = layer.blob
    return LinearCase(layer.program, mem, y_off, tokens, d_out, n, expect, real / sy)


def _align64(v: int) -> int:
    return -(-v // 64) * 64

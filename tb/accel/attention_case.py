"""A random attention head laid out in card memory for compiler/plugins/accel/kernels/
attention.py: int8 Q, K, V (symmetric, per tensor), their tile-major transposed layout, the
program, and a reader for its int32 output. Used by tests/compiler/test_attention_kernel.py
(functional card against float attention) and tb/accel/test_accel.py (RTL against the model)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.plugins.accel.kernels.attention import P_BITS, attention_head
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
    ints, floats, scales = [], [], []
    for _ in range(3):
        x = rng.standard_normal((seq, d)) * spread
        s = float(np.abs(x).max()) / 127
        qx = np.clip(np.round(x / s), -127, 127).astype(np.int64)
        ints.append(qx)
        floats.append(qx * s)
        scales.append(s)
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

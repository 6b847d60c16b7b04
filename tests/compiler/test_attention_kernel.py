"""compiler/plugins/accel/kernels/attention.py: one attention head on the functional card (XALU
DIV, the transposed LOAD and the integer Softmax together) against float attention, race-free;
tb/accel/test_accel.py runs the same program on the RTL bit-exact with the model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.plugins.accel.kernels.attention import P_BITS, AttentionError, attention_head
from pyhost.accel.model import AccelModel
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tb.accel import races
from tb.accel.transformer_cases import head_memory, multi_head_memory

CFG = AccelConfig()


def float_attention(qf: np.ndarray, kf: np.ndarray, vf: np.ndarray) -> np.ndarray:
    """softmax(Q K^T / sqrt(d)) V for (seq, d) matrices."""
    s = qf @ kf.T / math.sqrt(qf.shape[1])
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ vf


@pytest.mark.parametrize("seq, d, spread", [(32, 16, 1.0), (16, 8, 3.0), (32, 32, 0.3)])
def test_attention_head_matches_float(seq: int, d: int, spread: float) -> None:
    """Random int8 Q, K, V: every output within 0.03 x max|V| of float attention on the
    dequantized inputs (P at 7 fraction bits: about 0.004 per probability), and the rows of
    P^T in memory summing to about 128 for every query."""
    rng = np.random.default_rng(seq + d)
    h = head_memory(CFG, rng, seq, d, spread)
    model = AccelModel(CFG)
    res = model.execute(h.program, h.memory, [0] * isa.NUM_SLOTS)
    assert res.ok, (res.error.name, res.err_pc)
    got = h.output(h.memory) * h.out_scale
    want = float_attention(h.qf, h.kf, h.vf)
    err = float(np.abs(got - want).max())
    assert err <= 0.03 * float(np.abs(h.vf).max()), err
    p = np.frombuffer(bytes(h.memory[h.p:h.p + seq * seq]), np.int8).reshape(seq // CFG.n,
                                                                         seq, CFG.n)
    sums = p.astype(np.int64).sum(axis=1)                # over the keys, per query
    assert np.all(np.abs(sums - (1 << P_BITS)) <= seq // 2 + 2), sums
    races.check_races(h.program, CFG.n, [0] * isa.NUM_SLOTS)      # raises on a race


@pytest.mark.parametrize("seq, heads, d", [(32, 2, 16), (16, 4, 8)])
def test_heads_read_their_slice_of_wider_tensors(seq: int, heads: int, d: int) -> None:
    """Several heads over one Q, K and V of heads x d features (width > d: K through one
    transposed LOAD per token block): each head's output within 3 % of max|V| of float
    attention on its own slice of the features."""
    cases, mem = multi_head_memory(CFG, np.random.default_rng(seq * heads), seq, heads, d)
    model = AccelModel(CFG)
    for h, c in enumerate(cases):
        res = model.execute(c.program, mem, [0] * isa.NUM_SLOTS)
        assert res.ok, (h, res.error.name, res.err_pc)
        got = c.output(mem) * c.out_scale
        want = float_attention(c.qf, c.kf, c.vf)
        assert np.abs(got - want).max() <= 0.03 * float(np.abs(c.vf).max()), h


def test_attention_head_refuses_what_it_cannot_do() -> None:
    with pytest.raises(AttentionError, match="multiples of N"):
        attention_head(CFG, 20, 16, 0.01, q=0, k=0, v=0, p=0, out=0)
    with pytest.raises(AttentionError, match="width at least d"):
        attention_head(CFG, 16, 16, 0.01, q=0, k=0, v=0, p=0, out=0, width=8)
    with pytest.raises(AttentionError, match="one ALU loop"):
        attention_head(CFG, 256, 16, 0.01, q=0, k=0, v=0, p=0, out=0)
    small = AccelConfig(acc_depth=64)
    with pytest.raises(AttentionError, match="ACC"):
        attention_head(small, 32, 16, 0.01, q=0, k=0, v=0, p=0, out=0)

"""pyhost/ibert.py: the integer-only non-linearities against their float functions over the whole
int8 input range (the bounds docs/transformers.md states), their input checks, and two of them
run as accelerator programs on the functional model, bit-exact with the numpy sequences."""

from __future__ import annotations

import numpy as np
import pytest

from pyhost import ibert
from pyhost.accel.model import AccelModel
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from pyhost.spec.isa import AluOp

INT8 = np.arange(-128, 128)
SCALES = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


@pytest.mark.parametrize("scale", SCALES)
def test_i_exp_within_0_0065(scale: float) -> None:
    """exp(x) for every difference of two int8 values (x = -255 .. 0 LSB): absolute error at
    most 0.0065 (measured 0.0030 .. 0.0058) at every scale."""
    q = np.arange(-255, 1)
    r, s = ibert.i_exp(q, scale)
    assert np.abs(r * s - np.exp(q * scale)).max() <= 0.0065


@pytest.mark.parametrize("length", [32, 128])
@pytest.mark.parametrize("scale", [0.01, 0.05, 0.2, 0.5])
def test_i_softmax_within_0_006(scale: float, length: int) -> None:
    """Softmax of random int8 rows with 8 fraction bits out: every probability within 0.006 of
    the float one (measured at most 0.0046; the output step alone is 0.0039)."""
    q = np.random.default_rng(length).integers(-128, 128, (300, length))
    r, s = ibert.i_softmax(q, scale)
    assert s == 2.0 ** -8
    assert np.abs(r * s - _softmax(q * scale)).max() <= 0.006


@pytest.mark.parametrize("scale", [0.005, 0.01, 0.02, 0.05, 0.1, 0.2])
def test_i_gelu_within_bound(scale: float) -> None:
    """GELU of every int8 value: absolute error at most 0.012 + 0.005 max|x| (measured 0.0099
    at scale 0.005 (|x| <= 0.64) .. 0.128 at 0.2 (|x| <= 25.6))."""
    r, s = ibert.i_gelu(INT8, scale)
    bound = 0.012 + 0.005 * 128 * scale
    assert np.abs(r * s - ibert.gelu(INT8 * scale)).max() <= bound


@pytest.mark.parametrize("h", [32, 384])
@pytest.mark.parametrize("scale", [0.01, 0.1])
def test_i_layernorm_within_bound(scale: float, h: int) -> None:
    """LayerNorm's normalization of int8 rows, 10 fraction bits out: rows spread over the int8
    range within 0.003 (measured 0.0021), narrow rows (normal, sigma 6 LSB) within 0.03
    (measured 0.023; the integer square root of a small variance), constant rows exactly 0."""
    rng = np.random.default_rng(h)
    wide = rng.integers(-128, 128, (300, h))
    narrow = np.clip(np.round(rng.normal(0, 6, (300, h))), -128, 127).astype(np.int64)
    for q, bound in ((wide, 0.003), (narrow, 0.03)):
        r, s = ibert.i_layernorm(q, scale)
        assert np.abs(r * s - _layernorm(q * scale)).max() <= bound
    r, _ = ibert.i_layernorm(np.full((2, h), -7), scale)
    assert not r.any()


@pytest.mark.parametrize("vs", [3, 7])
def test_i_layernorm_of_wide_rows(vs: int) -> None:
    """Rows spanning 2**(8 + var_shift) (per-feature activations brought to one fine scale:
    the squares summed shifted): within 0.005 + 0.2 % of the value of float (measured 0.0043
    and 0.0235 at values up to 19) for rows spread over the range and for rows with a few
    outlier features up to 60 times the rest's sigma, exactly 0 for constant rows; a row wider
    than that is refused."""
    rng = np.random.default_rng(vs)
    top = (1 << (7 + vs)) - 1
    wide = rng.integers(-top, top + 1, (200, 384))
    outl = np.round(rng.normal(0, top / 60, (200, 384))).astype(np.int64)
    outl[:, :3] = rng.integers(-top, top + 1, (200, 3))
    for q in (wide, outl):
        r, s = ibert.i_layernorm(q, 0.01, var_shift=vs)
        want = _layernorm(q * 0.01)
        assert (np.abs(r * s - want) <= 0.005 + 0.002 * np.abs(want)).all()
    r, _ = ibert.i_layernorm(np.full((2, 64), top), 0.01, var_shift=vs)
    assert not r.any()
    with pytest.raises(ValueError, match=f"spans 2\\*\\*{8 + vs}"):
        ibert.i_layernorm(np.array([[top + 2, -top]]), 0.01, var_shift=vs)


def test_input_checks() -> None:
    with pytest.raises(ValueError, match="q <= 0"):
        ibert.i_exp(np.array([1]), 0.1)
    with pytest.raises(ValueError, match="reaches -2\\*\\*15"):
        ibert.i_exp(np.array([-(1 << 15)]), 0.001)
    with pytest.raises(ValueError, match=r"spans 2\*\*8"):
        ibert.i_layernorm(np.array([[300, 0]]), 0.1)
    with pytest.raises(ValueError, match="at most 512"):
        ibert.i_layernorm(np.zeros((1, 513), np.int64), 0.1)
    with pytest.raises(ZeroDivisionError):
        ibert.div(np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match="NEG_SQRT"):
        ibert.sqrt(np.array([-1]))


# --- the same sequences as accelerator programs -----------------------------------------------

def _alu(op: AluOp, dst: int, rows: int, src: int | None = None, imm: int | None = None
         ) -> isa.Insn:
    f = dict(dst_base=dst, outer=1, inner=rows, dst_si=1)
    if src is not None:
        f.update(src_base=src, src_si=1)
    return isa.alu(op, imm, **f)


def _run(model: AccelModel, prog: list[isa.Insn]) -> None:
    res = model.execute(prog + [isa.end()], bytearray(4096), [0] * isa.NUM_SLOTS)
    assert res.ok, res.error


@pytest.mark.parametrize("scale", [0.004, 0.03, 0.2])
def test_i_exp_and_i_gelu_programs_are_bit_exact(scale: float) -> None:
    """The i_exp and i_gelu sequences as ALU programs on the functional model (which the RTL
    matches bit for bit) give exactly the numpy sequences' integers, for every input value."""
    cfg = AccelConfig()
    n = cfg.n
    model = AccelModel(cfg)
    q = np.arange(-255, 1)
    q = np.concatenate([q, np.zeros(-len(q) % n, np.int64)])
    rows = len(q) // n
    model.acc[0:rows] = q.reshape(rows, n)
    _run(model, ibert.i_exp_insns(0, rows, 100, 200, scale))
    assert np.array_equal(model.acc[200:200 + rows].reshape(-1), ibert.i_exp(q, scale)[0])
    rows = len(INT8) // n
    model.acc[0:rows] = INT8.reshape(rows, n)
    _run(model, ibert.i_gelu_insns(0, rows, 100, 200, scale))
    assert np.array_equal(model.acc[200:200 + rows].reshape(-1), ibert.i_gelu(INT8, scale)[0])


@pytest.mark.parametrize("h, blocks, vs", [(32, 2, 0), (384, 1, 0), (64, 3, 0), (64, 2, 7),
                                           (384, 1, 2)])
def test_i_layernorm_program_is_bit_exact(h: int, blocks: int, vs: int) -> None:
    """i_layernorm as a program in the transposed layout (features as rows, tokens as lanes)
    on the functional model gives exactly the numpy sequence's integers, for rows spread over
    the int8 range, narrow rows and a constant one."""
    cfg = AccelConfig()
    n = cfg.n
    rng = np.random.default_rng(h)
    top = 1 << (7 + vs)
    tokens = np.concatenate([rng.integers(-top, top, (blocks * n - 2, h)),
                             np.clip(np.round(rng.normal(0, 3, (1, h))), -top, top - 1),
                             np.full((1, h), 9)]).astype(np.int64)       # (tokens, features)
    model = AccelModel(cfg)
    x, tmp = 0, blocks * h
    # block J's row e: feature e of tokens J*n .. J*n + n-1
    model.acc[x:x + blocks * h] = tokens.reshape(blocks, n, h).transpose(0, 2, 1).reshape(-1, n)
    _run(model, ibert.i_layernorm_insns(x, h, blocks, tmp, 0.05, var_shift=vs))
    got = model.acc[x:x + blocks * h].reshape(blocks, h, n).transpose(0, 2, 1).reshape(-1, h)
    want, _ = ibert.i_layernorm(tokens, 0.05, var_shift=vs)
    assert np.array_equal(got, want)

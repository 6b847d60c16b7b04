"""Reduced-precision transfer: opt-in per tensor, error reported, everything else bit-exact."""

from __future__ import annotations

import numpy as np
import pytest

from pyhost.driver import PcieDriver
from pyhost.memory import Bf16, Fp16, Int8Affine, MemoryManager, PrecisionError
from pyhost.model_card import ModelCard


def test_bf16_rounds_to_nearest_even() -> None:
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, np.nan], np.float32)
    y = Bf16().decode(Bf16().encode(x), x.nbytes)
    assert y[0] == 1.0 and y[1] == 1.0            # a tie rounds to the even neighbour
    assert y[2] == 1.0 + 4 * 2**-8                # a tie rounds up to the even one
    assert y[3] == -2.5 and np.isinf(y[4]) and np.isnan(y[5])


@pytest.mark.parametrize("codec,tol", [(Fp16(), 1e-3), (Bf16(), 8e-3), (Int8Affine(), 1 / 255),
                                       (Int8Affine(channels=8), 1 / 255)])
def test_codec_error_bounds(codec, tol: float) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 512)) * np.arange(1, 9)[:, None]).astype(np.float32)
    enc = codec.encode(x.reshape(-1))
    assert enc.size == codec.encoded_size(x.nbytes)
    rep = codec.report(x.reshape(-1), enc)
    span = float(x.max() - min(x.min(), 0))
    # fp: relative to the value; int8: half a step of the (per-row) range
    assert rep.max_abs_error <= tol * (span if isinstance(codec, Int8Affine) else
                                       float(np.abs(x).max()))
    if isinstance(codec, Int8Affine) and codec.channels == 8:
        per_tensor = Int8Affine().report(x.reshape(-1), Int8Affine().encode(x.reshape(-1)))
        assert rep.rms_error < per_tensor.rms_error, "per-channel scales should help here"


def test_codec_rejects_what_it_cannot_carry() -> None:
    with pytest.raises(PrecisionError):
        Fp16().check(6)
    with pytest.raises(PrecisionError, match="divisible"):
        Int8Affine(channels=3).check(16)
    with pytest.raises(PrecisionError, match="inf or NaN"):
        Int8Affine().encode(np.array([1.0, np.inf], np.float32))


def test_opt_in_tensors_use_less_pcie_and_card_others_stay_exact() -> None:
    card = ModelCard(1 << 20, host_size=16 << 20)
    mgr = MemoryManager(PcieDriver(card))
    rng = np.random.default_rng(1)
    w = rng.standard_normal(16 * 1024).astype(np.float32)
    q = mgr.allocate_tensor(w.nbytes, precision=Int8Affine(channels=16))
    h = mgr.allocate_tensor(w.nbytes, precision=Bf16())
    exact = mgr.allocate_tensor(w.nbytes)
    for t in (q, h, exact):
        mgr.write_tensor(t, w.nbytes, w)
    aq, ah, ae = mgr.need_in_device(q, h, exact)
    assert mgr.transport.stats.bytes_h2c == (8 * 16 + w.size) + w.nbytes // 2 + w.nbytes
    assert mgr.resident_bytes == mgr.transport.stats.bytes_h2c, "card holds the narrow form"
    rq, rh = mgr.precision_report(q), mgr.precision_report(h)
    assert rq is not None and rh is not None and mgr.precision_report(exact) is None
    assert 0 < rq.max_abs_error < 0.05 and 0 < rh.max_abs_error < 0.05
    # the card copy restores to floats on the host when a float consumer needs them
    card.card_memory[ah:ah + w.nbytes // 2] = Bf16().encode(w * 2)      # a kernel doubles it
    card.card_memory[ae:ae + w.nbytes] = (w * 2).view(np.uint8)
    mgr.tensor_updated(h)
    mgr.tensor_updated(exact)
    out = np.empty_like(w)
    mgr.read_tensor(h, w.nbytes, out)
    assert np.allclose(out, w * 2, rtol=8e-3, atol=0)
    mgr.read_tensor(exact, w.nbytes, out)
    assert np.array_equal(out.view(np.uint32), (w * 2).view(np.uint32)), "not bit-exact"
    mgr.read_tensor(q, w.nbytes, out)
    assert np.array_equal(out, w), "an unmodified opt-in tensor reads its own host copy"
    with pytest.raises(Exception, match="written whole"):
        mgr.write_tensor(q, 8, w)

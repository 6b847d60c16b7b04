"""compiler/plugins/accel/kernels/linear_t.py: a linear layer in the transposed layout on the
functional card, bit-exact with the accelerator's requantization arithmetic and within one
LSB of float; tb/accel/test_accel.py runs it on the RTL against the model."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.plugins.accel.kernels.linear_t import LinearTError, linear_t, plan_linear
from pyhost.accel.model import AccelModel
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tb.accel import races
from tb.accel.transformer_cases import linear_case

CFG = AccelConfig()


#: small scratchpads: the layers below need several token tiles, output groups and input passes
SMALL = AccelConfig(inp_depth=256, wgt_depth=16, acc_depth=256)


@pytest.mark.parametrize("cfg, tokens, d_in, d_out", [
    (CFG, 32, 64, 48), (CFG, 16, 256, 64), (CFG, 8, 8, 3), (CFG, 128, 384, 384),
    (SMALL, 64, 128, 96), (SMALL, 24, 40, 200)])
def test_linear_t_is_the_requantized_product(cfg: AccelConfig, tokens: int, d_in: int,
                                             d_out: int) -> None:
    c = linear_case(cfg, np.random.default_rng(d_in), tokens, d_in, d_out)
    plan = plan_linear(cfg, tokens // cfg.n, d_in // cfg.n, d_out)
    if cfg is SMALL:
        assert plan.inp_v > 1 and plan.acc_v > 1, plan      # several chunks and tiles
    res = AccelModel(cfg).execute(c.program, c.memory, [0] * isa.NUM_SLOTS)
    assert res.ok, (res.error.name, res.err_pc)
    assert res.counters["macs"] == tokens * d_in * d_out         # N x N per iteration
    got = c.output(c.memory)
    assert np.array_equal(got, c.expect)                 # the accelerator's arithmetic
    assert np.abs(got - c.float_out).max() <= 1.0        # float, in output LSBs
    races.check_races(c.program, cfg.n, [0] * isa.NUM_SLOTS)        # raises on a race


def test_linear_t_refuses_what_it_cannot_do() -> None:
    w = np.zeros((4, 12), np.int8)
    z = np.zeros(4, np.int64)
    with pytest.raises(LinearTError, match="multiples of N"):
        linear_t(CFG, 8, w, z, z, z, x=0, consts=0, y=0)
    with pytest.raises(LinearTError, match="does not fit the scratchpads"):
        linear_t(AccelConfig(acc_depth=2), 64, np.zeros((8, 8), np.int8), np.zeros(8),
                 np.zeros(8), np.zeros(8), x=0, consts=0, y=0)

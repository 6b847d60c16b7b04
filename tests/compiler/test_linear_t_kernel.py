"""compiler/plugins/accel/kernels/linear_t.py: a linear layer in the transposed layout on the
functional card, bit-exact with the accelerator's requantization arithmetic and within one
LSB of float; tb/accel/test_accel.py runs it on the RTL against the model."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.plugins.accel.kernels.linear_t import LinearTError, linear_t
from pyhost.accel.model import AccelModel
from pyhost.spec import isa
from pyhost.spec.accel import AccelConfig
from tb.accel import races
from tb.accel.transformer_cases import linear_case

CFG = AccelConfig()


@pytest.mark.parametrize("tokens, d_in, d_out", [(32, 64, 48), (16, 256, 64), (8, 8, 3)])
def test_linear_t_is_the_requantized_product(tokens: int, d_in: int, d_out: int) -> None:
    c = linear_case(CFG, np.random.default_rng(d_in), tokens, d_in, d_out)
    res = AccelModel(CFG).execute(c.program, c.memory, [0] * isa.NUM_SLOTS)
    assert res.ok, (res.error.name, res.err_pc)
    assert res.counters["macs"] == tokens * d_in * d_out         # N x N per iteration
    got = c.output(c.memory)
    assert np.array_equal(got, c.expect)                 # the accelerator's arithmetic
    assert np.abs(got - c.float_out).max() <= 1.0        # float, in output LSBs
    races.check_races(c.program, CFG.n, [0] * isa.NUM_SLOTS)        # raises on a race


def test_linear_t_refuses_what_it_cannot_do() -> None:
    w = np.zeros((4, 12), np.int8)
    z = np.zeros(4, np.int64)
    with pytest.raises(LinearTError, match="multiples of N"):
        linear_t(CFG, 8, w, z, z, z, x=0, consts=0, y=0)
    with pytest.raises(LinearTError, match="ACC"):
        linear_t(AccelConfig(acc_depth=16), 64, np.zeros((8, 8), np.int8), np.zeros(8),
                 np.zeros(8), np.zeros(8), x=0, consts=0, y=0)

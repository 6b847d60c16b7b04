"""RTL regression for the whole accelerator (rtl/accel/accel.v) against its functional model,
on each simulator: constrained-random programs, errors, abort, registers, an attention head,
LayerNorm and GELU programs, a linear layer (tb/accel/test_accel.py).
"""

from __future__ import annotations

import pytest

from tb.common import simulator

#: Small scratchpads keep the bit-exact scratchpad comparison quick; the default depths run in
#: the card-level tests.
SMALL = {"INP_DEPTH": 1024, "WGT_DEPTH": 256, "ACC_DEPTH": 512}


@pytest.mark.rtl
@pytest.mark.parametrize("test", ["test_random_programs_ideal",
                                  "test_random_programs_slow_out_of_order",
                                  "test_random_programs_backpressure",
                                  "test_registers_and_bad_config,test_abort", "test_errors",
                                  "test_attention_head,test_layernorm_and_gelu_programs,test_linear_t"])
def test_accel(sim: str, test: str) -> None:
    """The accelerator bench's tests pass (several pytest items so xdist can spread them)."""
    names = test.split(",")
    res = simulator.run(sim, "accel", simulator.rtl_sources("accel"), "tb.accel.test_accel",
                     parameters=SMALL, testcase=names)
    assert res.tests == len(names)

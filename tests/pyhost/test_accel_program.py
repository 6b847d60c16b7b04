"""The accelerator driver program (tb/card_top/accel_program.py) on the functional card; the same
checks run on the RTL card in tb/card_top/test_card_accel.py."""

from __future__ import annotations

import pytest

from pyhost.driver import PcieDriver
from pyhost.model_card import ModelCard
from tb.card_top import accel_program


@pytest.mark.parametrize("check", accel_program.ALL_CHECKS, ids=lambda c: c.name)
def test_accel_program_on_model_card(check: accel_program.Check) -> None:
    """Each accelerator check passes on ModelCard (16 MiB card)."""
    drv = PcieDriver(ModelCard(16 << 20))
    try:
        check.fn(drv)
    finally:
        drv.close()

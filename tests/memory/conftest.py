"""Fixtures for the memory-manager tests: a small functional card with its driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyhost.driver import PcieDriver
from pyhost.model_card import ModelCard


@pytest.fixture
def card() -> ModelCard:
    return ModelCard(1 << 20, host_size=32 << 20)


@pytest.fixture
def driver(card: ModelCard) -> Iterator[PcieDriver]:
    with PcieDriver(card) as drv:
        yield drv

"""Fixtures of the compiler tests."""

from __future__ import annotations

import pytest

from tests.compiler.helpers import conv_net


@pytest.fixture
def conv_model():  # type: ignore[no-untyped-def]
    """A small Conv/BN/Relu/residual/MaxPool/Gemm/Softmax ONNX model with random weights."""
    return conv_net()

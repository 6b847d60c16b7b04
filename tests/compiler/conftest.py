"""Fixtures of the compiler tests."""

from __future__ import annotations

import onnx
import pytest

from tests.compiler.helpers import conv_net


@pytest.fixture
def conv_model() -> onnx.ModelProto:
    """A small Conv/BN/Relu/residual/MaxPool/Gemm/Softmax ONNX model with random weights."""
    return conv_net()

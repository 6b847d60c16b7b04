"""Frontends: framework models in, XIR graphs out (ONNX today)."""

from compiler.frontend.onnx import import_onnx

__all__ = ["import_onnx"]

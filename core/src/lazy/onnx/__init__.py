"""ONNX models on lazy Tensors: `load(path_or_bytes_or_model, device=None)` parses a model with the `onnx` package
(the optional `onnx` extra: `pip install 'lazy-core[onnx]'`) and returns a callable `OnnxModel`. Shape arithmetic
runs on the host; the rest becomes lazy Tensor ops, fused into kernels like any other graph."""

from lazy.onnx.loader import load
from lazy.onnx.model import MAX_OPSET, MIN_OPSET, SUPPORTED_OPS, IOSpec, OnnxModel, OnnxRunError
from lazy.onnx.registry import InvalidModelError, UnsupportedModelError

__all__ = ["load", "OnnxModel", "IOSpec", "UnsupportedModelError", "InvalidModelError", "OnnxRunError",
           "SUPPORTED_OPS", "MIN_OPSET", "MAX_OPSET"]  # fmt: skip

"""Neural-network layers built from Tensor ops."""

from __future__ import annotations

import math

from lazy.nn import optim, state  # noqa: F401
from lazy.tensor import Tensor


class Linear:
    """y = x @ W.T + b, initialised like PyTorch (uniform in +-1/sqrt(in_features))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight.transpose(), self.bias)

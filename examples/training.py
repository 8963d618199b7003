"""What every example's training loop shares: put a model on a device, and one jitted classification step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazy import Tensor, jit
from lazy.nn.optim import Optimizer
from lazy.nn.state import get_parameters


def place(model: Any, device: str) -> list[Tensor]:
    """Move every parameter of `model` to `device` (realized there) and return them."""
    params = get_parameters(model)
    for p in params:
        p.to_(device).realize()
    return params


def classification_step(model: Callable[[Tensor], Tensor], opt: Optimizer) -> Callable[[Tensor, Tensor], Tensor]:
    """A jitted step: cross-entropy of `model(x)` against integer labels `y`, backward, optimizer update."""

    @jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

    return step

"""Layer end_to_end: a small training run converges, and the counter-based RNG gives the same numbers everywhere."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.conformance.support import on_reference, reference_device
from lazy.helpers import Context
from lazy.nn import Linear
from lazy.nn.optim import SGD
from lazy.tensor import Tensor

pytestmark = pytest.mark.requires("kernels")  # a copy-only device skips this layer, with its reason


def mlp_losses(device_name, steps=30):
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((32, 4)).astype(np.float32)
    y_np = (x_np @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    with Context(DEVICE=device_name):  # layers are made on the default device
        l1, l2 = Linear(4, 16), Linear(16, 1)
    assert l1.bias is not None and l2.bias is not None
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = SGD(params, lr=0.05)
    x, y = Tensor(x_np, device=device_name), Tensor(y_np, device=device_name)
    losses = []
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            loss = ((l2(l1(x).relu()) - y) ** 2).mean()  # (32, 4) -> (32, 16) -> (32, 1)
            loss.backward()
            opt.step()
            losses.append(float(loss.numpy()))
    return losses


def test_training_loss_decreases(device_name):
    losses = mlp_losses(device_name)
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < 0.5 * losses[0], losses


def test_rng_matches_the_reference_device(device_name):
    Tensor.manual_seed(0)
    here = Tensor.rand(16, device=device_name).numpy()
    Tensor.manual_seed(0)
    ref = reference_device(device_name)  # (outside `on_reference`, which switches emulation off)
    with on_reference():
        reference = Tensor.rand(16, device=ref).numpy()
    np.testing.assert_array_equal(here, reference)
    assert ((here >= 0) & (here < 1)).all() and len(set(here.tolist())) > 1

"""The gradient of `maximum` (and so `minimum`, `clip`, `normalize`) decided by comparing the inputs with each other,
as PyTorch does: the larger takes it, ties share it, a NaN on either side gives it to both."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazy import Tensor


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_normalize_gradient_after_the_forward_was_realized(device: str) -> None:
    """The forward realized first (as `numpy()` does) left the backward comparing a recomputed norm with the stored
    `maximum` result: off by an ulp, neither input matched it and the gradient was 0/0 (NaN) in whole rows."""
    for seed in range(12):
        x = np.random.default_rng(seed).uniform(-2, 2, (2, 3, 4)).astype(np.float32)
        w = np.random.default_rng(1).uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
        t = Tensor(x, requires_grad=True, device=device)
        out = t.sum((0, 2)).reshape(1, 3, 1) + t.normalize(dim=2)
        out.numpy()
        (out * Tensor(w, device=device)).sum().backward()
        px = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        ref = px.sum((0, 2)).reshape(1, 3, 1) + torch.nn.functional.normalize(px, dim=2)
        (ref * torch.tensor(w, dtype=torch.float64)).sum().backward()
        assert t.grad is not None and px.grad is not None
        np.testing.assert_allclose(t.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def test_ties_and_nans_share_the_gradient_as_pytorch() -> None:
    nan = float("nan")
    a, b = [nan, 1.0, 2.0, 3.0, 0.0], [1.0, nan, 2.0, 1.0, 5.0]
    for op in ("maximum", "minimum"):
        ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
        getattr(ta, op)(tb).sum().backward()
        pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        getattr(torch, op)(pa, pb).sum().backward()
        assert ta.grad is not None and tb.grad is not None and pa.grad is not None and pb.grad is not None
        np.testing.assert_array_equal(ta.grad.numpy(), pa.grad.numpy())
        np.testing.assert_array_equal(tb.grad.numpy(), pb.grad.numpy())


def test_a_nan_or_inf_gradient_stays_off_the_inputs_not_taken():
    """maximum, max and max-pooling select their gradient instead of multiplying it by a 0/1 share: the inputs not
    taken get 0 even where the incoming gradient is NaN or inf (0 * NaN was NaN everywhere; PyTorch's is 0)."""
    a = np.array([0.5, -1.0, 2.0, 0.3], np.float32)
    nan = np.full(4, np.nan, np.float32)
    x, xt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    x.maximum(Tensor(np.ones(4, np.float32))).backward(Tensor(nan))
    xt.maximum(torch.ones(4)).backward(torch.tensor(nan))
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    x = Tensor(a, requires_grad=True)
    x.max().backward(Tensor(np.float32(np.nan)))
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, np.nan, 0])
    img = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x, xt = Tensor(img, requires_grad=True), torch.tensor(img, requires_grad=True)
    inf = np.full((1, 1, 2, 2), np.inf, np.float32)
    x.max_pool2d(2).backward(Tensor(inf))
    torch.nn.functional.max_pool2d(xt, 2).backward(torch.tensor(inf))
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())

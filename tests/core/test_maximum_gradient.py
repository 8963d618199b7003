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

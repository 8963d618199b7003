"""conv2d (and its 1-d form) against a direct numpy loop, with gradients by finite differences; PYTHON device."""

import itertools

import numpy as np
import pytest

from lazy import Context, Tensor, nn


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def conv_reference(x, w, b, stride, padding, dilation, groups):
    nd = w.ndim - 2
    x = np.pad(x, ((0, 0), (0, 0)) + ((padding, padding),) * nd)
    n, cin = x.shape[:2]
    cout, cin_g = w.shape[:2]
    k = w.shape[2:]
    outs = [(s - dilation * (kk - 1) - 1) // stride + 1 for s, kk in zip(x.shape[2:], k)]
    out = np.zeros((n, cout, *outs), np.float64)
    per_group = cout // groups
    for o, pos in itertools.product(range(cout), itertools.product(*[range(s) for s in outs])):
        g = o // per_group
        for offs in itertools.product(*[range(kk) for kk in k]):
            idx = tuple(p * stride + f * dilation for p, f in zip(pos, offs))
            patch = x[(slice(None), slice(g * cin_g, (g + 1) * cin_g), *idx)]
            out[(slice(None), o, *pos)] += patch @ w[(o, slice(None), *offs)]
    return out + b.reshape(1, -1, *([1] * nd))


CASES = [  # (x shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 6, 6), (4, 3, 3, 3), 1, 1, 1, 1),
    ((1, 4, 7, 5), (6, 2, 3, 3), 2, 0, 1, 2),
    ((2, 2, 6, 6), (2, 2, 2, 2), 1, 2, 2, 1),
    ((2, 3, 9), (4, 3, 3), 2, 1, 1, 1),
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CASES)
def test_conv_matches_a_direct_loop(xs, ws, stride, padding, dilation, groups):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, ws[:1]))
    got = Tensor(x).conv2d(Tensor(w), Tensor(b), groups, stride, dilation, padding).numpy()
    np.testing.assert_allclose(got, conv_reference(x, w, b, stride, padding, dilation, groups), rtol=1e-4, atol=1e-5)


def test_conv_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((2, 2, 3, 3))
    tx, tw = Tensor(x.astype(np.float32), requires_grad=True), Tensor(w.astype(np.float32), requires_grad=True)
    tx.conv2d(tw, padding=1).square().sum().backward()

    def loss(xx, ww):
        return (conv_reference(xx, ww, np.zeros(2), 1, 1, 1, 1) ** 2).sum()

    eps = 1e-4
    for arr, grad, other in ((x, tx.grad, w), (w, tw.grad, x)):
        numeric = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            hi, lo = arr.copy(), arr.copy()
            hi[i] += eps
            lo[i] -= eps
            args = (hi, other) if arr is x else (other, hi)
            args_lo = (lo, other) if arr is x else (other, lo)
            numeric[i] = (loss(*args) - loss(*args_lo)) / (2 * eps)
        np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-3, atol=1e-3)


def test_conv_layers_and_bad_channels():
    x = Tensor.ones(1, 3, 5, 5)
    assert nn.Conv2d(3, 4, 3, padding=1)(x).shape == (1, 4, 5, 5)
    assert nn.Conv1d(3, 2, 3)(Tensor.ones(2, 3, 7)).shape == (2, 2, 5)
    with pytest.raises(ValueError, match="channels"):
        x.conv2d(Tensor.ones(4, 2, 3, 3))


def test_ceil_mode_pools_take_a_window_that_starts_inside_the_input():
    """PyTorch's rule: with ceil_mode a window may reach past the (padded) input when it starts inside it, even where
    the kernel is wider than the input; lazy refused those shapes. Without ceil_mode they stay refused."""
    import torch

    x = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2)
    for kernel, stride in (((2, 3), 2), ((4, 1), 3), ((4, 2), (3, 1)), ((3, 2), (2, 2))):
        xt = torch.tensor(x)
        for ours, theirs in ((Tensor(x).max_pool2d, torch.nn.functional.max_pool2d),
                             (Tensor(x).avg_pool2d, torch.nn.functional.avg_pool2d)):  # fmt: skip
            want = theirs(xt, kernel, stride, ceil_mode=True).numpy()
            np.testing.assert_allclose(ours(kernel, stride, ceil_mode=True).numpy(), want)
    with pytest.raises(ValueError, match=r"does not fit the padded input .*ceil_mode=True takes"):
        Tensor(x).max_pool2d((2, 3), 2)
    with pytest.raises(ValueError, match=r"does not fit the padded input"):  # no window starts inside: as PyTorch
        Tensor(x).max_pool2d((3, 3), (2, 1), ceil_mode=True)

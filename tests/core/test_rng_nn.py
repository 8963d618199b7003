"""Random numbers, `nn.Linear` and the optimisers on the PYTHON device, against numpy re-implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes, nn
from lazy.nn.optim import SGD, Adam
from lazy.nn.state import get_parameters

RNG = np.random.default_rng(2)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


@pytest.fixture
def seed_restored():
    """Tests that reseed the global generator put a fresh seed back, so test order does not matter."""
    yield
    Tensor.manual_seed(0)


# -- random numbers ----------------------------------------------------------------------------------------------------


def test_manual_seed_reproducible(seed_restored):
    Tensor.manual_seed(42)
    a, b = Tensor.rand(3, 4).numpy(), Tensor.randn(5).numpy()
    Tensor.manual_seed(42)
    a2, b2 = Tensor.rand(3, 4).numpy(), Tensor.randn(5).numpy()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    Tensor.manual_seed(43)
    assert not np.array_equal(Tensor.rand(3, 4).numpy(), a)


def test_successive_draws_differ(seed_restored):
    Tensor.manual_seed(7)
    a, b = Tensor.rand(16).numpy(), Tensor.rand(16).numpy()
    assert not np.array_equal(a, b)
    assert len(np.unique(a)) == 16


def test_rand_shape_dtype(seed_restored):
    Tensor.manual_seed(1)
    t = Tensor.rand(2, 3)
    assert t.shape == (2, 3) and t.dtype == dtypes.float32 and t.device == "PYTHON"
    assert Tensor.rand((4,)).shape == (4,)
    assert Tensor.rand(2, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.randn(2, 2).shape == (2, 2)
    assert Tensor.rand(3, requires_grad=True).requires_grad is True


def test_rand_uniform_in_unit_interval(seed_restored):
    Tensor.manual_seed(123)
    x = Tensor.rand(4096).numpy()
    assert x.min() >= 0.0 and x.max() < 1.0
    # the mean of 4096 U(0,1) samples has std 0.289/64 = 0.0045: 0.03 is more than 6 sigma
    assert abs(x.mean() - 0.5) < 0.03
    assert abs(x.std() - math.sqrt(1 / 12)) < 0.02
    # every tenth of the interval gets its share (expected 410 each, std ~19)
    counts = np.histogram(x, bins=10, range=(0, 1))[0]
    assert counts.min() > 300 and counts.max() < 520


def test_randn_mean_std(seed_restored):
    Tensor.manual_seed(321)
    x = Tensor.randn(4096).numpy()
    assert np.all(np.isfinite(x))
    # std of the sample mean 1/64 = 0.016 and of the sample std ~0.011: 0.1 is more than 6 sigma
    assert abs(x.mean()) < 0.1
    assert abs(x.std() - 1.0) < 0.1
    assert 0.6 < np.mean(np.abs(x) < 1.0) < 0.76  # 68.3% within one sigma


def test_uniform_range(seed_restored):
    Tensor.manual_seed(5)
    x = Tensor.uniform(64, low=-3.0, high=-1.0).numpy()
    assert x.min() >= -3.0 and x.max() < -1.0
    assert -2.5 < x.mean() < -1.5


# -- nn.Linear ---------------------------------------------------------------------------------------------------------


def test_linear_forward_matches_numpy(seed_restored):
    Tensor.manual_seed(9)
    layer = nn.Linear(3, 4)
    assert layer.weight.shape == (4, 3) and layer.bias is not None and layer.bias.shape == (4,)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    bound = 1 / math.sqrt(3)
    assert np.all(np.abs(w) <= bound) and np.all(np.abs(b) <= bound)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    x3 = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(layer(Tensor(x3)).numpy(), x3 @ w.T + b, rtol=1e-5, atol=1e-6)


def test_linear_without_bias():
    layer = nn.Linear(2, 3, bias=False)
    assert layer.bias is None
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ layer.weight.numpy().T, rtol=1e-5, atol=1e-6)
    assert len(get_parameters(layer)) == 1


def test_linear_gradients():
    layer = nn.Linear(3, 2)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    for p in (layer.weight, layer.bias):
        p.requires_grad = True
    layer(Tensor(x)).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.ones((4, 2)).T @ x, rtol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(2, 4.0), rtol=1e-6)
    assert w.shape == (2, 3) and b.shape == (2,)


# -- optimisers --------------------------------------------------------------------------------------------------------


def _param(values: np.ndarray) -> Tensor:
    return Tensor(values.copy(), requires_grad=True).contiguous().realize()


def _loss(p: Tensor, target: np.ndarray) -> Tensor:
    return ((p - Tensor(target)) ** 2).sum()  # grad = 2 (p - target)


def sgd_reference(p: np.ndarray, target: np.ndarray, steps: int, lr: float, momentum: float = 0.0, wd: float = 0.0,
                  nesterov: bool = False) -> np.ndarray:  # fmt: skip
    """torch.optim.SGD, in float64."""
    p, buf = p.astype(np.float64), None
    for _ in range(steps):
        g = 2 * (p - target) + wd * p
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def adam_reference(p: np.ndarray, target: np.ndarray, steps: int, lr: float, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8) -> np.ndarray:  # fmt: skip
    """torch.optim.Adam, in float64."""
    p = p.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, steps + 1):
        g = 2 * (p - target)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p


def _run(opt_factory, steps: int) -> tuple[np.ndarray, np.ndarray]:
    p0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.25]], np.float32)
    target = np.array([[1.0, 1.0, 1.0], [-1.0, 0.5, 0.0]], np.float32)
    p = _param(p0)
    opt = opt_factory([p])
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            _loss(p, target).backward()
            opt.step()
    return p.numpy(), (p0, target)


SGD_CASES = {
    "plain": {"lr": 0.1},
    "momentum": {"lr": 0.1, "momentum": 0.9},
    "weight_decay": {"lr": 0.1, "weight_decay": 0.1},
    "momentum_weight_decay": {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.2},
    "nesterov": {"lr": 0.05, "momentum": 0.9, "nesterov": True},
}


@pytest.mark.parametrize("name", sorted(SGD_CASES))
@pytest.mark.parametrize("steps", [1, 3])
def test_sgd_matches_numpy(name, steps):
    kw = SGD_CASES[name]
    got, (p0, target) = _run(lambda params: SGD(params, **kw), steps)
    expected = sgd_reference(p0, target, steps, kw["lr"], kw.get("momentum", 0.0), kw.get("weight_decay", 0.0),
                             kw.get("nesterov", False))  # fmt: skip
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("kw", [{"lr": 0.01}, {"lr": 0.1, "b1": 0.8, "b2": 0.99}], ids=str)
def test_adam_matches_numpy(steps, kw):
    got, (p0, target) = _run(lambda params: Adam(params, **kw), steps)
    expected = adam_reference(p0, target, steps, kw["lr"], kw.get("b1", 0.9), kw.get("b2", 0.999))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_optimizer_keeps_the_parameter_buffer():
    p = _param(np.array([1.0, 2.0], np.float32))
    buf = p.lazydata.base.realized
    opt = SGD([p], lr=0.5)
    with Tensor.train():
        _loss(p, np.zeros(2, np.float32)).backward()
        opt.step()
    np.testing.assert_allclose(p.numpy(), [0.0, 0.0])
    assert p.lazydata.base.realized is buf


def test_optimizer_step_without_grad_raises():
    p = _param(np.array([1.0], np.float32))
    opt = SGD([p], lr=0.1)
    with Tensor.train(), pytest.raises(RuntimeError, match="backward"):
        opt.step()


# -- training ----------------------------------------------------------------------------------------------------------


def test_tiny_training_loop_loss_decreases(seed_restored):
    Tensor.manual_seed(3)
    x = RNG.uniform(-1, 1, size=(8, 2)).astype(np.float32)
    y = (x @ np.array([[2.0], [-3.0]], np.float32) + 0.5).astype(np.float32)
    l1, l2 = nn.Linear(2, 4), nn.Linear(4, 1)
    params = get_parameters([l1, l2])
    assert len(params) == 4
    opt = Adam(params, lr=0.05)
    losses = []
    with Tensor.train():
        for _ in range(15):
            opt.zero_grad()
            loss = ((l2(l1(Tensor(x)).relu()) - Tensor(y)) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], losses
    assert min(losses[-3:]) < losses[0]

# ruff: noqa: E501
# (one case per line in the table reads better than cases broken over several)
"""Gradients of gradients: `gradient()` records the ops of the gradient it builds, so a gradient of a function of
gradients (a Hessian-vector product, a Jacobian row, a second derivative) is again `gradient`. Checked against
PyTorch's `create_graph=True` and against finite differences of the first gradient."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazy import Tensor, dtypes

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the comparisons against it are skipped")
TF = torch.nn.functional


def test_second_derivative_of_cube():
    x = Tensor([2.0])
    g = (x**3).sum().gradient(x)[0]
    np.testing.assert_allclose(g.numpy(), [12.0])
    np.testing.assert_allclose(g.sum().gradient(x)[0].numpy(), [12.0])  # d2/dx2 x^3 = 6x


def test_second_derivative_of_scalar_constant_tensor():
    # tinygrad's own test: a 0-d tensor made from a Python float, no requires_grad
    x = Tensor(2.0)
    first = (x**3).gradient(x)[0]
    assert first.gradient(x)[0].item() == pytest.approx(12.0)


def test_third_derivative():
    x = Tensor([0.5, -1.5])
    g1 = (x.sin() * x**2).sum().gradient(x)[0]
    g2 = g1.sum().gradient(x)[0]
    g3 = g2.sum().gradient(x)[0]
    a = np.array([0.5, -1.5])
    # d3/dx3 x^2 sin x = (6 - x^2) cos x - 6x sin x
    np.testing.assert_allclose(g3.numpy(), (6 - a**2) * np.cos(a) - 6 * a * np.sin(a), rtol=1e-4, atol=1e-5)


def test_gradient_without_create_graph_has_no_history():
    x = Tensor([2.0])
    g = (x**3).sum().gradient(x, create_graph=False)[0]
    np.testing.assert_allclose(g.numpy(), [12.0])
    assert g.sum().gradient(x)[0].numpy().tolist() == [0.0]  # a constant: x does not reach it


def test_backward_create_graph():
    x = Tensor([1.0, 3.0], requires_grad=True)
    (x**3).sum().backward(create_graph=True)
    g = x.grad
    assert g is not None
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 18.0])


def test_backward_default_keeps_no_history():
    # the default is PyTorch's: .grad is plain data, and holds on to no graph
    x = Tensor([1.0, 3.0], requires_grad=True)
    (x**3).sum().backward()
    assert x.grad is not None and x.grad._ctx is None


def test_mixed_partials_and_jacobian_rows():
    x, y = Tensor([0.3, -0.7]), Tensor([1.2, 0.4])
    f = (x * y.exp() + x.square() * y).sum()
    gx, gy = f.gradient(x, y)
    # d2f/dxdy = e^y + 2x, d2f/dy2 = x e^y + 0 (elementwise: the sums of the Jacobian rows)
    dxy = gx.sum().gradient(y)[0]
    dyx = gy.sum().gradient(x)[0]
    a, b = np.array([0.3, -0.7]), np.array([1.2, 0.4])
    np.testing.assert_allclose(dxy.numpy(), np.exp(b) + 2 * a, rtol=1e-5)
    np.testing.assert_allclose(dyx.numpy(), np.exp(b) + 2 * a, rtol=1e-5)
    # one Jacobian row of the vector function x -> x * sum(x): d(x_0 * s)/dx = s e_0 + x_0
    v = Tensor([1.0, 2.0, 3.0])
    row = (v * v.sum())[0].gradient(v)[0]
    np.testing.assert_allclose(row.numpy(), [7.0, 1.0, 1.0])


def test_gradient_of_gradient_through_detach_and_comparisons():
    x = Tensor([1.0, -2.0, 3.0])
    g = (x * x.detach() * x).sum().gradient(x)[0]  # d/dx x^2 c = 2 x c, with c = x held constant
    np.testing.assert_allclose(g.numpy(), [2.0, 8.0, 18.0])
    h = g.sum().gradient(x)[0]  # 2c
    np.testing.assert_allclose(h.numpy(), [2.0, -4.0, 6.0])
    # relu'' and the comparison inside a where: zero, as a tensor
    r = x.relu().square().sum().gradient(x)[0]
    np.testing.assert_allclose(r.sum().gradient(x)[0].numpy(), [2.0, 0.0, 2.0])


# (name, shapes, torch fn, lazy fn or None (same code), range of inputs)
CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Any], Callable[..., Any] | None, tuple[float, float]]] = [
    ("arith", [(3, 4), (3, 4)], lambda a, b: a * b - a / (b.abs() + 1) + a**2 * b + (a - b).square(), None, (-2, 2)),
    ("pow_tensor", [(3, 4), (3, 4)], lambda a, b: a**b + b ** a.abs(), None, (0.3, 2)),
    ("pow_const", [(3, 4)], lambda a: a**3 + a**-2 + a.abs() ** 0.5 + 2**a, None, (0.5, 2)),
    (
        "transcendental",
        [(3, 4)],
        lambda a: a.exp() + a.log() + a.sqrt() + a.exp2() + a.log2() + a.reciprocal() + a.rsqrt(),
        None,
        (0.5, 2),
    ),
    ("trig", [(3, 4)], lambda a: a.sin() + a.cos() + a.tan() + a.tanh() + a.sigmoid() + a.atan(), None, (-1.2, 1.2)),
    (
        "activations",
        [(3, 4)],
        lambda a: TF.gelu(a, approximate="tanh") + TF.silu(a) + TF.softplus(a) + TF.elu(a) + TF.mish(a),
        lambda a: a.gelu() + a.silu() + a.softplus() + a.elu() + a.mish(),
        (-3, 3),
    ),
    (
        "piecewise",
        [(3, 4), (3, 4)],
        lambda a, b: (
            torch.maximum(a, b) * a
            + torch.where(a > b, a * b, b**2)
            + a.relu() * b
            + a.clamp(-0.5, 0.5) * b
            + a.abs() * b
        ),
        lambda a, b: a.maximum(b) * a + (a > b).where(a * b, b**2) + a.relu() * b + a.clip(-0.5, 0.5) * b + a.abs() * b,
        (-2, 2),
    ),
    (
        "reductions",
        [(3, 4, 5)],
        lambda a: (a * a.mean(1, keepdim=True)).amax(1).sum() + a.std(2).sum() + a.prod(2).sum(),
        lambda a: (a * a.mean(1, keepdim=True)).max(1).sum() + a.std(2).sum() + a.prod(2).sum(),
        (-2, 2),
    ),
    (
        "movement",
        [(2, 3, 4)],
        lambda a: (
            (a.permute(2, 0, 1).reshape(4, 6) ** 2).flip(0)[1:3, ::2].sum(0)
            + TF.pad(a, (1, 2)).sum((0, 1)).repeat(1)[:3].exp().sum()
            + torch.cat([a, a * a], 1).square().sum()
        ),
        lambda a: (
            (a.permute(2, 0, 1).reshape(4, 6) ** 2).flip(0)[1:3, ::2].sum(0)
            + a.pad((1, 2)).sum((0, 1)).repeat(1)[:3].exp().sum()
            + a.cat(a * a, dim=1).square().sum()
        ),
        (-1, 1),
    ),
    ("matmul", [(3, 4), (4, 5)], lambda a, b: (a @ b).tanh() @ (b.T * 2), None, (-1, 1)),
    (
        "conv2d",
        [(2, 2, 5, 5), (3, 2, 3, 3)],
        lambda x, w: TF.conv2d(x, w, padding=1, stride=2).square(),
        lambda x, w: x.conv2d(w, padding=1, stride=2).square(),
        (-1, 1),
    ),
    ("softmax", [(3, 5)], lambda a: a.softmax(1) * a, None, (-2, 2)),
    ("cumsum", [(3, 5)], lambda a: a.cumsum(1) * a, None, (-2, 2)),
    (
        "index",
        [(4, 5)],
        lambda a: (
            a[torch.tensor([2, 0, 2])] * a[1:, None, 2:4].sum()
            + a.gather(1, torch.tensor([[0, 4], [2, 2], [1, 0], [3, 3]])).square().sum()
        ),
        lambda a: (
            a[Tensor([2, 0, 2])] * a[1:, None, 2:4].sum()
            + a.gather(1, Tensor([[0, 4], [2, 2], [1, 0], [3, 3]])).square().sum()
        ),
        (-2, 2),
    ),
    ("norm", [(4, 6)], lambda a: TF.layer_norm(a, (6,)) * a, lambda a: a.layernorm() * a, (-2, 2)),
]


@pytest.mark.parametrize("name,shapes,torch_fn,lazy_fn,bounds", CASES, ids=[c[0] for c in CASES])
def test_hessian_vector_product_against_torch(name: str, shapes: list[tuple[int, ...]], torch_fn: Callable[..., Any],
                                              lazy_fn: Callable[..., Any] | None, bounds: tuple[float, float]) -> None:  # fmt: skip
    """First gradient and a Hessian-vector product (the gradient of <grad, v>) of sum(w * f(inputs))."""
    lazy_fn = lazy_fn or torch_fn
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(*bounds, s).astype(np.float32) for s in shapes]
    vs = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_t = torch_fn(*ts)
    weight = rng.uniform(-1, 1, tuple(out_t.shape)).astype(np.float32)
    grads_t = torch.autograd.grad((out_t * torch.tensor(weight)).sum(), ts, create_graph=True)
    hvp_t = torch.autograd.grad(sum((g * torch.tensor(v)).sum() for g, v in zip(grads_t, vs)), ts, allow_unused=True)

    ls = [Tensor(a) for a in arrays]
    grads = (lazy_fn(*ls) * Tensor(weight)).sum().gradient(*ls)
    second = sum(((g * Tensor(v)).sum() for g, v in zip(grads, vs)), Tensor(0.0))
    hvp = second.gradient(*ls)
    for i, (g, gt) in enumerate(zip(grads, grads_t)):
        np.testing.assert_allclose(
            g.numpy(), gt.detach().numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name}: gradient {i}"
        )
    for i, (h, ht) in enumerate(zip(hvp, hvp_t)):
        want = np.zeros_like(arrays[i]) if ht is None else ht.numpy()
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-3, atol=1e-3, err_msg=f"{name}: Hessian-vector product {i}")


FD_CASES: list[tuple[str, Callable[[Tensor], Tensor]]] = [
    ("exp_log_sin", lambda a: (a.exp() * a.sin() + (a * a + 1).log()).sum()),
    ("log_softmax_matmul", lambda a: (a.reshape(2, 3).log_softmax(1) @ a.reshape(3, 2)).square().sum()),
    ("sigmoid_max_sqrt", lambda a: a.sigmoid().max() + (a.square() + 1).sqrt().mean() + (a * a.cumsum(0)).std()),
    ("pow_div", lambda a: ((a.abs() + 1) ** a.flip(0) / (a.square() + 2)).sum()),
]


@pytest.mark.parametrize("name,fn", FD_CASES, ids=[c[0] for c in FD_CASES])
def test_hessian_vector_product_against_finite_differences(name: str, fn: Callable[[Tensor], Tensor]) -> None:
    """H v against (grad(x + eps v) - grad(x - eps v)) / (2 eps), in float64."""
    rng = np.random.default_rng(2)
    a, v, eps = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6), 1e-5

    def grad_at(point: np.ndarray) -> np.ndarray:
        x = Tensor(point, dtype=dtypes.float64)
        return fn(x).gradient(x, create_graph=False)[0].numpy()

    x = Tensor(a, dtype=dtypes.float64)
    (g,) = fn(x).gradient(x)
    hvp = (g * Tensor(v, dtype=dtypes.float64)).sum().gradient(x)[0].numpy()
    np.testing.assert_allclose(hvp, (grad_at(a + eps * v) - grad_at(a - eps * v)) / (2 * eps), rtol=1e-5, atol=1e-6)


def test_second_derivative_of_a_zeroth_power_at_zero():
    """x ** 0's gradient is 0 (PyTorch's), and so is its second derivative: through the branch not taken it was
    0 * (x^-1 at 0 = inf), NaN, for float and integer exponents and for a tensor exponent with zeros."""
    x = Tensor(np.array([0.0, 2.0, -1.5], np.float32), requires_grad=True)
    for exponent in (0.0, 0, Tensor([0.0, 0.0, 0.0])):
        (g,) = (x**exponent).sum().gradient(x)
        (g2,) = g.sum().gradient(x)
        assert g.numpy().tolist() == [0, 0, 0] and g2.numpy().tolist() == [0, 0, 0], exponent
    y = Tensor([0.0, 3.0, 2.0])  # where y != 0 the second derivative is still y (y - 1) x^(y-2)
    (g,) = (x**y).sum().gradient(x)
    (g2,) = g.sum().gradient(x)
    np.testing.assert_allclose(g2.numpy(), [0, 6 * 2.0, 2], rtol=1e-6)

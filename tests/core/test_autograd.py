"""Reverse-mode autograd on the PYTHON device: every differentiable op against central finite differences computed
with numpy in float64, plus the rules of the graph (accumulation, detach, leaves, inference mode, `gradient`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes

RNG = np.random.default_rng(1)
EPS = 1e-6


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def _inputs(shapes: Sequence[tuple[int, ...]], low: float, high: float, kinks: Sequence[float]) -> list[np.ndarray]:
    """Random float64 inputs that are exactly representable in float32 and at least 0.05 away from every kink."""
    arrays = []
    for shape in shapes:
        a = RNG.uniform(low, high, size=shape)
        for k in kinks:
            near = np.abs(a - k) < 0.05
            a = np.where(near, k + np.where(a >= k, 0.1, -0.1), a)
        arrays.append(a.astype(np.float32).astype(np.float64))
    return arrays


def numeric_grad(loss: Callable[..., float], arrays: list[np.ndarray], i: int) -> np.ndarray:
    grad = np.zeros_like(arrays[i])
    for idx in np.ndindex(arrays[i].shape):
        plus = [a.copy() for a in arrays]
        minus = [a.copy() for a in arrays]
        plus[i][idx] += EPS
        minus[i][idx] -= EPS
        grad[idx] = (loss(*plus) - loss(*minus)) / (2 * EPS)
    return grad


def check_grad(fn: Callable[..., Tensor], *shapes: tuple[int, ...], ref: Callable[..., np.ndarray] | None = None,
               low: float = -2.0, high: float = 2.0, kinks: Sequence[float] = (), rtol: float = 1e-3,
               atol: float = 1e-4) -> None:  # fmt: skip
    """d(sum(fn(*xs) * w))/dx for a fixed random `w`, from lazy's autograd (float32) against central finite differences
    of `ref` (default: `fn` itself applied to numpy arrays) in float64. The random weights check the whole Jacobian."""
    ref = ref or fn
    arrays = _inputs(shapes, low, high, kinks)
    expected_out = np.asarray(ref(*arrays), dtype=np.float64)
    weights = RNG.standard_normal(expected_out.shape).astype(np.float32).astype(np.float64)

    def loss(*arrs: np.ndarray) -> float:
        return float(np.sum(np.asarray(ref(*arrs), dtype=np.float64) * weights))

    tensors = [Tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    assert out.shape == expected_out.shape, f"forward shape {out.shape} != {expected_out.shape}"
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-4, atol=1e-5, err_msg="forward")
    (out * Tensor(weights.astype(np.float32))).sum().backward()
    for i, (t, a) in enumerate(zip(tensors, arrays)):
        assert t.grad is not None, f"input {i} got no gradient"
        assert t.grad.shape == a.shape, f"input {i}: grad shape {t.grad.shape} != {a.shape}"
        np.testing.assert_allclose(t.grad.numpy(), numeric_grad(loss, arrays, i), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")  # fmt: skip


def np_sigmoid(a: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-a))


# -- elementwise -------------------------------------------------------------------------------------------------------

UNARY = {
    "neg": (lambda x: -x, lambda a: -a, {}),
    "reciprocal": (Tensor.reciprocal, lambda a: 1 / a, {"low": 0.3}),
    "sqrt": (Tensor.sqrt, np.sqrt, {"low": 0.3}),
    "rsqrt": (Tensor.rsqrt, lambda a: 1 / np.sqrt(a), {"low": 0.3}),
    "exp": (Tensor.exp, np.exp, {}),
    "exp2": (Tensor.exp2, np.exp2, {}),
    "log": (Tensor.log, np.log, {"low": 0.3}),
    "log2": (Tensor.log2, np.log2, {"low": 0.3}),
    "sin": (Tensor.sin, np.sin, {}),
    "cos": (Tensor.cos, np.cos, {}),
    "tan": (Tensor.tan, np.tan, {"low": -1.2, "high": 1.2}),
    "relu": (Tensor.relu, lambda a: np.maximum(a, 0), {"kinks": (0.0,)}),
    "sigmoid": (Tensor.sigmoid, np_sigmoid, {}),
    "tanh": (Tensor.tanh, np.tanh, {}),
    "gelu": (Tensor.gelu, lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))), {}),
    "silu": (Tensor.silu, lambda a: a * np_sigmoid(a), {}),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda a: np.where(a > 0, a, 0.1 * a), {"kinks": (0.0,)}),
    "elu": (Tensor.elu, lambda a: np.where(a > 0, a, np.exp(a) - 1), {"kinks": (0.0,)}),
    "softplus": (Tensor.softplus, lambda a: np.log1p(np.exp(a)), {}),
    "abs": (Tensor.abs, np.abs, {"kinks": (0.0,)}),
    "square": (Tensor.square, np.square, {}),
    "clip": (lambda x: x.clip(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), {"kinks": (-0.5, 0.7)}),
    "pow3": (lambda x: x**3, lambda a: a**3, {}),
    "pow2.5": (lambda x: x**2.5, lambda a: a**2.5, {"low": 0.3}),
    "pow-1.5": (lambda x: x**-1.5, lambda a: a**-1.5, {"low": 0.3}),
    "rpow": (lambda x: 2.0**x, lambda a: 2.0**a, {}),
    "rsub": (lambda x: 3 - x, lambda a: 3 - a, {}),
    "rdiv": (lambda x: 2 / x, lambda a: 2 / a, {"low": 0.3}),
    "scalar_mul_add": (lambda x: x * 3 + 1, lambda a: a * 3 + 1, {}),
    "cast_f64": (lambda x: x.cast(dtypes.float64).square().cast(dtypes.float32), np.square, {}),
    "diamond": (lambda x: (x * x) + (x * x) * x, lambda a: a * a + a * a * a, {}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_grad(name):
    fn, ref, kwargs = UNARY[name]
    check_grad(fn, (2, 3), ref=ref, **kwargs)


BINARY = {
    "add": (lambda x, y: x + y, {}),
    "sub": (lambda x, y: x - y, {}),
    "mul": (lambda x, y: x * y, {}),
    "div": (lambda x, y: x / y, {"low": 0.3}),
    "pow": (lambda x, y: x**y, {"low": 0.3}),
}


GRAD_BROADCAST_SHAPES = [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((2, 3), (3,)), ((), (2, 2)), ((2, 1, 3), (2, 1))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", GRAD_BROADCAST_SHAPES, ids=str)
def test_binary_grad_with_broadcasting(name, shapes):
    fn, kwargs = BINARY[name]
    check_grad(fn, *shapes, **kwargs)


def test_maximum_minimum_grad():
    check_grad(lambda x, y: x.maximum(y), (2, 3), (3,), ref=np.maximum)
    check_grad(lambda x, y: x.minimum(y), (2, 3), (2, 3), ref=np.minimum)
    check_grad(lambda x: x.maximum(0.3), (2, 3), ref=lambda a: np.maximum(a, 0.3), kinks=(0.3,))


def test_where_grad():
    cond = np.array([[True, False, True], [False, False, True]])
    check_grad(lambda x, y: Tensor(cond).where(x, y), (2, 3), (3,), ref=lambda a, b: np.where(cond, a, b))
    check_grad(lambda x: (x > 0).where(x * 2, -x), (2, 3), ref=lambda a: np.where(a > 0, a * 2, -a), kinks=(0.0,))


# -- reductions --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_grad(axis, keepdim):
    check_grad(lambda x: x.sum(axis, keepdim), (2, 3, 2), ref=lambda a: a.sum(axis, keepdims=keepdim))
    check_grad(lambda x: x.mean(axis, keepdim), (2, 3, 2), ref=lambda a: a.mean(axis, keepdims=keepdim))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)], ids=str)
def test_max_min_grad(axis):
    check_grad(lambda x: x.max(axis), (3, 4), ref=lambda a: a.max(axis))
    check_grad(lambda x: x.min(axis), (3, 4), ref=lambda a: a.min(axis))


def test_max_grad_splits_between_ties_like_torch_amax():
    x = Tensor([1.0, 3.0, 3.0, 2.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.5, 0.5, 0.0])  # torch.amax: evenly between equal maxima


def np_softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_family_grad(axis):
    check_grad(lambda x: x.softmax(axis), (3, 4), ref=lambda a: np_softmax(a, axis))
    check_grad(lambda x: x.log_softmax(axis), (3, 4), ref=lambda a: np.log(np_softmax(a, axis)))
    check_grad(lambda x: x.logsumexp(axis), (3, 4), ref=lambda a: np.log(np.exp(a).sum(axis)))


def test_softmax_grad_on_large_inputs():
    x = Tensor([[1000.0, 1001.0, 1002.0]], requires_grad=True)
    w = np.array([[1.0, -2.0, 0.5]])
    (x.softmax() * Tensor(w.astype(np.float32))).sum().backward()
    s = np_softmax(np.array([[0.0, 1.0, 2.0]]), -1)
    np.testing.assert_allclose(x.grad.numpy(), s * (w - (s * w).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)


def test_var_std_layernorm_grad():
    check_grad(lambda x: x.var(1), (3, 4), ref=lambda a: a.var(1, ddof=1))
    check_grad(lambda x: x.std(), (3, 4), ref=lambda a: a.std(ddof=1))
    check_grad(lambda x: x.layernorm(), (2, 4),
               ref=lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5))  # fmt: skip


def test_cross_entropy_grad():
    labels = np.array([2, 0, 1])

    def ref(a: np.ndarray) -> np.ndarray:
        return -np.log(np_softmax(a, -1))[np.arange(3), labels].mean()

    check_grad(lambda x: x.cross_entropy(Tensor(labels.astype(np.int32))), (3, 4), ref=ref)
    check_grad(lambda x: x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32))), (3, 4), ref=ref)


# -- movement ----------------------------------------------------------------------------------------------------------

MOVEMENT = {
    "reshape": (lambda x: x.reshape(3, 4), lambda a: a.reshape(3, 4)),
    "reshape-1": (lambda x: x.reshape(-1, 2), lambda a: a.reshape(-1, 2)),
    "permute": (lambda x: x.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    "transpose": (lambda x: x.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    "expand": (lambda x: x[:, :1].expand(2, 3, 2), lambda a: np.broadcast_to(a[:, :1], (2, 3, 2))),
    "expand_new_dim": (lambda x: x.expand(3, 2, 3, 2), lambda a: np.broadcast_to(a, (3, 2, 3, 2))),
    "pad": (lambda x: x.pad(((1, 0), (0, 2), (1, 1))), lambda a: np.pad(a, ((1, 0), (0, 2), (1, 1)))),
    "pad_value": (
        lambda x: x.pad(((0, 1), None, None), value=2.0),
        lambda a: np.pad(a, ((0, 1), (0, 0), (0, 0)), constant_values=2.0),
    ),
    "shrink": (lambda x: x.shrink(((0, 1), (1, 3), None)), lambda a: a[0:1, 1:3]),
    "slice_step": (lambda x: x[:, ::2], lambda a: a[:, ::2]),
    "slice_neg_step": (lambda x: x[::-1, 2:0:-1, ::-2], lambda a: a[::-1, 2:0:-1, ::-2]),
    "index": (lambda x: x[1, -1], lambda a: a[1, -1]),
    "none_ellipsis": (lambda x: x[None, ..., 1], lambda a: a[None, ..., 1]),
    "flip": (lambda x: x.flip((0, 2)), lambda a: np.flip(a, (0, 2))),
    "flatten": (lambda x: x.flatten(1), lambda a: a.reshape(2, 6)),
    "squeeze_unsqueeze": (lambda x: x.unsqueeze(1).squeeze(1), lambda a: a),
    "repeat": (lambda x: x.repeat(2, 1, 1), lambda a: np.tile(a, (2, 1, 1))),
    "T": (lambda x: x.reshape(6, 2).T, lambda a: a.reshape(6, 2).T),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement_grad(name):
    fn, ref = MOVEMENT[name]
    check_grad(fn, (2, 3, 2), ref=ref)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack_grad(dim):
    shapes = [[2, 3], [2, 3], [2, 3]]
    shapes[1][dim] = 1
    check_grad(
        lambda x, y, z: x.cat(y, z, dim=dim), *map(tuple, shapes), ref=lambda a, b, c: np.concatenate([a, b, c], dim)
    )
    check_grad(lambda x, y: Tensor.stack(x, y, dim=dim), (2, 3), (2, 3), ref=lambda a, b: np.stack([a, b], dim))


def test_split_grad():
    check_grad(lambda x: x.split([1, 2], dim=1)[1] * 2, (2, 3), ref=lambda a: a[:, 1:] * 2)


# -- linear algebra ----------------------------------------------------------------------------------------------------


MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 2)),
                 ((2, 2, 3), (3, 2)), ((2, 1, 2, 3), (3, 3, 2))]  # fmt: skip


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_grad(shapes):
    check_grad(lambda x, y: x @ y, *shapes, ref=np.matmul)


def test_linear_grad():
    check_grad(lambda x, w, b: x.linear(w, b), (2, 3), (3, 4), (4,), ref=lambda a, w, b: a @ w + b)


# -- graph rules -------------------------------------------------------------------------------------------------------


def test_backward_non_scalar_with_gradient():
    a = np.array([[1.0, -2.0, 3.0], [0.5, 2.0, -1.0]], np.float32)
    g = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 0.5]], np.float32)
    x = Tensor(a, requires_grad=True)
    (x * x).backward(Tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), 2 * a * g)


def test_backward_non_scalar_without_gradient_raises():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="scalar"):
        (x * 2).backward()


def test_gradient_accumulates_over_two_backward_calls():
    a = np.array([1.0, -2.0, 3.0], np.float32)
    x = Tensor(a, requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a)
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a + 3)


def test_backward_twice_on_the_same_graph_is_not_silently_ignored():
    a = np.array([1.0, -2.0, 3.0], np.float32)
    x = Tensor(a, requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    try:
        loss.backward()
    except Exception:
        return  # torch: "Trying to backward through the graph a second time" is fine too
    np.testing.assert_allclose(x.grad.numpy(), 4 * a)  # tinygrad 0.14 accumulates a second time


def test_detach():
    a = np.array([1.0, 2.0, -3.0], np.float32)
    x = Tensor(a, requires_grad=True)
    d = x.detach()
    assert d.requires_grad is False
    np.testing.assert_array_equal(d.numpy(), a)
    (x.detach() * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a)  # only the non-detached factor contributes


def test_only_leaves_that_opt_out_get_no_grad():
    x = Tensor([1.0, 2.0], requires_grad=True)
    c = Tensor([3.0, 4.0], requires_grad=False)
    n = Tensor([5.0, 6.0])  # requires_grad None: a parameter too (tinygrad 0.14)
    (x * c * n).sum().backward()
    assert c.grad is None
    np.testing.assert_allclose(n.grad.numpy(), [3.0, 8.0])
    np.testing.assert_allclose(x.grad.numpy(), [15.0, 24.0])
    y = Tensor([1.0, 2.0], requires_grad=False)
    out = (y * 2).sum()
    assert out.requires_grad is False
    assert y.grad is None


def test_inference_mode_records_nothing():
    x = Tensor([1.0, 2.0], requires_grad=True)
    with Tensor.inference_mode():
        y = (x * x).sum()
    assert y._ctx is None
    y.backward()
    assert x.grad is None
    np.testing.assert_allclose(y.item(), 5.0)

    @Tensor.inference_mode()
    def f(t: Tensor) -> Tensor:
        return (t * 3).sum()

    z = f(x)
    assert z._ctx is None
    # recording is back on outside
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_no_grad_flag_records_nothing():
    x = Tensor([1.0, 2.0], requires_grad=True)
    prev, Tensor.no_grad = Tensor.no_grad, True
    try:
        y = (x * x).sum()
    finally:
        Tensor.no_grad = prev
    assert y._ctx is None


def test_tensor_gradient():
    a, b = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 4.0, -1.0], np.float32)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    loss = (x * w + x * x).sum()
    dx, dw = loss.gradient(x, w)
    np.testing.assert_allclose(dx.numpy(), b + 2 * a)
    np.testing.assert_allclose(dw.numpy(), a)
    assert x.grad is None and w.grad is None  # .grad untouched
    assert x.requires_grad is True


def test_tensor_gradient_of_a_tensor_that_was_not_marked_requires_grad():
    a = np.array([1.0, 2.0], np.float32)
    x = Tensor(a)  # requires_grad None: tinygrad 0.14's gradient() still differentiates through it
    (dx,) = (x * x).sum().gradient(x)
    np.testing.assert_allclose(dx.numpy(), 2 * a)


def test_tensor_gradient_twice_on_the_same_graph():
    a = np.array([1.0, 2.0], np.float32)
    x, w = Tensor(a, requires_grad=True), Tensor(a * 3, requires_grad=True)
    loss = (x * w).sum()
    (dx,) = loss.gradient(x)
    (dw,) = loss.gradient(w)  # tinygrad 0.14: gradient() leaves the graph intact
    np.testing.assert_allclose(dx.numpy(), a * 3)
    np.testing.assert_allclose(dw.numpy(), a)


def test_tensor_gradient_of_an_intermediate():
    a = np.array([1.0, -2.0], np.float32)
    x = Tensor(a, requires_grad=True)
    y = x * 2
    (dy,) = (y * y).sum().gradient(y)
    np.testing.assert_allclose(dy.numpy(), 4 * a)


def test_grad_at_kinks_like_torch():
    x = Tensor([0.0, 1.0, -1.0], requires_grad=True)
    x.relu().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 0.0])
    y = Tensor([0.0, 2.0, -2.0], requires_grad=True)
    y.abs().sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 1.0, -1.0])


@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_reduction_dropping_its_axes_is_one_recorded_op_with_the_same_gradients(op):
    """`x.sum(1)` is one Function (its reshape inside), not a reduction then a reshape each with its own bookkeeping
    (~10 us of a small sum's build); its gradients, by backward and by recorded ops (`gradient`), are as before."""
    from lazy import function as F

    data = np.array([[1.0, 5.0, 2.0], [4.0, 4.0, -1.0]], dtype=np.float32)
    # d out_i / d x_ij: ones for a sum; for a max, the maxima sharing it equally
    local = np.ones_like(data) if op == "sum" else np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], dtype=np.float32)
    x = Tensor(data, requires_grad=True)
    out = getattr(x, op)(1)
    assert out.shape == (2,) and type(out._ctx) is (F.Sum if op == "sum" else F.Max)
    (out * Tensor([1.0, 3.0])).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), local * [[1.0], [3.0]])
    y = Tensor(data, requires_grad=True)
    reduced = data.sum(1) if op == "sum" else data.max(1)
    (grad,) = (getattr(y, op)(1) ** 2).sum().gradient(y)  # recorded ops: the squared reduction's gradient
    np.testing.assert_allclose(grad.numpy(), 2 * reduced[:, None] * local, rtol=1e-6)

"""The wider Tensor API (creation, math, activations, cumulative ops, movement, gather/einsum) on the PYTHON device:
values against numpy, gradients against central finite differences in float64."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes

RNG = np.random.default_rng(7)
EPS = 1e-6


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def _numeric_grad(loss: Callable[[np.ndarray], float], a: np.ndarray) -> np.ndarray:
    grad = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        plus, minus = a.copy(), a.copy()
        plus[idx] += EPS
        minus[idx] -= EPS
        grad[idx] = (loss(plus) - loss(minus)) / (2 * EPS)
    return grad


def check(fn: Callable[[Tensor], Tensor], ref: Callable[[np.ndarray], np.ndarray], a: np.ndarray,
          grad: bool = True, rtol: float = 1e-4, atol: float = 1e-5) -> None:  # fmt: skip
    """fn against ref on `a` (float32-exact float64), and d(sum(fn(x) * w))/dx against finite differences of ref."""
    a = a.astype(np.float32).astype(np.float64)
    expected = np.asarray(ref(a), dtype=np.float64)
    x = Tensor(a.astype(np.float32), requires_grad=True)
    out = fn(x)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol, err_msg="forward")
    if not grad:
        return
    w = RNG.standard_normal(expected.shape).astype(np.float32).astype(np.float64)
    (out * Tensor(w.astype(np.float32))).sum().backward()
    assert x.grad is not None
    expected_grad = _numeric_grad(lambda arr: float(np.sum(np.asarray(ref(arr), dtype=np.float64) * w)), a)
    np.testing.assert_allclose(x.grad.numpy(), expected_grad, rtol=1e-3, atol=1e-4, err_msg="gradient")


def away_from(a: np.ndarray, *kinks: float) -> np.ndarray:
    for k in kinks:
        a = np.where(np.abs(a - k) < 0.05, k + 0.1, a)
    return a


# -- creation ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(0, 10, 5), (-1, 1, 7), (2.5, -3.0, 4), (3, 3, 1), (0, 1, 0)])
def test_linspace(args):
    np.testing.assert_allclose(Tensor.linspace(*args).numpy(), np.linspace(*args, dtype=np.float32), rtol=1e-6)


def test_linspace_dtype():
    t = Tensor.linspace(0, 10, 6, dtype=dtypes.int32)
    assert t.dtype == dtypes.int32
    np.testing.assert_equal(t.numpy(), np.array([0, 2, 4, 6, 8, 10]))
    with pytest.raises(ValueError):
        Tensor.linspace(0, 1, 3, dtype=dtypes.bool)


def test_randint():
    Tensor.manual_seed(3)
    t = Tensor.randint(200, low=-3, high=4)
    assert t.dtype == dtypes.int32 and t.shape == (200,)
    values = t.numpy()
    assert values.min() >= -3 and values.max() <= 3 and len(set(values.tolist())) == 7
    with pytest.raises(ValueError):
        Tensor.randint(3, low=2, high=2)
    with pytest.raises(TypeError):
        Tensor.randint(3, dtype=dtypes.float32)


def test_normal_and_kaiming_normal_scale_randn():
    Tensor.manual_seed(5)
    base = Tensor.randn(4, 3).numpy()
    Tensor.manual_seed(5)
    np.testing.assert_allclose(Tensor.normal(4, 3, mean=3.0, std=2.0).numpy(), base * 2 + 3, rtol=1e-6)
    Tensor.manual_seed(5)
    std = math.sqrt(2 / (1 + 0.01**2) / 3)
    np.testing.assert_allclose(Tensor.kaiming_normal(4, 3).numpy(), base * std, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError):
        Tensor.normal(2, std=-1.0)


def test_multinomial():
    Tensor.manual_seed(1)
    only_two = Tensor([0.0, 0.0, 1.0, 0.0]).multinomial(5, replacement=True)
    assert only_two.dtype == dtypes.int32
    np.testing.assert_equal(only_two.numpy(), [2] * 5)
    rows = Tensor([[1.0, 0.0, 3.0], [0.0, 2.0, 0.0]]).multinomial(4, replacement=True).numpy()
    assert rows.shape == (2, 4) and set(rows[0].tolist()) <= {0, 2} and set(rows[1].tolist()) == {1}
    perm = Tensor([1.0, 2.0, 3.0, 4.0]).multinomial(4).numpy()
    assert sorted(perm.tolist()) == [0, 1, 2, 3]
    assert Tensor([5.0, 0.0, 1.0]).multinomial(2).numpy().tolist() in ([0, 2], [2, 0])


def test_like_constructors_take_dtype_and_device():
    t = Tensor([[1.5, 2.0]])
    assert t.zeros_like(dtype=dtypes.int32).dtype == dtypes.int32
    np.testing.assert_equal(t.ones_like().numpy(), np.ones((1, 2), np.float32))
    full = t.full_like(7, dtype=dtypes.int64, device="PYTHON")
    assert full.dtype == dtypes.int64 and full.device == "PYTHON" and full.tolist() == [[7, 7]]


# -- elementwise -------------------------------------------------------------------------------------------------------


def _erf(a: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(a)


def _softplus(a: np.ndarray) -> np.ndarray:
    return np.log1p(np.exp(a))


SELU = (1.67326, 1.0507)
UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray], tuple[float, float]]] = {
    "asin": (Tensor.asin, np.arcsin, (-0.9, 0.9)),
    "acos": (Tensor.acos, np.arccos, (-0.9, 0.9)),
    "atan": (Tensor.atan, np.arctan, (-3.0, 3.0)),
    "sinh": (Tensor.sinh, np.sinh, (-2.0, 2.0)),
    "cosh": (Tensor.cosh, np.cosh, (-2.0, 2.0)),
    "asinh": (Tensor.asinh, np.arcsinh, (-3.0, 3.0)),
    "acosh": (Tensor.acosh, np.arccosh, (1.2, 4.0)),
    "atanh": (Tensor.atanh, np.arctanh, (-0.8, 0.8)),
    "erf": (Tensor.erf, _erf, (-2.5, 2.5)),
    "relu6": (Tensor.relu6, lambda a: np.clip(a, 0, 6), (-2.0, 8.0)),
    "hardswish": (Tensor.hardswish, lambda a: a * np.clip(a + 3, 0, 6) / 6, (-5.0, 5.0)),
    "hardsigmoid": (Tensor.hardsigmoid, lambda a: np.clip(a / 6 + 0.5, 0, 1), (-5.0, 5.0)),
    "hardtanh": (Tensor.hardtanh, lambda a: np.clip(a, -1, 1), (-2.0, 2.0)),
    "quick_gelu": (Tensor.quick_gelu, lambda a: a / (1 + np.exp(-1.702 * a)), (-3.0, 3.0)),
    "celu": (lambda x: x.celu(0.5), lambda a: np.where(a >= 0, a, 0.5 * (np.exp(a / 0.5) - 1)), (-3.0, 3.0)),
    "selu": (Tensor.selu, lambda a: SELU[1] * np.where(a >= 0, a, SELU[0] * (np.exp(a) - 1)), (-3.0, 3.0)),
    "mish": (Tensor.mish, lambda a: a * np.tanh(_softplus(a)), (-3.0, 3.0)),
    "logsigmoid": (Tensor.logsigmoid, lambda a: -_softplus(-a), (-4.0, 4.0)),
    "softsign": (Tensor.softsign, lambda a: a / (1 + np.abs(a)), (-3.0, 3.0)),
}
KINKS = {"relu6": (0.0, 6.0), "hardswish": (-3.0, 3.0), "hardsigmoid": (-3.0, 3.0), "hardtanh": (-1.0, 1.0)}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    fn, ref, (low, high) = UNARY[name]
    a = away_from(RNG.uniform(low, high, size=(2, 4)), 0.0, *KINKS.get(name, ()))
    check(fn, ref, a)


def test_selu_celu_do_not_overflow_into_nan_gradients():
    x = Tensor([200.0, -1.0], requires_grad=True)
    (x.selu() + x.celu()).sum().backward()
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()


def test_lerp():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3)).astype(np.float32)
    check(lambda x: x.lerp(Tensor(b), 0.25), lambda arr: arr + (b - arr) * 0.25, a)
    w = Tensor([0.0, 0.5, 1.0])
    np.testing.assert_allclose(Tensor([1.0, 1.0, 1.0]).lerp(Tensor([3.0, 3.0, 3.0]), w).numpy(), [1.0, 2.0, 3.0])


def test_isnan_isinf_isfinite_nan_to_num():
    a = np.array([1.0, np.nan, np.inf, -np.inf, -2.0], dtype=np.float32)
    t = Tensor(a)
    np.testing.assert_equal(t.isnan().numpy(), np.isnan(a))
    np.testing.assert_equal(t.isinf().numpy(), np.isinf(a))
    np.testing.assert_equal(t.isinf(detect_negative=False).numpy(), np.isposinf(a))
    np.testing.assert_equal(t.isinf(detect_positive=False).numpy(), np.isneginf(a))
    np.testing.assert_equal(t.isfinite().numpy(), np.isfinite(a))
    np.testing.assert_equal(t.nan_to_num().numpy(), np.nan_to_num(a))
    np.testing.assert_equal(t.nan_to_num(1.0, 9.0, -9.0).numpy(), np.nan_to_num(a, nan=1.0, posinf=9.0, neginf=-9.0))
    assert t.isnan().dtype == dtypes.bool and Tensor([1, 2]).isinf().tolist() == [False, False]


def test_logical_and_bitwise_not():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    x, y = Tensor(a), Tensor(b)
    np.testing.assert_equal(x.logical_and(y).numpy(), a & b)
    np.testing.assert_equal(x.logical_or(y).numpy(), a | b)
    np.testing.assert_equal(x.logical_xor(y).numpy(), a ^ b)
    np.testing.assert_equal(Tensor([0, 2, -1]).logical_and(Tensor([1, 1, 0])).numpy(), [False, True, False])
    np.testing.assert_equal(Tensor([0, 5, -3], dtype=dtypes.int32).bitwise_not().numpy(), ~np.array([0, 5, -3]))
    np.testing.assert_equal(Tensor([0, 250], dtype=dtypes.uint8).bitwise_not().numpy(), [255, 5])
    np.testing.assert_equal(x.bitwise_not().numpy(), ~a)
    with pytest.raises(TypeError):
        Tensor([1.0]).bitwise_not()


# -- reductions --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_prod(axis):
    a = RNG.uniform(-2, 2, size=(3, 5, 2))
    check(lambda x: x.prod(axis), lambda arr: np.prod(arr, axis=axis), a)
    ints = RNG.integers(-3, 4, size=(3, 5, 2))
    out = Tensor(ints.astype(np.int32)).prod(axis, keepdim=True)
    assert out.dtype == dtypes.int32
    np.testing.assert_equal(out.numpy(), np.prod(ints, axis=axis, keepdims=True))


def test_prod_edge_cases():
    assert Tensor([2.0, 0.0, -3.0]).prod().item() == 0.0
    assert Tensor([True, True]).prod().item() is True
    assert Tensor(np.zeros((2, 0), np.float32)).prod(1).tolist() == [1.0, 1.0]
    assert Tensor([3, 4]).prod(dtype=dtypes.int64).dtype == dtypes.int64


def test_var_mean_std_mean():
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    var, mean = Tensor(a).var_mean(1)
    np.testing.assert_allclose(var.numpy(), a.var(1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(mean.numpy(), a.mean(1), rtol=1e-5, atol=1e-7)
    std, mean = Tensor(a).std_mean(0, keepdim=True, correction=0)
    np.testing.assert_allclose(std.numpy(), a.std(0, keepdims=True), rtol=1e-5)
    assert mean.shape == (1, 4)


@pytest.mark.parametrize("ord_", [2.0, 1.0, 3.0, math.inf, -math.inf])
def test_norm(ord_):
    a = away_from(RNG.uniform(-2, 2, size=(3, 4)), 0.0)
    check(lambda x: x.norm(ord_, axis=1), lambda arr: np.linalg.norm(arr, ord=ord_, axis=1), a)
    assert Tensor([[3.0, 0.0], [0.0, 4.0]]).norm(0).item() == 2.0
    np.testing.assert_allclose(Tensor([[3.0, 4.0]]).norm().numpy(), 5.0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_cumprod(axis):
    a = RNG.uniform(-2, 2, size=(3, 4))
    check(lambda x: x.cumsum(axis), lambda arr: np.cumsum(arr, axis=axis), a)
    check(lambda x: x.cumprod(axis), lambda arr: np.cumprod(arr, axis=axis), a)
    ints = RNG.integers(-5, 5, size=(3, 4))
    out = Tensor(ints.astype(np.int32)).cumsum(axis)
    assert out.dtype == dtypes.int32
    np.testing.assert_equal(out.numpy(), np.cumsum(ints, axis=axis))


def test_cummax():
    values, indices = Tensor([0, 1, -1, 2, -2, 3, -3, 3]).cummax(0)
    np.testing.assert_equal(values.numpy(), [0, 1, 1, 2, 2, 3, 3, 3])
    np.testing.assert_equal(indices.numpy(), [0, 1, 1, 3, 3, 5, 5, 5])  # the first index reaching the max (tinygrad)
    assert indices.dtype == dtypes.int32
    a = RNG.standard_normal((3, 5))
    check(lambda x: x.cummax(1)[0], lambda arr: np.maximum.accumulate(arr, axis=1), a)


def test_logcumsumexp():
    a = RNG.uniform(-3, 3, size=(2, 5))
    check(lambda x: x.logcumsumexp(1), lambda arr: np.logaddexp.accumulate(arr, axis=1), a)
    big = Tensor([1000.0, 1000.0, -1000.0]).logcumsumexp().numpy()
    np.testing.assert_allclose(big, [1000.0, 1000.0 + math.log(2), 1000.0 + math.log(2)], rtol=1e-6)


# -- movement ----------------------------------------------------------------------------------------------------------


def test_repeat_interleave():
    a = RNG.standard_normal((2, 3))
    check(lambda x: x.repeat_interleave(2, 1), lambda arr: np.repeat(arr, 2, axis=1), a)
    np.testing.assert_equal(Tensor([[1, 2], [3, 4]]).repeat_interleave(2).numpy(), [1, 1, 2, 2, 3, 3, 4, 4])


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 3), (0, 1)), (5, None)])
def test_roll(shifts, dims):
    a = RNG.standard_normal((3, 4))
    check(lambda x: x.roll(shifts, dims), lambda arr: np.roll(arr, shifts, axis=dims), a)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    x, y, z = np.arange(3), np.arange(4) * 10, np.arange(2) * 100
    grids = Tensor(x).meshgrid(Tensor(y), Tensor(z), indexing=indexing)
    for got, want in zip(grids, np.meshgrid(x, y, z, indexing=indexing)):
        np.testing.assert_equal(got.numpy(), want)


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu(diagonal):
    a = RNG.standard_normal((2, 3, 4))
    check(lambda x: x.triu(diagonal), lambda arr: np.triu(arr, diagonal), a)
    check(lambda x: x.tril(diagonal), lambda arr: np.tril(arr, diagonal), a)


def test_masked_fill():
    a = RNG.standard_normal((2, 3))
    mask = np.array([[True, False, True], [False, False, True]])
    check(lambda x: x.masked_fill(Tensor(mask), -1.0), lambda arr: np.where(mask, -1.0, arr), a)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes(mode):
    np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    a = RNG.standard_normal((3, 4))
    pads = ((1, 2), (2, 0))
    check(lambda x: x.pad(pads, mode=mode), lambda arr: np.pad(arr, pads, mode=np_mode), a)
    flat = Tensor(a.astype(np.float32)).pad((1, 1), mode=mode)  # torch order: the last axis only
    np.testing.assert_allclose(flat.numpy(), np.pad(a.astype(np.float32), ((0, 0), (1, 1)), mode=np_mode))


def test_pad_mode_errors():
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0]).pad(((2, 0),), mode="reflect")
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0]).pad(((1, 0),), mode="bogus")
    np.testing.assert_equal(Tensor([1.0, 2.0]).pad(((1, 0),), value=5.0).numpy(), [5.0, 1.0, 2.0])


def test_gather():
    a = RNG.standard_normal((3, 4))
    index = np.array([[0, 3], [2, 2], [1, 0]])
    check(lambda x: x.gather(1, Tensor(index)), lambda arr: np.take_along_axis(arr, index, axis=1), a)
    index0 = np.array([[2, 0, 1, 1]])
    check(lambda x: x.gather(0, Tensor(index0)), lambda arr: np.take_along_axis(arr, index0, axis=0), a)
    ints = Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1, 1], [0, 1]]))
    assert ints.dtype == dtypes.int32 and ints.tolist() == [[2, 2], [3, 4]]


@pytest.mark.parametrize(
    "formula, shapes",
    [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
     ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("i,j", [(3,), (2,)]), ("ij,ij->i", [(2, 3), (2, 3)])],
)  # fmt: skip
def test_einsum(formula, shapes):
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = Tensor.einsum(formula, *[Tensor(a) for a in arrays])
    np.testing.assert_allclose(got.numpy(), np.einsum(formula, *arrays), rtol=1e-5, atol=1e-6)
    assert Tensor.einsum(formula, [Tensor(a) for a in arrays]).shape == got.shape


@pytest.mark.parametrize(
    "formula, shapes",
    [("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("bii->bi", [(2, 3, 3)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
     ("...ii->...", [(2, 3, 3)]), ("i...,i...->...", [(3, 2), (3, 2)])],
)  # fmt: skip
def test_einsum_diagonals_and_ellipsis(formula, shapes):
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = Tensor.einsum(formula, *[Tensor(a) for a in arrays])
    np.testing.assert_allclose(got.numpy(), np.einsum(formula, *arrays), rtol=1e-5, atol=1e-5)


def test_einsum_grad():
    b = RNG.standard_normal((3, 2)).astype(np.float32)
    check(lambda x: Tensor.einsum("ij,jk->ik", x, Tensor(b)), lambda arr: arr @ b, RNG.standard_normal((2, 3)))

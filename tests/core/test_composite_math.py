"""The composite float math of `Tensor` (tanh, sinh, cosh, acosh, the elu family, asin, atan, asinh, atanh, erf,
sigmoid), built from exp2, log2, sin, sqrt and selects, against numpy's float64 on the CPU compiler and the PYTHON
reference device: the failures a fuzzer found (NaN turned into 0, -inf for NaN, overflow before the result does, tiny
arguments rounded away, the sign of -0.0 lost, underflow to 0 instead of to a denormal) and sweeps in ulp."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lazy import Tensor
from lazy.helpers import GlobalCounters

DEVICES = ["CPU", "PYTHON"]
FLOATS = [np.float32, np.float64]


def ulp_error(got: np.ndarray, want: np.ndarray, np_dtype: type[np.floating]) -> np.ndarray:
    """|got - want| in ulps of `want` rounded to `np_dtype`; 0 where both are the same non-finite value or NaN, inf
    where only one is."""
    with np.errstate(over="ignore", invalid="ignore"):
        want_rounded = want.astype(np_dtype)
        gap = np.spacing(np.abs(want_rounded)).astype(np.float64)
        error = np.abs(got.astype(np.float64) - want) / gap
    same = (got == want_rounded) | (np.isnan(got) & np.isnan(want_rounded))
    return np.where(np.isfinite(want_rounded) & np.isfinite(got), error, np.where(same, 0.0, np.inf))


def apply(op: str, x: np.ndarray, device: str) -> np.ndarray:
    return getattr(Tensor(x, device=device), op)().numpy()


def sigmoid_ref(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(v < 0, np.exp(v) / (1 + np.exp(v)), 1 / (1 + np.exp(-v)))


REFERENCES = {
    "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "elu": lambda v: np.where(v > 0, v, np.expm1(v)), "celu": lambda v: np.where(v > 0, v, np.expm1(v)),
    "selu": lambda v: 1.0507 * np.where(v > 0, v, 1.67326 * np.expm1(v)), "sigmoid": sigmoid_ref,
}  # fmt: skip


def max_ulp(op: str, x: np.ndarray, device: str) -> float:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        want = REFERENCES[op](x.astype(np.float64))
    return float(ulp_error(apply(op, x, device), want, x.dtype.type).max())


def signed_magnitudes(low: float, high: float, count: int, np_dtype: type[np.floating]) -> np.ndarray:
    magnitudes = np.geomspace(low, high, count)
    return np.concatenate([magnitudes, -magnitudes]).astype(np_dtype)


# -- NaN, -0.0 and tiny arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["elu", "selu", "celu"])
def test_elu_family_keeps_nan(device, op):
    # a select on x > 0 sent NaN to the exp branch, whose input min(x, 0) had made it 0
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 2.5, -2.5, -1e-30, 0.0, -0.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = REFERENCES[op](x.astype(np.float64))
    np.testing.assert_allclose(apply(op, x, device), want, rtol=1e-6, atol=0)  # (NaN only matches NaN)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["tanh", "sinh", "asin", "atan", "asinh", "atanh", "erf", "elu", "selu", "celu"])
def test_negative_zero_keeps_its_sign(device, op):
    got = apply(op, np.array([-0.0, 0.0], np.float32), device)
    assert got[0] == 0 and np.signbit(got[0]), f"{op}(-0.0) gave {got[0]!r}"
    assert got[1] == 0 and not np.signbit(got[1]), f"{op}(0.0) gave {got[1]!r}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["tanh", "sinh", "asin", "atan", "asinh", "atanh", "erf", "elu", "celu"])
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
def test_tiny_arguments_are_not_rounded_away(device, op, np_dtype):
    # asin(-1.36e-38) gave -1.19e-7, tanh(4.47e-8) 1.19e-7, tanh(1e-10) and asinh(1e-11) 0; the limits: tanh's and
    # sinh's series have none, elu's x * alpha holds up to eps, the others' x (2x / sqrt(pi) for erf) up to sqrt(eps)
    eps = float(np.finfo(np_dtype).eps)
    limit = {"tanh": 1.0, "sinh": 1.0, "elu": eps, "celu": eps}.get(op, math.sqrt(eps))
    x = np.array([1.3590908e-38, 1e-30, 1e-20, 1e-10, 1e-9, 4.470475e-08, 1e-7, 1e-5, 3e-4, 1e-2], np_dtype)
    x = x[x < limit]
    x = np.concatenate([x, -x]) if op not in ("elu", "celu") else -x
    assert max_ulp(op, x, device) <= 1.5


# -- range limits --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_acosh_is_nan_below_one(device):
    # sqrt(x^2 - 1) rounded to |x| for float32 x in [-10000, -2896], and log(x + |x|) gave -inf
    x = np.concatenate([np.linspace(-10000, -2896, 400), [-np.inf, -1e30, -1.0, 0.0, 0.999, np.nan]]).astype(np.float32)
    got = apply("acosh", x, device)
    assert np.isnan(got).all(), f"acosh gave {got[~np.isnan(got)][:5]} for {x[~np.isnan(got)][:5]}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("op", ["acosh", "asinh"])
def test_acosh_asinh_of_large_arguments(device, np_dtype, op):
    # log(2x) took over at a fixed 1e4, where float64 still sees the dropped 1/(4x^2)
    x = np.geomspace(1.5, 1e30, 600).astype(np_dtype)
    assert max_ulp(op, x, device) <= 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_sinh_cosh_overflow_only_with_the_result(device, np_dtype, op):
    # exp(x) / 2 overflowed for float32 |x| in (88.72, 89.42], float64 (709.78, 710.47]
    last = float(np.arcsinh(np.finfo(np_dtype).max))  # (89.416 in float32, 710.476 in float64)
    x = np.concatenate([np.linspace(last - 0.7, last - 0.001, 300), [last + 0.01, np.inf]]).astype(np_dtype)
    x = np.concatenate([x, -x])
    # (within exp's own error there, which grows with the argument: about 63 ulp in float32, 430 in float64)
    assert max_ulp(op, x, device) <= (100 if np_dtype == np.float32 else 600)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
def test_sigmoid_underflows_to_denormals(device, np_dtype):
    # 1 / (1 + exp(-x)) was 0 once exp(-x) overflowed: float32 x in [-103.97, -88.72]
    low = math.log(float(np.finfo(np_dtype).smallest_subnormal))
    x = np.linspace(low + 0.5, low / 2, 500).astype(np_dtype)
    # (within exp's own error at these arguments: about 63 ulp in float32, 430 in float64)
    assert max_ulp("sigmoid", x, device) <= (100 if np_dtype == np.float32 else 600)


# -- sweeps ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
def test_tanh_sweep(device, np_dtype):
    # 2 * sigmoid(2x) - 1 cost up to ulp(1) absolute: 115 ulp at |x| ~ 0.01, everything at |x| < 3e-8
    x = np.concatenate([signed_magnitudes(1e-12, 20, 1500, np_dtype), np.linspace(-1, 1, 301).astype(np_dtype)])
    assert max_ulp("tanh", x, device) <= 4
    got = apply("tanh", np.array([np.inf, -np.inf, np.nan], np_dtype), device)
    np.testing.assert_array_equal(got, np.array([1, -1, np.nan], np_dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
def test_sinh_sweep(device, np_dtype):
    # (exp(x) - exp(-x)) / 2 cancels for small |x|: hundreds of ulp at 0.01, 0 below 3e-8
    x = np.concatenate([signed_magnitudes(1e-12, 9, 1500, np_dtype), np.linspace(-1, 1, 301).astype(np_dtype)])
    assert max_ulp("sinh", x, device) <= 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["asin", "atan", "asinh", "atanh", "erf"])
def test_inverse_functions_and_erf_sweep_float32(device, op):
    """Above sqrt(eps) only the absolute error is small (below 6e-7): their formulas are float32-grade and lose small
    |x| to cancellation (pi/2 - ..., log(1 + small), 1 - tail). Below sqrt(eps) they are within 1.5 ulp."""
    x = np.concatenate([signed_magnitudes(1e-30, 0.99, 1200, np.float32), np.linspace(-0.99, 0.99, 199)])
    x = x.astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = REFERENCES[op](x.astype(np.float64))
    got = apply(op, x, device)
    np.testing.assert_allclose(got, want, rtol=0, atol=6e-7)
    tiny = np.abs(x) < 2.0**-11.5
    assert ulp_error(got[tiny], want[tiny], np.float32).max() <= 1.5


# -- gradients and kernels --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_stay_finite_next_to_unused_branches(device):
    """A select's unused branch gets a zero gradient; where that branch overflowed, 0 * inf would be NaN. (sigmoid's
    gradient is s (1 - s) from its output, as PyTorch's: 0 where s rounds to 1, so the tails compare absolutely.)"""
    x = np.array([-1000.0, -30.0, -1e-30, 0.0, 0.3, 30.0, 1000.0], np.float32)
    for op, derivative in {
        "tanh": lambda v: 1 / np.cosh(v) ** 2, "sinh": np.cosh, "elu": lambda v: np.where(v > 0, 1.0, np.exp(v)),
        "sigmoid": lambda v: sigmoid_ref(v) * sigmoid_ref(-v),
    }.items():  # fmt: skip
        t = Tensor(x, device=device, requires_grad=True)
        getattr(t, op)().sum().backward()
        assert t.grad is not None
        with np.errstate(over="ignore"):
            want = derivative(x.astype(np.float64)).astype(np.float32)
        assert not np.isnan(t.grad.numpy()).any(), op
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-12, err_msg=op)


@pytest.mark.parametrize("op", ["tanh", "sinh", "cosh", "acosh", "asinh", "elu", "sigmoid"])
def test_each_op_is_one_kernel(op):
    x = Tensor(np.linspace(-3, 3, 64, dtype=np.float32), device="CPU").realize()
    GlobalCounters.reset()
    getattr(x, op)().realize()
    assert GlobalCounters.kernel_count == 1


def test_log1p_and_what_is_built_on_it_keep_small_terms():
    """log(1 + e) rounded 1 + e first: softplus was 4e-4 off at -10 and 0 from -17 on (so logsigmoid of confident
    predictions, BCE with logits, mish), logaddexp(-20, 0) was 0. Against float64."""
    import torch

    x = np.array([-30, -20, -17, -10, -1e-3, 0, 1e-3, 5, 25, 40], np.float32)
    want = np.log1p(np.exp(x.astype(np.float64)))
    np.testing.assert_allclose(Tensor(x).softplus().numpy(), want, rtol=2e-7)
    np.testing.assert_allclose(Tensor(-x).logsigmoid().numpy(), -want, rtol=2e-7)
    np.testing.assert_allclose(Tensor(x).softplus(beta=2).numpy(), np.log1p(np.exp(2 * x.astype(np.float64))) / 2,
                               rtol=2e-7)  # fmt: skip
    np.testing.assert_allclose(Tensor(x).logaddexp(0).numpy(), np.logaddexp(x.astype(np.float64), 0), rtol=2e-7)
    edge = np.array([-np.inf, np.inf, -np.inf, 3], np.float32), np.array([-np.inf, 1, np.inf, -np.inf], np.float32)
    np.testing.assert_array_equal(Tensor(edge[0]).logaddexp(Tensor(edge[1])).numpy(), np.logaddexp(*edge))
    small = np.array([1e-10, 3e-8, -1e-7, 1e-6, 0.5, -0.5, -1, np.inf, -2, 1e30], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose(Tensor(small).log1p().numpy(), np.log1p(small.astype(np.float64)), rtol=2e-7)
    # gradients: 1 / (1 + x) for log1p, sigmoid for softplus, as PyTorch's
    t = Tensor(small[:6], requires_grad=True)
    t.log1p().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 1 / (1 + small[:6].astype(np.float64)), rtol=1e-6)
    s = Tensor(x, requires_grad=True)
    s.softplus().sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), torch.sigmoid(torch.tensor(x, dtype=torch.float64)).numpy(), rtol=1e-6)


def test_lerp_reaches_end_and_the_norms_hessian_sees_zeros():
    """lerp from self alone lost `end` to cancellation (lerp(1e8, 1, 1) was 0); the 2-norm's second derivative was 0
    at a zero element (abs's second derivative), 0.2 there for [0, 3, 4]."""
    assert Tensor([1e8]).lerp(Tensor([1.0]), 1.0).item() == 1.0
    got = Tensor([1e8, 1e8, 2.0]).lerp(Tensor([1.0, 1.0, 4.0]), Tensor([1.0, 0.25, 0.5])).numpy()
    np.testing.assert_allclose(got, [1.0, 0.75e8 + 0.25, 3.0])
    x = Tensor(np.array([0.0, 3.0, 4.0], np.float32), requires_grad=True)
    (g,) = x.norm().gradient(x)
    (h0,) = g[0].gradient(x)
    np.testing.assert_allclose(h0.numpy(), [0.2, 0, 0], atol=1e-7)


def test_clamping_activations_take_pytorchs_gradient_at_their_kinks():
    """hardtanh, relu6, hardsigmoid and hardswish: 0 at the kinks (hardtanh's bounds, relu6's 0 and 6, hardsigmoid's
    +-3; hardswish 0 at -3, 1 at 3), as PyTorch; clip itself keeps clamp's 1 at its bounds."""
    import torch

    x = np.array([-3, 3, -1, 1, 0, 6, 2, -7, 8], np.float32)
    for name in ("hardtanh", "relu6", "hardsigmoid", "hardswish"):
        t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out = getattr(t, name)()
        out.sum().backward()
        want = getattr(torch.nn.functional, name)(tt)
        want.sum().backward()
        np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6, err_msg=name)
    t = Tensor(x, requires_grad=True)
    t.clip(-1, 1).sum().backward()
    assert t.grad.numpy().tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("np_dtype", FLOATS, ids=lambda t: t.__name__)
def test_erf_over_its_range(device, np_dtype):
    # Abramowitz & Stegun's 7.1.26 was 1.5e-7 off absolutely: 2e-4 relative in exact GELU, and float32's precision
    # in float64
    x = np.concatenate([np.linspace(-7, 7, 4001), signed_magnitudes(1e-6, 7, 600, np_dtype), [np.inf, -np.inf]])
    assert max_ulp("erf", x.astype(np_dtype), device) <= (2 if np_dtype == np.float32 else 4)


def test_erf_gradient_and_exact_gelu():
    x = np.concatenate([np.linspace(-9, 9, 721), [np.inf, -np.inf, 40.0]]).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    t.erf().sum().backward()
    want = 2 / np.sqrt(np.pi) * np.exp(-(x.astype(np.float64) ** 2))
    seen = want > 1e-37  # (the rest is 0 up to float32's subnormals)
    np.testing.assert_allclose(t.grad.numpy()[seen], want[seen], rtol=1e-4)
    assert (t.grad.numpy()[~seen] <= 1e-37).all() and not np.isnan(t.grad.numpy()).any()
    v = np.float32([-3.1, -0.7, 0.5, 2.0, 6.0])
    with np.errstate(all="ignore"):
        want_gelu = 0.5 * v.astype(np.float64) * (1 + np.vectorize(math.erf)(v.astype(np.float64) / math.sqrt(2)))
    # (1 + erf(x / sqrt(2))) cancels for negative x: an ulp of erf's 1 is 3e-5 of gelu(-3.1), as in PyTorch's float32
    np.testing.assert_allclose(Tensor(v).gelu("none").numpy(), want_gelu, rtol=3e-5)

"""Quotients and remainders at the edges fuzzing found: exact multiples (41 % 41), half types with Python scalars,
bool operands. Compared with PyTorch where it is installed, else with numpy's float64 result rounded."""

import numpy as np
import pytest

from lazy import Tensor, dtypes

torch = pytest.importorskip("torch", reason="compares with PyTorch's float ops")


def _exact_multiples(dtype, n=4000, seed=0):
    rng = np.random.default_rng(seed)
    b = (rng.integers(1, 100, n) * rng.choice([-1, 1], n)).astype(dtype)
    a = (rng.integers(1, 500, n) * b * rng.choice([-1, 1], n)).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("op", ["mod", "floordiv", "fmod", "trunc"])
def test_exact_multiples(dtype, op):
    # x * (1 / y) lands just below an integer for some exact multiples (41 * (1 / 41) is 0.99999994): the remainder
    # was a whole divisor and the quotients one short
    a, b = _exact_multiples(dtype)
    ours = {
        "mod": lambda x, y: x % y,
        "floordiv": lambda x, y: x // y,
        "fmod": lambda x, y: x.fmod(y),
        "trunc": lambda x, y: x.div(y, rounding_mode="trunc"),
    }[op]
    theirs = {
        "mod": lambda x, y: x % y,
        "floordiv": lambda x, y: x // y,
        "fmod": torch.fmod,
        "trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    }[op]
    got = ours(Tensor(a), Tensor(b)).numpy()
    want = theirs(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(got, want)


def test_forty_one():
    x, y = Tensor([41.0, 82.0, -41.0]), Tensor([41.0, 41.0, 41.0])
    np.testing.assert_array_equal((x % y).numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal((x // y).numpy(), [1.0, 2.0, -1.0])
    np.testing.assert_array_equal(x.div(y, rounding_mode="trunc").numpy(), [1.0, 2.0, -1.0])
    assert np.signbit(x.fmod(y).numpy()).tolist() == [False, False, True]  # (C's fmod(-41, 41) is -0.0)
    near = Tensor([2460.157376698282], dtype=dtypes.float64).fmod(-1.3255158279624364).numpy()[0]
    assert 0 <= near < 1e-13  # (it was 1.3255158279624506: more than the divisor)


@pytest.mark.parametrize("dt, tdt", [(dtypes.float16, "float16"), (dtypes.bfloat16, "bfloat16")])
@pytest.mark.parametrize("scalar", [0.1, 1e-3, 3.3, 1e-8, 1e5, 70000])
def test_half_products_with_python_scalars(dt, tdt, scalar):
    # the scalar is not rounded to the half type first: h * 1e-8 and h / 1e5 were 0
    a = np.random.default_rng(1).standard_normal(4000).astype(np.float32)
    t, x = torch.from_numpy(a).to(getattr(torch, tdt)), Tensor(a).cast(dt)
    for ours, theirs in ((x * scalar, t * scalar), (scalar * x, scalar * t), (scalar / x, scalar / t),
                         (x / scalar, t / scalar), (x + scalar, t + scalar), (x - scalar, t - scalar)):  # fmt: skip
        got, want = ours.cast(dtypes.float32).numpy(), theirs.float().numpy()
        np.testing.assert_array_equal(got, want)
    assert (Tensor([1000.0, 2.0], dtype=dt) / 1e5).numpy().min() > 0


@pytest.mark.parametrize("op", [lambda b: b // b, lambda b: b % b, lambda b: b.fmod(b),
                                lambda b: b.div(b, rounding_mode="floor")])  # fmt: skip
def test_bool_division_is_refused(op):
    with pytest.raises(TypeError, match="bool tensors"):
        op(Tensor([True, False]))
    assert (Tensor([True, False]) // 2).numpy().tolist() == [0, 0]  # (a bool with an int is an int op)


def _division_operands(dtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000)).astype(dtype)
    y = (rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000)).astype(dtype)
    tiny = np.finfo(dtype).tiny
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 41.0, 1e-39, tiny / 8, 3.0], dtype)
    xs = np.concatenate([x, np.repeat(special, len(special)), [41.0, 82.0, 1.0, 49.0]]).astype(dtype)
    ys = np.concatenate([y, np.tile(special, len(special)), [41.0, 41.0, 3.0, 49.0]]).astype(dtype)
    return xs, ys


@pytest.mark.parametrize("device", ["CPU", "LLVM", "PYTHON"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_is_rounded_once(device, dtype):
    # where the device's division is IEEE's (`Capabilities.exact_division`), x / y is numpy's bit for bit: 41 / 41
    # was 0.99999994 as x * (1 / y); signed zeros, infinities, NaN and subnormal divisors included
    x, y = _division_operands(dtype)
    if device == "PYTHON":
        x, y = x[-120:], y[-120:]  # (the reference interpreter: a few elements)
    with np.errstate(all="ignore"):
        want = x / y
    got = (Tensor(x, device=device) / Tensor(y, device=device)).numpy()
    np.testing.assert_array_equal(got, want)
    numbers = ~np.isnan(want)  # (a NaN's sign bit means nothing: x86 makes 0 / 0 negative, Python positive)
    assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


def test_division_without_exact_hardware_division_stays_within_two_ulp():
    # the template device renders no FDIV: the lowerer's x * (1 / y), tiny and huge divisors scaled first (3e38 /
    # 3e38 was 4 ulp off: its reciprocal subnormal)
    from lazy.plugins import Device

    if "TMPL" not in Device.specs():
        pytest.skip("the template plugin (TMPL) is not installed")
    x, y = _division_operands(np.float32)
    rng = np.random.default_rng(5)
    big = np.finfo(np.float32).max
    x = np.concatenate([x, (rng.random(3000) * big).astype(np.float32)])
    y = np.concatenate([y, (rng.random(3000) * big).astype(np.float32)])
    with np.errstate(all="ignore"):
        want = x / y
    got = (Tensor(x, device="TMPL") / Tensor(y, device="TMPL")).numpy()
    finite = np.isfinite(want) & (np.abs(want) > np.finfo(np.float32).tiny)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]))
    assert ulps.max() <= 2
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)] == 0, want[~finite & ~np.isnan(want)] == 0)
    assert np.isnan(got[np.isnan(want)]).all()


def test_division_gradients():
    a, b = Tensor([3.0, 5.0, -1.0], requires_grad=True), Tensor([2.0, -4.0, 1e-20], requires_grad=True)
    (a / b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.5, -0.25, 1e20], rtol=1e-6)
    # -x / y^2, as -(x / y) / y: 1e40 would overflow float32 as y * y (1e-40 is subnormal), not as a quotient
    np.testing.assert_allclose(b.grad.numpy(), [-0.75, -0.3125, np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", ["mod", "fmod"])
def test_remainder_gradients_where_the_remainder_is_zero(op):
    # 1 for x and -q for y everywhere (PyTorch's); a zero remainder (any integer-valued x over 1) had 0 and 0
    x = Tensor([3.0, 2.5, -3.0, -6.0], requires_grad=True)
    y = Tensor([1.0, 1.0, 1.5, 3.0], requires_grad=True)
    out = x % y if op == "mod" else x.fmod(y)
    gx, gy = out.sum().gradient(x, y)
    np.testing.assert_array_equal(gx.numpy(), [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gy.numpy(), [-3.0, -2.0, 2.0, 2.0])
    assert np.signbit(out.numpy()).tolist() == [False, False, True, True]  # (the dividend's sign, as PyTorch's)


def test_truncating_division_of_infinities():
    inf = float("inf")
    got = Tensor([inf, -inf, 5.0]).div(Tensor([-4.0, 2.0, 2.0]), rounding_mode="trunc").numpy()
    np.testing.assert_array_equal(got, [-inf, -inf, 2.0])


def test_in_place_operators_refuse_a_result_of_another_kind():
    # int += 1.7 truncated silently; PyTorch refuses it, and so does lazy now (same-kind narrowing still casts)
    a = Tensor([1, 2], dtype=dtypes.int32).contiguous().realize()
    for op in ("a += 1.7", "a /= 2", "a *= Tensor([1.5, 2.0])"):
        with pytest.raises(TypeError, match="cannot hold"):
            exec(op)
    a += 3
    assert a.numpy().tolist() == [4, 5] and a.dtype == dtypes.int32
    b = Tensor([1.0, 2.0]).contiguous().realize()
    b += Tensor([1.0, 1.0], dtype=dtypes.float64)
    assert b.dtype == dtypes.float32 and b.numpy().tolist() == [2.0, 3.0]
    c = Tensor([True, False]).contiguous().realize()
    with pytest.raises(TypeError, match="bool tensor"):
        c += 1
    c |= Tensor([False, True])
    assert c.numpy().tolist() == [True, True]


def test_python_ints_beyond_64_bits():
    # they wrapped silently into integer tensors (int64 + 2**64 gave the tensor unchanged); PyTorch refuses them
    with pytest.raises(OverflowError, match="64 bits"):
        Tensor([1], dtype=dtypes.int64) + 2**64
    assert (Tensor([1.0]) * 2**70).item() == float(2**70)  # (a float tensor takes it as a float)
    assert (Tensor([3], dtype=dtypes.uint8) + 300).item() == 47  # (within 64 bits: wraps to the dtype, as PyTorch)


def test_floor_division_gradient_is_zero():
    # 0 everywhere (PyTorch's // has none); a zero divisor's 1 / 0 and a zero quotient under an infinite upstream
    # gradient made it NaN
    x, y = Tensor([1.0, 0.0, -2.0, 7.0], requires_grad=True), Tensor([0.0, 0.0, 0.0, 2.0], requires_grad=True)
    (x // y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0] * 4)
    np.testing.assert_array_equal(y.grad.numpy(), [0.0] * 4)
    z = Tensor([0.5, 3.0], requires_grad=True)
    (z // 2).sqrt().sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [0.0, 0.0])

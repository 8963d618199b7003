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
                         (x + scalar, t + scalar), (x - scalar, t - scalar)):  # fmt: skip
        got, want = ours.cast(dtypes.float32).numpy(), theirs.float().numpy()
        np.testing.assert_array_equal(got, want)
    # (x / scalar rounds the float32 quotient once; PyTorch's float32 division is exact, lazy's within an ulp)
    np.testing.assert_allclose((x / scalar).cast(dtypes.float32).numpy(), (t / scalar).float().numpy(), rtol=8e-3)
    assert (Tensor([1000.0, 2.0], dtype=dt) / 1e5).numpy().min() > 0


@pytest.mark.parametrize("op", [lambda b: b // b, lambda b: b % b, lambda b: b.fmod(b),
                                lambda b: b.div(b, rounding_mode="floor")])  # fmt: skip
def test_bool_division_is_refused(op):
    with pytest.raises(TypeError, match="bool tensors"):
        op(Tensor([True, False]))
    assert (Tensor([True, False]) // 2).numpy().tolist() == [0, 0]  # (a bool with an int is an int op)

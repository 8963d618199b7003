"""Tensor ops against numpy on the PYTHON reference device: values, shapes, broadcasting and result dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lazy
from lazy import Context, Tensor, dtypes
from lazy.dtype import to_np_dtype
from lazy.ops import Ops

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def rnd(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def close(t: Tensor, expected: object, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = np.asarray(expected)
    got = t.numpy()
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def equal(t: Tensor, expected: object) -> None:
    expected = np.asarray(expected)
    got = t.numpy()
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    np.testing.assert_array_equal(got, expected)


# -- creation ----------------------------------------------------------------------------------------------------------


def test_creation_from_list_and_numpy():
    t = Tensor([[1.5, 2.0], [3.0, -4.0]])
    assert t.shape == (2, 2) and t.dtype == dtypes.float32 and t.device == "PYTHON"
    equal(t, [[1.5, 2.0], [3.0, -4.0]])
    assert Tensor([1, 2, 3]).dtype == dtypes.int32
    assert Tensor([True, False]).dtype == dtypes.bool
    for np_dtype, dtype in [(np.float32, dtypes.float32), (np.int64, dtypes.int64), (np.uint8, dtypes.uint8),
                            (np.int16, dtypes.int16), (np.float64, dtypes.float64)]:  # fmt: skip
        arr = np.arange(6, dtype=np_dtype).reshape(2, 3)
        t = Tensor(arr)
        assert t.dtype == dtype
        equal(t, arr)
    assert Tensor([1, 2], dtype=dtypes.float32).dtype == dtypes.float32


def test_creation_helpers():
    equal(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32))
    equal(Tensor.ones((3,)), np.ones(3, np.float32))
    equal(Tensor.full((2, 2), 7), np.full((2, 2), 7))
    assert Tensor.full((2, 2), 7).dtype == dtypes.int32
    assert Tensor.full((2,), 2.5).dtype == dtypes.float32
    equal(Tensor.arange(5), np.arange(5))
    assert Tensor.arange(5).dtype == dtypes.int32
    equal(Tensor.arange(2, 11, 3), np.arange(2, 11, 3))
    equal(Tensor.arange(5, 0, -2), np.arange(5, 0, -2))
    close(Tensor.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25))
    assert Tensor.arange(0.0, 1.0, 0.25).dtype == dtypes.float32
    equal(Tensor.eye(3), np.eye(3, dtype=np.float32))
    equal(Tensor.eye(2, 4), np.eye(2, 4, dtype=np.float32))
    x = Tensor([[1, 2, 3]])
    equal(x.full_like(4), np.full((1, 3), 4))
    equal(x.zeros_like(), np.zeros((1, 3), np.int32))
    equal(x.ones_like(), np.ones((1, 3), np.int32))
    assert x.zeros_like().dtype == dtypes.int32


# -- elementwise math --------------------------------------------------------------------------------------------------

UNARY = {
    "neg": (lambda t: -t, lambda a: -a, None),
    "reciprocal": (Tensor.reciprocal, lambda a: 1 / a, "nonzero"),
    "sqrt": (Tensor.sqrt, np.sqrt, "positive"),
    "rsqrt": (Tensor.rsqrt, lambda a: 1 / np.sqrt(a), "positive"),
    "exp": (Tensor.exp, np.exp, None),
    "exp2": (Tensor.exp2, np.exp2, None),
    "log": (Tensor.log, np.log, "positive"),
    "log2": (Tensor.log2, np.log2, "positive"),
    "sin": (Tensor.sin, np.sin, None),
    "cos": (Tensor.cos, np.cos, None),
    "tan": (Tensor.tan, np.tan, None),
    "relu": (Tensor.relu, lambda a: np.maximum(a, 0), None),
    "sigmoid": (Tensor.sigmoid, lambda a: 1 / (1 + np.exp(-a)), None),
    "tanh": (Tensor.tanh, np.tanh, None),
    "silu": (Tensor.silu, lambda a: a / (1 + np.exp(-a)), None),
    "gelu": (Tensor.gelu, lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))), None),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda a: np.where(a > 0, a, 0.1 * a), None),
    "elu": (Tensor.elu, lambda a: np.where(a > 0, a, np.exp(a) - 1), None),
    "softplus": (Tensor.softplus, lambda a: np.log1p(np.exp(a)), None),
    "abs": (Tensor.abs, np.abs, None),
    "sign": (Tensor.sign, np.sign, None),
    "square": (Tensor.square, np.square, None),
    "trunc": (Tensor.trunc, np.trunc, None),
    "floor": (Tensor.floor, np.floor, None),
    "ceil": (Tensor.ceil, np.ceil, None),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name):
    fn, ref, domain = UNARY[name]
    a = rnd(2, 5, low=-3, high=3)
    if domain == "positive":
        a = np.abs(a) + 0.1
    elif domain == "nonzero":
        a = np.where(np.abs(a) < 0.1, 0.5, a).astype(np.float32)
    out = fn(Tensor(a))
    assert out.dtype == dtypes.float32
    close(out, ref(a.astype(np.float64)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["trunc", "floor", "ceil", "round"])
def test_rounding_of_huge_and_special_floats(name):
    a = np.array([1e20, -3e19, np.inf, -np.inf, np.nan, -2.5], np.float32)
    close(getattr(Tensor(a), name)(), getattr(np, name)(a))


def test_round_half_to_even():
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6, 3.7], np.float32)
    equal(Tensor(a).round(), np.round(a))


def test_unary_on_int_promotes_to_float():
    a = np.array([1, 4, 9], np.int32)
    out = Tensor(a).sqrt()
    assert out.dtype == dtypes.float32
    close(out, np.sqrt(a))
    assert Tensor(a).exp().dtype == dtypes.float32
    assert (-Tensor(a)).dtype == dtypes.int32
    equal(-Tensor(a), -a)
    equal(Tensor(np.array([-3, 0, 2], np.int32)).abs(), [3, 0, 2])


def test_special_values():
    a = np.array([0.0, -0.0, 1.0, -1.0], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        close(Tensor(a).log(), np.log(a))
        close(Tensor(a).reciprocal(), 1 / a)
    close(Tensor([np.inf, -np.inf, 100.0]).exp(), np.exp(np.array([np.inf, -np.inf, 100.0], np.float32)))
    close(Tensor([-100.0, 100.0]).sigmoid(), [0.0, 1.0])


BINARY = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
    "div": (lambda x, y: x / y, np.divide),
    "maximum": (lambda x, y: x.maximum(y), np.maximum),
    "minimum": (lambda x, y: x.minimum(y), np.minimum),
}
BROADCAST_SHAPES = [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((), (2, 3)),
                    ((2, 3), ()), ((2, 1, 4), (3, 1)), ((1,), (5,))]  # fmt: skip


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_broadcast(name, shapes):
    fn, ref = BINARY[name]
    a, b = rnd(*shapes[0]), rnd(*shapes[1])
    if name == "div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    out = fn(Tensor(a), Tensor(b))
    assert out.dtype == dtypes.float32
    close(out, ref(a, b), rtol=1e-5)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
def test_python_scalar_both_sides(name):
    a = rnd(2, 3, low=0.5, high=2.0)
    t = Tensor(a)
    fwd = {"add": (t + 3, a + 3), "sub": (t - 3, a - 3), "mul": (t * 3, a * 3), "div": (t / 4, a / 4),
           "pow": (t**2.5, a**2.5), "maximum": (t.maximum(1.0), np.maximum(a, 1.0)),
           "minimum": (t.minimum(1.0), np.minimum(a, 1.0))}  # fmt: skip
    out, expected = fwd[name]
    close(out, expected, rtol=1e-5)
    assert out.dtype == dtypes.float32
    rev = {"add": (3 + t, 3 + a), "sub": (3 - t, 3 - a), "mul": (3 * t, 3 * a), "div": (4 / t, 4 / a),
           "pow": (2.5**t, 2.5**a)}  # fmt: skip
    if name in rev:
        out, expected = rev[name]
        close(out, expected, rtol=1e-5)
        assert out.dtype == dtypes.float32


def test_reflected_ops_with_tensor_left_operand_order():
    a, b = np.array([1.0, 2.0, 8.0], np.float32), np.array([4.0, 3.0, 2.0], np.float32)
    ta, tb = Tensor(a), Tensor(b)
    close(ta.sub(tb, reverse=True), b - a)
    close(ta.div(tb, reverse=True), b / a)
    close(ta.pow(tb, reverse=True), b**a)
    close(ta.add(5, reverse=True), 5 + a)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, -1, -2, 2.5, -0.5])
def test_pow_scalar_exponents(exponent):
    a = np.array([0.5, 1.0, 2.0, 3.0], np.float32)
    close(Tensor(a) ** exponent, a.astype(np.float64) ** exponent, rtol=1e-5)


def test_pow_negative_base():
    a = np.array([-2.0, -3.0, 2.0], np.float32)
    close(Tensor(a) ** Tensor([3.0, 2.0, 2.0]), np.array([-8.0, 9.0, 4.0]), rtol=1e-5)
    close(Tensor(a).pow(3), a**3)
    out = (Tensor(a) ** 0.5).numpy()
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isclose(out[2], math.sqrt(2))


def test_int_pow():
    a = np.array([1, 2, 3, -2], np.int32)
    out = Tensor(a) ** 3
    assert out.dtype == dtypes.int32
    equal(out, a**3)


def test_int_pow_dtype_does_not_depend_on_the_exponent_value():
    a = np.array([1, 2, 3, -2], np.int32)
    out = Tensor(a) ** 9  # torch: int tensor ** python int stays an int tensor
    assert out.dtype == dtypes.int32
    equal(out, a**9)
    out = 2 ** Tensor([1, 3])  # torch: 2 ** torch.tensor([1, 3]) -> tensor([2, 8]), an int tensor
    assert out.dtype == dtypes.int32
    equal(out, [2, 8])


def test_pow_zero_base():
    out = Tensor([0.0, 0.0, 0.0, 2.0]) ** Tensor([0.0, 2.0, 0.5, 0.0])
    close(out, [1.0, 0.0, 0.0, 1.0])  # numpy and torch: 0**0 == 1
    close(Tensor([0.0]) ** 0.0, [1.0])


def test_clip():
    a = rnd(3, 4)
    close(Tensor(a).clip(-0.5, 0.5), np.clip(a, -0.5, 0.5))
    close(Tensor(a).clip(min_=0.0), np.maximum(a, 0.0))
    close(Tensor(a).clip(max_=0.0), np.minimum(a, 0.0))


# -- dtype promotion ---------------------------------------------------------------------------------------------------

PROMOTIONS = [
    (dtypes.int32, dtypes.float32, dtypes.float32),
    (dtypes.int8, dtypes.uint8, dtypes.int16),
    (dtypes.uint8, dtypes.int8, dtypes.int16),
    (dtypes.int32, dtypes.int64, dtypes.int64),
    (dtypes.bool, dtypes.int32, dtypes.int32),
    (dtypes.bool, dtypes.float32, dtypes.float32),
    (dtypes.float16, dtypes.float32, dtypes.float32),
    (dtypes.int64, dtypes.float16, dtypes.float16),
    (dtypes.uint8, dtypes.int16, dtypes.int16),
    (dtypes.uint32, dtypes.int32, dtypes.int64),
]


@pytest.mark.parametrize("left,right,expected", PROMOTIONS, ids=str)
def test_binary_dtype_promotion(left, right, expected):
    x = Tensor([1, 0, 1], dtype=left)
    y = Tensor([1, 1, 0], dtype=right)
    for out in (x + y, y + x, x * y):
        assert out.dtype == expected
    equal(x + y, np.array([2, 1, 1]).astype(to_np_dtype(expected)))


def test_int8_plus_uint8_values():
    x = Tensor(np.array([-128, 127, 5], np.int8))
    y = Tensor(np.array([255, 255, 250], np.uint8))
    out = x + y
    assert out.dtype == dtypes.int16
    equal(out, np.array([127, 382, 255], np.int16))


def test_bool_plus_bool():
    x, y = Tensor([True, True, False, False]), Tensor([True, False, True, False])
    out = x + y
    assert out.dtype == dtypes.bool
    equal(out, [True, True, True, False])  # torch: logical or
    out = x * y
    assert out.dtype == dtypes.bool
    equal(out, [True, False, False, False])


def test_python_scalar_promotion():
    i = Tensor([1, 2, 3])
    assert (i + 1).dtype == dtypes.int32 and (1 + i).dtype == dtypes.int32
    assert (i + 1.5).dtype == dtypes.float32 and (1.5 + i).dtype == dtypes.float32
    close(i + 1.5, [2.5, 3.5, 4.5])
    close(1.5 - i, [0.5, -0.5, -1.5])
    assert (i * True).dtype == dtypes.int32
    h = Tensor([1.0, 2.0], dtype=dtypes.float16)
    assert (h + 1.5).dtype == dtypes.float16 and (h * 2).dtype == dtypes.float16
    u = Tensor([1, 2], dtype=dtypes.uint8)
    assert (u + 1).dtype == dtypes.uint8
    b = Tensor([True, False])
    assert (b + 1).dtype == dtypes.int32
    equal(b + 1, [2, 1])
    assert (b * 1.5).dtype == dtypes.float32
    close(b * 1.5, [1.5, 0.0])


def test_numpy_scalar_operand_promotes_like_torch():
    out = Tensor([1, 2]) + np.float32(0.5)  # torch.tensor([1, 2]) + np.float32(0.5) -> tensor([1.5, 2.5])
    assert out.dtype == dtypes.float32
    close(out, [1.5, 2.5])


def test_int_true_division_is_float():
    out = Tensor([7, -7, 1]) / Tensor([2, 2, 4])
    assert out.dtype == dtypes.float32
    close(out, [3.5, -3.5, 0.25])
    out = Tensor([7, -7]) / 2
    assert out.dtype == dtypes.float32
    close(out, [3.5, -3.5])
    close(1 / Tensor([2, 4]), [0.5, 0.25])


def test_comparisons():
    a, b = rnd(3, 4), rnd(4)
    b[1] = a[0, 1]  # one tie
    ta, tb = Tensor(a), Tensor(b)
    for out, ref in [(ta < tb, a < b), (ta > tb, a > b), (ta <= tb, a <= b), (ta >= tb, a >= b), (ta == tb, a == b),
                     (ta != tb, a != b), (ta < 0.5, a < 0.5), (0.5 < ta, 0.5 < a), (ta >= 0, a >= 0)]:  # fmt: skip
        assert out.dtype == dtypes.bool
        equal(out, ref)
    i = Tensor([1, 2, 3])
    equal(i < 2.5, [True, True, False])
    equal(i == 2, [False, True, False])


def test_where():
    a, b = rnd(2, 3), rnd(3)
    cond = a > 0
    equal(Tensor(a).gt(0).where(Tensor(a), Tensor(b)), np.where(cond, a, b))
    equal(Tensor(a).gt(0).where(Tensor(a), 0.0), np.where(cond, a, 0.0))
    equal(Tensor(a).gt(0).where(1.0, Tensor(b)), np.where(cond, 1.0, b))
    out = Tensor(a).gt(0).where(1, 0)
    equal(out, np.where(cond, 1, 0))
    assert out.dtype == dtypes.int32
    # condition broadcast against the branches
    equal(Tensor([True, False, True]).where(Tensor(a), Tensor(b)), np.where([True, False, True], a, b))
    # an int tensor as a condition: nonzero is true
    equal(Tensor([0, 2, -1]).where(1.0, 2.0), [2.0, 1.0, 1.0])


def test_cast():
    a = np.array([-2.7, -0.5, 0.0, 0.5, 1.9, 3.0], np.float32)
    t = Tensor(a)
    equal(t.cast(dtypes.int32), a.astype(np.int32))  # truncates toward zero, like C and torch
    equal(t.cast(dtypes.bool), a.astype(bool))
    close(t.cast(dtypes.float16), a.astype(np.float16), rtol=1e-3)
    close(t.cast(dtypes.float64), a.astype(np.float64))
    equal(Tensor([True, False]).cast(dtypes.float32), [1.0, 0.0])
    equal(Tensor([3, -1]).float(), [3.0, -1.0])
    equal(Tensor(np.array([300, 255, 1], np.int32)).cast(dtypes.uint8), np.array([300, 255, 1]).astype(np.uint8))
    assert t.int().dtype == dtypes.int32 and t.long().dtype == dtypes.int64 and t.half().dtype == dtypes.float16
    equal(Tensor(np.array([1.0], np.float32)).bitcast(dtypes.int32), np.array([1.0], np.float32).view(np.int32))


def test_bitwise_and_logical():
    a, b = np.array([0b1100, 7, -1], np.int32), np.array([0b1010, 1, 5], np.int32)
    equal(Tensor(a) & Tensor(b), a & b)
    equal(Tensor(a) | Tensor(b), a | b)
    equal(Tensor(a) ^ Tensor(b), a ^ b)
    equal(Tensor(a) << 2, a << 2)
    equal(~Tensor(a), ~a)
    x, y = Tensor([True, True, False]), Tensor([True, False, False])
    equal(x & y, [True, False, False])
    equal(x | y, [True, True, False])
    equal(x.logical_not(), [False, False, True])


# -- integer division --------------------------------------------------------------------------------------------------

INT_PAIRS = [(a, b) for a in (-7, -6, -1, 0, 1, 6, 7) for b in (-3, -2, 2, 3)]


def test_floordiv_and_mod_match_python():
    a = np.array([p[0] for p in INT_PAIRS], np.int32)
    b = np.array([p[1] for p in INT_PAIRS], np.int32)
    q, r = Tensor(a) // Tensor(b), Tensor(a) % Tensor(b)
    assert q.dtype == dtypes.int32 and r.dtype == dtypes.int32
    assert q.tolist() == [x // y for x, y in INT_PAIRS]
    assert r.tolist() == [x % y for x, y in INT_PAIRS]


def test_floordiv_mod_python_scalars_both_sides():
    vals = [-7, -6, -1, 0, 1, 6, 7]
    t = Tensor(vals)
    assert (t // 3).tolist() == [v // 3 for v in vals]
    assert (t // -3).tolist() == [v // -3 for v in vals]
    assert (t % 3).tolist() == [v % 3 for v in vals]
    assert (t % -3).tolist() == [v % -3 for v in vals]
    nz = [-7, -2, -1, 1, 3, 8]
    d = Tensor(nz)
    assert (7 // d).tolist() == [7 // v for v in nz]
    assert (-7 // d).tolist() == [-7 // v for v in nz]
    assert (7 % d).tolist() == [7 % v for v in nz]
    assert (-7 % d).tolist() == [-7 % v for v in nz]


def test_idiv_truncates_toward_zero():
    a = np.array([p[0] for p in INT_PAIRS], np.int32)
    b = np.array([p[1] for p in INT_PAIRS], np.int32)
    equal(Tensor(a).idiv(Tensor(b)), np.trunc(a / b).astype(np.int32))
    equal(Tensor(a).div(Tensor(b), rounding_mode="trunc"), np.trunc(a / b).astype(np.int32))
    equal(Tensor(a).div(Tensor(b), rounding_mode="floor"), a // b)


def test_float_floordiv_and_mod():
    a = np.array([-7.5, -6.0, -0.5, 0.5, 6.0, 7.5], np.float32)
    b = np.array([2.0, -2.0, 2.0, -2.0, 4.0, -4.0], np.float32)
    close(Tensor(a) // Tensor(b), np.floor_divide(a, b))
    close(Tensor(a) % Tensor(b), np.mod(a, b))
    close(Tensor(a) % 2.0, np.mod(a, 2.0))


def test_int64_and_int8_floordiv():
    a = np.array([-7, 7, -8], np.int64)
    equal(Tensor(a) // Tensor(np.array([2, -2, 3], np.int64)), a // np.array([2, -2, 3]))
    c = np.array([-128, 127, -5], np.int8)
    out = Tensor(c) // Tensor(np.array([3, -3, 2], np.int8))
    assert out.dtype == dtypes.int8
    equal(out, c // np.array([3, -3, 2], np.int8))


# -- reductions --------------------------------------------------------------------------------------------------------

REDUCE_AXES = [None, 0, 1, -1, (0, 2), (0, 1, 2)]


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce(op, axis, keepdim):
    a = rnd(2, 3, 4)
    out = getattr(Tensor(a), op)(axis, keepdim)
    assert out.dtype == dtypes.float32
    close(out, getattr(np, op if op in ("sum", "mean") else "a" + op)(a, axis=axis, keepdims=keepdim), rtol=1e-5)


def test_sum_dtypes_follow_tinygrad():
    # tinygrad (which lazy follows where it differs from torch): ints and bool accumulate in at least int32,
    # unsigned ints in at least uint32, half and bfloat16 in float32 and come back in their own dtype
    i = Tensor(np.array([[1, 2], [3, 4]], np.int32))
    assert i.sum().dtype == dtypes.int32 and i.sum(0).dtype == dtypes.int32
    equal(i.sum(0), [4, 6])
    assert Tensor(np.array([100, 100], np.int8)).sum().dtype == dtypes.int32
    assert Tensor(np.array([100, 100], np.int8)).sum().item() == 200  # no int8 overflow
    assert Tensor(np.array([1, 2], np.int64)).sum().dtype == dtypes.int64
    assert Tensor([True, True, False]).sum().dtype == dtypes.int32
    assert Tensor([True, True, False]).sum().item() == 2
    assert Tensor([1.0, 2.0]).sum().dtype == dtypes.float32
    assert Tensor([1.0, 2.0], dtype=dtypes.float16).sum().dtype == dtypes.float16


def test_sum_of_uint8_accumulates_in_uint32():
    out = Tensor(np.array([200, 100], np.uint8)).sum()
    assert out.item() == 300
    assert out.dtype == dtypes.uint32


def test_mean_of_int_is_float32():
    out = Tensor([[1, 2], [3, 5]]).mean()
    assert out.dtype == dtypes.float32
    assert out.item() == pytest.approx(2.75)
    out = Tensor([[1, 2], [3, 5]]).mean(1)
    assert out.dtype == dtypes.float32
    close(out, [1.5, 4.0])
    assert Tensor([True, False, False, False]).mean().item() == pytest.approx(0.25)


def test_int_min_with_the_most_negative_value():
    a = np.array([-128, 5, 3], np.int8)
    equal(Tensor(a).min(), np.int8(-128))
    equal(Tensor(a).argmin(), 0)
    equal(Tensor(a).minimum(0), np.minimum(a, 0))
    b = np.array([5, -(2**31)], np.int32)
    equal(Tensor(b).min(), np.int32(-(2**31)))


def test_argmax_with_nan_is_in_range():
    idx = Tensor([1.0, float("nan"), 2.0]).argmax().item()
    assert idx == 1  # torch and numpy: the NaN's index


def test_int_max_min():
    a = np.array([[3, -5, 7], [-2, 9, 0]], np.int32)
    equal(Tensor(a).max(1), a.max(1))
    equal(Tensor(a).min(0), a.min(0))
    assert Tensor(a).max().dtype == dtypes.int32
    u = np.array([3, 250, 0], np.uint8)
    equal(Tensor(u).min(), np.uint8(0))
    equal(Tensor(u).max(), np.uint8(250))


def test_bool_max_min():
    equal(Tensor([True, False]).max(), True)
    equal(Tensor([True, False]).min(), False)  # torch.tensor([True, False]).min() -> tensor(False)
    equal(Tensor([[True, True], [False, True]]).min(1), [True, False])


def test_any_all():
    a = np.array([[0, 1, 0], [0, 0, 0]], np.int32)
    equal(Tensor(a).any(1), a.any(1))
    equal(Tensor(a).all(), a.all())
    equal(Tensor([True, True]).all(), True)


def test_argmax_argmin():
    a = rnd(3, 5)
    equal(Tensor(a).argmax(), np.argmax(a))
    equal(Tensor(a).argmax(1), np.argmax(a, 1))
    equal(Tensor(a).argmax(0), np.argmax(a, 0))
    equal(Tensor(a).argmin(1), np.argmin(a, 1))
    equal(Tensor(a).argmax(1, keepdim=True), np.argmax(a, 1)[:, None])
    equal(Tensor(a).argmax(-1), np.argmax(a, -1))


def test_argmax_ties_first_index():
    a = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, 0, 0, 5], [7, 1, 7, 7]], np.float32)
    equal(Tensor(a).argmax(1), [1, 0, 3, 0])
    equal(Tensor(a).argmax(0), [3, 0, 3, 3])
    equal(Tensor(a).argmin(1), [3, 0, 0, 1])
    equal(Tensor(a).argmax(), 12)  # first of the two 7s in row-major order
    equal(Tensor([5, 5, 5]).argmax(), 0)


def test_softmax_log_softmax():
    a = rnd(3, 5)
    e = np.exp(a - a.max(-1, keepdims=True))
    close(Tensor(a).softmax(), e / e.sum(-1, keepdims=True), rtol=1e-5)
    e0 = np.exp(a - a.max(0, keepdims=True))
    close(Tensor(a).softmax(0), e0 / e0.sum(0, keepdims=True), rtol=1e-5)
    a64 = a.astype(np.float64)
    ls = a64 - a64.max(-1, keepdims=True)
    close(Tensor(a).log_softmax(), ls - np.log(np.exp(ls).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_softmax_numerics_on_large_inputs():
    a = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0], [1e30, 0.0, -1e30]], np.float32)
    a64 = a.astype(np.float64)
    e = np.exp(a64 - a64.max(-1, keepdims=True))
    sm = Tensor(a).softmax().numpy()
    assert np.all(np.isfinite(sm))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    ls = Tensor(a).log_softmax().numpy()
    ref = (a64 - a64.max(-1, keepdims=True)) - np.log(e.sum(-1, keepdims=True))
    assert np.all(np.isfinite(ls))
    np.testing.assert_allclose(ls, ref, rtol=1e-5, atol=1e-5)


def test_activations_on_large_inputs():
    a = np.array([-1000.0, -100.0, 100.0, 1000.0], np.float32)
    close(Tensor(a).sigmoid(), [0.0, 0.0, 1.0, 1.0])
    close(Tensor(a).tanh(), [-1.0, -1.0, 1.0, 1.0])
    close(Tensor(a).softplus(), [0.0, 0.0, 100.0, 1000.0])  # torch.nn.functional.softplus: x above threshold 20


def test_logsumexp():
    a = np.array([[1000.0, 1000.0], [1.0, 2.0]], np.float32)
    close(Tensor(a).logsumexp(1), np.logaddexp(a[:, 0].astype(np.float64), a[:, 1]), rtol=1e-6)


def test_var_std():
    a = rnd(3, 4)
    close(Tensor(a).var(1), a.var(1, ddof=1), rtol=1e-5)
    close(Tensor(a).std(), a.std(ddof=1), rtol=1e-5)
    close(Tensor(a).var(0, correction=0), a.var(0), rtol=1e-5)


# -- movement ----------------------------------------------------------------------------------------------------------


def test_reshape_permute_transpose_expand():
    a = rnd(2, 3, 4)
    t = Tensor(a)
    equal(t.reshape(6, 4), a.reshape(6, 4))
    equal(t.reshape((4, -1)), a.reshape(4, -1))
    equal(t.reshape(-1), a.reshape(-1))
    equal(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    equal(t.permute((1, 2, 0)), a.transpose(1, 2, 0))
    equal(t.transpose(0, 2), a.swapaxes(0, 2))
    equal(t.transpose(-1, -2), a.swapaxes(-1, -2))
    equal(Tensor(a[0]).T, a[0].T)
    b = rnd(3, 1)
    equal(Tensor(b).expand(2, 3, 4), np.broadcast_to(b, (2, 3, 4)))
    equal(Tensor(b).expand(-1, 5), np.broadcast_to(b, (3, 5)))
    equal(t.flatten(), a.flatten())
    equal(t.flatten(1), a.reshape(2, 12))
    equal(t.unsqueeze(1), a[:, None])
    equal(t.unsqueeze(-1), a[..., None])
    equal(Tensor(b).squeeze(), b.squeeze())
    equal(Tensor(b).squeeze(1), b.squeeze(1))
    # a movement of a movement, then math: views compose
    equal(t.permute(2, 0, 1).reshape(4, 6).T + 1, a.transpose(2, 0, 1).reshape(4, 6).T + 1)


SLICES = [
    (slice(None, None, 2),),
    (slice(None, None, -1),),
    (slice(None, None, -2),),
    (slice(5, 1, -1),),
    (slice(5, 0, -3),),
    (slice(1, None, 3),),
    (slice(-3, None),),
    (slice(None, -2),),
    (slice(-1, -5, -2),),
    (slice(4, 2),),  # empty
    (slice(10, 20),),  # out of range: empty
    (1,),
    (-1,),
    (slice(None), 2),
    (slice(None), slice(None, None, -1)),
    (Ellipsis, 1),
    (Ellipsis, slice(None, None, -2)),
    (None,),
    (None, slice(1, 3), None, Ellipsis),
    (slice(1, None, 2), None, slice(None, None, -2)),
    (Ellipsis, None),
    (-2, -3),
    (),
]


@pytest.mark.parametrize("index", SLICES, ids=str)
def test_slicing(index):
    a = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    equal(Tensor(a)[index], a[index])


def test_slicing_3d():
    a = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    t = Tensor(a)
    for index in [(1, ..., 2), (..., -1), (slice(None), None, 1), (-1, slice(None, None, -1), slice(None, None, 3)),
                  (0, 0, 0), (None, ..., None)]:  # fmt: skip
        equal(t[index], a[index])
    assert t[0, 0, 0].shape == ()
    assert t[1, 2, 3].item() == 23


def test_pad():
    a = rnd(2, 3)
    t = Tensor(a)
    equal(t.pad(((1, 2), (0, 1))), np.pad(a, ((1, 2), (0, 1))))
    equal(t.pad(((1, 0), (2, 2)), value=-5.0), np.pad(a, ((1, 0), (2, 2)), constant_values=-5.0))
    equal(t.pad((1, 2)), np.pad(a, ((0, 0), (1, 2))))  # torch style: last axis first
    equal(t.pad((1, 2, 3, 0), value=1.5), np.pad(a, ((3, 0), (1, 2)), constant_values=1.5))
    equal(t.pad((None, (1, 1))), np.pad(a, ((0, 0), (1, 1))))
    equal(t.pad(((-1, 1), (0, -1))), np.pad(a[1:, :-1], ((0, 1), (0, 0))))
    i = Tensor(np.array([1, 2], np.int32)).pad(((2, 1),), value=7)
    assert i.dtype == dtypes.int32
    equal(i, [7, 7, 1, 2, 7])


def test_flip():
    a = rnd(2, 3, 4)
    equal(Tensor(a).flip(0), np.flip(a, 0))
    equal(Tensor(a).flip(-1), np.flip(a, -1))
    equal(Tensor(a).flip((0, 2)), np.flip(a, (0, 2)))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_each_axis(dim):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    shapes[1][dim] = 1
    shapes[2][dim] = 2
    arrs = [rnd(*s) for s in shapes]
    out = Tensor(arrs[0]).cat(Tensor(arrs[1]), Tensor(arrs[2]), dim=dim)
    equal(out, np.concatenate(arrs, axis=dim))
    equal(Tensor.cat(Tensor(arrs[0]), Tensor(arrs[0]), dim=dim), np.concatenate([arrs[0]] * 2, axis=dim))


def test_cat_promotes_dtypes():
    out = Tensor([1, 2]).cat(Tensor([0.5]))
    assert out.dtype == dtypes.float32
    equal(out, [1.0, 2.0, 0.5])


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack_each_axis(dim):
    arrs = [rnd(2, 3) for _ in range(3)]
    equal(Tensor.stack(*[Tensor(a) for a in arrs], dim=dim), np.stack(arrs, axis=dim))
    equal(Tensor.stack([Tensor(a) for a in arrs], dim=dim), np.stack(arrs, axis=dim))


def test_repeat_split_chunk():
    a = rnd(2, 3)
    equal(Tensor(a).repeat(2, 1), np.tile(a, (2, 1)))
    equal(Tensor(a).repeat(1, 2, 2), np.tile(a, (1, 2, 2)))
    parts = Tensor(np.arange(7, dtype=np.float32)).split(3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]
    parts = Tensor(a).split([1, 2], dim=1)
    equal(parts[1], a[:, 1:])
    assert [p.shape for p in Tensor(a).chunk(2, 1)] == [(2, 2), (2, 1)]


# -- matmul ------------------------------------------------------------------------------------------------------------

MATMUL_SHAPES = [((4,), (4,)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 4)),
                 ((2, 2, 3), (3, 4)), ((3,), (2, 3, 4)), ((2, 1, 2, 3), (3, 3, 2)), ((1, 3), (3, 1))]  # fmt: skip


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes):
    a, b = rnd(*shapes[0]), rnd(*shapes[1])
    out = Tensor(a) @ Tensor(b)
    assert out.dtype == dtypes.float32
    close(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    close(Tensor(a).matmul(Tensor(b)), a @ b, rtol=1e-5, atol=1e-5)
    close(Tensor(a).dot(Tensor(b)), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_matmul_int_and_mixed():
    a, b = np.array([[1, 2], [3, 4]], np.int32), np.array([[5, 6], [7, 8]], np.int32)
    out = Tensor(a) @ Tensor(b)
    assert out.dtype == dtypes.int32
    equal(out, a @ b)
    out = Tensor(a) @ Tensor(b.astype(np.float32))
    assert out.dtype == dtypes.float32
    close(out, a @ b)


def test_linear():
    x, w, b = rnd(2, 3), rnd(3, 4), rnd(4)
    close(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w + b, rtol=1e-5, atol=1e-6)


# -- host transfer, devices --------------------------------------------------------------------------------------------


def test_item_and_tolist():
    assert Tensor(3.5).item() == 3.5 and isinstance(Tensor(3.5).item(), float)
    assert Tensor([[7]]).item() == 7 and isinstance(Tensor([[7]]).item(), int)
    assert isinstance(Tensor([True]).item(), bool)
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert Tensor([1.5, -2.0]).tolist() == [1.5, -2.0]
    assert Tensor(2).tolist() == 2
    assert (Tensor([1.0, 2.0, 3.0]).sum()).item() == 6.0
    with pytest.raises(ValueError):
        Tensor([1, 2]).item()


def test_numpy_returns_a_copy_with_the_right_dtype():
    t = Tensor([1, 2, 3], dtype=dtypes.int16)
    arr = t.numpy()
    assert arr.dtype == np.int16
    arr[0] = 100
    assert t.tolist() == [1, 2, 3]
    assert Tensor([1.0], dtype=dtypes.float64).numpy().dtype == np.float64


def test_to_same_device():
    t = Tensor([1.0, 2.0])
    assert t.to("PYTHON") is t
    assert t.to("python") is t
    assert t.to(None).device == "PYTHON"
    equal(t.to("PYTHON") * 2, [2.0, 4.0])


def test_len_and_bool():
    assert len(Tensor([[1, 2, 3]])) == 1
    with pytest.raises(TypeError):
        bool(Tensor([1]))


# -- empty and 0-d tensors ---------------------------------------------------------------------------------------------


def _empty(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.float32))


def test_empty_from_numpy_and_host_transfer():
    e = _empty(0, 3)
    assert e.shape == (0, 3) and e.numel() == 0
    assert e.numpy().shape == (0, 3)
    assert e.tolist() == []
    assert Tensor([]).shape == (0,)
    assert Tensor.empty(0, 2).shape == (0, 2)


def test_empty_full_reduction():
    e = _empty(0, 3)
    equal(e.sum(0), np.zeros(3, np.float32))
    equal(e.sum(), np.float32(0))
    assert np.isnan(e.mean().item())
    equal(Tensor([1.0, 2.0]).cat(_empty(0)), [1.0, 2.0])


EMPTY_CASES = {
    "zeros(0,3)": (lambda: Tensor.zeros(0, 3), np.zeros((0, 3), np.float32)),
    "full((0,),1.0)": (lambda: Tensor.full((0,), 1.0), np.zeros((0,), np.float32)),
    "arange(0)": (lambda: Tensor.arange(0), np.zeros((0,), np.int32)),
    "e+1": (lambda: _empty(0, 3) + 1, np.zeros((0, 3), np.float32)),
    "e*vec": (lambda: _empty(0, 3) * Tensor([1.0, 2.0, 3.0]), np.zeros((0, 3), np.float32)),
    "e.sum(1)": (lambda: _empty(0, 3).sum(1), np.zeros((0,), np.float32)),
    "e.reshape(3,0)": (lambda: _empty(0, 3).reshape(3, 0), np.zeros((3, 0), np.float32)),
    "e.permute(1,0)": (lambda: _empty(0, 3).permute(1, 0), np.zeros((3, 0), np.float32)),
    "(2,0)@(0,3)": (lambda: _empty(2, 0) @ _empty(0, 3), np.zeros((2, 3), np.float32)),
    "t[3:1]": (lambda: Tensor([1.0, 2.0, 3.0, 4.0])[3:1], np.zeros((0,), np.float32)),
}


@pytest.mark.parametrize("case", sorted(EMPTY_CASES))
def test_empty_tensor_ops(case):
    fn, expected = EMPTY_CASES[case]
    out = fn()
    assert out.dtype == dtypes.from_np(expected.dtype)
    equal(out, expected)


@pytest.mark.parametrize("case", sorted(c for c, (_, expected) in EMPTY_CASES.items() if expected.size == 0))
def test_empty_results_run_no_kernel(case):
    """An output without elements only needs its (empty) buffer: nothing is generated, compiled or launched for it.
    A kernel was, and on the CPU its loop split over the cores was called without its bounds (see test_codegen)."""
    out = EMPTY_CASES[case][0]().contiguous()
    assert [si for si in out.schedule() if si.ast.op is Ops.SINK] == []
    assert out.numpy().shape == EMPTY_CASES[case][1].shape


def test_zero_dim_tensors():
    s = Tensor(2.5)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1
    assert s.item() == 2.5
    equal(s * 2, np.float32(5.0))
    equal(s + Tensor([1.0, 2.0]), [3.5, 4.5])
    equal(Tensor([1.0, 2.0]) - s, [-1.5, -0.5])
    equal(s.sum(), np.float32(2.5))
    equal(s.max(), np.float32(2.5))
    equal(s.mean(), np.float32(2.5))
    equal(s.reshape(1, 1), [[2.5]])
    equal(s.expand(3), [2.5, 2.5, 2.5])
    equal(Tensor([4.0, 5.0])[1], np.float32(5.0))
    assert Tensor([4.0, 5.0]).sum().shape == ()
    close(s.exp(), np.exp(2.5))
    equal(Tensor([1.0, 2.0]) @ Tensor([3.0, 4.0]), np.float32(11.0))
    equal(Tensor(3) // Tensor(-2), np.int32(-2))
    assert Tensor(7).dtype == dtypes.int32 and Tensor(True).dtype == dtypes.bool


# -- jit ---------------------------------------------------------------------------------------------------------------


def test_jit_replays_with_new_inputs():
    @lazy.jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        return (x * y + 1).sum(0).realize()

    for i in range(4):
        a, b = rnd(2, 3) + i, rnd(2, 3)
        close(step(Tensor(a), Tensor(b)), (a * b + 1).sum(0), rtol=1e-5)


def test_flip_of_a_reshaped_transpose_reads_the_right_elements():
    # the two-view index divides a numerator that can go negative; C truncation must not round it the wrong way
    w = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 1, 2)
    t = Tensor(w).transpose(1, 2).reshape(4, 4)
    expected = w.transpose(0, 2, 1, 3, 4).reshape(4, 4)
    np.testing.assert_array_equal(t.flip(1).numpy(), expected[:, ::-1])
    np.testing.assert_array_equal(t.flip(0).numpy(), expected[::-1])

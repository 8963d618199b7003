"""Issue 9, items 3, 5, 6 and 7 for the Tensor core: edge values of pow, sigmoid, clip and copysign (values and
gradients as PyTorch), negative padding in every mode, roll with tuples, shrink_to's check, `Tensor(list, dtype=)`
converting Python values as tinygrad does, and the exception types tinygrad raises for bad arguments."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.tensor import ModeError

NAN, INF = math.nan, math.inf
BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, INF, -INF, NAN]
EXPONENTS = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 1.5, -1.5, 2.5, INF, -INF, NAN]


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is not installed: the comparisons against it are skipped")


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal up to rounding, NaN where NaN, and the same sign of zero and infinity."""
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=what)
    finite_or_zero = ~np.isnan(want) & ((want == 0) | np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[finite_or_zero]), np.signbit(want[finite_or_zero]), err_msg=what)


# -- pow -------------------------------------------------------------------------------------------------------------


def test_pow_tensor_exponent_edges_against_torch():
    torch = torch_or_skip()
    b = np.array([x for x in BASES for _ in EXPONENTS], np.float32)
    e = np.array([y for _ in BASES for y in EXPONENTS], np.float32)
    tb, te = torch.tensor(b, requires_grad=True), torch.tensor(e, requires_grad=True)
    want = tb**te
    want.sum().backward()
    lb, le = Tensor(b), Tensor(e)
    got = lb**le
    gb, ge = got.sum().gradient(lb, le)
    same(got.numpy(), want.detach().numpy(), "value")
    same(gb.numpy(), tb.grad.numpy(), "gradient of the base")
    same(ge.numpy(), te.grad.numpy(), "gradient of the exponent")


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_pow_constant_exponent_edges_against_torch(exponent):
    torch = torch_or_skip()
    b = np.array(BASES, np.float32)
    tb = torch.tensor(b, requires_grad=True)
    want = tb**exponent  # (PyTorch's shortcuts included: (-inf)**0.5 is sqrt(-inf), NaN)
    want.sum().backward()
    lb = Tensor(b)
    got = lb**exponent
    (gb,) = got.sum().gradient(lb)
    same(got.numpy(), want.detach().numpy(), f"x ** {exponent}")
    same(gb.numpy(), tb.grad.numpy(), f"gradient of x ** {exponent}")


@pytest.mark.parametrize("base", BASES)
def test_pow_constant_base_edges_against_torch(base):
    torch = torch_or_skip()
    e = np.array(EXPONENTS, np.float32)
    te = torch.tensor(e, requires_grad=True)
    want = base**te
    want.sum().backward()
    le = Tensor(e)
    got = base**le
    (ge,) = got.sum().gradient(le)
    same(got.numpy(), want.detach().numpy(), f"{base} ** y")
    same(ge.numpy(), te.grad.numpy(), f"gradient of {base} ** y")


def test_pow_named_edges():
    assert (Tensor([0.0]) ** Tensor([0.0])).item() == 1.0  # 0**0
    assert (Tensor([0.0]) ** -1).item() == INF and (Tensor([-0.0]) ** -1.0).item() == -INF  # 0**negative
    assert (Tensor([-INF]) ** 1.5).item() == INF and (Tensor([-INF]) ** Tensor([-1.5])).item() == 0.0
    np.testing.assert_array_equal((Tensor([-2.0, -2.0, -2.0]) ** Tensor([3.0, 2.0, -1.0])).numpy(), [-8.0, 4.0, -0.5])
    assert math.isnan((Tensor([-8.0]) ** (1 / 3)).item())
    # integer-valued float exponents of constants are exact products
    np.testing.assert_array_equal((Tensor([3.0, -3.0]) ** 4.0).numpy(), [81.0, 81.0])


def test_integer_pow_with_constant_integer_exponents():
    x = Tensor([2, -3, 5], dtype=dtypes.int32)
    for n in range(6):
        got = x**n
        assert got.dtype == dtypes.int32
        np.testing.assert_array_equal(got.numpy(), np.array([2, -3, 5], np.int32) ** n)
    np.testing.assert_array_equal((Tensor([2, 3], dtype=dtypes.uint8) ** 5).numpy(), [32, 243])
    np.testing.assert_array_equal((Tensor([3], dtype=dtypes.uint8) ** 7).numpy(), [np.uint8(3**7 % 256)])  # wraps
    np.testing.assert_array_equal((Tensor([-1, 2]) ** 70).numpy(), np.array([1, 0], np.int32))  # (2^70 wraps to 0)
    np.testing.assert_array_equal((2 ** Tensor([3, 4])).numpy(), [8, 16])
    with pytest.raises(RuntimeError, match="negative power"):
        Tensor([1, 2]) ** -1  # tinygrad: RuntimeError (as PyTorch)


# -- sigmoid ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16])
def test_sigmoid_extremes_have_no_nan(dtype):
    values = [-1e30, -1e5, -1e4, -100.0, 0.0, 100.0, 1e4, 1e5, 1e30, INF, -INF]
    x = Tensor(values).cast(dtype)
    y = x.sigmoid()
    (g,) = y.sum().gradient(x)
    (h,) = g.sum().gradient(x)
    for t in (y, g, h):
        assert not np.isnan(t.float().numpy()).any()
    np.testing.assert_allclose(y.float().numpy(), [0, 0, 0, 0, 0.5, 1, 1, 1, 1, 1, 0], atol=1e-6)
    np.testing.assert_allclose(g.float().numpy(), [0, 0, 0, 0, 0.25, 0, 0, 0, 0, 0, 0], atol=1e-6)


# -- clip and copysign -------------------------------------------------------------------------------------------------

EDGES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, NAN, INF, -INF, -0.0], np.float32)


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, None), (None, 0.0), (1.0, 1.0)])
def test_clip_at_nan_and_bounds_against_torch(bounds):
    torch = torch_or_skip()
    lo, hi = bounds
    weight = np.arange(1.0, 1.0 + len(EDGES), dtype=np.float32)
    t = torch.tensor(EDGES, requires_grad=True)
    want = t.clamp(lo, hi)
    (want * torch.tensor(weight)).sum().backward()
    x = Tensor(EDGES)
    got = x.clip(lo, hi)
    (g,) = (got * Tensor(weight)).sum().gradient(x)
    same(got.numpy(), want.detach().numpy(), f"clip{bounds}")
    same(g.numpy(), t.grad.numpy(), f"gradient of clip{bounds}")  # 1 at the bounds themselves, 0 for NaN


def test_clip_with_tensor_bounds_against_torch():
    torch = torch_or_skip()
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, NAN, 0.5], np.float32)
    lo = np.array([-1.0, -1.0, 0.0, 0.0, 3.0, 0.0, NAN], np.float32)
    hi = np.array([1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0], np.float32)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    want = ts[0].clamp(ts[1], ts[2])
    want.sum().backward()
    ls = [Tensor(a) for a in (x, lo, hi)]
    got = ls[0].clip(ls[1], ls[2])
    grads = got.sum().gradient(*ls)
    same(got.numpy(), want.detach().numpy(), "clip with tensor bounds")
    for i, (g, t) in enumerate(zip(grads, ts)):
        same(g.numpy(), t.grad.numpy(), f"gradient {i} of clip with tensor bounds")


def test_clip_needs_a_bound():
    with pytest.raises(RuntimeError):  # tinygrad and PyTorch raise RuntimeError
        Tensor([1.0]).clip()


def test_copysign_against_torch():
    torch = torch_or_skip()
    a = np.array([1.0, -1.0, 0.0, -0.0, 2.0, NAN, INF, 3.0], np.float32)
    b = np.array([-1.0, 1.0, -0.0, 0.0, NAN, -1.0, -2.0, -NAN], np.float32)  # (-NaN: a NaN with its sign bit set)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    want = torch.copysign(ta, tb)
    want.sum().backward()
    la, lb = Tensor(a), Tensor(b)
    got = la.copysign(lb)
    ga, gb = got.sum().gradient(la, lb)
    same(got.numpy(), want.detach().numpy(), "copysign")
    same(ga.numpy(), ta.grad.numpy(), "gradient of copysign's magnitude")  # NaN for NaN and inf, 0 at 0
    np.testing.assert_array_equal(gb.numpy(), np.zeros(8, np.float32))  # (zeros, not NaN)
    for constant in (-0.0, 0.0, -2.0, NAN):
        ta = torch.tensor(a, requires_grad=True)
        want = torch.copysign(ta, constant)
        want.sum().backward()
        la = Tensor(a)
        got = la.copysign(constant)
        (ga,) = got.sum().gradient(la)
        same(got.numpy(), want.detach().numpy(), f"copysign(x, {constant})")
        same(ga.numpy(), ta.grad.numpy(), f"gradient of copysign(x, {constant})")


def test_copysign_of_integers_keeps_the_dtype():
    got = Tensor([1, -2, 3]).copysign(Tensor([-1, 1, -5]))
    assert got.dtype == dtypes.int32  # (tinygrad's rule; PyTorch returns float)
    np.testing.assert_array_equal(got.numpy(), [-1, 2, -3])


# -- movement ----------------------------------------------------------------------------------------------------------

PADS = [(-1, 2), (2, -3), (-2, 1), (3, -2), (-1, -1), (0, -2)]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_negative_padding_in_every_mode_against_torch(mode):
    torch = torch_or_skip()
    a = np.arange(30, dtype=np.float32).reshape(1, 5, 6) / 7
    for pads in PADS:
        flat = pads + (-1, 1)  # the last axis by `pads`, the one before cropped at the start and grown at the end
        t = torch.tensor(a, requires_grad=True)
        want = torch.nn.functional.pad(t, flat, mode=mode)
        weight = np.arange(want.numel(), dtype=np.float32).reshape(tuple(want.shape))
        (want * torch.tensor(weight)).sum().backward()
        x = Tensor(a)
        got = x.pad(flat, mode=mode)
        (g,) = (got * Tensor(weight)).sum().gradient(x)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, err_msg=f"{mode} {flat}")
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-6, err_msg=f"gradient of {mode} {flat}")


def test_negative_padding_named_cases():
    x = Tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert x.pad((-1, 2), mode="reflect").tolist() == [2.0, 3.0, 4.0, 5.0, 4.0, 3.0]  # mirrors the whole axis
    assert x.pad((2, -3), mode="reflect").tolist() == [3.0, 2.0, 1.0, 2.0]
    assert x.pad((-2, 1), mode="replicate").tolist() == [3.0, 4.0, 5.0, 5.0]
    assert x.pad((-1, 2), mode="circular").tolist() == [2.0, 3.0, 4.0, 5.0, 2.0, 3.0]  # wraps what is left
    assert x.pad(((-1, 2),), value=9.0).tolist() == [2.0, 3.0, 4.0, 5.0, 9.0, 9.0]


def test_roll_with_tuples():
    a = np.arange(12).reshape(3, 4)
    x = Tensor(a)
    np.testing.assert_array_equal(x.roll((1, -1), (0, 1)).numpy(), np.roll(a, (1, -1), (0, 1)))
    np.testing.assert_array_equal(x.roll((1, 2), (1, 1)).numpy(), np.roll(a, 3, 1))  # one dim twice: the sum
    np.testing.assert_array_equal(x.roll((1, 2), (-1, 1)).numpy(), np.roll(a, 3, 1))
    np.testing.assert_array_equal(x.roll(5).numpy(), np.roll(a, 5))
    with pytest.raises(RuntimeError):  # (tinygrad's type; it is a ValueError too)
        x.roll((1, 2), 0)


def test_shrink_to_checks_the_number_of_sizes():
    x = Tensor.ones(2, 3)
    assert x.shrink_to(1, None).shape == (1, 3)
    for sizes in ((1,), (1, 2, 3)):
        with pytest.raises(ValueError, match="does not match the 2 axes"):
            x.shrink_to(*sizes)
    with pytest.raises(ValueError):
        x.shrink((None, None, None))  # (a third entry was silently ignored)


# -- Tensor(list, dtype=) ----------------------------------------------------------------------------------------------

# (values, dtype, what tinygrad 0.14 makes of them)
CONVERSIONS = [
    ([-1, 256, 300], dtypes.uint8, [255, 0, 44]),
    ([200, -200], dtypes.int8, [-56, 56]),
    ([-1], dtypes.uint32, [4294967295]),
    ([-1], dtypes.uint64, [18446744073709551615]),
    ([2**64 - 1], dtypes.uint64, [18446744073709551615]),
    ([2**64], dtypes.uint64, [0]),
    ([-(2**63) - 1], dtypes.int64, [2**63 - 1]),
    ([40000, 70000], dtypes.int16, [-25536, 4464]),
    ([2**40], dtypes.int32, [0]),
    ([1e20], dtypes.int32, [1661992960]),
    ([1.7, -1.7], dtypes.int32, [1, -1]),
    ([1.5, 300.0, -1.0], dtypes.uint8, [1, 44, 255]),
    ([True, False], dtypes.int32, [1, 0]),
    ([[True, 3], [2.9, -0.5]], dtypes.int8, [[1, 3], [2, 0]]),
    ([0, 2, -1], dtypes.bool, [False, True, True]),
    ([True, False], dtypes.float32, [1.0, 0.0]),
]


@pytest.mark.parametrize("values,dtype,want", CONVERSIONS)
def test_tensor_from_list_converts_as_tinygrad(values, dtype, want):
    t = Tensor(values, dtype=dtype)
    assert t.dtype == dtype
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warnings either
        assert t.tolist() == want


def test_tensor_from_list_refuses_nan_and_inf_for_integers():
    with pytest.raises(ValueError):
        Tensor([NAN], dtype=dtypes.int32)
    with pytest.raises(OverflowError):
        Tensor([INF], dtype=dtypes.uint8)


# -- exception types ---------------------------------------------------------------------------------------------------


def test_pad_mode_error_is_not_implemented_and_value_error():
    with pytest.raises(NotImplementedError, match="mode must be one of"):  # tinygrad's and PyTorch's type
        Tensor([1.0, 2.0]).pad((1, 0), mode="bogus")
    with pytest.raises(ValueError):  # and what Python code expects of a bad argument
        Tensor([1.0, 2.0]).pad((1, 0), mode="bogus")
    assert issubclass(ModeError, RuntimeError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Tensor([1.0, 2.0]).meshgrid(Tensor([1.0]), indexing="zz"),
        lambda: Tensor([1.0, 2.0]).div(2, rounding_mode="bogus"),
        lambda: Tensor([1, 2]) ** -2,
        lambda: Tensor([1.0, 2.0]) << 1,
        lambda: Tensor([1.0, 2.0]) >> 1,
        lambda: Tensor([1, 2]) << 1.5,
        lambda: Tensor([1, 2]) >> Tensor([1.0, 2.0]),
    ],
    ids=[
        "meshgrid_indexing",
        "div_rounding_mode",
        "int_pow_negative",
        "lshift_float",
        "rshift_float",
        "shift_by_float",
        "shift_by_float_tensor",
    ],  # fmt: skip
)
def test_bad_arguments_raise_runtime_error_as_tinygrad(call):
    with pytest.raises(RuntimeError):
        call()


# -- values found wrong by fuzzing against numpy and PyTorch ----------------------------------------------------------


def test_half_division_by_a_divisor_without_a_half_reciprocal():
    """1 / 8.4e-6 is above float16's largest (65504): the quotient is computed in float32 and rounded once."""
    a, b = np.float16([1.144e-4, 3.0, -0.0]), np.float16([-8.4e-6, 7.0, 5.96e-8])
    got = (Tensor(a) / Tensor(b)).numpy()
    want = (a.astype(np.float32) / b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[2])


def test_division_by_a_tiny_divisor_and_its_gradient():
    for np_dtype, tiny in ((np.float32, 1e-40), (np.float64, 1e-320)):
        a, b = np.array([0.0, 10 * tiny, -3.0], np_dtype), np.array([tiny, tiny, 1.5], np_dtype)
        x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
        q = x / y
        np.testing.assert_allclose(q.numpy(), a / b, rtol=1e-5, err_msg=str(np_dtype))
        q.sum().backward()
        assert x.grad is not None and y.grad is not None
        np.testing.assert_allclose(x.grad.numpy()[2:], 1 / b[2:], rtol=1e-6)
        with np.errstate(over="ignore"):  # (-10 tiny / tiny^2 is -inf in float32; 0 / tiny^2, 0 * inf, is left out)
            np.testing.assert_allclose(y.grad.numpy()[1:], (-a / b / b)[1:], rtol=1e-5)


def test_half_cos_and_tan_round_once():
    x = np.float16([1.5703125, 532.5, 0.25])
    want = np.cos(x.astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(Tensor(x).cos().numpy(), want)
    assert Tensor(x).tan().numpy()[0] == np.float16(np.tan(np.float64(x[0])))  # 2066, finite in float16


def test_half_cumsum_rounds_once():
    torch = torch_or_skip()
    values = torch.tensor(np.random.default_rng(3).standard_normal(10000).astype(np.float32)).to(torch.bfloat16)
    got = Tensor(values.float().numpy()).cast(dtypes.bfloat16).cumsum(0).cast(dtypes.float32).numpy()
    want = torch.cumsum(values.float(), 0).to(torch.bfloat16).float().numpy()
    step = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - 7)  # one bfloat16 ulp at each value
    assert np.all(np.abs(got - want) <= step), float(np.max(np.abs(got - want) / step))


def test_integer_clip_bounds_beyond_the_dtype_saturate():
    u = Tensor(np.uint8([0, 100, 255]))
    np.testing.assert_array_equal(u.clip(0, 300).numpy(), [0, 100, 255])  # 300 wrapped into uint8 was 44
    np.testing.assert_array_equal(u.clip(-5, 50).numpy(), [0, 50, 50])
    np.testing.assert_array_equal(Tensor(np.int8([-128, 0, 127])).clip(-200, 200).numpy(), [-128, 0, 127])


def test_invert_of_floats_and_nan_to_int_say_what_to_do():
    with pytest.raises(TypeError, match="integer or bool tensor"):
        ~Tensor([1.0])
    with pytest.raises(ValueError, match="nan_to_num"):
        Tensor([NAN, 1.0], dtype=dtypes.int32)


@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_an_element_of_padding_summed_alone_is_zero(device):
    """A one-element shrink of a padded elementwise result, reduced to 0-d: the padding's mask was dropped, so the
    kernel read the source (2.0 below; past the buffer's end for the second), and a softmax over an axis of one
    element, used twice, summed to 1."""
    x = Tensor(np.float32([1.0]), device=device)
    assert (x.pad(((0, 1),)) * 2)[1:2].sum().item() == 0.0
    x3 = Tensor(np.float32([1.0, 2.0, 3.0]), device=device)
    assert (x3.pad(((0, 2),)) * 2)[3:4].reshape(()).item() == 0.0
    s = Tensor(np.float32([0.3]), device=device).softmax(0)
    assert (s.sum() + s.sum()).item() == 2.0


def test_integer_division_by_zero_gives_zero_like_numpy():
    a, b = np.int32([5, -5, 0, 7, -7]), np.int32([0, 0, 0, 3, 3])
    x, y = Tensor(a), Tensor(b)
    with np.errstate(divide="ignore"):
        for got, want in (((x // y), a // b), ((x % y), a % b), (x.fmod(y), np.fmod(a, b))):
            np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(x.idiv(y).numpy(), [0, 0, 0, 2, -2])


def test_gradients_at_zero_of_softplus_logsigmoid_atan_and_leaky_relu():
    """softplus's and logsigmoid's slopes at 0 are 0.5 (relu's and abs's zero slopes at 0 gave 0), atan's is 1 (an
    untaken 1/x of 0 gave 0 * inf = NaN); leaky_relu's is its slope, any slope (PyTorch's)."""
    torch = torch_or_skip()
    v = np.float32([-30.0, -2.0, -0.0, 0.0, 1e-3, 2.0, 30.0])
    tf = torch.nn.functional
    cases = (("softplus", lambda t: t.softplus(), tf.softplus),
             ("softplus beta 2", lambda t: t.softplus(2.0), lambda t: tf.softplus(t, 2.0)),
             ("logsigmoid", lambda t: t.logsigmoid(), tf.logsigmoid),
             ("atan", lambda t: t.atan(), torch.atan),
             ("leaky_relu", lambda t: t.leaky_relu(0.1), lambda t: tf.leaky_relu(t, 0.1)),
             ("leaky_relu -0.5", lambda t: t.leaky_relu(-0.5), lambda t: tf.leaky_relu(t, -0.5)))  # fmt: skip
    for name, ours, theirs in cases:
        x, t = Tensor(v, requires_grad=True), torch.tensor(v.astype(np.float64), requires_grad=True)
        y, ty = ours(x), theirs(t)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=f"{name}'s gradient")


def test_inverse_sines_and_tangent_are_a_few_ulp_for_every_argument():
    """The A&S polynomial's absolute error 3e-7 was 400 ulp of asin(1e-3) and of atan(1e-3)."""
    rng = np.random.default_rng(1)
    for np_dtype in (np.float32, np.float64):
        v = np.concatenate([rng.uniform(-1, 1, 4000), 10.0 ** rng.uniform(-9, 0, 2000), [1.0, -1.0, 0.5, -0.5]])
        v = v.astype(np_dtype)
        for name, ref in (("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan)):
            want = ref(v.astype(np.float64))
            got = getattr(Tensor(v), name)().numpy().astype(np.float64)
            ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np_dtype)).astype(np.float64)
            assert ulps.max() <= 6, f"{name} in {np_dtype.__name__}: {ulps.max():.1f} ulp at {v[np.argmax(ulps)]}"


def test_float_remainders_and_floor_division_match_pytorch_bit_for_bit():
    """fmod, % and // of floats as C's and Python's exact remainder: x - q y was one rounded product, so 1 % 0.1 gave
    0 (0.0999999 expected) and -5.3 // 0.1 gave -53 (-54)."""
    torch = torch_or_skip()
    rng = np.random.default_rng(5)
    for np_dtype in (np.float32, np.float64):
        x = np.concatenate([rng.uniform(-100, 100, 2000), [1.0, 5.3, -5.3, 7.0, 0.0, -0.0, -6.0, INF, NAN, 1.0, -1.0]])
        y = np.concatenate([rng.uniform(-3, 3, 2000), [0.1, 0.1, 0.1, 0.7, 3.0, 3.0, 3.0, 2.0, 2.0, INF, INF]])
        x, y = x.astype(np_dtype), y.astype(np_dtype)
        tx, ty = torch.tensor(x), torch.tensor(y)
        cases = (("fmod", lambda a, b: a.fmod(b), torch.fmod), ("%", lambda a, b: a % b, torch.remainder),
                 ("//", lambda a, b: a // b, torch.floor_divide))  # fmt: skip
        for name, ours, theirs in cases:
            got, want = ours(Tensor(x), Tensor(y)).numpy(), theirs(tx, ty).numpy()
            same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
            wrong = list(zip(x[~same], y[~same], got[~same], want[~same]))[:4]
            assert same.all(), f"{name} {np_dtype.__name__}: {wrong}"


def test_numpy_scalars_inside_lists_are_their_python_values():
    """`Tensor([np.float32(1.5), 2])` was refused ("use bool, int or float") while `Tensor(np.float32(1.5))` worked."""
    assert Tensor([np.float32(1.5), 2]).tolist() == [1.5, 2.0]
    assert Tensor([np.int64(5)]).dtype == dtypes.int32 and Tensor([np.int64(5)]).tolist() == [5]
    assert Tensor([[np.bool_(True), False]]).dtype == dtypes.bool
    with pytest.raises(TypeError, match="use bool, int or float"):
        Tensor([1, "a"])

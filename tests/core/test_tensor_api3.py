"""More of the Tensor API on the PYTHON device against numpy references: transposed convolution, losses with
reductions, binary math (fmod, copysign, logaddexp, isclose), diagonals and windows, rearrange, the nn layers that
build on them, and PyTorch's gradient conventions (non-differentiable comparisons, zero-gradient sign, std at 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_tensor_api import check

from lazy import Context, Tensor, dtypes, nn
from lazy.helpers import ArgumentError, ShapeError

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def conv_transpose_reference(x, w, stride, padding, output_padding, dilation, groups):
    """Scatter every input pixel's weighted kernel into the output (the definition), then crop the padding."""
    n, cin, *spatial = x.shape
    cout_g, kernel = w.shape[1], w.shape[2:]
    full = [
        (i - 1) * s + d * (k - 1) + 1 + op for i, s, d, k, op in zip(spatial, stride, dilation, kernel, output_padding)
    ]
    out = np.zeros((n, cout_g * groups, *full))
    cin_g = cin // groups
    for b, ci, *pos in np.ndindex(x.shape):
        g = ci // cin_g
        for taps in np.ndindex(*kernel):
            at = tuple(p * s + t * d for p, s, t, d in zip(pos, stride, taps, dilation))
            out[(b, slice(g * cout_g, (g + 1) * cout_g), *at)] += x[(b, ci, *pos)] * w[(ci, slice(None), *taps)]
    crop = tuple(slice(p, f - p) for p, f in zip(padding, full))
    return out[(slice(None), slice(None), *crop)]


@pytest.mark.parametrize(
    "shape, wshape, stride, padding, output_padding, dilation, groups",
    [((1, 2, 4, 4), (2, 3, 3, 3), 1, 0, 0, 1, 1), ((2, 4, 3, 3), (4, 2, 3, 3), 2, 1, 1, 1, 2),
     ((1, 2, 3, 4), (2, 1, 2, 3), (2, 1), (0, 1), 0, (1, 2), 1), ((1, 2, 5), (2, 3, 3), 3, 1, 2, 1, 1)],
)  # fmt: skip
def test_conv_transpose2d(shape, wshape, stride, padding, output_padding, dilation, groups):
    nd = len(shape) - 2
    tup = lambda v: (v,) * nd if isinstance(v, int) else v  # noqa: E731
    w = RNG.standard_normal(wshape)
    args = (tup(stride), tup(padding), tup(output_padding), tup(dilation), groups)
    check(
        lambda x: x.conv_transpose2d(
            Tensor(w.astype(np.float32)), None, groups, stride, dilation, padding, output_padding
        ),
        lambda a: conv_transpose_reference(a, w, *args),
        RNG.standard_normal(shape),
    )


def test_conv_transpose2d_layer_and_bias():
    layer = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    expected = conv_transpose_reference(x, layer.weight.numpy(), (2, 2), (1, 1), (1, 1), (1, 1), 2)
    expected += layer.bias.numpy().reshape(1, -1, 1, 1)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert nn.ConvTranspose1d(3, 2, 3)(Tensor.ones(1, 3, 4)).shape == (1, 2, 6)


def log_softmax(a, axis):
    m = a.max(axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis, keepdims=True))


def reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_against_their_formulas(reduction):
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    y = np.array([1, 0, 4, 2])
    onehot = np.eye(5)[y]
    p = 1 / (1 + np.exp(-x.astype(np.float64)))
    target = (x > 0).astype(np.float32)
    lp = log_softmax(x.astype(np.float64), 1)
    smooth = 0.9 * onehot + 0.1 / 5
    cases = [
        (Tensor(x).cross_entropy(Tensor(y), reduction), reduce(-(lp * onehot).sum(1), reduction)),
        (Tensor(x).cross_entropy(Tensor(y), reduction, 0.1), reduce(-(lp * smooth).sum(1), reduction)),
        (Tensor(x).log_softmax().nll_loss(Tensor(y), reduction=reduction), reduce(-lp[range(4), y], reduction)),
        (Tensor(x).binary_crossentropy_logits(Tensor(target), reduction),
         reduce(-(target * np.log(p) + (1 - target) * np.log(1 - p)), reduction)),
        (Tensor(p.astype(np.float32)).binary_crossentropy(Tensor(target), reduction),
         reduce(-(target * np.log(p) + (1 - target) * np.log(1 - p)), reduction)),
        (Tensor(x).mse_loss(Tensor(target), reduction), reduce((x - target) ** 2, reduction)),
        (Tensor(x).l1_loss(Tensor(target), reduction), reduce(np.abs(x - target), reduction)),
        (Tensor(x).sparse_categorical_crossentropy(Tensor(y), reduction=reduction),
         reduce(-lp[range(4), y], reduction)),
    ]  # fmt: skip
    for got, expected in cases:
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_weighted_nll_loss_and_ignore_index():
    x = log_softmax(RNG.standard_normal((5, 3)), 1)
    y = np.array([0, 2, 1, 2, 0])
    w = np.array([1.0, 2.0, 3.0])
    keep = y != 2
    picked, weights = -x[range(5), y] * w[y] * keep, w[y] * keep
    got = Tensor(x.astype(np.float32)).nll_loss(Tensor(y), Tensor(w.astype(np.float32)), ignore_index=2)
    np.testing.assert_allclose(got.numpy(), picked.sum() / weights.sum(), rtol=1e-5)
    logits = RNG.standard_normal((2, 3, 4)).astype(np.float32)  # (N, C, d): classes on axis 1
    labels = RNG.integers(0, 3, (2, 4))
    lp = log_softmax(logits.astype(np.float64), 1)
    expected = -np.take_along_axis(lp, labels[:, None], 1).mean()
    np.testing.assert_allclose(Tensor(logits).cross_entropy(Tensor(labels)).numpy(), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="reduction must be"):
        Tensor(logits).cross_entropy(Tensor(labels), reduction="avg")


def test_binary_math():
    a = np.array([-4.5, 7.0, 5.0, 4.0, -7.0, 8.0], np.float32)
    b = np.array([2.0, -3.0, 8.0, -2.0, 3.0, 5.0], np.float32)
    np.testing.assert_allclose(Tensor(a).fmod(Tensor(b)).numpy(), np.fmod(a, b))
    np.testing.assert_array_equal(Tensor(a.astype(np.int32)).fmod(Tensor(b.astype(np.int32))).numpy(),
                                  np.fmod(a.astype(np.int32), b.astype(np.int32)))  # fmt: skip
    np.testing.assert_array_equal(Tensor([1.0, 2.0, 3.0]).copysign(Tensor([-0.0, 0.0, -2.0])).numpy(), [-1, 2, -3])
    inf = np.array([1.0, -np.inf, np.inf], np.float32)
    np.testing.assert_allclose(Tensor(inf).logaddexp(Tensor([2.0, -np.inf, 1.0])).numpy(),
                               np.logaddexp(inf, [2.0, -np.inf, 1.0]))  # fmt: skip
    close = Tensor([1e-7, 1e-8, np.inf, np.nan]).isclose(Tensor([0.0, 0.0, np.inf, np.nan]))
    np.testing.assert_array_equal(close.numpy(), [False, True, True, False])
    assert Tensor([np.nan]).isclose(Tensor([np.nan]), equal_nan=True).item()
    assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-9])).item()
    np.testing.assert_allclose(Tensor([1.0, 100.0]).log10().numpy(), [0.0, 2.0], atol=1e-6)
    check(lambda x: x.logaddexp(Tensor(b.astype(np.float32))), lambda v: np.logaddexp(v, b), a / 3)


def test_diagonals_windows_and_padding_to_a_shape():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for offset in (0, 1, -1, 3, -3):
        np.testing.assert_array_equal(Tensor(x).diagonal(offset, 1, 2).numpy(), np.diagonal(x, offset, 1, 2))
    np.testing.assert_array_equal(Tensor(x).diagonal(0, 0, 2).numpy(), np.diagonal(x, 0, 0, 2))
    check(lambda t: t.diagonal(1, -2, -1), lambda a: np.diagonal(a, 1, -2, -1).copy(), x / 24)
    np.testing.assert_array_equal(Tensor([1, 2, 3]).diag().numpy(), np.diag([1, 2, 3]))
    windows = np.lib.stride_tricks.sliding_window_view(x, 2, axis=2)[:, :, ::1]
    np.testing.assert_array_equal(Tensor(x).unfold(2, 2, 1).numpy(), windows)
    np.testing.assert_array_equal(Tensor(x).unfold(0, 1, 2).numpy(), x[:1, ..., None])  # one window of 1 every 2
    np.testing.assert_array_equal(Tensor(x).pad_to(3, None, 5, value=-1).numpy()[2], -np.ones((3, 5)))
    np.testing.assert_array_equal(Tensor(x).shrink_to(1, None, 2).numpy(), x[:1, :, :2])
    with pytest.raises(ShapeError, match="same axis"):
        Tensor(x).diagonal(0, 1, -2)


def test_rearrange():
    x = Tensor(np.arange(24).reshape(2, 3, 4))
    np.testing.assert_array_equal(x.rearrange("b c h -> b (c h)").numpy(), np.arange(24).reshape(2, 12))
    np.testing.assert_array_equal(
        x.rearrange("b c (h w) -> b h w c", h=2).numpy(), np.arange(24).reshape(2, 3, 2, 2).transpose(0, 2, 3, 1)
    )
    np.testing.assert_array_equal(
        x.rearrange("... h -> h ...").numpy(), np.moveaxis(np.arange(24).reshape(2, 3, 4), 2, 0)
    )
    assert x.rearrange("b c h -> b 1 c h").shape == (2, 1, 3, 4)
    with pytest.raises(ValueError, match="same axes"):
        x.rearrange("b c h -> b c")


def test_cummin_randperm_and_creation_likes():
    values, idx = Tensor([0, 1, -1, 2, -2, 3, -3]).cummin(0)
    np.testing.assert_array_equal(values.numpy(), [0, 0, -1, -1, -2, -2, -3])
    np.testing.assert_array_equal(idx.numpy(), [0, 0, 2, 2, 4, 4, 6])
    perm = Tensor.randperm(20).numpy()
    assert sorted(perm.tolist()) == list(range(20)) and perm.dtype == np.int32
    t = Tensor.ones(2, 3, dtype=dtypes.float16)
    assert t.rand_like().dtype == dtypes.float16 and t.randn_like().shape == (2, 3)
    assert t.empty_like().shape == (2, 3) and t.size() == (2, 3) and t.size(-1) == 3
    assert Tensor.stack(Tensor([1]), Tensor([2])).shape == Tensor([1]).stack(Tensor([2])).shape == (2, 1)


def test_pytorch_gradient_conventions():
    x = Tensor([1.0, -2.0, 0.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        (x < 1).sum().backward()
    (x * (x < 0)).sum().backward()  # a comparison used as a mask: the gradient reaches x through the product
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])
    for fn in (lambda t: t.sign(), lambda t: t**0):
        y = Tensor([1.0, -2.0, 0.0], requires_grad=True)
        fn(y).sum().backward()
        np.testing.assert_array_equal(y.grad.numpy(), [0.0, 0.0, 0.0])  # a zero gradient, not None
    z = Tensor(np.ones((1, 3, 1), np.float32), requires_grad=True)
    z.std(axis=(0, 2), correction=0).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros((1, 3, 1)))  # zero variance: gradient 0, not NaN
    n = Tensor([-8.0, 4.0], requires_grad=True)
    out = n ** Tensor([1 / 3, 0.5])
    out.sum().backward()
    assert math.isnan(out.numpy()[0]) and math.isnan(n.grad.numpy()[0]) and not math.isnan(n.grad.numpy()[1])


def test_shape_errors_are_runtime_and_value_errors():
    for bad in (lambda: Tensor.ones(2, 3) @ Tensor.ones(2, 3), lambda: Tensor.ones(2, 3).reshape(4),
                lambda: Tensor.ones(2, 3) + Tensor.ones(3, 2), lambda: Tensor.ones(2, 3).permute(0, 0),
                lambda: Tensor.ones(2, 3).flip(1, 1)):  # fmt: skip
        for kind in (RuntimeError, ValueError, AssertionError):  # PyTorch/tinygrad, Python, older tinygrad
            with pytest.raises(kind):
                bad()
    with pytest.raises(ShapeError, match="names 2 operands, got 3"):
        Tensor.einsum("ij,jk->ij", Tensor.ones(2, 2), Tensor.ones(2, 2), Tensor.ones(2, 2))


def test_older_tinygrad_names():
    x = Tensor([[-1.0, 2.0]])
    np.testing.assert_allclose(x.leakyrelu(0.1).numpy(), [[-0.1, 2.0]])
    np.testing.assert_array_equal(x.pad2d((1, 0, 0, 1), value=5).numpy(), [[5, -1, 2], [5, 5, 5]])


def test_new_layers():
    lstm = nn.LSTMCell(3, 4)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    h, c = lstm(Tensor(x))
    gates = x @ lstm.weight_ih.numpy().T + lstm.bias_ih.numpy() + lstm.bias_hh.numpy()
    i, f, g, o = np.split(gates, 4, 1)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c_ref = sig(i) * np.tanh(g)
    np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.numpy(), sig(o) * np.tanh(c_ref), rtol=1e-5, atol=1e-6)
    y = nn.LayerNorm2d(3)(Tensor(RNG.standard_normal((2, 3, 4, 4)).astype(np.float32))).numpy()
    np.testing.assert_allclose(y.mean(1), 0, atol=1e-5)
    t = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    mean, var = t.mean((0, 2)), t.var((0, 2))
    got = Tensor(t).batchnorm(None, None, Tensor(mean), Tensor(1 / np.sqrt(var + 1e-5)))
    np.testing.assert_allclose(got.numpy(), (t - mean[:, None]) / np.sqrt(var[:, None] + 1e-5), rtol=1e-4, atol=1e-5)
    pooled, idx = Tensor.arange(1, 17).reshape(1, 1, 4, 4).float().max_pool2d(return_indices=True)
    unpooled = pooled.max_unpool2d(idx).numpy()[0, 0]
    np.testing.assert_array_equal(unpooled, [[0, 0, 0, 0], [0, 6, 0, 8], [0, 0, 0, 0], [0, 14, 0, 16]])


def test_edge_values_of_elementwise_ops():
    # an int & 1 is not the int (the x & True -> x rule is for bools only)
    np.testing.assert_array_equal((Tensor([7, -6, 3]) & 1).numpy(), [1, 0, 1])
    np.testing.assert_array_equal((Tensor([7, -6, 3]) & Tensor(True)).numpy(), [1, 0, 1])
    nan = Tensor([np.nan, 1.0])
    np.testing.assert_array_equal((nan >= 1).numpy(), [False, True])  # NaN compares false both ways
    np.testing.assert_array_equal((nan <= 1).numpy(), [False, True])
    assert (Tensor(11) ** Tensor(7)).item() == 11**7  # exact integer powers, wrapping like C
    ints = np.array([3, -2, 1, -1, 0], np.int32)
    exps = np.array([100, 3, -4, -3, 0], np.int32)
    with np.errstate(over="ignore"):
        expected = [int(np.int32(3) ** np.int32(100)), -8, 1, -1, 1]
    np.testing.assert_array_equal((Tensor(ints) ** Tensor(exps)).numpy(), expected)
    big = np.array([1e4, 1e7, 1e30, -1e30, np.inf, -np.inf], np.float32)
    np.testing.assert_allclose(Tensor(big).cos().numpy(), np.cos(big.astype(np.float64)), atol=1e-6)
    np.testing.assert_allclose(Tensor(big).atan().numpy(), np.arctan(big), rtol=1e-6)
    np.testing.assert_allclose(Tensor(big[:4]).asinh().numpy(), np.arcsinh(big[:4].astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(Tensor(big[:3]).acosh().numpy(), np.arccosh(big[:3].astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(Tensor([np.inf, 1e30, -1.0]).relu6().numpy(), [6.0, 6.0, 0.0])
    np.testing.assert_array_equal(Tensor([np.inf, 1e30]).hardsigmoid().numpy(), [1.0, 1.0])


def test_inputs_used_only_through_non_differentiable_ops_get_zero_gradients():
    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = Tensor([-1.0, 1.0, -1.0], requires_grad=True)
    x.copysign(y).sum().backward()  # y only decides signs (comparisons, a where's condition)
    np.testing.assert_array_equal(x.grad.numpy(), [-1.0, -1.0, -1.0])
    np.testing.assert_array_equal(y.grad.numpy(), [0.0, 0.0, 0.0])
    z = Tensor(np.ones((3, 0, 5), np.float32), requires_grad=True)
    z.prod(1).sum().backward()  # the empty product is 1, and z still gets its (empty) gradient
    assert z.grad is not None and z.grad.shape == (3, 0, 5)
    mask = x < 0
    assert mask.requires_grad is False and (mask & (y > 0)).requires_grad is False
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        (mask & (y > 0)).sum().backward()


def test_overflow_free_activations_and_log_sum_exp():
    for fn, ref in ((lambda t: t.softplus(), lambda a: np.logaddexp(0, a)),
                    (lambda t: t.logsigmoid(), lambda a: -np.logaddexp(0, -a)),
                    (lambda t: t.elu(), lambda a: np.where(a > 0, a, np.expm1(np.minimum(a, 0)))),
                    (lambda t: t.mish(), lambda a: a * np.tanh(np.logaddexp(0, a)))):  # fmt: skip
        x = Tensor([-400.0, -30.0, 0.5, 30.0, 400.0], requires_grad=True)
        out = fn(x)
        np.testing.assert_allclose(out.numpy(), ref(np.array([-400.0, -30.0, 0.5, 30.0, 400.0])), rtol=1e-5, atol=1e-6)
        out.sum().backward()
        assert np.isfinite(x.grad.numpy()).all()  # no inf * 0 from an overflowing exp in the unused branch
    inf = Tensor([[-np.inf, -np.inf], [np.inf, 1.0]])
    np.testing.assert_array_equal(inf.logsumexp(1).numpy(), [-np.inf, np.inf])
    np.testing.assert_allclose(Tensor([-np.inf, 0.0, 1000.0]).logcumsumexp().numpy(), [-np.inf, 0.0, 1000.0])


def test_dtype_helpers():
    from lazy.dtype import INVERSE_DTYPES_DICT, can_lossless_cast, float_to_bf16, float_to_fp16, truncate

    assert can_lossless_cast(dtypes.int16, dtypes.float32) and not can_lossless_cast(dtypes.int32, dtypes.float32)
    assert can_lossless_cast(dtypes.uint8, dtypes.int16) and not can_lossless_cast(dtypes.int8, dtypes.uint64)
    assert can_lossless_cast(dtypes.float16, dtypes.float32) and not can_lossless_cast(dtypes.float16, dtypes.bfloat16)
    assert can_lossless_cast(dtypes.bool, dtypes.uint8) and not can_lossless_cast(dtypes.float32, dtypes.int64)
    assert float_to_bf16(3.14159) == 3.140625 and float_to_fp16(70000.0) == math.inf and float_to_fp16(0.1) != 0.1
    assert truncate[dtypes.int8](200) == -56 and truncate[dtypes.uint8](-1) == 255
    assert truncate[dtypes.float32](0.1) == float(np.float32(0.1)) and INVERSE_DTYPES_DICT[dtypes.float32] == "float"


def test_unsigned_bool_and_half_precision_edges():
    u = Tensor(np.array([3, 2, 0, 255], np.uint8))
    np.testing.assert_array_equal(u.abs().numpy(), [3, 2, 0, 255])  # relu(x) + relu(-x) would wrap to 0
    np.testing.assert_array_equal(Tensor([True, False]).abs().numpy(), [True, False])
    ints = np.array([[3, 200, 7]], np.uint8)
    f = ints.astype(np.float64)
    ref = np.exp(f - f.max()) / np.exp(f - f.max()).sum()
    np.testing.assert_allclose(Tensor(ints).softmax().numpy(), ref.astype(np.float32), rtol=1e-5)  # no x - max wrap
    np.testing.assert_allclose(Tensor(ints).logsumexp(1).numpy(), [np.log(np.exp(ints.astype(np.float64)).sum())],
                               rtol=1e-6)  # fmt: skip
    x = np.array([7.0, -5.0, 10.5, 0.1], np.float16)
    for fn, ref_fn in ((Tensor.exp, np.exp), (Tensor.log, np.log), (Tensor.sqrt, np.sqrt), (Tensor.sigmoid, None)):
        arr = np.abs(x) if fn in (Tensor.log, Tensor.sqrt) else x
        want = ref_fn(arr.astype(np.float32)) if ref_fn else 1 / (1 + np.exp(-arr.astype(np.float32)))
        got = fn(Tensor(arr))
        assert got.dtype == dtypes.float16
        np.testing.assert_array_equal(got.numpy(), want.astype(np.float16))  # computed in float32, rounded once


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3), (1, 1)])
def test_qr(shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    if shape == (4, 4):
        a[:, 1] = 0  # a zero column below the diagonal needs no reflection (and must not divide by zero)
    q, r = (t.numpy() for t in Tensor(a).qr())
    m = shape[-2]
    assert q.shape == (*shape[:-2], m, m) and r.shape == shape
    np.testing.assert_allclose(q @ r, a, atol=2e-6)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(m), q.shape), atol=2e-6)
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    with pytest.raises(ShapeError, match="expects a matrix"):
        Tensor([1.0, 2.0]).qr()


def test_randperm_refuses_a_dtype_that_would_wrap_and_is_a_leaf():
    from lazy.tensor_create import ValueRangeError

    assert sorted(Tensor.randperm(128, dtype=dtypes.int8).numpy().tolist()) == list(range(128))
    with pytest.raises(ValueRangeError, match=r"randperm\(200\).*cannot hold 199"):
        Tensor.randperm(200, dtype=dtypes.int8)
    p = Tensor.randperm(6, dtype=dtypes.float32, requires_grad=True)
    assert p._ctx is None and p.requires_grad


def test_lerp_of_shapes_that_do_not_broadcast_names_lerp():
    np.testing.assert_allclose(Tensor.ones(3, 2).lerp(Tensor([1.0, 3.0]), 0.5).numpy(), [[1, 2]] * 3)
    with pytest.raises(ShapeError, match=r"lerp: self \(3, 600\), end \(2,\) and weight \(\) cannot be broadcast"):
        Tensor.ones(3, 600).lerp(Tensor([1.0, 2.0]), 0.5)


def test_true_division_by_a_python_int_outside_the_tensors_dtype_is_exact():
    """uint8 / 256 is a float division: the 256 must not become a uint8 constant first (it wrapped to 0: inf)."""
    u = Tensor(np.array([0, 5, 200], np.uint8))
    np.testing.assert_array_equal((u / 256).numpy(), np.array([0, 5, 200], np.float32) / 256)
    np.testing.assert_array_equal((u / -1).numpy(), [-0.0, -5.0, -200.0])
    np.testing.assert_allclose((256 / Tensor(np.array([5, 200], np.uint8))).numpy(), [51.2, 1.28], rtol=1e-7)
    np.testing.assert_allclose((Tensor(np.array([4, -8], np.int32)) / 2**32).numpy(), [2**-30, -(2**-29)], rtol=0)


def test_half_activations_and_asinh_gradient_at_their_edges():
    """float16 hardswish of 12000 is 12000 (x * 6 overflowed first), float16 gelu's negative tail is the value
    PyTorch gives (its tanh rounded to -1 in half: -0), and asinh's gradient at a subnormal is 1 (the untaken
    log branch's 0 * inf was NaN)."""
    torch = pytest.importorskip("torch", reason="the reference for half activations")
    big = np.array([12000.0, 60000.0, -4.0, 0.5], np.float16)
    want = torch.nn.functional.hardswish(torch.tensor(big)).numpy()
    np.testing.assert_allclose(Tensor(big).hardswish().numpy(), want, rtol=2e-3)  # (half rounding)
    tail = np.array([-4.0, -4.3, -3.7, 0.25], np.float16)
    want = torch.nn.functional.gelu(torch.tensor(tail), approximate="tanh").numpy()
    np.testing.assert_array_equal(Tensor(tail).gelu().numpy(), want)
    tiny = np.array([1e-40, -1e-39, 1e-45, 0.0, 1e-3], np.float32)
    x = Tensor(tiny, requires_grad=True)
    x.asinh().sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 1 / np.sqrt(tiny.astype(np.float64) ** 2 + 1), rtol=1e-6)


def test_negative_integer_powers_leave_the_float_range_only_where_the_result_does():
    """x ** -3 of 1e13 is a subnormal (x^3 overflowed, and 1 / inf gave 0); of a tiny x it is inf only where the
    true value is; elsewhere still one rounding of the exact x^|n| (3 ** -2 is 1/9 rounded)."""
    x = np.array([1e13, -8.3e12, 2e19, 1e-13, 3.0, -0.0, np.inf, -np.inf], np.float32)
    for n in (-2, -3):
        want = (x.astype(np.float64) ** n).astype(np.float32)
        np.testing.assert_array_equal(Tensor(x).pow(n).numpy(), want, err_msg=f"x ** {n}")


def test_constant_shifts_by_the_whole_width_or_more_match_pytorch():
    """x << 32 of an int32 is 0 and x >> 32 its sign (-1 or 0), as PyTorch's (the C shift left x unchanged, LLVM's
    gave garbage); a negative constant count is refused with the fix."""
    torch = pytest.importorskip("torch", reason="the reference for shifts")
    for dtype in (np.int8, np.uint8, np.int32, np.int64):
        a = np.array([5, 100 if dtype == np.uint8 else -3, 0], dtype)
        for k in (1, 7, 8, 31, 32, 33, 63, 64, 70):
            np.testing.assert_array_equal((Tensor(a) << k).numpy(), (torch.from_numpy(a) << k).numpy())
            np.testing.assert_array_equal((Tensor(a) >> k).numpy(), (torch.from_numpy(a) >> k).numpy())
    with pytest.raises(ArgumentError, match=r"negative shift count \(-2\).*shift the other way by 2"):
        Tensor([1, 2]) << -2

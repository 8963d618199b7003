"""Pooling, attention, sorting and resampling on the PYTHON device, against numpy loop references, with central
finite-difference gradients where the op is differentiable."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes

RNG = np.random.default_rng(7)
EPS = 1e-6


def check_grad(fn, *shapes, ref, rtol=1e-3, atol=1e-4):
    """d(sum(fn(*xs) * w))/dx for a random `w`: lazy's autograd (float32) against central differences of the numpy
    `ref` in float64."""
    arrays = [RNG.uniform(-2, 2, size=s).astype(np.float32).astype(np.float64) for s in shapes]
    expected = np.asarray(ref(*arrays), dtype=np.float64)
    weights = RNG.standard_normal(expected.shape).astype(np.float32).astype(np.float64)
    tensors = [Tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5, err_msg="forward")
    (out * Tensor(weights.astype(np.float32))).sum().backward()
    for i, (t, a) in enumerate(zip(tensors, arrays)):
        numeric = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [b.copy() for b in arrays], [b.copy() for b in arrays]
            plus[i][idx] += EPS
            minus[i][idx] -= EPS
            numeric[idx] = (np.sum(ref(*plus) * weights) - np.sum(ref(*minus) * weights)) / (2 * EPS)
        assert t.grad is not None
        np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def np_pool(x, kernel, stride, dilation, padding, ceil_mode, mode, count_include_pad=True):
    """Reference 2-d pooling over the last two axes, window by window (torch's output-size rules)."""
    h, w = x.shape[-2:]
    sizes = []
    for n, k, s, d, p in zip((h, w), kernel, stride, dilation, padding):
        span = d * (k - 1) + 1
        out = (-(-(n + 2 * p - span) // s) if ceil_mode else (n + 2 * p - span) // s) + 1
        if ceil_mode and s * (out - 1) >= n + p:
            out -= 1
        sizes.append(out)
    res = np.zeros(x.shape[:-2] + tuple(sizes))
    idx = np.zeros(x.shape[:-2] + tuple(sizes), dtype=np.int64)
    for oy, ox in itertools.product(*map(range, sizes)):
        taps, inside, flat = [], 0, []
        for ty, tx in itertools.product(range(kernel[0]), range(kernel[1])):
            y, xx = oy * stride[0] + ty * dilation[0] - padding[0], ox * stride[1] + tx * dilation[1] - padding[1]
            if y < h + padding[0] and xx < w + padding[1]:
                inside += 1
            if 0 <= y < h and 0 <= xx < w:
                taps.append(x[..., y, xx])
                flat.append(y * w + xx)
        stacked = np.stack(taps, -1)
        if mode == "max":
            res[..., oy, ox] = stacked.max(-1)
            idx[..., oy, ox] = np.array(flat)[stacked.argmax(-1)]
        else:
            res[..., oy, ox] = stacked.sum(-1) / (inside if count_include_pad else len(taps))
    return res, idx


POOLS = [
    dict(kernel_size=(2, 2)),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=1),
    dict(kernel_size=(2, 2), stride=1, dilation=2),
    dict(kernel_size=(3, 3), stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=2, ceil_mode=True),
]


def _ref_args(kw):
    k = kw["kernel_size"]
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    stride = pair(kw.get("stride") or k)
    return k, stride, pair(kw.get("dilation", 1)), pair(kw.get("padding", 0)), kw.get("ceil_mode", False)


@pytest.mark.parametrize("kw", POOLS)
@pytest.mark.parametrize("include", [True, False])
def test_avg_pool2d(kw, include):
    x = RNG.standard_normal((2, 2, 7, 6)).astype(np.float32)
    out = Tensor(x).avg_pool2d(**kw, count_include_pad=include).numpy()
    ref, _ = np_pool(x, *_ref_args(kw), "avg", include)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", POOLS)
def test_max_pool2d(kw):
    x = RNG.standard_normal((2, 2, 7, 6)).astype(np.float32)
    values, indices = Tensor(x).max_pool2d(**kw, return_indices=True)
    ref, ref_idx = np_pool(x, *_ref_args(kw), "max")
    np.testing.assert_allclose(values.numpy(), ref, rtol=1e-6)
    assert indices.dtype == dtypes.int32
    np.testing.assert_array_equal(indices.numpy(), ref_idx)
    np.testing.assert_allclose(Tensor(x).max_pool2d(**kw).numpy(), ref, rtol=1e-6)


def test_pool_padding_forms_and_ints():
    x = np.arange(30, dtype=np.int32).reshape(1, 1, 5, 6)
    ref, _ = np_pool(x, (2, 2), (2, 2), (1, 1), (1, 1), False, "max")
    np.testing.assert_array_equal(Tensor(x).max_pool2d(padding=1).numpy(), ref)
    np.testing.assert_array_equal(Tensor(x).max_pool2d(padding=(1, 1, 1, 1)).numpy(), ref)
    np.testing.assert_array_equal(Tensor(x).max_pool2d(padding=(1, 1)).numpy(), ref)
    # 1-d pooling over the last axis, no channel axes needed
    y = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose(Tensor(y).avg_pool2d(kernel_size=(2,)).numpy(), [0.5, 2.5, 4.5])
    with pytest.raises(ValueError):
        Tensor(x).max_pool2d(padding=(1, 1, 1))


def test_pool_gradients():
    # kinks of max are ties; random inputs have none
    check_grad(lambda x: x.avg_pool2d((3, 2), stride=2, padding=1, count_include_pad=False), (1, 2, 5, 4),
               ref=lambda a: np_pool(a, (3, 2), (2, 2), (1, 1), (1, 1), False, "avg", False)[0])  # fmt: skip
    check_grad(lambda x: x.max_pool2d((2, 2), stride=1, padding=1), (1, 1, 4, 3),
               ref=lambda a: np_pool(a, (2, 2), (1, 1), (1, 1), (1, 1), False, "max")[0])  # fmt: skip


def np_softmax(a, axis=-1):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_sdpa(q, k, v, mask=None, causal=False):
    qk = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = np.tril(np.ones(qk.shape[-2:], dtype=bool))
    if mask is not None:
        qk = np.where(mask, qk, -np.inf) if mask.dtype == bool else qk + mask
    return np_softmax(qk) @ v


def test_scaled_dot_product_attention():
    q, k, v = (RNG.standard_normal(s).astype(np.float32) for s in [(2, 4, 3), (2, 5, 3), (2, 5, 2)])
    mask = RNG.random((4, 5)) > 0.3
    mask[:, 0] = True
    additive = RNG.standard_normal((4, 5)).astype(np.float32)
    sdpa = lambda *a, **kw: Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), *a, **kw).numpy()  # noqa: E731
    np.testing.assert_allclose(sdpa(), np_sdpa(q, k, v), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sdpa(attn_mask=Tensor(mask)), np_sdpa(q, k, v, mask), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sdpa(attn_mask=Tensor(additive)), np_sdpa(q, k, v, additive), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sdpa(is_causal=True), np_sdpa(q, k, v, causal=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        sdpa(attn_mask=Tensor(mask), is_causal=True)


def test_sdpa_gradient():
    check_grad(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), (3, 2), (3, 2), (3, 2),
               ref=lambda q, k, v: np_sdpa(q, k, v, causal=True))  # fmt: skip


@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_with_ties(dim, descending):
    x = RNG.integers(0, 4, (3, 6, 5)).astype(np.float32)
    values, indices = Tensor(x).sort(dim, descending)
    order = np.argsort(-x if descending else x, axis=dim, kind="stable")
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, dim))
    np.testing.assert_array_equal(Tensor(x).argsort(dim, descending).numpy(), order)


def test_sort_ints_inf_and_edges():
    x = np.array([3, -1, 7, -1, 0], dtype=np.int32)
    values, indices = Tensor(x).sort()
    np.testing.assert_array_equal(values.numpy(), np.sort(x))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(x, kind="stable"))
    f = np.array([1.0, np.inf, -np.inf, 0.5], dtype=np.float32)
    np.testing.assert_array_equal(Tensor(f).sort(descending=True)[0].numpy(), [np.inf, 1.0, 0.5, -np.inf])
    one = Tensor([[2.0], [1.0]]).sort(-1)
    np.testing.assert_array_equal(one[0].numpy(), [[2.0], [1.0]])
    np.testing.assert_array_equal(one[1].numpy(), [[0], [0]])


def test_topk():
    x = RNG.standard_normal((4, 7)).astype(np.float32)
    for largest in (True, False):
        values, indices = Tensor(x).topk(3, dim=1, largest=largest)
        order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
        np.testing.assert_array_equal(indices.numpy(), order)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, 1))
    values, indices = Tensor(x).topk(2, dim=0)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-x, axis=0, kind="stable")[:2])
    with pytest.raises(ValueError):
        Tensor(x).topk(8)


def test_sort_topk_gradient():
    check_grad(lambda x: x.sort(-1)[0], (2, 4), ref=lambda a: np.sort(a, -1))
    check_grad(lambda x: x.topk(2, dim=0)[0], (4, 3), ref=lambda a: -np.sort(-a, 0)[:2])


def np_interpolate(x, size, mode, align_corners=False):
    """Reference resampling, one axis at a time from the formulas of torch (linear) and floor(o * in / out)."""
    for i, n_out in enumerate(size):
        axis = x.ndim - len(size) + i
        n_in = x.shape[axis]
        o = np.arange(n_out, dtype=np.float64)
        if mode == "nearest":
            x = np.take(x, np.minimum(np.floor(o * n_in / n_out).astype(int), n_in - 1), axis)
            continue
        if mode == "nearest-exact":
            x = np.take(x, np.minimum(np.floor((o + 0.5) * n_in / n_out).astype(int), n_in - 1), axis)
            continue
        if align_corners:
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
        else:
            src = np.maximum((o + 0.5) * n_in / n_out - 0.5, 0)
        lo = np.minimum(np.floor(src).astype(int), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (src - lo).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
        x = np.take(x, lo, axis) * (1 - frac) + np.take(x, hi, axis) * frac
    return x


@pytest.mark.parametrize("size", [(7, 3), (2, 9), (1, 1)])
@pytest.mark.parametrize(
    "mode,align", [("linear", False), ("linear", True), ("nearest", False), ("nearest-exact", False)]
)
def test_interpolate_2d(size, mode, align):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    out = Tensor(x).interpolate(size, mode=mode, align_corners=align).numpy()
    np.testing.assert_allclose(out, np_interpolate(x, size, mode, align), rtol=1e-5, atol=1e-6)


def test_interpolate_1d_ints_and_errors():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(
        Tensor(x).interpolate((8,)).numpy(), np_interpolate(x, (8,), "linear"), rtol=1e-5, atol=1e-6
    )
    i = np.arange(4, dtype=np.int32)
    out = Tensor(i).interpolate((8,), mode="nearest")
    assert out.dtype == dtypes.int32
    np.testing.assert_array_equal(out.numpy(), np.repeat(i, 2))
    with pytest.raises(ValueError):
        Tensor(x).interpolate((3,), mode="cubic")
    with pytest.raises(ValueError):
        Tensor(x).interpolate((3,), mode="nearest", align_corners=True)


def test_interpolate_gradient():
    check_grad(lambda x: x.interpolate((5, 3)), (1, 3, 4), ref=lambda a: np_interpolate(a, (5, 3), "linear"))

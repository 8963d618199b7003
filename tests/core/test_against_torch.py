# ruff: noqa: E501
# (one case per line in the table reads better than cases broken over several)
"""The Tensor API against PyTorch, values and gradients, when torch is installed (`scripts/test.sh` installs its CPU
build; without it these are skipped with the reason). The loss is mean((out + 1)^2), so every element of
every gradient matters."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazy import Tensor

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the comparisons against it are skipped")
TF = torch.nn.functional


def compare(shapes: list[tuple[int, ...]], torch_fn: Callable[..., Any], lazy_fn: Callable[..., Any] | None = None,
            low: float = -2.0, high: float = 2.0, grad: bool = True, atol: float = 1e-5, rtol: float = 1e-4) -> None:  # fmt: skip
    lazy_fn = lazy_fn or torch_fn
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(low, high, s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(a, requires_grad=grad) for a in arrays]
    ls = [Tensor(a, requires_grad=grad) for a in arrays]
    expected, got = torch_fn(*ts), lazy_fn(*ls)
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), atol=atol, rtol=rtol, err_msg="forward")
    assert got.numpy().dtype == expected.detach().numpy().dtype
    if not grad:
        return
    (expected + 1).square().mean().backward()
    (got + 1).square().mean().backward()
    for i, (t, lz) in enumerate(zip(ts, ls)):
        assert lz.grad is not None, f"input {i} has no gradient"
        want = t.grad.numpy() if t.grad is not None else np.zeros_like(arrays[i])
        np.testing.assert_allclose(lz.grad.numpy(), want, atol=atol * 10, rtol=1e-3, err_msg=f"gradient of input {i}")


IDX = [[0, 2], [1, 1]]
CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Any], Callable[..., Any] | None, dict[str, Any]]] = [
    ("elementwise", [(4, 5), (4, 5)], lambda a, b: a * b - a / (b.abs() + 1) + a**2, None, {}),
    ("trig", [(4, 5)], lambda a: a.sin() + a.cos() + a.tan().clamp(-5, 5) + a.atan(), None, {}),
    ("hyperbolic", [(4, 5)], lambda a: a.sinh() + a.cosh() + a.tanh() + a.asinh(), None, {}),
    ("activations", [(4, 5)], lambda a: TF.gelu(a, approximate="tanh") + TF.silu(a) + TF.mish(a) + TF.softplus(a) + TF.elu(a),
     lambda a: a.gelu() + a.silu() + a.mish() + a.softplus() + a.elu(), {"low": -30, "high": 30}),
    ("reductions", [(3, 4, 5)], lambda a: a.sum(0) + a.mean(1, keepdim=True) + a.amax(2, keepdim=True) + a.std(2, keepdim=True),
     lambda a: a.sum(0) + a.mean(1, keepdim=True) + a.max(2, keepdim=True) + a.std(2, keepdim=True), {}),
    ("softmax", [(3, 5)], lambda a: a.softmax(1) + a.log_softmax(0) + a.logsumexp(1, keepdim=True), None, {}),
    ("cumulative", [(3, 5)], lambda a: a.cumsum(1) + a.cumprod(1) + torch.logcumsumexp(a, 0) + a.cummax(1)[0],
     lambda a: a.cumsum(1) + a.cumprod(1) + a.logcumsumexp(0) + a.cummax(1)[0], {}),
    ("fancy_index", [(3, 4, 5)], lambda a: a[torch.tensor(IDX), :, torch.tensor([4, 0])] + a[1:, None, 2:4].sum(),
     lambda a: a[Tensor(IDX), :, Tensor([4, 0])] + a[1:, None, 2:4].sum(), {}),
    ("gather_scatter", [(3, 5), (2, 5)],
     lambda a, b: a.gather(1, torch.tensor([[0, 4], [2, 2], [1, 0]])).sum() + a.scatter_reduce(0, torch.tensor([[2, 0, 1, 0, 2], [0, 0, 1, 1, 2]]), b, "amax"),
     lambda a, b: a.gather(1, Tensor([[0, 4], [2, 2], [1, 0]])).sum() + a.scatter_reduce(0, Tensor([[2, 0, 1, 0, 2], [0, 0, 1, 1, 2]]), b, "amax"), {}),
    ("conv", [(2, 4, 6, 6), (6, 2, 3, 3)], lambda a, w: TF.conv2d(a, w, groups=2, stride=2, padding=1, dilation=(1, 2)),
     lambda a, w: a.conv2d(w, groups=2, stride=2, padding=1, dilation=(1, 2)), {}),
    ("conv_transpose", [(1, 4, 4, 4), (4, 3, 3, 3)], lambda a, w: TF.conv_transpose2d(a, w, stride=2, padding=1, output_padding=1),
     lambda a, w: a.conv_transpose2d(w, stride=2, padding=1, output_padding=1), {}),
    ("pooling", [(2, 3, 7, 7)], lambda a: TF.max_pool2d(a, 3, 2, 1, ceil_mode=True) + TF.avg_pool2d(a, 3, 2, 1, ceil_mode=True),
     lambda a: a.max_pool2d(3, 2, padding=1, ceil_mode=True) + a.avg_pool2d(3, 2, padding=1, ceil_mode=True), {}),
    ("interpolate", [(1, 2, 4, 5)], lambda a: TF.interpolate(a, (7, 3), mode="bilinear"), lambda a: a.interpolate((7, 3)), {}),
    ("attention", [(1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8)], lambda q, k, v: TF.scaled_dot_product_attention(q, k, v),
     lambda q, k, v: q.scaled_dot_product_attention(k, v), {}),
    ("losses", [(4, 5), (4, 5)],
     lambda a, b: TF.cross_entropy(a, torch.tensor([1, 0, 4, 2]), label_smoothing=0.1) + TF.binary_cross_entropy_with_logits(a, b.sigmoid()),
     lambda a, b: a.cross_entropy(Tensor([1, 0, 4, 2]), label_smoothing=0.1) + a.binary_crossentropy_logits(b.sigmoid()), {}),
    ("matmul_einsum", [(2, 3, 4), (4, 5)], lambda a, b: a @ b + torch.einsum("bij,jk->bik", a, b),
     lambda a, b: a @ b + Tensor.einsum("bij,jk->bik", a, b), {}),
    ("rounding", [(4, 5)], lambda a: (a * 3).floor() + (a * 3).ceil() + (a * 3).round() + (a * 3).trunc() + a, None, {}),
    ("pad_modes", [(2, 3, 4)], lambda a: TF.pad(a, (1, 2), mode="reflect") + TF.pad(a, (1, 2), mode="circular"),
     lambda a: a.pad((1, 2), mode="reflect") + a.pad((1, 2), mode="circular"), {}),
    ("sort_topk", [(3, 6)], lambda a: a.sort(1)[0] + a.topk(6, 1)[0], None, {}),
    ("special_math", [(4, 5), (4, 5)], lambda a, b: a.copysign(b) + torch.logaddexp(a, b) + a.fmod(b.abs() + 0.5),
     lambda a, b: a.copysign(b) + a.logaddexp(b) + a.fmod(b.abs() + 0.5), {}),
]  # fmt: skip


@pytest.mark.parametrize("name, shapes, torch_fn, lazy_fn, options", CASES, ids=[c[0] for c in CASES])
def test_against_torch(name, shapes, torch_fn, lazy_fn, options):
    compare(shapes, torch_fn, lazy_fn, **options)


def test_setitem_against_torch():
    def assign(x: Any) -> Any:
        y = x * 1
        # (no repeated rows: PyTorch's gradient counts every duplicate write, lazy's the one that wins)
        index = torch.tensor([0, 2]) if isinstance(x, torch.Tensor) else Tensor([0, 2])
        y[index, 1:3] = x[1, :2] * 2
        y[:, ::2] = 0.5
        return y

    compare([(3, 5)], assign)


def test_integer_semantics_against_torch():
    a = np.array([7, -7, 7, -7, 5, -1], np.int32)
    b = np.array([2, 2, -2, -2, -5, 4], np.int32)
    ta, tb, la, lb = torch.tensor(a), torch.tensor(b), Tensor(a), Tensor(b)
    for fn in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x & y, lambda x, y: x ^ y):
        np.testing.assert_array_equal(fn(la, lb).numpy(), fn(ta, tb).numpy())
    np.testing.assert_array_equal(
        la.div(lb, rounding_mode="trunc").numpy(), torch.div(ta, tb, rounding_mode="trunc").numpy()
    )
    assert math.isclose((Tensor(2.0) ** 0.5).item(), 2.0**0.5, rel_tol=1e-6)


def test_nearest_interpolation_picks_torchs_source_pixels():
    """PyTorch rounds the source index of "nearest" and "nearest-exact" in float32: at an exact tie (37 * 6 / 74 = 3)
    it picks the pixel below, where exact arithmetic picks 3. Ported models must resample the same pixels."""
    rng = np.random.default_rng(0)
    for (h, w), size in [((6, 100), (74, 99)), ((2, 4), (61, 41)), ((5, 7), (13, 50)), ((1, 2), (3, 41))]:
        x = rng.random((1, 2, h, w), dtype=np.float32)
        for mode in ("nearest", "nearest-exact"):
            want = TF.interpolate(torch.tensor(x), size=size, mode=mode).numpy()
            np.testing.assert_array_equal(Tensor(x).interpolate(size, mode=mode).numpy(), want, err_msg=mode)


def test_negative_narrow_integer_indices_count_from_the_end():
    """An int8/int16 index tensor with negative entries on an axis longer than the dtype's max: idx + size was taken
    in the index's dtype and wrapped (x[int8 -1] on 200 elements selected nothing)."""
    x = np.arange(40000, dtype=np.float32)
    for dtype, idx in ((np.int8, [-1, -2, -100]), (np.int16, [-1, -30000]), (np.uint8, [3, 250])):
        idx = np.array(idx, dtype)
        np.testing.assert_array_equal(Tensor(x)[Tensor(idx)].numpy(), torch.tensor(x)[torch.tensor(idx).long()])
    z = Tensor.zeros(200).contiguous()
    z[Tensor(np.array([-1], np.int8))] = 5.0
    assert z.numpy()[199] == 5 and z.numpy().sum() == 5


def test_half_bilinear_blends_in_float32():
    """PyTorch blends half and bfloat16 images in float32 and rounds once; lazy rounded every lerp (16-18 ulp)."""
    x = (np.random.default_rng(0).standard_normal((1, 2, 4, 9)) * 100).astype(np.float32)
    for dtype in ("float16", "bfloat16"):
        t = torch.tensor(x).to(getattr(torch, dtype))
        want = TF.interpolate(t.float(), size=(7, 5), mode="bilinear").to(t.dtype).float().numpy()
        got = Tensor(t.float().numpy()).cast(dtype).interpolate((7, 5)).float().numpy()
        np.testing.assert_array_equal(got, want, err_msg=dtype)


def test_max_unpool_writes_a_max_picked_by_overlapping_windows_once():
    x = np.array([[[[1.0, 5.0, 2.0], [0.0, 3.0, 1.0]]]], np.float32)
    values, indices = TF.max_pool2d(torch.tensor(x), 2, 1, return_indices=True)  # both windows pick the 5
    want = TF.max_unpool2d(values, indices, 2, 1, output_size=(2, 3))
    got = Tensor(values.numpy()).max_unpool2d(Tensor(indices.numpy().astype(np.int32)), 2, 1, output_size=(2, 3))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_sum_with_a_dtype_casts_the_elements_first():
    """sum(dtype=...) casts each element to the dtype, then sums (PyTorch's and tinygrad's rule): a float sum as int32
    truncates each element (0.6 + 0.6 + 0.9 -> 0), and float32 values past half's range sum to NaN as float16."""
    cases = [(np.array([0.6, 0.6, 0.9], np.float32), "int32"), (np.array([1e5, -1e5], np.float32), "float16"),
             (np.array([100, 100, 100], np.int8), "int16"), (np.array([True, True]), "int64"),
             (np.array([250, 10], np.uint8), "uint8"), (np.array([1.5, 2.25], np.float32), "float64")]  # fmt: skip
    for a, dtype in cases:
        want = torch.tensor(a).sum(dtype=getattr(torch, dtype)).numpy()
        got = Tensor(a).sum(dtype=dtype)
        assert got.numpy().dtype == want.dtype, (dtype, got.dtype)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=dtype)


def test_linspace_ends_exactly_at_stop():
    """The second half counts down from stop (PyTorch's scheme): linspace(0.1, 0.7, 7)[-1] was 0.70000005."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        start, stop = (float(v) for v in rng.uniform(-10, 10, 2).round(2))
        steps = int(rng.integers(2, 40))
        got = Tensor.linspace(start, stop, steps).numpy()
        want = torch.linspace(start, stop, steps).numpy()
        assert got[0] == np.float32(start) and got[-1] == np.float32(stop), (start, stop, steps)
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=3e-6)


def test_half_products_and_attention_do_not_overflow_on_the_way():
    """Half products and running products are taken in float32 and rounded once (300 * 1/300 * ... overflowed in
    half's pairwise partials), and half attention scales q and k before their product (|q.k| = 1.4e5 is inf in half,
    and a softmax over inf is NaN), as PyTorch's."""
    a = np.array([300, 1 / 300, 300, 1 / 300], np.float16)
    for dtype in ("float16", "bfloat16"):
        x, t = Tensor(a.astype(np.float32)).cast(dtype), torch.tensor(a.astype(np.float32)).to(getattr(torch, dtype))
        np.testing.assert_allclose(x.prod().float().numpy(), t.prod().float().numpy(), rtol=1e-2)
        np.testing.assert_allclose(x.cumprod(0).float().numpy(), t.cumprod(0).float().numpy(), rtol=1e-2)
    q = (np.random.default_rng(0).standard_normal((1, 1, 3, 8)) * 100).astype(np.float16)
    got = Tensor(q).scaled_dot_product_attention(Tensor(q), Tensor(q), is_causal=True).float().numpy()
    qf = torch.tensor(q).double()
    want = TF.scaled_dot_product_attention(qf, qf, qf, is_causal=True).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=0.5)


def test_cat_and_stack_keep_negative_zero():
    """cat added each piece to the others' zero padding, and -0.0 + 0.0 is +0.0: 1 / cat([-0.0]) was +inf. Pieces are
    now selected by where they sit (stack, and the reflect/replicate/circular pads, are built on cat)."""
    x, t = Tensor([1.0, -0.0]), torch.tensor([1.0, -0.0])
    np.testing.assert_array_equal((1 / x.cat(x, x)).numpy(), (1 / torch.cat([t, t, t])).numpy())
    np.testing.assert_array_equal((1 / x.stack(x, dim=1)).numpy(), (1 / torch.stack([t, t], dim=1)).numpy())
    for mode in ("replicate", "circular", "reflect"):
        want = 1 / TF.pad(t.reshape(1, 1, 2), (1, 1), mode=mode)
        np.testing.assert_array_equal((1 / x.reshape(1, 1, 2).pad((1, 1), mode=mode)).numpy(), want.numpy())
    # sort's values are a gather (a load per element), which keeps the sign too
    values = Tensor([3.0, -0.0, -2.0]).sort()[0].numpy()
    np.testing.assert_array_equal(1 / values, 1 / torch.tensor([3.0, -0.0, -2.0]).sort()[0].numpy())


def test_half_softmax_and_average_pool_in_float32():
    """A half softmax over 70,000 elements divided by a sum that is inf in half (all zeros), and a half average pool
    summed its window in half (inf); both compute in float32 and round once, as PyTorch's."""
    x = np.ones(70000, np.float16)
    for fn in (lambda t: t.softmax(-1), lambda t: t.log_softmax(-1), lambda t: t.logsumexp(-1)):
        np.testing.assert_allclose(fn(Tensor(x)).float().numpy(), fn(torch.tensor(x).float()).half().float().numpy(),
                                   rtol=1e-3)  # fmt: skip
    img = np.full((1, 1, 40, 40), 100, np.float16)
    assert Tensor(img).avg_pool2d(40).item() == 100.0

"""Layer ops: the whole `Tensor` API on the device, forward and backward, against core's PYTHON reference device.

Core's own tests check what each op means (against numpy and finite differences, on PYTHON). This layer checks
that a device computes the same thing: every op in `OPS` runs on the device under test and on PYTHON with the same
inputs, and the outputs and the gradients of every input must agree. The ops decompose into the primitive ops, so
a plugin that passes this layer runs everything `Tensor` offers. Dtype tests (casts, bitcasts, integer division,
half-precision sums) use the device's `Capabilities.dtypes`. PYTHON under test while emulating a GPU target
(`LAZY_EMULATE`) is compared with a second, plain PYTHON instance (`support.reference_device`)."""

# ruff: noqa: E501
# (the op table keeps one op per line: long lines read better than a table broken over several)

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazy.conformance.support import on_reference, reference_device
from lazy.dtype import HOST_FLOAT32, dtypes, storage_to_values, to_np_dtype, values_to_storage
from lazy.helpers import Context
from lazy.tensor import Tensor

pytestmark = pytest.mark.requires("kernels")  # a copy-only device skips this layer, with its reason


def idx(t: Tensor, values: Any) -> Tensor:
    """An int32 index tensor on t's device (the ops below build their indices where their input lives)."""
    return Tensor(np.asarray(values, dtype=np.int32), device=t.device)


def setitem(x: Tensor, index: Any, value: Any) -> Tensor:
    y = x * 1  # a copy in the graph: the input keeps its gradient
    y[index] = value
    return y


def scatter_reduces(a: Tensor, b: Tensor) -> Tensor:
    index = idx(a, [[2, 0, 1, 0, 2], [0, 0, 1, 1, 2]])
    return a.scatter_reduce(0, index, b, "amax") + a.scatter_reduce(0, index, b, "mean", include_self=False)


def losses(a: Tensor, b: Tensor) -> Tensor:
    labels = idx(a, [1, 0, 4, 2])
    out = a.cross_entropy(labels, label_smoothing=0.1) + a.log_softmax().nll_loss(labels)
    out = out + a.binary_crossentropy_logits(b.sigmoid()) + a.sigmoid().binary_crossentropy(b.sigmoid())
    return out + a.mse_loss(b) + a.l1_loss(b) + a.sparse_categorical_crossentropy(labels)


def setitem_fancy(x: Tensor) -> Tensor:
    y = x * 1
    y[idx(x, [0, 2, 0]), 1:3] = x[1, :2] * 2
    return y


# (name, input shapes, fn, options): options low/high (input range), grad (default True)
OPS: list[tuple[str, list[tuple[int, ...]], Callable[..., Tensor], dict[str, Any]]] = [
    # elementwise and activations
    ("arith", [(3, 4), (3, 4)], lambda a, b: (a + b) * a - b / (b.abs() + 1), {}),
    ("scalar_arith", [(3, 4)], lambda a: 2 - a * 3 + 1 / (a.abs() + 1) + a**2 + 2**a, {}),
    ("floordiv_mod", [(3, 4), (3, 4)], lambda a, b: a // (b.abs() + 0.5) + a % (b.abs() + 0.5), {"grad": False}),
    ("exp_log", [(3, 4)], lambda a: a.exp() + a.abs().add(0.1).log() + a.exp2() + a.abs().add(0.1).log2(), {}),
    ("sqrt_rsqrt", [(3, 4)], lambda a: a.sqrt() + a.rsqrt() + a.reciprocal(), {"low": 0.5, "high": 2}),
    ("trig", [(3, 4)], lambda a: a.sin() + a.cos() + a.tan(), {"low": -1, "high": 1}),
    ("inverse_trig", [(3, 4)], lambda a: a.asin() + a.acos() + a.atan(), {"low": -0.9, "high": 0.9}),
    ("hyperbolic", [(3, 4)], lambda a: a.sinh() + a.cosh() + a.tanh() + a.asinh() + a.atanh(), {"low": -0.9, "high": 0.9}),
    ("acosh_erf", [(3, 4)], lambda a: a.acosh() + a.erf(), {"low": 1.1, "high": 3}),
    ("rounding", [(3, 4)], lambda a: (a * 3).floor() + (a * 3).ceil() + (a * 3).round() + (a * 3).trunc(), {"grad": False}),
    ("clip_min_max", [(3, 4), (3, 4)], lambda a, b: a.clip(-0.5, 0.5) + a.maximum(b) + a.minimum(b), {}),
    ("lerp_where", [(3, 4), (3, 4)], lambda a, b: a.lerp(b, 0.3) + (a > b).where(a, b), {}),
    ("sign_abs", [(3, 4)], lambda a: a.sign() * 2 + a.abs(), {}),
    ("activations1", [(3, 4)], lambda a: a.relu() + a.relu6() + a.leaky_relu(0.1) + a.elu() + a.celu() + a.selu(), {}),
    ("activations2", [(3, 4)], lambda a: a.gelu() + a.quick_gelu() + a.silu() + a.mish() + a.softplus(), {}),
    ("activations3", [(3, 4)], lambda a: a.sigmoid() + a.hardsigmoid() + a.hardswish() + a.hardtanh() + a.logsigmoid() + a.softsign(), {}),
    ("binary_math", [(3, 4), (3, 4)], lambda a, b: a.fmod(b.abs() + 0.5) + a.copysign(b) + a.logaddexp(b), {}),
    ("float_checks", [(3, 4)], lambda a: (a / (a - a)).nan_to_num(1.0, 2.0, -2.0) + a.isclose(a + 1e-9).float(), {"grad": False}),
    ("logical_bitwise", [(3, 4), (3, 4)], lambda a, b: ((a > 0) ^ (b > 0)).where(1.0, 0.0) + ((a > 0) & ~(b > 0)).float(), {"grad": False}),
    # reductions
    ("sum_mean_prod", [(3, 4)], lambda a: a.sum(0) + a.mean(0) + a.prod(0), {}),
    ("max_min_arg", [(3, 4)], lambda a: a.max(1) + a.min(1) + a.argmax(1).float() + a.argmin(1).float(), {}),
    ("var_std_norm", [(3, 4)], lambda a: a.var(1) + a.std(1) + a.norm(axis=1), {}),
    ("softmax_family", [(3, 4)], lambda a: a.softmax() + a.log_softmax(0) + a.logsumexp(1, keepdim=True), {}),
    ("cumulative", [(3, 4)], lambda a: a.cumsum(1) + a.cumprod(1) + a.cummax(1)[0] + a.logcumsumexp(0), {}),
    ("any_all", [(3, 4)], lambda a: (a > 0).any(1).float() + (a > -1).all(0).float().sum(), {"grad": False}),
    # movement and indexing
    ("movement", [(2, 3, 4)], lambda a: a.permute(2, 0, 1).reshape(4, -1).flip(0).T.pad(((1, 0), (0, 2))).shrink(((0, 5), (1, 5))), {}),
    ("pad_modes", [(2, 3, 4)], lambda a: a.pad((1, 2), mode="reflect") + a.pad((1, 2), mode="replicate") + a.pad((1, 2), mode="circular"), {}),
    ("cat_stack_split", [(2, 3), (2, 3)], lambda a, b: a.cat(b, dim=1).stack(b.cat(a, dim=1)).split(2, 2)[1].repeat(1, 2, 1), {}),
    ("repeat_roll_tri", [(3, 4)], lambda a: a.repeat_interleave(2, 0).roll(1, 1)[:3] + a.tril(-1) + a.triu(1), {}),
    ("getitem", [(3, 4, 5)], lambda a: a[1:, ::-2, None, 3] + a[2, 1:3, ::2].sum(), {}),
    ("getitem_fancy", [(3, 4, 5)], lambda a: a[idx(a, [[0, 2], [1, 1]]), :, idx(a, [4, 0])] + a[a.detach() > 0].sum(), {}),
    ("setitem", [(3, 4, 5)], lambda a: setitem(a, (slice(None, None, 2), 1), 7.0), {}),
    ("setitem_fancy", [(3, 4, 5)], setitem_fancy, {}),
    ("gather_scatter", [(3, 5)], lambda a: a.gather(1, idx(a, [[0, 4], [2, 2], [1, 0]])).sum() + a.scatter(0, idx(a, [[2, 0, 1, 0, 2]]), a * 2), {}),
    ("scatter_reduce", [(3, 5), (2, 5)], scatter_reduces, {}),
    ("masked", [(3, 4)], lambda a: a.masked_fill(a.detach() > 0.5, -1.0) + a.masked_select(a.detach() < 0, size=12, fill_value=0).reshape(3, 4), {}),
    ("sort_topk", [(3, 6)], lambda a: a.sort(1)[0] + a.sort(1, descending=True)[1].float() + a.topk(6, 1)[0], {}),
    ("one_hot_diag", [(3, 3)], lambda a: a.diagonal() + idx(a, [2, 0, 1]).one_hot(3).float() @ a + a[0].diag(), {}),
    ("unfold_rearrange", [(2, 6)], lambda a: a.unfold(1, 3, 2).rearrange("b w k -> (b w) k").sum(0), {}),
    # linear algebra and nn
    ("matmul", [(2, 3, 4), (4, 5)], lambda a, b: a @ b, {}),
    ("einsum", [(3, 4), (4, 4)], lambda a, b: Tensor.einsum("ij,jk->ik", a, b) + Tensor.einsum("ii->i", b).sum(), {}),
    ("conv2d", [(1, 4, 6, 6), (6, 2, 3, 3)], lambda a, w: a.conv2d(w, groups=2, stride=(2, 1), padding=1, dilation=(1, 2)), {}),
    ("conv1d_3d", [(1, 2, 7), (3, 2, 3)], lambda a, w: a.conv2d(w, padding=(1, 2)), {}),
    ("conv_transpose2d", [(1, 2, 4, 4), (2, 3, 3, 3)], lambda a, w: a.conv_transpose2d(w, stride=2, padding=1, output_padding=1), {}),
    ("pooling", [(1, 2, 6, 6)], lambda a: a.max_pool2d(3, 2, padding=1) + a.avg_pool2d(3, 2, padding=1, count_include_pad=False), {}),
    ("pool_indices_unpool", [(1, 1, 4, 4)], lambda a: Tensor.max_unpool2d(*a.max_pool2d(return_indices=True)), {}),
    ("interpolate", [(1, 2, 3, 4)], lambda a: a.interpolate((5, 3)) + a.interpolate((5, 3), mode="nearest"), {}),
    ("attention", [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)], lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), {}),
    ("norms", [(2, 3, 4)], lambda a: a.layernorm() + a.batchnorm(None, None, a.mean((0, 2)), a.var((0, 2)).add(1e-5).rsqrt()) + a.normalize(dim=2), {}),
    ("losses", [(4, 5), (4, 5)], losses, {}),
]  # fmt: skip


def _inputs(shapes: list[tuple[int, ...]], low: float, high: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, s).astype(np.float32) for s in shapes]


def _run(fn: Callable[..., Tensor], arrays: list[np.ndarray], device: str, grad: bool) -> list[np.ndarray]:
    """The output and (with grad) the gradient of sum(out * w) for every input, as numpy arrays."""
    with Context(DEVICE=device):
        xs = [Tensor(a, device=device, requires_grad=grad) for a in arrays]
        out = fn(*xs)
        results = [out.numpy()]
        if grad:
            w = np.random.default_rng(1).uniform(0.5, 1.5, results[0].shape).astype(np.float32)
            (out * Tensor(w, device=device)).sum().backward()
            results += [x.grad.numpy() if x.grad is not None else np.zeros_like(a) for x, a in zip(xs, arrays)]
    return results


_REFERENCE: dict[str, list[np.ndarray]] = {}  # the reference device's results, computed once per session


@pytest.mark.parametrize("name, shapes, fn, options", OPS, ids=[op[0] for op in OPS])
def test_op_matches_reference(device_name, name, shapes, fn, options):
    grad = options.get("grad", True)
    arrays = _inputs(shapes, options.get("low", -2.0), options.get("high", 2.0), seed=len(name))
    got = _run(fn, arrays, device_name, grad)
    ref = reference_device(device_name)
    if name not in _REFERENCE:
        with on_reference():
            _REFERENCE[name] = got if device_name == ref else _run(fn, arrays, ref, grad)
    want = _REFERENCE[name]
    for i, (g, w) in enumerate(zip(got, want)):
        what = "forward" if i == 0 else f"gradient of input {i - 1}"
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name} {what}: {g.shape}/{g.dtype} vs {w.shape}/{w.dtype}"
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5, err_msg=f"{name} {what} on {device_name} vs {ref}")


def test_training_step_matches_reference(device_name):
    """One Adam step of a tiny conv net: the updated weights agree with the reference device."""
    from lazy import nn
    from lazy.nn.optim import Adam

    def step(device: str) -> list[np.ndarray]:
        with Context(DEVICE=device):
            Tensor.manual_seed(3)
            conv, lin = nn.Conv2d(1, 2, 3), nn.Linear(8, 3)
            assert conv.bias is not None and lin.bias is not None
            params = [conv.weight, conv.bias, lin.weight, lin.bias]
            opt = Adam(params, lr=0.01)
            x = Tensor(np.linspace(-1, 1, 2 * 36, dtype=np.float32).reshape(2, 1, 6, 6), device=device)
            with Tensor.train():
                opt.zero_grad()
                pooled = conv(x).relu().max_pool2d(2)
                assert isinstance(pooled, Tensor)
                loss = lin(pooled.flatten(1)).cross_entropy(idx(x, [0, 2]))
                loss.backward()
                opt.step()
            return [p.numpy() for p in params]

    ref = reference_device(device_name)  # (outside `on_reference`, which switches emulation off)
    with on_reference():
        want = step(ref)
    for g, w in zip(step(device_name), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_random_words_match_the_reference_generator(device_name, caps):
    """`Ops.THREEFRY`, whose rounds the code generator lowers to uint32 adds, shifts and xors (vectorized where the
    device vectorizes), gives `lazy.ops.threefry2x32`'s words for 4099 random counters under a key read from memory;
    and the first random numbers after a seed are the reference device's."""
    if not caps.supports(dtypes.uint32):
        pytest.skip(f"{device_name} does not compute in uint32 (Capabilities.dtypes), which random numbers need")
    from lazy.ops import threefry2x32

    counts = np.random.default_rng(5).integers(0, 2**32, size=(2, 4099), dtype=np.uint32)
    key = Tensor([0x9E3779B9, 0xDEADBEEF], dtype=dtypes.uint32, device=device_name)
    lows, highs = (Tensor(c, device=device_name) for c in counts)
    got = Tensor._threefry_random_bits(key, lows, highs).numpy()
    words = [threefry2x32(int(a), int(b), 0x9E3779B9, 0xDEADBEEF) for a, b in zip(*counts)]
    want = np.array([w[0] for w in words] + [w[1] for w in words], dtype=np.uint32)
    np.testing.assert_array_equal(got, want, err_msg=f"Threefry words on {device_name}")

    def draws(device: str) -> list[np.ndarray]:
        with Context(DEVICE=device):
            Tensor.manual_seed(11)
            return [Tensor.rand(37).numpy(), Tensor.randn(5).numpy()]

    ref = reference_device(device_name)
    with on_reference():
        want_draws = draws(ref)
    for g, w in zip(draws(device_name), want_draws):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=f"random numbers on {device_name} vs {ref}")
    Tensor.manual_seed(0)


def test_index_ramps_match_numpy(device_name):
    """`arange` and what is built on it (`eye`, one-hot) read an `Ops.RAMP`, whose elements a kernel computes from
    its own index: through reshapes, transposes, pads, expands and slices, in int and float kernels (vectorized where
    the device vectorizes), the values are numpy's."""
    d = device_name
    cases = {
        "arange": (Tensor.arange(37, device=d), np.arange(37)),
        "stepped": (Tensor.arange(3, 100, 7, device=d), np.arange(3, 100, 7)),
        "float": (Tensor.arange(4096, device=d).float() * 0.5 + 1, np.arange(4096, dtype=np.float32) * 0.5 + 1),
        "transposed": (Tensor.arange(12, device=d).reshape(3, 4).T + 1, np.arange(12).reshape(3, 4).T + 1),
        "padded": (Tensor.arange(6, device=d).pad(((2, 3),)) * 3, np.pad(np.arange(6), (2, 3)) * 3),
        "expanded": (
            Tensor.arange(5, device=d).reshape(1, 5).expand(3, 5) * Tensor.arange(3, device=d).reshape(3, 1),
            np.arange(5)[None, :] * np.arange(3)[:, None],
        ),
        "tail": (Tensor.arange(1 << 20, device=d)[-3:], np.arange((1 << 20) - 3, 1 << 20)),
        "eye": (Tensor.eye(4, 6, device=d), np.eye(4, 6, dtype=np.float32)),
        "one-hot": (Tensor([2, 0, 3], device=d).one_hot(5), np.eye(5, dtype=np.int32)[[2, 0, 3]]),
        "summed": (Tensor.arange(1000, device=d).reshape(10, 100).sum(axis=1), np.arange(1000).reshape(10, 100).sum(1)),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} on {device_name}")


def test_padded_constants_keep_their_padding(device_name, caps):
    """A constant padded out to rows that vector lanes cover: the kernel stores rows of the constant then the padding
    (`{c,c,c,c,c,c,0,0}`), which a compiler may fold into one constant vector (gcc 12 targeting AVX-512 expanded the
    memcpy storing one as a broadcast of its first lane: eight c's). For every supported type of 1 to 8 bytes, and for
    the gradient of a pooling whose windows leave the last rows and columns out (a constant inside them, zero
    outside)."""
    d = device_name
    candidates = (dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.float16, dtypes.int16, dtypes.int8)
    for dtype in _supported(caps, candidates, "padded constants"):
        for row, pad in ((6, 2), (4, 4), (12, 4), (14, 2), (10, 6), (3, 1)):
            got = Tensor.full((2, 3, row), 3, dtype=dtype, device=d).pad(((0, 0), (0, 1), (0, pad))).numpy()
            want = np.pad(np.full((2, 3, row), 3, to_np_dtype(dtype)), ((0, 0), (0, 1), (0, pad)))
            np.testing.assert_array_equal(got, want, err_msg=f"{dtype.name} rows of {row} padded by {pad} on {d}")
    x = Tensor.ones(2, 3, 7, 8, device=d, requires_grad=True)
    x.avg_pool2d(3, 3).sum().backward()
    assert x.grad is not None
    want = np.zeros((2, 3, 7, 8), np.float32)
    want[..., :6, :6] = 1 / 9
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=0, err_msg=f"avg_pool2d's gradient on {d}")


# ties (+-2.5, 0.5) and fractions (+-2.75, -0.75) tell truncation (C's float -> int) from rounding and from floor
CAST_VALUES = [0.0, 1.0, -1.0, 2.5, -2.5, 2.75, -2.75, 0.5, -0.75, 7.0, 100.0, -100.0]
# every device computes in these (`test_00_discovery` checks the first two; comparisons give bool)
REQUIRED_DTYPES = (dtypes.float32, dtypes.int32, dtypes.bool)
CAST_KINDS = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16, dtypes.bfloat16,
              dtypes.float32, dtypes.float64)  # fmt: skip


def _sample(dtype: Any) -> np.ndarray:
    """Values every dtype can hold exactly (or nearly), as that dtype's numpy type."""
    if dtype == dtypes.bool:
        return np.array([True, False, True, True, False, False, True, False])
    vals = np.array(CAST_VALUES, np.float64)
    if not dtypes.is_float(dtype):
        vals = np.trunc(vals)
        if dtypes.is_unsigned(dtype):
            vals = np.abs(vals)
    return _held_as(vals, dtype)


def _held_as(vals: np.ndarray, dtype: Any) -> np.ndarray:
    """`vals` as `dtype` holds them, in the numpy type `.numpy()` gives (float32 for bfloat16 and fp8: rounded)."""
    if dtype in HOST_FLOAT32:
        return storage_to_values(values_to_storage(vals, dtype), dtype)
    return vals.astype(to_np_dtype(dtype))


def _supported(caps: Any, candidates: tuple[Any, ...], what: str) -> list[Any]:
    """The `candidates` the device computes in; the required ones must be among them, and the others left out are
    reported as a warning in the run's summary (a loop over fewer dtypes must say so, not pass quietly)."""
    missing = [d for d in REQUIRED_DTYPES if d in candidates and not caps.supports(d)]
    assert not missing, f"the device must support {missing} (Capabilities.dtypes); every device computes in them"
    if skipped := [d for d in candidates if not caps.supports(d)]:
        warnings.warn(f"{what}: not run for {skipped}, which the device does not support (Capabilities.dtypes)",
                      stacklevel=2)  # fmt: skip
    return [d for d in candidates if caps.supports(d)]


def assert_cast_matches(got: np.ndarray, want: np.ndarray, dst: Any, what: str) -> None:
    """Integer and bool results exactly; float results within one unit in the last place of `dst`."""
    if dtypes.is_float(dst):
        ulp = 2.0 ** -dtypes.finfo(dst)[1]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=ulp, atol=0, err_msg=what)
    else:
        assert got.dtype == want.dtype, f"{what}: numpy() gave {got.dtype}, expected {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)


def test_casts_between_every_supported_pair(device_name, caps):
    kinds = _supported(caps, CAST_KINDS, "casts")
    pairs = 0
    for src in kinds:
        for dst in kinds:
            # a negative float converted to an unsigned type is undefined in C: only magnitudes go there
            vals = np.abs(_sample(src)) if dtypes.is_unsigned(dst) and src != dtypes.bool else _sample(src)
            t = Tensor(vals, device=device_name)
            if src in HOST_FLOAT32:  # numpy has no bfloat16 or fp8: start from float32 on the device
                t = t.cast(src)
            assert_cast_matches(t.cast(dst).numpy(), _held_as(vals, dst), dst, f"cast {src} -> {dst} on {device_name}")
            pairs += 1
    assert pairs == len(kinds) ** 2 >= len(REQUIRED_DTYPES) ** 2, f"{pairs} cast pairs ran"


def test_bitcasts_between_same_size_types(device_name, caps):
    groups = [(dtypes.int8, dtypes.uint8), (dtypes.int16, dtypes.uint16, dtypes.float16),
              (dtypes.int32, dtypes.uint32, dtypes.float32), (dtypes.int64, dtypes.uint64, dtypes.float64)]  # fmt: skip
    pairs = 0
    for group in groups:
        supported = _supported(caps, group, "bitcasts")
        for src in supported:
            for dst in supported:
                if src == dst:
                    continue
                arr = _sample(src)
                got = Tensor(arr, device=device_name).bitcast(dst).numpy()
                np.testing.assert_array_equal(got.view(np.uint8), arr.view(np.uint8), err_msg=f"bitcast {src}->{dst}")
                pairs += 1
    assert pairs >= 2, f"only {pairs} bitcast pairs ran; int32 <-> float32 at least must"


def test_integer_division_and_modulo_follow_python(device_name, caps):
    a = np.array([7, -7, 7, -7, 0, 5, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, -5, 4], np.int32)
    x, y = Tensor(a, device=device_name), Tensor(b, device=device_name)
    np.testing.assert_array_equal((x // y).numpy(), a // b)
    np.testing.assert_array_equal((x % y).numpy(), a % b)
    np.testing.assert_array_equal(x.div(y, rounding_mode="trunc").numpy(), np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(x.fmod(y).numpy(), np.fmod(a, b))


def test_float_division_rounding_and_remainders_at_their_edges(device_name, caps):
    """Signed zeros from trunc, floor, ceil and round (C's and PyTorch's: round(-0.4) is -0.0; an int64 round trip
    gives +0.0 on some devices); quotients by divisors so small their reciprocal overflows (0 / 1e-40 is 0, not
    0 * inf); and remainders by an infinite divisor (C's fmod(1, inf) is 1, Python's -1 % inf is inf)."""
    d = device_name
    v = np.array([-0.5, -0.0, 0.0, 0.3, -0.4, -1.5, 2.5, -2.5, 0.5, -0.7, 1e30, -3.75], np.float32)
    for name, want in (("trunc", np.trunc(v)), ("floor", np.floor(v)), ("ceil", np.ceil(v)), ("round", np.round(v))):
        got = getattr(Tensor(v, device=d), name)().numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{name} on {d}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{name}'s sign of zero on {d}")
    a = np.array([0.0, -0.0, 1e-39, 3.0, -6.0, 1.0], np.float32)
    b = np.array([1e-40, 1e-40, 1e-40, -1e-41, 3e-39, 4.0], np.float32)
    with np.errstate(over="ignore"):
        want = a / b
    got = (Tensor(a, device=d) / Tensor(b, device=d)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"division by tiny divisors on {d}")
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"signs of tiny quotients on {d}")
    x = np.array([1.0, -1.0, 5.5, -2.0, 3.0], np.float32)
    y = np.array([np.inf, np.inf, -np.inf, -np.inf, 2.0], np.float32)
    np.testing.assert_array_equal(Tensor(x, device=d).fmod(Tensor(y, device=d)).numpy(), np.fmod(x, y),
                                  err_msg=f"fmod by infinity on {d}")  # fmt: skip
    want = np.array([p % q for p, q in zip(x.tolist(), y.tolist())], np.float32)  # Python's float %
    np.testing.assert_array_equal((Tensor(x, device=d) % Tensor(y, device=d)).numpy(), want,
                                  err_msg=f"% by infinity on {d}")  # fmt: skip


def test_half_precision_sums_accumulate_in_float32(device_name, caps):
    halves = _supported(caps, (dtypes.float16, dtypes.bfloat16), "half-precision sums")
    if not halves:
        pytest.skip("device supports neither float16 nor bfloat16 (Capabilities.dtypes)")
    for dtype in halves:
        total = Tensor.ones(4096, dtype=dtype, device=device_name).sum()  # a half accumulator would stop at 2048
        assert total.dtype == dtype and float(total.cast(dtypes.float32).item()) == 4096.0, f"{dtype} sum"
        mean = (Tensor.ones(3000, dtype=dtype, device=device_name) * 0.1).mean().cast(dtypes.float32).item()
        assert abs(mean - 0.1) < 1e-3, f"{dtype} mean {mean}"


def test_numpy_of_every_supported_dtype(device_name, caps):
    kinds = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
             dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)  # fmt: skip
    for dtype in _supported(caps, kinds, "numpy()"):
        arr = _sample(dtype)
        got = (Tensor(arr, device=device_name) + Tensor(np.zeros_like(arr), device=device_name)).numpy()
        assert got.dtype == arr.dtype
        np.testing.assert_array_equal(got, arr)


def test_gathers_load_at_the_index(device_name, caps):
    """A gather (`Ops.GATHER`: gather, one index tensor, Embedding) is a load whose address comes from a loaded index,
    gated on the index being in range: rows of a table, columns, a transposed and a flipped source, int8/int64
    indices, a -1 and an index past the end (both read 0), bool data, its gradient, and negative zeros kept."""
    d = device_name
    rng = np.random.default_rng(0)
    table = rng.standard_normal((37, 19)).astype(np.float32)
    table[5, 3] = -0.0
    x = Tensor(table, device=d)
    rows = np.array([5, 0, 36, 5, 17], np.int32)
    np.testing.assert_array_equal(x[Tensor(rows, device=d)].numpy(), table[rows], err_msg=f"rows on {d}")
    assert np.signbit(x[Tensor(rows, device=d)].numpy()[0, 3]), f"-0.0 gathered as +0.0 on {d}"
    cols = rng.integers(0, 19, (37, 7))
    for dtype in ("int8", "int32", "int64" if dtypes.int64 in caps.dtypes else "int32"):
        got = x.gather(1, Tensor(cols.astype(dtype), device=d)).numpy()
        np.testing.assert_array_equal(got, np.take_along_axis(table, cols, 1), err_msg=f"{dtype} columns on {d}")
    np.testing.assert_array_equal(x.T[Tensor(rows[:3] % 19, device=d)].numpy(), table.T[rows[:3] % 19])
    np.testing.assert_array_equal(x.flip(0)[Tensor(rows, device=d)].numpy(), table[::-1][rows])
    with Context(CHECK_INDEX=0):  # (LAZY_CHECK_INDEX=1 would refuse them before any kernel runs)
        edge = x.gather(0, Tensor(np.array([[-1] * 19, [37] * 19, [2] * 19], np.int32), device=d)).numpy()
    np.testing.assert_array_equal(
        edge, np.stack([np.zeros(19), np.zeros(19), table[2]]), err_msg=f"out of range on {d}"
    )
    mask = table > 0
    np.testing.assert_array_equal(Tensor(mask, device=d)[Tensor(rows, device=d)].numpy(), mask[rows])
    w = Tensor(table, device=d, requires_grad=True)
    (w[Tensor(rows, device=d)] * 2).sum().backward()
    want = np.zeros_like(table)
    np.add.at(want, rows, 2.0)
    assert w.grad is not None, f"no gradient reached the gathered table on {d}"
    np.testing.assert_array_equal(w.grad.numpy(), want, err_msg=f"gather's gradient on {d}")
    # an index dtype whose largest value is below the row count: every value is in range (the bound 256 would wrap
    # to 0 in uint8, and a byte-level Embedding read zeros)
    bytes_table = rng.standard_normal((256, 24)).astype(np.float32)
    ids = np.frombuffer(b"hello, world", dtype=np.uint8)
    got = Tensor(bytes_table, device=d)[Tensor(ids, device=d).cast(dtypes.int32)].numpy()
    np.testing.assert_array_equal(got, bytes_table[ids], err_msg=f"x[idx] as int32 on {d}")
    got = Tensor(bytes_table, device=d).gather(0, Tensor(ids, device=d).reshape(-1, 1).expand(len(ids), 24)).numpy()
    np.testing.assert_array_equal(got, bytes_table[ids], err_msg=f"uint8 rows of 256 on {d}")
    narrow = rng.integers(0, 128, 9).astype(np.int8)
    rows8 = Tensor(table[:, :2].copy(), device=d).gather(0, Tensor(narrow % 37, device=d).reshape(-1, 1).expand(9, 2))
    np.testing.assert_array_equal(rows8.numpy(), table[(narrow % 37).astype(int), :2], err_msg=f"int8 rows on {d}")
    # whole rows (one index for a row's lanes: one vector load at the row, zeros past the table) and their
    # gradient, with a row picked twice (the tokens' gradients summed, then gathered per row)
    wide = rng.standard_normal((40, 64)).astype(np.float32)
    with Context(CHECK_INDEX=0):
        got = Tensor(wide, device=d)[Tensor(np.array([3, 40, 7, 100], np.int32), device=d)].numpy()
    np.testing.assert_array_equal(got, np.stack([wide[3], np.zeros(64), wide[7], np.zeros(64)]),
                                  err_msg=f"whole rows on {d}")  # fmt: skip
    picks = np.array([3, 39, 3, 0], np.int32)
    gw = rng.standard_normal((4, 64)).astype(np.float32)
    ww = Tensor(wide, device=d, requires_grad=True)
    (ww[Tensor(picks, device=d)] * Tensor(gw, device=d)).sum().backward()
    want = np.zeros_like(wide)
    np.add.at(want, picks, gw)
    assert ww.grad is not None, f"no gradient reached the gathered rows on {d}"
    np.testing.assert_allclose(ww.grad.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=f"rows' gradient on {d}")


def test_long_sorts_are_stable_and_order_nan_last(device_name, caps):
    """A sort of 700 elements (a sorting network over (value, position) keys where the device has uint64, else
    ranks): stable (ties keep their order, -0.0 ties with 0.0 and stays -0.0), NaN last ascending and first
    descending, infinities in place; ints with many ties; a batch sorted along its middle axis; topk of the same."""
    d = device_name
    rng = np.random.default_rng(3)
    n = 700
    a = rng.standard_normal(n).astype(np.float32)
    a[::9] = a[4]
    a[[5, 19, 40]] = np.nan
    a[[7, 11]] = [-0.0, 0.0]
    a[[13, 17]] = [np.inf, -np.inf]
    positions = np.arange(n)
    ascending = np.argsort(a, kind="stable")  # numpy: NaN last, -0.0 == 0.0
    descending = np.lexsort((positions, np.where(np.isnan(a), 0, -a), ~np.isnan(a)))
    for flag, want in ((False, ascending), (True, descending)):
        values, indices = Tensor(a, device=d).sort(descending=flag)
        np.testing.assert_array_equal(indices.numpy(), want, err_msg=f"order (descending={flag}) on {d}")
        got = values.numpy()
        np.testing.assert_array_equal(got.view(np.uint32), a[want].view(np.uint32), err_msg=f"values on {d}")
    ints = rng.integers(-4, 4, n).astype(np.int32)
    np.testing.assert_array_equal(Tensor(ints, device=d).argsort().numpy(), np.argsort(ints, kind="stable"))
    batch = rng.standard_normal((2, n, 3)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(batch, device=d).sort(1)[0].numpy(), np.sort(batch, 1))
    top_values, top_indices = Tensor(a, device=d).topk(5)
    np.testing.assert_array_equal(top_indices.numpy(), descending[:5], err_msg=f"topk on {d}")
    assert np.isnan(top_values.numpy()[:3]).all(), f"topk puts NaN first on {d}"
    np.testing.assert_array_equal(Tensor(a, device=d).topk(9, largest=False)[1].numpy(), ascending[:9],
                                  err_msg=f"topk of the smallest on {d}")  # fmt: skip
    np.testing.assert_array_equal(Tensor(batch, device=d).topk(4, 1)[0].numpy(), -np.sort(-batch, 1)[:, :4],
                                  err_msg=f"topk along a middle axis on {d}")  # fmt: skip

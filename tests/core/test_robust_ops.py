"""Ops at their awkward inputs: sorting and extrema with NaN, -0.0 and infinities (PyTorch's order, valid indices),
max/min/argmax/argmin over no elements, the LAZY_CHECK_INDEX range check of index tensors, and the messages for
convolution and pooling arguments that cannot work. Expected values are PyTorch's (2.13), written out."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lazy.nn as nn
from lazy import Context, Tensor, dtypes
from lazy.engine.jit import TinyJit
from lazy.helpers import GlobalCounters, ShapeError

NAN, INF = math.nan, math.inf
# numpy/PyTorch order: -inf < ... < -0.0 == 0.0 < ... < inf < NaN; equal values keep their order (a stable sort)
SPECIAL = [-0.0, 0.0, INF, -INF, 1.0, 1.0, NAN, NAN]


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def assert_permutations(indices: np.ndarray, n: int) -> None:
    """Every row of `indices` (along the last axis) is a permutation of 0..n-1."""
    rows = indices.reshape(-1, n)
    for row in rows:
        assert sorted(row.tolist()) == list(range(n)), f"not a permutation of 0..{n - 1}: {row}"


# -- sorting with NaN, on every kind of device ------------------------------------------------------------------------


CL = pytest.param("CL", marks=pytest.mark.devices("CL"))  # (skipped, saying why, where CL cannot run)


@pytest.mark.parametrize("device", ["PYTHON", "CPU", CL])
def test_sort_puts_nan_last_ascending_and_first_descending(device):
    x = Tensor([3.0, NAN, 1.0], device=device)
    values, indices = x.sort()
    np.testing.assert_array_equal(values.numpy(), [1.0, 3.0, NAN])
    np.testing.assert_array_equal(indices.numpy(), [2, 0, 1])
    values, indices = x.sort(descending=True)
    np.testing.assert_array_equal(values.numpy(), [NAN, 3.0, 1.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 0, 2])


@pytest.mark.parametrize("device", ["PYTHON", "CPU", CL])
def test_sort_special_values_gives_a_stable_permutation(device):
    x = Tensor(SPECIAL, device=device)
    values, indices = x.sort()
    np.testing.assert_array_equal(values.numpy(), [-INF, -0.0, 0.0, 1.0, 1.0, INF, NAN, NAN])
    np.testing.assert_array_equal(indices.numpy(), [3, 0, 1, 4, 5, 2, 6, 7])
    values, indices = x.sort(descending=True)
    np.testing.assert_array_equal(values.numpy(), [NAN, NAN, INF, 1.0, 1.0, -0.0, 0.0, -INF])
    np.testing.assert_array_equal(indices.numpy(), [6, 7, 2, 4, 5, 0, 1, 3])
    np.testing.assert_array_equal(x.argsort().numpy(), [3, 0, 1, 4, 5, 2, 6, 7])


@pytest.mark.parametrize("device", ["PYTHON", "CPU", CL])
def test_topk_with_nan_takes_it_as_the_largest(device):
    x = Tensor(SPECIAL, device=device)
    values, indices = x.topk(3)
    np.testing.assert_array_equal(values.numpy(), [NAN, NAN, INF])
    np.testing.assert_array_equal(indices.numpy(), [6, 7, 2])  # (PyTorch's topk is not stable: it gives 7, 6, 2)
    values, indices = x.topk(3, largest=False)
    np.testing.assert_array_equal(values.numpy(), [-INF, 0.0, 0.0])
    np.testing.assert_array_equal(indices.numpy(), [3, 0, 1])


def test_sort_with_nan_along_an_inner_axis():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    a[rng.random((4, 6)) < 0.3] = np.nan
    a[0, :3] = [np.inf, -np.inf, np.nan]
    for descending in (False, True):
        values, indices = Tensor(a).sort(0, descending=descending)
        assert_permutations(indices.numpy().T.copy(), 4)
        # numpy's stable sort puts NaN last; descending (which numpy lacks) takes NaN as the largest, as PyTorch
        # does: NaNs first, then the rest by decreasing value, ties in order
        nan = np.isnan(a)
        order = np.lexsort((np.where(nan, 0, -a), ~nan), axis=0) if descending else np.argsort(a, 0, kind="stable")
        np.testing.assert_array_equal(indices.numpy(), order)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, axis=0))


def test_nan_handling_adds_no_kernel():
    """The NaN terms are elementwise on the (i, j) grid: a float sort or cummax runs as many kernels as an int one."""
    counts = []
    for dtype in (dtypes.float32, dtypes.int32):
        x = Tensor([5, 1, 4, 2, 3], dtype=dtype).realize()
        GlobalCounters.reset()
        Tensor.realize(*x.sort(), *x.cummax(0))
        counts.append(GlobalCounters.kernel_count)
    assert counts[0] == counts[1], f"float sort/cummax ran {counts[0]} kernels, int {counts[1]}"


def test_sort_of_integers_and_bools_unchanged():
    values, indices = Tensor([3, -1, 3, 0], dtype=dtypes.int32).sort(descending=True)
    np.testing.assert_array_equal(values.numpy(), [3, 3, 0, -1])
    np.testing.assert_array_equal(indices.numpy(), [0, 2, 3, 1])
    np.testing.assert_array_equal(Tensor([True, False, True]).argsort().numpy(), [1, 0, 2])


# -- extrema with NaN -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["PYTHON", "CPU", CL])
def test_max_min_propagate_nan_and_arg_functions_point_at_it(device):
    for data, at in (([3.0, NAN, 1.0], 1), ([NAN, 3.0, NAN], 0), ([1.0, 3.0, NAN], 2)):
        x = Tensor(data, device=device)
        assert math.isnan(x.max().item()) and math.isnan(x.min().item())
        assert x.argmax().item() == at and x.argmin().item() == at
    rows = Tensor([[1.0, NAN], [NAN, 2.0], [5.0, 4.0]], device=device)
    np.testing.assert_array_equal(rows.max(1).numpy(), [NAN, NAN, 5.0])
    np.testing.assert_array_equal(rows.argmax(1).numpy(), [1, 0, 0])
    np.testing.assert_array_equal(rows.argmin(1).numpy(), [1, 0, 1])


def test_cummax_cummin_index_nan_where_it_first_appears():
    values, indices = Tensor([1.0, NAN, 2.0, NAN]).cummax(0)
    np.testing.assert_array_equal(values.numpy(), [1.0, NAN, NAN, NAN])
    np.testing.assert_array_equal(indices.numpy(), [0, 1, 1, 1])  # the first index reaching it (lazy's rule)
    values, indices = Tensor([1.0, NAN, 0.0]).cummin(0)
    np.testing.assert_array_equal(values.numpy(), [1.0, NAN, NAN])
    np.testing.assert_array_equal(indices.numpy(), [0, 1, 1])


def test_max_pool_indices_point_at_a_nan():
    values, indices = Tensor([[[[1.0, NAN], [3.0, 2.0]]]]).max_pool2d(2, return_indices=True)
    assert math.isnan(values.item()) and indices.item() == 1
    values, indices = Tensor([[[[1.0, 5.0, 0.0, 0.0], [NAN, 2.0, 0.0, 7.0]]]]).max_pool2d(2, return_indices=True)
    np.testing.assert_array_equal(values.numpy().ravel(), [NAN, 7.0])
    np.testing.assert_array_equal(indices.numpy().ravel(), [4, 7])


# -- reductions over no elements --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize(("shape", "axis", "empty_axis"), [((0,), None, None), ((2, 0), 1, 1), ((0, 3), 0, 0)])
def test_extrema_of_nothing_raise(op, shape, axis, empty_axis):
    with pytest.raises(IndexError) as info:  # PyTorch raises IndexError for an axis, RuntimeError for all of them
        getattr(Tensor.zeros(*shape), op)(axis)
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert message.startswith(f"{op}:") and str(shape) in message
    assert empty_axis is None or f"axis {empty_axis}" in message


def test_reductions_that_have_a_result_for_nothing():
    empty = Tensor.zeros(0, 3)
    assert empty.max(1).shape == (0,) and empty.argmin(1).shape == (0,)  # no element to reduce, no row either
    assert empty.sum().item() == 0 and empty.prod().item() == 1
    assert Tensor.zeros(0, dtype=dtypes.bool).any().item() is False
    assert Tensor.zeros(0, dtype=dtypes.bool).all().item() is True
    assert Tensor.zeros(0).logsumexp(0).item() == -INF
    assert Tensor.zeros(3, 0).softmax(-1).shape == (3, 0) and Tensor.zeros(3, 0).log_softmax(-1).shape == (3, 0)
    assert Tensor(2.0).max().item() == 2.0 and Tensor(2.0).argmax().item() == 0
    # an empty index: setitem and scatter leave everything in place (their internal max sees no candidates)
    x = Tensor([1.0, 2.0, 3.0])
    x[Tensor.zeros(0, dtype=dtypes.int32)] = 9.0
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    empty_index = Tensor.zeros(0, dtype=dtypes.int32)
    np.testing.assert_array_equal(x.scatter(0, empty_index, Tensor.zeros(0)).numpy(), [1.0, 2.0, 3.0])
    out = x.scatter_reduce(0, empty_index, Tensor.zeros(0), "amax")
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])


# -- LAZY_CHECK_INDEX -------------------------------------------------------------------------------------------------

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _setitem(index: Tensor) -> Tensor:
    x = Tensor(X).clone()
    x[index] = 1.0
    return x


BAD_INDEX = [  # (op, the call with a bad index, its name in the message, the bad value, its position, valid range)
    ("index", lambda: Tensor(X)[Tensor([0, 3])], "index", 3, (1,), "-3 to 2"),
    ("index -4", lambda: Tensor(X)[:, Tensor([[0], [-5]])], "index", -5, (1, 0), "-4 to 3"),
    ("setitem", lambda: _setitem(Tensor([7])), "setitem", 7, (0,), "-3 to 2"),
    ("index_select", lambda: Tensor(X).index_select(1, Tensor([1, 4])), "index_select", 4, (1,), "-4 to 3"),
    ("gather", lambda: Tensor(X).gather(1, Tensor([[0], [4], [1]])), "gather", 4, (1, 0), "0 to 3"),
    ("gather -1", lambda: Tensor(X).gather(0, Tensor([[-1, 0]])), "gather", -1, (0, 0), "0 to 2"),
    ("scatter", lambda: Tensor(X).scatter(0, Tensor([[3]]), 1.0), "scatter", 3, (0, 0), "0 to 2"),
    (
        "scatter_reduce",
        lambda: Tensor(X).scatter_reduce(1, Tensor([[5]]), Tensor([[1.0]]), "sum"),
        "scatter_reduce",
        5,
        (0, 0),
        "0 to 3",
    ),  # fmt: skip
    ("one_hot", lambda: Tensor([0, 2, -1]).one_hot(3), "one_hot", -1, (2,), "0 to 2"),
    ("Embedding", lambda: nn.Embedding(5, 2)(Tensor([[1, 5]])), "Embedding", 5, (0, 1), "0 to 4"),
    ("nll_loss", lambda: Tensor(X).log_softmax(1).nll_loss(Tensor([0, 4, 1])), "nll_loss", 4, (1,), "0 to 3"),
    (
        "sparse_categorical_crossentropy",
        lambda: Tensor(X).sparse_categorical_crossentropy(Tensor([0, 1, 9])),
        "sparse_categorical_crossentropy",
        9,
        (2,),
        "0 to 3",
    ),  # fmt: skip
    (
        "max_unpool2d",
        lambda: Tensor.ones(1, 1, 1, 1).max_unpool2d(Tensor([[[[4]]]]), 2),
        "max_unpool2d",
        4,
        (0, 0, 0, 0),
        "0 to 3",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("case", "call", "op", "value", "position", "valid"), BAD_INDEX, ids=[c[0] for c in BAD_INDEX])
def test_check_index_names_the_op_the_value_and_where(case, call, op, value, position, valid):
    with Context(CHECK_INDEX=1), pytest.raises(IndexError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{op}: index {value} at position {position}"), message
    assert f"valid: {valid}" in message


@pytest.mark.parametrize(("case", "call", "op", "value", "position", "valid"), BAD_INDEX, ids=[c[0] for c in BAD_INDEX])
def test_without_check_index_a_bad_index_is_not_read(case, call, op, value, position, valid, monkeypatch):
    """Off (the default for speed), nothing is read back: a bad index selects zeros (or nothing), no error."""

    def no_sync(self):
        raise AssertionError("an index was read on the host although LAZY_CHECK_INDEX=0")

    with Context(CHECK_INDEX=0):
        monkeypatch.setattr(Tensor, "numpy", no_sync)
        call()  # builds the graph only: none of these ops reads an integer index on the host


def test_check_index_accepts_every_valid_index():
    with Context(CHECK_INDEX=1):
        x = Tensor(X)
        np.testing.assert_array_equal(x[Tensor([-3, 2, 0])].numpy(), X[[-3, 2, 0]])  # negatives wrap, as in numpy
        np.testing.assert_array_equal(x[Tensor([[0]]), Tensor([-4, 3])].numpy(), X[[[0]], [-4, 3]])
        np.testing.assert_array_equal(x.gather(1, Tensor([[3], [0], [2]])).numpy(), X[[0, 1, 2], [3, 0, 2]][:, None])
        np.testing.assert_array_equal(Tensor([2, 0]).one_hot(3).numpy(), [[0, 0, 1], [1, 0, 0]])
        logp = Tensor([[-INF, -1.0], [-0.5, -2.0]])  # an ignored label (-100) next to a -inf log-probability
        assert logp.nll_loss(Tensor([1, -100]), ignore_index=-100).item() == 1.0
        assert logp.nll_loss(Tensor([-100, 0]), ignore_index=-100, reduction="sum").item() == 0.5
        assert x[Tensor.zeros(0, dtype=dtypes.int32)].shape == (0, 4)


def test_check_index_inside_jit_checks_while_capturing():
    """The check runs whenever the function runs eagerly (the first call and the capture); a replay runs only the
    captured kernels and is not checked."""
    table = Tensor(X).realize()

    @TinyJit
    def pick(index: Tensor) -> Tensor:
        return (table[(index + 1) % 3] * 2).realize()

    with Context(CHECK_INDEX=1):
        for k in range(4):
            rows = np.array([k % 3, 2, 0])
            np.testing.assert_array_equal(pick(Tensor(rows, dtype=dtypes.int32)).numpy(), X[(rows + 1) % 3] * 2)
        with pytest.raises(IndexError, match="index: index 3 at position"):
            TinyJit(lambda index: table[index].realize())(Tensor([0, 3], dtype=dtypes.int32))


# -- convolution and pooling arguments --------------------------------------------------------------------------------

IMAGE, WEIGHT = np.ones((1, 4, 5, 5), np.float32), np.ones((2, 4, 3, 3), np.float32)
BAD_ARGUMENTS = [
    (
        "conv2d stride 0",
        lambda: Tensor(IMAGE).conv2d(Tensor(WEIGHT), stride=0),
        ValueError,
        "conv2d: stride must be an int >= 1",
    ),
    (
        "conv2d dilation",
        lambda: Tensor(IMAGE).conv2d(Tensor(WEIGHT), dilation=(1, 0)),
        ValueError,
        "conv2d: dilation must be",
    ),
    ("conv2d stride len", lambda: Tensor(IMAGE).conv2d(Tensor(WEIGHT), stride=(1, 1, 1)), ValueError, "sequence of 2"),
    (
        "conv2d groups 0",
        lambda: Tensor(IMAGE).conv2d(Tensor(WEIGHT), groups=0),
        ValueError,
        "conv2d: groups must be an int >= 1",
    ),
    (
        "conv2d groups C_out",
        lambda: Tensor(IMAGE).conv2d(Tensor.ones(3, 2, 3, 3), groups=2),
        ShapeError,
        "3 output channels .* do not split into 2 groups",
    ),  # fmt: skip
    (
        "conv2d empty kernel",
        lambda: Tensor(IMAGE).conv2d(Tensor.ones(2, 4, 0, 3)),
        ShapeError,
        "kernel size an int >= 1",
    ),
    (
        "conv_transpose2d stride 0",
        lambda: Tensor(IMAGE).conv_transpose2d(Tensor.ones(4, 2, 3, 3), stride=0),
        ValueError,
        "conv_transpose2d: stride must be",
    ),  # fmt: skip
    (
        "conv_transpose2d groups 0",
        lambda: Tensor(IMAGE).conv_transpose2d(Tensor.ones(4, 2, 3, 3), groups=0),
        ValueError,
        "groups must be",
    ),  # fmt: skip
    (
        "conv_transpose2d output_padding",
        lambda: Tensor(IMAGE).conv_transpose2d(Tensor.ones(4, 2, 3, 3), output_padding=1),
        ValueError,
        "output_padding 1 must be smaller than the stride",
    ),  # fmt: skip
    ("max_pool2d stride 0", lambda: Tensor(IMAGE).max_pool2d(2, stride=0), ValueError, "max_pool2d: stride must be"),
    ("max_pool2d kernel 0", lambda: Tensor(IMAGE).max_pool2d(0), ValueError, "max_pool2d: kernel_size must be"),
    ("avg_pool2d kernel -1", lambda: Tensor(IMAGE).avg_pool2d((2, -1)), ValueError, "avg_pool2d: kernel_size must be"),
    (
        "avg_pool2d dilation 0",
        lambda: Tensor(IMAGE).avg_pool2d(2, dilation=0),
        ValueError,
        "avg_pool2d: dilation must be",
    ),
    ("Conv2d groups", lambda: nn.Conv2d(4, 3, 3, groups=2), ValueError, r"out_channels \(3\) must both be multiples"),
    ("Conv2d kernel 0", lambda: nn.Conv2d(4, 2, 0), ValueError, "Conv2d: kernel_size must be an int >= 1"),
]


@pytest.mark.parametrize(("case", "call", "error", "match"), BAD_ARGUMENTS, ids=[c[0] for c in BAD_ARGUMENTS])
def test_window_arguments_that_cannot_work_are_named(case, call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_window_arguments_that_work_still_do():
    out = Tensor(IMAGE).conv2d(Tensor(WEIGHT), stride=(2, 1), dilation=[1, 2], padding=1)
    assert out.shape == (1, 2, 3, 3)
    assert Tensor(IMAGE).conv_transpose2d(Tensor.ones(4, 2, 3, 3), stride=2, output_padding=1).shape == (1, 2, 12, 12)
    assert Tensor(IMAGE).max_pool2d((2, 3), stride=np.int64(1)).shape == (1, 4, 4, 3)
    assert nn.Conv2d(4, 2, (1, 3), groups=2)(Tensor(IMAGE)).shape == (1, 2, 5, 3)


def special_floats(rng: np.random.Generator, n: int, nans: int, ties: int) -> np.ndarray:
    """n normal float32s with `nans` NaNs and `ties` copies of one value at random places, -0.0, 0.0, inf and -inf
    at positions 1-4 (the value tied is the one at position 5)."""
    floats = rng.standard_normal(n).astype(np.float32)
    floats[rng.integers(0, n, nans)] = np.float32(NAN)
    floats[rng.integers(0, n, ties)] = floats[5]
    floats[[1, 2, 3, 4]] = [-0.0, 0.0, INF, -INF]
    return floats


@pytest.mark.parametrize("device", ["CPU"])  # (the conformance suite sorts 700 elements on every device)
def test_long_sorts_use_a_network_and_match_pytorch(device):
    """From SORT_NETWORK_MIN elements a sort orders (value, position) keys with a bitonic network: log^2 n
    elementwise kernels, no n x n grid (a 65536-element sort took 20 s). Every 32-bit and narrower dtype against
    PyTorch's stable sort (values bit for bit), both directions, a length that is no power of two, a batch along an
    inner axis; 64-bit dtypes keep the ranks and still sort right."""
    torch = pytest.importorskip("torch", reason="the reference for long sorts")
    from lazy.tensor_nn import SORT_NETWORK_MIN

    rng = np.random.default_rng(5)
    n = SORT_NETWORK_MIN + 89
    floats = special_floats(rng, n, nans=40, ties=40)
    cases = [floats, floats.astype(np.float16), rng.integers(-3, 3, n).astype(np.int8),
             rng.integers(-2**31, 2**31 - 1, n).astype(np.int32), rng.integers(0, 2**32 - 1, n).astype(np.uint32),
             rng.integers(0, 3, n).astype(np.uint8), rng.random(n) > 0.5, rng.integers(-9, 9, n).astype(np.int64),
             rng.standard_normal(n)]  # fmt: skip
    for a in cases:
        for descending in (False, True):
            values, indices = Tensor(a, device=device).sort(descending=descending)
            want_values, want_indices = torch.sort(torch.from_numpy(a.astype(np.int64) if a.dtype == np.uint32 else a),
                                                   descending=descending, stable=True)  # fmt: skip
            np.testing.assert_array_equal(indices.numpy(), want_indices.numpy(), err_msg=f"{a.dtype} {descending}")
            got = values.numpy()
            np.testing.assert_array_equal(got.view(np.uint8), want_values.numpy().astype(a.dtype).view(np.uint8))
    batch = rng.standard_normal((3, n, 2)).astype(np.float32)
    np.testing.assert_array_equal(
        Tensor(batch, device=device).argsort(1, descending=True).numpy(),
        torch.sort(torch.from_numpy(batch), dim=1, descending=True, stable=True)[1].numpy(),
    )
    x = Tensor(floats, device=device).realize()
    GlobalCounters.reset()
    x.argsort().realize()
    levels = (n - 1).bit_length()
    assert GlobalCounters.kernel_count <= levels * (levels + 1) // 2 + 4, f"{GlobalCounters.kernel_count} kernels"
    ops = GlobalCounters.global_ops
    assert ops < 8 * n * levels * levels, f"{ops} operations: an n x n grid?"


@pytest.mark.parametrize("device", ["CPU"])  # (the conformance suite takes topk of 700 elements on every device)
def test_topk_of_a_few_takes_them_one_by_one(device):
    """topk of k well under the sorting network's stage count takes the k smallest (value, position) keys one round
    at a time (k reductions over n, no sort: topk(10) of 50257 took 37 ms through the network's 136 stages): the same
    values and indices as PyTorch's stable sort's first k, for every key dtype, both directions, NaN and ties, an
    inner axis, k = 0; few kernels; and the gradient reaches the picked elements only."""
    torch = pytest.importorskip("torch", reason="the reference for topk")
    from lazy.tensor_nn import SORT_NETWORK_MIN, _network_stages, _selects

    rng = np.random.default_rng(8)
    n = SORT_NETWORK_MIN + 301
    floats = special_floats(rng, n, nans=30, ties=60)
    cases = [floats, floats.astype(np.float16), rng.integers(-3, 3, n).astype(np.int8),
             rng.integers(0, 2**32 - 1, n).astype(np.uint32), rng.random(n) > 0.5]  # fmt: skip
    k_most = _network_stages(n) // 2
    assert _selects(n, k_most) and not _selects(n, k_most + 1) and not _selects(SORT_NETWORK_MIN - 1, 1)
    for a in cases:
        reference = torch.from_numpy(a.astype(np.int64) if a.dtype == np.uint32 else a)
        for largest in (True, False):
            want_values, want_indices = torch.sort(reference, descending=largest, stable=True)
            for k in (0, 1, 7, k_most):
                values, indices = Tensor(a, device=device).topk(k, largest=largest)
                assert values.shape == indices.shape == (k,) and indices.dtype == dtypes.int32
                np.testing.assert_array_equal(indices.numpy(), want_indices[:k].numpy(), err_msg=f"{a.dtype} {k}")
                got, want = values.numpy(), want_values[:k].numpy().astype(a.dtype)
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{a.dtype} {k}")
    batch = rng.standard_normal((2, n, 3)).astype(np.float32)
    values, indices = Tensor(batch, device=device).topk(5, 1, largest=False)
    want_values, want_indices = torch.sort(torch.from_numpy(batch), dim=1, stable=True)
    np.testing.assert_array_equal(indices.numpy(), want_indices[:, :5].numpy())
    np.testing.assert_array_equal(values.numpy(), want_values[:, :5].numpy())
    x = Tensor(floats, device=device).realize()
    GlobalCounters.reset()
    Tensor.realize(*x.topk(6))
    assert GlobalCounters.kernel_count <= 3 * 6 + 4, f"{GlobalCounters.kernel_count} kernels"
    assert GlobalCounters.global_ops < 32 * 6 * n, f"{GlobalCounters.global_ops} operations: a sort?"
    w = rng.standard_normal((3, n)).astype(np.float32)
    x = Tensor(w, device=device, requires_grad=True)
    (x.topk(4, 1)[0] * Tensor([[1.0, 2.0, 3.0, 4.0]], device=device)).sum().backward()
    tx = torch.from_numpy(w).requires_grad_()
    (torch.topk(tx, 4, 1)[0] * torch.tensor([[1.0, 2.0, 3.0, 4.0]])).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_long_sort_gradients_gather_at_the_inverse_permutation():
    """The gradient of sorted values (and of topk's) is the output gradient gathered at the inverse permutation,
    itself sorted by the network: O(n log^2 n), where the gather's one-hot was O(n^2). Against PyTorch."""
    torch = pytest.importorskip("torch", reason="the reference for sort gradients")
    from lazy.tensor_nn import SORT_NETWORK_MIN

    rng = np.random.default_rng(6)
    n = 4 * SORT_NETWORK_MIN  # (long enough that a one-hot's n^2 stands out)
    for shape, dim, directions in (((n,), 0, (False, True)), ((3, n), 1, (True,))):
        a = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal(shape).astype(np.float32)
        for descending in directions:
            x = Tensor(a, requires_grad=True)
            loss = (x.sort(dim, descending=descending)[0] * Tensor(w)).sum()
            loss.backward()
            assert x.grad is not None
            GlobalCounters.reset()
            x.grad.realize()
            assert GlobalCounters.global_ops < 2 * a.size * n, f"{GlobalCounters.global_ops} operations: a one-hot?"
            tx = torch.from_numpy(a).requires_grad_()
            (torch.sort(tx, dim=dim, descending=descending, stable=True)[0] * torch.from_numpy(w)).sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
        x = Tensor(a, requires_grad=True)
        x.topk(7, dim)[0].sum().backward()  # (through the shrink of the sorted values)
        tx = torch.from_numpy(a).requires_grad_()
        torch.topk(tx, 7, dim)[0].sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())

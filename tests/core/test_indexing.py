"""Indexing on the PYTHON device: `__getitem__`/`__setitem__` against numpy (values, shapes, gradients), and the
index-driven ops (gather, scatter, scatter_reduce, masked_select, nonzero, index_select) against reference loops."""

from __future__ import annotations

import numpy as np
import pytest
from test_tensor_api import check

from lazy import Context, GlobalCounters, Tensor, dtypes

RNG = np.random.default_rng(11)
A = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def as_lazy(index):
    """The same index with numpy arrays as lazy tensors (numpy gets the arrays)."""
    items = index if isinstance(index, tuple) else (index,)
    out = tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in items)
    return out if isinstance(index, tuple) else out[0]


BASIC = [
    0, -1, (1, 2), (slice(None), 2), (slice(1, None, 2),), (slice(None, None, -1),), (slice(None, None, -2), 1),
    (Ellipsis, 3), (None, 1, None, Ellipsis, None), (slice(3, 1),), (slice(0, 0), 1),
    (1, slice(-3, None), slice(None, None, 3)),
]  # fmt: skip
FANCY = [
    [0, 2], ([[0, 1], [2, 1]],), (slice(None), [1, 3], [0, 4]), ([0, 2], slice(None), [1, 3]), (Ellipsis, [1, -1]),
    (np.array([[0], [2]]), np.array([1, 2, 3])), ([2, 0], [True, False, True, False]),
    (A[..., 0] > 20,), (np.array([2, 2, 0]),), (slice(None), np.array([[3], [0]])),
]  # fmt: skip


@pytest.mark.parametrize("index", BASIC + FANCY, ids=range(len(BASIC + FANCY)))
def test_getitem_matches_numpy(index):
    got = Tensor(A)[as_lazy(index)]
    expected = A[index]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("index", [(1, slice(None, None, -2)), ([0, 2, 0], slice(1, 3), [4, 0, 4]), (A > 30,)])
def test_getitem_gradient_scatters_back(index):
    check(lambda x: x[as_lazy(index)], lambda a: a[index], A / 60)


def test_where_lazy_follows_tinygrad_and_torch_rather_than_numpy():
    # an int is plain indexing (it drops its axis first), so one list index stays in place: torch's (2, 1, 2),
    # numpy's (2, 2, 1)
    assert Tensor(A)[1, 1:4:2, None, [0, 3]].shape == (2, 1, 2)
    np.testing.assert_array_equal(Tensor(A)[1, 1:4:2, None, [0, 3]].numpy(), A[1][1:4:2, None, [0, 3]])
    # a bare list of lists is a tuple of per-axis indices (tinygrad), not one 2-d index (numpy)
    np.testing.assert_array_equal(Tensor(A)[[[0, 1], [2, 1]]].numpy(), A[[0, 1], [2, 1]])


def test_int_tensor_index_keeps_dtype_and_handles_negative_values():
    x = Tensor(np.arange(10, dtype=np.int32))
    np.testing.assert_array_equal(x[Tensor([-1, 0, -10])].numpy(), [9, 0, 0])
    b = Tensor([True, False, True])
    np.testing.assert_array_equal(b[Tensor([2, 1])].numpy(), [True, False])
    assert b[Tensor([2, 1])].dtype == dtypes.bool


def test_index_errors_name_the_problem():
    x = Tensor(A)
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        x[0, 4]
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        x[[0, 7]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(IndexError, match="integer or bool dtype"):
        x[Tensor([0.5])]
    with pytest.raises(IndexError, match="cannot be broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="does not match the indexed axes"):
        x[np.ones((2, 2), dtype=bool)]
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::0]


SETS = [
    ((0,), 7.0), ((slice(None, None, -2), 1), np.array([[1.0], [2.0]], np.float32)),
    (([0, 2], slice(None), [1, 3]), 5.0), ((A > 30,), -1.0), ((Ellipsis, [1, 1]), np.array([3.0, 4.0], np.float32)),
    ((slice(1, 3), [0, 2], slice(None, None, 2)), np.full((2, 2, 3), 9.0, np.float32)),
    ((2, [0, 0, 1], [1, 1, 4]), np.array([1.0, 2.0, 3.0], np.float32)), ((slice(None), [1, 3]), 0.0),
]  # fmt: skip


@pytest.mark.parametrize("index, value", SETS, ids=range(len(SETS)))
def test_setitem_matches_numpy(index, value):
    expected = A.copy()
    expected[index] = value  # repeated indices: numpy's last write wins, and so does lazy's
    x = Tensor(A.copy()).realize()
    x[as_lazy(index)] = Tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(x.numpy(), expected)


def test_setitem_keeps_the_buffer_and_casts_the_value():
    x = Tensor(np.zeros(4, dtype=np.int32)).realize()
    buf = x.lazydata.base.realized
    x[1:3] = 2.7  # cast to int32, as in PyTorch
    x.realize()
    np.testing.assert_array_equal(x.numpy(), [0, 2, 2, 0])
    assert x.lazydata.base.realized is buf


def test_setitem_gradients_reach_the_value_and_the_untouched_elements():
    x = Tensor(A, requires_grad=True)
    v = Tensor(np.ones(2, np.float32), requires_grad=True)
    y = x * 1
    y[1, 2, [0, 3]] = v * 3
    (y * y).sum().backward()
    expected = 2 * A
    expected[1, 2, [0, 3]] = 0
    np.testing.assert_allclose(x.grad.numpy(), expected)
    np.testing.assert_allclose(v.grad.numpy(), [18.0, 18.0])


def test_setitem_errors():
    leaf = Tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        leaf[0] = 1.0
    x = Tensor(A.copy())
    with pytest.raises(ValueError, match=r"shape \(3,\) cannot be assigned to a region of shape \(4, 5\)"):
        x[0] = Tensor([1.0, 2.0, 3.0])
    # leading dimensions past the region's must be 1 (they were taken by a reshape, whose own error came out)
    with pytest.raises(ValueError, match=r"shape \(2, 4, 5\) cannot be assigned to a region of shape \(4, 5\)"):
        x[0] = Tensor.ones(2, 4, 5)
    np.testing.assert_array_equal(x.numpy(), A)  # a refused assignment leaves the tensor as it was
    x[0] = Tensor.ones(1, 1, 4, 5)
    assert (x[0].numpy() == 1).all()


def test_gather_and_index_select():
    idx = RNG.integers(0, 4, (3, 2, 5))
    check(lambda x: x.gather(1, Tensor(idx.astype(np.int32))), lambda a: np.take_along_axis(a, idx, 1), A / 60)
    np.testing.assert_array_equal(Tensor(A).index_select(2, Tensor([4, 0])).numpy(), A[:, :, [4, 0]])
    with pytest.raises(ValueError, match="index has 1 dimensions"):
        Tensor(A).gather(0, Tensor([1]))


def scatter_reference(base, dim, index, src, reduce=None, include_self=True):
    out = base.copy()
    touched: dict[tuple, list] = {}
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        touched.setdefault(tuple(target), []).append(src[pos])
    for target, values in touched.items():
        pool = ([out[target]] if include_self else []) + values
        if reduce is None:
            out[target] = values[-1]
        elif reduce == "sum":
            out[target] = np.sum(pool)
        elif reduce == "prod":
            out[target] = np.prod(pool)
        elif reduce == "mean":
            out[target] = np.mean(pool)
        elif reduce == "amax":
            out[target] = np.max(pool)
        else:
            out[target] = np.min(pool)
    return out


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reduce", [None, "sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_and_scatter_reduce(dim, reduce, include_self):
    if reduce is None and not include_self:
        return
    base = RNG.standard_normal((3, 5)).astype(np.float32)
    index = np.array([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])[:, : 3 if dim == 1 else 5]
    index = np.minimum(index, base.shape[dim] - 1)
    src = RNG.standard_normal((2, 5)).astype(np.float32)
    t, i, s = Tensor(base), Tensor(index.astype(np.int32)), Tensor(src)
    got = t.scatter(dim, i, s) if reduce is None else t.scatter_reduce(dim, i, s, reduce, include_self=include_self)
    expected = scatter_reference(base, dim, index, src, reduce, include_self)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_scatter_with_a_scalar_and_the_reduce_argument():
    got = Tensor.zeros(2, 4).scatter(1, Tensor([[1, 1], [3, 0]]), 2.0, reduce="add")
    np.testing.assert_array_equal(got.numpy(), [[0, 4, 0, 0], [2, 0, 0, 2]])
    with pytest.raises(ValueError, match="reduce must be"):
        Tensor.zeros(2, 4).scatter(1, Tensor([[1]]), 1.0, reduce="max")


def test_masked_select_and_nonzero():
    t = Tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    mask = Tensor([[True, False, True], [False, True, False], [False, False, True]])
    np.testing.assert_array_equal(t.masked_select(mask).numpy(), [0, 2, 4, 8])
    np.testing.assert_array_equal(t.masked_select(mask, size=6, fill_value=-1).numpy(), [0, 2, 4, 8, -1, -1])
    np.testing.assert_array_equal(t.masked_select(mask, size=2).numpy(), [0, 2])
    m = Tensor([[1, 0], [0, 2]])
    np.testing.assert_array_equal(m.nonzero().numpy(), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(m.nonzero(size=3, fill_value=-1).numpy(), [[0, 0], [1, 1], [-1, -1]])
    # a 0-d tensor: one row of no coordinates when it is non-zero, none when it is zero (numpy's, PyTorch's shapes)
    assert Tensor(2.0).nonzero().shape == (1, 0) and Tensor(0.0).nonzero().shape == (0, 0)
    assert Tensor([0, 0]).nonzero().shape == (0, 1)
    check(lambda x: x.masked_select(Tensor(A > 40)), lambda a: a[A > 40], A / 60)
    with pytest.raises(TypeError, match="must be a bool tensor"):
        t.masked_select(Tensor([1, 0, 1]))


def test_setitem_on_a_tensor_with_a_history_keeps_gradient_right():
    x = Tensor([1.0, 2.0, 3.0])
    y = x * 2
    y[1] = 0.0  # y has a recorded history (requires_grad undecided): gradient() must see the assignment
    np.testing.assert_array_equal(y.sum().gradient(x)[0].numpy(), [2.0, 0.0, 2.0])
    np.testing.assert_array_equal(y.numpy(), [2.0, 0.0, 6.0])
    z = (x * 3).realize()  # (not x * 2: that would be y's node again, shared, and written by copy)
    buf = z.lazydata.base.realized
    z[1] = 0.0  # realized with a history: written into its buffer, and gradient() still right
    np.testing.assert_array_equal(z.sum().gradient(x)[0].numpy(), [3.0, 0.0, 3.0])
    assert z.realize().lazydata.base.realized is buf
    np.testing.assert_array_equal(y.numpy(), [2.0, 0.0, 6.0])
    a = np.arange(6).reshape(2, 3)
    assert Tensor(a)[True].shape == (1, 2, 3)  # a scalar True adds an axis, like None
    np.testing.assert_array_equal(Tensor(a)[..., [True, False, True]].numpy(), a[..., [True, False, True]])
    with pytest.raises(IndexError, match="scalar False"):
        Tensor(a)[False]


def test_setitem_on_a_copy_only_device_writes_the_file(tmp_path):
    path = tmp_path / "t.bin"
    t = Tensor.empty(3, 4, dtype=dtypes.int32, device=f"DISK:{path}")
    t[1] = Tensor([1, 2, 3, 4])  # computed on the default device, copied into the file
    t[2, 1:3] = 9
    t[0, 3] = Tensor(np.array(5, np.int32), device=f"DISK:{tmp_path / 'src.bin'}").to("PYTHON")
    expected = np.array([[0, 0, 0, 5], [1, 2, 3, 4], [0, 9, 9, 0]], np.int32)
    np.testing.assert_array_equal(t.to("PYTHON").numpy(), expected)
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.int32).reshape(3, 4), expected)
    with pytest.raises(IndexError, match="one consecutive range"):
        t[:, 1] = 5


def test_gathers_are_loads_at_the_index_not_one_hot_sums():
    """gather, an index tensor on one axis, and Embedding read each result element once, at the address the index
    gives (`Ops.GATHER`): the kernel has no reduction over the table (the one-hot sum was O(result x rows): a
    50257-row Embedding lookup of 512 tokens took 0.5 s). Values, out-of-range rows and gradients as before."""
    from lazy import nn
    from lazy.engine.schedule import create_schedule
    from lazy.ops import Ops

    rng = np.random.default_rng(0)
    table = rng.standard_normal((5000, 16)).astype(np.float32)
    idx = rng.integers(0, 5000, (3, 7))
    emb = nn.Embedding(5000, 16)
    emb.weight = Tensor(table, requires_grad=True)
    for out in (
        emb(Tensor(idx)),
        Tensor(table)[Tensor(idx)],
        Tensor(table).gather(0, Tensor(idx[0, :, None] * np.ones(16, int))),
    ):
        kernels = [si.ast for si in create_schedule([out.lazydata]) if si.ast.op is Ops.SINK]
        ops = [n.op for ast in kernels for n in ast.toposort()]
        assert Ops.SUM not in ops, "a one-hot sum over the table"
        assert any(n.op is Ops.LOAD and n.arg.gather for ast in kernels for n in ast.toposort())
    np.testing.assert_array_equal(emb(Tensor(idx)).numpy(), table[idx])
    np.testing.assert_array_equal(emb(Tensor([4999, 0])).numpy(), table[[4999, 0]])
    with Context(CHECK_INDEX=0):  # an index outside the vocabulary reads a row of zeros (documented)
        np.testing.assert_array_equal(emb(Tensor([5000, -1])).numpy(), np.zeros((2, 16), np.float32))
    (emb(Tensor(idx)) * Tensor(np.arange(16, dtype=np.float32))).sum().backward()
    want = np.zeros_like(table)
    np.add.at(want, idx.reshape(-1), np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(emb.weight.grad.numpy(), want)


def test_gradient_of_gathered_rows_sums_tokens_not_a_one_hot():
    """The gradient of rows gathered by one index per row (Embedding, x[idx], index_select) sums the gradients of
    tokens naming the same row (an equality matrix times the rows), then gathers each row's sum: no reduction over
    rows x tokens x width (GPT-2's token embedding backward, 50257 x 768 by 512 tokens, took 5.3 s). Duplicates,
    indices out of range (no gradient), several chunks of tokens, an axis in the middle, float16 and a second-order
    gradient, against numpy."""
    from lazy import nn
    from lazy.engine.schedule import create_schedule
    from lazy.ops import Ops
    from lazy.tensor_index import _row_grad

    rng = np.random.default_rng(1)
    vocab, width, tokens = 3000, 4, 200  # the cheapest plan has 2 chunks of 100 tokens
    ids = rng.integers(0, 40, tokens)  # many repeats
    ids[[3, 50, 150]] = ids[0]
    g = rng.standard_normal((tokens, width)).astype(np.float32)
    emb = nn.Embedding(vocab, width)
    emb.weight.requires_grad = True
    (emb(Tensor(ids)) * Tensor(g)).sum().backward()
    want = np.zeros((vocab, width), np.float32)
    np.add.at(want, ids, g)
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-6, atol=1e-6)
    grad = _row_grad(Tensor(g), Tensor(ids), 0, vocab)
    assert grad is not None, "the row plan should beat the one-hot sum here"
    kernels = [si.ast for si in create_schedule([grad.lazydata]) if si.ast.op is Ops.SINK]
    assert sum(n.op is Ops.LOAD and n.arg.gather is not None for k in kernels for n in k.toposort()) == 2
    assert _row_grad(Tensor(g[:, :1]), Tensor(ids), 0, 2) is None, "2 rows: the one-hot sum is cheaper"

    with Context(CHECK_INDEX=0):  # out of range: read as zeros, no gradient
        w = Tensor(rng.standard_normal((3, 50, 17)).astype(np.float32), requires_grad=True)
        idx = np.array([4, -1, 50, 4, 49, 0, 77])
        out = w[:, Tensor(idx)]  # (3, 7, 17): rows along the middle axis
        go = rng.standard_normal(out.shape).astype(np.float32)
        (out * Tensor(go)).sum().backward()
    want = np.zeros((3, 50, 17), np.float32)
    for t, i in enumerate(idx):  # -1 counts from the end, as in numpy; 50 and 77 are out of range
        if -50 <= i < 50:
            want[:, i] += go[:, t]
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6, atol=1e-6)

    half = Tensor(rng.standard_normal((300, 16)).astype(np.float16), requires_grad=True)
    hi = rng.integers(0, 300, 40)
    hg = rng.standard_normal((40, 16)).astype(np.float16)
    (half[Tensor(hi)] * Tensor(hg)).sum().backward()
    hwant = np.zeros((300, 16), np.float32)
    np.add.at(hwant, hi, hg.astype(np.float32))
    assert half.grad.dtype == dtypes.float16
    np.testing.assert_allclose(half.grad.numpy().astype(np.float32), hwant, rtol=2e-3, atol=2e-3)

    # second order: the weight gradient depends on v; its weighted sum's gradient reaches v
    table = Tensor(rng.standard_normal((500, 8)).astype(np.float32), requires_grad=True)
    v = Tensor(rng.standard_normal((30, 8)).astype(np.float32), requires_grad=True)
    ti = rng.integers(0, 500, 30)
    (gw,) = (table[Tensor(ti)] * v).sum().gradient(table)
    c = rng.standard_normal((500, 8)).astype(np.float32)
    (gw * Tensor(c)).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), c[ti], rtol=1e-6, atol=1e-6)


def test_scatter_reduce_of_whole_rows_sums_rows_not_a_one_hot():
    """scatter_reduce "sum"/"mean" with an index the same along every other axis (index_add; a graph network's
    messages into their nodes) sums rows like the gather gradient (`_row_grad`): against PyTorch along both axes,
    with and without self, and with no one-hot grid of target x source x width in its work."""
    torch = pytest.importorskip("torch", reason="the reference for scatter_reduce")
    rng = np.random.default_rng(4)
    n, t, m = 500, 120, 32
    ids = rng.integers(0, n, t)
    ids[:10] = ids[10]  # a row many tokens land on
    a = rng.standard_normal((n, m)).astype(np.float32)
    src = rng.standard_normal((t + 2, m)).astype(np.float32)
    for reduce in ("sum", "mean"):
        for include_self in (True, False):
            index = Tensor(ids.astype(np.int32)).reshape(t, 1).expand(t, m)
            got = Tensor(a).scatter_reduce(0, index, Tensor(src), reduce, include_self=include_self)
            GlobalCounters.reset()
            got = got.numpy()
            assert GlobalCounters.global_ops < n * t * m, f"{GlobalCounters.global_ops} operations: a one-hot grid?"
            rows = torch.from_numpy(np.broadcast_to(ids[:, None], (t, m)).copy())
            want = torch.from_numpy(a).scatter_reduce(
                0, rows, torch.from_numpy(src[:t]), reduce, include_self=include_self
            )
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{reduce} {include_self}")
    got = Tensor(a.T.copy()).scatter_reduce(1, Tensor(ids.astype(np.int32)).reshape(1, t).expand(m, t),
                                            Tensor(src.T.copy()), "sum").numpy()  # fmt: skip
    want = torch.from_numpy(a.T.copy()).scatter_reduce(
        1, torch.from_numpy(np.broadcast_to(ids[None, :], (m, t)).copy()), torch.from_numpy(src.T[:, :t].copy()), "sum"
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_arange_with_an_index_tensor_is_a_gather_along_the_other_axis():
    """x[arange(n), j] picks x[t, j_t]: a gather along j's axis, whose gradient is a one-hot over that axis only
    (through the merged axes it was over both: `-logp[arange(2048), y]` of 1000 classes took 1.1 s to
    differentiate). Also x[j, arange(m)], axes before and after, negative and out-of-range j, a cast arange."""
    from lazy.ops import Ops

    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 40, 30, 2)).astype(np.float32)
    j = rng.integers(0, 30, 40)
    j[[1, 7]] = [-1, -30]
    out = Tensor(a)[:, Tensor.arange(40), Tensor(j)]
    node = out.lazydata
    while node.op is not Ops.GATHER:  # (through the views and casts above it)
        node = node.base if node.base is not node else node.srcs[0]
    assert node.srcs[0].shape == (3, 40, 30, 2), f"gathered from {node.srcs[0].shape}: the axes were merged"
    np.testing.assert_array_equal(out.numpy(), a[:, np.arange(40), j])
    # an arange cast to a dtype that wraps its values is not a plain arange any more
    x300 = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    j300 = np.arange(300) % 4
    got = Tensor(x300)[Tensor.arange(300).cast(dtypes.uint8), Tensor(j300)].numpy()
    np.testing.assert_array_equal(got, x300[np.arange(300).astype(np.uint8), j300])
    np.testing.assert_array_equal(Tensor(x300)[Tensor.arange(300).cast(dtypes.int8)].numpy(),
                                  x300[np.arange(300).astype(np.int8)])  # fmt: skip
    k = rng.integers(0, 40, 30)
    np.testing.assert_array_equal(Tensor(a)[:, Tensor(k), Tensor.arange(30, dtype=dtypes.int64)].numpy(),
                                  a[:, k, np.arange(30)])  # fmt: skip
    with Context(CHECK_INDEX=0):
        got = Tensor(a[0, :, :, 0])[Tensor.arange(40), Tensor(np.full(40, 30))].numpy()
    np.testing.assert_array_equal(got, np.zeros(40, np.float32))
    logits = rng.standard_normal((64, 10)).astype(np.float32)
    x = Tensor(logits, requires_grad=True)
    y = rng.integers(0, 10, 64)
    (-x.log_softmax(1)[Tensor.arange(64), Tensor(y)]).mean().backward()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(64), y] -= 1
    np.testing.assert_allclose(x.grad.numpy(), p / 64, rtol=1e-5, atol=1e-6)


def test_index_tensors_on_adjacent_axes_are_one_gather():
    """logp[arange(n), y] and other index tensors on adjacent axes gather once along the merged axes (the flat
    index i * size_j + j): no one-hot sum over n * classes candidates per element. An index out of range in any of
    them picks 0, as the one-hot selection did; gradients as before."""
    from lazy.engine.schedule import create_schedule
    from lazy.ops import Ops

    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 30, 5)).astype(np.float32)
    i, j = rng.integers(0, 40, (7, 1)), rng.integers(-30, 30, (1, 3))
    out = Tensor(a)[Tensor(i), Tensor(j)]
    np.testing.assert_array_equal(out.numpy(), a[i, j])
    ops = [n.op for si in create_schedule([Tensor(a)[Tensor(i), Tensor(j)].lazydata]) for n in si.ast.toposort()]
    assert Ops.SUM not in ops
    np.testing.assert_array_equal(Tensor(a)[:, Tensor([2, 0]), Tensor([4, -1])].numpy(), a[:, [2, 0], [4, -1]])
    with Context(CHECK_INDEX=0):
        got = Tensor(a[:, :, 0])[Tensor([0, 45, 1]), Tensor([1, 1, 31])].numpy()
    np.testing.assert_array_equal(got, [a[0, 1, 0], 0, 0])
    logp = Tensor(a[:, :, 0], requires_grad=True)
    y = rng.integers(0, 30, 40)
    (logp[Tensor.arange(40), Tensor(y)] * Tensor(np.arange(40, dtype=np.float32))).sum().backward()
    want = np.zeros((40, 30), np.float32)
    want[np.arange(40), y] = np.arange(40)
    np.testing.assert_array_equal(logp.grad.numpy(), want)

"""`assign` into a view of a realized buffer (tinygrad's KV-cache pattern `cache[:, :, i:i+n].assign(x)`) writes the
view's elements of the buffer in place, eagerly and under `jit`, with a bound start; views that pad or repeat
elements cannot be written through and are refused."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, TinyJit, Variable
from lazy.helpers import ArgumentError, ShapeError


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_assign_into_a_slice_writes_the_buffer(device):
    rng = np.random.default_rng(0)
    cache = Tensor.zeros(2, 3, 8, 4, device=device).contiguous().realize()
    ref = np.zeros((2, 3, 8, 4), np.float32)
    for sp in range(5):
        x = rng.random((2, 3, 1, 4), dtype=np.float32)
        view = cache[:, :, sp : sp + 1]
        view.assign(Tensor(x, device=device))
        ref[:, :, sp : sp + 1] = x
        np.testing.assert_allclose(cache.numpy(), ref)  # no realize of the view needed: the buffer has it
        np.testing.assert_allclose(view.numpy(), x)


def test_assign_through_a_transposed_view():
    t = Tensor.zeros(3, 4).contiguous().realize()
    t.T[1].assign(Tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(t.numpy(), [[0, 1, 0, 0], [0, 2, 0, 0], [0, 3, 0, 0]])


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_kv_cache_step_under_jit_with_a_bound_start(device):
    rng = np.random.default_rng(1)
    cache = Tensor.zeros(2, 3, 8, 4, device=device).contiguous().realize()
    ref = np.zeros((2, 3, 8, 4), np.float32)

    @TinyJit
    def step(x: Tensor, start: Variable) -> Tensor:
        cache[:, :, start : start + 1].assign(x).realize()
        return cache[:, :, : start + 1].sum(2).realize()

    for pos in range(6):
        x = rng.random((2, 3, 1, 4), dtype=np.float32)
        out = step(Tensor(x, device=device), Variable("start", 0, 7).bind(pos))
        ref[:, :, pos : pos + 1] = x
        np.testing.assert_allclose(out.numpy(), ref[:, :, : pos + 1].sum(2), rtol=1e-6)
        np.testing.assert_allclose(cache.numpy(), ref)


def test_a_reader_of_the_old_value_keeps_it():
    t = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous().realize()
    doubled = t * 2  # not realized yet
    t[1:3].assign(Tensor([10.0, 20.0]))
    np.testing.assert_array_equal(doubled.numpy(), [2, 4, 6, 8])
    np.testing.assert_array_equal(t.numpy(), [1, 10, 20, 4])


def test_views_that_repeat_or_pad_are_refused():
    t = Tensor.zeros(3).contiguous().realize()
    with pytest.raises(ArgumentError, match="cannot write through this view"):
        t.reshape(3, 1).expand(3, 2).assign(Tensor.ones(3, 2))
    with pytest.raises(ArgumentError, match="cannot write through this view"):
        t.pad(((1, 1),)).assign(Tensor.ones(5))
    np.testing.assert_array_equal(t.numpy(), [0, 0, 0])


@pytest.mark.parametrize("n", [9, 10])
def test_assign_and_setitem_through_strided_slices(n):
    """A strided slice is one strided view of the buffer (its padding, if any, is never read), so assign and
    __setitem__ write through it; they were refused as views that "pad or repeat elements"."""
    for index in (slice(None, None, 2), slice(None, None, -3), slice(1, None, 4)):
        t, ref = Tensor(np.arange(n, dtype=np.float32)).contiguous().realize(), np.arange(n, dtype=np.float32)
        count = len(ref[index])
        t[index].assign(Tensor(np.full(count, -1.0, np.float32)))
        ref[index] = -1
        np.testing.assert_array_equal(t.numpy(), ref)
    b, ref = Tensor.zeros(n, 3).contiguous().realize(), np.zeros((n, 3), np.float32)
    view = b[::2]
    view[1] = 7.0
    ref[::2][1] = 7
    np.testing.assert_array_equal(b.numpy(), ref)


def test_setitem_through_views_that_compose_back_to_the_buffer():
    """b.T.T, b.flip(0).flip(0) and a size-1 flip are b's own node again: a write through them reaches b at once, as
    PyTorch's does (it stayed pending until the view itself was realized, and b read the old values)."""
    for make in (lambda b: b.T.T, lambda b: b.flip(0).flip(0), lambda b: b.reshape(2, 1, 3).flip(1).reshape(2, 3)):
        b = Tensor.zeros(2, 3).contiguous().realize()
        view = make(b)
        view[0] = 7.0
        np.testing.assert_array_equal(b.numpy(), [[7, 7, 7], [0, 0, 0]])
        np.testing.assert_array_equal(view.numpy(), [[7, 7, 7], [0, 0, 0]])


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_write_through_a_slice_of_a_value_with_no_memory_of_its_own_reaches_it(device):
    """A slice of a constant (`Tensor.zeros(6)[1:3]`), of a tensor whose node identical expressions share, or of a
    value after a setitem: the indexed tensor gets memory of its own and the write lands there (the view alone took
    the value before, silently); another tensor of the same constant keeps its value; views of views write through."""
    x, other = Tensor.zeros(6, device=device), Tensor.zeros(6, device=device)
    x[1:3].assign(Tensor([5.0, 5.0], device=device))
    np.testing.assert_array_equal(x.numpy(), [0, 5, 5, 0, 0, 0])
    np.testing.assert_array_equal(other.numpy(), np.zeros(6))
    grid = Tensor.full((2, 3), 2.0, device=device)
    row = grid[1]
    row += 1  # (__iadd__ is an assign)
    row[1:].assign(Tensor([7.0, 8.0], device=device))  # a view of a view
    np.testing.assert_array_equal(grid.numpy(), [[2, 2, 2], [3, 7, 8]])
    a = np.arange(6, dtype=np.float32)
    y = Tensor(a, device=device) * 2
    y[0] = 100  # y's node is now a where() that setitem built twice (shared)
    y[3:5].assign(Tensor([-1.0, -1.0], device=device))
    np.testing.assert_array_equal(y.numpy(), [100, 2, 4, -1, -1, 10])
    same = Tensor(a, device=device).realize()
    twin = same * 3
    also = same * 3  # one node for both
    twin[:2].assign(Tensor([0.0, 0.0], device=device))
    np.testing.assert_array_equal(twin.numpy(), [0, 0, 6, 9, 12, 15])
    np.testing.assert_array_equal(also.numpy(), a * 3)


def test_assign_broadcasts_a_scalar_or_a_row_and_refuses_other_shapes():
    """As PyTorch's copy_: a value that broadcasts to the tensor's shape is written everywhere it repeats."""
    y = Tensor.zeros(2, 3).contiguous().realize()
    y.assign(5.0)
    np.testing.assert_array_equal(y.numpy(), np.full((2, 3), 5.0))
    y.assign(Tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])
    with pytest.raises(ShapeError, match=r"shape \(2,\) does not match \(2, 3\)"):
        y.assign(Tensor([1.0, 2.0]))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_writes_through_views_meet_the_viewed_tensors_other_writes_in_order(device):
    """Found by fuzzing against PyTorch (views alias their tensor there): each case once lost a write or read one
    made after it."""

    def f(values):
        return Tensor(np.asarray(values, np.float32), device=device)

    # a write through a view runs after the viewed tensor's whole-tensor assign made before it (it ran first, and
    # the pending assign then wrote over it)
    t = f(np.arange(4)).realize()
    v = t[::2]
    t.assign(f([10, 11, 12, 13]))
    v[...] = 48
    assert t.numpy().tolist() == [48, 11, 48, 13]
    t = f(np.arange(4)).realize()
    t.assign(f([-7, 44, 31, 25]))
    v2 = t[2]
    t[[0]] = 6
    v2[()] = -47
    assert t.numpy().tolist() == [6, 44, -47, 25]
    # a reader made between two writes through one view sees the first only
    t = f(np.arange(4)).realize()
    v = t[1:3]
    v += 1
    total, plus = t.sum(), t + 5
    v += 1
    assert total.item() == 8 and plus.numpy().tolist() == [5, 7, 8, 8] and t.numpy().tolist() == [0, 3, 4, 3]
    # a view taken before its (unrealized) tensor was written writes from the tensor's new value
    t = Tensor.zeros(3, device=device)
    v = t[1:]
    t[0:2] = 20
    v[1] = 27
    assert t.numpy().tolist() == [20, 20, 27] and v.numpy().tolist() == [20, 27]
    t = Tensor.zeros(3, device=device)
    v = t[::-1]
    t[0:2] = 20
    v[0] = 1
    assert t.numpy().tolist() == [20, 20, 1]
    # an index that selects all of a tensor (a flip or step of one element) writes into it
    t = f([0.0]).realize()
    v = t[::-1]
    v += 1
    assert t.numpy().tolist() == [1]
    t = f(np.zeros((4, 1))).realize()
    t[:, ::2].assign(f(np.ones((4, 1))))
    assert t.numpy().ravel().tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_views_read_what_their_tensor_holds_after_it_moves(device):
    """A view made by indexing follows its tensor when a write moves the tensor to another node (PyTorch's views
    alias their tensor): it read the node it was taken from, which the write no longer reached."""
    t = Tensor.arange(3, device=device).float()
    v, row = t[0], t[1:]
    t[0:1] = -48
    assert v.item() == -48 and row.numpy().tolist() == [1, 2]
    t = Tensor(np.arange(3, dtype=np.float32), device=device).realize()
    v = t[1]
    t.assign(Tensor([29.0, 10.0, -44.0], device=device))
    assert v.item() == 10  # before the assign ran: it read the old memory, 1, until then
    t.realize()
    assert v.item() == 10
    t = Tensor.zeros(2, 3, device=device)
    w = t[1][::2]  # a view of a view
    t += 5
    assert w.numpy().tolist() == [5, 5]

"""Assigns whose value reads the target's own memory, and readers of that memory through buffer views: the written
values are the ones the expression meant before the write, on a device with vector kernels (CPU) and the reference
(PYTHON)."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, dtypes

DEVICES = ["CPU", "PYTHON"]


def fresh(a: np.ndarray, device: str) -> Tensor:
    return Tensor(a, device=device).contiguous().realize()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [8, 64, 100])
def test_an_assign_of_a_rearranged_view_of_the_target_reads_the_old_values(device, n):
    """`x.assign(x.flip(0))` ran one kernel reading the memory it wrote, elsewhere than where it wrote: the second
    half read values already overwritten. Such a value is copied first."""
    a = np.arange(n * n, dtype=np.float32).reshape(n, n)
    x = fresh(a, device)
    x.assign(x.flip(0)).realize()
    np.testing.assert_equal(x.numpy(), a[::-1])
    x = fresh(a, device)
    x.assign(x.T).realize()
    np.testing.assert_equal(x.numpy(), a.T)
    x = fresh(a, device)
    x.assign(x.flip(1).T).realize()
    np.testing.assert_equal(x.numpy(), a[:, ::-1].T)
    v = fresh(a[0], device)
    v[1:].assign(v[:-1])
    np.testing.assert_equal(v.numpy(), np.concatenate([a[0][:1], a[0][:-1]]))
    v = fresh(a[0], device)
    v[:-1].assign(v[1:])
    np.testing.assert_equal(v.numpy(), np.concatenate([a[0][1:], a[0][-1:]]))


@pytest.mark.parametrize("device", DEVICES)
def test_an_assign_of_the_target_itself_writes_in_place(device):
    """The same view as the write reads each element before writing it: no copy is needed, and none is made."""
    a = np.arange(64, dtype=np.float32)
    x = fresh(a, device)
    buf = x.lazydata.base.realized
    kernels = [si for si in x.assign(x).schedule() if si.ast.op.name == "SINK"]
    assert len(kernels) <= 1, kernels
    x.realize()
    assert x.lazydata.base.realized is buf
    np.testing.assert_equal(x.numpy(), a)


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_assign_after_a_pending_whole_assign_keeps_both_writes(device):
    """`t.assign(t + 1)` left pending, then `t[2:5].assign(...)`: the view's write went to a node of its own and the
    buffer kept only the first write. The pending write now runs first, then the view's in place."""
    t = fresh(np.zeros(8, np.float32), device)
    t.assign(t + 1)
    t[2:5].assign(Tensor.full((3,), 5.0, device=device))
    np.testing.assert_equal(t.numpy(), [1, 1, 5, 5, 5, 1, 1, 1])


@pytest.mark.parametrize("device", DEVICES)
def test_a_reader_through_a_bitcast_keeps_the_old_value(device):
    """A bitcast (a buffer view of the same memory) read before an assign: the reader must see the old bytes, as a
    reader through a plain view does (it gets a snapshot)."""
    a = np.arange(8, dtype=np.float32)
    x = fresh(a, device)
    whole = x.bitcast(dtypes.int32) + 1
    part = x[4:8].bitcast(dtypes.int32) + 1
    plain = x * 2
    x.assign(x * 0 + 100).realize()
    np.testing.assert_equal(whole.numpy(), a.view(np.int32) + 1)
    np.testing.assert_equal(part.numpy(), a[4:8].view(np.int32) + 1)
    np.testing.assert_equal(plain.numpy(), a * 2)
    np.testing.assert_equal(x.numpy(), np.full(8, 100, np.float32))

"""`assign` writes into a tensor's memory only when no other tensor holds that memory: two identical expressions are
one graph node (the identical-node cache), and a tensor that becomes another's value by assign would otherwise share
its buffer, so an in-place write through one showed in the other. PyTorch's `copy_` never does that; neither does
lazy now. An unshared tensor still keeps its buffer (optimizers and jit rely on it)."""

from __future__ import annotations

import numpy as np
import torch

from lazy import Tensor, TinyJit


def test_two_identical_contiguous_buffers_stay_apart():
    a, b = Tensor.zeros(4).contiguous(), Tensor.zeros(4).contiguous()  # (state buffers, made the same way)
    assert a.lazydata is b.lazydata, "the identical-node cache made them one node (what this test is about)"
    a.realize(), b.realize()
    a.assign(Tensor.ones(4)).realize()
    np.testing.assert_array_equal(b.numpy(), np.zeros(4))
    np.testing.assert_array_equal(a.numpy(), np.ones(4))
    b.assign(b + 5).realize()
    np.testing.assert_array_equal(b.numpy(), np.full(4, 5.0))
    np.testing.assert_array_equal(a.numpy(), np.ones(4))


def test_two_identical_expressions_stay_apart_after_a_write():
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    a, b = x + 1, x + 1
    a.realize()
    a.assign(Tensor.zeros(4)).realize()
    np.testing.assert_array_equal(b.numpy(), np.arange(4) + 1)
    np.testing.assert_array_equal(a.numpy(), np.zeros(4))


def test_a_tensor_that_became_another_by_assign_does_not_write_into_it():
    y = Tensor([1.0, 2.0]).realize()
    a = Tensor.zeros(2)  # no memory of its own: it becomes the value
    a.assign(y)
    a.assign(Tensor([5.0, 6.0])).realize()
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(a.numpy(), [5.0, 6.0])
    held = Tensor([1.0, 2.0]) * 3  # an unrealized value the caller keeps
    c = Tensor.zeros(2)
    c.assign(held)
    c.realize()
    c.assign(Tensor([7.0, 8.0])).realize()
    np.testing.assert_array_equal(held.numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(c.numpy(), [7.0, 8.0])


def test_as_torch_copy_does():
    rng = np.random.default_rng(0)
    v = rng.standard_normal(6).astype(np.float32)
    ours, theirs = Tensor(v).realize(), torch.tensor(v)
    mine, their_copy = Tensor.zeros(6).contiguous().realize(), torch.zeros(6)
    mine.assign(ours).realize()
    their_copy.copy_(theirs)
    mine.assign(mine * 2).realize()
    their_copy.mul_(2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(mine.numpy(), their_copy.numpy())


def test_an_unshared_tensor_keeps_its_buffer():
    w = Tensor([1.0, 2.0]).contiguous().realize()
    buf = w.lazydata.base.realized
    for _ in range(3):
        w.assign(w * 2).realize()
    assert w.lazydata.base.realized is buf
    np.testing.assert_array_equal(w.numpy(), [8.0, 16.0])


def test_a_jitted_update_of_shared_state_stays_apart():
    a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
    a.realize(), b.realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        a.assign(a + x)
        return a.realize()

    for i in range(4):
        step(Tensor.full((3,), float(i + 1)).contiguous().realize())
    np.testing.assert_array_equal(a.numpy(), np.full(3, 10.0))
    np.testing.assert_array_equal(b.numpy(), np.zeros(3))

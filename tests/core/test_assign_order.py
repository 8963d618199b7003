"""An assign overwrites its target's memory; a lazy value computed from the old contents keeps the old contents, as
eager execution would have it, even when it is realized after the assign. Views of the target itself are aliases
and see the new value (as in PyTorch). Readers that nothing outside the graph holds cost nothing. PYTHON device."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Context, Tensor, TinyJit, nn
from lazy.nn.optim import Adam


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def snapshots(t: Tensor) -> int:
    """How many copies of old values realizing `t` makes."""
    return sum(out.is_snapshot for si in t.schedule() for out in si.outputs)


def test_a_reader_realized_after_the_assign_sees_the_old_value():
    t = Tensor([1.0, 2.0]).realize()
    doubled, copied = t * 2, t.clone()
    t.assign(Tensor([5.0, 6.0])).realize()
    np.testing.assert_array_equal(doubled.numpy(), [2, 4])
    np.testing.assert_array_equal(copied.numpy(), [1, 2])
    np.testing.assert_array_equal(t.numpy(), [5, 6])


def test_readers_inside_the_assigned_value_that_a_tensor_holds():
    t = Tensor([1.0, 2.0]).realize()
    doubled = t * 2
    deeper = (t * 3) + 1
    t.assign(doubled + deeper).realize()
    np.testing.assert_array_equal(t.numpy(), [6, 11])
    np.testing.assert_array_equal(doubled.numpy(), [2, 4])  # computed inside the assign's kernel, then again
    np.testing.assert_array_equal(deeper.numpy(), [4, 7])


def test_a_view_of_a_reader_and_a_reader_of_a_view():
    t = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
    transposed = (t * 2).T
    row = t[1] + 10
    t.assign(Tensor.zeros(2, 2).contiguous()).realize()
    np.testing.assert_array_equal(transposed.numpy(), [[2, 6], [4, 8]])
    np.testing.assert_array_equal(row.numpy(), [13, 14])


def test_one_kernel_reads_the_value_before_and_after_the_assign():
    t = Tensor([1.0, 2.0]).realize()
    old = t * 2
    both = old + t.assign(Tensor([5.0, 6.0]))
    np.testing.assert_array_equal(both.numpy(), [7, 10])
    u = Tensor([1.0, 2.0]).realize()
    inline = (u * 2) + u.assign(Tensor([5.0, 6.0]))  # nothing holds the old reader: no order of kernels is right
    np.testing.assert_array_equal(inline.numpy(), [7, 10])


def test_views_of_the_target_are_aliases():
    t = Tensor([1.0, 2.0]).realize()
    column, same = t.reshape(2, 1), t + 0  # x+0 folds to x itself: the same memory, like a view
    t.assign(Tensor([7.0, 8.0])).realize()
    np.testing.assert_array_equal(column.numpy().ravel(), [7, 8])
    np.testing.assert_array_equal(same.numpy(), [7, 8])


def test_no_copy_without_an_outside_reader():
    t = Tensor([1.0, 2.0]).realize()
    t.assign(t * 2 + 1)  # the value reads the old t, but nothing else will (not even an assert's temporaries)
    assert snapshots(t) == 0
    t.realize()
    np.testing.assert_array_equal(t.numpy(), [3, 5])
    held = t * 10
    t.assign(t + 1)
    assert snapshots(t) == 1
    t.realize()
    np.testing.assert_array_equal(held.numpy(), [30, 50])


def test_an_activation_realized_after_the_optimizer_step_uses_the_old_weights():
    Tensor.manual_seed(1)
    layer = nn.Linear(3, 4)
    weight, bias = layer.weight.numpy(), layer.bias.numpy()
    opt = Adam([layer.weight, layer.bias], lr=0.5)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    with Tensor.train():
        hidden = layer(Tensor(x)).relu()  # kept by the caller, realized only after the step
        hidden.sum().backward()
        opt.step()  # writes new weights: the activation's graph reads the old ones
    np.testing.assert_allclose(hidden.numpy(), np.maximum(x @ weight.T + bias, 0), rtol=1e-6)
    assert not np.allclose(layer.weight.numpy(), weight)


def test_a_jit_drops_the_copies_nothing_in_it_reads():
    weights = Tensor([1.0, 2.0, 3.0]).realize()

    def step(x: Tensor) -> Tensor:
        before = weights * x  # realized after the update: needs the old weights, in every replay
        weights.assign(weights + 1).realize()
        unused = weights * 5  # noqa: F841  (held while the next assign runs, never realized)
        weights.assign(weights - 1).realize()
        return before.realize()

    jitted = TinyJit(step)
    for i in range(4):
        x = np.full(3, i + 1, np.float32)
        np.testing.assert_array_equal(jitted(Tensor(x)).numpy(), np.array([1, 2, 3]) * x)
    assert jitted.captured is not None
    copies = [ei for ei in jitted.jit_cache if ei.bufs[0] is not weights.lazydata.base.buffer]
    assert len(jitted.jit_cache) - len(copies) == 2  # the two assigns into the weights
    # the first snapshot (read by `before`) and `before`; the second snapshot is dropped, and each value is computed
    # by its assign's own kernel, in place
    assert len(copies) == 2


def test_the_search_visits_only_what_reads_the_target(monkeypatch):
    import lazy.lazy

    unrelated = [Tensor.ones(2).contiguous() * i for i in range(300)]  # a large live graph elsewhere
    t = Tensor([1.0, 2.0]).realize()
    held = (t * 2) + 1
    visited = []
    look_up = lazy.lazy._look_up
    monkeypatch.setattr(lazy.lazy, "_look_up", lambda ref, realized: (visited.append(ref), look_up(ref, realized))[1])
    t.assign(t + 1).realize()
    assert 1 <= len(visited) <= 4 and len(unrelated) == 300  # the readers of t and above them, not the whole graph
    np.testing.assert_array_equal(held.numpy(), [3, 5])

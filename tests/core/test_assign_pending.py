"""Assigns to a tensor whose earlier write has not run yet, writes through views of values not yet computed, and
the writes a jitted function leaves unrun (found by fuzzing jit and in-place programs against eager runs)."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, TinyJit


@pytest.mark.parametrize("device", [None, "PYTHON"])
def test_a_second_pending_assign_keeps_the_buffer(device):
    w = Tensor(np.zeros(3, np.float32), device=device).realize()
    memory = w.lazydata.base.realized
    w.assign(w - 1)
    w.assign(w - 1)  # (went to memory of its own: a jit replaying the first write updated a buffer no one read)
    w -= 1
    np.testing.assert_array_equal(w.numpy(), [-3, -3, -3])
    assert w.lazydata.base.realized is memory


def test_a_jitted_step_with_two_writes_to_one_tensor_matches_eager():
    def run(jit: bool) -> list[float]:
        w = Tensor(np.zeros(3, np.float32)).realize()

        def step(x: Tensor) -> Tensor:
            w.assign(w - x)
            w.assign(w - x)
            return w * 1.0

        f = TinyJit(step) if jit else step
        return [float(f(Tensor(np.full(3, c + 1, np.float32)).realize()).numpy()[0]) for c in range(5)]

    assert run(True) == run(False) == [-2.0, -6.0, -12.0, -20.0, -30.0]


def test_writes_through_views_reach_the_viewed_tensor():
    x = Tensor([1.0, 2.0, 3.0]) * 2  # not computed yet
    v = x[0:2]
    v.assign(v + 10)
    np.testing.assert_array_equal(x.numpy(), [12, 14, 6])  # (only v had the new values)
    x = Tensor([1.0, 2.0, 3.0]).realize()
    x += 1
    x += 1
    v = x[0:2]
    v.assign(v + 10)
    np.testing.assert_array_equal(x.numpy(), [13, 14, 5])


def test_a_jit_runs_the_writes_its_function_leaves_unrun_and_not_earlier_ones():
    def run(jit: bool) -> list[tuple[float, float]]:
        w = Tensor(np.zeros(3, np.float32)).realize()

        def step(x: Tensor) -> Tensor:
            w.assign(w - x)  # neither returned nor realized: a replay ran only the returned value's kernel
            return x * 2

        f = TinyJit(step) if jit else step
        out = []
        for c in range(5):
            r = f(Tensor(np.full(3, c + 1, np.float32)).realize())
            out.append((float(r.numpy()[0]), float(w.numpy()[0])))
        return out

    assert run(True) == run(False) == [(2.0, -1.0), (4.0, -3.0), (6.0, -6.0), (8.0, -10.0), (10.0, -15.0)]

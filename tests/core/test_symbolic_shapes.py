"""Symbolic shapes: a dimension can be a bound Variable; one kernel is compiled for all its values, and a jit
replays with inputs whose size changes along that dimension. PYTHON device."""

import numpy as np
import pytest

from lazy import Context, Tensor, Variable, jit
from lazy.engine.realize import method_cache


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


A = np.arange(40, dtype=np.float32).reshape(10, 4)


def first_rows(out: Tensor, n: int) -> np.ndarray:
    buf = out.contiguous().realize().lazydata.base.realized
    assert buf is not None
    return buf.numpy()[:n]


def test_one_kernel_serves_every_value_of_a_variable():
    t = Tensor(A).realize()
    before = len(method_cache)
    for n in (3, 5, 7, 3):
        v = Variable("n", 1, 10).bind(n)
        y = (t.shrink(((0, v), (0, 4))) * 2 + 1).sum(1)
        np.testing.assert_allclose(first_rows(y, n), (A[:n] * 2 + 1).sum(1))
    assert len(method_cache) - before <= 2  # the symbolic kernel (and its contiguous copy), compiled once


def test_a_bound_variable_as_a_constant():
    for n in (2, 6):
        v = Variable("k", 1, 10).bind(n)
        np.testing.assert_allclose((Tensor([1.0, 2.0]) * Tensor(v).cast("float")).numpy(), [n, 2 * n])


def test_jit_replays_with_a_changing_symbolic_dimension():
    @jit
    def f(x: Tensor) -> Tensor:
        return (x * 3).sum(1).realize()

    t = Tensor(A).realize()
    for n in (2, 4, 6, 8):
        v = Variable("rows", 1, 10).bind(n)
        out = f(t.shrink(((0, v), (0, 4))))
        np.testing.assert_allclose(first_rows(out, n), (A[:n] * 3).sum(1))
    assert f.cnt == 4 and f.jit_cache, "the later calls replayed the captured kernels"


@pytest.mark.parametrize("n", [1, 3, 8])
def test_stacking_elementwise_results_over_a_symbolic_axis(n):
    """`Tensor.stack(x, x * 2)` of `x = a[:, :i]`: the new axis is padded over a view of a slice, which composes into
    one view by setting the stride-0 axis aside (it needed an index modulo `i`, which the lowerer refused)."""
    data = np.arange(72, dtype=np.float32).reshape(9, 8)
    x = Tensor(data).realize()[:, : Variable("i", 1, 8).bind(n)]
    part = data[:, :n]
    assert Tensor.stack(x, x * 2).sum().item() == np.stack([part, part * 2]).sum()
    assert Tensor.stack(x * 3, x, dim=1).sum(1).sum().item() == (part * 4).sum()
    assert (x + 1).reshape(1, 9, x.shape[1]).expand(4, 9, x.shape[1]).sum().item() == 4 * (part + 1).sum()

"""Slicing with bound variables (issue 16 item 2): `a[:, :vi]`, `a[vi:vi+2]` and `shrink` with a bound `Variable`
give tensors of symbolic shape, checked against the variable's bound value; the usual ops work on them, `numpy()`
reads the bound size, and a jit captures each once for every value. PYTHON device."""

import numpy as np
import pytest

from lazy import Context, Tensor, TinyJit, Variable
from lazy.engine.realize import method_cache
from lazy.symbolic import ConcreteValueError

A = np.arange(110, dtype=np.float32).reshape(11, 10) / 10
B = np.arange(60, dtype=np.float32).reshape(10, 6) / 20


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def var(i: int, name: str = "i") -> Variable:
    return Variable(name, 1, 10).bind(i)


def test_slices_and_shrinks_have_symbolic_shapes():
    a, vi = Tensor(A), var(3)
    assert a[:, :vi].shape == (11, vi) and a[vi:].shape == (11 - vi, 10)
    assert a[vi : vi + 2].shape == (2, 10)
    assert a.shrink(((3, 5), (vi, vi + 2))).shape == (2, 2)
    for i in (1, 4, 8):
        vi = var(i)
        np.testing.assert_array_equal(a[:, :vi].numpy(), A[:, :i])
        np.testing.assert_array_equal(a[vi : vi + 2].numpy(), A[i : i + 2])
        np.testing.assert_array_equal(a[vi:].numpy(), A[i:])
        np.testing.assert_array_equal(a.shrink(((3, 5), (vi, vi + 2))).numpy(), A[3:5, i : i + 2])


def test_shape_checks_use_the_bound_value():
    a = Tensor(A)  # the end vi + 2 reaches 12 > 11 only for vi = 10, a value this binding does not take
    np.testing.assert_array_equal(a[var(9) : var(9) + 2].numpy(), A[9:11])
    with pytest.raises(ValueError, match="out of range for shape"):
        a.shrink(((var(10), var(10) + 2), None))
    with pytest.raises(IndexError, match="out of range for axis 0"):
        a[var(10) : var(10) + 2]
    with pytest.raises(ValueError, match="out of range"):  # unbound: the whole range must fit
        a.shrink(((Variable("u", 1, 10), Variable("u", 1, 10) + 2), None))
    with pytest.raises(IndexError, match="must have step 1"):
        a[: var(4) : 2]


def test_numpy_of_a_symbolic_tensor():
    a = Tensor(A)
    assert a[:, : var(4)].numpy().shape == (11, 4)
    with pytest.raises(ConcreteValueError, match=r"u is in \[1, 10\] \(unbound\).*bind"):
        a[:, : Variable("u", 1, 10)].numpy()
    np.testing.assert_array_equal(Tensor(var(4) * 2 - 1).numpy(), 7)  # a symbolic expression as a constant


def _pad_back(x: Tensor, v: Variable) -> Tensor:
    return x.pad(((0, 0), (0, 10 - v)))


OPS = {  # name: (lazy op on a[:, :vi], numpy op on A[:, :i])
    "elementwise": (lambda x, v: (x * 2 + 1).exp2() - x, lambda x, i: 2 ** (x * 2 + 1) - x),
    "pad": (_pad_back, lambda x, i: np.pad(x, ((0, 0), (0, 10 - i)))),
    "cat": (lambda x, v: x.cat(x * 2, dim=1), lambda x, i: np.concatenate([x, x * 2], 1)),
    "sum": (lambda x, v: x.sum(1), lambda x, i: x.sum(1)),
    "sum_all": (lambda x, v: x.sum(), lambda x, i: x.sum()),
    "mean": (lambda x, v: x.mean(1), lambda x, i: x.mean(1)),
    "var": (lambda x, v: x.var(1), lambda x, i: x.var(1, ddof=1)),
    "matmul": (lambda x, v: x @ Tensor(B)[:v], lambda x, i: x @ B[:i]),
    "reshape": (lambda x, v: x[:10].reshape(2, 5, v).sum(1), lambda x, i: x[:10].reshape(2, 5, i).sum(1)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_on_a_symbolic_axis(name: str):
    op, ref = OPS[name]
    a = Tensor(A).realize()
    for i in (2, 7):
        np.testing.assert_allclose(op(a[:, : var(i)], var(i)).numpy(), ref(A[:, :i], i), rtol=1e-5, atol=1e-5)


def test_cat_of_two_variables():
    a = Tensor(A).realize()
    for i, j in ((2, 5), (7, 1)):
        got = a[:, : var(i)].cat(a[:, : var(j, "j")], dim=1)
        assert got.shape == (11, var(i) + var(j, "j"))
        np.testing.assert_array_equal(got.numpy(), np.concatenate([A[:, :i], A[:, :j]], 1))


def test_attention_over_a_symbolic_sequence_length():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 1, 4), (1, 2, 10, 4), (1, 2, 10, 3)))
    kt, vt = Tensor(k).realize(), Tensor(v).realize()
    for n in (1, 6):
        s = var(n)
        got = Tensor(q).scaled_dot_product_attention(kt[:, :, :s], vt[:, :, :s]).numpy()
        scores = q @ k[:, :, :n].transpose(0, 1, 3, 2) / 2
        att = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(got, att / att.sum(-1, keepdims=True) @ v[:, :, :n], rtol=1e-5, atol=1e-6)


def test_one_kernel_serves_every_value():
    a = Tensor(A).realize()
    (a[:, : var(2)] * 3).sum(1).numpy()
    before = len(method_cache)
    for i in (4, 9, 5):
        np.testing.assert_allclose((a[:, : var(i)] * 3).sum(1).numpy(), (A[:, :i] * 3).sum(1), rtol=1e-6)
    assert len(method_cache) == before


JIT_OPS = {  # ops whose result has a concrete shape: symbolic ones (cat, reshape) are padded back to one
    **{name: OPS[name] for name in ("pad", "sum", "mean", "var", "matmul")},
    "cat": (
        lambda x, v: x.cat(x * 2, dim=1).pad(((0, 0), (0, 20 - 2 * v))),
        lambda x, i: np.pad(np.concatenate([x, x * 2], 1), ((0, 0), (0, 20 - 2 * i))),
    ),
    "reshape": (
        lambda x, v: x[:10].reshape(2, 5, v).sum(1).pad(((0, 0), (0, 10 - v))),
        lambda x, i: np.pad(x[:10].reshape(2, 5, i).sum(1), ((0, 0), (0, 10 - i))),
    ),
}


@pytest.mark.parametrize("name", sorted(JIT_OPS))
def test_jit_captures_each_op_once(name: str):
    op, ref = JIT_OPS[name]
    jf = TinyJit(lambda a, v: op(a[:, :v], v).contiguous().realize())
    a = Tensor(A).realize()
    for i in (2, 5, 4, 3):
        np.testing.assert_allclose(jf(a, var(i)).numpy(), ref(A[:, :i], i), rtol=1e-5, atol=1e-5)
    assert jf.captured is not None and jf.captured.replays == 2  # call 1 runs, call 2 captures, 3 and 4 replay


def test_a_realized_symbolic_node_is_rebound_to_new_values():
    """`LazyBuffer.bind`: the same memory read with other values of its variables, for a base of symbolic shape and
    a view of it (what a jit replay needs to return a symbolic result with the call's values)."""
    out = (Tensor(A)[:, : var(4)] * 2).realize()
    unbound = Variable("i", 1, 10)
    base = out.lazydata.bind({unbound: 3})
    assert base.shape[0] == 11 and base.shape[1].val == 3 and base.realized is out.lazydata.realized
    view = out[1:].lazydata.bind({unbound: 3})
    assert view.shape[0] == 10 and view.shape[1].val == 3 and view.base.realized is out.lazydata.realized
    memory = out.lazydata.realized.numpy()[:33].reshape(11, 3)  # as a replay with i = 3 would have written it
    np.testing.assert_array_equal(Tensor(base).numpy(), memory)
    np.testing.assert_array_equal(Tensor(view).numpy(), memory[1:])


def test_jit_kv_cache_with_index_slicing_and_attention():
    """The decoder step with `cache[:, :, :start_pos + 1]` indexing and scaled dot-product attention, jitted,
    against eager for every start_pos."""
    size, heads, dim = 5, 2, 4
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((size, 1, heads, 1, dim)).astype(np.float32)

    def make_step():
        cache = Tensor.zeros(2, heads, size, dim).contiguous().realize()

        def step(x: Tensor, start_pos: Variable) -> Tensor:
            cache[:, :, start_pos : start_pos + 1] = x.reshape(1, heads, 1, dim).expand(2, heads, 1, dim)
            seen = cache[:, :, : start_pos + 1]  # (2, heads, start_pos+1, dim)
            return x.scaled_dot_product_attention(seen[0:1], seen[1:2]).realize()

        return step

    eager, jitted = make_step(), TinyJit(make_step())
    for pos in range(size):
        v = Variable("start_pos", 0, size - 1).bind(pos)
        got, want = jitted(Tensor(xs[pos]), v).numpy(), eager(Tensor(xs[pos]), v).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        seen = xs[: pos + 1, 0, :, 0]  # (pos+1, heads, dim)
        scores = np.einsum("hd,shd->hs", xs[pos, 0, :, 0], seen) / 2
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        np.testing.assert_allclose(got[0, :, 0], np.einsum("hs,shd->hd", att, seen), rtol=1e-4, atol=1e-5)
    assert jitted.captured is not None and jitted.captured.replays == size - 2


def test_jit_returns_symbolic_results_with_the_calls_values():
    jf = TinyJit(lambda a, v: (a[:, :v] * 2).realize())
    a = Tensor(A).realize()
    for i in (2, 5, 9, 3):
        np.testing.assert_allclose(jf(a, var(i)).numpy(), A[:, :i] * 2)

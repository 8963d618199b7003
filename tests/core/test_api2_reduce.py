"""Reductions of issue 9 (items 3 and 5): `dtype=` on sum, prod and cumsum (a DType or its name), and softmax,
softmin, log_softmax and logsumexp exact to float32 rounding for widely spread inputs (against float64 references
and PyTorch). PYTHON device."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lazy import Context, GlobalCounters, Tensor, dtypes

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


# -- dtype= ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [dtypes.int64, "int64", "long", dtypes.float16, "float32"])
def test_sum_prod_cumsum_take_a_dtype_or_its_name(dtype):
    x = np.array([[1, 2, 3], [4, 100, 6]], np.int8)
    t = Tensor(x)
    np_dtype = {"int64": np.int64, "long": np.int64, "float32": np.float32, dtypes.int64: np.int64,
                dtypes.float16: np.float16}[dtype]  # fmt: skip
    ref = x.astype(np_dtype)
    for got, want in [(t.sum(1, dtype=dtype), ref.sum(1)), (t.prod(0, dtype=dtype), ref.prod(0)),
                      (t.cumsum(1, dtype=dtype), ref.cumsum(1))]:  # fmt: skip
        assert got.numpy().dtype == np_dtype
        np.testing.assert_array_equal(got.numpy(), want)


def test_cumsum_dtype_casts_first_and_keeps_that_dtype():
    t = Tensor([100, 100, 100], dtype=dtypes.int8)
    assert t.cumsum().dtype == dtypes.int32  # tinygrad's accumulation dtype for small ints
    np.testing.assert_array_equal(t.cumsum().numpy(), [100, 200, 300])
    np.testing.assert_array_equal(t.cumsum(dtype=dtypes.int8).numpy(), np.array([100, 200, 300]).astype(np.int8))
    np.testing.assert_array_equal(Tensor([2, 3, 4]).cumprod(0, dtype="int64").numpy(), [2, 6, 24])
    with pytest.raises(ValueError, match="unknown dtype"):
        t.cumsum(dtype="int99")


# -- softmax and friends with widely spread values ---------------------------------------------------------------------


def _exact_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


SPREAD = {
    # one large value and many tiny ones: each tiny term added to a running 1 rounds away in float32
    "one_big_many_tiny": np.concatenate([[0.0], np.full(999, -16.8)]).astype(np.float32)[None],
    "wide_normal": (RNG.standard_normal((8, 300)) * 30).astype(np.float32),
    "moderate": (RNG.standard_normal((8, 64)) * 10).astype(np.float32),
    "huge": (RNG.standard_normal((4, 50)) * 1e4).astype(np.float32),
    "ties": np.array([[3.0, 3.0, -20.0, -20.0, -20.0]], np.float32),
}


@pytest.mark.parametrize("name", list(SPREAD))
def test_softmax_is_exact_to_float32_rounding(name):
    x = SPREAD[name]
    exact = _exact_softmax(x)
    np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), exact, rtol=0, atol=1e-7)
    np.testing.assert_allclose(Tensor(-x).softmin(-1).numpy(), exact, rtol=0, atol=1e-7)
    shifted = x.astype(np.float64) - x.max(-1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(-1))
    np.testing.assert_allclose(Tensor(x).log_softmax(-1).numpy(), shifted - log_sum[:, None], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(Tensor(x).logsumexp(-1).numpy(), log_sum + x.max(-1), rtol=1e-6, atol=1e-7)


def test_softmax_against_pytorch_for_large_spreads():
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here; CI installs it")
    for scale in (20, 50, 100, 1000):
        x = (RNG.standard_normal((10, 10, 10)) * scale).astype(np.float32)
        for axis in (0, 2):
            want = torch.tensor(x).softmax(axis).numpy()
            # PyTorch is itself within an ulp or two of the exact softmax; tinygrad's helper_test_op tolerance
            np.testing.assert_allclose(Tensor(x).softmax(axis).numpy(), want, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(Tensor(-x).softmin(axis).numpy(), want, rtol=1e-6, atol=1e-7)


def test_softmax_edge_values_and_gradient():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [0.0, np.nan, 1.0]], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.array([[0.26894142, 0.0, 0.7310586], [np.nan] * 3, [np.nan] * 3], np.float32)
    np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), want, rtol=1e-6)
    assert Tensor(3.0).softmax().item() == 1.0 and Tensor(3.0).logsumexp().item() == 3.0
    assert Tensor.ones(0, 3).softmax(-1).shape == (0, 3)  # (an empty batch: the sums' shape has a 0 in it)
    np.testing.assert_array_equal(Tensor.ones(3, 0).logsumexp(-1).numpy(), [-np.inf] * 3)
    # d softmax(x)_0 / dx = p_0 (onehot_0 - p): shift invariant, whatever the reduction split
    v = np.array([2.0, 2.0, -1.0, 0.5], np.float32)
    t = Tensor(v, requires_grad=True)
    t.softmax()[0].backward()
    p = _exact_softmax(v[None])[0]
    np.testing.assert_allclose(t.grad.numpy(), p[0] * (np.eye(4)[0] - p), rtol=1e-5, atol=1e-7)


# -- prod, cumsum and cumprod over long axes ---------------------------------------------------------------------------


def _largest_kernel_loads(*ts: Tensor) -> int:
    """The most buffer reads any kernel of the schedule realizing `ts` makes (LOAD nodes of its AST)."""
    from lazy.ops import Ops

    def loads(op) -> int:
        seen, stack, count = set(), [op], 0
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            count += node.op is Ops.LOAD
            stack.extend(node.src)
        return count

    return max((loads(si.ast) for si in ts[0].schedule(*ts[1:]) if si.ast.op is Ops.SINK), default=0)


@pytest.mark.parametrize("n", [1, 2, 3, 17, 64, 257, 1000])
def test_prod_of_a_long_axis_is_few_small_kernels_and_exact(n):
    """`prod` multiplies halves pairwise; each kernel fuses a few halvings (`PROD_FUSED_FAN_IN`), forward and
    backward: fused whole, an element of the product of 4096 was one expression of 4095 products (22 s to generate),
    and of the gradient of a product of 128 one of 128 masked branches (168 s). Values and gradients against
    PyTorch in float64, with zeros among the factors."""
    import torch

    from lazy.tensor_reduce import PROD_FUSED_FAN_IN

    for zeros in (0, 1, 2):
        x = RNG.uniform(0.9, 1.1, (3, n)).astype(np.float32)
        x[:, : min(zeros, n)] = 0.0
        t = Tensor(x, requires_grad=True)
        out = t.prod(1)
        assert _largest_kernel_loads(out) <= 4 * PROD_FUSED_FAN_IN, "a forward kernel fused too many factors"
        out.backward(Tensor(np.array([1.0, -2.0, 0.5], np.float32)))
        assert t.grad is not None
        assert _largest_kernel_loads(t.grad) <= 8 * PROD_FUSED_FAN_IN, "a gradient kernel fused too many branches"
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        tout = tx.prod(1)
        tout.backward(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-30)
        np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "logcumsumexp"])
@pytest.mark.parametrize("n", [63, 64, 65, 1000])
def test_running_sums_and_products_of_a_long_axis_go_by_blocks(op, n):
    """cumsum, cumprod, cummax and logcumsumexp of an axis longer than `CUMULATIVE_BLOCK` scan block by block: no
    buffer of the forward or backward holds more than n x block elements (each output masking the whole axis
    realized n x n / 4 partial products: the running product of 70000 floats ran out of memory), and the forward
    does O(n x block) work, not O(n^2) (a running max of 65536 took 2.5 s). Values and gradients against PyTorch."""
    import torch

    from lazy.tensor_reduce import CUMULATIVE_BLOCK

    x = RNG.uniform(0.99, 1.01, (2, n)).astype(np.float32) if op == "cumprod" else RNG.standard_normal((2, n))
    x = x.astype(np.float32)
    x[1, n // 2] = 0.0
    w = RNG.standard_normal((2, n)).astype(np.float32)
    t = Tensor(x, requires_grad=True)

    def run(t: Tensor) -> Tensor:
        out = getattr(t, op)(1)
        return out[0] if op == "cummax" else out

    GlobalCounters.reset()
    run(Tensor(x)).realize()
    padded = -(-n // CUMULATIVE_BLOCK) * CUMULATIVE_BLOCK
    assert GlobalCounters.global_ops <= 20 * 2 * padded * CUMULATIVE_BLOCK, f"{GlobalCounters.global_ops} operations"
    out = run(t)
    (out * Tensor(w)).sum().backward()
    assert t.grad is not None
    largest = max(b.size for si in out.schedule(t.grad) for b in si.bufs)
    assert largest <= 2 * n * CUMULATIVE_BLOCK, f"a buffer of {largest} elements for a scan of 2 x {n}"
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tout = getattr(tx, op)(1)
    tout = tout[0] if op == "cummax" else tout
    (tout * torch.tensor(w, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [64, 65, 200])
def test_logcumsumexp_edges_inf_half_and_empty(n):
    """logcumsumexp past +inf: +inf from there on, and the gradient finite away from the inf element (a NaN from
    exp(inf - inf) in a block's running total reached every element before it) and at it the outputs' count (the
    limit; PyTorch gives NaN there); half inputs computed in float32 and rounded once; an empty axis stays empty.
    max and cummax of a NaN send the gradient to the NaN (it matched no element: all NaN)."""
    x = np.zeros(n, np.float32)
    x[1] = np.inf
    t = Tensor(x, requires_grad=True)
    out = t.logcumsumexp(0)
    out.sum().backward()
    assert np.isinf(out.numpy()[1:]).all() and out.numpy()[0] == 0.0
    assert t.grad is not None
    np.testing.assert_array_equal(t.grad.numpy(), [1.0, n - 1] + [0.0] * (n - 2))
    h = RNG.uniform(-3, 3, n).astype(np.float16)
    want = np.logaddexp.accumulate(h.astype(np.float64)).astype(np.float16)
    got = Tensor(h).logcumsumexp(0).numpy()
    steps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want))
    assert steps.max() <= 1, f"{steps.max()} float16 steps off"
    assert Tensor.ones(3, 0).logcumsumexp(1).shape == (3, 0) and Tensor.ones(0).logcumsumexp(0).shape == (0,)
    for op, want_grad in ((lambda v: v.max(), [0, 0, 1, 0, 0]), (lambda v: v.cummax(0)[0].sum(), [1, 1, 3, 0, 0])):
        v = Tensor([1.0, 3.0, math.nan, 2.0, 5.0], requires_grad=True)
        op(v).backward()
        assert v.grad is not None
        np.testing.assert_array_equal(v.grad.numpy(), want_grad)


@pytest.mark.parametrize("n", [65, 130, 300])
def test_blocked_scans_route_gradients_around_minus_inf_and_nan(n):
    """Past one block: a -inf that starts a block (or follows only -inf in it) gets logcumsumexp's gradient 0, not
    NaN (its block's sum of exps is 0, and a log's gradient there was 0 * inf); a NaN takes every later running
    max's (and min's) gradient, and the elements after it none (the blocks' maximum sent it to both sides). Against
    PyTorch in float64."""
    import torch

    x = RNG.standard_normal(n).astype(np.float32)
    x[64], x[3:9], x[n - 40 :] = -np.inf, -np.inf, -np.inf
    w = RNG.standard_normal(n).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    (t.logcumsumexp(0) * Tensor(w)).sum().backward()
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (tx.logcumsumexp(0) * torch.tensor(w, dtype=torch.float64)).sum().backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    y = np.arange(n, dtype=np.float32)
    y[10] = np.nan
    for op in ("cummax", "cummin"):
        t = Tensor(y, requires_grad=True)
        getattr(t, op)(0)[0].sum().backward()
        ty = torch.tensor(y, requires_grad=True)
        getattr(ty, op)(0)[0].sum().backward()
        assert t.grad is not None
        np.testing.assert_array_equal(t.grad.numpy(), ty.grad.numpy(), err_msg=op)

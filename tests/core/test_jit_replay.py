"""A jit replay computes what eager execution computes, whatever the function does: kernels, copies between devices,
buffer views, assigns into its inputs, outputs that are inputs or views of them, constants, outputs that alias each
other. Each case runs the function eagerly and jitted on the same fresh inputs, call after call, and compares every
returned tensor and every input afterwards. What a replay cannot reproduce is refused with `JitError`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazy import Context, Tensor, TinyJit, Variable, dtypes
from lazy.engine.jit import JitError
from lazy.engine.realize import copy_now

DEVICES = ["PYTHON", "CPU"]
CALLS = 4  # eager call, capture, then replays


def inputs_for(call: int, shapes: tuple[tuple[int, ...], ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(call)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def leaves(ret: Any) -> list[Any]:
    if isinstance(ret, (tuple, list)):
        return [x for r in ret for x in leaves(r)]
    if isinstance(ret, dict):
        return [x for k in sorted(ret) for x in leaves(ret[k])]
    return [ret]


def as_numpy(ret: Any) -> list[Any]:
    return [x.numpy() if isinstance(x, Tensor) else x for x in leaves(ret)]


def check_replays(fn: Callable[..., Any], *shapes: tuple[int, ...], device: str, calls: int = CALLS) -> TinyJit:
    """Call `fn` eagerly and through a jit on the same fresh inputs each time; outputs and inputs must agree."""
    jitted = TinyJit(fn)
    for call in range(calls):
        arrays = inputs_for(call, shapes)
        eager_in = [Tensor(a, device=device).realize() for a in arrays]
        jit_in = [Tensor(a, device=device).realize() for a in arrays]
        want = as_numpy(fn(*eager_in))
        got = as_numpy(jitted(*jit_in))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert (g is None) == (w is None)
            if w is not None:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"call {call}")
        for g, w in zip(jit_in, eager_in):  # what the function did to its inputs
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"input, call {call}")
    assert jitted.captured is not None and jitted.captured.replays == calls - 2
    return jitted


@pytest.fixture(params=DEVICES)
def device(request):
    with Context(DEVICE=request.param):
        yield request.param


# -- what runs -----------------------------------------------------------------------------------------------------


def test_a_clone_alone(device):
    # the issue: calls 3+ returned call 2's values
    check_replays(lambda a: a.clone().realize(), (10, 10), device=device)


def test_kernels_and_intermediates(device):
    def fn(a, b):
        x = (a * b).contiguous()
        y = (x + 1).contiguous()
        return (y * x + a).sum(1).realize()

    check_replays(fn, (3, 4), (3, 4), device=device)


def test_a_buffer_view_of_an_input(device):
    # a size-changing bitcast of an input shares its memory (BUFFER_VIEW): the replay moves the view to the new input
    check_replays(lambda a: a.bitcast(dtypes.int16).realize(), (2, 3), device=device)
    check_replays(lambda a: (a.bitcast(dtypes.int16) + 1).realize(), (2, 3), device=device)


@pytest.mark.parametrize(
    "src,dest",
    [
        ("PYTHON", "CPU"),
        ("CPU", "PYTHON"),
        *(pytest.param(*pair, marks=pytest.mark.devices("CL")) for pair in (("CPU", "CL"), ("CL", "CPU"))),
    ],
)
def test_copies_between_devices(src, dest):
    check_replays(lambda a: a.to(dest).realize(), (2, 5), device=src)
    check_replays(lambda a: (a.to(dest) * 2).realize(), (2, 5), device=src)
    check_replays(lambda a: a[1:2].to(dest).realize(), (3, 5), device=src)  # a slice is copied straight out of memory


def test_a_copy_made_outside_a_schedule(device):
    """`copy_now` (what a write into a copy-only device uses) is recorded like a schedule's copy."""
    out = Tensor.zeros(2, 3).contiguous().realize()

    def fn(a):
        copy_now(out.lazydata.base.realized, a.lazydata.base.realized)
        return (out * 2).realize()

    check_replays(fn, (2, 3), device=device)


def test_a_host_constant_and_constants(device):
    def fn(a):
        return a + Tensor([1.0, 2.0, 3.0]), Tensor.ones(3).contiguous(), (a * 0 + 7).realize()

    check_replays(fn, (3,), device=device)


def test_constant_inputs(device):
    g = TinyJit(lambda x, y, z: (x + y + z).realize())
    for i in range(CALLS):
        np.testing.assert_equal(g(Tensor([i] * 3), Tensor.ones(3), Tensor.zeros(3)).numpy(), [i + 1] * 3)


def test_a_function_of_no_tensor_arguments():
    with Context(DEVICE="PYTHON"):
        Tensor.manual_seed(3)
        jitted = TinyJit(lambda: Tensor.rand(3).realize())
        got = [jitted().numpy() for _ in range(CALLS)]
        Tensor.manual_seed(3)
        np.testing.assert_array_equal(np.stack(got), np.stack([Tensor.rand(3).numpy() for _ in range(CALLS)]))


# -- outputs that are inputs, views of inputs, or each other ---------------------------------------------------------


def test_assign_into_an_input(device):
    def fn(a, b):
        a.assign(a * 2 + b).realize()

    check_replays(fn, (4,), (4,), device=device)


def test_an_updated_input_returned(device):
    def fn(a, b):
        a += b
        return a

    jitted = check_replays(fn, (4,), (4,), device=device)
    x, y = Tensor([1.0, 2.0, 3.0, 4.0]), Tensor([1.0, 1.0, 1.0, 1.0])
    assert jitted(x, y) is x  # the same object as eagerly: the replay returns this call's input


def test_outputs_that_are_inputs_or_views_of_inputs(device):
    def fn(a, b):
        return (a + b).realize(), a, b.reshape(-1), a.T, a[1:3], b.reshape(2, 3)[1]

    check_replays(fn, (3, 2), (3, 2), device=device)


def test_outputs_that_alias_each_other(device):
    def fn(a):
        y = (a + 1).realize()
        return y, y.reshape(-1), y, {"twice": y}

    check_replays(fn, (2, 3), device=device)


def test_inputs_in_a_list_and_by_keyword(device):
    jitted = TinyJit(lambda a, bs, scale: (a + bs[0] * bs[1] * scale).realize())
    for call in range(CALLS):
        a, b, c, s = (Tensor(x) for x in inputs_for(call, ((3,), (3,), (3,), (3,))))
        np.testing.assert_allclose(jitted(a, [b, c], scale=s).numpy(), (a + b * c * s).numpy(), rtol=1e-6)


def test_non_contiguous_input_views(device):
    base = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
    check_replays(lambda a: (a.T * 2).realize(), (3, 5), device=device)  # a view inside the function
    jitted = TinyJit(lambda a: (a + 1).realize())
    for call in range(CALLS):  # the same view of a new buffer each call
        t = (base + call).realize()
        np.testing.assert_array_equal(jitted(t[:, 1:3]).numpy(), (base + call).numpy()[:, 1:3] + 1)
    with pytest.raises(JitError, match="a view of its memory"):
        jitted(base[:, 2:4])  # another offset: the captured kernel reads the memory through the captured view


# -- symbolic shapes -------------------------------------------------------------------------------------------------


def test_a_symbolic_dimension_is_captured_once(device):
    jitted = TinyJit(lambda a, b: (a * b + 1).sum(1).realize())
    data = np.arange(40, dtype=np.float32).reshape(10, 4)
    t = Tensor(data).realize()
    for n in (2, 5, 3, 7, 9):
        v = Variable("rows", 1, 10).bind(n)
        out = jitted(t.shrink(((0, v), (0, 4))), (t * 2).realize().shrink(((0, v), (0, 4))))
        np.testing.assert_allclose(_rows(out, n), (data[:n] * data[:n] * 2 + 1).sum(1))
    assert jitted.cnt == 5 and len(jitted.jit_cache) == 1  # one kernel, replayed for every value


def _rows(out: Tensor, n: int) -> np.ndarray:
    buf = out.contiguous().realize().lazydata.base.realized
    assert buf is not None
    return buf.numpy()[:n]


# -- refused -------------------------------------------------------------------------------------------------------


def test_a_function_that_runs_nothing_is_refused(device):
    jitted = TinyJit(lambda a: a.reshape(-1))
    jitted(Tensor([1.0, 2.0]))
    with pytest.raises(JitError, match="ran no kernel"):
        jitted(Tensor([1.0, 2.0]))


def test_the_same_input_twice_is_refused(device):
    a = Tensor([1.0, 2.0]).realize()
    with pytest.raises(JitError, match="share memory"):
        TinyJit(lambda x, y: (x + y).realize())(a, a)
    with pytest.raises(JitError, match="share memory"):
        TinyJit(lambda x, y: (x + y).realize())(a, a.reshape(2, 1).reshape(2))


def test_a_returned_number_is_refused(device):
    jitted = TinyJit(lambda a, i: ((a + 1).realize(), i))
    jitted(Tensor([1.0]), 1)
    with pytest.raises(JitError, match="returned a int"):
        jitted(Tensor([1.0]), 2)


@pytest.mark.parametrize("device", DEVICES)
def test_state_not_realized_before_the_jit_keeps_every_replays_write(device):
    """State a jitted function updates without returning it (`w.assign(w + x)`), never realized before: the eager
    call leaves it a value with no memory, which the capture realizes outside the recorded kernels, so that every
    replay adds to it (the replays' writes were lost: 2 updates of 5). BatchNorm's running statistics and batch count
    under a jitted training step match the eager step's."""
    w = Tensor.zeros(3, device=device)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        w.assign(w + x)
        return (x * 2).realize()

    for i in range(5):
        f(Tensor([1.0, 2.0, float(i)], device=device))
    np.testing.assert_array_equal(w.numpy(), [5, 10, 10])

    from lazy import nn
    from lazy.nn import optim

    batches = np.random.default_rng(0).standard_normal((6, 16, 8)).astype(np.float32)

    def train(use_jit: bool) -> tuple[int, np.ndarray, np.ndarray]:
        Tensor.manual_seed(0)
        lin, bn = nn.Linear(8, 16), nn.BatchNorm(16)
        opt = optim.SGD([lin.weight, lin.bias], lr=0.05)

        def step(x: Tensor) -> Tensor:
            with Tensor.train():
                opt.zero_grad()
                loss = bn(lin(x)).square().mean().backward()
                opt.step()
                return loss.realize()

        run = TinyJit(step) if use_jit else step
        for batch in batches:
            run(Tensor(batch, device=device))
        return bn.num_batches_tracked.item(), bn.running_mean.numpy(), bn.running_var.numpy()

    with Context(DEVICE=device):
        (count, mean, var), (want_count, want_mean, want_var) = train(True), train(False)
    assert count == want_count == len(batches)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, want_var, rtol=1e-5, atol=1e-6)

"""The schedule cache (`lazy.engine.realize.realize`): a graph whose structure was realized before runs the schedule
made for it then, on its own buffers, and never a stale one: constants, variable values, dtypes, devices and shapes
are part of the structure; buffers are not, so an assign in between or a freed and reallocated buffer is read anew."""

from __future__ import annotations

import functools
import gc

import numpy as np
import pytest

from lazy import Tensor, Variable
from lazy.engine import realize as engine
from lazy.engine.schedule import graph_structure

X = np.arange(16, dtype=np.float32)


@pytest.fixture
def scheduled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the scheduler ran (one entry per `create_schedule` call), from an empty schedule cache."""
    calls: list[int] = []
    real = engine.create_schedule

    def counting(outs):  # type: ignore[no-untyped-def]
        calls.append(len(outs))
        return real(outs)

    monkeypatch.setattr(engine, "create_schedule", counting)
    monkeypatch.setattr(engine, "schedule_cache", {})
    return calls


def test_a_seen_structure_is_not_scheduled_again(scheduled: list[int]) -> None:
    x = Tensor(X).realize()
    np.testing.assert_equal((x + 1).numpy(), X + 1)
    before = len(scheduled)
    for _ in range(5):
        np.testing.assert_equal((x + 1).numpy(), X + 1)
    y = Tensor(X * 2).realize()  # other buffers, same structure
    np.testing.assert_equal((y + 1).numpy(), X * 2 + 1)
    assert len(scheduled) == before


@pytest.mark.parametrize("value", [2.0, -0.0, 0.0, float("inf"), 1])
def test_different_constants_are_different_structures(scheduled: list[int], value: float) -> None:
    x = Tensor(X).realize()
    np.testing.assert_equal((x * 3.0).numpy(), X * 3)
    np.testing.assert_equal((x * value).numpy(), X * np.float32(value))
    np.testing.assert_equal(np.signbit((x * value).numpy()), np.signbit(X * np.float32(value)))


def test_negative_zero_is_not_positive_zero(scheduled: list[int]) -> None:
    x = Tensor([1.0, 2.0]).realize()
    assert list(1 / (x * 0.0).numpy()) == [np.inf, np.inf]
    assert list(1 / (x * -0.0).numpy()) == [-np.inf, -np.inf]


def test_different_dtypes(scheduled: list[int]) -> None:
    f = Tensor(X).realize()
    i = Tensor(X.astype(np.int32)).realize()
    np.testing.assert_equal((f / 2).numpy(), X / 2)
    np.testing.assert_equal((i // 2).numpy(), X.astype(np.int32) // 2)
    np.testing.assert_equal((f + 1).numpy(), X + 1)
    np.testing.assert_equal((i + 1).numpy(), X.astype(np.int32) + 1)
    assert (i + 1).numpy().dtype == np.int32


def test_different_shapes(scheduled: list[int]) -> None:
    for n in (4, 16, 7, 4):
        x = Tensor(X[:n]).realize()
        np.testing.assert_equal((x + 1).numpy(), X[:n] + 1)
        np.testing.assert_equal(x.reshape(1, n).sum(1).numpy(), [X[:n].sum()])


def test_different_devices(scheduled: list[int]) -> None:
    for device in ("CPU", "PYTHON", "CPU"):
        x = Tensor(X, device=device).realize()
        out = x + 1
        np.testing.assert_equal(out.numpy(), X + 1)
        assert out.device == device


def test_different_variable_values(scheduled: list[int]) -> None:
    t = Tensor(X.reshape(4, 4)).realize()
    for n in (1, 3, 2, 3, 1):
        v = Variable("rows", 1, 4).bind(n)
        y = (t.shrink(((0, v), (0, 4))) * 2).sum(1).contiguous().realize()
        buf = y.lazydata.base.realized
        assert buf is not None
        np.testing.assert_equal(buf.numpy()[:n], (X.reshape(4, 4)[:n] * 2).sum(1))
    for n in (2, 5, 2):
        k = Variable("k", 1, 9).bind(n)
        np.testing.assert_equal((Tensor([1.0, 2.0]) * Tensor(k).cast("float")).numpy(), [n, 2 * n])


def test_a_realized_input_of_symbolic_shape_keeps_its_bound_value(scheduled: list[int]) -> None:
    """A realized node enters the key as a buffer of some shape; a symbolic shape's variables compare by name and
    range only, so the bound value must be in the key too: the sum of the k=3 columns was returned for k=6."""
    x = Tensor(np.arange(40, dtype=np.float32).reshape(4, 10)).realize()
    want = np.arange(40, dtype=np.float64).reshape(4, 10)
    for k in (3, 6, 3, 10):
        r = x[:, : Variable("k", 1, 10).bind(k)].contiguous().realize()
        assert r.sum().item() == want[:, :k].sum(), k
        np.testing.assert_equal(r.sum(0).numpy(), want[:, :k].sum(0))
    assert len(scheduled) < 12, "a value seen before runs its cached schedule"


def test_an_assign_in_between_is_read(scheduled: list[int]) -> None:
    x = Tensor(X).realize()
    np.testing.assert_equal((x + 1).numpy(), X + 1)
    x.assign(Tensor(X * 10)).realize()
    np.testing.assert_equal((x + 1).numpy(), X * 10 + 1)
    x.assign(x * 2).realize()
    np.testing.assert_equal((x + 1).numpy(), X * 20 + 1)


def test_a_freed_and_reallocated_buffer(scheduled: list[int]) -> None:
    for k in range(4):
        x = Tensor(X + k).realize()
        y = (x * 2).realize()
        del x
        gc.collect()  # x's memory goes back to the allocator's cache and is handed to the next tensor
        np.testing.assert_equal(y.numpy(), (X + k) * 2)
        np.testing.assert_equal((y + 1).numpy(), (X + k) * 2 + 1)


def test_aliasing_is_part_of_the_structure(scheduled: list[int]) -> None:
    a, b = Tensor(X).realize(), Tensor(X * 3).realize()
    np.testing.assert_equal((a + a).numpy(), X * 2)
    np.testing.assert_equal((a + b).numpy(), X * 4)
    np.testing.assert_equal((b + b).numpy(), X * 6)


def test_a_shared_intermediate(scheduled: list[int]) -> None:
    for k in (1.0, 1.0, 2.0):
        x = Tensor(X).realize()
        h = (x + k).contiguous()
        out = h * h.sum()
        expect = (X + k) * (X + k).sum()
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6)


def test_several_outputs_in_order(scheduled: list[int]) -> None:
    x = Tensor(X).realize()
    counts = []
    for _ in range(3):
        a, b = x + 1, x * 5
        Tensor.realize(a, b)
        np.testing.assert_equal(a.numpy(), X + 1)
        np.testing.assert_equal(b.numpy(), X * 5)
        counts.append(len(scheduled))
    assert counts[0] == counts[2]


def test_a_realized_part_changes_the_structure(scheduled: list[int]) -> None:
    x = Tensor(X).realize()
    h = x + 1
    out = h * 2
    key_before = graph_structure([out.lazydata])
    h.realize()
    key_after = graph_structure([out.lazydata])
    assert key_before is not None and key_after is not None and key_before.key != key_after.key
    np.testing.assert_equal(out.numpy(), (X + 1) * 2)


def test_assigns_are_cached_and_read_anew(scheduled: list[int]) -> None:
    w = Tensor(X).realize()
    w.assign(w + 1).realize()
    before = len(scheduled)
    for _ in range(3):
        w.assign(w + 1).realize()
    np.testing.assert_equal(w.numpy(), X + 4)
    assert len(scheduled) == before


def test_a_reader_outliving_an_assign_keeps_the_old_value_on_a_hit(scheduled: list[int]) -> None:
    """A node that reads a target's old value and is realized after the assign reads a snapshot, made anew on every
    run of the cached schedule (the same targets need one each time: the cache is used)."""
    w = Tensor(X).realize()
    before = None
    for k in range(4):
        r = w * 2  # not realized yet, and held: it must see w before this assign
        w.assign(w + 1).realize()
        if k == 1:
            before = len(scheduled)
        np.testing.assert_equal(r.numpy(), (X + k) * 2)
        np.testing.assert_equal(w.numpy(), X + k + 1)
    assert before is not None and len(scheduled) == before, "the later rounds ran cached schedules"


def test_a_hit_whose_targets_need_other_snapshots_is_scheduled_again(scheduled: list[int]) -> None:
    a, b = Tensor(X).realize(), Tensor(X * 10).realize()
    ra = a * 2  # reads a's old value
    Tensor.realize(a.assign(a + 1), b.assign(b + 1))  # made with a snapshot of a
    rb = b * 3  # now b's old value is the one read later, not a's
    Tensor.realize(a.assign(a + 1), b.assign(b + 1))
    Tensor.realize(a.assign(a + 1), b.assign(b + 1))  # no reader outlives: no snapshot
    np.testing.assert_equal(ra.numpy(), X * 2)
    np.testing.assert_equal(rb.numpy(), (X * 10 + 1) * 3)
    np.testing.assert_equal(a.numpy(), X + 3)
    np.testing.assert_equal(b.numpy(), X * 10 + 3)


def test_eager_training_steps_match_a_fresh_schedule_every_step() -> None:
    """Adam on a small MLP, eagerly (each step's optimizer realize has assigns and snapshots for the loss's graph):
    with the schedule cache and with every schedule made anew, the same weights after each step."""
    from lazy import nn
    from lazy.nn import optim

    def run(cache: bool) -> list[np.ndarray]:
        Tensor.manual_seed(3)
        layers = [nn.Linear(8, 16), nn.Linear(16, 4)]
        params = [p for layer in layers for p in (layer.weight, layer.bias)]
        opt = optim.Adam(params, lr=0.05)
        x, y = Tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)), Tensor(np.arange(8) % 4)
        seen = []
        for _ in range(4):
            if not cache:
                engine.schedule_cache.clear()
            with Tensor.train():
                opt.zero_grad()
                loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
                loss.backward()
                opt.step()
                seen.append(loss.numpy())
            seen += [p.numpy() for p in params]
        return seen

    for got, want in zip(run(cache=True), run(cache=False)):
        np.testing.assert_array_equal(got, want)


def test_views_are_part_of_the_structure(scheduled: list[int]) -> None:
    x = Tensor(X).realize()
    m = X.reshape(4, 4)
    np.testing.assert_equal((x.reshape(4, 4) + 1).numpy(), m + 1)
    np.testing.assert_equal((x.reshape(4, 4).T + 1).numpy(), m.T + 1)
    np.testing.assert_equal((x.reshape(4, 4).flip(0) + 1).numpy(), m[::-1] + 1)
    np.testing.assert_equal((x.reshape(4, 4).T + 1).numpy(), m.T + 1)


def test_the_dtype_of_a_realized_input(scheduled: list[int]) -> None:
    for dtype in (np.int32, np.float16, np.int32, np.uint8):
        x = Tensor(X.astype(dtype)).realize()
        np.testing.assert_equal(x.float().numpy(), X.astype(dtype).astype(np.float32))


def test_buffer_views_and_copies_on_a_hit(scheduled: list[int]) -> None:
    """A slice of a realized buffer is a view of its memory (no kernel) and a copy moves it between devices: both
    rerun on the new graph's buffers."""
    counts = []
    for k in range(3):
        x = Tensor(X + k).realize()
        np.testing.assert_equal(x[2:6].numpy(), (X + k)[2:6])
        moved = x[4:12].to("PYTHON")
        np.testing.assert_equal(moved.numpy(), (X + k)[4:12])
        np.testing.assert_equal((moved * 2).numpy(), (X + k)[4:12] * 2)
        counts.append(len(scheduled))
    assert counts[1] == counts[2], "the second and third rounds ran cached schedules"


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


M = np.linspace(-2, 2, 48, dtype=np.float32).reshape(4, 12)


def test_several_kernels_on_new_buffers_every_run(scheduled: list[int]) -> None:
    """A cached schedule of several kernels (a softmax: on host devices one graph from its second run on,
    `lazy.engine.realize.StepGraph`) reads each run's own inputs and writes its own outputs, with freed memory
    handed to the next run's tensors in between."""
    outs, first = [], 0
    for k in range(6):
        x = Tensor(M * (k + 1)).realize()
        outs.append((k, x.softmax(-1).realize()))
        first = first or len(scheduled)
        del x
        gc.collect()
    for k, out in outs:  # every output kept its own values
        np.testing.assert_allclose(out.numpy(), _softmax(M * (k + 1)), rtol=1e-5, atol=1e-7)
    assert len(scheduled) == first, "the later runs were cached"


def test_several_kernels_read_an_assign_in_between(scheduled: list[int]) -> None:
    x = Tensor(M).realize()
    for k in range(5):
        np.testing.assert_allclose(x.softmax(-1).numpy(), _softmax(M * 2**k), rtol=1e-5, atol=1e-7)
        x.assign(x * 2).realize()


def _counted(run) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """What `run()` adds to `GlobalCounters`: kernels, operations, bytes."""
    from lazy.helpers import GlobalCounters

    before = (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem)
    run()
    return (GlobalCounters.kernel_count - before[0], GlobalCounters.global_ops - before[1],
            GlobalCounters.global_mem - before[2])  # fmt: skip


def test_a_cached_schedule_counts_its_kernels_alike_every_run(scheduled: list[int]) -> None:
    """`GlobalCounters` add the same kernels, operations and bytes for each run of a cached schedule: its first run
    step by step, and later ones as one graph (whose counts are summed once, `StepGraph.counts`). With a variable
    bound to a new value each run, the estimates are recomputed from it every time."""
    x = Tensor(M).realize()
    counts = [_counted(lambda: x.softmax(-1).realize()) for _ in range(4)]
    assert counts[0][0] >= 2 and counts[0][1] > 0 and counts[0][2] > 0, counts
    assert len(set(counts)) == 1, counts
    t = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8)).realize()

    def rows(n: int) -> None:
        v = Variable("rows", 1, 8).bind(n)
        t.shrink(((0, v), (0, 8))).softmax(-1).realize()

    by_rows = {n: [_counted(functools.partial(rows, n)) for _ in range(3)] for n in (2, 6)}
    for n, seen in by_rows.items():
        assert len(set(seen)) == 1, (n, seen)
    assert by_rows[2][0][1] < by_rows[6][0][1], "operations follow the bound number of rows"

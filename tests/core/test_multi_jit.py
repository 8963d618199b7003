"""`jit` of sharded graphs on CPU:0..2: replays equal eager runs for every layout (split on either axis, replicated,
uneven, mixed with tensors on one device), a jitted data-parallel Adam step equals the eager one, each device's
kernels replay as one graph on that device, a changed layout is refused naming it, and a captured jit pickles."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from lazy.device import Buffer
from lazy.dtype import dtypes
from lazy.engine.captured import device_order
from lazy.engine.jit import JitError, TinyJit
from lazy.engine.realize import BufferCopy, CompiledRunner, ExecItem, Runner
from lazy.multi import MultiLazyBuffer
from lazy.nn import optim
from lazy.tensor import Tensor

TWO = ("CPU:0", "CPU:1")
THREE = ("CPU:0", "CPU:1", "CPU:2")


def _data(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _layout(t: Tensor) -> Any:
    lb = t.lazydata
    return (lb.device, lb.axis, lb.bounds) if isinstance(lb, MultiLazyBuffer) else lb.device


def _step(x: Tensor, y: Tensor) -> tuple[Tensor, ...]:
    """Sharded and plain inputs and outputs: per-shard math, a reduction over each axis, a view of the sharded input,
    a gather to one device, and a plain tensor's own work."""
    return (
        ((x * 2 + 1).relu() * x).realize(),
        x.sum(1).realize(),
        x.max(0).realize(),
        x.permute(1, 0),
        (x.to("CPU:0").exp() + y.sum()).realize(),
        (y * 3).realize(),
    )


@pytest.mark.parametrize(
    "devices, axis, shape",
    [(TWO, 0, (6, 4)), (TWO, 1, (4, 6)), (TWO, None, (4, 6)), (THREE, 0, (7, 3)), (THREE, 1, (2, 5))],
    ids=["axis0", "axis1", "replicated", "uneven-axis0", "uneven-axis1"],
)
def test_replays_equal_eager_runs(devices: tuple[str, ...], axis: int | None, shape: tuple[int, int]) -> None:
    jitted = TinyJit(_step)
    for call in range(4):  # eager, capture, replays: each on new inputs
        xs, ys = _data(*shape, seed=call), _data(3, seed=100 + call)
        want = _step(Tensor(xs).shard(devices, axis).realize(), Tensor(ys, device="CPU:0").realize())
        got = jitted(Tensor(xs).shard(devices, axis).realize(), Tensor(ys, device="CPU:0").realize())
        for g, w in zip(got, want):
            assert _layout(g) == _layout(w)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)
    assert jitted.captured is not None and jitted.captured.replays == 2


def test_each_devices_kernels_replay_as_one_graph_on_that_device() -> None:
    w = Tensor(_data(8, 4, seed=1)).to(TWO).realize()

    @TinyJit
    def matmul(x: Tensor) -> Tensor:
        return (x @ w).relu().sum(0).realize()

    for call in range(3):
        matmul(Tensor(_data(6, 8, seed=call)).shard(TWO, axis=0).realize())
    kernels = [ei.runner.device for ei in matmul.jit_cache if isinstance(ei.runner, CompiledRunner)]
    assert set(kernels) == {"CPU", "CPU:1"}  # a kernel runs on its instance, not on the renderer's device ("CPU")
    first = matmul.graph_batches[:2]  # the per-shard matmuls, before the allreduce's first copy: one graph each
    assert sorted(batch.device for batch in first) == ["CPU", "CPU:1"]
    assert all(len(batch) == 2 for batch in first)


class _Kernel(Runner):
    def __init__(self, device: str) -> None:
        self.device = device


def test_device_order_groups_each_devices_work_and_keeps_its_order() -> None:
    a0, a1, b0, b1 = (Buffer(d, 4, dtypes.float32) for d in ("CPU", "CPU", "CPU:1", "CPU:1"))
    items = [
        ExecItem(_Kernel("CPU"), [a0]),
        ExecItem(_Kernel("CPU:1"), [b0]),
        ExecItem(_Kernel("CPU"), [a1, a0]),
        ExecItem(_Kernel("CPU:1"), [b1, b0]),
        ExecItem(_Kernel("CPU"), [a0, a1]),
        ExecItem(BufferCopy(16, "CPU:1", "CPU"), [b0, a1]),
        ExecItem(_Kernel("CPU"), [a0, a1]),
        ExecItem(_Kernel("CPU:1"), [b1, b0]),
    ]
    order = [items.index(ei) for ei in device_order(items)]
    assert order == [0, 2, 4, 1, 3, 5, 6, 7]  # CPU's kernels up to the copy, CPU:1's, the copy, then what follows it
    assert device_order(items[:5:2]) == items[:5:2]  # one device's work: unchanged


def test_jitted_data_parallel_adam_step_equals_eager() -> None:
    """A sharded batch, replicated parameters: gradients are allreduced, Adam updates each replica in place."""

    def train(jitted: bool) -> tuple[list[float], list[np.ndarray]]:
        w1 = Tensor(_data(6, 8, seed=1)).to(TWO).requires_grad_(True)
        w2 = Tensor(_data(8, 3, seed=2)).to(TWO).requires_grad_(True)
        optimizer = optim.Adam([w1, w2], lr=0.01)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Tensor.train():
                optimizer.zero_grad()
                loss = (((x @ w1).relu() @ w2 - y) ** 2).mean()
                loss.backward()
                optimizer.step()
                return loss.realize()

        run = TinyJit(step) if jitted else step
        losses = []
        for i in range(5):
            x = Tensor(_data(4, 6, seed=10 + i)).shard(TWO, axis=0).realize()
            y = Tensor(_data(4, 3, seed=20 + i)).shard(TWO, axis=0).realize()
            losses.append(float(run(x, y).numpy()))
        return losses, [w1.numpy(), w2.numpy()]

    (jit_losses, jit_params), (eager_losses, eager_params) = train(True), train(False)
    np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(jit_params, eager_params):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_changed_layout_is_refused_naming_it() -> None:
    jitted = TinyJit(lambda x: (x * 2).realize())
    for call in range(2):
        jitted(Tensor(_data(4, 6, seed=call)).shard(TWO, axis=0).realize())
    with pytest.raises(JitError, match=r"input 0 is sharded on axis 1 .* captured sharded on axis 0"):
        jitted(Tensor(_data(4, 6, seed=5)).shard(TWO, axis=1).realize())
    with pytest.raises(JitError, match=r"input 0 is on one device \(CPU\), captured sharded on axis 0"):
        jitted(Tensor(_data(4, 6, seed=5)).realize())
    with pytest.raises(JitError, match=r"input 0 is replicated on \(CPU, CPU:1\), captured sharded"):
        jitted(Tensor(_data(4, 6, seed=5)).to(TWO).realize())
    with pytest.raises(JitError, match=r"on \(CPU, CPU:2\), captured sharded on axis 0 as \[\(0, 2\), \(2, 4\)\]"):
        jitted(Tensor(_data(4, 6, seed=5)).shard(("CPU:0", "CPU:2"), axis=0).realize())
    with pytest.raises(JitError, match=r"input 0 is sharded on axis 0 as \[\(0, 3\), \(3, 5\)\]"):
        jitted(Tensor(_data(5, 6, seed=5)).shard(TWO, axis=0).realize())
    plain = TinyJit(lambda x: (x * 2).realize())
    for call in range(2):
        plain(Tensor(_data(4, 6, seed=call)).realize())
    with pytest.raises(JitError, match=r"input 0 is sharded on axis 0 .*, captured on one device \(CPU\)"):
        plain(Tensor(_data(4, 6, seed=5)).shard(TWO, axis=0).realize())


def test_a_captured_sharded_jit_pickles() -> None:
    w = Tensor(_data(8, 4, seed=1)).shard(TWO, axis=1).realize()  # read, never written: saved with the jit

    @TinyJit
    def matmul(x: Tensor) -> tuple[Tensor, Tensor]:
        return (x @ w).realize(), x[1:]  # a sharded result, and a view of the sharded input

    for call in range(2):
        matmul(Tensor(_data(6, 8, seed=call)).to(TWO).realize())
    loaded = pickle.loads(pickle.dumps(matmul))
    devices = [ei.runner.device for ei in loaded.jit_cache if isinstance(ei.runner, CompiledRunner)]
    assert set(devices) == {"CPU", "CPU:1"}  # each kernel loads on the instance it was captured on
    xs = _data(6, 8, seed=7)
    out, view = loaded(Tensor(xs).to(TWO).realize())
    assert _layout(out) == (("CPU", "CPU:1"), 1, ((0, 2), (2, 4)))
    np.testing.assert_allclose(out.numpy(), xs @ w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(view.numpy(), xs[1:])

"""Peer reads: an allreduce between devices that read each other's memory in place (`lazy.device.peers`: host
devices of one process) reads the other devices' partial sums where they are, with no copy; where a later write could
reach that memory while a reader is at work, it copies instead. Values against numpy, eager and under jit."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.device import peers
from lazy.engine.jit import TinyJit
from lazy.engine.realize import BufferCopy, ExecItem, PeerRead, capturing, lent
from lazy.engine.schedule import create_schedule
from lazy.plugins import Device
from lazy.tensor import Tensor

TWO = ("CPU:0", "CPU:1")
THREE = ("CPU:0", "CPU:1", "CPU:2")


def _runs(fn) -> list[ExecItem]:
    """The items `fn` runs (what a jit would capture)."""
    seen: list[ExecItem] = []

    def listen(ei: ExecItem, outputs: tuple) -> None:
        seen.append(ei)

    capturing.append(listen)
    try:
        fn()
    finally:
        capturing.remove(listen)
    return seen


def _replicas(t: Tensor) -> list[np.ndarray]:
    return [np.frombuffer(bytes(lb.base.buffer.as_buffer(allow_zero_copy=False)), np.float32).reshape(t.shape)
            for lb in t.lazydata.lbs]  # fmt: skip


def test_host_devices_are_peers_and_the_others_are_not() -> None:
    assert peers("CPU:0", "CPU:1") and peers("CPU:1", "CPU:0")
    assert peers("CPU", "LLVM") and peers("LLVM", "CPU")
    assert not peers("CPU", "PYTHON") and not peers("PYTHON", "CPU")  # PYTHON's memory is its own (memoryviews)
    if "CL" in Device.specs() and Device.probe("CL")[0]:
        assert not peers("CPU", "CL") and not peers("CL", "CPU")


@pytest.mark.parametrize("devices", [TWO, THREE], ids=["2 devices", "3 devices"])
def test_allreduce_reads_in_place_and_every_replica_is_the_same(devices) -> None:
    data = np.random.default_rng(1).standard_normal((len(devices), 1000, 7)).astype(np.float32)
    held = Tensor(data).shard(devices, axis=0).realize()
    total = held.sum(0)
    ran = _runs(total.realize)
    kinds = {type(ei.runner) for ei in ran}
    assert PeerRead in kinds and BufferCopy not in kinds, f"the allreduce ran {kinds}"
    replicas = _replicas(total)
    np.testing.assert_allclose(replicas[0], data.sum(0), rtol=1e-5, atol=1e-5)
    for device, replica in zip(devices[1:], replicas[1:]):
        np.testing.assert_array_equal(replica, replicas[0], err_msg=f"the replica on {device} differs")
    assert not lent.to, "realize returned before the devices reading in place were settled"


def test_not_peers_is_still_a_ring_of_copies() -> None:
    devices = ("CPU:0", "PYTHON")
    data = np.arange(2 * 301, dtype=np.float32).reshape(2, 301)
    held = Tensor(data).shard(devices, axis=0).realize()
    total = held.sum(0)
    ran = _runs(total.realize)
    assert not any(isinstance(ei.runner, PeerRead) for ei in ran)
    np.testing.assert_array_equal(total.numpy(), data.sum(0))


def test_the_reads_come_before_any_kernel_reading_another_devices_memory() -> None:
    """Each peer read waits for its source's device: all of them run before the adds, so no wait includes an add
    queued on that device (the devices then add at the same time)."""
    held = Tensor(np.ones((2, 64), np.float32)).shard(TWO, axis=0).realize()
    total = held.sum(0)
    order = [si.kind for si in create_schedule(list(total.lazydata.lbs))]
    first_kernel = order.index("kernel")
    assert order.count("copy") == 2 and all(kind != "copy" for kind in order[first_kernel:]), order


def test_a_later_write_of_the_source_in_the_same_schedule_makes_it_a_copy() -> None:
    """The shards themselves are the partial sums here; assigning to them in the same realize must not change the
    sum (the reader could still be reading): that peer read stays a copy."""
    data = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    w = Tensor(data).shard(TWO, axis=0).realize()
    total = w.sum(0)
    w.assign(w * 0 - 1)
    schedule = create_schedule([*total.lazydata.lbs, *w.lazydata.lbs])
    copies = [si for si in schedule if si.kind == "copy"]
    assert copies and all(si.ast.arg == si.bufs[0].nbytes for si in copies), [si.ast.arg for si in copies]
    from lazy.engine.realize import run_schedule

    run_schedule(schedule)
    np.testing.assert_array_equal(total.numpy(), data.sum(0))
    np.testing.assert_array_equal(w.numpy(), -np.ones_like(data))


def test_eager_writes_after_the_realize_do_not_reach_the_sum() -> None:
    data = np.random.default_rng(2).standard_normal((2, 4096)).astype(np.float32)
    w = Tensor(data).shard(TWO, axis=0).realize()
    total = w.sum(0).realize()
    for _ in range(3):
        w.assign(w * 2).realize()
    np.testing.assert_allclose(total.numpy(), data.sum(0), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), data * 8, rtol=1e-6)


def test_jit_replays_follow_new_inputs() -> None:
    @TinyJit
    def reduce(x: Tensor) -> Tensor:
        return (x.sum(0) * 2).realize()

    rng = np.random.default_rng(3)
    for step in range(5):
        data = rng.standard_normal((2, 513)).astype(np.float32)
        out = reduce(Tensor(data).shard(TWO, axis=0).realize())
        for device, replica in zip(TWO, _replicas(out)):
            np.testing.assert_allclose(replica, data.sum(0) * 2, rtol=1e-5, atol=1e-6, err_msg=f"{device}, call {step}")
    assert reduce.captured is not None
    assert any(isinstance(ei.runner, PeerRead) for ei in reduce.captured.jit_cache)


def test_jit_keeps_a_copy_where_a_later_realize_writes_the_source() -> None:
    """Across realizes inside one jitted function: the sum, then an assign to the summed shards. A replay runs both
    without the wait between realizes, so the capture copies instead of reading in place."""

    @TinyJit
    def step(w: Tensor) -> Tensor:
        total = w.sum(0).realize()
        w.assign(w + 1).realize()
        return total

    data = np.arange(2 * 100, dtype=np.float32).reshape(2, 100)
    w = Tensor(data).shard(TWO, axis=0).realize()
    for k in range(4):
        total = step(w)
        np.testing.assert_array_equal(total.numpy(), (data + k).sum(0), err_msg=f"call {k}")
    assert step.captured is not None
    assert not any(isinstance(ei.runner, PeerRead) for ei in step.captured.jit_cache)

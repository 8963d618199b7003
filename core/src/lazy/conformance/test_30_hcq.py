"""Layer hcq: command queues and signals (the simple tier's synchronous adapter must pass these too): signal/wait
ordering, timeline values, timestamps, the copy queue, and `HCQGraph` replay with new buffers."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.conformance.support import KernelBuilder, buffer_from, empty_buffer
from lazy.device import Buffer
from lazy.dtype import dtypes
from lazy.hcq import HCQGraph
from lazy.ops import Ops

N = 64


def add_one_kernel(device):
    """out[i] = a[i] + 1 (float32), as (program, global_size, local_size)."""
    k = KernelBuilder(device, "conf_add_one")
    out, a = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32)
    idx = k.global_index(N)
    k.store(out, idx, k.alu(Ops.ADD, k.load(a, idx), k.const(1.0, dtypes.float32)))
    program, spec = k.program()
    launch = tuple(spec.global_size) if spec.global_size else None, tuple(spec.local_size) if spec.local_size else None
    return program, *launch


def pair(device_name, start=0.0):
    return empty_buffer(device_name, N, dtypes.float32), buffer_from(
        device_name, np.arange(N, dtype=np.float32) + start, dtypes.float32
    )


@pytest.mark.requires("kernels")
def test_exec_then_signal_means_done(device, device_name):
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    value = device.next_value()
    device.compute_queue_t().exec(program, (out.opaque, a.opaque), (), gs, ls).signal(
        device.timeline_signal, value
    ).submit(device)
    device.timeline_signal.wait(value)
    assert device.timeline_signal.value >= value
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)


@pytest.mark.requires("kernels")
def test_wait_orders_queues(device, device_name):
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    signal = device.signal_t(0)
    device.compute_queue_t().signal(signal, 1).submit(device)
    value = device.next_value()
    queue = device.compute_queue_t().wait(signal, 1).exec(program, (out.opaque, a.opaque), (), gs, ls)
    queue.signal(signal, 2).signal(device.timeline_signal, value).submit(device)
    device.synchronize()
    assert signal.value == 2
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)


def test_timeline_values_increase(device):
    seen = []
    for _ in range(3):
        value = device.next_value()
        device.compute_queue_t().signal(device.timeline_signal, value).submit(device)
        device.synchronize()
        seen.append(device.timeline_signal.value)
    assert seen == sorted(seen) and len(set(seen)) == 3, seen
    assert not device.pending


@pytest.mark.requires("kernels")
def test_timestamps_are_monotonic(device, device_name):
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    before, after = device.signal_t(0), device.signal_t(0)
    value = device.next_value()
    queue = device.compute_queue_t().timestamp(before).exec(program, (out.opaque, a.opaque), (), gs, ls)
    queue.timestamp(after).signal(device.timeline_signal, value).submit(device)
    device.synchronize()
    assert after.timestamp >= before.timestamp


def test_copy_queue(device, device_name):
    if device.copy_queue_t is None:
        pytest.skip("device has no copy queue (Compiled.copy_queue_t is None)")
    src = buffer_from(device_name, np.arange(N, dtype=np.float32), dtypes.float32)
    dest = Buffer(device_name, N, dtypes.float32).allocate()
    value = device.next_value()
    device.copy_queue_t().copy(dest.opaque, src.opaque, src.nbytes).signal(device.timeline_signal, value).submit(device)
    device.synchronize()
    np.testing.assert_array_equal(dest.numpy(), np.arange(N))


@pytest.mark.requires("kernels")
def test_graph_replay_with_new_buffers(device, device_name):
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    graph = HCQGraph(device, [(program, (out.opaque, a.opaque), (), gs, ls)])
    graph.replay({})
    device.synchronize()
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)
    out2, a2 = pair(device_name, start=100.0)
    graph.replay({0: ((out2.opaque, a2.opaque), None)})
    device.synchronize()
    np.testing.assert_array_equal(out2.numpy(), np.arange(N) + 101)
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)  # the first launch's buffers are left alone

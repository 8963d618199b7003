"""Layer hcq: command queues and signals (the simple tier's synchronous adapter must pass these too): signal/wait
ordering, timeline values, timestamps, the copy queue, and `HCQGraph` replay with new buffers."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from lazy.conformance import kernels
from lazy.conformance.support import buffer_from, compile_kernel, empty_buffer
from lazy.device import Buffer
from lazy.dtype import dtypes
from lazy.hcq import Exec, HCQGraph

N = kernels.HCQ_N


def add_one_kernel(device):
    """out[i] = a[i] + 1 (float32), as (program, global_size, local_size)."""
    program, spec = compile_kernel(device, kernels.add_one(device.renderer.caps))
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
    """A queue's Wait holds back what follows it until the signal is set (here by the host, after the submission):
    a queue whose wait does nothing runs the kernel and sets `done` before the host sets the gate."""
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    gate, done = device.signal_t(0), device.signal_t(0)
    value = device.next_value()
    queue = device.compute_queue_t().wait(gate, 1).exec(program, (out.opaque, a.opaque), (), gs, ls)
    queue.signal(done, 1).signal(device.timeline_signal, value)
    # a simple-tier queue runs on the submitting thread, and so waits there: submit from a thread of its own
    submitter = threading.Thread(target=queue.submit, args=(device,), name="conformance-submitter", daemon=True)
    submitter.start()
    time.sleep(0.2)  # a moment in which a queue that ignores the wait would run the kernel and set `done`
    assert done.value == 0, "the commands after a Wait ran before its signal was set"
    gate.value = 1
    submitter.join(timeout=60)
    assert not submitter.is_alive(), "submitting a queue that waits on a signal did not return once it was set"
    device.synchronize()
    assert done.value == 1, "the commands after a Wait did not run once its signal was set"
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


# How far a device's timestamps may lie outside the host's readings around them: a device with a clock of its own
# converts it to perf_counter seconds with an offset it measures, which is off by a few microseconds.
CLOCK_SLACK_S = 1e-3


@pytest.mark.requires("kernels")
def test_timestamps_are_monotonic(device, device_name):
    """Timestamps are on the host's perf_counter clock (see `lazy.hcq.Signal.timestamp`): each lies between host
    readings taken before the submission and after the synchronization, and a later Timestamp command is later. A
    queue that ignores Timestamp leaves each signal's creation time, which the signals' creation order (`after`
    first) makes later for `before`."""
    program, gs, ls = add_one_kernel(device)
    out, a = pair(device_name)
    after, before = device.signal_t(0), device.signal_t(0)
    value = device.next_value()
    queue = device.compute_queue_t().timestamp(before).exec(program, (out.opaque, a.opaque), (), gs, ls)
    queue.timestamp(after).signal(device.timeline_signal, value)
    host_before = time.perf_counter()
    queue.submit(device)
    device.synchronize()
    host_after = time.perf_counter()
    stamps = (before.timestamp, after.timestamp)
    assert stamps[1] > stamps[0], f"a later Timestamp command gave an earlier or equal time: {stamps}"
    assert host_before - CLOCK_SLACK_S <= stamps[0] and stamps[1] <= host_after + CLOCK_SLACK_S, (
        f"timestamps {stamps} are not between the host's perf_counter readings {host_before} and {host_after} "
        "around the submission (convert the device's clock to perf_counter seconds)"
    )


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
    launch = Exec(program, (out.opaque, a.opaque), (), gs, ls)
    graph = (device.graph_t or HCQGraph)(device, [launch])  # the device's own graph when it has one
    graph.replay({})
    device.synchronize()
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)
    out2, a2 = pair(device_name, start=100.0)
    graph.replay({0: replace(launch, bufs=(out2.opaque, a2.opaque))})
    device.synchronize()
    np.testing.assert_array_equal(out2.numpy(), np.arange(N) + 101)
    np.testing.assert_array_equal(out.numpy(), np.arange(N) + 1)  # the first launch's buffers are left alone
    out3, a3 = pair(device_name, start=1000.0)  # new buffers by position, as a jit replay passes its inputs
    graph.replay(buffers={(0, 0): out3.opaque, (0, 1): a3.opaque})
    device.synchronize()
    np.testing.assert_array_equal(out3.numpy(), np.arange(N) + 1001)
    np.testing.assert_array_equal(out2.numpy(), np.arange(N) + 101)

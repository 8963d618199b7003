"""The CUDA device's runtime (allocator, programs, queues, signals, graphs) run against `fake_driver`: a stand-in for
the driver API whose streams a background thread runs in order. No GPU is needed; what is checked is this plugin's
logic (staging in chunks, parameter packing, signal ordering across streams, gates, timestamps, graph patching,
out-of-memory handling), with real cubins from NVRTC handed to the loader."""

from __future__ import annotations

import ctypes
import time
from dataclasses import replace

import numpy as np
import pytest
from cuda_testing import elementwise
from fake_driver import FakeDriver

import lazy_cuda.device
import lazy_cuda.queues
from lazy.device import BufferSpec, DeviceError
from lazy.hcq import Exec
from lazy_cuda.queues import CUDAGraph, CUDASignal, signal_memory

N = 8


def fake_fma(grid, out, x, y):
    """What elementwise() computes: out = x * y + 1 over grid[0] float32 elements."""
    n = grid[0]
    xs, ys = (np.frombuffer((ctypes.c_float * n).from_address(p), np.float32) for p in (x, y))
    np.frombuffer((ctypes.c_float * n).from_address(out), np.float32)[:] = xs * ys + 1


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeDriver({"fake_fma": fake_fma})
    for module in (lazy_cuda.device, lazy_cuda.queues):
        monkeypatch.setattr(module, "driver", fake)
    monkeypatch.setattr(signal_memory, "free", [])  # slots of this fake's memory only
    monkeypatch.setattr(signal_memory, "pages", [])
    monkeypatch.setattr(lazy_cuda.device, "open_devices", [])  # not a real GPU's device opened by another test
    monkeypatch.setattr(lazy_cuda.device, "STAGING_BYTES", 64)  # several chunks for small copies
    dev = lazy_cuda.device.open_cuda("CUDA")
    yield dev
    dev.close()
    fake.stop = True


def upload(dev, array: np.ndarray) -> int:
    opaque = dev.allocator.alloc(array.nbytes)
    dev.allocator._copyin(opaque, memoryview(np.ascontiguousarray(array).tobytes()))
    return opaque


def download(dev, opaque: int, n: int = N) -> np.ndarray:
    out = bytearray(4 * n)
    dev.allocator._copyout(memoryview(out), opaque)
    return np.frombuffer(out, np.float32)


def program(dev):
    src = dev.renderer.render("fake_fma", elementwise())
    return dev.runtime("fake_fma", dev.compiler.compile(src), None)


def test_copies_in_chunks_views_and_transfers(cuda):
    data = np.arange(100, dtype=np.float32)  # 400 bytes: seven 64-byte chunks, both staging buffers in turns
    buf = upload(cuda, data)
    np.testing.assert_array_equal(download(cuda, buf, 100), data)
    np.testing.assert_array_equal(download(cuda, cuda.allocator._offset(buf, 40, 12), 10), data[3:13])
    dest = cuda.allocator.alloc(400)
    cuda.allocator._transfer(dest, buf, 400, cuda, cuda)
    np.testing.assert_array_equal(download(cuda, dest, 100), data)


def test_program_call_packs_parameters(cuda):
    prg = program(cuda)
    out, x, y = (
        cuda.allocator.alloc(4 * N),
        upload(cuda, np.arange(N, dtype=np.float32)),
        upload(cuda, np.full(N, 2, np.float32)),
    )
    took = prg(out, x, y, global_size=(N, 1, 1), local_size=(1, 1, 1), wait=True)
    assert isinstance(took, float) and took >= 0
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) * 2 + 1)
    with pytest.raises(
        DeviceError,
        match=r"kernel fake_fma asks for blocks of 2048 threads in dimension 0; this device allows 1024 \(CU_DEVICE_",
    ):
        prg(out, x, y, global_size=(1, 1, 1), local_size=(2048, 1, 1))


def test_queue_gate_then_timeline_across_streams(cuda):
    """A compute submission held by a gate the host opens later; a copy submission after it signals a later timeline
    value, which must not land before the compute one (the value never goes back or jumps ahead of unfinished work)."""
    prg = program(cuda)
    out, x, y = (
        cuda.allocator.alloc(4 * N),
        upload(cuda, np.arange(N, dtype=np.float32)),
        upload(cuda, np.ones(N, np.float32)),
    )
    gate, done = CUDASignal(0), CUDASignal(0)
    first = cuda.next_value()
    queue = cuda.compute_queue_t().wait(gate, 1).exec(prg, (out, x, y), (), (N, 1, 1), (1, 1, 1))
    queue.signal(done, 1).signal(cuda.timeline_signal, first).submit(cuda)
    copy = cuda.allocator.alloc(4 * N)
    second = cuda.next_value()
    cuda.copy_queue_t().copy(copy, x, 4 * N).signal(cuda.timeline_signal, second).submit(cuda)
    time.sleep(0.05)
    assert done.value == 0 and cuda.timeline_signal.value < first, "ran before the gate opened"
    # the copy itself did not wait (read straight from the fake's memory: a download would queue behind the copy
    # stream's wait for the compute stream's timeline value, which core never does: it synchronizes first)
    np.testing.assert_array_equal(list((ctypes.c_float * N).from_address(copy)), np.arange(N))
    gate.value = 1
    cuda.synchronize()
    assert done.value == 1 and cuda.timeline_signal.value == second
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) + 1)


def test_wait_for_a_value_nothing_sets_fails_at_once(cuda):
    with pytest.raises(DeviceError, match="would deadlock"):
        CUDASignal(0).wait(5)


def test_timestamps_are_on_the_host_clock(cuda):
    before, after = CUDASignal(0), CUDASignal(0)
    value = cuda.next_value()
    host_before = time.perf_counter()
    cuda.compute_queue_t().timestamp(before).timestamp(after).signal(cuda.timeline_signal, value).submit(cuda)
    cuda.synchronize()
    host_after = time.perf_counter()
    assert host_before - 1e-3 <= before.timestamp <= after.timestamp <= host_after + 1e-3


def test_graph_replay_patches_changed_launches(cuda):
    prg = program(cuda)
    ones = upload(cuda, np.ones(N, np.float32))
    out, x = cuda.allocator.alloc(4 * N), upload(cuda, np.arange(N, dtype=np.float32))
    launch = Exec(prg, (out, x, ones), (), (N, 1, 1), (1, 1, 1))
    graph = cuda.graph_t(cuda, [launch, launch])
    assert isinstance(graph, CUDAGraph)
    graph.replay({})
    cuda.synchronize()
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) + 1)
    out2, x2 = cuda.allocator.alloc(4 * N), upload(cuda, np.arange(N, dtype=np.float32) + 100)
    graph.replay({1: replace(launch, bufs=(out2, x2, ones))}, buffers={(0, 1): x2})
    cuda.synchronize()
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) + 101)
    np.testing.assert_array_equal(download(cuda, out2), np.arange(N) + 101)


def test_out_of_memory_flushes_the_cache_then_names_size_and_free_memory(cuda):
    held = cuda.allocator.alloc(600 << 10)
    cuda.allocator.free(held, 600 << 10)  # into the LRU cache: still taken from the GPU
    big = cuda.allocator.alloc(700 << 10)  # fails, the cache is flushed, the retry succeeds
    cuda.allocator.free(big, 700 << 10, BufferSpec(nolru=True))
    with pytest.raises(MemoryError, match=r"out of device memory allocating 2097152 bytes \(1048576 of 1048576 bytes"):
        cuda.allocator.alloc(2 << 20)


def test_an_eager_launch_goes_on_the_stream_in_order_with_its_timeline_value(cuda):
    """`CUDADevice.launch_now`: a kernel of fixed grid is enqueued at once, after what was submitted before it on the
    compute stream (here a launch held by a gate), and `synchronize` waits for it through the timeline."""
    prg = program(cuda)
    assert not cuda.launch_now(prg, (), ()), "a grid that depends on variables (or is unknown) takes the queue"
    prg.static_dims = ((N, 1, 1), (1, 1, 1))
    out, x, y = (
        upload(cuda, np.zeros(N, np.float32)),
        upload(cuda, np.arange(N, dtype=np.float32)),
        upload(cuda, np.full(N, 3, np.float32)),
    )
    gate, held = CUDASignal(0), cuda.allocator.alloc(4 * N)
    queue = cuda.compute_queue_t().wait(gate, 1).exec(prg, (held, x, x), (), (N, 1, 1), (1, 1, 1))
    queue.signal(cuda.timeline_signal, cuda.next_value()).submit(cuda)
    before = cuda.timeline_submitted
    assert cuda.launch_now(prg, (out, x, y), ())
    assert cuda.timeline_submitted == before + 1
    time.sleep(0.05)
    assert cuda.timeline_signal.value < before, "the eager launch ran ahead of the gated one"
    assert not any((ctypes.c_float * N).from_address(out)), "the eager kernel ran ahead of the gated one"
    gate.value = 1
    cuda.synchronize()
    assert cuda.timeline_signal.value == cuda.timeline_submitted
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) * 3 + 1)
    np.testing.assert_array_equal(download(cuda, held), np.arange(N) ** 2 + 1)


def test_an_eager_launch_the_gpu_refuses_raises_and_leaves_the_timeline_whole(cuda):
    prg = program(cuda)
    out, x = cuda.allocator.alloc(4 * N), upload(cuda, np.arange(N, dtype=np.float32))
    prg.static_dims = ((1, 1, 1), (2048, 1, 1))
    before = cuda.timeline_submitted
    with pytest.raises(DeviceError, match="blocks of 2048 threads"):
        cuda.launch_now(prg, (out, x, x), ())
    assert cuda.timeline_submitted == before
    cuda.synchronize()  # nothing waits for the refused launch's value
    prg.static_dims = ((N, 1, 1), (1, 1, 1))
    assert cuda.launch_now(prg, (out, x, x), ())
    cuda.synchronize()
    np.testing.assert_array_equal(download(cuda, out), np.arange(N) ** 2 + 1)

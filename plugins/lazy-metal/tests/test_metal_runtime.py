"""The METAL runtime (allocator, programs, HCQ queues and signals, errors) run against a stand-in for pyobjc's Metal
framework (fake_metal.py): no Mac here, so this checks the plugin's own logic (argument binding, encoding, ordering,
signals, timestamps, failures, limits), not Metal's behaviour, which needs a Mac."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fake_metal import FakeMetal

from lazy.codegen.uops import UOpBuilder, UOps
from lazy.device import CompileError, DeviceError, ProgramSpec, allocator_contract_problems
from lazy.dtype import dtypes
from lazy.hcq import Exec, HCQGraph, queue_contract_problems
from lazy.ops import Ops
from lazy_metal.renderer import MetalRenderer


@pytest.fixture
def metal(monkeypatch) -> Iterator[tuple[Any, FakeMetal]]:
    """(lazy_metal.device imported against the stand-in framework, the stand-in)."""
    fake = FakeMetal()
    monkeypatch.setitem(sys.modules, "Metal", fake)
    monkeypatch.delitem(sys.modules, "lazy_metal.device", raising=False)  # import it afresh, against the stand-in
    device_module = importlib.import_module("lazy_metal.device")
    yield device_module, fake
    sys.modules.pop("lazy_metal.device", None)  # the next import (a real one) must not find the stand-in's
    vars(sys.modules["lazy_metal"]).pop("device", None)


@pytest.fixture
def dev(metal):
    return metal[0].open_metal("METAL")


def add(value: float):
    """A stand-in kernel: out[i] = a[i] + value over the launched threads (float32), recording its launches."""
    launches = []

    def run(out: memoryview, a: memoryview, *vals: int, sizes: Any) -> None:
        (groups, threads), n = sizes, sizes[0][0] * sizes[1][0]
        launches.append((vals, groups, threads))
        np.frombuffer(out, np.float32)[:n] = np.frombuffer(a, np.float32)[:n] + value

    run.launches = launches  # type: ignore[attr-defined]
    return run


def kernel_source(name: str) -> str:
    """MSL of a kernel called `name` (the stand-in finds the Python function by that name)."""
    b = UOpBuilder()
    out, a = (b.add(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), (i, f"data{i}", i == 0)) for i in range(2))
    i = b.add(UOps.SPECIAL, dtypes.int32, (), ("gidx0", 4))
    b.add(
        UOps.STORE,
        None,
        (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, dtypes.float32, (a, i)), b.const(1.0, dtypes.float32))),
    )
    return MetalRenderer().render(name, b.uops)


def load(dev: Any, fake: FakeMetal, name: str, run: Any) -> Any:
    fake.kernels[name] = run
    src = kernel_source(name)
    return dev.runtime(name, dev.compiler.compile_cached(src), ProgramSpec(name, src, "METAL"))


def to_device(dev: Any, array: np.ndarray) -> Any:
    opaque = dev.allocator.alloc(array.nbytes)
    dev.allocator._copyin(opaque, memoryview(array.tobytes()))
    return opaque


def from_device(dev: Any, opaque: Any, like: np.ndarray) -> np.ndarray:
    out = bytearray(like.nbytes)
    dev.allocator._copyout(memoryview(out), opaque)
    return np.frombuffer(out, like.dtype).reshape(like.shape)


# --- opening ----------------------------------------------------------------------------------------------------


def test_open_puts_the_default_device_first_and_meets_the_contract(metal):
    device_module, fake = metal
    dev = device_module.open_metal("METAL")
    assert dev.mtl is fake.devices[0] and device_module.open_metal("METAL:1").mtl is fake.devices[1]
    assert allocator_contract_problems(dev.allocator) == [] and queue_contract_problems(dev) == []
    assert dev.renderer.caps.tensor_cores and dev.renderer.caps.shared_max == 32 * 1024
    with pytest.raises(DeviceError, match=r"METAL:5: there are only 2 Metal devices here: METAL:0 \(Fake GPU 0\)"):
        device_module.open_metal("METAL:5")
    fake.devices.clear()
    with pytest.raises(DeviceError, match="no Metal device found"):
        device_module.open_metal("METAL")


# --- memory -----------------------------------------------------------------------------------------------------


def test_allocator_round_trip_zero_copy_views_and_transfers(dev, metal):
    device_module, fake = metal
    data = np.arange(16, dtype=np.float32)
    base = to_device(dev, data)
    np.testing.assert_array_equal(from_device(dev, base, data), data)
    view = dev.allocator._offset(base, 4 * 4, 8 * 4)  # elements 8..11, sharing the memory
    np.testing.assert_array_equal(from_device(dev, view, np.empty(4, np.float32)), [8, 9, 10, 11])
    np.frombuffer(dev.allocator._as_buffer(view), np.float32)[:] = -1  # the host view is the buffer itself
    assert from_device(dev, base, data)[8:12].tolist() == [-1] * 4
    dest = to_device(dev, np.zeros(4, np.float32))
    dev.allocator._transfer(dest, view, 16, dev, dev)  # one device: a blit
    assert fake.command_buffers()[-1].ops[0][0] == "copy"
    other = device_module.open_metal("METAL:1")
    far = to_device(other, np.zeros(4, np.float32))
    other.allocator._transfer(far, dest, 16, dev, other)  # two devices: host view to host view
    assert from_device(other, far, np.empty(4, np.float32)).tolist() == [-1] * 4


def test_out_of_memory_gives_back_the_cache_then_names_size_and_memory(dev, metal):
    _, fake = metal
    fake.devices[0].memory = fake.devices[0].allocated + 1000
    dev.allocator.free(dev.allocator.alloc(600), 600)  # into the LRU cache
    dev.allocator.alloc(800)  # does not fit beside the cached 600: the cache is given back, then it fits
    assert not dev.allocator.cache
    with pytest.raises(MemoryError, match=r"out of GPU memory allocating 5000 bytes \(\d+ bytes in use of the \d+"):
        dev.allocator.alloc(5000)


# --- programs ---------------------------------------------------------------------------------------------------


def test_launch_binds_buffers_in_order_offsets_and_int64_values(dev, metal):
    _, fake = metal
    run = add(1.0)
    prg = load(dev, fake, "k", run)
    a = to_device(dev, np.arange(12, dtype=np.float32))
    out = to_device(dev, np.zeros(8, np.float32))
    seconds = prg(out, dev.allocator._offset(a, 16, 16), vals=(1 << 40,), global_size=(2, 1, 1),
                  local_size=(2, 1, 1), wait=True)  # fmt: skip
    assert isinstance(seconds, float) and seconds >= 0
    assert run.launches == [((1 << 40,), (2, 1, 1), (2, 1, 1))]
    np.testing.assert_array_equal(from_device(dev, out, np.empty(8, np.float32))[:4], [5, 6, 7, 8])


def test_launch_over_the_pipelines_thread_limit_is_refused(dev, metal):
    _, fake = metal
    run = add(1.0)
    run.max_threads = 256  # a heavy kernel's pipeline allows fewer threads
    prg = load(dev, fake, "heavy", run)
    buf = to_device(dev, np.zeros(1024, np.float32))
    with pytest.raises(DeviceError, match=r"kernel heavy asks for threadgroups of 512 threads .*at most 256"):
        prg(buf, buf, global_size=(1, 1, 1), local_size=(512, 1, 1))


def test_rejected_source_is_a_compile_error_naming_kernel_and_line(dev, metal):
    src = kernel_source("bad").replace("float val0", "#error\n  float val0")
    line = [text.strip() for text in src.splitlines()].index("#error") + 1
    with pytest.raises(CompileError, match=rf"kernel bad: line {line}: #error\n    use of undeclared identifier"):
        dev.compiler.compile(src)


def test_a_failing_kernel_is_named_and_the_device_goes_on(dev, metal):
    _, fake = metal

    def fault(*args: Any, sizes: Any) -> None:
        raise RuntimeError("out of bounds")

    bad, good = load(dev, fake, "faulty", fault), load(dev, fake, "fine", add(2.0))
    buf = to_device(dev, np.zeros(4, np.float32))
    dev.compute_queue_t().exec(bad, (buf, buf), (), (1, 1, 1), (4, 1, 1)).signal(
        dev.timeline_signal, dev.next_value()
    ).submit(dev)
    with pytest.raises(DeviceError, match="command buffer failed on the GPU.*kernel fault: out of bounds.*faulty"):
        dev.synchronize()
    dev.synchronize()  # reported once; its signal was set, so nothing waits for it forever
    dev.compute_queue_t().exec(good, (buf, buf), (), (1, 1, 1), (4, 1, 1)).signal(
        dev.timeline_signal, dev.next_value()
    ).submit(dev)
    dev.synchronize()
    assert from_device(dev, buf, np.empty(4, np.float32)).tolist() == [2, 2, 2, 2]


# --- queues and signals -----------------------------------------------------------------------------------------


def test_a_submission_is_one_command_buffer_in_order(dev, metal):
    _, fake = metal
    plus_one = load(dev, fake, "plus_one", add(1.0))
    a = to_device(dev, np.zeros(4, np.float32))
    b = to_device(dev, np.zeros(4, np.float32))
    before = len(fake.command_buffers())
    queue = dev.compute_queue_t()
    queue.exec(plus_one, (b, a), (), (1, 1, 1), (4, 1, 1)).exec(plus_one, (a, b), (), (1, 1, 1), (4, 1, 1))
    queue.memory_barrier().copy(b, a, 16).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    dev.synchronize()
    (cb,) = fake.command_buffers()[before:]
    assert [kind for kind, _, _ in cb.ops] == ["dispatch", "dispatch", "copy", "signal"]
    assert from_device(dev, b, np.empty(4, np.float32)).tolist() == [2, 2, 2, 2]


def test_jit_replay_is_one_command_buffer(dev, metal):
    _, fake = metal
    plus_one = load(dev, fake, "step", add(1.0))
    a, b = to_device(dev, np.zeros(4, np.float32)), to_device(dev, np.zeros(4, np.float32))
    launches = [Exec(plus_one, (b, a), (), (1, 1, 1), (4, 1, 1)), Exec(plus_one, (a, b), (), (1, 1, 1), (4, 1, 1))]
    graph = HCQGraph(dev, launches)
    before = len(fake.command_buffers())
    graph.replay()
    graph.replay(buffers={(1, 0): b})  # the second launch now writes b: b = b + 1
    dev.synchronize()
    assert [cb.dispatches for cb in fake.command_buffers()[before:]] == [["step", "step"]] * 2
    assert from_device(dev, b, np.empty(4, np.float32)).tolist() == [4, 4, 4, 4]


def test_a_queue_waits_for_a_value_the_host_sets_later(dev, metal):
    _, fake = metal
    plus_one = load(dev, fake, "gated", add(1.0))
    gate = dev.signal_t(0)
    buf = to_device(dev, np.zeros(4, np.float32))
    value = dev.next_value()
    dev.compute_queue_t().wait(gate, 1).exec(plus_one, (buf, buf), (), (1, 1, 1), (4, 1, 1)).signal(
        dev.timeline_signal, value
    ).submit(dev)
    assert dev.timeline_signal.value < value and np.frombuffer(dev.allocator._as_buffer(buf), np.float32)[0] == 0
    gate.value = 1  # the host opens the gate: the command buffer runs
    dev.synchronize()
    assert from_device(dev, buf, np.empty(4, np.float32)).tolist() == [1, 1, 1, 1]


def test_waiting_for_a_value_nothing_sets_fails_at_once(dev):
    with pytest.raises(DeviceError, match="would deadlock"):
        dev.signal_t(0).wait(3)


def test_signals_of_another_device_are_set_and_waited_for_on_the_host(dev, metal):
    device_module, fake = metal
    other = device_module.open_metal("METAL:1")
    theirs = other.signal_t(0)
    theirs.event_on(other.mtl)  # made by the other device's queue
    dev.compute_queue_t().signal(theirs, 5).submit(dev)
    assert theirs.value == 5
    dev.compute_queue_t().wait(theirs, 5).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    dev.synchronize()


def test_timestamps_are_on_the_host_clock_and_in_order(dev, metal):
    _, fake = metal
    plus_one = load(dev, fake, "timed", add(1.0))
    buf = to_device(dev, np.zeros(4, np.float32))
    first, second, third = dev.signal_t(0), dev.signal_t(0), dev.signal_t(0)
    before = time.perf_counter()
    queue = dev.compute_queue_t().timestamp(first).exec(plus_one, (buf, buf), (), (1, 1, 1), (4, 1, 1))
    queue.timestamp(second).timestamp(third).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    dev.synchronize()
    after = time.perf_counter()
    stamps = [s.timestamp for s in (first, second, third)]
    assert stamps == sorted(stamps) and all(before - 0.05 <= t <= after + 0.05 for t in stamps), (before, stamps)

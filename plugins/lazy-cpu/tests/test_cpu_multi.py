"""Several host devices of one kind (`CPU:0`, `CPU:1`, ...): separate memory pools and queue workers, direct copies
between them, the cores split between the open instances, and kernels of two instances running at the same time."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from lazy.device import DeviceError
from lazy.dtype import dtypes
from lazy.helpers import Context
from lazy.plugins import Device
from lazy.tensor import Tensor
from lazy_cpu import device as cpu_device
from lazy_cpu.device import CoreShares, HostAllocator, open_cpu, open_llvm


@pytest.mark.parametrize("kind", ["CPU", "LLVM"])
def test_instances_are_separate_devices(kind):
    first, second = Device[kind], Device[f"{kind}:1"]
    assert first is not second and first.allocator is not second.allocator
    assert first.queue_worker.thread is not second.queue_worker.thread
    assert first.timeline_signal is not second.timeline_signal


@pytest.mark.parametrize("kind", ["CPU", "LLVM"])
def test_copy_between_instances_is_one_direct_transfer(kind, monkeypatch):
    """CPU -> CPU:1 is a memmove between the two pools, not a copy out to the host and back in."""
    data = np.arange(1001, dtype=np.float32)
    src = (Tensor(data, device=kind) + 1).realize()
    calls: list[int] = []
    transfer = HostAllocator._transfer

    def counted(self, dest, src_opaque, size, src_dev, dest_dev):
        calls.append(size)
        return transfer(self, dest, src_opaque, size, src_dev, dest_dev)

    def refused(*args):
        raise AssertionError("a copy between two host instances went through the host staging path")

    monkeypatch.setattr(HostAllocator, "_transfer", counted)
    monkeypatch.setattr(HostAllocator, "_copyin", refused)
    there = src.to(f"{kind}:1").realize()
    assert calls == [data.nbytes]
    monkeypatch.undo()
    np.testing.assert_array_equal(there.numpy(), data + 1)


@pytest.mark.parametrize(
    ("cores", "open_names", "want"),
    [
        (2, ["CPU"], {"CPU": 2}),
        (2, ["CPU", "CPU:1"], {"CPU": 1, "CPU:1": 1}),
        (3, ["CPU:1", "CPU"], {"CPU": 2, "CPU:1": 1}),  # the lowest ordinals take the remainder
        (2, ["CPU", "CPU:1", "CPU:2"], {"CPU": 1, "CPU:1": 1, "CPU:2": 1}),  # never fewer than one
        (4, ["CPU", "CPU:1", "LLVM"], {"CPU": 2, "CPU:1": 2, "LLVM": 4}),  # kinds are counted apart
    ],
)
def test_core_shares(cores, open_names, want):
    shares = CoreShares()
    for name in open_names:
        shares.add(name)
    assert {name: shares.share(name, cores) for name in open_names} == want


def test_core_shares_follow_opening_and_closing(monkeypatch):
    monkeypatch.setattr(cpu_device, "cpu_count", lambda: 8)
    monkeypatch.setattr(cpu_device, "CORE_SHARES", CoreShares())  # only the instances this test opens
    first = open_cpu("CPU:5")
    try:
        assert first.threads() == 8
        second = open_cpu("CPU:6")
        try:
            assert (first.threads(), second.threads(), first.siblings()) == (4, 4, 2)
            with Context(THREADS=3):  # LAZY_THREADS says otherwise: each instance takes that many
                assert (first.threads(), second.threads()) == (3, 3)
        finally:
            second.close()
        assert (first.threads(), first.siblings()) == (8, 1)
    finally:
        first.close()


MEET_SRC = """
/* Set my flag, then spin until the other kernel's flag is set (or give up): it sees it only if both run at once. */
void meet(volatile int *mine, volatile int *other, int *saw_other) {
  *mine = 1;
  for (long i = 0; i < 2000000000L && !*other; i++) {}
  *saw_other = *other;
}
"""


@pytest.mark.parametrize("opener", [open_cpu, open_llvm], ids=["CPU", "LLVM"])
def test_two_instances_run_kernels_concurrently(opener):
    """Each instance's queue worker runs a kernel that waits for the other's: with one shared worker (or one lock
    around both) the first would give up before the second started."""
    kind = opener.__name__.removeprefix("open_").upper()
    devices = [opener(f"{kind}:7"), opener(f"{kind}:8")]
    try:
        compiler = cpu_device.ClangCompiler()  # the test kernel is C on both: host memory and calls are shared
        meet = [cpu_device.CPUProgram(dev, "meet", compiler.compile(MEET_SRC)) for dev in devices]
        flags = (ctypes.c_int * 2)(0, 0)
        saw = [(ctypes.c_int * 1)(0) for _ in devices]
        addresses = [ctypes.addressof(flags), ctypes.addressof(flags) + 4]
        for k, dev in enumerate(devices):
            bufs = (addresses[k], addresses[1 - k], ctypes.addressof(saw[k]))
            dev.compute_queue_t().exec(meet[k], bufs).signal(dev.timeline_signal, dev.next_value()).submit(dev)
        for dev in devices:
            dev.synchronize()
        assert [s[0] for s in saw] == [1, 1], "the two instances' kernels did not run at the same time"
    finally:
        for dev in devices:
            dev.close()


def test_second_instance_name_is_checked():
    with pytest.raises(DeviceError, match="CPU:abc"):
        Device["CPU:abc"]
    assert Tensor([1, 2], device="CPU:1", dtype=dtypes.int32).device == "CPU:1"

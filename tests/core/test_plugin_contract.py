"""The plugin contract states everything it requires: allocator features are declared and checked when a device
opens, a device without sub-buffers still reads views, a copy-only device supplies no kernel toolchain, and queues
handle typed commands (a queue type without a handler core needs is refused on open, a command it cannot run is
refused before anything of its submission runs)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import FrozenInstanceError, replace
from typing import Any

import numpy as np
import pytest

from lazy.device import Allocator, BufferSpec, Compiled, DeviceError, opened_devices
from lazy.dtype import dtypes
from lazy.hcq import Barrier, Copy, Exec, HCQGraph, HostQueue, HostSignal, HWQueue, SetSignal, SyncQueue, Timestamp
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl
from lazy.plugins import Device
from lazy.pydevice import PythonCompiler, PythonProgram, PythonRenderer
from lazy.renderer import Renderer
from lazy.tensor import Tensor


class PlainAllocator(Allocator):
    """Only the required methods: no zero-copy views, no sub-buffers, no transfers."""

    def _alloc(self, size: int, spec: BufferSpec) -> memoryview:
        return memoryview(bytearray(size))

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src


class ClaimsOffset(PlainAllocator):
    features = frozenset({"offset"})  # declared, never implemented


class HidesOffset(PlainAllocator):
    def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview:  # implemented, never declared
        return buf[offset : offset + size]


class NoWaitQueue(HWQueue[Compiled]):
    """Handles everything a compute queue must but Wait."""

    def on_exec(self, dev: Compiled, cmd: Exec) -> None:
        pass

    def on_signal(self, dev: Compiled, cmd: SetSignal) -> None:
        cmd.signal.value = cmd.value

    def on_timestamp(self, dev: Compiled, cmd: Timestamp) -> None:
        cmd.signal.stamp()

    def on_barrier(self, dev: Compiled, cmd: Barrier) -> None:
        pass


class NoCopyQueue(HostQueue[Compiled]):
    """A compute queue may leave Copy out (core sends copies through the allocator)."""

    on_copy = HWQueue.on_copy


class Plugin:
    def __init__(self, name: str, opener: Callable[[str], Compiled]):
        self.name, self.opener = name, opener

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        return [DeviceSpec(self.name, PLUGIN_API_VERSION, 1, lambda: (True, "test"), self.opener)]


def register(name: str, opener: Callable[[str], Compiled]) -> None:
    Device.register(Plugin(name, opener), name.lower(), dist=f"lazy-{name.lower()}")


def python_kernels() -> dict[str, Any]:
    return {"renderer": PythonRenderer(), "compiler": PythonCompiler(), "runtime": PythonProgram}


pytestmark = pytest.mark.usefixtures("clean_registry")  # (tests/core/conftest.py)


# ---------------------------------------------------------------------------------------------------------------------
# allocator features


@pytest.mark.parametrize("allocator_t, expected", [
    (ClaimsOffset, r"ClaimsOffset declares the feature 'offset' but does not implement _offset\(buf, size, offset\) "
                   r"-> opaque: implement it, or remove 'offset' from ClaimsOffset.features"),
    (HidesOffset, r"HidesOffset implements _offset but does not declare the feature 'offset'.*add 'offset' to "
                  r"HidesOffset.features"),
])  # fmt: skip
def test_an_allocator_whose_features_do_not_match_its_methods_is_refused_on_open(allocator_t, expected):
    register("BADALLOC", lambda name: Compiled(name, allocator_t(), **python_kernels()))
    with pytest.raises(DeviceError, match=rf"device BADALLOC \(plugin 'badalloc' from lazy-badalloc.*\n.*{expected}"):
        Device["BADALLOC"]
    assert "BADALLOC" not in opened_devices
    assert any("breaks the plugin contract" in p.reason for p in Device.problems() if p.plugin == "badalloc")


def test_an_unknown_feature_and_a_missing_required_method_are_named():
    class Odd(Allocator):
        features = frozenset({"ofset"})  # type: ignore[arg-type]

    register("ODD", lambda name: Compiled(name, Odd(), **python_kernels()))
    with pytest.raises(DeviceError, match=r"does not implement _alloc: it is required") as err:
        Device["ODD"]
    assert "unknown feature 'ofset' (known: as_buffer, offset, transfer, address, wrap)" in str(err.value)


def test_views_are_read_and_written_through_their_base_without_sub_buffers():
    """Before, `numpy()` of a slice raised "does not support sub-buffers" on such a device."""
    register("PLAIN", lambda name: Compiled(name, PlainAllocator(), **python_kernels()))
    t = Tensor(np.arange(8, dtype=np.float32), device="PLAIN").realize()
    np.testing.assert_equal(t[2:5].numpy(), [2, 3, 4])  # a view at byte 8: copied out of the base
    np.testing.assert_equal(t[:3].bitcast(dtypes.int32).numpy(), np.arange(3, dtype=np.float32).view(np.int32))
    np.testing.assert_equal((t[:4] + 1).numpy(), [1, 2, 3, 4])  # a view at offset 0 is the base's memory
    # a slice at an offset that a kernel takes is computed by a kernel rather than handed over as a view
    np.testing.assert_equal((t[2:5].contiguous() * 2).numpy(), [4, 6, 8])
    np.testing.assert_equal((t[5:] + t[:3]).numpy(), [5, 7, 9])
    bits = np.arange(8, dtype=np.float32)[2:5].view(np.int32)
    np.testing.assert_equal((t[2:5].bitcast(dtypes.int32) + 1).numpy(), bits + 1)
    view = t.lazydata.base.realized.view(2, dtypes.float32, 12)
    view.copyin(np.array([30, 40], np.float32).data)  # read, patch, write back the base
    np.testing.assert_equal(t.numpy(), [0, 1, 2, 30, 40, 5, 6, 7])
    with pytest.raises(DeviceError, match=r"view at byte 12.*does not declare the 'offset' feature.*\.contiguous\(\)"):
        _ = view.opaque  # a kernel cannot be handed memory in the middle of a buffer


# ---------------------------------------------------------------------------------------------------------------------
# copy-only devices


def test_a_copy_only_device_supplies_no_renderer_compiler_or_runtime():
    register("SHELF", lambda name: Compiled(name, PlainAllocator()))
    register("PY", lambda name: Compiled(name, PlainAllocator(), **python_kernels()))
    dev = Device["SHELF"]
    assert dev.kernel_refusal is not None and "kernels" in dict(dev.renderer.caps.unsupported)
    t = Tensor(np.arange(6, dtype=np.int32), device="SHELF")
    np.testing.assert_equal(t[1:4].to("PY").numpy(), [1, 2, 3])
    with pytest.raises(DeviceError, match=r"SHELF is a copy-only device: move the tensor to a compute device first"):
        (t + 1).realize()
    with pytest.raises(DeviceError, match="copy-only"):
        dev.compute_queue_t().exec(PythonProgram, ()).submit(dev)


def test_compiled_takes_a_whole_kernel_toolchain_or_none():
    with pytest.raises(TypeError, match="renderer, compiler and runtime together"):
        Compiled("HALF", PlainAllocator(), renderer=Renderer())
    with pytest.raises(TypeError, match="signal_t and compute_queue_t together"):
        Compiled("HALF", PlainAllocator(), compute_queue_t=SyncQueue)


# ---------------------------------------------------------------------------------------------------------------------
# typed queue commands


def test_a_queue_without_a_handler_core_needs_is_refused_on_open():
    register("NOWAIT", lambda name: Compiled(name, PlainAllocator(), **python_kernels(), signal_t=HostSignal,
                                             compute_queue_t=NoWaitQueue))  # fmt: skip
    expected = r"compute queue .*NoWaitQueue does not handle Wait commands; the plugin must implement NoWaitQueue"
    with pytest.raises(DeviceError, match=expected + r"\.on_wait\(dev, cmd: lazy.hcq.Wait\)"):
        Device["NOWAIT"]


def test_a_command_the_queue_does_not_handle_refuses_the_submission_before_anything_runs():
    register("NOCOPY", lambda name: Compiled(name, PlainAllocator(), **python_kernels(), signal_t=HostSignal,
                                             compute_queue_t=NoCopyQueue))  # fmt: skip
    dev = Device["NOCOPY"]  # Copy is optional on a compute queue
    done = dev.signal_t(0)
    with pytest.raises(DeviceError, match=r"NoCopyQueue does not handle Copy commands.*NoCopyQueue.on_copy"):
        dev.compute_queue_t().signal(done, 1).copy(None, None, 0).submit(dev)
    assert done.value == 0


def test_commands_are_typed_records_replaced_by_field_name():
    register("PY", lambda name: Compiled(name, PlainAllocator(), **python_kernels()))
    dev = Device["PY"]
    calls: list[tuple[Any, ...]] = []
    queue = dev.compute_queue_t().exec(lambda *bufs, **kw: calls.append(bufs), ("a",)).signal(dev.timeline_signal, 5)
    assert queue.cmds == [Exec(queue.cmds[0].program, ("a",)), SetSignal(dev.timeline_signal, 5)]  # type: ignore[union-attr]
    with pytest.raises(FrozenInstanceError):
        queue.cmds[0].bufs = ("b",)  # type: ignore[misc, union-attr]
    submitted = list(queue.cmds)
    queue.cmds[0] = replace(queue.cmds[0], bufs=("b",))  # type: ignore[type-var]
    assert submitted[0].bufs == ("a",)  # type: ignore[union-attr]  # a worker's list keeps what it was given
    queue.submit(dev)
    dev.synchronize()
    assert calls == [("b",)] and queue.cmds[1] == SetSignal(dev.timeline_signal, 5)  # the timeline claim is per submit
    launch = Exec(lambda *bufs, **kw: calls.append(bufs), ("c",))
    graph = HCQGraph(dev, [launch])
    graph.replay({0: replace(launch, bufs=("d",))})
    dev.synchronize()
    assert calls[-1] == ("d",)


def test_a_queue_may_be_submitted_from_several_threads():
    register("PY", lambda name: Compiled(name, PlainAllocator(), **python_kernels()))
    dev = Device["PY"]
    seen: list[int] = []

    def submit(k: int) -> None:
        queue = dev.compute_queue_t().exec(lambda *bufs, **kw: seen.append(k), ())
        queue.signal(dev.timeline_signal, dev.next_value()).submit(dev)

    threads = [threading.Thread(target=submit, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    dev.synchronize()
    assert sorted(seen) == list(range(8)) and not dev.pending


def test_copy_commands_go_through_the_allocators_transfer():
    register("PY", lambda name: Compiled(name, PlainAllocator(), **python_kernels()))
    dev = Device["PY"]
    with pytest.raises(DeviceError, match="needs the allocator's 'transfer' feature"):
        dev.compute_queue_t().copy(dev.allocator.alloc(4), dev.allocator.alloc(4), 4).submit(dev)
    assert Copy in SyncQueue.handled

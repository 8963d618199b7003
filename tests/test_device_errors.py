"""Errors a user can cause on a real device say what went wrong and leave the device working: a dtype the device
cannot compute in is refused by name, a compile failure shows the source and the compiler's message."""

from dataclasses import replace

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.device import Compiled, CompileError, DeviceError
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl
from lazy.plugins import Device
from lazy.pydevice import open_python_device


class NoDoubleDevice:
    """A test plugin: the PYTHON reference device, declaring that it cannot compute in float64."""

    @staticmethod
    def open(name: str) -> Compiled:
        dev = open_python_device(name)
        renderer = dev.renderer
        caps = replace(renderer.caps, dtypes=renderer.caps.dtypes - {dtypes.float64})
        renderer.caps = caps  # an instance attribute: the PYTHON device itself is untouched
        return dev

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        return [DeviceSpec("NODOUBLE", PLUGIN_API_VERSION, 0, lambda: (True, "test"), self.open, default_ok=False)]


@pytest.fixture
def nodouble():
    Device.reset()
    Device.register(NoDoubleDevice(), "nodouble")
    yield "NODOUBLE"
    Device.reset()


def test_unsupported_dtype_is_refused_by_name_and_the_device_keeps_working(nodouble):
    x = Tensor([1.0, 2.0], dtype=dtypes.float64, device=nodouble)
    with pytest.raises(DeviceError, match="does not support double"):
        (x * 2).realize()
    np.testing.assert_allclose((Tensor([1.0, 2.0], device=nodouble) * 2).numpy(), [2.0, 4.0])


def test_compile_error_shows_source_and_message_then_cpu_keeps_working(monkeypatch):
    if not Device.probe("CPU")[0]:
        pytest.skip(f"CPU device unusable here: {Device.probe('CPU')[1]}")
    dev = Device["CPU"]
    monkeypatch.setattr(dev.renderer, "render", lambda name, uops: f"void {name}(void) {{ this is not C; }}")
    with pytest.raises(CompileError) as info:
        (Tensor([1.0, 2.0, 3.0], device="CPU") * 41.5).realize()
    message = str(info.value)
    assert "this is not C" in message  # the generated source
    assert "error" in message.lower()  # the compiler's own message
    monkeypatch.undo()
    np.testing.assert_allclose((Tensor([1.0, 2.0, 3.0], device="CPU") * 41.5).numpy(), [41.5, 83.0, 124.5])


def test_unknown_device_lists_the_devices_that_exist():
    with pytest.raises(DeviceError) as info:
        Tensor([1.0], device="NOSUCHDEV")
    assert "NOSUCHDEV" in str(info.value) and "PYTHON" in str(info.value)


def test_plugins_report_their_library_versions_for_conformance_reports():
    from lazy.conformance.runner import device_versions

    llvm = device_versions("LLVM")
    assert llvm["lazy-core"] and llvm["lazy-cpu"] and llvm["llvmlite"][0].isdigit()
    cpu = device_versions("CPU")
    assert any(("clang" in v or "gcc" in v or "cc" in k) for k, v in cpu.items() if k not in ("lazy-core", "lazy-cpu"))


def test_a_reopened_device_runs_kernels_and_continues_the_random_stream():
    """Closing a device (Device.reset) used to leave compiled kernels bound to the closed instance in the method
    cache ("CPU is closed" on the next cached op, e.g. manual_seed's assign), found by test order in CI."""
    import numpy as np

    from lazy import Tensor

    Tensor.manual_seed(3)
    first, second = Tensor.rand(4, device="CPU").numpy(), Tensor.rand(4, device="CPU").numpy()
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(Tensor.rand(4, device="CPU").numpy(), first)
    (Tensor([1.0, 2.0], device="CPU") + 1).realize()  # a cached kernel of the instance that closes next
    Device.reset()
    np.testing.assert_array_equal(Tensor.rand(4, device="CPU").numpy(), second)  # the stream goes on
    np.testing.assert_array_equal((Tensor([1.0, 2.0], device="CPU") + 1).numpy(), [2.0, 3.0])
    Tensor.manual_seed(3)  # resets the reopened device's state in place
    np.testing.assert_array_equal(Tensor.rand(4, device="CPU").numpy(), first)


@pytest.mark.parametrize("device", ["CPU", pytest.param("CL", marks=pytest.mark.devices("CL"))])
def test_memory_of_a_reset_device_is_refused_by_name_and_never_handed_to_the_reopened_one(device):
    """After Device.reset, buffers of the old instance freed later went to the reopened device's allocator cache: on
    OpenCL a later allocation of that size got memory of the old context (INVALID_CONTEXT on every use). They are
    now given back to the allocator that made them, and using one says what happened."""
    try:
        Device[device]
    except Exception as e:  # noqa: BLE001 - whatever keeps the device from opening
        pytest.skip(f"{device} does not open here: {e}")
    from lazy import TinyJit

    @TinyJit
    def triple(a: Tensor) -> Tensor:
        return (a * 3).realize()

    for _ in range(3):
        triple(Tensor(np.ones(6, np.float32), device=device))
    old = Tensor(np.arange(6, dtype=np.float32), device=device).realize()
    Device.reset()
    with pytest.raises(DeviceError, match=rf"{device} was reset .*make the tensor again"):
        old.numpy()
    with pytest.raises(DeviceError, match="was reset"):
        triple(Tensor(np.ones(6, np.float32), device=device))
    del triple, old
    import gc

    gc.collect()
    for size in (6, 7):  # the same size as the old buffers, and another
        np.testing.assert_array_equal((Tensor(np.ones(size, np.float32), device=device) * 5).numpy(), [5.0] * size)


def test_a_matmul_across_devices_is_refused_by_its_own_name():
    """`cpu @ python` names the matmul (it named the multiply inside it) and both devices."""
    with pytest.raises(ValueError, match=r"matmul: tensors are on different devices \(CPU and PYTHON\)"):
        Tensor.ones(2, 2, device="CPU") @ Tensor.ones(2, 2, device="PYTHON")

"""Registration, the cheap import, and the probe naming the missing part (cuda-bindings, NVRTC, the driver, a driver
too old for the cubins, a GPU); asked for by name without a GPU, the device fails with the probe's reason."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

import lazy_cuda
from lazy.device import DeviceError


class FakeLibcuda:
    """libcuda's few entry points the probe calls, answering as a driver of `version` with `count` GPUs would."""

    def __init__(self, version: int, count: int = 1, init_error: int = 0):
        self.version, self.count, self.init_error = version, count, init_error

    def cuDriverGetVersion(self, out) -> int:  # noqa: N802  (the C name)
        out._obj.value = self.version
        return 0

    def cuInit(self, flags: int) -> int:  # noqa: N802
        return self.init_error

    def cuDeviceGetCount(self, out) -> int:  # noqa: N802
        out._obj.value = self.count
        return 0


def probe_with(monkeypatch, lib: FakeLibcuda | None) -> tuple[bool, str]:
    def load(name, *args, **kwargs):
        if name != lazy_cuda.LIBCUDA:
            return real(name, *args, **kwargs)
        if lib is None:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return lib

    real = ctypes.CDLL
    monkeypatch.setattr(ctypes, "CDLL", load)
    return lazy_cuda.probe_cuda()


def test_entry_point_registers_cuda():
    from lazy.plugins import Device

    specs = Device.specs()
    assert "CUDA" in specs and specs["CUDA"].priority > specs["CPU"].priority  # a usable GPU is the default
    versions = specs["CUDA"].library_versions
    assert specs["CUDA"].codegen_targets is not None and versions is not None
    assert set(versions()) >= {"cuda-bindings", "nvidia-cuda-nvrtc"}


def test_import_loads_no_cuda_module():
    loaded = "sorted(m for m in sys.modules if m.split('.')[0] == 'cuda' or m == 'lazy_cuda.device')"
    code = f"import sys, lazy_cuda; lazy_cuda.cuda_targets(); print({loaded})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_probe_names_each_missing_part(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(lazy_cuda, "_has_module", lambda name: False)
        usable, reason = lazy_cuda.probe_cuda()
        assert not usable and reason.startswith("cuda-bindings is not installed: pip install lazy-cuda")
    usable, reason = probe_with(monkeypatch, None)
    assert not usable and reason.startswith("no NVIDIA driver (libcuda.so.1") and "LAZY_EMULATE=CUDA" in reason
    usable, reason = probe_with(monkeypatch, FakeLibcuda(12040))
    assert not usable and "driver supports CUDA 12.4, older than the CUDA 13.0" in reason and "upgrade" in reason
    usable, reason = probe_with(monkeypatch, FakeLibcuda(13000, init_error=lazy_cuda.CUDA_ERROR_NO_DEVICE))
    assert not usable and reason.startswith("no CUDA device")
    usable, reason = probe_with(monkeypatch, FakeLibcuda(13000, count=0))
    assert not usable and reason.startswith("no CUDA device")
    usable, reason = probe_with(monkeypatch, FakeLibcuda(13010, count=2))
    assert usable and reason == "2 CUDA device(s), driver for CUDA 13.1"


def test_device_asked_for_by_name_fails_with_the_probe_reason():
    usable, reason = lazy_cuda.probe_cuda()
    if usable:
        pytest.skip(f"a CUDA device is usable here ({reason}): nothing to refuse")
    from lazy.plugins import Device

    with pytest.raises(DeviceError, match="device CUDA .* is not usable: ") as info:
        Device["CUDA"]
    assert reason in str(info.value)


def test_open_without_driver_names_the_fix():
    if lazy_cuda.probe_cuda()[0]:
        pytest.skip("a CUDA device is usable here: the driver is present")
    from lazy_cuda.device import open_cuda

    with pytest.raises(DeviceError, match="no NVIDIA driver .*install the NVIDIA driver"):
        open_cuda("CUDA")

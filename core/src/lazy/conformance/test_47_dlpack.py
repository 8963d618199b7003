"""Layer dlpack: what the device's plugin declares about DLPack (`DeviceSpec.dlpack_device_types`) holds. Every
device exports to and imports from numpy (through a copy when it declares no host memory); a device that declares
host memory (kDLCPU) shares it both ways, with equal addresses and writes seen on the other side."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.device import dlpack_contract_problems
from lazy.dtype import dtypes
from lazy.tensor import Tensor

NUMPY_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float16,
                dtypes.float32, dtypes.float64]  # fmt: skip
KDLCPU = 1


@pytest.fixture(scope="module")
def declared(device_name):
    from lazy.plugins import Device

    return tuple(Device.specs()[device_name.partition(":")[0]].dlpack_device_types)


@pytest.fixture(scope="module")
def shares_host_memory(declared):
    return bool(declared) and declared[0] == KDLCPU


def values_for(dtype):
    values = np.array([0, 1, 5, 7, 3, 2])
    return (values % 2 == 1) if dtype == dtypes.bool else values.astype(np.dtype(dtype.fmt))


def to_numpy(t):
    """`np.from_dlpack(t)`: host memory as it is; other memory (a GPU's) numpy refuses with its own error (lazy's
    capsule must not turn it into another), then takes as a host copy when asked for host memory (numpy 2.1's
    device="cpu")."""
    if t.__dlpack_device__()[0] == KDLCPU:
        return np.from_dlpack(t)
    with pytest.raises((BufferError, RuntimeError), match="[Dd]evice"):
        np.from_dlpack(t)
    try:
        return np.from_dlpack(t, device="cpu")
    except TypeError:
        pytest.skip(f"numpy {np.__version__} cannot ask for host memory (np.from_dlpack(x, device='cpu'): 2.1+)")


def host_address(t):
    from lazy import dlpack

    buf = t.lazydata.base.realized
    return dlpack._address(buf)


def test_declared_types_are_backed_by_the_allocator(device, declared):
    assert dlpack_contract_problems(declared, device.allocator) == []


def test_dlpack_device_is_what_is_declared(device_name, declared):
    t = Tensor([1, 2, 3], device=device_name, dtype=dtypes.int32)
    ordinal = device_name.partition(":")[2]
    want = (
        (int(declared[0]), 0 if declared[0] == KDLCPU or not ordinal.isdigit() else int(ordinal))
        if declared
        else (1, 0)
    )
    assert t.__dlpack_device__() == want


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_export_to_numpy(device_name, caps, shares_host_memory, dtype):
    if not caps.supports(dtype):
        pytest.skip(f"{device_name} does not support {dtype}")
    values = values_for(dtype)
    t = Tensor(values, device=device_name).realize()
    if not shares_host_memory:  # through one copy to host memory
        np.testing.assert_array_equal(to_numpy(t), values)
        return
    out = np.from_dlpack(t)
    np.testing.assert_array_equal(out, values)
    assert out.ctypes.data == host_address(t)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_import_from_numpy(device_name, caps, shares_host_memory, dtype):
    if not caps.supports(dtype):
        pytest.skip(f"{device_name} does not support {dtype}")
    values = values_for(dtype).reshape(2, 3)
    t = Tensor.from_dlpack(values, device=device_name)
    assert t.device == device_name and t.shape == (2, 3) and t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), values)
    if shares_host_memory:
        assert host_address(t) == values.ctypes.data


@pytest.mark.requires("kernels")
def test_writes_are_seen_on_the_other_side(device_name, device, shares_host_memory):
    if not shares_host_memory:
        pytest.skip(f"{device_name} declares no host memory (kDLCPU): DLPack exchanges with it are copies")
    arr = np.arange(6, dtype=np.float32)
    t = Tensor.from_dlpack(arr, device=device_name)
    arr[0] = 50.0
    assert (t + 1).numpy()[0] == 51.0
    t.assign(t * 2).realize()
    device.synchronize()
    assert arr[0] == 100.0


@pytest.mark.requires("kernels")
def test_strided_producers(device_name):
    arr = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in (arr.T, arr[::-1, 1::2]):
        np.testing.assert_array_equal(Tensor.from_dlpack(view, device=device_name).numpy(), view)
    t = Tensor(arr, device=device_name).realize()
    np.testing.assert_array_equal(to_numpy(t.T), arr.T)


@pytest.mark.requires("kernels")  # (making such a tensor from Python floats is a cast on the device)
@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2], ids=str)
def test_lazy_to_lazy_of_dtypes_numpy_lacks(device_name, caps, dtype):
    if not caps.supports(dtype):
        pytest.skip(f"{device_name} does not support {dtype}")
    t = Tensor([0.5, -1.0, 2.0], device=device_name, dtype=dtype).realize()
    back = Tensor.from_dlpack(t, device=device_name)
    assert back.dtype == dtype and back.numpy().tolist() == [0.5, -1.0, 2.0]

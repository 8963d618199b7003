"""DLPack interop and `numpy(copy=...)`: round trips with numpy and PyTorch both ways, memory shared where the device
addresses host memory (CPU: equal data pointers, a write on one side seen on the other), one copy elsewhere (PYTHON,
CL), every dtype, strided producers, lifetimes under gc, and the bad inputs (consumed, foreign-device and
unsupported-dtype capsules, sharded tensors)."""

from __future__ import annotations

import ctypes
import gc
import weakref
from typing import Any

import numpy as np
import pytest

from lazy import Tensor, dlpack
from lazy.device import Compiled, DeviceError
from lazy.dtype import dtypes
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, DLDeviceType, hookimpl
from lazy.plugins import Device
from lazy.pydevice import PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer

HOST = "CPU"  # a device whose plugin declares host memory (kDLCPU) and whose allocator wraps and hands out pointers
NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                np.float16, np.float32, np.float64]  # fmt: skip


def address_of(t: Tensor) -> int:
    """Where a realized tensor's base memory starts."""
    buf = t.lazydata.base.realized
    assert buf is not None
    return dlpack._address(buf)


def sample(np_dtype: type, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    values = np.arange(int(np.prod(shape))).reshape(shape)
    return (values % 2 == 1) if np_dtype is np.bool_ else values.astype(np_dtype)


def capsule_fields(capsule: Any) -> tuple[bytes, Any]:
    """(name, the managed tensor struct) of an unconsumed capsule, valid while the capsule lives."""
    name = dlpack._capsule_name(capsule)
    pointer = dlpack._capsule_pointer(capsule, dlpack._NAMES[name])
    struct = dlpack.DLManagedTensorVersioned if name == b"dltensor_versioned" else dlpack.DLManagedTensor
    return name, struct.from_address(pointer)


def churn(shape: tuple[int, ...]) -> None:
    """Allocate and fill buffers of `shape` (float32): memory freed to the device's buffer cache is handed out here."""
    for _ in range(3):
        Tensor.full(shape, 7.0, device=HOST).contiguous().realize()
    Device[HOST].synchronize()


# -- numpy, both ways --------------------------------------------------------------------------------------------------


def test_export_to_numpy_shares_memory_both_ways():
    t = Tensor([1.0, 2.0, 3.0], device=HOST).realize()
    a = np.from_dlpack(t)
    assert t.__dlpack_device__() == (1, 0)
    assert a.ctypes.data == address_of(t)
    a[0] = 10.0
    assert t.numpy().tolist() == [10.0, 2.0, 3.0]
    t.assign(t * 2).realize()
    Device[HOST].synchronize()  # lazy's kernels run on the device's queue; numpy reads the memory directly
    assert a.tolist() == [20.0, 4.0, 6.0]


def test_import_from_numpy_shares_memory_both_ways():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor.from_dlpack(arr)
    assert t.device == HOST and t.shape == (2, 3) and t.dtype == dtypes.float32
    assert address_of(t) == arr.ctypes.data
    arr[0, 0] = 100.0
    assert t.numpy()[0, 0] == 100.0
    t.assign(t + 1).realize()
    Device[HOST].synchronize()
    np.testing.assert_array_equal(arr, [[101, 2, 3], [4, 5, 6]])


def test_lazy_reads_shared_memory_when_it_computes_never_a_cached_value():
    # the schedule cache (same graph structure) and the sharing of identical nodes must not replay old values
    arr = np.arange(4, dtype=np.float32)
    t = Tensor.from_dlpack(arr)
    first = (t + 1).numpy()
    arr += 10
    np.testing.assert_array_equal((t + 1).numpy(), first + 10)
    pending = t * 2  # not computed yet: it reads the memory when it is
    arr += 1
    np.testing.assert_array_equal(pending.numpy(), (first + 10) * 2)


def test_realize_waits_for_lazy_writes_into_shared_memory():
    # Needs the engine change proposed with this work (ExecItem.run synchronizes when a buffer is shared); a kernel
    # big enough to go to the device's worker thread is still running when realize() returns without it.
    t = Tensor.zeros(1 << 20, device=HOST).contiguous().realize()
    a = np.from_dlpack(t)
    for step in range(1, 4):
        t.assign(t + 1).realize()
        assert a[-1] == step


@pytest.mark.parametrize("np_dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_numpy_dtype_round_trips_in_place(np_dtype):
    arr = sample(np_dtype)
    t = Tensor.from_dlpack(arr)
    assert t.dtype == dtypes.from_np(arr.dtype) and address_of(t) == arr.ctypes.data
    back = np.from_dlpack(t)
    assert back.dtype == arr.dtype and back.ctypes.data == arr.ctypes.data
    np.testing.assert_array_equal(back, arr)


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2], ids=str)
def test_dtypes_numpy_lacks_round_trip_with_their_dlpack_codes(dtype):
    t = Tensor([0.5, -1.0, 2.0], device=HOST).cast(dtype).realize()
    capsule = t.__dlpack__(max_version=(1, 0))
    name, managed = capsule_fields(capsule)
    assert (managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits) == dlpack.DL_DTYPES[dtype]
    back = Tensor.from_dlpack(t)
    assert back.dtype == dtype and address_of(back) == address_of(t)
    assert back.numpy().tolist() == [0.5, -1.0, 2.0]
    with pytest.raises(RuntimeError, match="Unsupported dtype"):  # numpy's own error, not a lost one
        np.from_dlpack(t)


@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[::-1], lambda a: a[:, 1::2], lambda a: a[1:, ::-2].T, lambda a: a[0]],
    ids=["transposed", "flipped", "stepped", "flipped-stepped-transposed", "row"],
)
def test_strided_numpy_producers_import_as_views_in_place(view):
    arr = np.arange(24, dtype=np.int32).reshape(4, 6)
    v = view(arr)
    t = Tensor.from_dlpack(v)
    np.testing.assert_array_equal(t.numpy(), v)
    lowest = min(v.ctypes.data + sum(min(0, (n - 1) * s) for n, s in zip(v.shape, v.strides)), v.ctypes.data)
    assert address_of(t) == lowest  # its buffer is the producer's memory, read through lazy's strides
    arr += 100
    np.testing.assert_array_equal(t.numpy(), v)


def test_strided_import_into_a_device_without_host_memory_is_one_copy():
    arr = np.arange(200, dtype=np.float32).reshape(10, 20)
    for v in (arr.T, arr[::-1, ::3], arr[:, ::50]):  # the last reads 20 of 200 elements: gathered on the host
        t = Tensor.from_dlpack(v, device="PYTHON")
        np.testing.assert_array_equal(t.numpy(), v)
    t = Tensor.from_dlpack(arr, device="PYTHON")
    arr += 1
    assert t.numpy()[0, 0] == 0.0  # a copy, made at import


def test_tensors_to_export_are_computed_or_laid_out_first():
    a = Tensor.arange(6, device=HOST).reshape(2, 3).float()
    shown = (a * 2).T  # unrealized: computed into its own memory, exported as a view of it
    out = np.from_dlpack(shown)
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3).T * 2)
    assert out.ctypes.data == address_of(shown) and out.strides == (4, 12)
    padded = Tensor([1.0, 2.0], device=HOST).realize().pad(((1, 1),))  # strides cannot describe it: laid out
    capsule = padded.__dlpack__(max_version=(1, 0))
    name, managed = capsule_fields(capsule)
    assert name == b"dltensor_versioned" and managed.flags & dlpack.FLAG_IS_COPIED
    np.testing.assert_array_equal(np.from_dlpack(padded), [0, 1, 2, 0])
    flipped = Tensor([1, 2, 3], device=HOST).realize().flip(0)  # a negative stride aborts PyTorch: laid out
    capsule = flipped.__dlpack__(max_version=(1, 0))
    _, managed = capsule_fields(capsule)
    assert managed.dl_tensor.strides[0] == 1 and managed.flags & dlpack.FLAG_IS_COPIED
    assert np.from_dlpack(flipped).tolist() == [3, 2, 1]
    assert np.from_dlpack(Tensor(3.5, device=HOST)).shape == ()
    assert np.from_dlpack(Tensor.empty(0, 3, device=HOST)).shape == (0, 3)


def test_capsule_kinds_and_export_arguments():
    t = Tensor([1.0, 2.0], device=HOST).realize()
    assert capsule_fields(t.__dlpack__())[0] == b"dltensor"
    assert capsule_fields(t.__dlpack__(max_version=(0, 8)))[0] == b"dltensor"
    capsule = t.__dlpack__(max_version=(1, 0))
    name, managed = capsule_fields(capsule)
    assert name == b"dltensor_versioned" and managed.version.major == 1 and not managed.flags & dlpack.FLAG_IS_COPIED
    copied = Tensor.from_dlpack(t.__dlpack__(copy=True))  # (numpy takes no capsules)
    assert address_of(copied) != address_of(t) and copied.tolist() == [1.0, 2.0]
    assert np.from_dlpack(t, device="cpu", copy=False).ctypes.data == address_of(t)  # numpy passes dl_device
    with pytest.raises(BufferError, match="stream must be None"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match=r"kDLCUDA \(2\) device 0"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="max_version"):
        t.__dlpack__(max_version=1)  # type: ignore[arg-type]


def test_a_device_without_host_memory_exports_and_imports_through_one_copy():
    t = Tensor([1, 2, 3], device="PYTHON")
    assert t.__dlpack_device__() == (1, 0)
    capsule = t.__dlpack__(max_version=(1, 0))
    name, managed = capsule_fields(capsule)
    assert managed.flags & dlpack.FLAG_IS_COPIED
    assert np.from_dlpack(t).tolist() == [1, 2, 3]
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(copy=False)
    arr = np.arange(3.0)
    with pytest.raises(BufferError, match="PYTHON does not use kDLCPU"):
        Tensor.from_dlpack(arr, device="PYTHON", copy=False)
    assert Tensor.from_dlpack(arr, device="PYTHON").numpy().tolist() == [0.0, 1.0, 2.0]


def test_copy_true_imports_a_copy():
    arr = np.arange(3.0)
    t = Tensor.from_dlpack(arr, copy=True)
    assert address_of(t) != arr.ctypes.data
    arr += 1
    assert t.numpy().tolist() == [0.0, 1.0, 2.0]


def test_read_only_and_misaligned_producers_are_copied():
    ro = np.frombuffer(bytes(16), dtype=np.float32)  # writing bytes' memory would corrupt the interpreter
    t = Tensor.from_dlpack(ro)
    assert address_of(t) != ro.ctypes.data and t.numpy().tolist() == [0.0] * 4
    with pytest.raises(BufferError, match="read-only"):
        Tensor.from_dlpack(ro, copy=False)
    odd = np.frombuffer(bytearray(20), dtype=np.uint8)[1:17].view(np.float32)
    assert odd.ctypes.data % 4 and Tensor.from_dlpack(odd).numpy().tolist() == [0.0] * 4
    with pytest.raises(BufferError, match="not aligned"):
        Tensor.from_dlpack(odd, copy=False)


# -- numpy(copy=...) ---------------------------------------------------------------------------------------------------


def test_numpy_copy_false_shares_memory_and_keeps_it_alive():
    t = Tensor([1, 2, 3], device=HOST).realize()
    default = t.numpy()
    assert default.ctypes.data != address_of(t)  # the default still copies
    shared = t.numpy(copy=False)
    assert shared.ctypes.data == address_of(t) and shared.flags.writeable
    shared[0] = 50
    assert t.numpy().tolist() == [50, 2, 3] and default.tolist() == [1, 2, 3]
    assert t.numpy(copy=None).ctypes.data == address_of(t)
    view = t.reshape(3, 1).expand(3, 2).numpy(copy=False)
    assert view.strides == (4, 0) and view.ctypes.data == address_of(t)
    buf = weakref.ref(t.lazydata.base.realized)
    del t
    gc.collect()
    churn((3,))
    assert buf() is not None and shared.tolist() == [50, 2, 3]
    del shared, view
    gc.collect()
    assert buf() is None


def test_numpy_copy_false_says_why_it_needs_a_copy():
    with pytest.raises(ValueError, match="numpy has no bfloat16"):
        Tensor([1.0], device=HOST).cast(dtypes.bfloat16).numpy(copy=False)
    with pytest.raises(ValueError, match="PYTHON memory is not host memory"):
        Tensor([1.0], device="PYTHON").numpy(copy=False)
    with pytest.raises(ValueError, match="strides cannot describe"):
        Tensor([1.0], device=HOST).realize().pad(((1, 0),)).numpy(copy=False)
    with pytest.raises(ValueError, match="sharded"):
        Tensor([1.0, 2.0], device=HOST).shard((HOST, f"{HOST}:1"), axis=0).numpy(copy=False)
    assert Tensor([1.0], device="PYTHON").numpy(copy=None).tolist() == [1.0]  # None: copies when it must


# -- lifetimes ---------------------------------------------------------------------------------------------------------


def test_exported_memory_lives_until_the_consumer_lets_it_go():
    t = Tensor.arange(1000, device=HOST).float().realize()
    buf = weakref.ref(t.lazydata.base.realized)
    a = np.from_dlpack(t)
    del t
    gc.collect()
    churn((1000,))  # freed memory would be handed out again here and overwritten
    assert buf() is not None
    np.testing.assert_array_equal(a, np.arange(1000))
    del a
    gc.collect()
    assert buf() is None


def test_an_unconsumed_capsule_releases_the_memory_when_it_dies():
    t = Tensor([1.0, 2.0], device=HOST).realize()
    buf = weakref.ref(t.lazydata.base.realized)
    for max_version in (None, (1, 0)):
        capsule = t.__dlpack__(max_version=max_version)
        del capsule
    del t
    gc.collect()
    assert buf() is None


def test_imported_memory_keeps_its_producer_alive_until_lazy_is_done():
    arr = np.arange(1000, dtype=np.float32)
    producer = weakref.ref(arr)
    t = Tensor.from_dlpack(arr)
    view = t[10:20]
    del arr, t
    gc.collect()
    assert producer() is not None  # the capsule's deleter has not run
    np.testing.assert_array_equal(view.numpy(), np.arange(10, 20))
    del view
    gc.collect()
    assert producer() is None  # lazy called the producer's deleter


def test_lazy_to_lazy_shares_memory():
    t = Tensor([1, 2, 3], device=HOST).realize()
    u = Tensor.from_dlpack(t)
    assert address_of(u) == address_of(t)
    buf = weakref.ref(t.lazydata.base.realized)
    del t
    gc.collect()
    assert buf() is not None and u.numpy().tolist() == [1, 2, 3]
    del u
    gc.collect()
    assert buf() is None


# -- bad input ---------------------------------------------------------------------------------------------------------


def test_a_consumed_capsule_cannot_be_imported_again():
    capsule = Tensor([1.0, 2.0], device=HOST).__dlpack__(max_version=(1, 0))
    first = Tensor.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already imported"):
        Tensor.from_dlpack(capsule)
    assert first.numpy().tolist() == [1.0, 2.0]


def test_a_capsule_of_a_device_lazy_does_not_use_is_refused_and_left_to_its_producer():
    arr = np.arange(4, dtype=np.float32)
    owner = weakref.ref(arr)
    for device_type in (7, 99):  # kDLVulkan, and a type DLPack does not define
        capsule = dlpack._make_capsule(arr.ctypes.data, (device_type, 0), dtypes.float32, (4,), (1,), arr, (1, 1))
        with pytest.raises(BufferError, match="no usable lazy device uses"):
            Tensor.from_dlpack(capsule)
        assert dlpack._capsule_name(capsule) == b"dltensor_versioned"  # not consumed: still the producer's
        del capsule
    del arr
    gc.collect()
    assert owner() is None  # the refused capsules freed what they held when they died


def test_a_capsule_of_a_newer_major_version_is_refused_and_released():
    arr = np.arange(4, dtype=np.float32)
    owner = weakref.ref(arr)
    capsule = dlpack._make_capsule(arr.ctypes.data, (1, 0), dtypes.float32, (4,), (1,), arr, (2, 0))
    del arr
    with pytest.raises(BufferError, match="DLPack 2.0 tensor"):
        Tensor.from_dlpack(capsule)
    gc.collect()
    assert owner() is None  # the deleter ran, as DLPack asks of a consumer that refuses the version


def test_unsupported_dtypes_are_named():
    with pytest.raises(BufferError, match="complex128: lazy has no such dtype"):
        Tensor.from_dlpack(np.zeros(3, dtype=np.complex128))
    arr = np.zeros(3, dtype=np.float32)
    capsule = arr.__dlpack__()
    _, managed = capsule_fields(capsule)
    managed.dl_tensor.dtype.lanes = 4
    with pytest.raises(BufferError, match=r"float32x4 \(a vector dtype\)"):
        Tensor.from_dlpack(capsule)


def test_other_objects_and_capsules_are_refused():
    with pytest.raises(TypeError, match="from_dlpack takes an object with __dlpack__"):
        Tensor.from_dlpack([1, 2, 3])
    other = ctypes.pythonapi.PyCapsule_New
    other.restype, other.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = ctypes.create_string_buffer(b"something_else")
    with pytest.raises(BufferError, match="not a DLPack capsule"):
        Tensor.from_dlpack(other(1, name, None))


def test_a_sharded_tensor_cannot_be_exported():
    t = Tensor([1.0, 2.0, 3.0, 4.0], device=HOST).shard((HOST, f"{HOST}:1"), axis=0)
    with pytest.raises(BufferError, match=r"sharded over CPU, CPU:1 .*\(\.to\('CPU'\)\)"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="sharded"):
        t.__dlpack_device__()


# -- the plugin contract --------------------------------------------------------------------------------------------


def test_declared_dlpack_device_types_are_checked():
    def spec(types: object) -> DeviceSpec:
        return DeviceSpec("X", PLUGIN_API_VERSION, 1, lambda: (True, ""), Compiled, dlpack_device_types=types)  # type: ignore[arg-type]

    assert spec((DLDeviceType.kDLCPU, 2)).dlpack_device_types == (1, 2)
    for bad in ((99,), ("kDLCPU",), (1, 1), [1], (True,)):
        with pytest.raises(ValueError, match="dlpack_device_types must be a tuple of distinct DLPack device types"):
            spec(bad)


class HostClaimingPlugin:
    """A device that declares host memory while its allocator can neither hand out nor wrap pointers."""

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        def open_device(name: str) -> Compiled:
            return Compiled(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)

        return [DeviceSpec("CLAIMS", PLUGIN_API_VERSION, 1, lambda: (True, "test"), open_device,
                           dlpack_device_types=(DLDeviceType.kDLCPU,))]  # fmt: skip


@pytest.mark.usefixtures("clean_registry")
def test_a_declaration_the_allocator_cannot_back_is_named_with_its_fix():
    Device.register(HostClaimingPlugin(), "claims", dist="lazy-claims")
    with pytest.raises(DeviceError, match=r"allocator PythonAllocator does not declare the feature 'address'"):
        Tensor([1.0], device="CLAIMS").__dlpack__()  # (refused when it opens, once the registry checks it there)


# -- PyTorch -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: the DLPack exchanges with it are skipped")


def test_torch_round_trip_shares_memory_both_ways(torch):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = Tensor.from_dlpack(x)
    assert address_of(t) == x.data_ptr()
    x.add_(1)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    t.assign(t * 10).realize()
    Device[HOST].synchronize()
    assert x[0, 0].item() == 10.0 and y[1, 2].item() == 60.0


def test_transposed_torch_tensor_imports_as_a_view(torch):
    x = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    xt = x.T
    t = Tensor.from_dlpack(xt)
    assert address_of(t) == x.data_ptr() and t.lazydata.st.views[0].strides == (1, 4)
    np.testing.assert_array_equal(t.numpy(), xt.numpy())
    x.mul_(2)
    np.testing.assert_array_equal(t.numpy(), xt.numpy())
    expanded = torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 3)  # stride 0
    np.testing.assert_array_equal(Tensor.from_dlpack(expanded).numpy(), expanded.numpy())


def test_every_dtype_round_trips_with_torch(torch):
    pairs = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.int16: torch.int16, dtypes.int32: torch.int32,
             dtypes.int64: torch.int64, dtypes.uint8: torch.uint8, dtypes.uint16: torch.uint16,
             dtypes.uint32: torch.uint32, dtypes.uint64: torch.uint64, dtypes.float16: torch.float16,
             dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32, dtypes.float64: torch.float64,
             dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}  # fmt: skip
    assert set(pairs) == set(dlpack.DL_DTYPES)
    for dtype, torch_dtype in pairs.items():
        x = torch.tensor([0.0, 1.0, 2.0, 0.5]).to(torch_dtype)
        t = Tensor.from_dlpack(x)
        assert t.dtype == dtype and address_of(t) == x.data_ptr(), dtype
        y = torch.from_dlpack(t)
        assert y.dtype == torch_dtype and y.data_ptr() == x.data_ptr() and torch.equal(y, x), dtype
        made = torch.from_dlpack(Tensor([0, 1, 0], device=HOST).cast(dtype))
        assert made.dtype == torch_dtype and made.to(torch.float32).tolist() == [0.0, 1.0, 0.0], dtype


def test_torch_dtypes_lazy_lacks_are_named_and_left_to_torch(torch):
    for torch_dtype, name in ((torch.complex64, "complex64"), (torch.float8_e4m3fnuz, "float8_e4m3fnuz")):
        with pytest.raises(BufferError, match=f"{name}: lazy has no such dtype"):
            Tensor.from_dlpack(torch.zeros(3, dtype=torch_dtype))


def test_a_consumed_torch_capsule_cannot_be_imported(torch):
    capsule = torch.utils.dlpack.to_dlpack(torch.arange(3))
    torch.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already imported"):
        Tensor.from_dlpack(capsule)


def test_torch_memory_outlives_the_torch_tensor_and_lazy_memory_the_lazy_tensor(torch):
    x = torch.arange(1000, dtype=torch.float32)
    t = Tensor.from_dlpack(x)
    del x
    gc.collect()
    torch.full((1000,), 7.0)  # torch's allocator would hand the freed memory out again
    np.testing.assert_array_equal(t.numpy(), np.arange(1000))
    u = Tensor.arange(1000, device=HOST).float().realize()
    y = torch.from_dlpack(u)
    del u
    gc.collect()
    churn((1000,))
    np.testing.assert_array_equal(y.numpy(), np.arange(1000))


@pytest.mark.parametrize("versioned", [None, (1, 1)])
def test_a_consumer_refusing_gpu_memory_raises_its_own_error_and_frees_the_export(versioned):
    """numpy drops a capsule of GPU memory on its error path (an exception pending): the capsule's destructor must not
    replace that BufferError with a SystemError, and must let go of what the export held."""

    class Producer:  # as a CUDA tensor presents itself to np.from_dlpack
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kwargs):
            arr = self.arr
            return dlpack._make_capsule(arr.ctypes.data, (2, 0), dtypes.float32, (4,), (1,), arr, versioned)

        def __dlpack_device__(self):
            return (2, 0)

    producer = Producer(np.arange(4, dtype=np.float32))
    owner = weakref.ref(producer.arr)
    with pytest.raises((BufferError, RuntimeError), match="Unsupported device"):  # numpy < 2.5: RuntimeError
        np.from_dlpack(producer)
    del producer
    gc.collect()
    assert owner() is None

"""DLPack interop: `Tensor.__dlpack__` and `Tensor.from_dlpack` (the Python array API protocol, with DLPack's C structs
through ctypes) and the memory `Tensor.numpy(copy=False)` shares. A device shares memory when its plugin declares the
DLPack device types it addresses (`DeviceSpec.dlpack_device_types`) and its allocator hands out and wraps pointers
(features "address", "wrap"); every other device goes through one copy to or from host memory."""

from __future__ import annotations

import ctypes
import enum
from typing import TYPE_CHECKING, Any

from lazy.device import Buffer, DeviceError, dlpack_contract_problems, get_device
from lazy.dtype import DType, dtypes, to_np_dtype
from lazy.engine.realize import realize
from lazy.helpers import all_int, prod
from lazy.hookspecs import DLDeviceType
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer
from lazy.plugins import Device
from lazy.record import record
from lazy.shape import ShapeTracker
from lazy.shape.view import View

if TYPE_CHECKING:
    import numpy as np

# the DLPack ABI lazy speaks (1.1 named the float8 types); a producer's major version must match
DLPACK_VERSION = (1, 1)
FLAG_READ_ONLY, FLAG_IS_COPIED = 1 << 0, 1 << 1


class DLPackError(BufferError):
    """A DLPack exchange that cannot happen (a device, dtype or layout lazy cannot share, a consumed capsule)."""


class DLDataTypeCode(enum.IntEnum):
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17


# lazy's dtypes as DLPack (code, bits); fp8e4m3 is OCP E4M3 without infinity ("e4m3fn"), fp8e5m2 OCP E5M2
DL_DTYPES: dict[DType, tuple[DLDataTypeCode, int]] = {
    dtypes.bool: (DLDataTypeCode.kDLBool, 8),
    **{d: (DLDataTypeCode.kDLInt, 8 * d.itemsize) for d in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)},
    **{
        d: (DLDataTypeCode.kDLUInt, 8 * d.itemsize) for d in (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
    },
    **{d: (DLDataTypeCode.kDLFloat, 8 * d.itemsize) for d in (dtypes.float16, dtypes.float32, dtypes.float64)},
    dtypes.bfloat16: (DLDataTypeCode.kDLBfloat, 16),
    dtypes.fp8e4m3: (DLDataTypeCode.kDLFloat8_e4m3fn, 8),
    dtypes.fp8e5m2: (DLDataTypeCode.kDLFloat8_e5m2, 8),
}
LAZY_DTYPES = {code_bits: dtype for dtype, code_bits in DL_DTYPES.items()}


# ---------------------------------------------------------------------------------------------------------------------
# the C structs of dlpack.h (function pointers as plain addresses: they are only stored and called)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]  # fmt: skip


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# capsules. A capsule is named "dltensor_versioned" (or "dltensor", the legacy struct) until a consumer takes it and
# renames it "used_..."; the consumer then calls the deleter when done. A capsule nobody consumed calls it when it
# dies (its destructor). Both run from C, possibly while an exception is pending: a consumer dropping the capsule on
# its error path (numpy refusing GPU memory: "Unsupported device in DLTensor"). A Python callback run then would
# replace that exception with a SystemError, so every capsule lazy makes is numpy's, whose destructor and deleter
# are C: host memory is exported as a numpy array over it; other memory (a GPU's) as a placeholder array of the same
# shape and strides whose base holds what keeps the memory alive, with the data pointer and device written in.

_NAMES = {key: ctypes.create_string_buffer(key) for key in
          (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned")}  # fmt: skip
_C_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)  # a producer's deleter, called holding the GIL
_api = ctypes.pythonapi
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_api.Py_IncRef(ctypes.py_object(_NAMES))  # never freed: a capsule may outlive this module's teardown at exit


def _numpy_capsule(array: np.ndarray, dtype: DType, max_version: tuple[int, int] | None, copied: bool) -> Any:
    """A capsule of host memory, made by numpy for `array` (whose base keeps the memory alive), with `dtype`'s code
    written in (numpy holds bfloat16 and fp8 as unsigned ints) and IS_COPIED set for a copy."""
    return _patched(_capsule_of(array, max_version), dtype, FLAG_IS_COPIED if copied else 0)


def _capsule_of(array: np.ndarray, max_version: tuple[int, int] | None) -> Any:
    try:
        return array.__dlpack__(max_version=max_version) if max_version is not None else array.__dlpack__()
    except TypeError:  # numpy before 2.1 makes legacy capsules only, which a versioned consumer also takes
        return array.__dlpack__()


def _managed(capsule: Any) -> DLManagedTensor | DLManagedTensorVersioned:
    name = _capsule_name(capsule)
    pointer = _capsule_pointer(capsule, _NAMES[name])
    if name == b"dltensor_versioned":
        return DLManagedTensorVersioned.from_address(pointer)
    return DLManagedTensor.from_address(pointer)


def _patched(capsule: Any, dtype: DType, flags: int) -> Any:
    managed = _managed(capsule)
    if isinstance(managed, DLManagedTensorVersioned):
        managed.flags |= flags
    managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits = DL_DTYPES[dtype]
    return capsule


def _make_capsule(address: int, device: tuple[int, int], dtype: DType, shape: tuple[int, ...],
                  strides: tuple[int, ...], owner: Any, versioned: tuple[int, int] | None,
                  flags: int = 0) -> Any:  # fmt: skip
    """A capsule of a DLPack tensor at `address` (element strides) on `device`, keeping `owner` alive until its
    deleter runs: numpy's capsule of a placeholder array of this shape and strides, never read, whose base holds
    `owner`, with the address, the device and (for `versioned`) the version written in."""
    import numpy as np

    np_dtype = np.dtype(to_np_dtype(dtype))
    holder = (ctypes.c_uint8 * np_dtype.itemsize)()
    holder.owner = owner  # type: ignore[attr-defined]  # the placeholder's base keeps it alive
    placeholder = np.lib.stride_tricks.as_strided(np.frombuffer(memoryview(holder), np_dtype), shape,
                                                  tuple(s * np_dtype.itemsize for s in strides))  # fmt: skip
    capsule = _patched(_capsule_of(placeholder, versioned), dtype, flags)
    managed = _managed(capsule)
    managed.dl_tensor.data, managed.dl_tensor.byte_offset = address or None, 0
    managed.dl_tensor.device = DLDevice(*device)
    if isinstance(managed, DLManagedTensorVersioned) and versioned is not None:
        managed.version = DLPackVersion(*versioned)
    return capsule


def _call_deleter(managed: int, deleter: int | None) -> None:
    if deleter:  # DLPack allows none: nothing to free
        _C_DELETER(deleter)(managed)


class _Imported:
    """A consumed capsule's managed tensor: the producer's memory stays valid until this is gone (then its deleter)."""

    def __init__(self, managed: int, deleter: int | None):
        self.managed, self.deleter = managed, deleter

    def __del__(self) -> None:
        _call_deleter(self.managed, self.deleter)


# ---------------------------------------------------------------------------------------------------------------------
# which devices share which memory


def _spec_types(device: str) -> tuple[int, ...]:
    spec = Device.specs().get(device.partition(":")[0])
    return tuple(spec.dlpack_device_types) if spec is not None else ()


def _device_id(device: str, device_type: int) -> int:
    """The DLPack device id of `device`'s memory: 0 for host memory, which every instance addresses, else the
    instance ordinal (`CUDA:1` is 1)."""
    suffix = device.partition(":")[2]
    return int(suffix) if device_type != DLDeviceType.kDLCPU and suffix.isdigit() else 0


def _checked_types(device: str) -> tuple[int, ...]:
    """`device`'s declared DLPack device types, after checking its allocator can share such memory."""
    types = _spec_types(device)
    if types and (problems := dlpack_contract_problems(types, get_device(device).allocator)):
        raise DeviceError(f"{device}: " + "; ".join(problems))
    return types


def _type_name(device_type: int) -> str:
    try:
        return f"{DLDeviceType(device_type).name} ({device_type})"
    except ValueError:
        return f"unknown DLPack device type {device_type}"


def _dtype_name(code: int, bits: int, lanes: int) -> str:
    try:
        name = DLDataTypeCode(code).name.removeprefix("kDL").lower()
    except ValueError:
        return f"unknown DLPack dtype code {code} ({bits} bits)"
    name = name if name.startswith(("float8", "float6", "float4")) or (name, bits) == ("bool", 8) else f"{name}{bits}"
    return name if lanes == 1 else f"{name}x{lanes} (a vector dtype)"


def _dtype_of(dl_dtype: DLDataType) -> DType:
    key = (dl_dtype.code, dl_dtype.bits)
    if dl_dtype.lanes != 1 or key not in LAZY_DTYPES:
        have = ", ".join(_dtype_name(code, bits, 1) for code, bits in DL_DTYPES.values())
        raise DLPackError(f"cannot import a DLPack tensor of {_dtype_name(*key, dl_dtype.lanes)}: lazy has no such "
                          f"dtype (it has {have}); convert it in the producing library first")  # fmt: skip
    return LAZY_DTYPES[key]


# ---------------------------------------------------------------------------------------------------------------------
# export


def _shared_layout(lb: LazyBuffer) -> tuple[Buffer, int, tuple[int, ...]] | None:
    """(the realized memory, element offset, element strides) when `lb` reads its base's memory through one plain
    view: no padding, no symbolic size, no negative stride (PyTorch aborts the process on one)."""
    base = lb.base
    if base.realized is None or len(lb.st.views) != 1:
        return None
    view = lb.st.views[0]
    if view.mask is not None or not all_int((*view.shape, *view.strides, view.offset)):
        return None
    strides = tuple(int(s) for s in view.strides)
    if any(s < 0 for s in strides):
        return None
    return base.realized, int(view.offset), strides


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous array of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _address(buf: Buffer) -> int:
    """Where `buf`'s memory is, a pointer of its device's DLPack device type (a view: its base's plus its offset)."""
    root = buf.base if buf.base is not None else buf
    return get_device(buf.device).allocator._address(root.opaque) + (buf.offset if buf.base is not None else 0)


def _contiguous_buffer(lb: LazyBuffer) -> Buffer:
    """A realized buffer holding exactly `lb`'s elements in order (its own when it already is one, else a copy)."""
    if not (lb.st.contiguous and lb.size == lb.base.size):
        lb = lb.contiguous()
    realize([lb])
    buf = lb.base.realized
    assert buf is not None and buf.size == prod(lb.shape)
    return buf


def _host_copy(lb: LazyBuffer) -> np.ndarray:
    """`lb`'s elements in a new host array of its storage dtype (bfloat16 as uint16 bits, fp8 as uint8)."""
    import numpy as np

    host = np.empty(prod(lb.shape), to_np_dtype(lb.dtype))
    if host.size:
        _contiguous_buffer(lb).copyout(host.data.cast("B"))
    return host


def dlpack_device(lb: Any) -> tuple[int, int]:
    """(DLPack device type, id) of what `__dlpack__` exports: the device's own memory where its plugin declares it,
    else host memory (a copy)."""
    if isinstance(lb, MultiLazyBuffer):
        raise DLPackError(_sharded(lb))
    if types := _checked_types(lb.device):
        return int(types[0]), _device_id(lb.device, types[0])
    return int(DLDeviceType.kDLCPU), 0


def _sharded(lb: MultiLazyBuffer) -> str:
    return (f"a tensor sharded over {', '.join(lb.device)} has no single memory to share through DLPack: gather it "
            f"on one device first (.to('{lb.device[0]}'))")  # fmt: skip


def export_capsule(lb: Any, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:  # fmt: skip
    """`Tensor.__dlpack__`: a capsule of `lb`'s data (see its docstring)."""
    own = dlpack_device(lb)
    if not all_int(lb.shape):
        raise DLPackError(f"a tensor of symbolic shape {lb.shape} cannot be exported: bind its variables' values and "
                          "make it concrete first (e.g. .contiguous() of a bound shrink)")  # fmt: skip
    versioned = _export_version(max_version)
    host = (int(DLDeviceType.kDLCPU), 0)
    wanted = own if dl_device is None else (int(dl_device[0]), int(dl_device[1]))
    if wanted not in (own, host):
        raise DLPackError(f"cannot export a {lb.device} tensor to {_type_name(wanted[0])} device {wanted[1]}: lazy "
                          f"exports it as {_type_name(own[0])} device {own[1]}, or copies it to host memory "
                          "(dl_device=(1, 0))")  # fmt: skip
    if wanted == host and stream is not None:
        raise DLPackError(f"stream must be None for host memory (kDLCPU), not {stream!r}")
    shares = own == wanted and bool(_spec_types(lb.device))
    if copy is False and not shares:
        raise DLPackError(f"exporting this {lb.device} tensor to host memory takes a copy ({lb.device} memory is not "
                          "memory lazy can hand out), and copy=False forbids one: pass copy=None")  # fmt: skip
    shape = tuple(int(s) for s in lb.shape)
    if shares and not copy and prod(shape) > 0:
        layout = _layout_for_sharing(lb)
        if layout is None and copy is False:
            raise DLPackError(f"this tensor is {_NOT_STRIDED} and copy=False forbids laying it out: pass copy=None")
        copied = layout is None
        buf, offset, strides = layout or (_contiguous_buffer(lb), 0, _row_major(shape))
        if wanted == host:
            return _numpy_capsule(_array_over(buf, offset, strides, shape, lb.dtype), lb.dtype, versioned, copied)
        address = _address(buf) + offset * lb.dtype.itemsize
        return _make_capsule(address, own, lb.dtype, shape, strides, buf, versioned, FLAG_IS_COPIED if copied else 0)
    if shares and copy and wanted != host:  # a copy on the device itself
        clone = _contiguous_buffer(lb.clone()) if prod(shape) else None
        address = _address(clone) if clone is not None else 0
        return _make_capsule(address, own, lb.dtype, shape, _row_major(shape), clone, versioned, FLAG_IS_COPIED)
    return _numpy_capsule(_host_copy(lb).reshape(shape), lb.dtype, versioned, True)


def _export_version(max_version: Any) -> tuple[int, int] | None:
    """The version of the versioned capsule to make for a consumer that reads up to `max_version`, or None for the
    legacy capsule (a consumer that names no version, or only 0.x)."""
    if max_version is None:
        return None
    if not (isinstance(max_version, tuple) and len(max_version) == 2 and all(type(v) is int for v in max_version)):
        raise DLPackError(f"max_version must be a (major, minor) tuple of ints, not {max_version!r}")
    if max_version[0] < 1:
        return None
    return DLPACK_VERSION if max_version[0] > 1 else (1, min(DLPACK_VERSION[1], max_version[1]))


# ---------------------------------------------------------------------------------------------------------------------
# numpy without a copy


_NOT_STRIDED = "a view that strides cannot describe (padding, negative steps, several views)"


class _HostView:
    """What a numpy array over lazy's memory is made from: numpy reads the layout and keeps this (and so the
    buffer) as the array's base."""

    def __init__(self, interface: dict[str, Any], buf: Buffer):
        self.__array_interface__, self.buf = interface, buf


def _layout_for_sharing(lb: LazyBuffer) -> tuple[Buffer, int, tuple[int, ...]] | None:
    """`lb`'s memory and layout (see `_shared_layout`), computed into its own memory first if it is unrealized, and
    marked shared; the device synchronized, so the memory holds its values. None: a view strides cannot describe."""
    if (layout := _shared_layout(lb)) is None:
        realize([lb])  # computes its base (a view of it stays a view)
        if (layout := _shared_layout(lb)) is None:
            return None
    layout[0].shared = True
    get_device(lb.device).synchronize()  # the kernels computing it may still be queued
    return layout


def _array_over(buf: Buffer, offset: int, strides: tuple[int, ...], shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """A writable numpy array (of `dtype`'s storage type) over host memory `buf`, keeping `buf` alive."""
    import numpy as np

    itemsize = dtype.itemsize
    interface = {"version": 3, "shape": shape, "typestr": np.dtype(to_np_dtype(dtype)).str,
                 "data": (_address(buf) + offset * itemsize, False),
                 "strides": tuple(s * itemsize for s in strides)}  # fmt: skip
    return np.asarray(_HostView(interface, buf))


def host_array(lb: Any) -> tuple[np.ndarray | None, str]:
    """(a numpy array sharing `lb`'s memory, "") for `numpy(copy=False)`, or (None, why that takes a copy)."""
    import numpy as np

    from lazy.dtype import HOST_FLOAT32

    if isinstance(lb, MultiLazyBuffer):
        return None, _sharded(lb)
    if lb.dtype in HOST_FLOAT32:
        return None, f"numpy has no {lb.dtype.name}: numpy() converts it to float32"
    if not all_int(lb.shape):
        return None, f"the tensor has a symbolic shape {lb.shape}"
    types = _checked_types(lb.device)
    if not types or types[0] != DLDeviceType.kDLCPU:
        return None, f"{lb.device} memory is not host memory"
    shape = tuple(int(s) for s in lb.shape)
    if prod(shape) == 0:
        return np.empty(shape, to_np_dtype(lb.dtype)), ""
    if (layout := _layout_for_sharing(lb)) is None:
        return None, f"the tensor is {_NOT_STRIDED}"
    return _array_over(*layout, shape, lb.dtype), ""


# ---------------------------------------------------------------------------------------------------------------------
# import


def _is_capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule" and type(x).__module__ == "builtins"


def import_dlpack(x: Any, device: str | None = None, copy: bool | None = None) -> LazyBuffer:
    """`Tensor.from_dlpack`: a LazyBuffer of `x`'s data (see its docstring)."""
    target = Device.canonicalize(device) if device is not None else None
    if _is_capsule(x):
        return _consume(x, target, copy)
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack takes an object with __dlpack__ (a numpy array, a PyTorch tensor, ...) or a "
                        f"DLPack capsule, not {type(x).__name__}")  # fmt: skip
    kwargs: dict[str, Any] = {"max_version": DLPACK_VERSION}
    dl_type, dl_id = (int(v) for v in x.__dlpack_device__())
    if dl_type != DLDeviceType.kDLCPU and _importer(dl_type, dl_id) is None:
        # no device here reads that memory: ask the producer for a copy in host memory (array API 2023.12)
        kwargs |= {"dl_device": (int(DLDeviceType.kDLCPU), 0), "copy": True}
    try:
        capsule = x.__dlpack__(**kwargs)
    except TypeError:  # a producer older than the versioned protocol: it takes no arguments
        capsule = x.__dlpack__()
    return _consume(capsule, target, copy)


def _importer(dl_type: int, dl_id: int, prefer: str | None = None) -> str | None:
    """The device instance that uses memory of DLPack device (`dl_type`, `dl_id`) in place: `prefer` when it can,
    else the usable device of highest priority that declares the type; None if none does."""
    if prefer is not None and dl_type in _spec_types(prefer) and _device_id(prefer, dl_type) == dl_id:
        return prefer
    specs = sorted(Device.specs().values(), key=lambda spec: -spec.priority)
    for spec in specs:
        if dl_type in spec.dlpack_device_types and spec.default_ok and Device.probe(spec.name)[0]:
            return spec.name if dl_type == DLDeviceType.kDLCPU or dl_id == 0 else f"{spec.name}:{dl_id}"
    return None


@record(frozen=True)
class _Foreign:
    """A DLPack tensor as found in a capsule: its first element's address, dtype, shape, element strides, device."""

    address: int
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: tuple[int, int]
    read_only: bool

    def extent(self) -> tuple[int, int]:
        """(lowest, highest + 1) element offset the tensor reads, relative to its first element."""
        low = sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
        high = sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
        return low, high + 1


def _open_capsule(capsule: Any) -> tuple[int, bool]:
    """(address of the managed tensor, versioned) of an unconsumed DLPack capsule; DLPackError otherwise."""
    name = _capsule_name(capsule)
    if name in (b"used_dltensor", b"used_dltensor_versioned"):
        raise DLPackError("this DLPack capsule was already imported, and a capsule can be consumed only once: ask the "
                          "producer for a new one (x.__dlpack__()), or pass the array itself")  # fmt: skip
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise DLPackError(f"not a DLPack capsule: its name is {name!r}, not 'dltensor' or 'dltensor_versioned'")
    return _capsule_pointer(capsule, _NAMES[name]), name == b"dltensor_versioned"


def _consume(capsule: Any, target: str | None, copy: bool | None) -> LazyBuffer:
    """Check the capsule's tensor, then take it over (renamed "used_...") and build the LazyBuffer."""
    pointer, versioned = _open_capsule(capsule)
    managed: DLManagedTensor | DLManagedTensorVersioned
    read_only = False
    if versioned:
        managed = DLManagedTensorVersioned.from_address(pointer)
        if managed.version.major != DLPACK_VERSION[0]:
            version = f"{managed.version.major}.{managed.version.minor}"
            _take(capsule, versioned)
            _call_deleter(pointer, managed.deleter)  # DLPack: a consumer refusing the version still calls the deleter
            raise DLPackError(f"the capsule holds a DLPack {version} tensor; lazy reads DLPack 1.x")
        read_only = bool(managed.flags & FLAG_READ_ONLY)
    else:
        managed = DLManagedTensor.from_address(pointer)
    foreign = _read_tensor(managed.dl_tensor, read_only)
    target, in_place = _plan(foreign, target, copy)
    _take(capsule, versioned)
    owner = _Imported(pointer, managed.deleter)
    return _build(foreign, target, in_place, owner)


def _take(capsule: Any, versioned: bool) -> None:
    _capsule_set_name(capsule, _NAMES[b"used_dltensor_versioned" if versioned else b"used_dltensor"])


def _read_tensor(tensor: DLTensor, read_only: bool) -> _Foreign:
    dtype = _dtype_of(tensor.dtype)
    if tensor.ndim < 0:
        raise DLPackError(f"the DLPack tensor has {tensor.ndim} dimensions")
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    if any(n < 0 for n in shape):
        raise DLPackError(f"the DLPack tensor has a negative size in its shape {shape}")
    strides = tuple(int(tensor.strides[i]) for i in range(tensor.ndim)) if tensor.strides else None
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    address = (tensor.data or 0) + tensor.byte_offset
    return _Foreign(address, dtype, shape, strides or _row_major(shape), device, read_only)


def _plan(foreign: _Foreign, target: str | None, copy: bool | None) -> tuple[str, bool]:
    """(the device the result goes to, whether it uses the producer's memory in place); raises before the capsule is
    taken, so a refused capsule stays the producer's to free."""
    dl_type, dl_id = foreign.device
    host = dl_type == DLDeviceType.kDLCPU
    if target is None:  # the producer's device, as the array API asks: a host device for host memory
        default = Device.DEFAULT
        target = _importer(dl_type, dl_id, default) or (default if host else None)
        if target is None:
            raise DLPackError(f"no usable lazy device uses {_type_name(dl_type)} memory (devices declare the types "
                              "they import in DeviceSpec.dlpack_device_types); copy the tensor to host memory in the "
                              "producing library first")  # fmt: skip
    usable = dl_type in _checked_types(target) and _device_id(target, dl_type) == dl_id
    why = ("the producer marked it read-only, and lazy tensors can be written (assign)" if foreign.read_only else
           f"its address is not aligned to its {foreign.dtype.itemsize}-byte elements"
           if foreign.address % foreign.dtype.itemsize else
           "" if usable else f"{target} does not use {_type_name(dl_type)} device {dl_id} memory in place")  # fmt: skip
    if not host and not usable and _importer(dl_type, dl_id) is None:
        raise DLPackError(f"no usable lazy device reads {_type_name(dl_type)} memory, so it cannot be copied to "
                          f"{target} either; copy the tensor to host memory in the producing library "
                          "first")  # fmt: skip
    if copy is False and why:
        raise DLPackError(f"importing this DLPack tensor into {target} takes a copy ({why}), and copy=False forbids "
                          "one: pass copy=None")  # fmt: skip
    return target, not why and not copy


def _build(foreign: _Foreign, target: str, in_place: bool, owner: _Imported) -> LazyBuffer:
    dtype, shape = foreign.dtype, foreign.shape
    if prod(shape) == 0:
        return LazyBuffer.const_like(0, dtype, target, shape)
    low, high = foreign.extent()
    start = foreign.address + low * dtype.itemsize
    layout = ShapeTracker((View.create(shape, foreign.strides, -low),))
    if in_place:
        return _viewed(Buffer.wrap(target, high - low, dtype, start, owner), layout)
    if foreign.device[0] == DLDeviceType.kDLCPU:
        return _copied_from_host(foreign, target, layout, start, high - low)
    # another kind of memory: used in place where it lives, then copied to `target` now (the owner goes after)
    source = _importer(*foreign.device)
    assert source is not None, "_plan refuses memory no device uses"
    lb = _viewed(Buffer.wrap(source, high - low, dtype, start, owner), layout)
    lb = lb.copy_to_device(target) if source != target else lb.clone()
    realize([lb])
    return lb


def _viewed(buf: Buffer, layout: ShapeTracker) -> LazyBuffer:
    """A realized LazyBuffer of `buf` read through `layout` (its elements' offsets in `buf`)."""
    if layout.contiguous and buf.size == prod(layout.shape):
        return LazyBuffer.from_buffer(buf, layout.shape)
    return LazyBuffer.from_buffer(buf, (buf.size,))._view(layout)


def _copied_from_host(foreign: _Foreign, target: str, layout: ShapeTracker, start: int, extent: int) -> LazyBuffer:
    """One copy of host memory into a new buffer of `target`: the elements the strides reach, kept as a view, unless
    they are more than twice the tensor's elements (a wide step): then only its elements, gathered on the host."""
    import numpy as np

    dtype, numel = foreign.dtype, prod(foreign.shape)
    raw = memoryview((ctypes.c_ubyte * (extent * dtype.itemsize)).from_address(start)).cast("B")
    if extent > 2 * numel:
        storage = np.ndarray(foreign.shape, to_np_dtype(dtype), raw, layout.views[0].offset * dtype.itemsize,
                             tuple(s * dtype.itemsize for s in foreign.strides))  # fmt: skip
        gathered = np.ascontiguousarray(storage)
        layout, raw, extent = ShapeTracker.from_shape(foreign.shape), gathered.data.cast("B"), numel
    buf = Buffer(target, extent, dtype).allocate()
    buf.copyin(raw)  # done reading when it returns: the owner may go after this
    return _viewed(buf, layout)

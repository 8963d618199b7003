"""Device memory for TMPL: kernels run on this machine, so a buffer is a ctypes byte array in host memory (the
allocator's "opaque", the handle core passes back to it and to kernels)."""

from __future__ import annotations

import ctypes
from typing import Any

from lazy.device import Allocator, BufferSpec

HostArray = ctypes.Array[ctypes.c_ubyte]


class TemplateAllocator(Allocator):
    """Required: `_alloc`, `_copyin`, `_copyout` (plus `_free` where memory must be given back by hand; a ctypes
    array is freed when the last reference to it goes). Optional features, each declared in `features` AND implemented;
    the registry refuses a device whose declaration and methods disagree. Drop one and core takes the slower path:

    - "as_buffer" (`_as_buffer`): reading a buffer on the host without a copy (else core copies out);
    - "offset" (`_offset`): a view of a buffer as a buffer of its own (else views are copied through their base, and
      a kernel cannot take a view that does not start at byte 0);
    - "transfer" (`_transfer`): a copy between two TMPL buffers without going through the host;
    - "address" (`_address`): where a buffer is, so `Tensor.__dlpack__` shares it with other libraries (else it copies
      to the host). The pointer is of the DLPack device type the device declares (`DeviceSpec.dlpack_device_types`;
      here host memory, kDLCPU);
    - "wrap" (`_wrap`): another library's memory as a buffer, so `Tensor.from_dlpack` uses it in place (else it
      copies in). Such memory is never freed here: core keeps its owner alive and lets it go when the buffer goes.
    """

    features = frozenset({"as_buffer", "offset", "transfer", "address", "wrap"})

    def _alloc(self, size: int, spec: BufferSpec) -> HostArray:
        return (ctypes.c_ubyte * size)()  # zero-filled; MemoryError when the host has no room, which core handles

    def _copyin(self, dest: HostArray, src: memoryview) -> None:
        memoryview(dest).cast("B")[:] = src

    def _copyout(self, dest: memoryview, src: HostArray) -> None:
        dest[:] = memoryview(src).cast("B")

    def _as_buffer(self, src: HostArray) -> memoryview:
        return memoryview(src).cast("B")

    def _address(self, opaque: HostArray) -> int:
        return ctypes.addressof(opaque)

    def _wrap(self, address: int, size: int) -> HostArray:
        return (ctypes.c_ubyte * size).from_address(address)  # does not own the memory: freeing it stays with its owner

    def _offset(self, buf: HostArray, size: int, offset: int) -> HostArray:
        # an array over the same memory; ctypes keeps `buf` alive as long as the view lives
        return (ctypes.c_ubyte * size).from_buffer(buf, offset)

    def _transfer(self, dest: HostArray, src: HostArray, size: int, src_dev: Any, dest_dev: Any) -> None:
        ctypes.memmove(dest, src, size)

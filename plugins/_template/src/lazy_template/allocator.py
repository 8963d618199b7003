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
    - "transfer" (`_transfer`): a copy between two TMPL buffers without going through the host.
    """

    features = frozenset({"as_buffer", "offset", "transfer"})

    def _alloc(self, size: int, spec: BufferSpec) -> HostArray:
        return (ctypes.c_ubyte * size)()  # zero-filled; MemoryError when the host has no room, which core handles

    def _copyin(self, dest: HostArray, src: memoryview) -> None:
        memoryview(dest).cast("B")[:] = src

    def _copyout(self, dest: memoryview, src: HostArray) -> None:
        dest[:] = memoryview(src).cast("B")

    def _as_buffer(self, src: HostArray) -> memoryview:
        return memoryview(src).cast("B")

    def _offset(self, buf: HostArray, size: int, offset: int) -> HostArray:
        # an array over the same memory; ctypes keeps `buf` alive as long as the view lives
        return (ctypes.c_ubyte * size).from_buffer(buf, offset)

    def _transfer(self, dest: HostArray, src: HostArray, size: int, src_dev: Any, dest_dev: Any) -> None:
        ctypes.memmove(dest, src, size)

"""Loading and launching TMPL kernels: a compiled shared library opened with ctypes, called as core's `Program`."""

from __future__ import annotations

import ctypes
import os
import tempfile
import time
from typing import Any

from lazy.device import ProgramSpec


class TemplateProgram:
    """One kernel `void name(buffers..., long long vars...)`. Called by core's queue as
    `program(*bufs, vals=..., wait=...)`: `bufs` are the allocator's opaques (ctypes arrays, passed as pointers),
    `vals` the values of the kernel's symbolic variables. With `wait=True` it returns the run time in seconds."""

    def __init__(self, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.name = name
        fd, path = tempfile.mkstemp(prefix=f"lazy_tmpl_{name}_", suffix=".so")
        try:  # dlopen needs a file; once loaded, the file is not needed any more
            with os.fdopen(fd, "wb") as f:
                f.write(lib)
            self.lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)
        self.function = getattr(self.lib, name)
        self.function.restype = None

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        # global_size/local_size are None here: the kernel loops over its range itself (Capabilities.has_threads=False)
        args = [*bufs, *(ctypes.c_int64(v) for v in vals)]  # int parameters are `long long` (int_param_dtype)
        start = time.perf_counter()
        self.function(*args)  # ctypes passes an array as a pointer to its first byte
        return time.perf_counter() - start if wait else None


def load_program(name: str, lib: bytes, spec: ProgramSpec | None = None) -> TemplateProgram:
    """`Compiled.runtime`: a compiled kernel as a callable `Program`."""
    return TemplateProgram(name, lib, spec)

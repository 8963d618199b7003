"""`MetalCompiler`: MSL source -> an MTLLibrary through the Metal framework (`newLibraryWithSource:options:error:`),
with fast math off, and a rejected source reported as core's `CompileError` naming the kernel and the source lines
the compiler points at. The framework is imported on the first compile, so the compiler object can be made (for
`codegen_targets`) without it."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from lazy.device import CompileError, Compiler, DeviceError

KERNEL_NAME = re.compile(r"^kernel void (\w+)\(", re.MULTILINE)
# the framework's messages name the source "program_source": `program_source:12:5: error: ...`
LOG_LINE = re.compile(r"program_source:(\d+):(\d+): (error|warning): (.*)")
MTL_MATH_MODE_SAFE = 0  # MTLMathModeSafe: IEEE semantics (NaN and inf kept, no reassociation)
KEPT_LIBRARIES = 256  # built libraries kept for the runtime of this process (`MetalCompiler.library`)


def kernel_name(src: str) -> str:
    """The kernel function's name in an MSL source written by `MetalRenderer` ("?" when there is none)."""
    match = KERNEL_NAME.search(src)
    return match.group(1) if match else "?"


def compile_error_message(src: str, log: str) -> str:
    """The compiler's log headed by the kernel's name and each error's source line, e.g.
    `kernel E_4: line 7: float4 val0 = data1[gidx0];: error: ...`, then the whole log."""
    lines = src.splitlines()
    errors = []
    for match in LOG_LINE.finditer(log):
        number, kind, what = int(match.group(1)), match.group(3), match.group(4)
        if kind == "error":
            text = lines[number - 1].strip() if 0 < number <= len(lines) else "(outside the source)"
            errors.append(f"line {number}: {text}\n    {what}")
    head = f"kernel {kernel_name(src)}: " + ("\n  ".join(errors) if errors else "rejected by the Metal compiler")
    return f"{head}\n{log.strip()}"


class MetalCompiler(Compiler):
    """Compiles MSL with one Metal device's framework compiler. Metal loads programs from source (its own shader
    cache makes a repeated build cheap), so the "binary" core caches is the source itself, checked to compile; the
    built library is kept for `MetalDevice.load_program` in this process, so a kernel is built once. No on-disk cache
    (`cachekey` None): a source that compiled on one Mac may not on another's macOS."""

    def __init__(self, mtl_device: Any = None, device_name: str = "METAL"):
        super().__init__(cachekey=None)
        self._mtl_device, self.device_name = mtl_device, device_name
        self.libraries: OrderedDict[bytes, Any] = OrderedDict()
        self.lock = threading.Lock()  # kernels compile on a thread pool (`precompile`)

    @property
    def mtl_device(self) -> Any:
        if self._mtl_device is None:  # the default device: `codegen_targets` makes the compiler without one
            try:
                import Metal
            except ImportError:
                raise DeviceError(f"{self.device_name}: pyobjc's Metal framework is not installed: pip install "
                                  "pyobjc-framework-Metal") from None  # fmt: skip
            self._mtl_device = Metal.MTLCreateSystemDefaultDevice()
            if self._mtl_device is None:
                raise DeviceError(f"{self.device_name}: no Metal device found to compile with")
        return self._mtl_device

    def options(self) -> Any:
        import Metal

        options = Metal.MTLCompileOptions.new()
        if options.respondsToSelector_("setMathMode:"):  # macOS 15; fastMathEnabled is deprecated there
            options.setMathMode_(MTL_MATH_MODE_SAFE)
        else:
            options.setFastMathEnabled_(False)  # fast math drops NaN checks (`a != a`) and rounds division loosely
        return options

    def build(self, src: str) -> Any:
        """The MTLLibrary of `src`, or `CompileError`. Warnings are not errors (the log of a library that built)."""
        library, error = self.mtl_device.newLibraryWithSource_options_error_(src, self.options(), None)
        if library is None:
            log = str(error.localizedDescription()) if error is not None else "no message"
            raise CompileError(self.device_name, src, compile_error_message(src, log))
        return library

    def compile(self, src: str) -> bytes:
        library = self.build(src)
        lib = src.encode()
        with self.lock:
            self.libraries[lib] = library
            self.libraries.move_to_end(lib)
            while len(self.libraries) > KEPT_LIBRARIES:
                self.libraries.popitem(last=False)
        return lib

    def library(self, lib: bytes) -> Any:
        """The built library of `lib` (what `compile` returned), built again if it is no longer kept."""
        with self.lock:
            library = self.libraries.get(lib)
        return library if library is not None else self.build(lib.decode())

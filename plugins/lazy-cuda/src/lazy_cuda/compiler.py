"""`NVRTCCompiler`: CUDA C++ -> cubin for one `sm_XY` with NVRTC (the `nvidia-cuda-nvrtc` wheel, through
cuda-bindings), cached by core's compile cache under NVRTC's version, the architecture and the options. Needs no GPU
and no driver; NVRTC is loaded on the first compile, so building the compiler (`codegen_targets`) costs nothing."""

from __future__ import annotations

import functools
import re
from typing import Any

from lazy.device import CompileError, Compiler, DeviceError

NVRTC_FIX = "pip install cuda-bindings nvidia-cuda-nvrtc (both come with pip install lazy-cuda)"
# IEEE float32 as the reference computes it: no contraction of a*b+c into an fma (MULACC asks for one explicitly),
# correctly rounded division and square root, denormals kept
OPTIONS = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false")
# Warnings about code the kernel does not need (a value declared or set and never read). Every other warning (a
# conversion that truncates or changes sign, a shift past the width, a division by a zero constant, ptxas's) says the
# kernel may not compute what was meant, and fails the compile like an error.
BENIGN_WARNINGS = frozenset({"177", "550"})  # declared but never referenced; set but never used

_DIAGNOSTIC = re.compile(r"^\S*?\((?P<line>\d+)\): (?P<kind>error|warning)(?: #(?P<number>\d+)(?:-D)?)?: (?P<text>.*)$")
_KERNEL_NAME = re.compile(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(")


@functools.cache
def load_nvrtc() -> Any:
    """cuda.bindings.nvrtc with its library loaded (checked by asking its version), or a DeviceError naming the fix."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise DeviceError(f"CUDA: cuda-bindings is not installed ({e}): {NVRTC_FIX}") from None
    try:
        nvrtc.nvrtcVersion()
    except RuntimeError as e:  # cuda.pathfinder's DynamicLibNotFoundError: no libnvrtc on the search path
        raise DeviceError(f"CUDA: NVRTC is not installed ({e}): {NVRTC_FIX}") from None
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    nvrtc = load_nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


def supported_archs() -> list[int]:
    """The compute capabilities this NVRTC compiles for, as numbers (80 for sm_80)."""
    nvrtc = load_nvrtc()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return [int(a) for a in archs]


def _check(nvrtc: Any, err: Any, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise DeviceError(f"CUDA: {what} failed: {text.decode(errors='replace') if text else err}")


def kernel_name(src: str) -> str:
    found = _KERNEL_NAME.search(src)
    return found.group(1) if found else "kernel"


def diagnostics(log: str, src: str, fatal_warnings: bool) -> list[str]:
    """The log's errors (and warnings that matter, when `fatal_warnings`), each with the source line it points at."""
    lines = src.splitlines()
    found = []
    for entry in log.splitlines():
        match = _DIAGNOSTIC.match(entry.strip())
        if match is None:
            continue
        kind, number = match["kind"], match["number"]
        if kind == "warning" and (not fatal_warnings or number in BENIGN_WARNINGS):
            continue
        line = int(match["line"])
        text = lines[line - 1].strip() if 0 < line <= len(lines) else "?"
        found.append(f"line {line}: {kind}{f' #{number}' if number else ''}: {match['text']}\n    {text}")
    if fatal_warnings:  # ptxas reports without a source line
        found += [e.strip() for e in log.splitlines() if e.strip().startswith("ptxas warning")]
    return found


class NVRTCCompiler(Compiler):
    """CUDA C++ -> cubin for `arch` ("sm_80", "sm_90", ...). A kernel NVRTC rejects, or one whose compile warns about
    something other than unused values (`BENIGN_WARNINGS`), raises `CompileError` naming the kernel and the lines."""

    def __init__(self, arch: str, options: tuple[str, ...] = OPTIONS):
        # no Compiler.__init__: the cache key holds NVRTC's version, read when first asked for (NVRTC may be absent
        # where only code generation is wanted, e.g. LAZY_EMULATE=CUDA)
        self.arch, self.options = arch, (f"--gpu-architecture={arch}", *options)

    @property
    def cachekey(self) -> str | None:
        major, minor = nvrtc_version()
        return f"nvrtc {major}.{minor} {' '.join(self.options)}"

    @cachekey.setter
    def cachekey(self, value: str | None) -> None:
        raise AttributeError("NVRTCCompiler's cache key follows its NVRTC, architecture and options")

    def compile(self, src: str) -> bytes:
        nvrtc = load_nvrtc()
        name = kernel_name(src)
        if (digits := self.arch.removeprefix("sm_")).isdigit() and int(digits) not in (archs := supported_archs()):
            major, minor = nvrtc_version()
            known = ", ".join(f"sm_{a}" for a in archs)
            raise DeviceError(f"CUDA: NVRTC {major}.{minor} cannot compile for {self.arch} (it supports {known}); "
                              "install an NVRTC that supports this GPU")  # fmt: skip
        err, prog = nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], [])
        _check(nvrtc, err, "nvrtcCreateProgram")
        try:
            options = [o.encode() for o in self.options]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
            log = self._log(nvrtc, prog)
            failed = err != nvrtc.nvrtcResult.NVRTC_SUCCESS
            problems = diagnostics(log, src, fatal_warnings=True)
            if failed or problems:
                problems = problems or [log.strip() or str(err)]
                verdict = "rejected" if failed else "warned about"
                raise CompileError("CUDA", src, f"NVRTC ({self.arch}) {verdict} kernel {name}:\n" + "\n".join(problems))
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(nvrtc, err, "nvrtcGetCUBINSize")
            cubin = bytearray(size)
            (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
            _check(nvrtc, err, "nvrtcGetCUBIN")
            return bytes(cubin)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    @staticmethod
    def _log(nvrtc: Any, prog: Any) -> str:
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
            return ""
        log = bytearray(size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        return log.rstrip(b"\0").decode(errors="replace")

"""lazy-cuda: the `CUDA` device (CUDA C++ compiled by NVRTC, run on NVIDIA's driver API through cuda-bindings). This
module only registers it and answers the probe: it imports no cuda module; `lazy_cuda.device` does the work when a
device is opened, and `codegen_targets` renders and compiles for sm_80 and sm_90 without a GPU."""

from __future__ import annotations

import importlib.util
import sys

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, DLDeviceType, hookimpl

INSTALL_FIX = "pip install lazy-cuda (it brings cuda-bindings and nvidia-cuda-nvrtc)"
NO_DRIVER_FIX = (
    "install the NVIDIA driver (R580 or newer for CUDA 13); without a GPU, LAZY_EMULATE=CUDA and "
    "`python -m lazy.conformance --device CUDA --compile-only` still check the code generation"
)
TARGETS = ("sm_80", "sm_90")  # Ampere and Hopper: what code generation is checked for without a GPU
LIBCUDA = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
CUDA_ERROR_NO_DEVICE = 100


def required_driver(nvrtc_major: int) -> int:
    """The driver's CUDA version (cuDriverGetVersion's 1000*major + 10*minor) that runs cubins of NVRTC `nvrtc_major`:
    a driver runs cubins of its own major CUDA release and older ones."""
    return nvrtc_major * 1000


def _version(dist: str) -> str | None:
    # the probe runs when the default device is chosen: read without importing importlib.metadata (25-55 ms)
    from lazy.plugins import distribution_version

    return distribution_version(dist)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def _driver_version(libcuda: object) -> int:
    import ctypes

    version = ctypes.c_int(0)
    libcuda.cuDriverGetVersion(ctypes.byref(version))  # type: ignore[attr-defined]  # needs no cuInit
    return version.value


def probe_cuda() -> tuple[bool, str]:
    """Which part is missing, checked in order: cuda-bindings, NVRTC, the driver library, a driver new enough for
    NVRTC's cubins, a GPU. Loads libcuda and calls cuInit (which creates no context) but imports no cuda module."""
    import ctypes
    import ctypes.util

    if not _has_module("cuda.bindings"):
        return False, f"cuda-bindings is not installed: {INSTALL_FIX}"
    nvrtc = _version("nvidia-cuda-nvrtc")
    if nvrtc is None and ctypes.util.find_library("nvrtc") is None:
        return False, f"NVRTC is not installed: pip install nvidia-cuda-nvrtc (or {INSTALL_FIX})"
    try:
        libcuda = ctypes.CDLL(LIBCUDA)
    except OSError as e:
        return False, f"no NVIDIA driver ({e}): {NO_DRIVER_FIX}"
    have = _driver_version(libcuda)
    nvrtc_major = int((nvrtc or _version("cuda-bindings") or "13").split(".")[0])
    if have < required_driver(nvrtc_major):
        return False, (f"the NVIDIA driver supports CUDA {have // 1000}.{have % 1000 // 10}, older than the CUDA "
                       f"{nvrtc_major}.0 that the cubins NVRTC {nvrtc or nvrtc_major} compiles need: upgrade the "
                       "driver, or install the cuda-bindings and nvidia-cuda-nvrtc release matching it")  # fmt: skip
    err = libcuda.cuInit(0)
    count = ctypes.c_int(0)
    if err == 0:
        err = libcuda.cuDeviceGetCount(ctypes.byref(count))
    if err == CUDA_ERROR_NO_DEVICE or (err == 0 and count.value == 0):
        return False, "no CUDA device: the NVIDIA driver finds no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
    if err != 0:
        return False, f"the NVIDIA driver failed to initialize (cuInit error {err}): check nvidia-smi"
    return True, f"{count.value} CUDA device(s), driver for CUDA {have // 1000}.{have % 1000 // 10}"


def cuda_versions() -> dict[str, str]:
    out = {dist: v for dist in ("cuda-bindings", "nvidia-cuda-nvrtc") if (v := _version(dist)) is not None}
    try:
        import ctypes

        have = _driver_version(ctypes.CDLL(LIBCUDA))
        out["NVIDIA driver (CUDA)"] = f"{have // 1000}.{have % 1000 // 10}"
    except OSError:
        pass
    return out


def cuda_targets() -> list[CodegenTarget]:
    """The renderer and NVRTC compiler of each target in `TARGETS` (NVRTC is loaded only when something compiles)."""
    from lazy_cuda.compiler import NVRTCCompiler
    from lazy_cuda.renderer import CUDARenderer

    return [CodegenTarget(arch, CUDARenderer(arch), NVRTCCompiler(arch)) for arch in TARGETS]


def open_cuda(name: str) -> Compiled:
    from lazy_cuda.device import open_cuda as open_device

    return open_device(name)


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    # priority 120: above CPU (100), so a usable GPU is the default device
    return [
        DeviceSpec("CUDA", PLUGIN_API_VERSION, 120, probe_cuda, open_cuda,
                   "CUDA C++ kernels compiled by NVRTC, run on an NVIDIA GPU through the driver API (cuda-bindings)",
                   library_versions=cuda_versions, codegen_targets=cuda_targets,
                   dlpack_device_types=(DLDeviceType.kDLCUDA,)),
    ]  # fmt: skip

"""lazy-cpu: the `CPU` (C via clang or gcc) and `LLVM` (llvmlite) devices. This module only registers them: it
imports no compiler binding and compiles nothing; `lazy_cpu.device` does the work when a device is opened."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, DLDeviceType, hookimpl

C_COMPILERS = ("clang", "gcc", "cc")  # in order of preference (kept equal to lazy_cpu.device.C_COMPILERS)


def probe_cpu() -> tuple[bool, str]:
    """Usable when a C compiler is on PATH."""
    for cc in C_COMPILERS:
        if (path := shutil.which(cc)) is not None:
            return True, f"C compiler {path}"
    return False, f"no C compiler on PATH (looked for {', '.join(C_COMPILERS)}): install clang (preferred) or gcc"


def probe_llvm() -> tuple[bool, str]:
    """Usable when llvmlite is installed (found, not imported)."""
    if importlib.util.find_spec("llvmlite") is None:
        return False, "llvmlite is not installed: pip install 'llvmlite>=0.42'"
    return True, "llvmlite"


def cpu_versions() -> dict[str, str]:
    """The C compiler the CPU device would use, with its version line (for conformance reports)."""
    path = next((p for cc in C_COMPILERS if (p := shutil.which(cc)) is not None), None)
    if path is None:
        return {}
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    return {path: (out.splitlines() or ["unknown"])[0]}


def llvm_versions() -> dict[str, str]:
    import importlib.metadata  # here: importing it costs 25-55 ms, and only reports ask for versions

    try:
        return {"llvmlite": importlib.metadata.version("llvmlite")}
    except importlib.metadata.PackageNotFoundError:
        return {}


def open_cpu(name: str) -> Compiled:
    from lazy_cpu.device import open_cpu as open_device

    return open_device(name)


def open_llvm(name: str) -> Compiled:
    from lazy_cpu.device import open_llvm as open_device

    return open_device(name)


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    # both run kernels on host memory through plain pointers: DLPack host tensors are shared, never copied
    host = (DLDeviceType.kDLCPU,)
    return [
        DeviceSpec("CPU", PLUGIN_API_VERSION, 100, probe_cpu, open_cpu,
                   "C kernels compiled by the system C compiler (clang or gcc), run on all cores",
                   library_versions=cpu_versions, dlpack_device_types=host),
        DeviceSpec("LLVM", PLUGIN_API_VERSION, 90, probe_llvm, open_llvm,
                   "LLVM IR kernels compiled in process by llvmlite, run on all cores", library_versions=llvm_versions,
                   dlpack_device_types=host),
    ]  # fmt: skip

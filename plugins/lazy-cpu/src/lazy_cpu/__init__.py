"""lazy-cpu: the `CPU` (C via clang or gcc) and `LLVM` (llvmlite) devices. This module only registers them: it
imports no compiler binding and compiles nothing; `lazy_cpu.device` does the work when a device is opened."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

from lazy.device import Compiled
from lazy.helpers import CC
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, DLDeviceType, hookimpl

# in order of preference. gcc first: on a machine with both (gcc 12, clang 14), the cold CNN train step compiled its
# kernels in 3.8 s of CPU with gcc against 6.5 s with clang (1.7x: clang starts two dynamically linked processes per
# run, and its loop analyses take 2x longer on the tiled kernels), its first step 2.3-2.4 s against 3.1-3.4 s; the
# kernels then ran about as fast (docs/benchmarks.md, sixteenth session)
C_COMPILERS = ("gcc", "clang", "cc")


def find_c_compiler() -> tuple[str | None, str]:
    """The C compiler the CPU device uses, as a path (None: there is none), and what was looked for: `LAZY_CC` (a name
    on PATH or a path) when set, else the first of `C_COMPILERS` on PATH."""
    if wanted := str(CC.value).strip():
        return shutil.which(wanted), (
            f"LAZY_CC={wanted!r} is not an executable file or a command on PATH: set it to gcc, clang or a C "
            f"compiler's path, or unset it to take the first of {', '.join(C_COMPILERS)} on PATH"
        )
    path = next((p for cc in C_COMPILERS if (p := shutil.which(cc)) is not None), None)
    return path, f"no C compiler on PATH (looked for {', '.join(C_COMPILERS)}): install gcc (preferred) or clang"


def probe_cpu() -> tuple[bool, str]:
    """Usable when the C compiler (`find_c_compiler`) is there."""
    path, missing = find_c_compiler()
    return (True, f"C compiler {path}") if path is not None else (False, missing)


def probe_llvm() -> tuple[bool, str]:
    """Usable when llvmlite is installed (found, not imported)."""
    if importlib.util.find_spec("llvmlite") is None:
        return False, "llvmlite is not installed: pip install 'llvmlite>=0.42'"
    return True, "llvmlite"


def cpu_versions() -> dict[str, str]:
    """The C compiler the CPU device would use, with its version line (for conformance reports)."""
    path, _ = find_c_compiler()
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

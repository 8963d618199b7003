"""lazy-opencl: the `CL` device (OpenCL C through pyopencl). This module only registers it: it never imports
pyopencl nor creates an OpenCL context (the probe's compile check runs in a subprocess); `lazy_opencl.device` does the
work when the device is opened."""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import platform
import subprocess
import sys

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl

NO_PLATFORM_FIX = "pip install pocl-binary-distribution (a CPU OpenCL platform), or install your GPU vendor's driver"


def find_icds() -> list[str]:
    """OpenCL drivers this process could load: PoCL from pip, or ICD files (OCL_ICD_VENDORS, /etc/OpenCL/vendors)."""
    found: list[str] = []
    if importlib.util.find_spec("pocl_binary_distribution") is not None:
        found.append("pocl-binary-distribution")
    vendors = os.environ.get("OCL_ICD_VENDORS") or "/etc/OpenCL/vendors"
    if os.path.isfile(vendors):
        found.append(vendors)
    elif os.path.isdir(vendors):
        found += sorted(glob.glob(os.path.join(vendors, "*.icd")))
    return found


def probe_cl() -> tuple[bool, str]:
    """Usable when pyopencl is installed, an OpenCL driver is present (found on disk) and the first device compiles a
    trivial kernel (`compile_check`: a subprocess, once per machine and installation)."""
    if importlib.util.find_spec("pyopencl") is None:
        return False, "pyopencl is not installed: pip install 'lazy-opencl[pocl]' (pyopencl and PoCL)"
    icds = find_icds()
    if not icds:
        return False, f"no OpenCL platform found: {NO_PLATFORM_FIX}"
    if (why := cannot_compile(0)) is not None:
        return False, why
    return True, f"pyopencl, OpenCL driver {icds[0]}"


# Whether the devices can compile at all. A driver may load and list its devices and still fail every build: PoCL
# from pip (LLVM 14) names a processor newer than its LLVM 'generic', which its own compiler then refuses ("unknown
# target CPU 'generic'", on AMD Zen 5). The check builds a one-line kernel on every device in a subprocess, so that
# the probe loads no driver into this process (and a driver that crashes takes only the subprocess with it).
CHECK_SCRIPT = """
import json
from lazy.device import DeviceError
try:
    from lazy_opencl.device import all_devices, build_failure
    found = [[d.name.strip(), build_failure(d)] for d in all_devices()]
except DeviceError:
    found = []
print(json.dumps(found))
"""
CHECK_TIMEOUT = 120  # seconds: a first build on a slow machine takes a few; a hung driver must not hang the probe


def cannot_compile(ordinal: int) -> str | None:
    """Why OpenCL device `ordinal` (`CL`, `CL:1`, ... order) cannot compile a kernel, or None when it can or when
    that is not known (the check did not run to its end: opening the device then tells)."""
    found = compile_check()
    if found is None or ordinal >= len(found):
        return None
    name, log = found[ordinal]
    label = f"CL:{ordinal} ({name})" if ordinal else f"CL ({name})"
    return None if log is None else unusable_reason(label, log, processor_name())


def unusable_reason(device: str, log: str, processor: str) -> str:
    """The message for a device whose build of a trivial kernel failed with `log`."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    first = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "no build log")
    if "unknown target CPU" in log:
        return (f"{device} cannot compile kernels: its OpenCL compiler does not know this processor, {processor} "
                f"({first!r}; PoCL from pip is built with an LLVM older than the processor). Use an OpenCL platform "
                "whose compiler knows it (a PoCL built with a newer LLVM, or the vendor's driver), or the CPU or LLVM "
                "device, which compile for this processor")  # fmt: skip
    return f"{device} cannot compile a one-line kernel: {first}"


@functools.cache
def compile_check() -> list[tuple[str, str | None]] | None:
    """(device name, None or its build log) for every OpenCL device, in `CL`, `CL:1`, ... order; None when the check
    could not run to its end (timed out, crashed). Cached on disk for this installation, processor and OpenCL
    environment, so only the first probe on a machine pays for the subprocess (~0.1-1 s)."""
    from lazy.diskcache import load_cached, sha256, store_cached

    key = sha256(json.dumps(_check_key()).encode())
    if (cached := load_cached("probe", key)) is not None:
        try:
            return [(str(name), None if log is None else str(log)) for name, log in json.loads(cached)]
        except (ValueError, TypeError):
            pass  # (not what this version writes: checked again and replaced)
    try:
        proc = subprocess.run([sys.executable, "-c", CHECK_SCRIPT], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT)  # fmt: skip
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = None
    if not isinstance(found, list):
        return None
    store_cached("probe", key, json.dumps(found).encode())
    return [(str(name), None if log is None else str(log)) for name, log in found]


def _check_key() -> list[object]:
    """What the check's answer depends on: the Python, pyopencl's and the drivers' installed files, the processor and
    the environment variables OpenCL drivers read."""
    files = [sys.executable, *find_icds()]
    for package in ("pyopencl", "pocl_binary_distribution"):
        if (spec := importlib.util.find_spec(package)) is not None and spec.origin:
            files.append(spec.origin)
    stamps = []
    for path in files:
        try:
            stat = os.stat(path)
            stamps.append([path, stat.st_size, stat.st_mtime_ns])
        except OSError:
            stamps.append([path, None, None])
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("POCL_", "OCL_", "OPENCL_")))
    return ["lazy-opencl compile check 1", stamps, processor_name(), _processor_id(), env]


def processor_name() -> str:
    """The processor as the OS names it, with its family and model where it says (Linux on x86): a family newer than
    a compiler is what that compiler fails to know."""
    fields = _processor_fields()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def _processor_id() -> str:
    """The processor's identity for the check's cache key: vendor, family, model, stepping and flags (Linux)."""
    keys = ("vendor_id", "cpu family", "model", "stepping", "flags", "CPU implementer", "CPU part", "CPU variant")
    return "\n".join(f"{k}: {v}" for k, v in _processor_fields().items() if k in keys)


def _processor_fields() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    for line in _cpuinfo().split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cl_versions() -> dict[str, str]:
    import importlib.metadata  # here: importing it costs 25-55 ms, and only reports ask for versions

    out = {}
    for dist in ("pyopencl", "pocl-binary-distribution"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def open_cl(name: str) -> Compiled:
    from lazy_opencl.device import open_cl as open_device

    return open_device(name)


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    # priority 80: below CPU (100) and LLVM (90). On a machine with only PoCL, CL runs on the same cores through an
    # extra layer, so it must not become the default; ask for it with LAZY_DEVICE=CL. No dlpack_device_types: a
    # buffer is a cl_mem handle, not a pointer another library can use (DLPack's kDLOpenCL has no agreed meaning of
    # its data pointer), so DLPack exports copy to host memory and imports copy in.
    return [
        DeviceSpec("CL", PLUGIN_API_VERSION, 80, probe_cl, open_cl,
                   "OpenCL C kernels through pyopencl (any OpenCL platform; PoCL from pip on a CPU)",
                   library_versions=cl_versions),
    ]  # fmt: skip

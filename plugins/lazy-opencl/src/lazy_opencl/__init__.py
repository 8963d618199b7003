"""lazy-opencl: the `CL` device (OpenCL C through pyopencl). This module only registers it: it never imports
pyopencl nor creates an OpenCL context; `lazy_opencl.device` does the work when the device is opened."""

from __future__ import annotations

import glob
import importlib.util
import os

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
    """Usable when pyopencl is installed and an OpenCL driver is present (found on disk, nothing loaded)."""
    if importlib.util.find_spec("pyopencl") is None:
        return False, "pyopencl is not installed: pip install 'lazy-opencl[pocl]' (pyopencl and PoCL)"
    icds = find_icds()
    if not icds:
        return False, f"no OpenCL platform found: {NO_PLATFORM_FIX}"
    return True, f"pyopencl, OpenCL driver {icds[0]}"


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

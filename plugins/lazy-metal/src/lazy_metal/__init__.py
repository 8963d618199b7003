"""lazy-metal: the `METAL` device (MSL kernels on an Apple GPU through pyobjc's Metal framework; macOS only). This
module only registers it: it imports no pyobjc, renderer or compiler; `lazy_metal.device` does the work when the
device is opened, and `codegen_targets` gives the code generation without the device (on any platform)."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, hookimpl

if TYPE_CHECKING:
    from lazy.device import Compiled

PYOBJC_FIX = "pip install pyobjc-framework-Metal (lazy-metal installs it on macOS)"


def not_macos_reason(system: str) -> str:
    return (
        f"Metal needs macOS (this is {system}); METAL's code generation is still checked here, by "
        "LAZY_EMULATE=METAL (the PYTHON device runs its kernels) and lazy-metal's golden MSL tests"
    )


def probe_metal() -> tuple[bool, str]:
    """Usable on macOS with pyobjc's Metal framework and at least one Metal device."""
    if sys.platform != "darwin":
        import platform

        return False, not_macos_reason(platform.system() or sys.platform)
    if importlib.util.find_spec("Metal") is None:
        return False, f"pyobjc's Metal framework is not installed: {PYOBJC_FIX}"
    import Metal  # the framework binding; listing the devices makes no context, queue or memory

    devices = Metal.MTLCopyAllDevices()
    if not devices:
        return False, "no Metal device found (a virtual machine without a GPU?): run on a Mac with a Metal GPU"
    return True, f"Metal device {devices[0].name()}"


def metal_versions() -> dict[str, str]:
    import importlib.metadata  # here: importing it costs 25-55 ms, and only reports ask for versions

    out = {}
    try:
        out["pyobjc-framework-Metal"] = importlib.metadata.version("pyobjc-framework-Metal")
    except importlib.metadata.PackageNotFoundError:
        pass
    if sys.platform == "darwin":
        import platform

        out["macOS"] = platform.mac_ver()[0]
    return out


def metal_codegen_targets() -> list[CodegenTarget]:
    """The default target (an Apple-silicon GPU, MSL 3.1). Off macOS there is no Metal compiler: rendered only."""
    from lazy_metal.renderer import MetalRenderer

    compiler = None
    if sys.platform == "darwin":
        from lazy_metal.compiler import MetalCompiler  # imports the framework only when it first compiles

        compiler = MetalCompiler()
    return [CodegenTarget("METAL", MetalRenderer(), compiler)]


def open_metal(name: str) -> Compiled:
    from lazy_metal.device import open_metal as open_device

    return open_device(name)


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    # priority 110: a GPU, above the CPU devices (CPU 100)
    return [
        DeviceSpec("METAL", PLUGIN_API_VERSION, 110, probe_metal, open_metal,
                   "MSL kernels on an Apple GPU through pyobjc's Metal framework (macOS)",
                   library_versions=metal_versions, codegen_targets=metal_codegen_targets),
    ]  # fmt: skip

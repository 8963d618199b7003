"""lazy-template: the `TMPL` device, a minimal compiled device to copy. This module is the plugin's entry point
(group `lazy.devices`): it only registers the device. It imports no compiler and compiles nothing; the parts are
imported when the device is first opened (`lazy_template.device`)."""

from __future__ import annotations

import shutil

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, DLDeviceType, hookimpl

DEVICE = "TMPL"  # upper case; instances are "TMPL", "TMPL:1", ...
C_COMPILERS = ("cc", "gcc", "clang")  # looked up on PATH in this order (lazy_template.compiler uses the same list)


def probe() -> tuple[bool, str]:
    """Usable when a C compiler is on PATH. A probe must be cheap and change nothing: look, never compile."""
    for name in C_COMPILERS:
        if (path := shutil.which(name)) is not None:
            return True, f"C compiler {path}"
    return False, f"no C compiler on PATH (looked for {', '.join(C_COMPILERS)}): install gcc or clang"


def open_device(name: str) -> Compiled:
    """Called by the registry the first time `name` ("TMPL", "TMPL:1", ...) is used: the heavy imports go here."""
    from lazy_template.device import open_tmpl

    return open_tmpl(name)


def codegen_targets() -> list[CodegenTarget]:
    """The device's code generation without the device (optional; plugin API 2.1): a renderer with the capabilities
    of each target the device compiles for, and the compiler for it (None where none runs on this platform). It must
    work where the hardware, driver or runtime is missing, which is the point: `python -m lazy.conformance --device
    TMPL --compile-only` renders and compiles every kernel of the suite for each target, and `LAZY_EMULATE=TMPL`
    makes the PYTHON device generate code with the first target's capabilities and interpret it. A GPU plugin lists
    one target per architecture it supports (CUDA: sm_80, sm_90); a missing compiler package raises, naming it."""
    from lazy_template.compiler import TemplateCompiler
    from lazy_template.renderer import TemplateRenderer

    return [CodegenTarget(DEVICE, TemplateRenderer(), TemplateCompiler(DEVICE))]


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    # priority: the default device is the usable one with the highest (CPU is 100); this template stays below every
    # shipped device so that installing it never changes anyone's default
    description = "template: C kernels compiled by the system C compiler, loaded with ctypes"
    # dlpack_device_types: the kind of memory the allocator's handles point into, as DLPack names it (host memory
    # here; a GPU plugin declares its own, e.g. kDLCUDA). Declared types are shared with other libraries without a
    # copy, both ways (the allocator's "address" and "wrap" features); leave it out and DLPack goes through copies.
    return [DeviceSpec(DEVICE, PLUGIN_API_VERSION, priority=10, probe=probe, open=open_device, description=description,
                       codegen_targets=codegen_targets, dlpack_device_types=(DLDeviceType.kDLCPU,))]  # fmt: skip


@hookimpl
def lazy_known_failures(device: str) -> list[str]:
    """Conformance tests this plugin expects to fail on `device`: node ids (fnmatch patterns), each with its reason.
    Every plugin is asked about every device: answer only for yours. Each listed test must still fail: when it
    passes, the entry is stale and fails the run, so remove it then."""
    if device.partition(":")[0] != DEVICE:
        return []
    # e.g. "test_45_ops.py::test_op_matches_reference[norms]", with a comment saying why it fails; none here
    return []

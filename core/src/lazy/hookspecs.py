"""The plugin contract: pluggy markers, `DeviceSpec` and the hook specifications a device plugin implements.

A plugin's entry-point module (group `lazy.devices`) holds `@hookimpl` functions; `lazy.plugins` discovers and calls
them. This module stays light: it imports no device code at run time, so a plugin's entry module can import it cheaply.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import pluggy

if TYPE_CHECKING:
    from lazy.device import Compiled, Compiler
    from lazy.renderer import Renderer

PROJECT_NAME = "lazy"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

# A plugin states the version it was built against in each DeviceSpec. Core refuses a different major, or a minor newer
# than its own. Bump the minor when a hook or DeviceSpec field is added (old plugins keep working), the major when one
# changes meaning or goes away.
# 2.0: allocator features declared (`Allocator.features`) and checked on open, typed queue commands handled by
# `on_<command>` methods (`lazy.hcq`), `Compiled` given its queues at construction and no kernel toolchain on a
# copy-only device. 1.1: DeviceSpec.instance_suffix. 2.1: DeviceSpec.codegen_targets (code generation without the
# device: `LAZY_EMULATE`, `--compile-only`), `Capabilities.tensor_cores` and the WMMA UOp. 2.2:
# DeviceSpec.dlpack_device_types and the allocator features "address" and "wrap" (DLPack export and import in place).
PLUGIN_API_VERSION: tuple[int, int] = (2, 2)

# The lazy project's own distributions. When plugins clash over a device name or an entry-point name, the one from these
# keeps it: it is the name lazy documents, and a newcomer must not take it over unnoticed (the newcomer is reported).
FIRST_PARTY_DISTRIBUTIONS = frozenset({"lazy-core", "lazy-cpu", "lazy-opencl", "lazy-disk", "lazy-cuda", "lazy-metal"})


@dataclass(frozen=True)
class CodegenTarget:
    """One code generation target of a device, usable without its hardware, driver or runtime library: `renderer` with
    the capabilities of that target, and `compiler` (None where no compiler runs on this platform, as Metal's off
    macOS). `name` tells targets apart (`"sm_80"`, `"sm_90"`; a device with one target: its own name)."""

    name: str
    renderer: Renderer
    compiler: Compiler | None = None


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (`DLDeviceType` in dlpack.h): what kind of memory a DLPack tensor's pointer points into.
    `DeviceSpec.dlpack_device_types` declares them; the values are DLPack's, so any other library reads them."""

    kDLCPU = 1  # host memory
    kDLCUDA = 2
    kDLCUDAHost = 3  # page-locked host memory allocated through CUDA
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


_DEVICE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
InstanceSuffix = Literal["ordinal", "path"]


@dataclass(frozen=True)
class DeviceSpec:
    """One device a plugin provides, as returned by its `lazy_devices` hook.

    name: the device family, upper case (`"CUDA"`); instances are `"CUDA"` (ordinal 0), `"CUDA:1"`, ...
    api_version: `PLUGIN_API_VERSION` of the lazy-core the plugin was built against.
    priority: default selection picks the usable device with the highest priority (CPU ~ 100, GPUs above that).
    probe: `() -> (usable, reason)`, exactly a `bool` and a `str` (a truthy `"no"` is not an answer: anything else
        makes the device unusable and is reported as a bug in the plugin). Must be cheap and without side effects: no
        device context, no compilation, no allocation; checking that a library imports or a driver file exists is
        fine. Called at most once per process.
    open: `(instance_name) -> Compiled`, e.g. `open("CUDA:1")`. Builds the device on first use; this is where the heavy
        third-party import belongs. Raise with a message saying what is missing and how to get it. The registry then
        checks the device against the contract (its allocator's declared `features` match the methods it implements;
        its queue types handle every command core sends them) and refuses it, naming each requirement and its fix.
    description: one line shown by `python -m lazy devices`.
    default_ok: False for devices that must only be used when asked for by name (the PYTHON reference interpreter).
    library_versions: `() -> {library: version}` of the third-party libraries the device runs on (compiler, driver,
        binding), for conformance reports; cheap (read metadata, don't open the device). Optional.
    instance_suffix: what may follow `NAME:` in an instance name. `"ordinal"` (the default): a non-negative integer,
        `NAME` being ordinal 0 (`"CL:1"`; `"CL:01"` is `"CL:1"`); `"path"`: any non-empty text, kept verbatim and
        passed to `open` (`"DISK:/tmp/weights.bin"`). Core refuses any other instance name, naming the valid forms.
    codegen_targets: `() -> [CodegenTarget, ...]`: the device's code generation without the device (API 2.1). Must work
        with no GPU, driver or runtime library present (the compiler may need its own pip package; raise saying which
        when it is missing). The first target's capabilities are what `LAZY_EMULATE=NAME` gives the PYTHON device;
        `python -m lazy.conformance --device NAME --compile-only` renders and compiles the suite's kernels for each.
        Optional: a device without one cannot be emulated or compile-checked.
    dlpack_device_types: the DLPack device types (`DLDeviceType`) of memory this device's kernels read and write
        through its allocator's handles, its own kind first (API 2.2). Its buffers are exported as the first type
        without a copy (`Tensor.__dlpack__`; `Tensor.numpy(copy=False)` when that is `kDLCPU`, host memory), and
        DLPack tensors of any listed type are imported in place (`Tensor.from_dlpack`). The DLPack device id is 0 for
        `kDLCPU` (every instance addresses host memory) and the instance ordinal otherwise (`CUDA:1` is id 1). The
        allocator must declare the features "address" (export) and "wrap" (import). Empty (the default): exports are
        copied to host memory (`kDLCPU`) and imports are copied in, which every device can do.

    Whatever a plugin's code raises (`sys.exit()` included; only Ctrl-C passes) is caught by the registry and reported
    as a problem of that plugin, so the host program and the other devices go on.
    """

    name: str
    api_version: tuple[int, int]
    priority: int
    probe: Callable[[], tuple[bool, str]]
    open: Callable[[str], Compiled]
    description: str = ""
    default_ok: bool = True
    library_versions: Callable[[], dict[str, str]] | None = None
    instance_suffix: InstanceSuffix = "ordinal"
    codegen_targets: Callable[[], list[CodegenTarget]] | None = None
    dlpack_device_types: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _DEVICE_NAME.fullmatch(self.name):
            raise ValueError(
                f"DeviceSpec name {self.name!r} is invalid: use upper-case letters, digits and '_', starting with a "
                f"letter (e.g. 'CUDA'); instances like 'CUDA:1' are made by core"
            )
        version = self.api_version
        if not (isinstance(version, tuple) and len(version) == 2 and all(type(v) is int for v in version)):
            raise ValueError(f"DeviceSpec {self.name}: api_version must be (major, minor) ints, e.g. "
                             f"lazy.hookspecs.PLUGIN_API_VERSION, not {version!r}")  # fmt: skip
        if type(self.priority) is not int:
            raise ValueError(f"DeviceSpec {self.name}: priority must be an int, not {self.priority!r}")
        for field_name in ("probe", "open"):
            if not callable(getattr(self, field_name)):
                raise TypeError(f"DeviceSpec {self.name}: {field_name} must be callable")
        if self.instance_suffix not in get_args(InstanceSuffix):
            raise ValueError(f"DeviceSpec {self.name}: instance_suffix must be one of {get_args(InstanceSuffix)}, "
                             f"not {self.instance_suffix!r}")  # fmt: skip
        types = self.dlpack_device_types
        known = {int(t) for t in DLDeviceType}
        if (not isinstance(types, tuple) or not all(type(t) in (int, DLDeviceType) and t in known for t in types)
                or len(set(types)) != len(types)):  # fmt: skip
            raise ValueError(f"DeviceSpec {self.name}: dlpack_device_types must be a tuple of distinct DLPack device "
                             f"types, e.g. (DLDeviceType.kDLCPU,), not {types!r}")  # fmt: skip


def api_incompatibility(version: tuple[int, int]) -> str | None:
    """Why core cannot use a plugin built for plugin API `version`, or None when it can."""
    core_major, core_minor = PLUGIN_API_VERSION
    major, minor = version
    core, theirs = f"{core_major}.{core_minor}", f"{major}.{minor}"
    if major != core_major:
        return f"built for plugin API {theirs}, but this lazy-core speaks plugin API {core} (major versions differ)"
    if minor > core_minor:
        return f"built for plugin API {theirs}, newer than this lazy-core's plugin API {core}: upgrade lazy-core"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# hook specifications


@hookspec
def lazy_devices() -> list[DeviceSpec]:  # type: ignore[empty-body]
    """The devices this plugin provides.

    Called by `lazy.plugins` once per process, the first time anything asks the device registry a question
    (`Device[...]`, `Device.DEFAULT`, `python -m lazy devices`), and again only after `Device.reset()`. Each plugin's
    implementation is called on its own, so one that raises is reported without hiding the others.

    Return a list of `DeviceSpec`; an empty list is fine (e.g. a platform the plugin does not support). Must not import
    the heavy third-party library, touch hardware, probe or open devices: put those in `DeviceSpec.probe` (cheap checks)
    and `DeviceSpec.open` (everything else). Device names must not collide with another plugin's. When they do (or
    when two distributions declare one entry-point name), the one claimant from `FIRST_PARTY_DISTRIBUTIONS` keeps the
    name and the other claims are ignored; with no (or several) first-party claimants, nobody gets the name. Either way
    the clash is reported naming every party, which one won and why.
    """


@hookspec
def lazy_known_failures(device: str) -> list[str]:  # type: ignore[empty-body]
    """Conformance-suite test node ids this plugin expects to fail on `device` (a canonical name, e.g. "CL").

    Called by the conformance suite (`python -m lazy.conformance --device NAME`, through `Device.known_failures`) once
    per run, after the device's plugin has been loaded; every loaded plugin is asked, so answer `[]` for devices that
    are not yours. Each listed test must still fail: one that passes is reported as a stale entry, and known failures
    are counted separately, never as passes. Must not open or probe the device, and must be cheap (read a bundled file
    or return a literal list).
    """

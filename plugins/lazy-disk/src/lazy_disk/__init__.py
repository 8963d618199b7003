"""lazy-disk: the `DISK` device, buffers backed by a file (`DISK:/path/to/file`, or a bare `DISK` for anonymous
scratch space). This module only registers it; `lazy_disk.device` opens files when the device is used."""

from __future__ import annotations

import platform

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl


def probe_disk() -> tuple[bool, str]:
    """Always usable: it needs only the operating system's file I/O (mmap where the file allows it)."""
    return True, "memory-mapped files (plain reads and writes where mmap is not possible)"


def disk_versions() -> dict[str, str]:
    return {"os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}


def open_disk(name: str) -> Compiled:
    from lazy_disk.device import open_disk as open_device

    return open_device(name)


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    return [
        DeviceSpec("DISK", PLUGIN_API_VERSION, 0, probe_disk, open_disk,
                   "tensors backed by a file (DISK:/path), copy only; bare DISK is anonymous scratch space",
                   default_ok=False, library_versions=disk_versions, instance_suffix="path"),
    ]  # fmt: skip

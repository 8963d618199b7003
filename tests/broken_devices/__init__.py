"""Deliberately broken devices: each is the working CPU device with one part swapped for a wrong one, so that
tests/conformance_power can check that the conformance suite fails every one of them (the suite's kill rate).

Registered the way a third party registers a plugin: this module holds the `lazy_devices` hook (entry points need an
installed distribution, so tests add it with `Device.register(broken_devices, PLUGIN_NAME)`, or a `BrokenDevices`
object for a few of them); the parts themselves are in `broken_devices.parts`, imported only when a device opens.
By hand: `PYTHONPATH=tests python -m broken_devices --device BROKEN_ALIAS [python -m lazy.conformance options]`.
"""

from __future__ import annotations

from lazy.device import Compiled
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl

PLUGIN_NAME = "broken-devices"

# device -> what is wrong with it, one line (the kill-rate table in docs quotes these)
FIXTURES: dict[str, str] = {
    "BROKEN_ALIAS": "allocator hands every live buffer of one size the same memory",
    "BROKEN_LRU_REUSE": "allocator's free-list hands a freed buffer out again without taking it off the list",
    "BROKEN_COPYIN": "copyin drops the last byte",
    "BROKEN_IDIV": "renderer divides integers with floor division (Python's //) instead of C's truncation",
    "BROKEN_WHERE": "renderer writes where(c, a, b) as c*a + (1-c)*b (an inf or NaN not chosen leaks in)",
    "BROKEN_CAST": "renderer converts float to int rounding to nearest instead of truncating",
    "BROKEN_NO_BOOL": "renderer's capabilities declare float32 and int32 only: no bool, which every comparison gives",
    "BROKEN_COMPILE_CACHE": "compiler cache keyed on the source's length: kernels of equal length share a binary",
    "BROKEN_STALE_ARG": "program launcher keeps the first launch's last buffer argument on every later launch",
    "BROKEN_NOOP_WAIT": "compute queue's wait command does nothing (later work runs before the signal is set)",
    "BROKEN_NOOP_TIMESTAMP": "compute queue's timestamp command does nothing (the signal keeps an old time)",
}


def probe() -> tuple[bool, str]:
    from lazy_cpu import probe_cpu

    return probe_cpu()


def open_broken(name: str) -> Compiled:
    from broken_devices.parts import open_broken as open_device

    return open_device(name)


class BrokenDevices:
    """A plugin object providing the broken devices in `names` only (a run of the suite registers just the device
    under test: the copies layer copies to every other usable device, and a second broken one would fail there)."""

    def __init__(self, names: list[str]):
        unknown = sorted(set(names) - set(FIXTURES))
        if unknown:
            raise ValueError(f"no broken devices named {unknown}; known: {', '.join(FIXTURES)}")
        self.names = names

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        return [DeviceSpec(name, PLUGIN_API_VERSION, 0, probe, open_broken, f"broken on purpose: {FIXTURES[name]}",
                           default_ok=False) for name in self.names]  # fmt: skip


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    return BrokenDevices(list(FIXTURES)).lazy_devices()

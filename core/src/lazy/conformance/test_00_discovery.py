"""Layer discovery: the device is found through the registry, opens, and declares valid capabilities."""

from __future__ import annotations

from lazy.device import Allocator, Compiled, Compiler
from lazy.dtype import ALL_DTYPES, dtypes
from lazy.hookspecs import api_incompatibility
from lazy.plugins import Device
from lazy.renderer import Capabilities, Renderer


def test_device_is_registered(device_name):
    base = Device.canonicalize(device_name).partition(":")[0]
    assert base in Device.specs(), f"{base} not among registered devices {sorted(Device.specs())}"


def test_plugin_api_version_is_accepted(device_name):
    spec = Device.specs()[Device.canonicalize(device_name).partition(":")[0]]
    assert api_incompatibility(spec.api_version) is None


def test_probe_says_usable(device_name):
    usable, reason = Device.probe(device_name)
    assert usable, f"probe says unusable: {reason}"
    assert isinstance(reason, str)


def test_device_opens_with_its_parts(device):
    assert isinstance(device, Compiled)
    assert isinstance(device.allocator, Allocator)
    assert isinstance(device.renderer, Renderer)
    assert isinstance(device.compiler, Compiler)
    assert callable(device.runtime)


def test_capabilities_are_valid(caps):
    assert isinstance(caps, Capabilities)
    assert caps.dtypes and set(caps.dtypes) <= set(ALL_DTYPES), caps.dtypes
    required = (dtypes.float32, dtypes.int32, dtypes.bool)  # (bool: what every comparison gives)
    assert all(map(caps.supports, required)), f"float32, int32 and bool are required; caps.dtypes={caps.dtypes}"
    assert all(isinstance(w, int) and w > 1 for w in caps.vector_widths), caps.vector_widths
    if caps.has_local:
        assert caps.has_threads, "has_local needs has_threads (local ids are thread ids)"
        assert caps.local_size_max > 0 and caps.shared_max > 0, "declare local_size_max and shared_max with has_local"
    for limits in (caps.global_max, caps.local_max):
        assert limits is None or (len(limits) <= 3 and all(isinstance(x, int) and x > 0 for x in limits)), limits
    assert all(isinstance(f, str) and isinstance(r, str) and r for f, r in caps.unsupported), caps.unsupported


def test_opening_twice_gives_the_same_device(device_name, device):
    assert Device[device_name] is device

"""Registration and what a machine without Metal sees: the entry point registers METAL with its code generation
target, importing the plugin loads no pyobjc, the probe says Metal needs macOS, and asking for the device by name
fails with that reason. (The runtime itself is exercised with a stand-in framework in test_metal_runtime.py.)"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import lazy_metal
from lazy.device import DeviceError
from lazy.hookspecs import CodegenTarget
from lazy_metal.renderer import MetalRenderer

not_on_macos = pytest.mark.skipif(sys.platform == "darwin", reason="checks what a machine without Metal sees")


def test_entry_point_registers_metal_with_its_codegen_target():
    from lazy.plugins import Device

    spec = Device.specs()["METAL"]
    assert spec.priority == 110  # a GPU: above CPU (100)
    assert spec.codegen_targets is not None
    (target,) = spec.codegen_targets()
    assert isinstance(target, CodegenTarget) and target.name == "METAL" and isinstance(target.renderer, MetalRenderer)
    if sys.platform != "darwin":
        assert target.compiler is None  # no Metal compiler off macOS: rendered only


def test_import_loads_no_pyobjc_renderer_or_compiler():
    script = (
        "import json, sys\n"
        "import lazy_metal\n"
        "from lazy.plugins import Device\n"
        "Device.specs()\n"  # the registry imports every plugin's entry module
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    heavy = {"Metal", "objc", "Foundation", "lazy_metal.device", "lazy_metal.compiler", "lazy_metal.renderer",
             "lazy_metal.queues", "lazy_metal.golden"}  # fmt: skip
    assert "lazy_metal" in loaded and not heavy & loaded, heavy & loaded


@not_on_macos
def test_probe_says_metal_needs_macos_and_what_still_runs():
    usable, reason = lazy_metal.probe_metal()
    assert not usable and reason.startswith("Metal needs macOS (this is ")
    assert "LAZY_EMULATE=METAL" in reason and "golden" in reason


def test_probe_on_macos_without_pyobjc_names_the_package(monkeypatch):
    import importlib.util

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    usable, reason = lazy_metal.probe_metal()
    assert not usable and "pip install pyobjc-framework-Metal" in reason


@not_on_macos
def test_device_asked_for_by_name_fails_with_the_probes_reason():
    from lazy import Tensor
    from lazy.plugins import Device

    with pytest.raises(DeviceError, match=r"METAL .*not usable: Metal needs macOS"):
        Device["METAL"]
    with pytest.raises(DeviceError, match=r"Metal needs macOS"):
        Tensor([1.0, 2.0], device="METAL").realize()
    assert Device.DEFAULT != "METAL"  # never a silent default


def test_pyobjc_is_a_dependency_on_macos_only():
    import tomllib

    pyproject = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())
    deps = pyproject["project"]["dependencies"]
    (pyobjc,) = [d for d in deps if d.startswith("pyobjc-framework-Metal")]
    assert pyobjc.endswith("; sys_platform == 'darwin'")
    assert pyproject["project"]["entry-points"]["lazy.devices"] == {"metal": "lazy_metal"}

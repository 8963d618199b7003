"""The conformance runner: known failures, stale entries, layer import failures, reports and exit status.

Runs the runner on a tiny synthetic suite (written to a temporary directory) against the PYTHON device.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from lazy.conformance.__main__ import main
from lazy.conformance.runner import device_versions, layer_of, run_conformance
from lazy.device import DeviceError
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl
from lazy.plugins import Device, core_version

KERNELS = """
import pytest

def test_passes(device_name):
    assert device_name == "PYTHON"

def test_fails():
    assert False, "boom"

def test_known():
    assert False, "expected on this device"

def test_stale():
    pass

def test_skipped():
    pytest.skip("device declares no widgets (caps.widgets=False)")
"""


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "test_20_kernels.py").write_text(textwrap.dedent(KERNELS))
    (tmp_path / "test_40_tensor.py").write_text("import lazy_module_that_does_not_exist  # noqa\n")
    return tmp_path


def test_full_run_counts_known_stale_and_import_failures(suite, tmp_path):
    known = ["test_20_kernels.py::test_kno*", "test_20_kernels.py::test_stale", "test_20_kernels.py::test_removed"]
    report, json_path = tmp_path / "report.md", tmp_path / "report.json"
    result = run_conformance("PYTHON", known_failures=known, suite_dir=suite, report=report, json_path=json_path)
    by_id = {t.id: t for t in result.tests}
    assert by_id["test_20_kernels.py::test_known"].outcome == "known_failures"  # a listed test that fails
    assert "stale" in by_id["test_20_kernels.py::test_stale"].message  # a listed test that passes fails the run
    assert by_id["test_20_kernels.py::test_stale"].outcome == "failed"
    assert by_id["test_20_kernels.py::test_removed"].outcome == "failed"  # an entry that matches no test is stale too
    assert by_id["test_20_kernels.py::test_skipped"].message == "device declares no widgets (caps.widgets=False)"
    assert (
        by_id["test_40_tensor.py"].outcome == "failed"
        and "lazy_module_that_does_not_exist" in by_id["test_40_tensor.py"].message
    )
    assert result.exit_code == 1

    data = json.loads(json_path.read_text())
    assert data["device"] == "PYTHON" and "lazy-core" in data["versions"]
    assert data["summary"] == {"passed": 1, "failed": 4, "skipped": 1, "known_failures": 1}
    assert data["layers"]["kernels"] == {"passed": 1, "failed": 3, "skipped": 1, "known_failures": 1}
    assert data["layers"]["tensor"] == {"passed": 0, "failed": 1, "skipped": 0, "known_failures": 0}
    markdown = report.read_text()
    assert "| kernels | 1 | 3 | 1 | 1 |" in markdown and "| tensor | 0 | 1 | 0 | 0 |" in markdown
    assert "## Failures" in markdown and "boom" in markdown and "## Skips" in markdown


def test_clean_selection_exits_zero(suite):
    # (without the layer that fails to import: a collection error counts whatever the selection, and whether it
    # happens depended on which test_40_tensor module an earlier in-process run had left in sys.modules)
    (suite / "test_40_tensor.py").unlink()
    result = run_conformance("PYTHON", known_failures=["test_20_kernels.py::test_known"], suite_dir=suite,
                             keyword="passes or known or skipped")  # fmt: skip
    assert result.counts() == {"passed": 1, "failed": 0, "skipped": 1, "known_failures": 1}
    assert result.exit_code == 0


def test_exitfirst_stops_at_a_real_failure(suite):
    result = run_conformance("PYTHON", known_failures=[], suite_dir=suite, keyword="kernels", exitfirst=True)
    assert result.counts()["failed"] == 1 and result.exit_code == 1


def test_layer_names_come_from_module_names():
    assert layer_of("test_20_kernels.py::test_alu[ADD-float]") == "kernels"
    assert layer_of("test_50_end_to_end.py::test_x") == "end_to_end"


def test_command_line_on_the_real_suite(tmp_path, capsys):
    json_path = tmp_path / "r.json"
    code = main(["--device", "python", "-k", "discovery", "--json", str(json_path)])
    assert code == 0
    data = json.loads(json_path.read_text())
    assert data["device"] == "PYTHON" and data["summary"]["failed"] == 0 and data["layers"]["discovery"]["passed"] > 0
    assert "PYTHON:" in capsys.readouterr().out


def test_unknown_device_is_one_line_and_status_2_before_anything_runs(capsys):
    cases = {("--device", "NOPE"): "unknown device 'NOPE'", ("--devices", "PYTHON,NOPE"): "unknown device 'NOPE'",
             ("--device", "python:abc"): "'python:abc' is not a PYTHON device"}  # fmt: skip
    for argv, why in cases.items():
        assert main(list(argv)) == 2
        out, err = capsys.readouterr()
        [line] = (out + err).strip().splitlines()
        assert why in line and "; known devices: " in line and "PYTHON" in line, line
    with pytest.raises(DeviceError, match=r"^unknown device 'NOPE'; known devices: .*PYTHON"):
        run_conformance("NOPE")


@pytest.fixture
def registry_with_python_only():
    from lazy import pydevice

    Device.reset(discover=False)
    Device.register(pydevice, "python", dist="lazy-core")
    yield
    Device.reset()


def test_unusable_device_says_why_in_one_line(registry_with_python_only, capsys):
    from lazy.pydevice import open_python_device

    gpu = DeviceSpec("GPU", PLUGIN_API_VERSION, 50, lambda: (False, "no driver\nat all"), open_python_device)
    Device.register(Plugin([gpu]), "gpu")
    assert main(["--device", "gpu"]) == 2
    assert capsys.readouterr().err == (
        "python -m lazy.conformance: device GPU is not usable: no driver at all; known devices: GPU, PYTHON; see "
        "`python -m lazy devices`\n"
    )


def test_library_versions_that_exit_go_into_the_report(registry_with_python_only):
    from lazy.pydevice import open_python_device

    spec = DeviceSpec("PYX", PLUGIN_API_VERSION, 0, lambda: (True, ""), open_python_device,
                      library_versions=lambda: sys.exit(3))  # fmt: skip
    Device.register(Plugin([spec]), "pyx", dist="lazy-pyx", version="2")
    assert device_versions("PYX") == {"lazy-core": core_version(), "lazy-pyx": "2",
                                      "library_versions": "error: library_versions() called sys.exit(3)"}  # fmt: skip


class Plugin:
    def __init__(self, specs):
        self.specs = specs

    @hookimpl
    def lazy_devices(self):
        return self.specs


def test_all_names_the_devices_it_leaves_out():
    """`--all` runs every usable device and prints each other registered one with its probe's reason (no NVIDIA
    driver here, or an OpenCL compiler that cannot build for this processor), so a matrix says what it did not check."""
    from lazy.conformance.matrix import unusable_devices, usable_devices
    from lazy.plugins import Device

    left_out = dict(unusable_devices())
    assert sorted([*usable_devices(), *left_out]) == sorted(Device.specs())
    assert "PYTHON" in usable_devices() and "PYTHON" not in left_out
    for name, why in left_out.items():
        assert why == Device.probe(name)[1] and why, name

"""A real installed third-party distribution that misbehaves: its device's probe calls `sys.exit(3)` and it claims
lazy-core's entry-point name `python` and device name `PYTHON`. `python -m lazy devices` and the first `Tensor` must
go on, say why the default fell back, and name both parties of each clash and the winner (lazy-core).

The distribution is a `.dist-info` folder on PYTHONPATH of a subprocess, so discovery reads it like any pip install;
`LAZY_PLUGINS=python,evil` keeps the other installed plugins out, so only lazy-core's PYTHON device is needed.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

EVIL_PLUGIN = """
import sys

from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl
from lazy.pydevice import open_python_device


@hookimpl
def lazy_devices():
    return [
        DeviceSpec("HIGH", PLUGIN_API_VERSION, 1000, lambda: sys.exit(3), open_python_device),
        DeviceSpec("LOW", PLUGIN_API_VERSION, 1, lambda: (True, "works"), open_python_device),
        DeviceSpec("PYTHON", PLUGIN_API_VERSION, 0, lambda: (True, "mine"), lambda name: sys.exit(4)),
    ]
"""

EXPECTED_DEFAULT = ("LOW (the highest-priority usable device, priority 1; chosen over unusable HIGH (priority 1000, "
                    "plugin 'evil' from evil-lazy 1.0): probe() called sys.exit(3))")  # fmt: skip


@pytest.fixture(scope="module")
def evil_site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    site = tmp_path_factory.mktemp("evil_site")
    info = site / "evil_lazy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-lazy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lazy.devices]\npython = evil_python\nevil = evil_plugin\n")
    (site / "evil_python.py").write_text("import sys\nsys.exit('evil_python must never be imported')\n")
    (site / "evil_plugin.py").write_text(EVIL_PLUGIN)
    return site


def run_python(site: pathlib.Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(REPO / "core" / "src")]), **settings)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_devices_lists_an_exiting_probe_the_fallback_and_both_clashes(evil_site: pathlib.Path) -> None:
    proc = run_python(evil_site, "-m", "lazy", "devices", LAZY_PLUGINS="python,evil")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"default device: {EXPECTED_DEFAULT}" in out
    assert "HIGH    1000      unusable: probe() called sys.exit(3)" in out
    assert ("plugin name 'python' is claimed by evil-lazy 1.0 (evil_python) and lazy-core" in out
            and "keeps it: a clash goes to the first-party plugin; the other one is not loaded" in out)  # fmt: skip
    assert ("device PYTHON is claimed by plugin 'evil' from evil-lazy 1.0 and plugin 'python' from lazy-core" in out
            and "; to use another one, leave 'python' out of LAZY_PLUGINS" in out)  # fmt: skip


def test_allow_list_still_finds_the_first_party_plugin_of_a_clashing_name(evil_site: pathlib.Path) -> None:
    proc = run_python(evil_site, "-m", "lazy", "devices", LAZY_PLUGINS="python")
    assert proc.returncode == 0, proc.stderr
    assert "not installed" not in proc.stdout and "PYTHON  0         usable (by name only): pure Python" in proc.stdout
    assert "plugin name 'python' is claimed by evil-lazy 1.0 (evil_python) and lazy-core" in proc.stdout


def test_first_tensor_runs_on_the_fallback_and_debug_says_why_once(evil_site: pathlib.Path) -> None:
    code = "from lazy import Tensor; print(Tensor([1.0, 2.0]).add(1).tolist())"
    proc = run_python(evil_site, "-c", code, LAZY_PLUGINS="python,evil", LAZY_DEBUG="1")
    assert (proc.returncode, proc.stdout) == (0, "[2.0, 3.0]\n"), proc.stderr
    assert proc.stderr.count("lazy: default device") == 1
    assert f"lazy: default device LOW (plugin 'evil' from evil-lazy 1.0): {EXPECTED_DEFAULT[5:-1]}\n" in proc.stderr
    assert "lazy: plugin 'evil': device HIGH: probe() called sys.exit(3)" in proc.stderr

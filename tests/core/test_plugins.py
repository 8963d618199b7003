"""The plugin system: discovery, failure isolation, LAZY_PLUGINS, the default device, `Device[...]` and
`python -m lazy devices`. Plugins here are in-test objects registered through `Device.register` or fake entry points."""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from lazy import plugins as lazy_plugins
from lazy.device import Allocator, BufferSpec, Compiled, Compiler, DeviceError, ProgramSpec, get_device, opened_devices
from lazy.helpers import Context
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, InstanceSuffix, api_incompatibility, hookimpl
from lazy.plugins import Device
from lazy.renderer import Renderer

REPO = pathlib.Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------------------------------
# a minimal device and plugins built from it


class BytesAllocator(Allocator):
    def _alloc(self, size: int, spec: BufferSpec) -> bytearray:
        return bytearray(size)

    def _copyin(self, dest: bytearray, src: memoryview) -> None:
        dest[:] = src

    def _copyout(self, dest: memoryview, src: bytearray) -> None:
        dest[:] = src


def no_runtime(name: str, lib: bytes, spec: ProgramSpec) -> None:
    return None


class FakeCompiled(Compiled):
    def __init__(self, name: str):
        super().__init__(name, BytesAllocator(), Renderer(), Compiler(), runtime=no_runtime)
        self.closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def make_spec(name: str, priority: int = 10, probe: Callable[[], tuple[bool, str]] | None = None,
              opener: Callable[[str], Compiled] = FakeCompiled, api: tuple[int, int] = PLUGIN_API_VERSION,
              default_ok: bool = True, suffix: InstanceSuffix = "ordinal") -> DeviceSpec:  # fmt: skip
    return DeviceSpec(name, api, priority, probe or (lambda: (True, "always works")), opener, default_ok=default_ok,
                      instance_suffix=suffix)  # fmt: skip


class DevicePlugin:
    """A plugin object whose `lazy_devices` returns `specs` (or calls them, when it is a function)."""

    def __init__(self, specs: list[Any] | Callable[[], list[Any]], known_failures: dict[str, list[str]] | None = None):
        self.specs, self.failures = specs, known_failures or {}

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        return self.specs() if callable(self.specs) else list(self.specs)

    @hookimpl
    def lazy_known_failures(self, device: str) -> list[str]:
        return self.failures.get(device, [])


def raising_hook() -> list[DeviceSpec]:
    raise RuntimeError("driver table corrupted")


def register_zoo() -> None:
    """One good plugin and one of each kind of broken plugin."""
    Device.register(DevicePlugin([make_spec("FAKE", priority=50)]), "fake", dist="lazy-fake", version="1.2")
    Device.register(DevicePlugin(raising_hook), "raiser", dist="lazy-raiser")
    Device.register(DevicePlugin([make_spec("FUTURE", api=(9, 0))]), "future", dist="lazy-future")
    Device.register(DevicePlugin([make_spec("TWIN")]), "twin_a", dist="lazy-twin-a")
    Device.register(DevicePlugin([make_spec("TWIN")]), "twin_b", dist="lazy-twin-b")


def info(name: str) -> Any:
    return next(p for p in Device.plugins() if p.name == name)


pytestmark = pytest.mark.usefixtures("clean_registry")  # (tests/core/conftest.py)


# ---------------------------------------------------------------------------------------------------------------------
# names and specs


@pytest.mark.parametrize("name, canonical", [
    ("cpu", "CPU"), ("CPU:0", "CPU"), ("cl:1", "CL:1"), ("CL:01", "CL:1"), ("CL:00", "CL"),
    ("DISK:/tmp/Some File", "DISK:/tmp/Some File"), ("disk:relative/Path.bin", "DISK:relative/Path.bin"),
])  # fmt: skip
def test_canonicalize(name: str, canonical: str) -> None:
    assert Device.canonicalize(name) == canonical


@pytest.mark.parametrize("bad", ["", ":1", "CPU:", "not-a-device", "1CPU"])
def test_canonicalize_rejects_bad_names(bad: str) -> None:
    with pytest.raises(DeviceError, match="not a device name"):
        Device.canonicalize(bad)


@pytest.mark.parametrize("bad", ["cpu:abc", "cpu:-1", "CPU:+1", "cpu:1.5", "cpu: 1"])
def test_ordinal_devices_refuse_a_suffix_that_is_not_a_non_negative_integer(bad: str) -> None:
    Device.register(DevicePlugin([make_spec("CPU")]), "cpu")
    with pytest.raises(
        DeviceError, match=r"not a CPU device: CPU instances are 'CPU' or 'CPU:k' with k a non-negative"
    ):
        Device.canonicalize(bad)
    with pytest.raises(DeviceError, match="non-negative integer"):
        Device[bad]
    with Context(DEVICE=bad), pytest.raises(DeviceError, match=f"LAZY_DEVICE={re.escape(bad)}: .*non-negative"):
        _ = Device.DEFAULT
    assert Device.opened("CPU") is None


def test_suffix_grammar_is_declared_per_device() -> None:
    Device.register(DevicePlugin([make_spec("CPU"), make_spec("FILEY", suffix="path")]), "both")
    assert [Device.canonicalize(n) for n in ("cpu:01", "CPU:0", "cpu:12")] == ["CPU:1", "CPU", "CPU:12"]
    # a path device keeps what follows the colon verbatim: "007" is a file name, not ordinal 7
    assert [Device.canonicalize(n) for n in ("filey:007", "FILEY:0", "filey:/tmp/A b")] == [
        "FILEY:007", "FILEY:0", "FILEY:/tmp/A b"]  # fmt: skip
    with pytest.raises(ValueError, match="instance_suffix must be one of"):
        make_spec("BAD", suffix="anything")  # type: ignore[arg-type]


def test_device_spec_validation() -> None:
    with pytest.raises(ValueError, match="upper-case"):
        make_spec("cuda")
    with pytest.raises(ValueError, match="upper-case"):
        make_spec("CUDA:1")
    with pytest.raises(ValueError, match="api_version"):
        DeviceSpec("CUDA", (1,), 1, lambda: (True, ""), FakeCompiled)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="probe"):
        DeviceSpec("CUDA", (1, 0), 1, None, FakeCompiled)  # type: ignore[arg-type]


def test_api_version_rule() -> None:
    major, minor = PLUGIN_API_VERSION
    assert api_incompatibility((major, minor)) is None
    newer = api_incompatibility((major, minor + 1))
    assert newer is not None and f"{major}.{minor + 1}" in newer and f"{major}.{minor}" in newer
    other_major = api_incompatibility((major + 1, 0))
    assert other_major is not None and f"{major + 1}.0" in other_major and f"{major}.{minor}" in other_major


# ---------------------------------------------------------------------------------------------------------------------
# opening devices


def test_fake_device_opens_by_name_and_ordinal_zero() -> None:
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    dev = Device["FAKE"]
    assert isinstance(dev, FakeCompiled) and dev.device == "FAKE"
    assert Device["fake:0"] is dev and Device["fake"] is dev
    assert Device.opened("FAKE:0") is dev and opened_devices["FAKE"] is dev and get_device("FAKE") is dev
    second = Device["FAKE:1"]
    assert second is not dev and second.device == "FAKE:1" and Device.opened("FAKE:2") is None


def test_get_device_and_buffers_go_through_the_registry() -> None:
    import numpy as np

    from lazy.device import Buffer
    from lazy.dtype import dtypes

    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    buf = Buffer("FAKE", 4, dtypes.int32).copyin(np.arange(4, dtype=np.int32).data)
    np.testing.assert_equal(buf.numpy(), np.arange(4, dtype=np.int32))
    assert Device.opened("FAKE") is get_device("FAKE")


def test_path_argument_is_passed_verbatim_to_open() -> None:
    seen: list[str] = []

    def opener(name: str) -> Compiled:
        seen.append(name)
        return FakeCompiled(name)

    Device.register(DevicePlugin([make_spec("DISKY", opener=opener, suffix="path")]), "disky")
    assert Device["disky:/tmp/MixedCase.bin"].device == "DISKY:/tmp/MixedCase.bin"
    assert seen == ["DISKY:/tmp/MixedCase.bin"]


def test_reset_closes_opened_devices_and_forgets_plugins() -> None:
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    dev = Device["FAKE"]
    Device.reset(discover=False)
    assert (
        isinstance(dev, FakeCompiled) and dev.closed and "FAKE" not in opened_devices and Device.opened("FAKE") is None
    )
    with pytest.raises(DeviceError, match="unknown device 'FAKE'"):
        Device["FAKE"]


def test_unknown_device_lists_existing_devices_and_problems() -> None:
    register_zoo()
    with pytest.raises(DeviceError) as err:
        Device["NOPE:1"]
    msg = str(err.value)
    assert "unknown device 'NOPE:1'" in msg and "FAKE" in msg and "TWIN" in msg
    assert "driver table corrupted" in msg  # the plugin problems come with it


def test_unknown_device_with_no_plugins_says_how_to_install_one() -> None:
    with pytest.raises(DeviceError, match="pip install lazy-cpu"):
        Device["CPU"]


def test_failing_probe_raises_with_reason_and_plugin_name() -> None:
    gpu = make_spec("GPU", probe=lambda: (False, "libgpu.so not found"))
    Device.register(DevicePlugin([gpu]), "gpu", dist="lazy-gpu")
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    with pytest.raises(DeviceError, match="libgpu.so not found") as err:
        Device["GPU"]
    assert "'gpu'" in str(err.value) and "lazy-gpu" in str(err.value)
    assert Device.probe("gpu:3") == (False, "libgpu.so not found")
    assert isinstance(Device["FAKE"], FakeCompiled)  # the registry still works


def test_probe_that_raises_or_misbehaves_is_an_unusable_device() -> None:
    def broken_probe() -> tuple[bool, str]:
        raise OSError("permission denied on /dev/gpu0")

    Device.register(DevicePlugin([make_spec("GPU", probe=broken_probe)]), "gpu")
    Device.register(DevicePlugin([make_spec("ODD", probe=lambda: "yes")]), "odd")  # type: ignore[arg-type, return-value]
    assert Device.probe("GPU") == (False, "probe() raised OSError: permission denied on /dev/gpu0")
    assert Device.probe("ODD")[0] is False and "expected (usable: bool, reason: str)" in Device.probe("ODD")[1]


def test_probe_runs_once_per_process() -> None:
    calls = []

    def probe() -> tuple[bool, str]:
        calls.append(1)
        return True, "fine"

    Device.register(DevicePlugin([make_spec("FAKE", probe=probe)]), "fake")
    for _ in range(3):
        assert Device.probe("FAKE") == (True, "fine")
    Device["FAKE"], Device["FAKE:1"], Device.DEFAULT
    assert len(calls) == 1


def test_failed_open_is_not_cached_and_a_later_open_works() -> None:
    attempts: list[str] = []

    def flaky_open(name: str) -> Compiled:
        attempts.append(name)
        if len(attempts) == 1:
            raise RuntimeError("device busy")
        return FakeCompiled(name)

    Device.register(DevicePlugin([make_spec("FLAKY", opener=flaky_open)]), "flaky", dist="lazy-flaky")
    with pytest.raises(DeviceError, match="device busy") as err:
        Device["FLAKY"]
    assert "'flaky'" in str(err.value)
    assert Device.opened("FLAKY") is None and "FLAKY" not in opened_devices
    assert Device["FLAKY"] is Device["FLAKY"] and len(attempts) == 2


def test_open_returning_the_wrong_type_is_a_device_error() -> None:
    Device.register(DevicePlugin([make_spec("WRONG", opener=lambda name: object())]), "wrong")  # type: ignore[arg-type, return-value]
    with pytest.raises(DeviceError, match="not a lazy.device.Compiled"):
        Device["WRONG"]


# ---------------------------------------------------------------------------------------------------------------------
# failure isolation


def test_broken_plugins_are_listed_and_do_not_hide_the_good_one() -> None:
    register_zoo()
    assert isinstance(Device["FAKE"], FakeCompiled)
    assert set(Device.specs()) == {"FAKE"}
    fake = info("fake")
    assert (fake.status, fake.distribution, fake.version) == ("ok", "lazy-fake", "1.2")
    assert [s.name for s in fake.devices] == ["FAKE"]
    raiser = info("raiser")
    assert raiser.status == "error" and "RuntimeError: driver table corrupted" in raiser.reason
    future = info("future")
    core_api = f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]}"
    assert (
        future.status == "error" and "9.0" in future.reason and core_api in future.reason and "FUTURE" in future.reason
    )
    with pytest.raises(DeviceError, match="unknown device 'FUTURE'"):
        Device["FUTURE"]
    problems = {p.plugin: p for p in Device.problems()}
    assert set(problems) == {"raiser", "future", "twin_a", "twin_b"}
    assert "driver table corrupted" in problems["raiser"].detail  # the traceback is kept for `devices -v`


def test_name_collision_is_reported_and_neither_plugin_wins() -> None:
    register_zoo()
    for plugin in ("twin_a", "twin_b"):
        status, reason = info(plugin).status, info(plugin).reason
        assert status == "error" and "lazy-twin-a" in reason and "lazy-twin-b" in reason
    with pytest.raises(DeviceError, match="TWIN cannot be used") as err:
        Device["TWIN"]
    assert "twin_a" in str(err.value) and "twin_b" in str(err.value)
    usable, reason = Device.probe("TWIN")
    assert not usable and "twin_a" in reason and "twin_b" in reason
    with Context(PLUGINS="twin_b"):  # choosing one of them resolves it
        assert isinstance(Device["TWIN"], FakeCompiled) and Device.problems() == []


def test_bad_return_values_and_bad_specs_are_problems() -> None:
    def invalid_spec() -> list[DeviceSpec]:
        return [make_spec("lowercase")]

    Device.register(DevicePlugin(lambda: make_spec("SINGLE")), "notalist")  # type: ignore[arg-type, return-value]
    Device.register(DevicePlugin([{"name": "DICT"}]), "dicts")
    Device.register(DevicePlugin(invalid_spec), "invalid")
    Device.register(DevicePlugin([make_spec("TWICE"), make_spec("TWICE")]), "twice")
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    reasons = {p.plugin: p.reason for p in Device.problems()}
    assert "expected list[DeviceSpec]" in reasons["notalist"]
    assert "not a DeviceSpec" in reasons["dicts"]
    assert "ValueError" in reasons["invalid"] and "lowercase" in reasons["invalid"]
    assert "listed twice" in reasons["twice"]
    assert set(Device.specs()) == {"FAKE", "TWICE"}


class TypoPlugin:
    @hookimpl
    def lazy_device(self) -> list[DeviceSpec]:  # misspelled hook name
        return []


class BadArgsPlugin:
    @hookimpl
    def lazy_devices(self, flavour: str) -> list[DeviceSpec]:
        return []


def test_hook_typos_and_bad_signatures_are_problems() -> None:
    Device.register(TypoPlugin(), "typo")
    Device.register(BadArgsPlugin(), "badargs")
    reasons = {p.plugin: p.reason for p in Device.problems()}
    assert "'lazy_device'" in reasons["typo"] and "does not define" in reasons["typo"]
    assert "loading" in reasons["badargs"] and "flavour" in reasons["badargs"]


# ---------------------------------------------------------------------------------------------------------------------
# plugin code that exits or answers nonsense: isolated, reported, and never the end of the host program


def exits(code: Any = 3) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        sys.exit(code)

    return call


def test_plugin_whose_import_exits_is_a_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    (tmp_path / "lazy_test_exiting_plugin.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points(monkeypatch, ("good", f"{__name__}:EntryPointPlugin.instance"),
                      ("exiting", "lazy_test_exiting_plugin"))  # fmt: skip
    Device.reset()
    assert isinstance(Device["EPDEV"], FakeCompiled)
    exiting = info("exiting")
    assert exiting.status == "error" and exiting.reason == "loading lazy_test_exiting_plugin called sys.exit(3)"
    assert "SystemExit: 3" in Device.problems()[0].detail  # the traceback, for `devices -v`


def test_hooks_that_exit_are_problems_of_their_plugin() -> None:
    class ExitingFailures:
        @hookimpl
        def lazy_known_failures(self, device: str) -> list[str]:
            sys.exit("no list today")

    Device.register(DevicePlugin(exits()), "exiting")
    Device.register(ExitingFailures(), "exiting_failures")
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    assert info("exiting").status == "error" and info("exiting").reason == "lazy_devices() called sys.exit(3)"
    assert Device.known_failures("FAKE") == []
    reasons = {p.plugin: p.reason for p in Device.problems()}
    assert reasons["exiting_failures"] == "lazy_known_failures('FAKE') called sys.exit('no list today')"
    assert Device.DEFAULT == "FAKE" and isinstance(Device["FAKE"], FakeCompiled)


def test_probe_or_open_that_exits_makes_the_device_unusable_and_asking_for_it_fails_loudly() -> None:
    Device.register(DevicePlugin([make_spec("HIGH", priority=1000, probe=exits())]), "high", dist="lazy-high")
    Device.register(DevicePlugin([make_spec("OPENX", priority=0, opener=exits(4))]), "openx")
    Device.register(DevicePlugin([make_spec("LOW", priority=1)]), "low")
    assert Device.DEFAULT == "LOW"  # the first Tensor() would not end the program: it runs on LOW
    assert Device.probe("HIGH") == (False, "probe() called sys.exit(3)")
    with pytest.raises(DeviceError, match=r"device HIGH \(plugin 'high' from lazy-high 0\).*probe\(\) called sys.exit"):
        Device["HIGH"]
    with pytest.raises(DeviceError, match=r"device OPENX \(plugin 'openx'.*open\('OPENX'\) called sys.exit\(4\)"):
        Device["OPENX"]
    assert Device.opened("OPENX") is None
    problem = next(p for p in Device.problems() if p.plugin == "high")
    assert problem.reason == "device HIGH: probe() called sys.exit(3)" and "SystemExit" in problem.detail


def test_ctrl_c_in_plugin_code_still_stops_the_program() -> None:
    def interrupted() -> tuple[bool, str]:
        raise KeyboardInterrupt

    Device.register(DevicePlugin([make_spec("SLOW", probe=interrupted)]), "slow")
    with pytest.raises(KeyboardInterrupt):
        Device.probe("SLOW")


def test_close_that_exits_does_not_keep_the_other_devices_open() -> None:
    class ExitingClose(FakeCompiled):
        def close(self) -> None:
            sys.exit(5)

    Device.register(DevicePlugin([make_spec("BAD", opener=ExitingClose), make_spec("FAKE")]), "both")
    bad, fake = Device["BAD"], Device["FAKE"]
    Device.reset(discover=False)
    assert isinstance(fake, FakeCompiled) and fake.closed and "BAD" not in opened_devices and bad.device == "BAD"


@pytest.mark.parametrize("answer", [("no", "x"), None, (1,), (1, "x"), [True, "x"], (True, None), "yes"])
def test_probe_answer_must_be_exactly_a_bool_and_a_str(answer: Any) -> None:
    Device.register(DevicePlugin([make_spec("ODD", priority=99, probe=lambda: answer)]), "odd", dist="lazy-odd")
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    usable, reason = Device.probe("ODD")
    assert usable is False and reason.startswith(f"probe() returned {answer!r}; expected (usable: bool, reason: str)")
    with pytest.raises(DeviceError, match=r"device ODD \(plugin 'odd' from lazy-odd 0\) is not usable: probe\(\)"):
        Device["ODD"]
    assert [(p.plugin, p.reason) for p in Device.problems()] == [("odd", f"device ODD: {reason}")]
    assert Device.DEFAULT == "FAKE"


# ---------------------------------------------------------------------------------------------------------------------
# name clashes: the single first-party claimant keeps the name, every party is named


def test_device_name_clash_goes_to_the_first_party_plugin_and_names_both(capsys: pytest.CaptureFixture[str]) -> None:
    from lazy.__main__ import main

    Device.register(DevicePlugin([make_spec("CPU", priority=100)]), "cpu", dist="lazy-cpu", version="0.1")
    Device.register(DevicePlugin([make_spec("CPU", priority=5000, opener=exits()), make_spec("EXTRA")]), "evil",
                    dist="evil-lazy", version="9")  # fmt: skip
    assert (
        Device.DEFAULT == "CPU" and isinstance(Device["CPU"], FakeCompiled) and set(Device.specs()) == {"CPU", "EXTRA"}
    )
    [problem] = Device.problems()
    assert (problem.plugin, problem.distribution) == ("evil", "evil-lazy")
    assert problem.reason == ("device CPU is claimed by plugin 'cpu' from lazy-cpu 0.1 and plugin 'evil' from "
                              "evil-lazy 9; plugin 'cpu' from lazy-cpu 0.1 keeps it: a clash goes to the first-party "
                              "plugin; to use another one, leave 'cpu' out of LAZY_PLUGINS")  # fmt: skip
    assert (info("cpu").status, info("evil").status, info("evil").reason) == ("ok", "error", problem.reason)
    assert Device.probe("CPU", plugin="evil") == (False, problem.reason)
    assert Device.probe("CPU", plugin="cpu") == Device.probe("CPU") == (True, "always works")
    assert main(["devices", "--json"]) == 0
    evil = next(p for p in json.loads(capsys.readouterr().out)["plugins"] if p["name"] == "evil")
    assert [(d["name"], d["usable"], d["reason"]) for d in evil["devices"]] == [
        ("CPU", False, problem.reason), ("EXTRA", True, "always works")]  # fmt: skip
    with Context(PLUGINS="evil"):  # the way to the other one, as the report says
        assert Device.specs()["CPU"].priority == 5000 and Device.problems() == []


def test_entry_point_name_clash_goes_to_the_first_party_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("good", "lazy_no_such_plugin_module.plugin"))  # a third party's "good"
    Device.reset()
    Device.register(EntryPointPlugin(), "good", dist="lazy-core", version="0.1")
    with Context(PLUGINS="good"):  # LAZY_PLUGINS=good still finds the first-party one, and names the clash
        assert isinstance(Device["EPDEV"], FakeCompiled)
        [problem] = Device.problems()
        assert problem.reason == (
            "plugin name 'good' is claimed by an unnamed distribution (lazy_no_such_plugin_module.plugin) and "
            f"lazy-core 0.1 ({__name__}.EntryPointPlugin); lazy-core 0.1 ({__name__}.EntryPointPlugin) keeps it: a "
            "clash goes to the first-party plugin; the other one is not loaded: uninstall all but one (an entry-point "
            "name in group lazy.devices must be unique)"
        )
        assert [(p.name, p.status) for p in Device.plugins()] == [("good", "error"), ("good", "ok")]
    with Context(PLUGINS="other"):  # a clash between disabled plugins is nobody's problem
        assert [p.plugin for p in Device.problems()] == ["other"]


# ---------------------------------------------------------------------------------------------------------------------
# the default device


def test_default_is_highest_priority_usable_and_never_a_by_name_only_device() -> None:
    Device.register(DevicePlugin([make_spec("SLOW", priority=10), make_spec("FAST", priority=90)]), "both")
    Device.register(DevicePlugin([make_spec("BROKEN", priority=200, probe=lambda: (False, "no driver"))]), "broken")
    Device.register(DevicePlugin([make_spec("PYREF", priority=1000, default_ok=False)]), "pyref")
    assert Device.DEFAULT == "FAST"


def test_context_device_changes_default() -> None:
    Device.register(DevicePlugin([make_spec("FAKE", priority=1), make_spec("OTHER", priority=5)]), "fake")
    assert Device.DEFAULT == "OTHER"
    with Context(DEVICE="fake"):
        assert Device.DEFAULT == "FAKE"
    with Context(DEVICE="FAKE:1"):
        assert Device.DEFAULT == "FAKE:1"
    assert Device.DEFAULT == "OTHER"


def test_requested_device_that_is_unusable_or_unknown_never_falls_back() -> None:
    Device.register(DevicePlugin([make_spec("GOOD", priority=100)]), "good")
    Device.register(DevicePlugin([make_spec("GPU", priority=1, probe=lambda: (False, "no GPU driver"))]), "gpu")
    with Context(DEVICE="GPU"):
        with pytest.raises(DeviceError, match="LAZY_DEVICE=GPU is not usable.*no GPU driver"):
            _ = Device.DEFAULT
    with Context(DEVICE="MISSING"):
        with pytest.raises(DeviceError, match="LAZY_DEVICE=MISSING: unknown device 'MISSING'; devices: GOOD, GPU"):
            _ = Device.DEFAULT
    with pytest.raises(DeviceError, match="no GPU driver"):
        Device["GPU"]
    assert Device.opened("GOOD") is None  # nothing was opened as a substitute


def test_no_usable_device_explains_how_to_fix_it() -> None:
    with pytest.raises(DeviceError, match="no device plugin is installed.*pip install lazy-cpu.*lazy devices"):
        _ = Device.DEFAULT
    Device.register(DevicePlugin([make_spec("GPU", probe=lambda: (False, "no GPU driver"))]), "gpu")
    Device.register(DevicePlugin([make_spec("PYREF", default_ok=False)]), "pyref")
    with pytest.raises(DeviceError, match="GPU .*'gpu'.*: no GPU driver.*LAZY_DEVICE=PYREF.*pip install lazy-cpu"):
        _ = Device.DEFAULT
    with Context(DEVICE="PYREF"):
        assert Device.DEFAULT == "PYREF"


def test_fallback_from_an_unusable_higher_priority_device_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    from lazy.__main__ import main

    Device.register(DevicePlugin([make_spec("HIGH", priority=200, probe=lambda: (False, "no driver"))]), "high")
    Device.register(DevicePlugin([make_spec("TWIN", priority=150)]), "twin_a", dist="lazy-twin-a")
    Device.register(DevicePlugin([make_spec("TWIN", priority=150)]), "twin_b", dist="lazy-twin-b")
    Device.register(DevicePlugin([make_spec("LOW", priority=100), make_spec("LOWER", priority=1)]), "low")
    with Context(DEBUG=1):
        assert Device.DEFAULT == "LOW" and Device.DEFAULT == "LOW"
    err = capsys.readouterr().err
    why = ("the highest-priority usable device, priority 100; chosen over unusable HIGH (priority 200, plugin 'high' "
           "from test 0): no driver; TWIN (priority 150): device TWIN is claimed by plugin 'twin_a' from lazy-twin-a 0 "
           "and plugin 'twin_b' from lazy-twin-b 0; none of them gets it")  # fmt: skip
    assert (
        err.count("lazy: default device") == 1 and f"lazy: default device LOW (plugin 'low' from test 0): {why}" in err
    )
    assert Device.explain_default()[1].startswith(why)
    assert main(["devices"]) == 0
    assert f"default device: LOW ({why}" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------------------
# LAZY_PLUGINS


def test_allow_list_disables_the_others_and_reports_them() -> None:
    register_zoo()
    with Context(PLUGINS="fake"):
        assert set(Device.specs()) == {"FAKE"} and Device.problems() == []
        statuses = {p.name: (p.status, p.reason) for p in Device.plugins()}
        assert statuses["fake"] == ("ok", "")
        assert statuses["raiser"] == ("disabled", "disabled by LAZY_PLUGINS=fake")
        assert statuses["twin_a"][0] == statuses["twin_b"][0] == "disabled"
        with pytest.raises(DeviceError, match="disabled by LAZY_PLUGINS=fake: raiser"):
            Device["TWIN"]
    assert info("raiser").status == "error"  # leaving the context brings everything back


def test_allow_list_name_that_is_not_installed_is_a_problem() -> None:
    Device.register(DevicePlugin([make_spec("FAKE")]), "fake")
    with Context(PLUGINS=" fake , cuda"):
        assert [(p.plugin, "not installed" in p.reason) for p in Device.problems()] == [("cuda", True)]
        assert info("cuda").status == "error" and "installed: fake" in info("cuda").reason
        assert isinstance(Device["FAKE"], FakeCompiled)


# ---------------------------------------------------------------------------------------------------------------------
# entry-point discovery


class EntryPointPlugin:
    """Loaded by a fake entry point `{__name__}:EntryPointPlugin.instance`."""

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        return [make_spec("EPDEV")]


EntryPointPlugin.instance = EntryPointPlugin()  # type: ignore[attr-defined]


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, *eps: tuple[str, str]) -> list[str]:
    """Make discovery see entry points (name, value), of no distribution; returns the groups it was asked for."""
    asked: list[str] = []

    def read() -> list[lazy_plugins._Candidate]:
        asked.append(lazy_plugins.ENTRY_POINT_GROUP)
        return [lazy_plugins._Candidate(name, "", "", value, functools.partial(lazy_plugins._load_entry_point, value))
                for name, value in eps]  # fmt: skip

    monkeypatch.setattr(lazy_plugins, "_read_entry_points", read)
    return asked


def test_entry_points_are_read_lazily_and_broken_ones_are_isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_entry_points(monkeypatch, ("good", f"{__name__}:EntryPointPlugin.instance"),
                              ("missing", "lazy_no_such_plugin_module.plugin"))  # fmt: skip
    Device.reset()
    assert asked == []  # nothing is imported until the registry is used
    assert isinstance(Device["EPDEV"], FakeCompiled) and asked == ["lazy.devices"]
    missing = info("missing")
    assert missing.status == "error" and "ModuleNotFoundError" in missing.reason
    assert "lazy_no_such_plugin_module" in missing.reason
    assert info("good").module == f"{__name__}:EntryPointPlugin.instance"


def test_disabled_entry_point_is_never_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("good", f"{__name__}:EntryPointPlugin.instance"),
                      ("missing", "lazy_no_such_plugin_module.plugin"))  # fmt: skip
    Device.reset()
    with Context(PLUGINS="good"):
        assert Device.problems() == [] and info("missing").status == "disabled"


def test_duplicate_entry_point_names_are_refused_for_both(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("dup", f"{__name__}:EntryPointPlugin.instance"), ("dup", "other_module.plugin"))
    Device.reset()
    assert [p.plugin for p in Device.problems()] == ["dup"] and "is claimed by" in Device.problems()[0].reason
    assert (
        "other_module.plugin" in Device.problems()[0].reason and "none of them gets it" in Device.problems()[0].reason
    )
    assert info("dup").status == "error" and Device.specs() == {}


def test_no_entry_points_at_all_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch)
    Device.reset()
    assert Device.plugins() == [] and Device.problems() == []
    with pytest.raises(DeviceError, match="pip install lazy-cpu"):
        _ = Device.DEFAULT


def test_core_registers_its_python_device_through_an_installed_entry_point() -> None:
    """Core's own device is found like any plugin's: through the `lazy.devices` entry point of lazy-core."""
    eps = [ep for ep in importlib.metadata.entry_points(group="lazy.devices") if ep.name == "python"]
    assert [ep.value for ep in eps] == ["lazy.pydevice"], "install lazy-core (pip install -e ./core) to run the tests"


def _listing(candidates: list[Any]) -> list[tuple[str, str, str, str]]:
    return sorted((c.name, c.distribution, c.version, c.module) for c in candidates)


def test_entry_points_are_what_importlib_metadata_finds() -> None:
    """Discovery reads entry_points.txt itself (importing importlib.metadata cost 25-55 ms of the first device):
    the same plugins, distributions and versions as importlib.metadata's reader, here and in a site of its own."""
    assert _listing(lazy_plugins._read_entry_points()) == _listing(lazy_plugins._read_entry_points_importlib())


def _dist(site: pathlib.Path, folder: str, header: str, entry_points: str) -> None:
    (site / folder).mkdir(parents=True)
    (site / folder / ("PKG-INFO" if folder.endswith(".egg-info") else "METADATA")).write_text(header)
    (site / folder / "entry_points.txt").write_text(entry_points)


def test_entry_points_of_a_site_the_first_distribution_of_a_name_wins(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    eps = (
        "# a comment\n[console_scripts]\nnot_this = x:y\n\n[lazy.devices]\n# another\nalpha = alpha_mod:plugin [gpu]\n"
    )
    _dist(first, "Alpha_Dev-1.0.dist-info", "Metadata-Version: 2.1\nName: alpha-dev\nVersion: 1.0\n\nbody\n", eps)
    _dist(second, "alpha_dev-2.0.dist-info", "Name: alpha-dev\nVersion: 2.0\n", "[lazy.devices]\nalpha = old:plugin\n")
    _dist(second, "beta-0.3.egg-info", "Name: beta\nVersion: 0.3\n", "[lazy.devices]\nbeta = beta_mod\n")
    (first / "alpha_mod.py").write_text("plugin = object()\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), str(tmp_path / "missing")])
    got = lazy_plugins._read_entry_points()
    assert _listing(got) == [
        ("alpha", "alpha-dev", "1.0", "alpha_mod:plugin [gpu]"),
        ("beta", "beta", "0.3", "beta_mod"),
    ]
    assert _listing(got) == _listing(lazy_plugins._read_entry_points_importlib())
    try:
        assert got[0].load() is sys.modules["alpha_mod"].plugin
    finally:
        sys.modules.pop("alpha_mod", None)


def test_a_zip_on_sys_path_is_read_by_importlib_metadata(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plugins.zip").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "plugins.zip")])
    monkeypatch.setattr(lazy_plugins, "_read_entry_points_importlib", lambda: ["from importlib.metadata"])
    assert lazy_plugins._read_entry_points() == ["from importlib.metadata"]


# ---------------------------------------------------------------------------------------------------------------------
# lazy_known_failures


def test_known_failures_hook_collects_from_enabled_plugins_and_isolates_errors() -> None:
    class RaisingFailures:
        @hookimpl
        def lazy_known_failures(self, device: str) -> list[str]:
            raise KeyError(device)

    failures = {"FAKE": ["test_ops.py::test_exp2[float16]", "test_hcq.py::test_timestamps"]}
    Device.register(DevicePlugin([make_spec("FAKE")], known_failures=failures), "fake")
    Device.register(DevicePlugin([make_spec("OTHER")], known_failures={"FAKE": ["test_x.py::test_y"]}), "other")
    Device.register(RaisingFailures(), "raising")
    assert Device.known_failures("fake:0") == [*failures["FAKE"], "test_x.py::test_y"]
    assert [p.plugin for p in Device.problems()] == ["raising"] and "KeyError" in Device.problems()[0].reason
    with Context(PLUGINS="fake"):
        assert Device.known_failures("FAKE") == failures["FAKE"]
    assert Device.known_failures("OTHER") == []


# ---------------------------------------------------------------------------------------------------------------------
# python -m lazy devices


def test_cli_json_lists_good_and_broken_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    from lazy.__main__ import main

    register_zoo()
    Device.register(DevicePlugin([make_spec("GPU", probe=lambda: (False, "no GPU driver"))]), "gpu")
    assert main(["devices", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["api_version"] == "{}.{}".format(*PLUGIN_API_VERSION) and report["default"] == "FAKE"
    assert report["core_version"] and "highest-priority usable" in report["default_reason"]
    plugins = {p["name"]: p for p in report["plugins"]}
    assert {"fake", "raiser", "future", "twin_a", "twin_b", "gpu"} <= set(plugins)
    assert plugins["fake"]["status"] == "ok" and plugins["fake"]["distribution"] == "lazy-fake"
    assert plugins["fake"]["devices"] == [{"name": "FAKE", "priority": 50, "usable": True, "reason": "always works",
                                           "default_ok": True, "description": ""}]  # fmt: skip
    assert plugins["raiser"]["status"] == "error" and "driver table corrupted" in plugins["raiser"]["reason"]
    assert plugins["gpu"]["devices"][0]["usable"] is False and plugins["gpu"]["devices"][0]["reason"] == "no GPU driver"
    assert plugins["twin_a"]["devices"][0]["usable"] is False


def test_cli_table_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from lazy.__main__ import main

    register_zoo()
    with Context(PLUGINS="fake,raiser,nothere"):
        assert main(["devices", "-v"]) == 0
    out = capsys.readouterr().out
    assert "lazy-fake 1.2" in out and "usable (default)" in out and "default device: FAKE" in out
    assert "disabled by LAZY_PLUGINS" in out and "nothere" in out and "Traceback" in out
    with Context(DEVICE="NOPE"):
        assert main(["devices"]) == 0
    assert "default device: none: LAZY_DEVICE=NOPE: unknown device" in capsys.readouterr().out
    assert main([]) == 2 and "usage: python -m lazy devices" in capsys.readouterr().out


def test_python_dash_m_lazy_devices_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env["PYTHONPATH"] = str(REPO / "core" / "src")
    proc = subprocess.run([sys.executable, "-m", "lazy", "devices"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "plugin API {}.{}".format(*PLUGIN_API_VERSION) in proc.stdout and "default device:" in proc.stdout

"""Runs the conformance suite in-process with pytest against one device, applies the device's known failures, and
writes the reports (a Markdown table of layer x outcome, and JSON with versions, counts and every test)."""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from lazy.conformance import LAYERS, fixtures

SUITE_DIR = pathlib.Path(__file__).parent
OUTCOMES = ("passed", "failed", "skipped", "known_failures")
_LAYER_OF_MODULE = re.compile(r"test_\d+_(\w+)")


@dataclass
class TestRecord:
    __test__ = False  # not a pytest test class

    id: str  # pytest node id relative to the suite, e.g. "test_20_kernels.py::test_alu[ADD-float]"
    layer: str
    outcome: str = "passed"  # one of OUTCOMES
    message: str = ""  # the failure, skip reason, or the known-failure entry that matched


def layer_of(nodeid: str) -> str:
    stem = pathlib.PurePosixPath(nodeid.split("::")[0]).stem
    return m.group(1) if (m := _LAYER_OF_MODULE.fullmatch(stem)) else stem


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


class ConformancePlugin:
    """The pytest plugin object: tells `fixtures` the device, marks known failures, records every outcome."""

    def __init__(self, device: str, known_failures: list[str]):
        self.device_name_value = device
        self.known_failures = list(known_failures)
        self.matched: set[str] = set()
        self.records: dict[str, TestRecord] = {}

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[fixtures.DEVICE_KEY] = self.device_name_value

    # ---- known failures and recording ------------------------------------------------------------------------------

    def known_entry(self, nodeid: str) -> str | None:
        for entry in self.known_failures:
            if entry == nodeid or fnmatch.fnmatchcase(nodeid, entry):
                self.matched.add(entry)
                return entry
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        entry = self.known_entry(report.nodeid)
        if entry is not None and report.when in ("setup", "call"):
            if report.failed:
                report.outcome = "skipped"
                report.wasxfail = f"known failure (entry {entry!r}): {report.longreprtext.strip().splitlines()[-1:]}"
                report.known_failure_text = report.longreprtext
            elif report.passed and report.when == "call":
                report.outcome = "failed"
                device = self.device_name_value
                report.longrepr = (f"stale known-failure entry {entry!r}: this test passes on {device}; "
                                   f"remove the entry from the plugin's lazy_known_failures")  # fmt: skip
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = self.records.setdefault(report.nodeid, TestRecord(report.nodeid, layer_of(report.nodeid)))
        if record.outcome == "failed":
            return
        if report.skipped and hasattr(report, "wasxfail"):
            record.outcome = "known_failures"
            record.message = getattr(report, "known_failure_text", "") or str(report.wasxfail)
        elif report.failed:
            record.outcome, record.message = "failed", report.longreprtext
        elif report.skipped and record.outcome != "known_failures":
            record.outcome, record.message = "skipped", _skip_reason(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a layer that cannot even be imported: its tests are failures, not a crash of the run
            message = "collecting this layer failed:\n" + report.longreprtext
            self.records[report.nodeid] = TestRecord(report.nodeid, layer_of(report.nodeid), "failed", message)
        elif report.skipped and report.nodeid:
            self.records[report.nodeid] = TestRecord(report.nodeid, layer_of(report.nodeid), "skipped",
                                                     _skip_reason(report))  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# the result and its reports


@dataclass
class ConformanceResult:
    device: str
    versions: dict[str, str]
    tests: list[TestRecord]
    pytest_exit: int
    notes: list[str] = field(default_factory=list)

    def counts(self, layer: str | None = None) -> dict[str, int]:
        tests = [t for t in self.tests if layer is None or t.layer == layer]
        return {outcome: sum(t.outcome == outcome for t in tests) for outcome in OUTCOMES}

    def layers(self) -> list[str]:
        seen = {t.layer for t in self.tests}
        return [layer for layer in LAYERS if layer in seen] + sorted(seen - set(LAYERS))

    @property
    def exit_code(self) -> int:
        if self.counts()["failed"]:
            return 1
        if self.pytest_exit in (2, 3, 4, 5):  # interrupted, internal error, usage error, no tests collected
            return int(self.pytest_exit)
        return 0

    def summary_line(self) -> str:
        c = self.counts()
        return (f"{self.device}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, "
                f"{c['known_failures']} known failures")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "versions": self.versions, "summary": self.counts(),
                "layers": {layer: self.counts(layer) for layer in self.layers()},
                "tests": [asdict(t) for t in self.tests], "notes": self.notes}  # fmt: skip

    def to_markdown(self) -> str:
        lines = [f"# lazy conformance: {self.device}", ""]
        lines += ["versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()), ""]
        lines += ["| layer | passed | failed | skipped | known failures |", "| --- | ---: | ---: | ---: | ---: |"]
        for layer in self.layers():
            c = self.counts(layer)
            lines.append(f"| {layer} | {c['passed']} | {c['failed']} | {c['skipped']} | {c['known_failures']} |")
        c = self.counts()
        lines += [f"| **total** | {c['passed']} | {c['failed']} | {c['skipped']} | {c['known_failures']} |", ""]
        lines += [f"> {note}" for note in self.notes]
        sections = (("failed", "Failures"), ("known_failures", "Known failures"), ("skipped", "Skips"))
        for outcome, title in sections:
            tests = [t for t in self.tests if t.outcome == outcome]
            if not tests:
                continue
            lines += [f"## {title}", ""]
            for t in tests:
                if outcome == "skipped":
                    lines.append(f"- `{t.id}`: {t.message}")
                else:
                    lines += [f"### `{t.id}`", "", "```text", _tail(t.message), "```", ""]
            lines.append("")
        return "\n".join(lines)


def _tail(text: str, max_lines: int = 40) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines if len(lines) <= max_lines else ["...", *lines[-max_lines:]])


def check_device(device: str) -> str:
    """`device`'s canonical name when the registry knows it and its probe says it is usable. Else DeviceError, one line
    naming the known devices (and why this one is unusable): a run could only fail every test of the suite."""
    from lazy.device import DeviceError
    from lazy.plugins import Device

    known = ", ".join(sorted(Device.specs())) or "none, install a device plugin (pip install lazy-cpu)"
    known += "; see `python -m lazy devices`"
    try:
        canon = Device.canonicalize(device)
    except DeviceError as e:  # a malformed name, or a suffix the device does not take ('CPU:abc')
        raise DeviceError(f"{e}; known devices: {known}") from None
    try:
        usable, reason = Device.probe(canon)
    except DeviceError:  # the registry's own message goes on for lines with every plugin problem
        raise DeviceError(f"unknown device {device!r}; known devices: {known}") from None
    if not usable:
        reason = " ".join(reason.splitlines())
        raise DeviceError(f"device {canon} is not usable: {reason}; known devices: {known}")
    return canon


def emulated_device(device: str) -> tuple[str, str] | None:
    """(device, target label) that `device` emulates: the `LAZY_EMULATE` target when it is a PYTHON instance and the
    setting is on, else None. DeviceError (naming what to set) when that target cannot be had, before any test."""
    from lazy.plugins import Device
    from lazy.pydevice import emulate_setting, find_emulation

    if Device.canonicalize(device).partition(":")[0] != "PYTHON" or not (setting := emulate_setting()):
        return None
    return setting, find_emulation(setting).label


def device_versions(device: str) -> dict[str, str]:
    """lazy-core's version and that of the distribution that provides `device`."""
    from lazy.plugins import Device, PluginFailure, call_plugin, core_version

    versions = {"lazy-core": core_version()}
    in_use = Device.specs().get(Device.canonicalize(device).partition(":")[0])
    for info in Device.plugins():
        for spec in info.devices:
            if spec is not in_use:  # (another device, or the same name claimed by a plugin that lost the clash)
                continue
            if info.distribution:
                versions[info.distribution] = info.version or "unknown"
            if spec.library_versions is None:
                continue
            # plugin code: its failure (sys.exit() included) goes into the report instead of ending the run
            found = call_plugin(spec.library_versions)
            if isinstance(found, PluginFailure):
                versions["library_versions"] = f"error: library_versions() {found}"
            elif not isinstance(found, dict):
                versions["library_versions"] = f"error: library_versions() returned {found!r}, not a dict"
            else:
                versions.update({str(k): str(v) for k, v in found.items()})
    return versions


def forget_suite_modules(suite: pathlib.Path) -> None:
    """pytest's importlib mode reuses a module already imported under a suite file's name (from another suite
    directory, in a process that ran one before): drop them, so a run imports the files it is given."""
    for path in suite.glob("test_*.py"):
        sys.modules.pop(path.stem, None)


def run_conformance(
    device: str,
    *,
    report: str | os.PathLike[str] | None = None,
    json_path: str | os.PathLike[str] | None = None,
    keyword: str | None = None,
    exitfirst: bool = False,
    extra_args: list[str] | tuple[str, ...] = (),
    known_failures: list[str] | None = None,
    suite_dir: str | os.PathLike[str] | None = None,
) -> ConformanceResult:
    """Run the suite (or the test modules in `suite_dir`) against `device` and write the reports asked for.

    `known_failures`: defaults to what the plugins answer through the `lazy_known_failures` hook. Raises DeviceError
    (`check_device`, `emulated_device`) before running anything when `device` is unknown or unusable. PYTHON under
    `LAZY_EMULATE=NAME` is reported as "PYTHON emulating NAME <target>", with NAME's plugin's versions.
    """
    from lazy.plugins import Device

    device = check_device(device)
    emulated = emulated_device(device)
    if known_failures is None:
        known_failures = Device.known_failures(device)
    versions = {**device_versions(device), **(device_versions(emulated[0]) if emulated else {})}
    suite = pathlib.Path(suite_dir) if suite_dir is not None else SUITE_DIR
    plugin = ConformancePlugin(device, known_failures)
    args = [str(suite), "--rootdir", str(suite), "-c", os.devnull, "-p", "no:cacheprovider", "--import-mode=importlib",
            "--continue-on-collection-errors", "-q", "-rs"]  # fmt: skip
    if keyword:
        args += ["-k", keyword]
    if exitfirst:
        args.append("-x")
    forget_suite_modules(suite)
    exit_code = pytest.main([*args, *extra_args], plugins=[plugin, fixtures])
    tests = list(plugin.records.values())
    if not (keyword or exitfirst or extra_args):  # a full run: an entry that matched nothing is stale too
        for entry in plugin.known_failures:
            if entry not in plugin.matched:
                message = f"stale known-failure entry {entry!r}: it matches no test of the suite; remove it"
                tests.append(TestRecord(entry, layer_of(entry), "failed", message))
    label = f"{device} emulating {emulated[1]}" if emulated else device
    result = ConformanceResult(label, versions, tests, int(exit_code))
    if report is not None:
        pathlib.Path(report).write_text(result.to_markdown())
    if json_path is not None:
        pathlib.Path(json_path).write_text(json.dumps(result.to_json(), indent=2))
    return result

"""Plumbing shared by every test directory (tests/ and each plugin's tests/).

A test worker of pytest-xdist that dies of a signal (a segfault in a kernel, in a compiler, in a native library) is
reported by the controller as "node down: Not properly terminated" and nothing more: the worker's stderr, where
Python's fault handler writes the stacks, is not shown. So each worker writes its fault handler's output to a file
of its own, and the run's summary prints every file that has something in it.

A test that runs past pytest-timeout's limit fails with the stacks of every thread, but what hung may go on: a kernel
spinning on a device's queue thread cannot be interrupted, and every later test of that worker would wait behind it
(in CI: each failing after the full limit, until the job's own time ran out). So a worker whose test timed out ends
once that test is reported, and pytest-xdist goes on with a fresh one.

A test that opens an optional device says so with `@pytest.mark.devices(...)` (on the test, or on one parameter:
`pytest.param("CL", marks=pytest.mark.devices("CL"))`): where one of them is not usable on this machine (its plugin's
probe says why: no driver, a driver whose compiler does not know the processor), the test is skipped with that reason
instead of failing at the device's open."""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from pathlib import Path

import pytest

CRASH_DIR = "LAZY_TEST_CRASH_DIR"  # set by the controller, read by its workers (they inherit its environment)


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which points the handler at stderr
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "devices(*names): skipped, saying why, unless every named device is usable")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        if config.pluginmanager.hasplugin("xdist") and CRASH_DIR not in os.environ:
            os.environ[CRASH_DIR] = _made[0] = tempfile.mkdtemp(prefix="lazy-test-crashes-")
        return
    if (folder := os.environ.get(CRASH_DIR)) is not None:
        log = open(Path(folder) / f"{worker}.log", "a")  # noqa: SIM115 (open until the process ends)
        config.stash[_LOG] = log
        faulthandler.enable(file=log, all_threads=True)


_LOG = pytest.StashKey[object]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = [name for marker in item.iter_markers("devices") for name in marker.args]
    if not names:
        return
    from lazy.device import DeviceError
    from lazy.plugins import Device

    for name in names:
        try:
            usable, reason = Device.probe(name)
        except DeviceError:
            continue  # (not a device this machine has a plugin for: the test itself says what it expects)
        if not usable:
            pytest.skip(f"{name} is not usable here: {reason}")


_timed_out = [False]  # a test of this process ran past pytest-timeout's limit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    _timed_out[0] |= report.failed and "from pytest-timeout" in str(report.longrepr)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if _timed_out[0] and os.environ.get("PYTEST_XDIST_WORKER"):
        os._exit(3)  # its reports are sent; the controller reports the test again as crashed and starts a new worker


_made = [""]  # the folder this controller made (removed at its end; one a caller set is left alone)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or (folder := os.environ.get(CRASH_DIR)) is None:
        return
    for log in sorted(Path(folder).glob("*.log")):
        text = log.read_text(errors="replace").strip()
        if text:
            terminalreporter.write_sep("=", f"worker {log.stem} died: its fault handler wrote")
            terminalreporter.write_line(text[-20000:])


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None and _made[0]:
        os.environ.pop(CRASH_DIR, None)
        shutil.rmtree(_made[0], ignore_errors=True)

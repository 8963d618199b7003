"""The probe's compile check: an OpenCL driver that loads and lists its devices but cannot build a one-line kernel
(PoCL 3.0 from pip on a processor newer than its LLVM 14) makes CL unusable, with the reason, instead of failing at
the first kernel; the answer is checked in a subprocess once and cached on disk."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import lazy_opencl
from lazy.device import DeviceError

pytest.importorskip("pyopencl", reason="lazy-opencl's pyopencl is not installed")


@pytest.fixture
def fresh_check(tmp_path, monkeypatch):
    """compile_check without this process's memo, against an empty cache; counts the subprocesses it starts."""
    from lazy.helpers import Context

    lazy_opencl.compile_check.cache_clear()
    runs: list[list[str]] = []
    real_run = subprocess.run

    def counted(args, **kwargs):
        runs.append(args)
        return real_run(args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counted)
    with Context(CACHE_DIR=str(tmp_path)):
        yield runs
    lazy_opencl.compile_check.cache_clear()


def build_in_this_process() -> list[str | None]:
    """What building the one-line kernel on each device gives, here and now (the check's answer must agree)."""
    from lazy_opencl.device import all_devices, build_failure

    try:
        return [build_failure(d) for d in all_devices()]
    except DeviceError:
        return []


def test_the_check_agrees_with_a_build_here_and_is_cached(fresh_check):
    found = lazy_opencl.compile_check()
    assert found is not None, "the check ran to its end"
    assert [log is None for _, log in found] == [log is None for log in build_in_this_process()]
    assert len(fresh_check) == 1
    lazy_opencl.compile_check.cache_clear()  # as a new process: the answer comes from the disk cache
    assert lazy_opencl.compile_check() == found and len(fresh_check) == 1


def test_the_probe_follows_the_check(fresh_check):
    usable, reason = lazy_opencl.probe_cl()
    found = lazy_opencl.compile_check()
    assert found is not None and found, "PoCL is installed in the test environment: it lists a device"
    assert usable == (found[0][1] is None), reason
    if not usable:
        assert "cannot compile" in reason and found[0][0] in reason


def test_a_damaged_cache_entry_is_checked_again(fresh_check, tmp_path):
    found = lazy_opencl.compile_check()
    (entry,) = [p for p in (tmp_path / "probe").rglob("*") if p.is_file()]
    entry.write_bytes(entry.read_bytes()[:-3] + b"xyz")  # fails its checksum
    lazy_opencl.compile_check.cache_clear()
    assert lazy_opencl.compile_check() == found and len(fresh_check) == 2
    lazy_opencl.compile_check.cache_clear()
    assert lazy_opencl.compile_check() == found and len(fresh_check) == 2, "the entry was replaced"


def test_a_check_that_cannot_finish_is_not_an_answer(fresh_check, monkeypatch, tmp_path):
    monkeypatch.setattr(lazy_opencl, "CHECK_SCRIPT", "import time; time.sleep(30)")
    monkeypatch.setattr(lazy_opencl, "CHECK_TIMEOUT", 0.5)
    assert lazy_opencl.compile_check() is None and lazy_opencl.cannot_compile(0) is None  # unknown: opening tells
    assert not [p for p in tmp_path.rglob("*") if p.is_file()], "nothing cached"
    monkeypatch.setattr(lazy_opencl, "CHECK_SCRIPT", "import sys; sys.exit(3)")  # a check that crashes
    lazy_opencl.compile_check.cache_clear()
    assert lazy_opencl.compile_check() is None


def test_an_unknown_processor_is_named_with_the_way_out():
    log = "error: unknown target CPU 'generic'\nDevice pthread-AMD EPYC failed to build the program"
    why = lazy_opencl.unusable_reason("CL (pthread-AMD EPYC)", log, "AMD EPYC (family 26, model 2)")
    assert why.startswith("CL (pthread-AMD EPYC) cannot compile kernels"), why
    assert "AMD EPYC (family 26, model 2)" in why and "unknown target CPU 'generic'" in why
    assert "newer LLVM" in why and "CPU or LLVM device" in why
    other = lazy_opencl.unusable_reason("CL:1 (gpu)", "warning: x\nerror: out of resources\n", "cpu")
    assert other == "CL:1 (gpu) cannot compile a one-line kernel: error: out of resources"


def test_an_unusable_device_refuses_to_open_with_the_reason(fresh_check):
    """Where a device cannot compile, opening it says so at once (the registry's probe for CL, open_cl for CL:n)."""
    found = lazy_opencl.compile_check()
    assert found is not None
    from lazy.plugins import Device
    from lazy_opencl.device import open_cl

    for ordinal, (_, log) in enumerate(found):
        name = f"CL:{ordinal}" if ordinal else "CL"
        if log is None:
            continue
        with pytest.raises(DeviceError, match="cannot compile"):
            open_cl(name)
        if ordinal == 0:
            with pytest.raises(DeviceError, match="is not usable: .*cannot compile"):
                Device[name]
    if all(log is None for _, log in found):
        # every device compiles here: the script's own answer, run directly, says the same
        proc = subprocess.run([sys.executable, "-c", lazy_opencl.CHECK_SCRIPT], capture_output=True, text=True)
        assert [log for _, log in json.loads(proc.stdout.splitlines()[-1])] == [None] * len(found)

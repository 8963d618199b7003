"""The conformance suite's power: every deliberately broken device (tests/broken_devices) must fail the tests named
here, and the working CPU device must pass them. The runs go through the conformance runner with the broken devices
registered (as `python -m broken_devices --device NAME -k ...` does), one after another in one subprocess, each
limited to a few tests of the layer that should catch the fault.

All of them passing is a kill rate of 100%; `PYTHONPATH=tests python -m broken_devices.power` runs the whole suite
against each broken device and prints the table of what catches what.
"""

from __future__ import annotations

import pathlib

import pytest

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1]
DISCOVERY, ALLOCATOR, KERNELS = "test_00_discovery.py", "test_10_allocator.py", "test_20_kernels.py"
HCQ, TENSOR, OPS = "test_30_hcq.py", "test_40_tensor.py", "test_45_ops.py"

# broken device -> (pytest -k selection: a few tests of the layer that should catch it, the tests that must fail).
# The selections keep this test fast with a cold compile cache; `python -m broken_devices.power` runs everything.
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "BROKEN_ALIAS": ("test_alloc_free_many", [f"{ALLOCATOR}::test_alloc_free_many"]),
    "BROKEN_LRU_REUSE": ("test_alloc_free_many", [f"{ALLOCATOR}::test_alloc_free_many"]),
    "BROKEN_COPYIN": ("test_round_trip and (float or uchar)",
                      [f"{ALLOCATOR}::test_round_trip[dtypes.float-7]",
                       f"{ALLOCATOR}::test_round_trip[dtypes.uchar-4097]"]),
    "BROKEN_IDIV": ("test_idiv_mod or IDIV-int or test_integer_division",
                    [f"{KERNELS}::test_idiv_mod_on_negatives_truncate_toward_zero", f"{KERNELS}::test_alu[IDIV-int]",
                     f"{OPS}::test_integer_division_and_modulo_follow_python"]),
    "BROKEN_WHERE": ("test_alu and (WHERE-float or WHERE-half)",
                     [f"{KERNELS}::test_alu[WHERE-float]", f"{KERNELS}::test_alu[WHERE-half]"]),
    "BROKEN_CAST": ("float-to-int or (tensor and test_cast)",
                    [f"{KERNELS}::test_cast[float-to-int]", f"{TENSOR}::test_cast"]),
    "BROKEN_NO_BOOL": ("test_capabilities_are_valid or test_numpy_of_every",
                       [f"{DISCOVERY}::test_capabilities_are_valid", f"{OPS}::test_numpy_of_every_supported_dtype"]),
    "BROKEN_COMPILE_CACHE": ("test_alu and (ADD-int or MUL-int)", [f"{KERNELS}::test_alu[MUL-int]"]),
    "BROKEN_STALE_ARG": ("test_symbolic_size", [f"{KERNELS}::test_symbolic_size"]),
    "BROKEN_NOOP_WAIT": ("test_wait_orders_queues", [f"{HCQ}::test_wait_orders_queues"]),
    "BROKEN_NOOP_TIMESTAMP": ("test_timestamps_are_monotonic", [f"{HCQ}::test_timestamps_are_monotonic"]),
}  # fmt: skip

WORKING = "CPU"  # the device every broken one is made from: it must pass every test named above


def test_every_broken_device_is_checked():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TESTS_DIR))  # tests/ is not a package on the path
        from broken_devices import FIXTURES
        from broken_devices.parts import BREAKS

    assert set(EXPECTED) == set(FIXTURES) == set(BREAKS)


def test_suite_fails_every_broken_device_and_passes_the_working_one(tmp_path):
    # one test, one subprocess for every run: the start of Python, lazy and the suite is paid once, also under xdist
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TESTS_DIR))
        from broken_devices.power import run_suites

        runs: dict[str, str | None] = {device: keyword for device, (keyword, _) in EXPECTED.items()}
        runs[WORKING] = " or ".join(f"({keyword})" for keyword, _ in EXPECTED.values())
        outcomes = run_suites(runs, tmp_path)
    escaped = {device: missed for device, (_, must_fail) in EXPECTED.items()
               if (missed := {t: outcomes[device].get(t, "not run") for t in must_fail
                              if outcomes[device].get(t) != "failed"})}  # fmt: skip
    assert not escaped, f"kill rate {len(EXPECTED) - len(escaped)}/{len(EXPECTED)}; the suite let through: {escaped}"
    must_pass = {t for _, tests in EXPECTED.values() for t in tests}
    wrong = {t: outcomes[WORKING].get(t, "not run") for t in must_pass if outcomes[WORKING].get(t) != "passed"}
    wrong |= {t: "failed" for t, outcome in outcomes[WORKING].items() if outcome == "failed"}
    assert not wrong, f"the working device {WORKING} does not pass: {wrong}"

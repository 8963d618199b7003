"""Queues that cannot wedge, on core's simple tier (`SyncQueue`, which PYTHON and every simple-tier plugin get):
timeline values taken and submitted by several threads, a kernel that raises or is interrupted, waits that fail at
once when nothing will ever set the value and never while someone will, and a real Ctrl-C to a subprocess."""

from __future__ import annotations

import inspect
import threading
import time

import numpy as np
import pytest

import lazy.hcq
from lazy import Tensor
from lazy.conformance.support import run_interrupted
from lazy.device import Compiled, DeviceError
from lazy.hcq import HostSignal, SyncQueue, SyncSignal, poll
from lazy.pydevice import PythonProgram, open_python_device


@pytest.fixture
def dev() -> Compiled:
    return open_python_device("PYTHON")  # a private instance: tests may leave it in any state


def broken(exc: BaseException):
    def program(*args, **kwargs):
        raise exc

    return program


# --- the timeline ----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(20, method="thread")
def test_timeline_never_goes_back_when_values_are_submitted_out_of_order(dev):
    first, second = dev.next_value(), dev.next_value()  # two threads took these values ...
    dev.compute_queue_t().signal(dev.timeline_signal, second).submit(dev)  # ... and the second submitted first
    dev.compute_queue_t().signal(dev.timeline_signal, first).submit(dev)
    assert dev.timeline_signal.value > second  # the late one got a fresh value instead of setting `first`
    dev.synchronize()  # used to wait 60 s for `second` after the signal went back to `first`, then raise
    assert not dev.pending


# --- failures --------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(20, method="thread")
@pytest.mark.parametrize("exc", [ValueError("boom"), KeyboardInterrupt()], ids=["error", "interrupt"])
def test_a_failed_kernel_goes_to_the_submitter_and_its_signals_still_arrive(dev, exc):
    done = dev.signal_t(0)
    value = dev.next_value()
    queue = dev.compute_queue_t().exec(broken(exc), ()).signal(done, 1).signal(dev.timeline_signal, value)
    with pytest.raises(type(exc)):
        queue.submit(dev)
    assert done.value == 1 and dev.timeline_signal.value >= value  # nobody waiting for them hangs
    dev.synchronize()  # returns at once (it used to wait 60 s, then raise)
    dev.compute_queue_t().signal(dev.timeline_signal, dev.next_value()).submit(dev)
    dev.synchronize()
    assert not dev.pending


@pytest.mark.timeout(20, method="thread")
def test_tensor_ops_work_after_a_kernel_raised(monkeypatch):
    calls = {"n": 0}
    run = PythonProgram.__call__

    def fail_once(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # what Ctrl-C inside a PYTHON kernel looks like
        return run(self, *args, **kwargs)

    monkeypatch.setattr(PythonProgram, "__call__", fail_once)
    x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON").realize()
    with pytest.raises(KeyboardInterrupt):
        (x * 3).realize()
    np.testing.assert_array_equal(x.numpy(), [0, 1, 2, 3])  # a realized tensor reads back (it synchronizes)
    np.testing.assert_array_equal((Tensor([1.0, 2.0], device="PYTHON") + 1).numpy(), [2, 3])  # copyin, kernel


# --- waits -----------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(20, method="thread")
def test_a_wait_for_a_value_nothing_will_set_fails_at_once():
    with pytest.raises(DeviceError, match="deadlock"):
        SyncSignal(0).wait(1)  # used to wait 60 s, then say "timed out"


@pytest.mark.timeout(20, method="thread")
def test_a_wait_has_no_deadline_while_its_setter_is_alive(monkeypatch):
    monkeypatch.setattr(lazy.hcq, "WAIT_SLICE_S", 0.005)  # many progress checks during one wait
    sig, promised = HostSignal(0), threading.Event()

    def slow_setter() -> None:  # a long kernel: alive and busy, then sets the value
        sig.promise(1, threading.current_thread())
        promised.set()
        time.sleep(0.3)
        sig.value = 1

    setter = threading.Thread(target=slow_setter)
    setter.start()
    promised.wait()
    sig.wait(1)  # no deadline by default: still waiting after 60 progress checks is fine
    setter.join()
    assert sig.value == 1
    # the fixed 60 s default made a 9000x9000 CPU matmul fail with "timed out" although it was still running
    assert inspect.signature(HostSignal.wait).parameters["timeout"].default is None


@pytest.mark.timeout(20, method="thread")
def test_a_wait_fails_when_the_thread_that_was_to_set_it_is_gone():
    sig = HostSignal(0)
    setter = threading.Thread(target=lambda: sig.promise(1, threading.current_thread()), name="lazy-test-setter")
    setter.start()
    setter.join()  # it promised the value and ended without setting it (a dead queue worker)
    with pytest.raises(DeviceError, match="lazy-test-setter.*stopped"):
        sig.wait(1)


@pytest.mark.timeout(20, method="thread")
def test_a_queue_may_wait_for_a_value_the_host_sets_later(dev):
    gate, done = dev.signal_t(0), dev.signal_t(0)
    submitter = threading.Thread(target=lambda: SyncQueue().wait(gate, 1).signal(done, 1).submit(dev))
    submitter.start()
    time.sleep(0.05)
    assert done.value == 0  # held back by the gate
    gate.value = 1
    submitter.join()
    assert done.value == 1


# --- Ctrl-C ----------------------------------------------------------------------------------------------------------

# A pure-Python kernel of about 4M multiply-adds (many seconds) that says when it starts; Ctrl-C lands inside it.
SIGINT_SCRIPT = """
import sys, numpy as np
from lazy import Tensor
from lazy.pydevice import PythonProgram
a = Tensor(np.ones((160, 160), np.float32), device="PYTHON").realize()
small = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
run = PythonProgram.__call__
def announce(self, *args, **kwargs):
    print("launched", flush=True)
    return run(self, *args, **kwargs)
PythonProgram.__call__ = announce
try:
    (a @ a).numpy()
    print("finished before the interrupt", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    if sys.argv[1] == "raise":
        raise
    print("after:", a.numpy()[0, :2].tolist(), (small + 1).numpy().tolist(), flush=True)
"""


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_python_kernel_exits():
    code, out = run_interrupted(SIGINT_SCRIPT, "raise")
    assert code != 0 and "interrupted" in out and "KeyboardInterrupt" in out, out


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_python_kernel_then_the_device_works():
    code, out = run_interrupted(SIGINT_SCRIPT, "catch")
    assert code == 0 and "interrupted" in out and "after: [1.0, 1.0] [1.0, 2.0, 3.0, 4.0]" in out, out


def test_poll_waits_checks_between_sleeps_and_times_out_naming_what():
    calls = {"done": 0, "check": 0}

    def done_on_the_fifth() -> bool:
        calls["done"] += 1
        return calls["done"] >= 5 and time.perf_counter() > start + 0.01  # past the spin: sleeps and checks ran

    def check() -> None:
        calls["check"] += 1

    start = time.perf_counter()
    poll(done_on_the_fifth, check)
    assert calls["check"] >= 1

    def fault() -> None:
        raise DeviceError("the device faulted")

    with pytest.raises(DeviceError, match="faulted"):  # a fault found while waiting ends the wait
        poll(lambda: False, fault)
    with pytest.raises(DeviceError, match=r"timed out after 0.05s waiting for signal value 3"):
        poll(lambda: False, timeout=0.05, what="signal value 3")


@pytest.mark.timeout(60, method="thread")
def test_waiting_out_a_backlog_checks_its_setters_rarely(monkeypatch):
    """A host waiting for the last of many promised values is woken by each one as it is set; it checks that the
    threads promising its value are alive only at first, after a withdrawal or after a quiet slice: checking on every
    wake walked every outstanding promise each time (quadratic in a queue's backlog, holding the GIL the worker
    setting the values needs)."""
    from lazy.hcq import HostSignal

    signal, release = HostSignal(0), threading.Event()
    setter = threading.Thread(target=release.wait, daemon=True)  # alive while the values are promised
    setter.start()
    for value in range(1, 201):
        signal.promise(value, setter)
    checks: list[int] = []
    check = HostSignal._check_progress
    monkeypatch.setattr(HostSignal, "_check_progress", lambda s, *a: checks.append(1) or check(s, *a))
    waiter = threading.Thread(target=signal.wait, args=(200,))
    waiter.start()
    for value in range(1, 201):
        signal.value = value
        time.sleep(0.0005)  # the waiter wakes for each
    waiter.join(10)
    release.set()
    assert not waiter.is_alive() and len(checks) <= 5, len(checks)

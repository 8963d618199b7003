"""The host devices' queue worker under stress: threads sharing a device, timeline values submitted out of order, a
worker that is gone, Ctrl-C while a kernel runs, and the LAZY_THREADS cap."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from cpu_testing import buffers, end, from_device, load_program, loop, to_device

from lazy import Context
from lazy.codegen.uops import UOpBuilder, UOps
from lazy.conformance.support import run_interrupted as interrupt
from lazy.device import DeviceError
from lazy.dtype import dtypes
from lazy.helpers import THREADS
from lazy.ops import Ops
from lazy.plugins import Device
from lazy_cpu.device import THREADS_PER_CORE, CorePool, cpu_count, open_cpu


def add_one_uops(n: int):
    """out[i] = a[i] + 1"""
    b, f32 = UOpBuilder(), dtypes.float32
    out, a = buffers(b, (f32, True), (f32, False))
    i = loop(b, n)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, f32, (a, i)), b.const(1.0, f32))))
    end(b, i)
    return b.uops


@pytest.mark.timeout(30, method="thread")
def test_values_submitted_out_of_order_are_all_waited_for(dev):
    prg = load_program(dev, add_one_uops(64))
    a, first_out, second_out = (to_device(dev, np.zeros(64, np.float32)) for _ in range(3))
    gate = dev.signal_t(0)
    first, second = dev.next_value(), dev.next_value()
    dev.compute_queue_t().wait(gate, 1).exec(prg, (second_out, a)).signal(dev.timeline_signal, second).submit(dev)
    dev.compute_queue_t().exec(prg, (first_out, a)).signal(dev.timeline_signal, first).submit(dev)  # late
    gate.value = 1
    dev.synchronize()  # covers both submissions (it used to hang once the signal went back to `first`)
    for out in (first_out, second_out):
        np.testing.assert_array_equal(from_device(dev, out, np.zeros(64, np.float32)), 1.0)
    assert not dev.pending


@pytest.mark.timeout(30, method="thread")
def test_a_forked_child_does_not_wait_for_its_parents_worker():
    dev = open_cpu("CPU:7")
    gate = dev.signal_t(0)
    try:
        dev.compute_queue_t().wait(gate, 1).signal(dev.timeline_signal, dev.next_value()).submit(dev)
        pid = os.fork()
        if pid == 0:  # the child: the worker thread that was to set the value stayed behind in the parent
            try:
                dev.synchronize()
                code = 1
            except DeviceError as e:
                code = 0 if "stopped" in str(e) else 2
            except BaseException:
                code = 3
            os._exit(code)
        deadline = time.monotonic() + 20
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child waited for a value only its parent's worker could set")
        assert os.waitstatus_to_exitcode(done[1]) == 0, "the child's synchronize did not say the worker is gone"
    finally:
        gate.value = 1
        dev.close()


@pytest.mark.timeout(30, method="thread")
def test_a_split_kernel_waits_for_its_own_chunks_after_an_interrupted_one():
    pool, release, finished = CorePool("test-pool"), threading.Event(), []

    def chunk(tag: str, lo: int, hi: int) -> None:
        if lo > 0:  # the core threads' chunks; the calling thread's (lo == 0) returns at once
            release.wait() if tag == "interrupted" else time.sleep(0.2)
        finished.append((tag, lo))

    # Ctrl-C raises KeyboardInterrupt here even when the tests run in the background (started with SIGINT ignored)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C while the calling thread waits for the other chunks
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
            pool.run(chunk, ("interrupted",), 3, 3)
        release.set()  # the interrupted run's chunks end now, while the next run waits
        pool.run(chunk, ("next",), 3, 3)
        assert sorted(lo for tag, lo in finished if tag == "next") == [0, 1, 2]  # not the interrupted run's chunks
    finally:
        signal.signal(signal.SIGINT, handler)
        release.set()
        pool.close()


def test_thread_count_is_capped_with_one_note(capsys):
    dev = Device["CPU"]
    most = THREADS_PER_CORE * cpu_count()
    with Context(THREADS=most + 1000, DEBUG=1):
        assert dev.threads() == most and dev.threads() == most
    notes = [line for line in capsys.readouterr().out.splitlines() if "LAZY_THREADS" in line]
    assert len(notes) == 1 and f"using {most}" in notes[0], notes
    with Context(THREADS=2):
        assert dev.threads() == 2
    saved = THREADS.value
    THREADS.value = -1  # (`Context` refuses it; a program may still assign the value directly)
    try:
        with pytest.raises(ValueError, match="LAZY_THREADS=-1"):
            dev.threads()
    finally:
        THREADS.value = saved


# --- Ctrl-C ----------------------------------------------------------------------------------------------------------

# "raise": a big matmul (sized to take about 2 s on this machine: a 2048 one ended within the 0.5 s before the
# interrupt on an AMD Zen 4) is interrupted and the process must end at once, the kernel still running. "catch": the
# queue is held back by a gate, so the wait is interrupted whatever the machine's speed; then the gate opens and the
# device must run the queued kernel and a new one in order.
SIGINT_SCRIPT = """
import sys, time, numpy as np
from lazy import Tensor
from lazy.plugins import Device
mode, dev = sys.argv[1], Device["CPU"]
n = 16
if mode == "raise":
    probe = Tensor(np.ones((1024, 1024), np.float32), device="CPU").realize()
    (probe @ probe).numpy()  # compiled and warm
    start = time.perf_counter()
    (probe @ probe).numpy()
    n = min(8192, max(2048, int(1024 * (2.0 / (time.perf_counter() - start)) ** (1 / 3)) // 256 * 256))
a = Tensor(np.ones((n, n), np.float32), device="CPU").realize()
small = Tensor(np.arange(4, dtype=np.float32), device="CPU")
gate = dev.signal_t(0)
if mode == "catch":
    dev.compute_queue_t().wait(gate, 1).submit(dev)
c = (a @ a).realize()
print("launched", flush=True)
try:
    c.numpy()
    print("finished before the interrupt", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    if mode == "raise":
        raise
    gate.value = 1
    print("after:", c.numpy()[0, :2].tolist(), (small + 1).numpy().tolist(), flush=True)
"""


def run_interrupted(mode: str, limit: float = 20.0) -> tuple[int, str]:
    """SIGINT_SCRIPT in a subprocess, interrupted 0.5 s after its kernel launched; (exit code, output)."""
    code, out = interrupt(SIGINT_SCRIPT, mode, limit=limit)
    if "finished before the interrupt" in out:
        pytest.skip("the matmul (8192x8192 at most) finished within 0.5 s here: too fast a machine to interrupt it")
    return code, out


@pytest.mark.timeout(180)
def test_ctrl_c_during_a_kernel_exits_at_once():
    code, out = run_interrupted("raise", limit=5.0)
    assert code != 0 and "interrupted" in out and "KeyboardInterrupt" in out, out


@pytest.mark.timeout(180)
def test_ctrl_c_during_a_wait_then_the_device_works():
    code, out = run_interrupted("catch")
    assert code == 0 and "interrupted" in out and "after: [16.0, 16.0] [1.0, 2.0, 3.0, 4.0]" in out, out


@pytest.mark.timeout(30, method="thread")
def test_small_kernels_run_at_once_only_when_the_queue_is_idle(dev):
    """`launch_now`: on an idle device a kernel too small to split runs on the calling thread without a queue; while
    the worker has queued work it is refused, so the kernel queues behind that work, in order."""
    prg = load_program(dev, add_one_uops(64))
    a, out = to_device(dev, np.arange(64, dtype=np.float32)), to_device(dev, np.zeros(64, np.float32))
    assert not dev.launch_now(prg, (out, a), ())  # loaded without a spec: its work is unknown, so it may be split
    prg.work = 64
    assert dev.launch_now(prg, (out, a), ())
    np.testing.assert_array_equal(from_device(dev, out, np.zeros(64, np.float32)), np.arange(64) + 1)
    gate = dev.signal_t(0)
    dev.compute_queue_t().wait(gate, 1).exec(prg, (a, out)).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    assert not dev.launch_now(prg, (out, a), ())  # a + 1 must wait for the queued out + 1 written into a
    dev.compute_queue_t().exec(prg, (out, a)).signal(dev.timeline_signal, dev.next_value()).submit(dev)
    gate.value = 1
    dev.synchronize()
    np.testing.assert_array_equal(from_device(dev, out, np.zeros(64, np.float32)), np.arange(64) + 3)


def test_an_eager_tiny_op_builds_no_queue(monkeypatch):
    """A realize of a tiny op on an idle CPU device launches its kernel directly (the queue's commands, signals and
    promises were a quarter of the op's time), with the same result and a device that still synchronizes."""
    from lazy import Tensor
    from lazy_cpu.queues import CPUComputeQueue

    x = Tensor(np.arange(16, dtype=np.float32), device="CPU")
    (x + 1).realize()
    Device["CPU"].synchronize()
    submits = []
    monkeypatch.setattr(CPUComputeQueue, "submit", lambda self, d: submits.append(self))
    y = (x + 2).realize()
    assert not submits
    Device["CPU"].synchronize()
    monkeypatch.undo()
    np.testing.assert_array_equal(y.numpy(), np.arange(16) + 2)

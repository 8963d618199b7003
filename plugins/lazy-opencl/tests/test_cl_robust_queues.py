"""CL queues under stress: threads sharing the device, host waits that Ctrl-C interrupts at once (OpenCL's own wait
blocks in C until the kernel ends), the device usable after the interrupt, and a failed command reported."""

from __future__ import annotations

import pyopencl as cl
import pytest

from lazy.conformance.support import run_interrupted as interrupt
from lazy.device import DeviceError
from lazy_opencl.queues import CLSignal


@pytest.mark.timeout(20, method="thread")
def test_a_failed_command_is_reported_not_waited_for(dev):
    gate = cl.UserEvent(dev.context)
    signal_ = CLSignal(0)
    signal_.set_on(1, cl.enqueue_marker(dev.queue, wait_for=[gate]))
    gate.set_status(-5)  # the command it holds back fails
    with pytest.raises(DeviceError, match="execution status"):
        signal_.wait(1)


# --- Ctrl-C ----------------------------------------------------------------------------------------------------------

# "raise": a big matmul (many seconds on two cores) is interrupted and the process must end at once, the kernel
# still running. "catch": the queue is held back by a user event, so the wait is interrupted whatever the machine's
# speed; then the event completes and the device must run the queued kernel and a new one in order.
SIGINT_SCRIPT = """
import sys, numpy as np, pyopencl as cl
from lazy import Tensor
from lazy.plugins import Device
mode, dev = sys.argv[1], Device["CL"]
n = 2048 if mode == "raise" else 16
a = Tensor(np.ones((n, n), np.float32), device="CL").realize()
small = Tensor(np.arange(4, dtype=np.float32), device="CL")
gate = cl.UserEvent(dev.context)
if mode == "catch":
    dev.last_event = cl.enqueue_marker(dev.queue, wait_for=[gate])
c = (a @ a).realize()
print("launched", flush=True)
try:
    c.numpy()
    print("finished before the interrupt", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    if mode == "raise":
        raise
    gate.set_status(cl.command_execution_status.COMPLETE)
    print("after:", c.numpy()[0, :2].tolist(), (small + 1).numpy().tolist(), flush=True)
"""


def run_interrupted(mode: str, limit: float = 20.0) -> tuple[int, str]:
    """SIGINT_SCRIPT in a subprocess, interrupted 0.5 s after its kernel launched; (exit code, output)."""
    code, out = interrupt(SIGINT_SCRIPT, mode, limit=limit)
    if "finished before the interrupt" in out:
        pytest.skip("the 2048x2048 matmul finished within 0.5 s here: too fast a device to interrupt it")
    return code, out


@pytest.mark.timeout(180)
def test_ctrl_c_during_a_kernel_exits_at_once(dev):
    code, out = run_interrupted("raise", limit=5.0)
    assert code != 0 and "interrupted" in out and "KeyboardInterrupt" in out, out


@pytest.mark.timeout(180)
def test_ctrl_c_during_a_wait_then_the_device_works(dev):
    code, out = run_interrupted("catch")
    assert code == 0 and "interrupted" in out and "after: [16.0, 16.0] [1.0, 2.0, 3.0, 4.0]" in out, out

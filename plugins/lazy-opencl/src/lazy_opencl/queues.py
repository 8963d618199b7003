"""HCQ on OpenCL: `CLSignal` (a timeline value backed by the events of an in-order command queue, with timestamps
from event profiling) and `CLComputeQueue` / `CLCopyQueue`, which enqueue recorded commands on the device's queue."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import pyopencl as cl

from lazy.device import DeviceError
from lazy.hcq import Barrier, Command, Copy, Exec, HWQueue, SetSignal, Signal, Timestamp, Wait

if TYPE_CHECKING:
    from lazy_opencl.device import CLDevice, CLProgram

_COMPLETE = 0  # CL_COMPLETE; QUEUED, SUBMITTED and RUNNING are 3, 2, 1, and a failed command's status is negative
SPIN_S = 2e-4  # a host wait polls without sleeping this long first (a sleep lasts 50 us or more)
POLL_FIRST_S, POLL_MOST_S = 1e-5, 0.01  # then sleeps this long, doubling up to the most


def _done(event: Any) -> bool:
    return _status(event) == _COMPLETE


def _status(event: Any) -> int:
    status = int(event.command_execution_status)
    if status < 0:
        raise DeviceError(f"an OpenCL command failed on the device (execution status {status}); the driver's "
                          "messages on stderr may say why")  # fmt: skip
    return status


def wait_event(event: Any, timeout: float | None = None) -> None:
    """Wait for `event` in short sleeps, not in one clWaitForEvents: Python runs signal handlers only between
    bytecodes, so a blocking wait would hold Ctrl-C back until the kernel ends. Interrupted, the command goes on
    running on the device and later commands still queue behind it. No deadline unless `timeout` (seconds): an event
    that is queued or running is a device making progress."""
    if _done(event):
        return
    event.command_queue.flush()  # a command still held on the host would never start
    spin_end = time.perf_counter() + SPIN_S
    while time.perf_counter() < spin_end:  # most commands are short: catch their end without sleeping
        if _done(event):
            return
    delay, deadline = POLL_FIRST_S, None if timeout is None else time.monotonic() + timeout
    while not _done(event):
        if deadline is not None and time.monotonic() > deadline:
            raise DeviceError(f"timed out after {timeout}s waiting for an OpenCL command")
        time.sleep(delay)
        delay = min(delay * 2, POLL_MOST_S)


class CLSignal(Signal):
    """A timeline value. The device "sets" it through events: `(value, event)` pairs wait until their event
    completes, so reading `value` polls them and `wait(v)` waits for the event of the first value >= v. A queue's
    `Wait` for a value nothing queued sets yet (the host sets it later) waits on a user event, a gate, completed when
    the value is reached. A timestamp is bound to an event too and read from its profiling info when asked for: the
    device clock in nanoseconds, converted to the host's perf_counter seconds with the device's measured offset."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self.pending: deque[tuple[int, Any]] = deque()  # (value, the event that completes it), in queue order
        self.gates: list[tuple[int, Any]] = []  # (value, the user event to complete when it is reached)
        self.stamp_event: tuple[Any, str, float] | None = None  # (event, "start" | "end", clock offset) of the last
        # timestamp command
        # Threads read, retire and add pending pairs at once: two retiring the same completed pairs would drop the
        # next ones (still running) too. Reentrant, for a garbage collection that syncs from inside (Buffer.__del__).
        self._lock = threading.RLock()

    def _reach(self, value: int) -> None:
        """The signal is now at least `value`: open the gates that waited for it (called with the lock held)."""
        self._value = max(self._value, value)
        if self.gates:
            opened = [event for gate_value, event in self.gates if gate_value <= self._value]
            self.gates = [(v, event) for v, event in self.gates if v > self._value]
            for event in opened:
                event.set_status(cl.command_execution_status.COMPLETE)

    def _retire(self) -> None:
        """Apply the pending pairs whose events have completed, in order (called with the lock held)."""
        while self.pending:
            head = self.pending[0]
            if not _done(head[1]):
                break
            if self.pending and self.pending[0] is head:  # not already retired by a reentrant call in `_done`
                self.pending.popleft()
                self._reach(head[0])

    @property
    def value(self) -> int:
        with self._lock:
            self._retire()
            return self._value

    @value.setter
    def value(self, new: int) -> None:  # set by the host; never back
        with self._lock:
            self._reach(new)
            self._timestamp = time.perf_counter()

    def set_on(self, value: int, event: Any) -> None:
        """The device sets `value` when `event` completes (None: already done)."""
        with self._lock:
            if event is None or (not self.pending and _done(event)):
                self._reach(value)
            else:
                self.pending.append((value, event))

    def event_for(self, value: int, gate_context: Any = None) -> Any:
        """The event after which the signal is >= `value`, or None when it already is. With `gate_context` (a queue's
        wait), a value nothing queued sets yet gets a user event of that context, completed when the value is
        reached; without it (a host wait), such a wait could never end and fails at once."""
        with self._lock:
            self._retire()
            if self._value >= value:
                return None
            event = next((event for pending_value, event in self.pending if pending_value >= value), None)
            if event is None and gate_context is not None:
                event = cl.UserEvent(gate_context)
                self.gates.append((value, event))
        if event is None:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing queued "
                              "sets it")  # fmt: skip
        return event

    def wait(self, value: int, timeout: float | None = None) -> None:
        event = self.event_for(value)
        if event is not None:
            wait_event(event, timeout)
            self.value  # noqa: B018  retire what completed

    @property
    def timestamp(self) -> float:
        if self.stamp_event is not None:
            event, which, offset = self.stamp_event
            wait_event(event)
            self._timestamp = getattr(event.profile, which) * 1e-9 + offset
            self.stamp_event = None
        return self._timestamp

    def stamp_on(self, event: Any, which: str, offset: float) -> None:
        """The timestamp is the profiling time `which` ("start" or "end") of `event`, plus `offset` seconds."""
        self.stamp_event = (event, which, offset)


class CLComputeQueue(HWQueue["CLDevice"]):
    """Enqueues its recorded commands, in order, on the device's in-order `cl.CommandQueue`.

    Exec -> clEnqueueNDRangeKernel; Copy -> clEnqueueCopyBuffer; SetSignal -> the signal takes the last event; Wait
    -> the waited-for event (or a gate the host opens) joins the next command's wait list (a signal of another
    context is waited for on the host); Timestamp -> the profiling start of the next command, or the end of the
    previous one. The handlers share one submission's state: the events the next command waits for and the
    timestamps waiting for it (submissions to a device are serialized, so one queue object holds one at a time)."""

    def __init__(self) -> None:
        super().__init__()
        self.wait_for: list[Any] = []
        self.stamps: list[CLSignal] = []

    def _submit(self, dev: CLDevice, cmds: list[Command]) -> None:
        self.wait_for, self.stamps = [], []
        for cmd in cmds:
            self.dispatch(dev, cmd)
        if self.stamps:
            event = dev.marker(self.wait_for) if self.wait_for or dev.last_event is None else dev.last_event
            for sig in self.stamps:
                sig.stamp_on(event, "end", dev.clock_offset)
        elif self.wait_for:  # a trailing wait still orders what later submissions enqueue
            dev.last_event = dev.marker(self.wait_for)
        self.wait_for, self.stamps = [], []
        dev.queue.flush()

    def _enqueued(self, dev: CLDevice, event: Any) -> None:
        dev.last_event, self.wait_for = event, []
        for sig in self.stamps:
            sig.stamp_on(event, "start", dev.clock_offset)
        self.stamps = []

    def on_exec(self, dev: CLDevice, cmd: Exec) -> None:
        program = cast("CLProgram", cmd.program)
        self._enqueued(dev, program.launch(cmd.bufs, cmd.vals, cmd.global_size, cmd.local_size, self.wait_for or None))

    def on_copy(self, dev: CLDevice, cmd: Copy) -> None:
        self._enqueued(dev, dev.allocator.enqueue_copy(cmd.dest, cmd.src, cmd.nbytes, self.wait_for or None))

    def on_signal(self, dev: CLDevice, cmd: SetSignal) -> None:
        event = dev.marker(self.wait_for) if self.wait_for else dev.last_event
        if isinstance(cmd.signal, CLSignal):
            cmd.signal.set_on(cmd.value, event)
        else:  # a host signal (another device's): set it once the device gets here
            if event is not None:
                wait_event(event)
            cmd.signal.value = cmd.value

    def on_wait(self, dev: CLDevice, cmd: Wait) -> None:
        if not isinstance(cmd.signal, CLSignal):
            cmd.signal.wait(cmd.value)
            return
        event = cmd.signal.event_for(cmd.value, gate_context=dev.context)
        if event is None:
            return
        if event.context.int_ptr == dev.context.int_ptr:
            self.wait_for.append(event)
        else:  # events of another context cannot join a wait list: wait on the host
            wait_event(event)

    def on_timestamp(self, dev: CLDevice, cmd: Timestamp) -> None:
        if isinstance(cmd.signal, CLSignal):
            self.stamps.append(cmd.signal)
        else:
            cmd.signal.stamp()

    def on_barrier(self, dev: CLDevice, cmd: Barrier) -> None:
        pass  # an in-order queue: every command already sees the memory of the ones before


class CLCopyQueue(CLComputeQueue):
    """Buffer-to-buffer copies on the same in-order queue as the kernels (no separate copy engine is assumed)."""

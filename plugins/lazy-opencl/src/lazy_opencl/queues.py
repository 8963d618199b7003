"""HCQ on OpenCL: `CLSignal` (a timeline value backed by the events of an in-order command queue, with timestamps
from event profiling) and `CLComputeQueue` / `CLCopyQueue`, which enqueue recorded commands on the device's queue."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from lazy.device import DeviceError
from lazy.hcq import HWQueue, Signal

if TYPE_CHECKING:
    from lazy_opencl.device import CLDevice

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
    completes, so reading `value` polls them and `wait(v)` waits for the event of the first value >= v. A timestamp
    is bound to an event too and read from its profiling info (the device clock, in seconds) when asked for."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self.pending: deque[tuple[int, Any]] = deque()  # (value, the event that completes it), in queue order
        self.stamp_event: tuple[Any, str] | None = None  # (event, "start" | "end") of the last timestamp command
        # Threads read, retire and add pending pairs at once: two retiring the same completed pairs would drop the
        # next ones (still running) too. Reentrant, for a garbage collection that syncs from inside (Buffer.__del__).
        self._lock = threading.RLock()

    def _retire(self) -> None:
        """Apply the pending pairs whose events have completed, in order (called with the lock held)."""
        while self.pending:
            head = self.pending[0]
            if not _done(head[1]):
                break
            if self.pending and self.pending[0] is head:  # not already retired by a reentrant call in `_done`
                self._value = max(self._value, head[0])
                self.pending.popleft()

    @property
    def value(self) -> int:
        with self._lock:
            self._retire()
            return self._value

    @value.setter
    def value(self, new: int) -> None:  # set by the host; never back
        with self._lock:
            self._value, self._timestamp = max(self._value, new), time.perf_counter()

    def set_on(self, value: int, event: Any) -> None:
        """The device sets `value` when `event` completes (None: already done)."""
        with self._lock:
            if event is None or (not self.pending and _done(event)):
                self._value = max(self._value, value)
            else:
                self.pending.append((value, event))

    def event_for(self, value: int) -> Any:
        """The event after which the signal is >= `value`, or None when it already is."""
        with self._lock:
            self._retire()
            if self._value >= value:
                return None
            event = next((event for pending_value, event in self.pending if pending_value >= value), None)
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
            event, which = self.stamp_event
            wait_event(event)
            self._timestamp = getattr(event.profile, which) * 1e-9
            self.stamp_event = None
        return self._timestamp

    def stamp(self, event: Any, which: str) -> None:
        self.stamp_event = (event, which)


class CLComputeQueue(HWQueue):
    """Enqueues its recorded commands, in order, on the device's in-order `cl.CommandQueue`.

    exec -> clEnqueueNDRangeKernel; copy -> clEnqueueCopyBuffer; signal -> the signal takes the last event; wait ->
    the waited-for event joins the next command's wait list (or a host wait for a signal of another context);
    timestamp -> the profiling start of the next command, or the end of the previous one."""

    def _submit(self, dev: CLDevice) -> None:  # type: ignore[override]
        wait_for: list[Any] = []
        stamps: list[CLSignal] = []  # timestamps waiting for the next command
        for cmd in self.cmds:
            kind = cmd[0]
            if kind in ("exec", "copy"):
                if kind == "exec":
                    _, program, bufs, vals, global_size, local_size = cmd
                    event = program.launch(bufs, vals, global_size, local_size, wait_for or None)
                else:
                    event = dev.allocator.enqueue_copy(cmd[1], cmd[2], cmd[3], wait_for or None)
                dev.last_event, wait_for = event, []
                for sig in stamps:
                    sig.stamp(event, "start")
                stamps = []
            elif kind == "signal":
                event = dev.marker(wait_for) if wait_for else dev.last_event
                cmd[1].set_on(cmd[2], event)
            elif kind == "wait":
                self._wait(dev, cmd[1], cmd[2], wait_for)
            elif kind == "timestamp":
                stamps.append(cmd[1])
            elif kind != "barrier":  # an in-order queue: every command already sees the memory of the ones before
                raise ValueError(f"unknown queue command {kind!r}")
        if stamps:
            event = dev.marker(wait_for) if wait_for or dev.last_event is None else dev.last_event
            for sig in stamps:
                sig.stamp(event, "end")
        elif wait_for:  # a trailing wait still orders what later submissions enqueue
            dev.last_event = dev.marker(wait_for)
        dev.queue.flush()

    @staticmethod
    def _wait(dev: CLDevice, signal: Signal, value: int, wait_for: list[Any]) -> None:
        if not isinstance(signal, CLSignal):
            signal.wait(value)
            return
        event = signal.event_for(value)
        if event is None:
            return
        if event.context.int_ptr == dev.context.int_ptr:
            wait_for.append(event)
        else:  # events of another context cannot join a wait list: wait on the host
            wait_event(event)


class CLCopyQueue(CLComputeQueue):
    """Buffer-to-buffer copies on the same in-order queue as the kernels (no separate copy engine is assumed)."""

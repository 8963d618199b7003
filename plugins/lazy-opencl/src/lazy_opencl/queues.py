"""HCQ on OpenCL: `CLSignal` (a timeline value backed by the events of an in-order command queue, with timestamps
from event profiling) and `CLComputeQueue` / `CLCopyQueue`, which enqueue recorded commands on the device's queue."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from lazy.device import DeviceError
from lazy.hcq import HWQueue, Signal

if TYPE_CHECKING:
    from lazy_opencl.device import CLDevice

_COMPLETE = 0  # CL_COMPLETE


def _done(event: Any) -> bool:
    return event.command_execution_status == _COMPLETE


class CLSignal(Signal):
    """A timeline value. The device "sets" it through events: `(value, event)` pairs wait until their event
    completes, so reading `value` polls them and `wait(v)` waits for the event of the first value >= v. A timestamp
    is bound to an event too and read from its profiling info (the device clock, in seconds) when asked for."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self.pending: list[tuple[int, Any]] = []
        self.stamp_event: tuple[Any, str] | None = None  # (event, "start" | "end") of the last timestamp command

    def _retire(self, upto: int) -> None:
        """Apply the first `upto` pending pairs (their events have completed)."""
        for value, _ in self.pending[:upto]:
            self._value = max(self._value, value)
        del self.pending[:upto]

    @property
    def value(self) -> int:
        done = 0
        while done < len(self.pending) and _done(self.pending[done][1]):
            done += 1
        self._retire(done)
        return self._value

    @value.setter
    def value(self, new: int) -> None:  # set by the host
        self._value, self._timestamp = new, time.perf_counter()

    def set_on(self, value: int, event: Any) -> None:
        """The device sets `value` when `event` completes (None: already done)."""
        if event is None or (not self.pending and _done(event)):
            self._value = max(self._value, value)
        else:
            self.pending.append((value, event))

    def event_for(self, value: int) -> Any:
        """The event after which the signal is >= `value`, or None when it already is."""
        if self.value >= value:
            return None
        for pending_value, event in self.pending:
            if pending_value >= value:
                return event
        raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing queued sets it")

    def wait(self, value: int, timeout: float = 60.0) -> None:
        event = self.event_for(value)
        if event is not None:
            event.wait()  # OpenCL has no timed wait; the in-order queue guarantees progress
            self.value  # noqa: B018  retire what completed

    @property
    def timestamp(self) -> float:
        if self.stamp_event is not None:
            event, which = self.stamp_event
            event.wait()
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
            event.wait()


class CLCopyQueue(CLComputeQueue):
    """Buffer-to-buffer copies on the same in-order queue as the kernels (no separate copy engine is assumed)."""

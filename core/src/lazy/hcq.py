"""Hardware command queues: `Signal` (a timeline value with timestamps), `HWQueue` (recorded commands a plugin
submits), the synchronous adapter for simple-tier devices, and `HCQGraph` (one recorded queue replayed by `jit`).

A queue records commands as mutable lists so a recorded queue can be replayed with new kernel arguments and signal
values (`update_exec`, `update_signal`, `update_wait`). A plugin's queue subclass implements `_submit(dev)`: run or
enqueue the recorded commands in order. Command layouts (index 0 is the kind):

    ["exec", program, bufs (opaques), vals (ints), global_size, local_size]
    ["copy", dest (opaque), src (opaque), nbytes]
    ["signal", signal, value]      ["wait", signal, value]      ["timestamp", signal]      ["barrier"]
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from lazy.device import DeviceError

if TYPE_CHECKING:
    from lazy.device import Compiled


# A long host wait wakes this often to check that whoever is to set the signal still exists (it never gives up while
# they do: a kernel may run for minutes). Condition waits are interrupted by Ctrl-C however long the slice is.
WAIT_SLICE_S = 0.25


class Signal:
    """A monotonically increasing timeline value the device sets and the host (or another queue) waits on.

    Setting a lower value than the current one leaves it unchanged: with several submitting threads, a late setter
    must never move the timeline back. The base class is set by hand only, so a wait for a value it has not reached
    can never end and fails at once."""

    def __init__(self, value: int = 0):
        self._value = value
        self._timestamp = time.perf_counter()

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        self._value = max(self._value, new)

    @property
    def timestamp(self) -> float:
        """Seconds (perf_counter clock, or the device's own clock converted to seconds) when last set."""
        return self._timestamp

    def promise(self, value: int, setter: threading.Thread) -> None:
        """`setter` (a thread) has been given work that ends by setting `value` (called by `HWQueue.submit`)."""

    def withdraw(self, value: int, setter: threading.Thread) -> None:
        """The submission that promised `value` failed before handing its work to `setter`."""

    def wait(self, value: int, timeout: float | None = None) -> None:
        """Return once the signal is >= `value`. No deadline unless `timeout` (seconds) is given: a wait fails only
        when nothing will ever set the value, or after `timeout`."""
        if self._value < value:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing will set it")


class HostSignal(Signal):
    """A signal set by a host thread (a plugin's queue worker, or the submitting thread itself) and waited on with a
    condition variable.

    Submissions promise the values they will set, naming the thread that will set them. A host wait for a value that
    nothing submitted promises fails at once (it would never end); a wait for a promised value has no deadline while
    that thread is alive (a long kernel is progress), and fails as soon as the thread is gone. A queue's own `wait`
    command (`gate=True`) may instead wait for a value the host sets by hand later: that is how a host holds a queue
    back."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self._cond = threading.Condition()
        self._promises: list[tuple[int, threading.Thread]] = []  # (value, the thread that will set it), unreached

    @Signal.value.setter  # type: ignore[attr-defined, untyped-decorator]
    def value(self, new: int) -> None:
        with self._cond:
            if new > self._value:
                self._value = new
                self._promises = [(v, t) for v, t in self._promises if v > new]
            self._timestamp = time.perf_counter()
            self._cond.notify_all()

    def stamp(self) -> None:
        with self._cond:
            self._timestamp = time.perf_counter()

    def promise(self, value: int, setter: threading.Thread) -> None:
        with self._cond:
            if value > self._value:
                self._promises.append((value, setter))

    def withdraw(self, value: int, setter: threading.Thread) -> None:
        with self._cond:
            if (value, setter) in self._promises:
                self._promises.remove((value, setter))
            self._cond.notify_all()  # a waiter for this value must now fail instead of waiting on

    def wait(self, value: int, timeout: float | None = None, gate: bool = False) -> None:
        if self._value >= value:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._value < value:
                self._check_progress(value, gate)
                left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
                if left <= 0:
                    raise DeviceError(
                        f"timed out after {timeout}s waiting for signal value {value} (now {self._value})"
                    )
                self._cond.wait(left)

    def _check_progress(self, value: int, gate: bool) -> None:
        """Raise when no other thread will ever set `value` (called with the condition held)."""
        me = threading.current_thread()
        setters = {t for v, t in self._promises if v >= value and t is not me}
        if not setters and not gate:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing else "
                              "will set it (submit the queue that sets it first, or set it by hand)")  # fmt: skip
        if setters and not any(t.is_alive() for t in setters):
            names = ", ".join(sorted(t.name for t in setters))
            raise DeviceError(f"signal wait for {value} cannot end: value is {self._value} and the thread that was "
                              f"to set it ({names}) has stopped; the device's queue worker died (or this is a forked "
                              "child): reopen the device")  # fmt: skip


class HWQueue:
    """Commands recorded in order, then submitted to a device. Every method returns the queue for chaining."""

    def __init__(self) -> None:
        self.cmds: list[list[Any]] = []

    def exec(
        self,
        program: Any,
        bufs: tuple[Any, ...],
        vals: tuple[int, ...] = (),
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
    ) -> HWQueue:
        self.cmds.append(["exec", program, bufs, vals, global_size, local_size])
        return self

    def copy(self, dest: Any, src: Any, nbytes: int) -> HWQueue:
        self.cmds.append(["copy", dest, src, nbytes])
        return self

    def signal(self, signal: Signal, value: int) -> HWQueue:
        self.cmds.append(["signal", signal, value])
        return self

    def wait(self, signal: Signal, value: int) -> HWQueue:
        self.cmds.append(["wait", signal, value])
        return self

    def timestamp(self, signal: Signal) -> HWQueue:
        self.cmds.append(["timestamp", signal])
        return self

    def memory_barrier(self) -> HWQueue:
        self.cmds.append(["barrier"])
        return self

    # replay: change a recorded command in place
    def update_exec(
        self, cmd_idx: int, bufs: tuple[Any, ...] | None = None, vals: tuple[int, ...] | None = None
    ) -> None:
        cmd = self.cmds[cmd_idx]
        assert cmd[0] == "exec", f"command {cmd_idx} is {cmd[0]}, not exec"
        if bufs is not None:
            cmd[2] = bufs
        if vals is not None:
            cmd[3] = vals

    def update_signal(self, cmd_idx: int, signal: Signal | None = None, value: int | None = None) -> None:
        self._update_sync(cmd_idx, "signal", signal, value)

    def update_wait(self, cmd_idx: int, signal: Signal | None = None, value: int | None = None) -> None:
        self._update_sync(cmd_idx, "wait", signal, value)

    def _update_sync(self, cmd_idx: int, kind: str, signal: Signal | None, value: int | None) -> None:
        cmd = self.cmds[cmd_idx]
        assert cmd[0] == kind, f"command {cmd_idx} is {cmd[0]}, not {kind}"
        if signal is not None:
            cmd[1] = signal
        if value is not None:
            cmd[2] = value

    def submit(self, dev: Compiled) -> None:
        """Run or enqueue the recorded commands on `dev`; safe to call from several threads.

        Submissions to one device are serialized, and the device's timeline is set in submission order: a timeline
        value not above the last one submitted (another thread took a later value and submitted first) is replaced
        by a fresh one, so the timeline never goes back and `synchronize` still covers this work. The values this
        submission will set are promised to its signals (see `HostSignal`) before it runs."""
        with dev.submit_lock:
            setter = self.setter_thread(dev)
            signals = [cmd for cmd in self.cmds if cmd[0] == "signal"]
            for cmd in signals:
                if cmd[1] is dev.timeline_signal:
                    cmd[2] = dev.claim_timeline_value(cmd[2])
                cmd[1].promise(cmd[2], setter)
            try:
                self._submit(dev)
            except BaseException:
                for cmd in signals:
                    cmd[1].withdraw(cmd[2], setter)
                raise
            for cmd in signals:
                if cmd[1] is dev.timeline_signal:
                    dev.commit_timeline_value(cmd[2])

    def setter_thread(self, dev: Compiled) -> threading.Thread:
        """The thread that will run this queue's signal commands: the submitting one, unless `_submit` hands the
        commands to a worker (then override this to return the worker, started if need be)."""
        return threading.current_thread()

    def _submit(self, dev: Compiled) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _submit")


def run_command(dev: Compiled, cmd: list[Any]) -> None:
    """Execute one recorded command on the calling thread (the simple-tier adapter, and host-run queues)."""
    kind = cmd[0]
    if kind == "exec":
        _, program, bufs, vals, global_size, local_size = cmd
        program(*bufs, global_size=global_size, local_size=local_size, vals=vals)
    elif kind == "copy":
        _, dest, src, nbytes = cmd
        dev.allocator._transfer(dest, src, nbytes, dev, dev)  # type: ignore[misc]
    elif kind == "signal":
        cmd[1].value = cmd[2]
    elif kind == "wait":
        if isinstance(cmd[1], HostSignal):
            cmd[1].wait(cmd[2], gate=True)  # the host may open the gate by hand later
        else:
            cmd[1].wait(cmd[2])
    elif kind == "timestamp":
        sig = cmd[1]
        if isinstance(sig, HostSignal):
            sig.stamp()
        else:
            sig._timestamp = time.perf_counter()
    elif kind != "barrier":
        raise ValueError(f"unknown queue command {kind!r}")


class SyncSignal(HostSignal):
    """The simple tier's signal: set by the submitting thread itself."""


class SyncQueue(HWQueue):
    """Core's adapter for simple-tier devices: `submit` runs the commands right away, in order, on this thread (one
    submission at a time per device: a third-party simple-tier `Program` need not be thread-safe).

    A command that raises (or is interrupted by Ctrl-C) ends the submission, and the error goes straight to the
    submitter; the signals the submission would have set are set anyway, so no other waiter hangs and the device's
    next operation runs as usual."""

    def _submit(self, dev: Compiled) -> None:
        done = 0
        try:
            for cmd in self.cmds:
                run_command(dev, cmd)
                done += 1
        finally:
            for cmd in self.cmds[done:]:
                if cmd[0] == "signal":
                    cmd[1].value = cmd[2]


def adapt_simple_tier(dev: Compiled) -> Compiled:
    """Give a simple-tier device core's synchronous queues, so the engine drives every device through queues."""
    if dev.compute_queue_t is None:
        dev.set_queues(SyncSignal, SyncQueue, None)
    return dev


class HCQGraph:
    """A jit's kernels recorded once into a single queue; each replay only patches buffers and the timeline value."""

    def __init__(self, dev: Compiled, launches: list[tuple[Any, tuple[Any, ...], tuple[int, ...], Any, Any]]):
        self.dev = dev
        self.queue = dev.compute_queue_t()
        for program, bufs, vals, global_size, local_size in launches:
            self.queue.exec(program, bufs, vals, global_size, local_size)
        self.signal_idx = len(self.queue.cmds)
        self.queue.signal(dev.timeline_signal, 0)

    def replay(self, updates: dict[int, tuple[tuple[Any, ...] | None, tuple[int, ...] | None]]) -> None:
        """`updates` maps launch index -> (new bufs or None, new vals or None)."""
        with self.dev.submit_lock:  # two threads replaying one graph must not patch each other's submission
            for idx, (bufs, vals) in updates.items():
                self.queue.update_exec(idx, bufs, vals)
            self.queue.update_signal(self.signal_idx, value=self.dev.next_value())
            self.queue.submit(self.dev)

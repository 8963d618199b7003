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


class Signal:
    """A monotonically increasing timeline value the device sets and the host (or another queue) waits on."""

    def __init__(self, value: int = 0):
        self._value = value
        self._timestamp = time.perf_counter()

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        self._value = new

    @property
    def timestamp(self) -> float:
        """Seconds (perf_counter clock, or the device's own clock converted to seconds) when last set."""
        return self._timestamp

    def wait(self, value: int, timeout: float = 60.0) -> None:
        if self._value < value:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing will set it")


class HostSignal(Signal):
    """A signal set by a host thread (a plugin's worker) and waited on with a condition variable."""

    def __init__(self, value: int = 0):
        super().__init__(value)
        self._cond = threading.Condition()

    @Signal.value.setter  # type: ignore[attr-defined, untyped-decorator]
    def value(self, new: int) -> None:
        with self._cond:
            self._value, self._timestamp = new, time.perf_counter()
            self._cond.notify_all()

    def stamp(self) -> None:
        with self._cond:
            self._timestamp = time.perf_counter()

    def wait(self, value: int, timeout: float = 60.0) -> None:
        if self._value >= value:
            return
        with self._cond:
            if not self._cond.wait_for(lambda: self._value >= value, timeout):
                raise DeviceError(f"timed out after {timeout}s waiting for signal value {value} (now {self._value})")


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
        self._submit(dev)

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
    """Core's adapter for simple-tier devices: `submit` runs the commands right away, in order, on this thread."""

    def _submit(self, dev: Compiled) -> None:
        for cmd in self.cmds:
            run_command(dev, cmd)


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
        for idx, (bufs, vals) in updates.items():
            self.queue.update_exec(idx, bufs, vals)
        self.queue.update_signal(self.signal_idx, value=self.dev.next_value())
        self.queue.submit(self.dev)

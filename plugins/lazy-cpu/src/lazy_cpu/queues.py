"""HCQ for host devices: `CPUSignal`, and `CPUComputeQueue`, whose submissions one worker thread per device runs in
the order they were submitted, so the caller returns at once and kernels overlap with Python work."""

from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import TYPE_CHECKING

from lazy.hcq import Command, Copy, Exec, HostQueue, HostSignal

if TYPE_CHECKING:
    from lazy_cpu.device import HostDevice


class CPUSignal(HostSignal):
    """A timeline value set by the device's queue worker; its timestamp is the host's perf_counter clock."""


class QueueWorker:
    """One daemon thread that runs submitted commands in FIFO order, each through its queue's handlers.

    A command that raises stops the rest of that submission's `Exec` and `Copy` commands, but its signal commands
    still run so no waiter hangs; the first error is kept in `error` for the device to raise on `synchronize`.
    """

    def __init__(self, dev: HostDevice):
        self.dev = dev
        self.tasks: SimpleQueue[tuple[HostQueue[HostDevice], list[Command]] | None] = SimpleQueue()
        self.error: BaseException | None = None
        self.closed = False
        self.thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name=f"lazy-{self.dev.device}-queue", daemon=True)
        thread.start()
        return thread

    def running_thread(self) -> threading.Thread:
        """The worker thread, started again in a forked child (the thread stayed behind in the parent)."""
        if self.closed:
            raise RuntimeError(f"{self.dev.device} is closed: open the device again to run work on it")
        if not self.thread.is_alive():
            self.tasks = SimpleQueue()
            self.thread = self._start()
        return self.thread

    def submit(self, queue: HostQueue[HostDevice], cmds: list[Command]) -> None:
        self.running_thread()
        self.tasks.put((queue, cmds))

    def _loop(self) -> None:
        while (task := self.tasks.get()) is not None:
            queue, cmds = task
            failed = False
            for cmd in cmds:
                if failed and isinstance(cmd, (Exec, Copy)):
                    continue
                try:
                    queue.dispatch(self.dev, cmd)
                except BaseException as e:  # kept and raised by the device, never lost in this thread
                    failed = True
                    self.error = self.error or e

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True
        if self.thread.is_alive():
            self.tasks.put(None)
            self.thread.join(timeout)


class CPUComputeQueue(HostQueue["HostDevice"]):
    """Commands run by the device's queue worker with core's host handlers. `submit` hands over this submission's
    own list of commands, so a recorded queue may be changed and resubmitted while the worker still runs the
    previous submission."""

    def setter_thread(self, dev: HostDevice) -> threading.Thread:
        return dev.queue_worker.running_thread()

    def _submit(self, dev: HostDevice, cmds: list[Command]) -> None:
        dev.queue_worker.submit(self, cmds)


class CPUCopyQueue(CPUComputeQueue):
    """Copies (memmove) on the same worker as the kernels: host devices have no separate copy engine."""

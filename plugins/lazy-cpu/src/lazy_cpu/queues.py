"""HCQ for host devices: `CPUSignal`, and `CPUComputeQueue`, whose submissions one worker thread per device runs in
the order they were submitted, so the caller returns at once and kernels overlap with Python work."""

from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

from lazy.hcq import HostSignal, HWQueue, run_command

if TYPE_CHECKING:
    from lazy.device import Compiled


class CPUSignal(HostSignal):
    """A timeline value set by the device's queue worker; its timestamp is the host's perf_counter clock."""


class QueueWorker:
    """One daemon thread that runs submitted command lists in FIFO order.

    A command that raises stops the rest of that submission's exec and copy commands, but its signal commands still
    run so no waiter hangs; the first error is kept in `error` for the device to raise on `synchronize`.
    """

    def __init__(self, dev: Compiled):
        self.dev = dev
        self.tasks: SimpleQueue[list[list[Any]] | None] = SimpleQueue()
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

    def submit(self, cmds: list[list[Any]]) -> None:
        self.running_thread()
        self.tasks.put(cmds)

    def _loop(self) -> None:
        while (cmds := self.tasks.get()) is not None:
            failed = False
            for cmd in cmds:
                if failed and cmd[0] in ("exec", "copy"):
                    continue
                try:
                    run_command(self.dev, cmd)
                except BaseException as e:  # kept and raised by the device, never lost in this thread
                    failed = True
                    self.error = self.error or e

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True
        if self.thread.is_alive():
            self.tasks.put(None)
            self.thread.join(timeout)


class CPUComputeQueue(HWQueue):
    """Commands run by the device's queue worker. `submit` hands over a snapshot of the recorded commands, so a
    recorded queue may be updated (`update_exec`, `update_signal`) and resubmitted while the worker still runs the
    previous submission."""

    def setter_thread(self, dev: Compiled) -> threading.Thread:
        return dev.queue_worker.running_thread()  # type: ignore[attr-defined, no-any-return]

    def _submit(self, dev: Compiled) -> None:
        worker: QueueWorker = dev.queue_worker  # type: ignore[attr-defined]
        worker.submit([list(cmd) for cmd in self.cmds])


class CPUCopyQueue(CPUComputeQueue):
    """Copies (memmove) on the same worker as the kernels: host devices have no separate copy engine."""

"""HCQ for host devices: `CPUSignal`, and `CPUComputeQueue`, whose submissions one worker thread per device runs in
the order they were submitted, so the caller returns at once and kernels overlap with Python work. A small submission
to an idle worker runs on the submitting thread instead: handing it to the worker and waking the waiter would cost
more than the kernel (tens of microseconds of thread switches for a kernel of one)."""

from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import TYPE_CHECKING

from lazy.hcq import Command, Copy, Exec, HostQueue, HostSignal, Wait

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
        # submissions handed to the thread, and those it has finished: each written by one thread only (the submitter,
        # under the device's submit lock; the worker), so equal values mean idle without a lock
        self.submitted = self.finished = 0
        self.thread = self._start()

    def idle(self) -> bool:
        """Nothing queued or running (call with the device's submit lock held, so nothing can be queued meanwhile)."""
        return self.finished == self.submitted

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
        self.submitted += 1
        self.tasks.put((queue, cmds))

    def run(self, queue: HostQueue[HostDevice], cmds: list[Command]) -> None:
        """Run one submission's commands on this thread, in order."""
        failed = False
        for cmd in cmds:
            if failed and isinstance(cmd, (Exec, Copy)):
                continue
            try:
                queue.dispatch(self.dev, cmd)
            except BaseException as e:  # kept and raised by the device, never lost in this thread
                failed = True
                self.error = self.error or e

    def _loop(self) -> None:
        while (task := self.tasks.get()) is not None:
            self.run(*task)
            self.finished += 1

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True
        if self.thread.is_alive():
            self.tasks.put(None)
            self.thread.join(timeout)


INLINE_COPY_BYTES = 1 << 16  # a copy this small runs on the submitting thread when the worker is idle


class CPUComputeQueue(HostQueue["HostDevice"]):
    """Commands run by the device's queue worker with core's host handlers. `submit` hands over this submission's
    own list of commands, so a recorded queue may be changed and resubmitted while the worker still runs the
    previous submission. When the worker is idle and every kernel of the submission is too small to be split over
    the cores (and every copy small), the submitting thread runs it itself, holding the device's submit lock (so
    nothing else is submitted meanwhile and the order stays the order of submission)."""

    _inline = False

    def setter_thread(self, dev: HostDevice) -> threading.Thread:
        worker = dev.queue_worker
        self._inline = worker.idle() and all(_small(dev, cmd) for cmd in self.cmds)
        return threading.current_thread() if self._inline else worker.running_thread()

    def _submit(self, dev: HostDevice, cmds: list[Command]) -> None:
        if self._inline:
            dev.queue_worker.run(self, cmds)
        else:
            dev.queue_worker.submit(self, cmds)


def _small(dev: HostDevice, cmd: Command) -> bool:
    """Can `cmd` run on the submitting thread without holding it long? Never a wait for a value not reached yet: the
    host may be the one to set it later."""
    if isinstance(cmd, Exec):  # a kernel too small to split, or a native graph under its own bound
        return getattr(cmd.program, "work", float("inf")) < getattr(cmd.program, "inline_limit", dev.split_min_work)
    if isinstance(cmd, Copy):
        return cmd.nbytes <= INLINE_COPY_BYTES
    return not isinstance(cmd, Wait) or cmd.signal.value >= cmd.value


class CPUCopyQueue(CPUComputeQueue):
    """Copies (memmove) on the same worker as the kernels: host devices have no separate copy engine."""

"""Hardware command queues: `Signal` (a timeline value with timestamps), the commands a queue records (`Exec`, `Copy`,
`SetSignal`, `Wait`, `Timestamp`, `Barrier`), `HWQueue` (records them and dispatches each to the plugin's handler),
`HostQueue` (handlers that run on a host thread), the simple tier's `SyncQueue`, `HCQGraph` (one recorded queue
replayed by `jit`), and `timed` submissions (timestamps around each launch, for `lazy.profile`).

Commands are small frozen dataclasses. A recorded queue is replayed with new arguments by replacing a command with a
copy whose fields are changed by name (`dataclasses.replace(cmd, bufs=...)`), never by patching a list in place, so a
worker still running the previous submission keeps the commands it was given. A plugin's queue handles each kind of
command in a method named after it (`on_exec`, `on_copy`, `on_signal`, `on_wait`, `on_timestamp`, `on_barrier`);
`HWQueue.submit` refuses, before anything runs, a command its queue type has no handler for.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import lazy.profile as profile
from lazy.device import Compiled, DeviceError, Program, install_simple_tier

if TYPE_CHECKING:
    from typing_extensions import Self


# A long host wait wakes this often to check that whoever is to set the signal still exists (it never gives up while
# they do: a kernel may run for minutes). Condition waits are interrupted by Ctrl-C however long the slice is.
WAIT_SLICE_S = 0.25


POLL_SPIN_S = 2e-4  # a host wait polls without sleeping this long first (a sleep lasts 50 us or more)
POLL_FIRST_S, POLL_MOST_S = 1e-5, 0.01  # then sleeps this long, doubling up to the most


def poll(done: Callable[[], bool], check: Callable[[], None] | None = None, timeout: float | None = None,
         what: str = "the device") -> None:  # fmt: skip
    """Wait until `done()` in short sleeps, calling `check()` (which raises on a device fault) between them: Python
    runs signal handlers only between bytecodes, so a blocking driver wait would hold Ctrl-C back until the device
    finished. For GPU signals and events a driver exposes only as a query. No deadline unless `timeout` (seconds):
    queued or running work is progress."""
    spin_end = time.perf_counter() + POLL_SPIN_S
    while time.perf_counter() < spin_end:  # most waits are short: catch their end without sleeping
        if done():
            return
    delay, deadline = POLL_FIRST_S, None if timeout is None else time.monotonic() + timeout
    while not done():
        if check is not None:
            check()
        if deadline is not None and time.monotonic() > deadline:
            raise DeviceError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, POLL_MOST_S)


class Signal:
    """A monotonically increasing timeline value the device sets and the host (or another queue) waits on.

    Setting a lower value than the current one leaves it unchanged: with several submitting threads, a late setter
    must never move the timeline back. The base class is set by hand only, so a wait for a value it has not reached
    can never end and fails at once.

    `timestamp` is on the host's `time.perf_counter` clock, in seconds: a device with a clock of its own converts its
    readings (e.g. adds the offset between the two clocks measured when it opens), so timestamps of two devices and of
    the host compare."""

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
        """Seconds on the perf_counter clock when the last `Timestamp` command for this signal ran (or it was set)."""
        return self._timestamp

    def stamp(self) -> None:
        """Take the time now (a host-run `Timestamp` command)."""
        self._timestamp = time.perf_counter()

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
        # (value, submission number, the thread that will set it) of the values not reached yet, as a heap: a set
        # drops the reached ones from its top, so a backlog of many queued submissions costs log n per set, not n
        self._promises: list[tuple[int, int, threading.Thread]] = []
        self._promised = 0
        self._withdrawn = 0  # how many promises were withdrawn: a waiter checks its setters again when it changes

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        with self._cond:
            if new > self._value:
                self._value = new
                while self._promises and self._promises[0][0] <= new:
                    heapq.heappop(self._promises)
            self._timestamp = time.perf_counter()
            self._cond.notify_all()

    def stamp(self) -> None:
        with self._cond:
            self._timestamp = time.perf_counter()

    def promise(self, value: int, setter: threading.Thread) -> None:
        with self._cond:
            if value > self._value:
                self._promised += 1
                heapq.heappush(self._promises, (value, self._promised, setter))

    def withdraw(self, value: int, setter: threading.Thread) -> None:
        with self._cond:
            kept = [p for p in self._promises if not (p[0] == value and p[2] is setter)]
            if len(kept) != len(self._promises):
                heapq.heapify(kept)
                self._promises = kept
            self._withdrawn += 1
            self._cond.notify_all()  # a waiter for this value must now fail instead of waiting on

    def wait(self, value: int, timeout: float | None = None, gate: bool = False) -> None:
        if self._value >= value:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            checked = None  # `_withdrawn` when the setters were last checked: again only after a withdrawal, or a
            # slice with no news (each check walks every promise: a backlog of queued submissions, each setting the
            # value and waking this thread, made the wait quadratic, and it held the GIL the worker needs)
            while self._value < value:
                if checked != self._withdrawn:
                    self._check_progress(value, gate)
                    checked = self._withdrawn
                left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
                if left <= 0:
                    raise DeviceError(
                        f"timed out after {timeout}s waiting for signal value {value} (now {self._value})"
                    )
                if not self._cond.wait(left):
                    checked = None

    def _check_progress(self, value: int, gate: bool) -> None:
        """Raise when no other thread will ever set `value` (called with the condition held)."""
        me = threading.current_thread()
        setters = {t for v, _, t in self._promises if v >= value and t is not me}
        if not setters and not gate:
            raise DeviceError(f"signal wait for {value} would deadlock: value is {self._value} and nothing else "
                              "will set it (submit the queue that sets it first, or set it by hand)")  # fmt: skip
        if setters and not any(t.is_alive() for t in setters):
            names = ", ".join(sorted(t.name for t in setters))
            raise DeviceError(f"signal wait for {value} cannot end: value is {self._value} and the thread that was "
                              f"to set it ({names}) has stopped; the device's queue worker died (or this is a forked "
                              "child): reopen the device")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# commands


@dataclass(frozen=True)
class Exec:
    """Run `program` on `bufs` (allocator opaques) with `vals` (the symbolic variables' values), over `global_size`
    work groups of `local_size` items (None: the kernel loops over its range itself)."""

    program: Program
    bufs: tuple[Any, ...]
    vals: tuple[int, ...] = ()
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Copy:
    """Copy `nbytes` from `src` to `dest`, two allocator opaques of the queue's device."""

    dest: Any
    src: Any
    nbytes: int


@dataclass(frozen=True)
class SetSignal:
    """Set `signal` to `value` once every command before this one has finished."""

    signal: Signal
    value: int


@dataclass(frozen=True)
class Wait:
    """Run the commands after this one only once `signal` is >= `value` (set by another queue, or by the host)."""

    signal: Signal
    value: int


@dataclass(frozen=True)
class Timestamp:
    """Record in `signal.timestamp` when the queue reaches this point (perf_counter seconds, see `Signal`)."""

    signal: Signal


@dataclass(frozen=True)
class Barrier:
    """Memory written by the commands before this one is visible to the commands after it."""


Command = Exec | Copy | SetSignal | Wait | Timestamp | Barrier

# each command kind and the queue method that handles it
HANDLERS: dict[type[Command], str] = {Exec: "on_exec", Copy: "on_copy", SetSignal: "on_signal", Wait: "on_wait",
                                      Timestamp: "on_timestamp", Barrier: "on_barrier"}  # fmt: skip
SYNC_COMMANDS: frozenset[type[Command]] = frozenset({SetSignal, Wait, Timestamp, Barrier})

DeviceT = TypeVar("DeviceT", bound=Compiled)


class HWQueue(Generic[DeviceT]):
    """Commands recorded in order, then submitted to a device. Every recording method returns the queue for chaining.

    A plugin subclasses it (`HWQueue[MyDevice]`) and implements the handlers of the commands its device runs;
    `handled` (worked out per class) lists them. A simple queue needs only the handlers: the default `_submit` walks
    the commands in order and calls `dispatch`. A queue that enqueues on a device overrides `_submit` too (to flush at
    the end, say), still calling `dispatch` for each command."""

    handled: ClassVar[frozenset[type[Command]]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handled = frozenset(
            kind for kind, name in HANDLERS.items() if getattr(cls, name) is not getattr(HWQueue, name)
        )

    def __init__(self) -> None:
        self.cmds: list[Command] = []

    # ---- recording ---------------------------------------------------------------------------------------------------

    def record(self, cmd: Command) -> Self:
        self.cmds.append(cmd)
        return self

    def exec(self, program: Program, bufs: tuple[Any, ...], vals: tuple[int, ...] = (),
             global_size: tuple[int, ...] | None = None,
             local_size: tuple[int, ...] | None = None) -> Self:  # fmt: skip
        return self.record(Exec(program, bufs, vals, global_size, local_size))

    def copy(self, dest: Any, src: Any, nbytes: int) -> Self:
        return self.record(Copy(dest, src, nbytes))

    def signal(self, signal: Signal, value: int) -> Self:
        return self.record(SetSignal(signal, value))

    def wait(self, signal: Signal, value: int) -> Self:
        return self.record(Wait(signal, value))

    def timestamp(self, signal: Signal) -> Self:
        return self.record(Timestamp(signal))

    def memory_barrier(self) -> Self:
        return self.record(Barrier())

    # ---- submitting --------------------------------------------------------------------------------------------------

    def submit(self, dev: DeviceT) -> None:
        """Run or enqueue the recorded commands on `dev`; safe to call from several threads.

        Submissions to one device are serialized, and the device's timeline is set in submission order: a timeline
        value not above the last one submitted (another thread took a later value and submitted first) is replaced
        by a fresh one, so the timeline never goes back and `synchronize` still covers this work. The values this
        submission will set are promised to its signals (see `HostSignal`) before it runs. A command this queue type
        has no handler for, or a kernel on a copy-only device, refuses the whole submission before anything runs."""
        with dev.submit_lock:
            self._refuse_unhandled(dev)
            setter = self.setter_thread(dev)
            cmds = list(self.cmds)  # this submission's own list: the recorded queue may be changed and resubmitted
            signals: list[SetSignal] = []
            for i, cmd in enumerate(cmds):
                if isinstance(cmd, SetSignal):
                    if cmd.signal is dev.timeline_signal:
                        cmd = cmds[i] = SetSignal(cmd.signal, dev.claim_timeline_value(cmd.value))
                    cmd.signal.promise(cmd.value, setter)
                    signals.append(cmd)
            try:
                self._submit(dev, cmds)
            except BaseException:
                for cmd in signals:
                    cmd.signal.withdraw(cmd.value, setter)
                raise
            for cmd in signals:
                if cmd.signal is dev.timeline_signal:
                    dev.commit_timeline_value(cmd.value)

    def _refuse_unhandled(self, dev: DeviceT) -> None:
        for cmd in self.cmds:
            kind = type(cmd)
            if kind is Exec and dev.kernel_refusal is not None:
                raise DeviceError(f"{dev.device}: a queue with a kernel launch was submitted: {dev.kernel_refusal}")
            if kind not in self.handled:
                raise DeviceError(unhandled_message(type(self), kind, dev.device))

    def setter_thread(self, dev: DeviceT) -> threading.Thread:
        """The thread that will run this queue's signal commands: the submitting one, unless `_submit` hands the
        commands to a worker (then override this to return the worker, started if need be)."""
        return threading.current_thread()

    def _submit(self, dev: DeviceT, cmds: list[Command]) -> None:
        """Run or enqueue `cmds` in order (called by `submit` with the device's submit lock held)."""
        for cmd in cmds:
            self.dispatch(dev, cmd)

    def dispatch(self, dev: DeviceT, cmd: Command) -> None:
        """Hand one command to its handler."""
        match cmd:
            case Exec():
                self.on_exec(dev, cmd)
            case Copy():
                self.on_copy(dev, cmd)
            case SetSignal():
                self.on_signal(dev, cmd)
            case Wait():
                self.on_wait(dev, cmd)
            case Timestamp():
                self.on_timestamp(dev, cmd)
            case Barrier():
                self.on_barrier(dev, cmd)

    # ---- handlers: a plugin's queue overrides those of the commands it runs ------------------------------------------

    def on_exec(self, dev: DeviceT, cmd: Exec) -> None:
        raise DeviceError(unhandled_message(type(self), Exec, dev.device))

    def on_copy(self, dev: DeviceT, cmd: Copy) -> None:
        raise DeviceError(unhandled_message(type(self), Copy, dev.device))

    def on_signal(self, dev: DeviceT, cmd: SetSignal) -> None:
        raise DeviceError(unhandled_message(type(self), SetSignal, dev.device))

    def on_wait(self, dev: DeviceT, cmd: Wait) -> None:
        raise DeviceError(unhandled_message(type(self), Wait, dev.device))

    def on_timestamp(self, dev: DeviceT, cmd: Timestamp) -> None:
        raise DeviceError(unhandled_message(type(self), Timestamp, dev.device))

    def on_barrier(self, dev: DeviceT, cmd: Barrier) -> None:
        raise DeviceError(unhandled_message(type(self), Barrier, dev.device))


def unhandled_message(queue_t: type, kind: type[Command], device: str) -> str:
    handler = HANDLERS[kind]
    return (f"{device}: queue {queue_t.__module__}.{queue_t.__qualname__} does not handle {kind.__name__} commands; "
            f"the plugin must implement {queue_t.__name__}.{handler}(dev, cmd: lazy.hcq.{kind.__name__}) (or derive "
            "the queue from lazy.hcq.HostQueue, which runs every command on a host thread)")  # fmt: skip


class HostQueue(HWQueue[DeviceT]):
    """Handlers that run each command on the calling thread: kernels are plain calls (core's `Program`), copies go
    through the allocator's `_transfer`, signals are host signals. Core's simple-tier `SyncQueue` is one; a plugin's
    host-run queue (a worker thread that calls `dispatch`) derives from it."""

    def on_exec(self, dev: DeviceT, cmd: Exec) -> None:
        cmd.program(*cmd.bufs, global_size=cmd.global_size, local_size=cmd.local_size, vals=cmd.vals)

    def on_copy(self, dev: DeviceT, cmd: Copy) -> None:
        if not dev.allocator.supports("transfer"):
            raise DeviceError(f"{dev.device}: a Copy command needs the allocator's 'transfer' feature, which "
                              f"{type(dev.allocator).__name__} does not declare; copy through the host "
                              "(Buffer.copyin/copyout) instead")  # fmt: skip
        dev.allocator._transfer(cmd.dest, cmd.src, cmd.nbytes, dev, dev)

    def on_signal(self, dev: DeviceT, cmd: SetSignal) -> None:
        try:
            if profile.pending and cmd.signal is dev.timeline_signal:
                # the thread that finished the work reports it before waking the waiters, so a `synchronize` returns
                # with the events of what it waited for delivered (or being delivered by a thread already at it)
                profile.poll(dev, cmd.value)
        finally:
            cmd.signal.value = cmd.value

    def on_wait(self, dev: DeviceT, cmd: Wait) -> None:
        if isinstance(cmd.signal, HostSignal):
            cmd.signal.wait(cmd.value, gate=True)  # the host may open the gate by hand later
        else:
            cmd.signal.wait(cmd.value)

    def on_timestamp(self, dev: DeviceT, cmd: Timestamp) -> None:
        cmd.signal.stamp()

    def on_barrier(self, dev: DeviceT, cmd: Barrier) -> None:
        pass  # one host thread runs the commands in order: each sees the memory the ones before it wrote


class SyncSignal(HostSignal):
    """The simple tier's signal: set by the submitting thread itself."""


class SyncQueue(HostQueue[Compiled]):
    """Core's queue for simple-tier devices: `submit` runs the commands right away, in order, on this thread (one
    submission at a time per device: a third-party simple-tier `Program` need not be thread-safe).

    A command that raises (or is interrupted by Ctrl-C) ends the submission, and the error goes straight to the
    submitter; the signals the submission would have set are set anyway, so no other waiter hangs and the device's
    next operation runs as usual."""

    def _submit(self, dev: Compiled, cmds: list[Command]) -> None:
        done = 0
        try:
            for cmd in cmds:
                self.dispatch(dev, cmd)
                done += 1
        finally:
            for cmd in cmds[done:]:
                if isinstance(cmd, SetSignal):
                    cmd.signal.value = cmd.value


# A `Compiled` built without queue types (the simple tier) gets these, in its constructor.
install_simple_tier(SyncSignal, SyncQueue)


def timed(cmds: list[Command], signal_t: type[Signal]) -> tuple[list[Command], list[tuple[Signal, Signal]]]:
    """`cmds` with a `Timestamp` before and after each `Exec` and `Copy`, and those timestamps' (start, end) signals,
    fresh ones of `signal_t` (the device's own: the queue takes the time where the work runs, a device clock included).
    How the profiler times queued work."""
    out: list[Command] = []
    stamps: list[tuple[Signal, Signal]] = []
    for cmd in cmds:
        if isinstance(cmd, (Exec, Copy)):
            start, end = signal_t(0), signal_t(0)
            out += [Timestamp(start), cmd, Timestamp(end)]
            stamps.append((start, end))
        else:
            out.append(cmd)
    return out, stamps


def submit_timed(dev: Compiled, queue: HWQueue[Any]) -> tuple[int, list[tuple[Signal, Signal]]]:
    """Submit `queue` (whose last command signals the timeline) with each launch and copy timed (see `timed`); returns
    the timeline value after which the timestamps can be read, and the (start, end) signals per launch or copy."""
    cmds, stamps = timed(queue.cmds, dev.signal_t)
    timed_queue = type(queue)()
    timed_queue.cmds = cmds
    with dev.submit_lock:  # the value read back is this submission's: nobody else submits meanwhile
        timed_queue.submit(dev)
        return dev.timeline_submitted, stamps


def stamp_now(dev: Compiled, signal: Signal) -> int:
    """Submit a `Timestamp` of `signal` (and a timeline signal) to `dev`'s compute queue: it takes the time when the
    work submitted before it is done. Returns the timeline value after which the time can be read."""
    with dev.submit_lock:
        dev.compute_queue_t().timestamp(signal).signal(dev.timeline_signal, dev.next_value()).submit(dev)
        return dev.timeline_submitted


def queue_contract_problems(dev: Compiled) -> list[str]:
    """What a device's signal and queue types lack, each with its fix (checked by the registry when it opens a
    device). The compute queue handles every command but `Copy` (and `Exec` on a copy-only device); a copy queue
    handles every command but `Exec`."""
    problems = []
    if not (isinstance(dev.signal_t, type) and issubclass(dev.signal_t, Signal)):
        problems.append(f"signal_t {dev.signal_t!r} is not a subclass of lazy.hcq.Signal: pass one (or none, for "
                        "core's synchronous queues)")  # fmt: skip
    compute = SYNC_COMMANDS | ({Exec} if dev.kernel_refusal is None else set())
    for role, queue_t, required in (("compute", dev.compute_queue_t, compute),
                                    ("copy", dev.copy_queue_t, SYNC_COMMANDS | {Copy})):  # fmt: skip
        if queue_t is None:
            continue
        if not (isinstance(queue_t, type) and issubclass(queue_t, HWQueue)):
            problems.append(f"{role}_queue_t {queue_t!r} is not a subclass of lazy.hcq.HWQueue: derive it from "
                            "HWQueue (or HostQueue)")  # fmt: skip
            continue
        for kind in sorted(required - queue_t.handled, key=lambda k: k.__name__):
            problems.append(f"its {role} queue " + unhandled_message(queue_t, kind, dev.device).partition(": ")[2])
    return problems


class HCQGraph:
    """A jit's kernels recorded once into a single queue; each replay replaces only the launches whose buffers or
    variable values changed (with commands whose fields were changed by name) and the timeline value, then submits the
    whole queue in one go.

    A device may replay graphs its own way: `Compiled.graph_t` names a subclass taking the same arguments (the host
    devices' native launcher, `lazy_cpu.graph.HostGraph`); this class is the default.

    With `timed` set (the profiler does, around a replay), a replay times each launch of its queue (one per kernel
    here, one for the whole graph in a native launcher) and leaves `timing`: the timeline value after which the times
    can be read, and the (start, end) timestamp signals per launch."""

    timed = False
    timing: tuple[int, list[tuple[Signal, Signal]]] | None = None

    def __init__(self, dev: Compiled, launches: list[Exec]):
        self.dev = dev
        self.queue = dev.compute_queue_t()
        for launch in launches:
            self.queue.record(launch)
        self.signal_idx = len(self.queue.cmds)
        self.queue.signal(dev.timeline_signal, 0)

    def replay(self, updates: dict[int, Exec] | None = None, buffers: dict[tuple[int, int], Any] | None = None) -> None:
        """`updates` maps a launch's index to the command that replaces it, e.g. `replace(launch, bufs=new_bufs)`
        (new variable values); `buffers` maps (launch index, buffer position) to the opaque that buffer argument takes
        from now on (a replay's new inputs), without building commands."""
        cmds = self.queue.cmds
        with self.dev.submit_lock:  # two threads replaying one graph must not patch each other's submission
            for idx, launch in (updates or {}).items():
                assert idx < self.signal_idx and isinstance(launch, Exec), f"launch {idx} cannot become {launch}"
                cmds[idx] = launch
            for (idx, pos), opaque in (buffers or {}).items():
                cmd = cmds[idx]
                assert idx < self.signal_idx and isinstance(cmd, Exec), f"launch {idx} has no buffer {pos}"
                cmds[idx] = replace(cmd, bufs=(*cmd.bufs[:pos], opaque, *cmd.bufs[pos + 1 :]))
            done = cmds[self.signal_idx]
            assert isinstance(done, SetSignal)
            cmds[self.signal_idx] = SetSignal(done.signal, self.dev.next_value())
            if self.timed:
                self.timing = submit_timed(self.dev, self.queue)
            else:
                self.queue.submit(self.dev)

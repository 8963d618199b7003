"""What ran where and for how long: `Event`s (kernels, jit graph batches, copies, compiles) handed to subscribers, the
Chrome trace file `LAZY_PROFILE` names (written at exit, or by `Profile`), and the `LAZY_DEBUG=2` summary at exit.
Low in the layers (it imports only `lazy.helpers`): the queues and the engine report here, knowing nothing of devices.

Work on a device's queue is timed where it runs: the engine records a `Timestamp` command before and after it (the
device's own signals: a host worker takes `perf_counter` as it gets there, OpenCL reads its event profiling), and hands
the pair here (`submitted`); the times are read once the device's timeline reaches the submission's value. Listeners
are called from whichever thread sees the work finished (a device's queue worker, the submitting thread, or a thread
that waits for the device), one call at a time across threads."""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from lazy.helpers import DEBUG, PROFILE, VIZ
from lazy.record import field, record, replace


@record(frozen=True)
class Event:
    """One piece of timed work. `kind`: "kernel" (one kernel on a queue), "graph" (a jit graph batch its device runs
    as one command: `args["kernels"]` names them), "copy" (between buffers, timed on the host that runs it),
    "transfer" (between host memory and a buffer: `Tensor(array)`, `.numpy()`), or "compile" (code generation and
    compiling of one kernel, or loading it from the caches). `queue` is the track within the device ("compute",
    "copy", "host transfers", "compiler"). `start` is on `time.perf_counter`'s clock; `start` and `duration` are
    seconds. Kernel `args`: "digest" (hex of the kernel AST's `LazyOp.digest`), "global_size", "local_size", "flops",
    "bytes"; copies: "bytes", "src", "dest"; every kind: "realize" (see `realize_id`) and "callsite"."""

    kind: str
    name: str
    device: str
    queue: str
    start: float
    duration: float
    args: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------------
# listeners

# replaced, never changed in place: deliveries iterate over it without a lock
_listeners: tuple[Callable[[Event], None], ...] = ()
_listeners_lock = threading.Lock()


def subscribe(listener: Callable[[Event], None]) -> Callable[[], None]:
    """Call `listener(event)` for each event from now on; returns the function that stops it. A listener is called
    from whichever thread sees the work finished, never by two threads at once; it should return quickly and must not
    run lazy work or wait for a device (the queue worker that called it may be what that work waits for)."""
    global _listeners
    with _listeners_lock:
        _listeners = (*_listeners, listener)

    def unsubscribe() -> None:
        global _listeners
        with _listeners_lock:
            found = [i for i, x in enumerate(_listeners) if x is listener]
            if found:
                _listeners = _listeners[: found[0]] + _listeners[found[0] + 1 :]

    return unsubscribe


def active() -> bool:
    """Whether anyone wants events: a subscriber, `LAZY_PROFILE`, `LAZY_DEBUG>=2` or `LAZY_VIZ` (whose viewer
    subscribes during the first realize: timing is on from its start). The engine times work only then; off, this
    check is all profiling costs."""
    if _listeners:
        return True
    if PROFILE.value or VIZ.value or DEBUG.value >= 2:
        _recorder.register_exit()
        return True
    return False


# ---------------------------------------------------------------------------------------------------------------------
# which realize (or jit replay) work belongs to, and the user's line that asked for it

_realizes = itertools.count(1)
_local = threading.local()
_LAZY_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def begin_realize() -> int:
    """A new realize (or jit replay) starts on this thread: the events it causes carry its number. Returns it."""
    _local.realize, _local.callsite = next(_realizes), None
    return _local.realize


def realize_id() -> int:
    """The number of this thread's current (or last) realize, counted while profiling is `active` (0: none yet)."""
    return getattr(_local, "realize", 0)


@record(frozen=True)
class Origin:
    """What caused some work: the realize's number and the first frame outside lazy that called it ("file:line
    function"). Taken on the realizing thread and handed to helper threads (`adopt`), whose own stacks say nothing."""

    realize: int
    callsite: str


def origin() -> Origin:
    """This thread's current `Origin` (the call site is found once per realize)."""
    if getattr(_local, "callsite", None) is None:
        _local.callsite = _callsite()
    return Origin(realize_id(), _local.callsite)


class adopt:
    """`with adopt(origin):` events made on this (helper) thread belong to `origin`."""

    def __init__(self, where: Origin):
        self.where = where

    def __enter__(self) -> None:
        self.saved = (getattr(_local, "realize", 0), getattr(_local, "callsite", None))
        _local.realize, _local.callsite = self.where.realize, self.where.callsite

    def __exit__(self, *exc: object) -> None:
        _local.realize, _local.callsite = self.saved


def _callsite() -> str:
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_LAZY_DIR) and not path.startswith("<frozen"):
            return f"{path}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


# ---------------------------------------------------------------------------------------------------------------------
# queued work, read once it has run


@record()
class _Submission:
    """Events whose times are the `Signal` timestamps `stamps` ((start, end) per event), readable once the device's
    timeline signal reaches `until`."""

    until: int
    stamps: list[tuple[Any, Any]]
    templates: list[Event]

    def events(self) -> list[Event]:
        out = []
        for template, (start, end) in zip(self.templates, self.stamps):
            begin = start.timestamp
            out.append(replace(template, start=begin, duration=max(end.timestamp - begin, 0.0)))
        return out


# id(device) -> (the device, its submissions in timeline order). Public so that a queue can check, as cheaply as a
# flag, whether it has anything to `poll` for.
pending: dict[int, tuple[Any, deque[_Submission]]] = {}
_pending_lock = threading.Lock()
_outbox: deque[Event] = deque()  # events read and not delivered yet, in order
# reentrant: a listener that makes events (or flushes) delivers them itself instead of waiting for itself
_deliver_lock = threading.RLock()
_failed: set[int] = set()  # ids of listeners that raised (reported once)


def submitted(dev: Any, until: int, stamps: list[tuple[Any, Any]], templates: list[Event]) -> None:
    """Work was submitted to `dev` (a `Compiled`): `templates[i]` ran between the timestamps `stamps[i]`, known once
    `dev.timeline_signal` reaches `until`. Events whose work is already done are delivered now."""
    with _pending_lock:
        pending.setdefault(id(dev), (dev, deque()))[1].append(_Submission(until, stamps, templates))
    poll(dev)


def poll(dev: Any, reached: int = 0) -> None:
    """Deliver the events of `dev`'s finished submissions: those whose timeline value is reached, or is at most
    `reached` (a queue about to set it). Cheap; queues call it as work finishes."""
    reached = max(reached, dev.timeline_signal.value)  # outside the lock: a device's signal may take locks of its own
    with _pending_lock:  # taken off and put in the outbox in one step, so events of a queue stay in its order
        entry = pending.get(id(dev))
        if entry is None:
            return
        queue = entry[1]
        while queue and queue[0].until <= reached:
            _outbox.extend(queue.popleft().events())  # finished work: reading its timestamps does not wait
        if not queue:
            del pending[id(dev)]
    _deliver(block=False)


def emit(event: Event) -> None:
    """Deliver an event timed on the host (a copy, a compile)."""
    _outbox.append(event)
    _deliver(block=False)


class on_host:
    """`with on_host("copy", name, device, "copy", {"bytes": n}):` reports the block, timed on the host that runs
    it, as an event of this thread's `origin` (nothing if it raises)."""

    def __init__(self, kind: str, name: str, device: str, queue: str, args: dict[str, Any]):
        self.kind, self.name, self.device, self.queue, self.args = kind, name, device, queue, args
        self.start = self.elapsed = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start
        if exc_type is None:
            where = origin()
            args = {**self.args, "realize": where.realize, "callsite": where.callsite}
            emit(Event(self.kind, self.name, self.device, self.queue, self.start, self.elapsed, args))


def flush(device: str | None = None) -> None:
    """Wait for the devices with submissions not read yet (or only `device`) and deliver every event: a listener has
    seen all work submitted before this call once it returns."""
    with _pending_lock:
        devices = [dev for dev, _ in pending.values() if device is None or dev.device == device]
    for dev in devices:
        try:
            dev.synchronize()
        except Exception as e:  # the device's own error surfaces where its work is waited for; its events are lost
            print(f"lazy: profile: {dev.device} failed ({type(e).__name__}: {e}); its pending events are dropped",
                  file=sys.stderr)  # fmt: skip
            with _pending_lock:
                pending.pop(id(dev), None)
            continue
        poll(dev)
    _deliver(block=True)


def _deliver(block: bool) -> None:
    """Hand the outbox to the listeners, one thread at a time. A thread that finds another delivering leaves its
    events to it (a queue worker must never wait here); the deliverer looks again after letting go, so none is
    left behind."""
    while _outbox:
        if not _deliver_lock.acquire(blocking=block):
            return
        try:
            while _outbox:
                event = _outbox.popleft()
                _recorder(event)
                for listener in _listeners:
                    _call(listener, event)
        finally:
            _deliver_lock.release()


def _call(listener: Callable[[Event], None], event: Event) -> None:
    """A listener that raises is reported once and kept: its error must not reach the queue worker that finished the
    work (the device would take it for the kernel's)."""
    try:
        listener(event)
    except Exception as e:  # any error of the listener's own
        if id(listener) not in _failed:
            _failed.add(id(listener))
            print(f"lazy: profile: listener {listener!r} raised {type(e).__name__}: {e} (reported once)",
                  file=sys.stderr)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# LAZY_PROFILE's trace file, LAZY_DEBUG=2's summary

MAX_RECORDED = 2_000_000  # events LAZY_PROFILE keeps in memory for the trace file; later ones are counted, not kept
TOP_KERNELS = 20  # rows of the summary's kernel table


class _Recorder:
    """The events the settings ask for: all of them (for the trace file) while `LAZY_PROFILE` is set, and totals per
    kernel, copy route and compile (for the summary) while it or `LAZY_DEBUG>=2` is."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self.dropped = 0
        # (kind, device, name) -> [count, seconds, flops, bytes]
        self.totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
        self.exit_registered = False

    def __call__(self, event: Event) -> None:
        keep = bool(PROFILE.value)
        if not keep and DEBUG.value < 2:
            return
        with self.lock:
            total = self.totals[(event.kind, event.device, event.name)]
            total[0] += 1
            total[1] += event.duration
            total[2] += event.args.get("flops", 0)
            total[3] += event.args.get("bytes", 0)
            if keep:
                if len(self.events) < MAX_RECORDED:
                    self.events.append(event)
                else:
                    self.dropped += 1

    def register_exit(self) -> None:
        if not self.exit_registered:  # on first use, not at import
            self.exit_registered = True
            atexit.register(_at_exit)


_recorder = _Recorder()


def recorded() -> list[Event]:
    """The events kept so far because `LAZY_PROFILE` is set (a copy)."""
    with _recorder.lock:
        return list(_recorder.events)


def _at_exit() -> None:
    try:
        flush()
    except Exception as e:  # a failing device must not hide the rest of the report
        print(f"lazy: profile: could not wait for the devices at exit ({type(e).__name__}: {e})", file=sys.stderr)
    if PROFILE.value:
        try:
            write_trace(PROFILE.value, recorded())
            note = f" ({_recorder.dropped} more events not kept)" if _recorder.dropped else ""
            print(f"lazy: profile written to {PROFILE.value}{note}", file=sys.stderr)
        except OSError as e:
            print(f"lazy: profile: cannot write LAZY_PROFILE={PROFILE.value!r} ({e.strerror or e}); set it to a "
                  "writable path", file=sys.stderr)  # fmt: skip
    if DEBUG.value >= 2:
        print(summary(), file=sys.stderr)


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds * 1e-9 if seconds > 0 else 0.0


def summary() -> str:
    """The `LAZY_DEBUG=2` table: kernels (and jit graphs) by total time, copies, compiles, then the caches' counts."""
    with _recorder.lock:
        totals = {key: list(value) for key, value in _recorder.totals.items()}
    run = sorted(((k, v) for k, v in totals.items() if k[0] in ("kernel", "graph")), key=lambda kv: -kv[1][1])
    lines = [f"lazy: profile summary: {sum(v[0] for _, v in run):.0f} kernel runs in "
             f"{sum(v[1] for _, v in run) * 1e3:.3f} ms"]  # fmt: skip
    if run:
        lines.append(f"{'device':>10s} {'kernel':40s} {'calls':>7s} {'total ms':>10s} {'mean us':>10s} "
                     f"{'GFLOP/s':>9s} {'GB/s':>9s}")  # fmt: skip
        for (_, device, name), (calls, seconds, flops, nbytes) in run[:TOP_KERNELS]:
            rates = f"{_rate(flops, seconds):9.2f} {_rate(nbytes, seconds):9.2f}"
            lines.append(f"{device:>10s} {name[:40]:40s} {calls:7.0f} {seconds * 1e3:10.3f} "
                         f"{seconds / calls * 1e6:10.1f} {rates}")  # fmt: skip
        if len(run) > TOP_KERNELS:
            lines.append(f"{'':>10s} ... and {len(run) - TOP_KERNELS} more")
    for (kind, _, name), (calls, seconds, _, nbytes) in sorted(totals.items()):
        if kind in ("copy", "transfer"):
            lines.append(f"lazy: {name}: {calls:.0f} copies, {nbytes / 1e6:.3f} MB in "
                         f"{seconds * 1e3:.3f} ms ({_rate(nbytes, seconds):.2f} GB/s)")  # fmt: skip
    compiles = [v for k, v in totals.items() if k[0] == "compile"]
    if compiles:
        lines.append(f"lazy: {sum(v[0] for v in compiles):.0f} kernels built (code generation and compiling, or "
                     f"loaded from the caches) in {sum(v[1] for v in compiles):.3f} s")  # fmt: skip
    return "\n".join(lines)


def trace(events: list[Event]) -> dict[str, Any]:
    """`events` as Chrome's Trace Event Format (Perfetto, chrome://tracing): one process per device, one thread per
    queue ("compute", "copy", "compiler"; work that overlaps on a queue, such as compiles on a thread pool, gets more
    lanes: "compiler 2"), complete ("X") events in microseconds from the first event, sizes and rates in `args`."""
    events = sorted(events, key=lambda e: e.start)
    origin_s = events[0].start if events else 0.0
    pids: dict[str, int] = {}
    lanes: dict[tuple[str, str], list[float]] = {}  # (device, queue) -> each lane's end so far
    tids: dict[tuple[str, str, int], int] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        pid = pids.setdefault(e.device, len(pids) + 1)
        ends = lanes.setdefault((e.device, e.queue), [])
        lane = next((i for i, end in enumerate(ends) if end <= e.start), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = e.start + e.duration
        tid = tids.setdefault((e.device, e.queue, lane), len(tids) + 1)
        args = dict(e.args)
        if e.duration > 0 and args.get("flops"):
            args["GFLOP/s"] = round(_rate(args["flops"], e.duration), 3)
        if e.duration > 0 and args.get("bytes"):
            args["GB/s"] = round(_rate(args["bytes"], e.duration), 3)
        ts, dur = round((e.start - origin_s) * 1e6, 3), round(e.duration * 1e6, 3)
        out.append({"name": e.name, "cat": e.kind, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                    "args": args})  # fmt: skip
    meta: list[dict[str, Any]] = []
    for device, pid in pids.items():
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for (device, queue, lane), tid in tids.items():
        name = queue if lane == 0 else f"{queue} {lane + 1}"
        meta.append({"name": "thread_name", "ph": "M", "pid": pids[device], "tid": tid,
                     "args": {"name": name, "queue": queue}})  # fmt: skip
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pids[device], "tid": tid,
                     "args": {"sort_index": tid}})  # fmt: skip
    return {"traceEvents": meta + out, "displayTimeUnit": "ms",
            "otherData": {"producer": "lazy", "clock": "time.perf_counter", "origin_s": origin_s}}  # fmt: skip


def write_trace(path: str, events: list[Event]) -> None:
    """Write `events` to `path` as a Chrome trace file (see `trace`)."""
    import json  # on first use: `import lazy` need not load it

    with open(path, "w") as f:
        json.dump(trace(events), f, default=str)


class Profile:
    """Profile a block: `with lazy.profile.Profile("trace.json") as prof: ...` collects the events of the work the
    block submits (`prof.events`; the block's end waits for it) and, given a path, writes them as a Chrome trace."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.events: list[Event] = []

    def __enter__(self) -> Profile:
        self.events = []
        self._stop = subscribe(self.events.append)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            flush()
        finally:
            self._stop()
        if self.path is not None:
            write_trace(self.path, self.events)

"""Recording for the kernel graph viewer while `LAZY_VIZ` is on: for each schedule, the LazyBuffer graph it started
from, why each buffer got memory and which nodes fused into which kernel (`ScheduleRecord`, filled by
`lazy.engine.schedule`); for each kernel compiled, its AST, optimisations, UOps and source (`record_program`, called by
`lazy.codegen.program`); kernel and copy times from `lazy.profile` events. All of it becomes plain JSON-able data as
it is recorded (the graph changes as it runs), in the `Trace` of the enclosing `recording()` block or else in the
process's trace, which is written at exit and then, at LAZY_VIZ=1 on a terminal, served until Ctrl-C."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lazy.profile as profile
from lazy.helpers import BEAM, NOOPT, VIZ, Context

TRACE_FORMAT = "lazy-viz-trace"
TRACE_VERSION = 1
MAX_NODES = 200_000  # graph nodes one trace keeps in all: later realizes keep their kernels, not their graphs
MAX_REALIZES = 20_000  # realizes one trace keeps (a long loop without `jit` schedules at every step); later are counted
MAX_EVENTS = 2_000_000  # profiler events one trace keeps (jit replays add some at every call)
TEXT_LIMIT = 300  # characters of an argument's or a view's repr kept in a node
_LAZY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class Trace:
    """What was recorded: `realizes` in order (each a dict of plain data: graph nodes, schedule items) and `kernels`
    by AST digest (hex): the AST listing and the programs compiled from it. Kernel times arrive as profiler events
    (from any thread) and are joined to both by `data()`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.realizes: list[dict[str, Any]] = []
        self.kernels: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[Any, str, str | None, float]] = []  # (realize number, kind, digest, seconds)
        self.nodes = 0
        self.dropped = 0  # realizes not kept (past MAX_REALIZES)
        self._unrecorded: dict[str, tuple[Any, str]] = {}  # digest -> (AST, device) of kernels compiled before
        self._unsubscribe: Callable[[], None] | None = None

    def listen(self) -> None:
        """Take kernel and copy times from the profiler (which times the work while anyone listens)."""
        self._unsubscribe = profile.subscribe(self._on_event)

    def stop_listening(self) -> None:
        """Stop taking times, once the work submitted so far has been timed (its events delivered)."""
        if self._unsubscribe is not None:
            try:
                profile.flush()
            finally:
                self._unsubscribe()
                self._unsubscribe = None

    def _on_event(self, event: Any) -> None:  # from whichever thread finished the work: one append is atomic
        if event.kind in ("kernel", "copy") and len(self.events) < MAX_EVENTS:
            self.events.append((event.args.get("realize"), event.kind, event.args.get("digest"), event.duration))

    def add_realize(self, record: dict[str, Any], asts: dict[str, tuple[Any, str]]) -> None:
        with self.lock:
            if len(self.realizes) >= MAX_REALIZES:
                self.dropped += 1
                return
            record["index"] = len(self.realizes)
            self.realizes.append(record)
            self.nodes += len(record["nodes"])
            for digest, (ast, device) in asts.items():
                if digest not in self.kernels:
                    self.kernels[digest] = {"digest": digest, "ast": repr(ast), "device": device, "programs": []}
                if not self.kernels[digest]["programs"]:
                    self._unrecorded[digest] = (ast, device)

    def add_program(self, digest: str, ast: Any, program: dict[str, Any]) -> None:
        with self.lock:
            kernel = self.kernels.setdefault(
                digest, {"digest": digest, "ast": repr(ast), "device": program["device"], "programs": []}
            )
            same = [i for i, p in enumerate(kernel["programs"]) if _variant(p) == _variant(program)]
            if same:
                kernel["programs"][same[0]] = program
            else:
                kernel["programs"].append(program)
            self._unrecorded.pop(digest, None)

    def data(self) -> dict[str, Any]:
        """The whole trace as plain data (what `save` writes and the viewer reads), times joined in."""
        self._generate_unrecorded()
        with self.lock:
            kernel_times, item_times = _join_times(self.realizes, list(self.events))
            realizes = [
                {**r, "items": [_resolved(item, self.kernels, item_times.get((r["index"], i), []))
                                for i, item in enumerate(r["items"])]}
                for r in self.realizes
            ]  # fmt: skip
            kernels = {d: {**k, "times": kernel_times.get(d, [])} for d, k in self.kernels.items()}
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "program": " ".join(sys.argv),
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "realizes": realizes,
            "realizes_not_kept": self.dropped,
            "kernels": kernels,
        }

    def save(self, path: str, data: dict[str, Any] | None = None) -> str:
        """Write the trace (or `data`, what `data()` gave) as JSON, atomically: a viewer never reads half a file.
        Returns the path."""
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.data() if data is None else data, f, separators=(",", ":"))
        os.replace(tmp, path)
        return path

    def _generate_unrecorded(self) -> None:
        """Kernels whose program was compiled before recording began (found in the method cache, so never lowered
        while recording): lower them again for the viewer, with the optimisations the settings choose now."""
        with self.lock:
            todo, self._unrecorded = self._unrecorded, {}
        for digest, (ast, device) in todo.items():
            try:
                from lazy.codegen.program import build_kernel, kernel_program
                from lazy.device import get_device

                renderer = get_device(device).renderer
                k = build_kernel(ast, renderer)
                program = program_record(k, kernel_program(k, renderer), "heuristics (lowered again for the viewer)")
            except Exception as e:  # a device closed since: the AST is still worth showing
                program = {"name": f"kernel {digest[:8]}", "device": device, "error": f"not lowered again: {e}"}
            program["regenerated"] = True
            self.add_program(digest, ast, program)


def _variant(program: dict[str, Any]) -> tuple[Any, ...]:
    return program.get("device"), tuple(program.get("opts", ()))


def _resolved(item: dict[str, Any], kernels: dict[str, dict[str, Any]], times: list[float]) -> dict[str, Any]:
    """A schedule item with its times, and for a kernel the index of the program it ran (the one lowered for its
    device's renderer; instances such as CPU:1 share CPU's)."""
    out = {**item, "times": times}
    if item["kind"] == "kernel" and (kernel := kernels.get(item["digest"])) is not None:
        programs = kernel["programs"]
        device = item["device"].partition(":")[0]
        matching = [i for i, p in enumerate(programs) if p.get("device") in (item["device"], device)]
        out["program"] = matching[-1] if matching else (0 if programs else None)
    return out


def _join_times(
    realizes: list[dict[str, Any]], events: list[tuple[Any, str, str | None, float]]
) -> tuple[dict[str, list[float]], dict[tuple[int, int], list[float]]]:
    """Kernel times by digest (every run, jit replays included), and each schedule item's time. Events carry the
    profiler's number of the realize that ran them, and each recorded schedule the number current when it was made:
    a realize's events go to the first schedule of its number that ran what they ran (a `Tensor.schedule()` call
    between realizes carries the number before it and comes second). Within a realize, the events of one kernel (or
    of copies) meet its items (or the copies') in order."""
    kernel_times: dict[str, list[float]] = {}
    groups: dict[int, list[tuple[str, str | None, float]]] = {}
    for number, kind, digest, seconds in events:
        if kind == "kernel" and digest:
            kernel_times.setdefault(digest, []).append(seconds)
        if isinstance(number, int):
            groups.setdefault(number, []).append((kind, digest if kind == "kernel" else None, seconds))
    stamped: dict[Any, list[int]] = {}
    for r, record in enumerate(realizes):
        stamped.setdefault(record.get("profile_realize"), []).append(r)
    item_times: dict[tuple[int, int], list[float]] = {}
    for number, group in groups.items():
        ran = [(kind, digest) for kind, digest, _ in group]
        for r in stamped.get(number, ()):
            slots: dict[tuple[str, str | None], list[int]] = {}
            for i, item in enumerate(realizes[r]["items"]):
                slots.setdefault((item["kind"], item.get("digest")), []).append(i)
            if all(len(slots.get(key, ())) >= ran.count(key) for key in set(ran)):
                for kind, digest, seconds in group:
                    item_times[(r, slots[(kind, digest)].pop(0))] = [seconds]
                break
    return kernel_times, item_times


# -- recording: what the scheduler and the code generator hand over ----------------------------------------------


class ScheduleRecord:
    """One `create_schedule`. The scheduler hands over its graph and decisions (`scheduled`; when it schedules again
    with snapshots of assign targets, the last call wins) and then its order (`finish`), which turns them into plain
    data in the current trace before anything runs."""

    def __init__(self) -> None:
        self.callsite = callsite()
        self.profile_realize = profile.realize_id()  # what the profiler's events of this realize carry
        self.bases: Iterable[Any] = ()
        self.realizes: dict[Any, str] = {}
        self.builders: dict[Any, Any] = {}

    def scheduled(self, bases: Iterable[Any], realizes: dict[Any, str], builders: dict[Any, Any]) -> None:
        """`bases`: the graph's bases in program order (realized inputs and constants included); `realizes`: each
        base that gets memory and why; `builders`: each kernel's output base and its `_KernelBuilder` (whose uses are
        the nodes fused into it)."""
        self.bases, self.realizes, self.builders = bases, realizes, builders

    def finish(self, outs: list[Any], order: list[Any]) -> None:
        if not order:  # everything was in memory already: nothing ran, nothing to show
            return
        trace = current()
        bases = list(self.bases)
        index = {id(lb): i for i, lb in enumerate(bases)}
        omitted = trace.nodes + len(bases) > MAX_NODES
        nodes = [] if omitted else [_node(lb, index, self.realizes.get(lb)) for lb in bases]
        asts: dict[str, tuple[Any, str]] = {}
        items = []
        for si in order:
            item = _item(si, index, self._members(si))
            if item["kind"] == "kernel":
                asts[item["digest"]] = (si.ast, item["device"])
            items.append(item)
        if omitted:
            for item in items:
                item["nodes"], item["inputs"], item["output"] = [], [], None
        record = {
            "callsite": self.callsite,
            "profile_realize": self.profile_realize,
            "nodes": nodes,
            "outputs": [index.get(id(o.base)) for o in outs],
            "items": items,
            "graph_omitted": omitted,
        }
        trace.add_realize(record, asts)

    def _members(self, si: Any) -> list[Any]:
        """The bases computed in `si`'s kernel: its output and what fused into it (constants included), not the
        buffers it loads."""
        if not si.outputs:
            return []
        out = si.outputs[0]
        if (builder := self.builders.get(out)) is None:
            return [out]
        members: dict[int, Any] = {id(out): out}
        for lb, _ in builder.cache:
            if lb.realized is None and lb not in self.realizes:
                members.setdefault(id(lb), lb)
        return list(members.values())


def _node(lb: Any, index: dict[int, int], reason: str | None) -> dict[str, Any]:
    realized = lb.realized is not None
    srcs = [src for src in (() if realized else lb.srcs) if id(src.base) in index]
    return {
        "op": lb.op.name if lb.op is not None else "?",
        "arg": _text(lb.arg),
        "dtype": getattr(lb.dtype, "name", str(lb.dtype)),
        "shape": _shape(lb.shape),
        "device": lb.device,
        "realized": realized,  # in memory before this realize: an input
        "reason": reason,  # why it gets memory in this realize (None: fused, or an input)
        "srcs": [index[id(src.base)] for src in srcs],
        "views": [None if src.base is src else _view(src) for src in srcs],
    }


def _item(si: Any, index: dict[int, int], members: list[Any]) -> dict[str, Any]:
    kind = si.kind
    item: dict[str, Any] = {
        "kind": kind,
        "device": si.bufs[0].device,
        "output": index.get(id(si.outputs[0])) if si.outputs else None,
        "nodes": [index[id(lb)] for lb in members if id(lb) in index],
        "inputs": [index[id(lb)] for lb in si.inputs if id(lb) in index],
        "digest": si.ast.digest.hex() if kind == "kernel" else None,
        "vars": {str(var.expr): val for var, val in si.var_vals.items()},
    }
    if kind in ("copy", "view") and len(si.bufs) > 1:
        item["src_device"], item["bytes"] = si.bufs[1].device, si.bufs[0].nbytes
    return item


def _shape(shape: tuple[Any, ...]) -> list[Any]:
    return [s if isinstance(s, int) else str(s) for s in shape]


def _text(value: Any) -> str:
    return "" if value is None else _clip(repr(value))


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def _view(src: Any) -> str:
    """A view a node reads a source through: the base's shape, the view's, and its ShapeTracker."""
    return _clip(f"{_shape(src.base.shape)} -> {_shape(src.shape)}: {src.st!r}")


def program_record(k: Any, spec: Any, opts_from: str) -> dict[str, Any]:
    """A kernel's program as plain data: optimisations `k` applied (and who chose them), UOps, source, launch."""
    from lazy.codegen.uops import pretty

    return {
        "name": spec.name,
        "device": spec.device,
        "opts": [repr(opt) for opt in k.applied_opts],
        "opts_from": opts_from,
        "uops": pretty(spec.uops) if spec.uops is not None else "",
        "source": spec.src,
        "global_size": None if spec.global_size is None else [str(s) for s in spec.global_size],
        "local_size": None if spec.local_size is None else [str(s) for s in spec.local_size],
        "op_estimate": str(spec.op_estimate),
        "mem_estimate": str(spec.mem_estimate),
    }


def record_program(ast: Any, k: Any, spec: Any, opts_given: bool) -> None:
    """`lazy.codegen.program` lowered `ast` as `Kernel` `k` to `spec`; `opts_given`: its optimisations came from the
    caller (BEAM's choice), not from the heuristics."""
    opts_from = ("BEAM" if BEAM >= 1 else "given") if opts_given else "none (NOOPT)" if NOOPT else "heuristics"
    current().add_program(ast.digest.hex(), ast, program_record(k, spec, opts_from))


def callsite() -> str:
    """The first frame outside the lazy package: the user's line that caused this (file:line function)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LAZY_DIR):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ""
    file = frame.f_code.co_filename
    with contextlib.suppress(ValueError):  # another drive (Windows)
        rel = os.path.relpath(file)
        file = rel if not rel.startswith("..") else file
    return f"{file}:{frame.f_lineno} {frame.f_code.co_name}"


# -- where records go ------------------------------------------------------------------------------------------------

_recording: list[Trace] = []  # traces of the open `recording()` blocks, innermost last
_process: list[Trace] = []  # the process's trace (LAZY_VIZ from the environment or a Context), made on first use
_process_lock = threading.Lock()


def current() -> Trace:
    """The trace of the innermost `recording()` block, else the process's (made on first use: at exit it is written,
    and served until Ctrl-C when LAZY_VIZ was 1 then and standard input is a terminal)."""
    if _recording:
        return _recording[-1]
    with _process_lock:
        if not _process:
            trace = Trace()
            trace.listen()
            _process.append(trace)
            atexit.register(_at_exit, trace, int(VIZ))
        return _process[0]


@contextlib.contextmanager
def recording() -> Iterator[Trace]:
    """Record every realize inside the block into a new `Trace` (LAZY_VIZ on for the block; nothing at exit):
    `with lazy.viz.recording() as trace: ...`, then `trace.save(path)` or `lazy.viz.server.serve(trace.data())`."""
    trace = Trace()
    trace.listen()
    _recording.append(trace)
    try:
        with Context(VIZ=1):
            yield trace
    finally:
        _recording.remove(trace)
        trace.stop_listening()


def default_path() -> str:
    import tempfile  # on first use: `import lazy` stays light

    return os.path.join(tempfile.gettempdir(), f"lazy-viz-{os.getpid()}.json")


def _at_exit(trace: Trace, mode: int) -> None:
    try:
        trace.stop_listening()
    except Exception as e:  # a failed device loses its times, not the trace
        print(f"LAZY_VIZ: kernel times may be missing ({type(e).__name__}: {e})", file=sys.stderr)
    if not trace.realizes:
        print("LAZY_VIZ: nothing was realized, so there is nothing to show", file=sys.stderr)
        return
    data = trace.data()
    path = default_path()
    try:
        trace.save(path, data)
        print(f"LAZY_VIZ: trace written to {path} (`python -m lazy viz {path}` shows it)", file=sys.stderr)
    except OSError as e:
        print(f"LAZY_VIZ: could not write the trace to {path}: {e}", file=sys.stderr)
    if mode != 1:
        return
    if not (sys.stdin is not None and sys.stdin.isatty()):  # nobody could press Ctrl-C: serving would hang the run
        print("LAZY_VIZ: not serving the viewer: standard input is not a terminal", file=sys.stderr)
        return
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # (a shell's background job): Ctrl-C could not stop it
        print("LAZY_VIZ: not serving the viewer: this process ignores Ctrl-C (SIGINT), which would stop it",
              file=sys.stderr)  # fmt: skip
        return
    from lazy.viz.server import serve

    serve(data, open_browser=True, stream=sys.stderr)

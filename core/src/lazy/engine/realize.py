"""Realize: schedule what some LazyBuffers need and run it, through the schedule cache. A graph whose structure was
realized before runs the steps made for it then (`CachedSchedule`), on its own buffers, without scheduling or lowering
again; on devices that record graphs cheaply its consecutive kernels replay as one graph (`StepGraph`). The runners
it launches, the method cache and kernel building live in `lazy.engine.runners`."""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Iterator
from typing import Any, cast

import lazy.profile as profile
from lazy.device import THROUGH_BASE, close_callbacks, get_device
from lazy.helpers import BEAM, DEBUG, NOOPT, VIZ, GlobalCounters
from lazy.lazy import LazyBuffer, Snapshot, forget_graph, outliving_readers
from lazy.ops import LazyOp, Ops
from lazy.record import record
from lazy.symbolic import Variable

from .runners import (
    BufferCopy,
    CompiledRunner,
    EmptyRunner,
    ExecItem,
    PeerRead,
    Runner,
    ViewRunner,
    capturing,
    copy_now,
    count_run,
    estimate,
    get_runner,
    keep_peer_reads_safe,
    lent,
    lower_schedule_item,
    method_cache,
    precompile,
    run_runner,
    settle_peer_reads,
    upgrade_kernels,
    written_by,
)
from .schedule import ScheduleItem, Structure, create_schedule, graph_structure

# the engine's public names: this module's own, and the runners' (`lazy.engine.runners`) that code importing them
# from here has always found here
__all__ = [
    "BufferCopy",
    "CachedSchedule",
    "CompiledRunner",
    "EmptyRunner",
    "ExecItem",
    "PeerRead",
    "REALIZE_LOCK",
    "Runner",
    "Step",
    "StepGraph",
    "ViewRunner",
    "capturing",
    "copy_now",
    "count_run",
    "estimate",
    "get_runner",
    "keep_peer_reads_safe",
    "lent",
    "lower_schedule_item",
    "method_cache",
    "precompile",
    "realize",
    "run_runner",
    "run_schedule",
    "schedule_cache",
    "settle_peer_reads",
    "upgrade_kernels",
    "written_by",
]

# Scheduling reads and rewrites the shared LazyBuffer graph (realized nodes drop their sources), so two threads must
# not schedule and run at once: one realize at a time; the devices' queues still overlap the work they were given.
REALIZE_LOCK = threading.RLock()


@record(frozen=True)
class Step:
    """One item of a cached schedule: its runner (a kernel's is looked up in the method cache by `kernel`, its device
    and AST, when it runs: the method cache stays the one place compiled kernels live), and its buffers and outputs
    as indices into a `Structure`'s nodes (any graph of that structure supplies its own)."""

    runner: Runner | None
    kernel: tuple[str, LazyOp] | None
    bufs: tuple[int, ...]
    outputs: tuple[int, ...]
    var_vals: dict[Variable, int]


@record()
class CachedSchedule:
    """A schedule kept for a structure: its steps, over the structure's nodes followed by one snapshot copy for each
    assign target in `snapshots` (the targets' indices, ascending): the copies an assign needs when nodes outside the
    graph still read what it overwrites (`lazy.lazy.Snapshot`), made anew for each run. From its second run on, the
    steps run as `plan` (`_graph_plan`: kernels grouped into graphs where the device replays them cheaply)."""

    steps: list[Step]
    snapshots: tuple[int, ...] = ()
    key: Any = None  # the structure's key (with the settings a schedule depends on)
    runs: int = 0
    plan: list[Step | StepGraph] | None = None


class StepGraph:
    """Two or more consecutive kernel steps of a cached schedule on one device that records graphs of kernels cheaply
    (`Compiled.eager_graphs`: the host devices' native launcher), run as one replay of the device's `graph_t`, as a
    jit replays its graph batches: one queue submission, no Python between the kernels (a split kernel's threads
    start and join in C), the buffer arguments that changed since the last run patched in. The graph is recorded
    again when a kernel's program changed (a quick build replaced by its full one); while profiling, capturing for a
    jit, or when code outside lazy shares a buffer (DLPack), the steps run one by one as before."""

    def __init__(self, device: str, steps: list[Step]):
        self.device, self.steps = device, steps
        self.kernels = [cast("tuple[str, LazyOp]", step.kernel) for step in steps]
        self.slots = [(n, j) for n, step in enumerate(steps) for j in range(len(step.bufs))]
        self.slot_nodes = [i for step in steps for i in step.bufs]  # the node each slot's buffer belongs to
        self.graph: Any = None
        self.programs: list[Any] = []  # the programs the graph was recorded with
        self.last: list[Any] = []  # the buffer handles it holds, by slot
        # what a run adds to `GlobalCounters` (kernels, operations, bytes), summed once where no estimate is symbolic
        self.counts: tuple[int, int, int] | None = None

    def run(self, nodes: list[LazyBuffer]) -> bool:
        """Run the steps as a graph on `nodes`' buffers; False (nothing run) when they must run one by one."""
        runners = [get_runner(device, ast) for device, ast in self.kernels]
        now = []  # the buffers' handles, by slot (one pass: this runs for every eager realize of a cached schedule)
        for i in self.slot_nodes:
            buf = nodes[i].buffer
            if (opaque := buf._opaque) is None:
                opaque = buf.allocate()._opaque
            held = buf if buf.base is None else buf.base
            if held._shared:
                return False
            if opaque is THROUGH_BASE or (held._allocator is not None and held._allocator.closed):
                opaque = buf.opaque  # (raises the error that explains it)
            now.append(opaque)
        programs = [runner.program for runner in runners]
        if self.graph is None or not all(map(operator.is_, programs, self.programs)):
            bufs = [[nodes[i].buffer for i in step.bufs] for step in self.steps]
            dev = get_device(self.device)
            launches = [runner.launch(group, step.var_vals) for runner, group, step in zip(runners, bufs, self.steps)]
            self.graph, self.programs = cast("type", dev.graph_t)(dev, launches), programs
            self.counts = _summed_counts(runners)
            self.graph.replay()
        else:  # by identity: handles may compare by contents
            moved = {slot: new for slot, new, old in zip(self.slots, now, self.last) if new is not old}
            self.graph.replay(None, moved or None)
        self.last = now
        for runner in runners:
            if runner.upgrade is not None:
                runner.count_run()
        if (counts := self.counts) is not None:
            GlobalCounters.kernel_count += counts[0]
            GlobalCounters.global_ops += counts[1]
            GlobalCounters.global_mem += counts[2]
        else:
            for runner, step in zip(runners, self.steps):
                count_run(runner, step.var_vals)
        return True


def _summed_counts(runners: list[CompiledRunner]) -> tuple[int, int, int] | None:
    """What running `runners` once adds to `GlobalCounters` (as `count_run` for each), or None where an estimate is
    symbolic (its value depends on the variables of each run)."""
    ops = mem = 0
    for runner in runners:
        if type(runner.op_estimate) is not int or type(runner.mem_estimate) is not int:
            return None
        ops, mem = ops + runner.op_estimate, mem + runner.mem_estimate
    return len(runners), ops, mem


def _graph_plan(steps: list[Step]) -> list[Step | StepGraph]:
    """`steps` with each run of two or more consecutive kernels on one device with `eager_graphs` as a `StepGraph`."""
    plan: list[Step | StepGraph] = []
    run: list[Step] = []

    def flush() -> None:
        if len(run) >= 2:
            plan.append(StepGraph(cast("tuple[str, LazyOp]", run[0].kernel)[0], list(run)))
        else:
            plan.extend(run)
        run.clear()

    for step in steps:
        device = step.kernel[0] if step.kernel is not None else None
        if device is None or not get_device(device).eager_graphs:
            flush()
            plan.append(step)
            continue
        if run and cast("tuple[str, LazyOp]", run[0].kernel)[0] != device:
            flush()
        run.append(step)
    flush()
    return plan


# the hash of a structure key -> its cached schedule (whose own key must equal the one looked up: two keys of one hash
# are not the same structure), most recently used last. A key is hashed once per realize: it is a deep tuple. Bounded,
# as a graph whose constants change every step (a learning-rate schedule) would otherwise add an entry per call.
schedule_cache: dict[int, CachedSchedule] = {}
SCHEDULE_CACHE_SIZE = 1024


def _forget_schedules(device: str) -> None:
    schedule_cache.clear()  # cached copies and views name the closing device's buffers' devices


close_callbacks.append(_forget_schedules)


def realize(outs: list[LazyBuffer]) -> None:
    """Schedule and run everything `outs` need, one realize at a time across threads. A graph whose structure was
    realized before (same ops, constants, views, dtypes, devices, variable values; any buffers) runs the schedule
    made for it then, without scheduling or lowering again. With assigns, also only if the same targets need a
    snapshot of their old value as then (nodes outside the graph that still read them, see `_snapshots`)."""
    with REALIZE_LOCK:
        if profile.active():
            profile.begin_realize()
        # LAZY_DEBUG=3 prints each schedule as it is made, LAZY_VIZ records it: both schedule every time
        structure = graph_structure(outs) if DEBUG.value < 3 and not VIZ.value else None
        if structure is None:
            run_schedule(create_schedule(outs))
            return
        key = (structure.key, BEAM.value, NOOPT.value)
        slot = hash(key)
        if (cached := schedule_cache.pop(slot, None)) is not None and cached.key != key:
            cached = None  # another structure of the same hash: this one's entry replaces it
        copies: list[LazyBuffer] = []
        if cached is not None and structure.assigns:
            if (snapshots := _snapshots(structure, cached)) is None:  # other targets need a snapshot this time
                schedule_cache[slot] = cached
                with _released(structure):
                    schedule = create_schedule(outs)
                run_schedule(schedule)
                return
            for snapshot in snapshots:
                snapshot.reroute()
            copies = [snapshot.copy for snapshot in snapshots]
        if cached is None:
            with _released(structure):  # an assign's scheduling counts references to the graph's nodes
                schedule = create_schedule(outs)
            precompile(schedule)
            if (made := _cacheable(schedule, structure, key)) is None:
                run_schedule(schedule)
                return
            cached, copies = made
        schedule_cache[slot] = cached
        if len(schedule_cache) > SCHEDULE_CACHE_SIZE:
            del schedule_cache[next(iter(schedule_cache))]
        _run_cached(cached, [*structure.nodes, *copies])
        if lent.to:
            settle_peer_reads()


def _snapshots(structure: Structure, cached: CachedSchedule) -> list[Snapshot] | None:
    """The snapshots this run of `structure`'s cached schedule needs (`lazy.lazy.outliving_readers`: nodes outside
    the graph that read an assign target's old value and may be realized after it), or None when their targets are
    not those the schedule was made with. The walk counts references, so the structure's list of its nodes is
    emptied meanwhile."""
    nodes = structure.nodes
    targets = [nodes[i].srcs[1].base for i in structure.assigns]
    realized = {id(nodes[i]) for step in cached.steps for i in step.outputs if i < len(nodes)}
    del nodes
    with _released(structure):
        found = outliving_readers(targets, realized)
    index = {id(lb): i for i, lb in enumerate(structure.nodes)}
    order = sorted(found, key=lambda target: index.get(id(target), -1))
    if tuple(index.get(id(target), -1) for target in order) != cached.snapshots:
        return None
    return [Snapshot(target, found[target]) for target in order]


def _cacheable(schedule: list[ScheduleItem], structure: Structure,
               key: Any) -> tuple[CachedSchedule, list[LazyBuffer]] | None:  # fmt: skip
    """`schedule` kept for `structure`, with the snapshot copies it made (see `CachedSchedule`); None when it reads a
    node the structure does not reach (`key`: the structure's, kept with it). Replaying it is right whenever the same
    targets need copies: every kernel of the schedule that reads a target's old value runs before the target's
    assign, or reads its copy, which is made first; the readers `_snapshots` finds are pointed at the new copies, for
    when they are realized later."""
    index = {id(lb): i for i, lb in enumerate(structure.nodes)}
    copies = sorted(
        (
            (index.get(id(out.srcs[0]), -1) if out.srcs else -1, out)
            for si in schedule
            for out in si.outputs
            if out.is_snapshot
        ),  # fmt: skip
        key=lambda pair: pair[0],
    )
    if any(at < 0 for at, _ in copies):
        return None
    nodes = [*structure.nodes, *(copy for _, copy in copies)]
    if (steps := _steps(schedule, nodes)) is None:
        return None
    return CachedSchedule(steps, tuple(at for at, _ in copies), key), [copy for _, copy in copies]


@contextlib.contextmanager
def _released(structure: Structure) -> Iterator[None]:
    """`structure.nodes` emptied meanwhile, so that counting references to the nodes (`lazy.lazy._look_up`) sees
    only the graph's own and those from outside it. Every node stays alive: the outputs being realized reach them."""
    if not structure.assigns:
        yield
        return
    held = [weakref.ref(n) for n in structure.nodes]
    structure.nodes.clear()
    try:
        yield
    finally:
        structure.nodes.extend(cast("LazyBuffer", ref()) for ref in held)


def _steps(schedule: list[ScheduleItem], nodes: list[LazyBuffer]) -> list[Step] | None:
    """`schedule` in terms of indices into `nodes`, or None if it reads a buffer that is not among them."""
    where = {id(lb): i for i, lb in enumerate(nodes)}
    steps = []
    for si in schedule:
        held = (*si.outputs, *si.inputs)
        if len(held) != len(si.bufs) or any(id(lb) not in where for lb in held):
            return None
        outputs = tuple(where[id(lb)] for lb in si.outputs)
        kernel = (si.bufs[0].device, si.ast) if si.ast.op is Ops.SINK else None
        runner = lower_schedule_item(si).runner if kernel is None else None
        steps.append(Step(runner, kernel, tuple(where[id(lb)] for lb in held), outputs, dict(si.var_vals)))
    return steps


def _run_cached(cached: CachedSchedule, nodes: list[LazyBuffer]) -> None:
    """Run a cached schedule on `nodes`: step by step the first time (and while a jit captures or profiling is on,
    which need each kernel on its own), then by its plan (`StepGraph`)."""
    if capturing or profile.active():
        _run_steps(cached.steps, nodes)
        return
    if cached.plan is None:
        cached.runs += 1
        if cached.runs < 2:  # a schedule run once costs no plan
            _run_steps(cached.steps, nodes)
            return
        cached.plan = _graph_plan(cached.steps)
    for part in cached.plan:
        if isinstance(part, Step):
            _run_steps([part], nodes)
        elif part.run(nodes):
            for step in part.steps:
                for i in step.outputs:
                    out = nodes[i]
                    out.done = True
                    forget_graph(out)
        else:
            _run_steps(part.steps, nodes)


def _run_steps(steps: list[Step], nodes: list[LazyBuffer]) -> None:
    for step in steps:
        runner = step.runner if step.kernel is None else get_runner(*step.kernel)
        assert runner is not None
        bufs = [nodes[i].buffer for i in step.bufs]
        if capturing:  # a jit records the run as an ExecItem
            ei = ExecItem(runner, bufs, step.var_vals)
            ei.run()
            outputs = tuple([nodes[i] for i in step.outputs])
            for cb in capturing:
                cb(ei, outputs)
        else:
            run_runner(runner, bufs, step.var_vals)
        for i in step.outputs:
            out = nodes[i]
            out.done = True
            forget_graph(out)


def run_schedule(schedule: list[ScheduleItem], var_vals: dict[Variable, int] | None = None) -> None:
    precompile(schedule)
    for si in schedule:
        ei = lower_schedule_item(si)
        ei.run(var_vals)
        for cb in capturing:
            cb(ei, si.outputs)
        for out in si.outputs:
            out.done = True
            forget_graph(out)
    if lent.to:
        settle_peer_reads()

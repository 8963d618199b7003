"""`CapturedJit`: what a `TinyJit` captured (its kernels and copies as `ExecItem`s on any number of devices, where the
inputs go, how the returned tensors are rebuilt, the graph batches) and how it replays. It pickles with its compiled
binaries and the contents of the buffers it reads before writing (weights, state), so a captured jit can be saved."""

from __future__ import annotations

from collections import deque
from typing import Any

import lazy.profile as profile
from lazy.device import Buffer, BufferSpec, get_device
from lazy.dtype import DType
from lazy.engine.runners import (
    CompiledRunner,
    ExecItem,
    PeerRead,
    ViewRunner,
    count_run,
    estimate,
    lent,
    settle_peer_reads,
)
from lazy.hcq import HCQGraph, Signal, stamp_now
from lazy.helpers import DEBUG, GlobalCounters, colored
from lazy.lazy import LazyBuffer
from lazy.multi import Bounds, MultiLazyBuffer
from lazy.record import record
from lazy.shape import ShapeTracker
from lazy.symbolic import Variable


@record(frozen=True)
class Sharding:
    """How a sharded tensor input is laid out over `devices`: split along `axis` at `bounds`, or replicated (None)."""

    devices: tuple[str, ...]
    axis: int | None
    bounds: Bounds

    @staticmethod
    def of(lb: Any) -> Sharding | None:
        return Sharding(lb.device, lb.axis, lb.bounds) if isinstance(lb, MultiLazyBuffer) else None

    def __str__(self) -> str:
        where = ", ".join(self.devices)
        return (
            f"replicated on ({where})"
            if self.axis is None
            else f"sharded on axis {self.axis} as {list(self.bounds)} on ({where})"
        )


@record(frozen=True)
class InputInfo:
    """What a replay needs of one input buffer: the view its kernels read the memory through (variables unbound),
    its dtype and device. `name` is the argument's position or keyword (`"1[0]"`: item 0 of a list argument). A
    sharded tensor gives one per shard: `shard` is its index in `sharding` (None for a tensor on one device)."""

    name: str
    st: ShapeTracker
    dtype: DType
    device: str
    sharding: Sharding | None = None
    shard: int | None = None

    @property
    def where(self) -> str:
        """The input in words: its name, and which shard it is."""
        if self.sharding is None or self.shard is None:
            return f"input {self.name}"
        return f"input {self.name} (shard {self.shard} of {len(self.sharding.devices)}, on {self.device})"


@record()
class GraphBatch:
    """Kernels `start` to `end` (excluded) of a captured jit, all on `device`, submitted on replay as one recorded
    queue (`HCQGraph`, or the device's own `graph_t`): one submission instead of one per kernel. The graph is recorded
    on the first replay."""

    device: str
    start: int
    end: int
    graph: HCQGraph | None = None
    counts: tuple[int, int] | None = None  # (ops, bytes) of one replay, when no variable changes them

    def __len__(self) -> int:
        return self.end - self.start

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "graph": None}  # a recorded queue holds device pointers: recorded again on load


@record()
class _BatchPlan:
    """What a replay of one graph batch needs, worked out once (not pickled): its items and runners, the buffer
    arguments a replay may move (`slots`: (launch, the item's buffer list, position) of an input, or of a view a
    replay moves onto a new input), the opaques the graph holds there (`last`), and the launches taking variables."""

    items: list[ExecItem]
    runners: list[CompiledRunner]
    slots: list[tuple[int, list[Buffer], int]]
    symbolic: list[int]
    last: list[Any]

    @staticmethod
    def of(captured: CapturedJit, batch: GraphBatch) -> _BatchPlan:
        items = captured.jit_cache[batch.start : batch.end]
        runners: list[CompiledRunner] = [ei.runner for ei in items]  # type: ignore[misc]
        inputs = {(i - batch.start, j) for i, j in captured.input_replace if batch.start <= i < batch.end}
        # a peer read's buffer points wherever its source is this replay (an input, say): it may move like a view
        lent = {id(ei.bufs[0]) for ei in captured.jit_cache if isinstance(ei.runner, PeerRead)}
        slots = [(n, ei.bufs, j) for n, ei in enumerate(items) for j, buf in enumerate(ei.bufs)
                 if (n, j) in inputs or buf.base is not None or id(buf) in lent]  # fmt: skip
        return _BatchPlan(items, runners, slots, [n for n, r in enumerate(runners) if r.spec.vars], [])


@record(frozen=True)
class FromInput:
    """A returned tensor rebuilt on each replay from tensor input `index`: that input itself (`st` None) or a view
    `st` of its memory (a reshape, slice or permute of it, or the input after an in-place update)."""

    index: int
    st: ShapeTracker | None
    cls: type
    requires_grad: bool | None


@record(frozen=True)
class ShardedOutput:
    """A returned sharded tensor rebuilt on each replay: each shard is the captured LazyBuffer (whose memory every
    replay rewrites) or a `FromInput` (a view of an input shard's memory), laid out along `axis` at `bounds`."""

    shards: tuple[Any, ...]
    axis: int | None
    bounds: Bounds
    cls: type
    requires_grad: bool | None


@record(frozen=True)
class _SavedTensor:
    """A returned tensor in a pickle: the view `st` of buffer `buf` (an index into the buffer table), whose base had
    shape `base_shape`."""

    buf: int
    base_shape: tuple[Any, ...]
    st: ShapeTracker
    cls: type
    requires_grad: bool | None


@record(frozen=True)
class _SavedBuffer:
    """A buffer in a pickle: a view of entry `base` at byte `offset`, or memory of its own with `data` (None: written
    before it is read, or an input, which every call replaces)."""

    device: str
    size: int
    dtype: DType
    spec: BufferSpec
    base: int | None
    offset: int
    data: bytes | None


def map_tensors(obj: Any, fn: Any) -> Any:
    """`obj` (a tensor, or tuples, lists and dicts of them, or None) with every leaf replaced by `fn(leaf)`."""
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*(map_tensors(x, fn) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return fn(obj)


class CapturedJit:
    """A captured program: `jit_cache` (the kernels, copies and views, in order), `input_replace` ((item, buffer
    position) -> tensor input index), `inputs`, `variables` and `constants` (what a replay must be called with: the
    tensors, the variables bound, every other argument as captured: `lazy.engine.jit._captured_value`),
    `graph_batches`, `replays` (how many times it ran) and
    the returned value (tensors the replays write into, or `FromInput`s)."""

    def __init__(self, ret: Any, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int],
                 inputs: list[InputInfo], variables: tuple[Variable, ...],
                 constants: list[tuple[str, Any]]):  # fmt: skip
        self.ret, self.jit_cache, self.input_replace = ret, jit_cache, input_replace
        self.inputs, self.variables, self.constants = inputs, variables, constants
        self.replays = 0
        self.graph_batches = graph_batches(jit_cache)
        self._init_replay()

    def _init_replay(self) -> None:
        # what a replay does, worked out once: where the new inputs go, then the steps (a graph batch, or an item)
        self._replace = [(self.jit_cache[i].bufs, j, k) for (i, j), k in self.input_replace.items()]
        batch_at = {batch.start: batch for batch in self.graph_batches}
        self._steps: list[GraphBatch | ExecItem] = []
        i = 0
        while i < len(self.jit_cache):
            step = batch_at.get(i, self.jit_cache[i])
            self._steps.append(step)
            i = step.end if isinstance(step, GraphBatch) else i + 1
        self._plans = {batch.start: _BatchPlan.of(self, batch) for batch in self.graph_batches}
        self._rebuilds = any(isinstance(x, (FromInput, ShardedOutput)) for x in _leaves(self.ret))

    def __call__(self, input_buffers: list[Buffer], var_vals: dict[Variable, int], input_tensors: list[Any]) -> Any:
        """Run the captured program on new input buffers; returns what the function returned."""
        if profiling := profile.active():
            profile.begin_realize()
        for bufs, j, k in self._replace:
            bufs[j] = input_buffers[k]
        for step in self._steps:
            if isinstance(step, GraphBatch):
                self._run_batch(step, var_vals, profiling)
            else:
                step.run(var_vals)
        if lent.to:
            settle_peer_reads()
        self.replays += 1
        ret = self.ret
        if self._rebuilds:
            ret = map_tensors(ret, lambda x: self._rebuild(x, input_tensors))
        elif not var_vals and not isinstance(ret, (tuple, list, dict)):
            return ret  # one tensor, nothing to rebuild or bind
        return map_tensors(ret, lambda x: _bound(x, var_vals))

    def _rebuild(self, x: Any, input_tensors: list[Any]) -> Any:
        """A returned value of this replay: a `FromInput` or `ShardedOutput` made from this call's inputs."""
        if isinstance(x, FromInput):
            if x.st is None:
                return input_tensors[x.index]
            lb = self._input_view(x, input_tensors)
            return x.cls(lb, device=lb.device, requires_grad=x.requires_grad)
        if isinstance(x, ShardedOutput):
            lbs = [self._input_view(s, input_tensors) if isinstance(s, FromInput) else s for s in x.shards]
            return x.cls(MultiLazyBuffer(lbs, x.axis, x.bounds), requires_grad=x.requires_grad)
        return x

    def _input_view(self, rule: FromInput, input_tensors: list[Any]) -> LazyBuffer:
        """The view `rule.st` of input buffer `rule.index`'s memory (a shard's, for a sharded input)."""
        lb = input_tensors[rule.index].lazydata
        if isinstance(lb, MultiLazyBuffer):
            shard = self.inputs[rule.index].shard
            assert shard is not None, "a sharded tensor in a slot of a tensor on one device"
            lb = lb.lbs[shard]
        return lb if rule.st is None else lb.base._view(rule.st)

    def _run_batch(self, batch: GraphBatch, var_vals: dict[Variable, int], profiling: bool) -> None:
        plan = self._plans[batch.start]
        if batch.graph is None:
            launches = [r.launch(ei.bufs, {**ei.var_vals, **var_vals}) for r, ei in zip(plan.runners, plan.items)]
            dev = get_device(batch.device)
            # a device may replay graphs its own way (a native launcher); core's HCQGraph otherwise
            batch.graph = (dev.graph_t or HCQGraph)(dev, launches)
            plan.last = [bufs[j].opaque for _, bufs, j in plan.slots]
            if profiling:
                self._replay_profiled(batch, plan, var_vals, None, None)
            else:
                batch.graph.replay()
        else:
            updates = None
            if var_vals:  # new variable values: the launches that take variables are built again
                updates = {n: plan.runners[n].launch(plan.items[n].bufs, {**plan.items[n].var_vals, **var_vals})
                           for n in plan.symbolic}  # fmt: skip
            # by identity: opaques may compare by contents (the PYTHON device's memoryviews)
            now = [bufs[j].opaque for _, bufs, j in plan.slots]
            if moved := {(n, j): new for (n, _, j), new, old in zip(plan.slots, now, plan.last) if new is not old}:
                plan.last = now
            if profiling:
                self._replay_profiled(batch, plan, var_vals, updates, moved)
            else:
                batch.graph.replay(updates, moved)
        if batch.counts is not None:  # the same every replay: added in one step
            GlobalCounters.kernel_count += len(batch)
            GlobalCounters.global_ops += batch.counts[0]
            GlobalCounters.global_mem += batch.counts[1]
        else:
            counts = [count_run(runner, {**ei.var_vals, **var_vals}) for runner, ei in zip(plan.runners, plan.items)]
            if not var_vals and not any(ei.var_vals for ei in plan.items):
                batch.counts = (sum(ops for ops, _ in counts), sum(mem for _, mem in counts))
        if DEBUG >= 2:
            print(f"{colored(batch.device, 'cyan'):>16s} graph of {len(batch)} kernels")

    def _replay_profiled(self, batch: GraphBatch, plan: _BatchPlan, var_vals: dict[Variable, int],
                         updates: Any, moved: Any) -> None:  # fmt: skip
        """Replay `batch` with its work timed on the device's queue: per kernel where the graph runs them as commands
        of its own (core's `HCQGraph`), else the whole batch as one "graph" event naming its kernels."""
        graph, dev = batch.graph, get_device(batch.device)
        assert graph is not None
        stamps: list[tuple[Signal, Signal]]
        if isinstance(graph, HCQGraph):  # times each launch of its queue
            graph.timed, graph.timing = True, None
            try:
                graph.replay(updates, moved)
            finally:
                graph.timed = False
            if graph.timing is None:  # a subclass that submits without HCQGraph.replay
                return
            until, stamps = graph.timing
        else:  # a device's own replay: timestamps submitted before and after it, on the same in-order queue
            stamps = [(dev.signal_t(0), dev.signal_t(0))]
            stamp_now(dev, stamps[0][0])
            graph.replay(updates, moved)
            until = stamp_now(dev, stamps[0][1])
        kernels = []
        for runner, ei in zip(plan.runners, plan.items):
            vals = {**ei.var_vals, **var_vals}
            kernels.append(runner.event(vals, estimate(runner, vals)))
        if len(stamps) != len(kernels):  # one launch ran them all (a native launcher)
            args = {"kernels": [e.name for e in kernels], "digests": [e.args["digest"] for e in kernels],
                    "flops": sum(e.args["flops"] for e in kernels), "bytes": sum(e.args["bytes"] for e in kernels),
                    "realize": kernels[0].args["realize"], "callsite": kernels[0].args["callsite"]}  # fmt: skip
            name = f"graph of {len(kernels)}: {kernels[0].name} .. {kernels[-1].name}"
            kernels = [profile.Event("graph", name, batch.device, "compute", 0.0, 0.0, args)]
            stamps = [(stamps[0][0], stamps[-1][1])]
        profile.submitted(dev, until, stamps, kernels)

    def free_intermediates(self) -> None:
        """Give back the memory of the buffers every replay writes before it reads them (intermediates, outputs not
        returned); the next replay allocates them again (and records its graphs again)."""
        returned = {id(lb.base.buffer) for x in _leaves(self.ret) for lb in _shards(x)}
        inputs = {id(self.jit_cache[i].bufs[j]) for i, j in self.input_replace}
        scratch = _written_before_read(self.jit_cache) - returned - inputs
        for ei in self.jit_cache:
            for buf in ei.bufs:
                if id(buf) in scratch or (buf.base is not None and id(buf.base) in scratch):
                    buf.deallocate()  # a view only forgets its pointer into the base
        for batch in self.graph_batches:
            batch.graph = None

    # -- pickling ------------------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        table: dict[int, int] = {}  # id(buffer) -> its index in `saved`
        buffers: list[Buffer] = []

        def index(buf: Buffer) -> int:
            if id(buf) not in table:
                if buf.base is not None:
                    index(buf.base)
                table[id(buf)] = len(buffers)
                buffers.append(buf)
            return table[id(buf)]

        items = [(ei.runner, [index(b) for b in ei.bufs], ei.var_vals) for ei in self.jit_cache]
        ret = map_tensors(self.ret, lambda x: _save_tensor(x, index))
        inputs = {id(self.jit_cache[i].bufs[j]) for i, j in self.input_replace}
        written_first = _written_before_read(self.jit_cache)
        saved = [
            _SavedBuffer(
                b.device,
                b.size,
                b.dtype,
                b.spec,
                table[id(b.base)] if b.base is not None else None,
                b.offset,
                None
                if b.base is not None or id(b) in inputs or id(b) in written_first or not b.is_allocated
                else bytes(b.as_buffer(allow_zero_copy=False)),
            )  # fmt: skip
            for b in buffers
        ]
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return {**state, "jit_cache": items, "ret": ret, "buffers": saved}

    def __setstate__(self, state: dict[str, Any]) -> None:
        buffers: list[Buffer] = []
        for saved in state.pop("buffers"):
            if saved.base is not None:
                buffers.append(buffers[saved.base].view(saved.size, saved.dtype, saved.offset))
                continue
            buf = Buffer(saved.device, saved.size, saved.dtype, spec=saved.spec)
            if saved.data is not None:
                buf.allocate().copyin(saved.data)
            buffers.append(buf)
        state["jit_cache"] = [ExecItem(r, [buffers[i] for i in bufs], vals) for r, bufs, vals in state["jit_cache"]]
        state["ret"] = map_tensors(state["ret"], lambda x: _load_tensor(x, buffers))
        self.__dict__.update(state)
        self._init_replay()


def device_order(items: list[ExecItem]) -> list[ExecItem]:
    """`items` reordered so that each device's kernels between two of its copies are consecutive: one graph batch per
    device, submitted one after another, so the devices run them at the same time. Items of different devices share
    no memory, so only each device's own order matters (a copy between devices is in both orders, and waits for its
    source's queue when it runs): that order is kept. Single-device work comes out unchanged."""
    places = [{b.device for b in ei.bufs} | {ei.runner.device} - {""} for ei in items]
    lanes: dict[str, deque[int]] = {}
    for i, devices in enumerate(places):
        for device in devices:
            lanes.setdefault(device, deque()).append(i)
    ordered: list[ExecItem] = []
    while len(ordered) < len(items):
        for lane in lanes.values():  # each device's items up to its next copy between devices
            while lane and len(places[lane[0]]) == 1:
                ordered.append(items[lane.popleft()])
        heads = [lane[0] for lane in lanes.values() if lane]
        # then the earliest copy every one of whose devices has reached it (the earliest remaining item always has)
        ready = [i for i in heads if all(lanes[device][0] == i for device in places[i])]
        if ready:
            first = min(ready)
            for device in places[first]:
                lanes[device].popleft()
            ordered.append(items[first])
        else:
            assert len(ordered) == len(items), "no item can run next: the lanes disagree on the order"
    return ordered


def graph_batches(jit_cache: list[ExecItem]) -> list[GraphBatch]:
    """The runs of two or more consecutive compiled kernels on one device (copies and views run on their own)."""

    def device(ei: ExecItem) -> str | None:
        return ei.runner.device if isinstance(ei.runner, CompiledRunner) else None

    batches: list[GraphBatch] = []
    start = 0
    for i in range(1, len(jit_cache) + 1):
        here = device(jit_cache[start])
        if i == len(jit_cache) or device(jit_cache[i]) != here:
            if here is not None and i - start >= 2:
                batches.append(GraphBatch(here, start, i))
            start = i
    return batches


def _written_before_read(jit_cache: list[ExecItem]) -> set[int]:
    """ids of the buffers whose first use in a replay is being written as a kernel's or copy's output: their
    contents need not be saved. Reads through a view count as reads of its base."""
    seen: set[int] = set()
    written: set[int] = set()
    for ei in jit_cache:
        roots = [id(b.base if b.base is not None else b) for b in ei.bufs]
        for root in roots[1:]:
            seen.add(root)
        if isinstance(ei.runner, ViewRunner):  # places a view: writes nothing
            continue
        if ei.bufs[0].base is None and roots[0] not in seen:
            written.add(roots[0])
        seen.add(roots[0])
    return written


def _leaves(obj: Any) -> list[Any]:
    found: list[Any] = []
    map_tensors(obj, found.append)
    return found


def _shards(x: Any) -> list[LazyBuffer]:
    """The LazyBuffers a returned value holds: a tensor's own, each shard of a sharded one (or of a `ShardedOutput`
    not read from an input)."""
    if isinstance(x, ShardedOutput):
        return [s for s in x.shards if isinstance(s, LazyBuffer)]
    lb = getattr(x, "lazydata", None)
    return lb.lbs if isinstance(lb, MultiLazyBuffer) else [lb] if isinstance(lb, LazyBuffer) else []


def _save_tensor(x: Any, index: Any) -> Any:
    lb = getattr(x, "lazydata", None)
    if isinstance(lb, MultiLazyBuffer):
        x = ShardedOutput(tuple(lb.lbs), lb.axis, lb.bounds, type(x), x.requires_grad)
    if isinstance(x, ShardedOutput):
        shards = (_SavedTensor(index(s.base.buffer), s.base.shape, s.st, LazyBuffer, None)
                  if isinstance(s, LazyBuffer) else s for s in x.shards)  # fmt: skip
        return ShardedOutput(tuple(shards), x.axis, x.bounds, x.cls, x.requires_grad)
    if not isinstance(lb, LazyBuffer):
        return x
    return _SavedTensor(index(lb.base.buffer), lb.base.shape, lb.st, type(x), x.requires_grad)


def _load_tensor(x: Any, buffers: list[Buffer]) -> Any:
    if isinstance(x, ShardedOutput):
        shards = tuple(_load_tensor(s, buffers) for s in x.shards)
        if any(isinstance(s, FromInput) for s in shards):
            return ShardedOutput(shards, x.axis, x.bounds, x.cls, x.requires_grad)
        return x.cls(MultiLazyBuffer(list(shards), x.axis, x.bounds), requires_grad=x.requires_grad)
    if not isinstance(x, _SavedTensor):
        return x
    base = LazyBuffer.from_buffer(buffers[x.buf], x.base_shape)
    if x.cls is LazyBuffer:  # a shard of a sharded tensor
        return base._view(x.st)
    return x.cls(base._view(x.st), device=base.device, requires_grad=x.requires_grad)


def _bound(x: Any, var_vals: dict[Variable, int]) -> Any:
    """A returned tensor of symbolic shape with this replay's values (the capture's binding would give its sizes)."""
    lb = getattr(x, "lazydata", None)
    if not isinstance(lb, LazyBuffer) or lb.st.static:
        return x
    return type(x)(lb.bind(var_vals), device=lb.device, requires_grad=x.requires_grad)

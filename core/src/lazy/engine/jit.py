"""`TinyJit` (also `jit`): the first call runs the function, the second captures the kernels, copies and views it
runs on every device (a `CapturedJit`), later calls replay them with the new inputs swapped in (a sharded tensor's
shards each). A replay computes what the function computes eagerly; what it cannot reproduce is refused with
`JitError`, naming what changed."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from lazy.device import Buffer
from lazy.engine.captured import (
    CapturedJit,
    FromInput,
    GraphBatch,
    InputInfo,
    ShardedOutput,
    Sharding,
    device_order,
    map_tensors,
)
from lazy.engine.realize import ExecItem, PeerRead, capturing, keep_peer_reads_safe, realize, upgrade_kernels
from lazy.helpers import DEBUG, JIT
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer
from lazy.ops import Ops
from lazy.record import record
from lazy.shape import ShapeTracker
from lazy.symbolic import Variable, merge_bindings

R = TypeVar("R")

__all__ = ["CapturedJit", "GraphBatch", "JitError", "TinyJit", "jit", "plan_memory"]


class JitError(RuntimeError):
    """A jitted function cannot be captured, or was called in a way its captured program cannot replay."""


def _is_tensor(x: Any) -> bool:
    """Duck-typed on `lazydata`: this layer sits below `lazy.tensor`."""
    return isinstance(getattr(x, "lazydata", None), (LazyBuffer, MultiLazyBuffer))


def _shards(lb: LazyBuffer | MultiLazyBuffer) -> list[LazyBuffer]:
    """A tensor's LazyBuffer, or each shard of a sharded tensor's."""
    return lb.lbs if isinstance(lb, MultiLazyBuffer) else [lb]


@record()
class _Call:
    """The tensor inputs of one call: names, then per input buffer (one per shard of a sharded tensor) its tensor,
    the buffer the kernels read and what a replay checks; the values of the variables (bound in the inputs' shapes, or
    passed as arguments)."""

    names: list[str]
    tensors: list[Any]
    buffers: list[Buffer]
    infos: list[InputInfo]
    var_vals: dict[Variable, int]
    constants: list[tuple[str, Any]]  # the plain-value arguments (numbers, strings, None): a replay reuses them


def _tensor_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, tensor) of each tensor argument: positional ones by index, keyword ones by name (in sorted order, so
    the order they are passed in does not matter), then the tensors inside list, tuple and dict arguments."""
    named = [(str(i), x) for i, x in enumerate(args)] + [(k, kwargs[k]) for k in sorted(kwargs)]
    found = [(name, x) for name, x in named if _is_tensor(x)]
    for name, x in named:
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, (list, tuple)) else ()
        found += [(f"{name}[{k!r}]", t) for k, t in items if _is_tensor(t) and not any(t is f for _, f in found)]
    return found


def _prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
    inputs = _tensor_inputs(args, kwargs)
    if unrealized := [lb for _, t in inputs for lb in _shards(t.lazydata) if lb.base.realized is None]:
        realize(unrealized)  # outside any capture: computing an input is not the function's work
    call = _Call([name for name, _ in inputs], [], [], [], {}, [])
    owner: dict[int, InputInfo] = {}  # id(memory) -> the input that reads it
    for name, t in inputs:
        sharding = Sharding.of(t.lazydata)
        for shard, lb in enumerate(_shards(t.lazydata)):
            st, vals = lb.st.unbind()
            info = InputInfo(name, st, lb.dtype, lb.device, sharding, None if sharding is None else shard)
            if (buf := lb.base.realized) is None:
                raise JitError(f"jit: {info.where} (shape {lb.shape}) has no memory a kernel could read; pass a "
                               "tensor with elements")  # fmt: skip
            if (other := owner.setdefault(id(buf.base or buf), info)) is not info:
                plain = other.shard is None and info.shard is None
                both = f"inputs {other.name} and {name}" if plain else f"{other.where} and {info.where}"
                raise JitError(f"jit: {both} share memory; a replay swaps each input's memory on its own, so pass "
                               "distinct tensors (e.g. a .clone() of one)")  # fmt: skip
            merge_bindings(call.var_vals, vals)
            call.tensors.append(t)
            call.buffers.append(buf)
            call.infos.append(info)
    for arg, x in [*enumerate(args), *sorted(kwargs.items())]:
        if isinstance(x, Variable):
            if x._val is None:
                raise JitError(f"jit: argument {arg} is the unbound variable {x.expr}; pass it bound: .bind(value)")
            merge_bindings(call.var_vals, dict([x.unbind()]))
        elif _plain(x):
            call.constants.append((str(arg), x))
    return call


def _positional_layout(captured: CapturedJit) -> list[tuple[InputInfo | None, Any]] | None:
    """For each positional argument of the captured call, its tensor input's `InputInfo` or its plain value; None
    when the capture had variables, keyword arguments, sharded tensors, or arguments of other kinds (lists of
    tensors, say)."""
    if captured.variables or any(info.sharding is not None for info in captured.inputs):
        return None
    slots: dict[str, tuple[InputInfo | None, Any]] = {info.name: (info, None) for info in captured.inputs}
    slots.update((name, (None, value)) for name, value in captured.constants)
    if sorted(slots) != sorted(map(str, range(len(slots)))):
        return None
    return [slots[str(i)] for i in range(len(slots))]


def _plain(x: Any) -> bool:
    """A number, string, None, or a tuple of them: what a captured kernel bakes in (a replay checks it is unchanged)."""
    return x is None or type(x) in (bool, int, float, str) or (type(x) is tuple and all(map(_plain, x)))


class TinyJit(Generic[R]):
    """Decorate a function whose tensor inputs keep their shapes, dtypes, devices and sharding (a sharded tensor's
    devices, axis and bounds) from call to call (a symbolic dimension, a bound `Variable`, may change within its
    range). `TinyJit(fxn, captured=None, prune=False)`: `captured` rebuilds a jit from a `CapturedJit` (as pickling
    does); `prune` runs the kernels that do not depend on the inputs once, at capture, instead of on every replay.
    `@TinyJit(prune=True)` decorates too."""

    def __new__(cls, fxn: Callable[..., R] | None = None, captured: CapturedJit | None = None,
                prune: bool = False) -> Any:  # fmt: skip
        if fxn is None and captured is None:  # @TinyJit(prune=True): a decorator
            return functools.partial(cls, prune=prune)
        return super().__new__(cls)

    def __init__(self, fxn: Callable[..., R] | None = None, captured: CapturedJit | None = None,
                 prune: bool = False):  # fmt: skip
        self.fxn, self.captured, self.prune = fxn, captured, prune
        self.cnt = 0 if captured is None else 2
        self._layout: tuple[CapturedJit, list[tuple[InputInfo | None, Any]] | None] | None = None
        if fxn is not None:
            functools.update_wrapper(self, fxn)

    @property
    def jit_cache(self) -> list[ExecItem]:
        """The captured kernels, copies and views in replay order (empty before the capture)."""
        return self.captured.jit_cache if self.captured is not None else []

    @property
    def graph_batches(self) -> list[GraphBatch]:
        return self.captured.graph_batches if self.captured is not None else []

    def reset(self) -> None:
        """Forget the capture: the next call runs the function eagerly again, the one after captures."""
        if self.fxn is None:
            raise JitError("jit: this jit was built from a captured program and has no function to capture again")
        self.cnt, self.captured, self._layout = 0, None, None

    def __reduce__(self) -> tuple[Any, ...]:
        if self.captured is None:
            raise JitError("jit: only a captured jit pickles (call it twice first); the function itself is not saved")
        return TinyJit, (None, self.captured)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)  # a jitted method

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not JIT and self.fxn is not None:
            return self.fxn(*args, **kwargs)
        if capturing and self.cnt >= 1:
            raise JitError("jit: having TinyJit inside another TinyJit is not supported: this one would capture or "
                           "replay while the outer one captures, which would miss its work; jit the outer function "
                           "only")  # fmt: skip
        if self.cnt >= 2 and (fast := self._replay_inputs(args, kwargs)) is not None:
            assert self.captured is not None
            self.cnt += 1
            return self.captured(fast[0], {}, fast[1])
        call = _prepare(args, kwargs)
        if self.cnt == 0:
            assert self.fxn is not None
            ret = self.fxn(*args, **kwargs)
        elif self.cnt == 1:
            ret = self._capture(args, kwargs, call)
        else:
            assert self.captured is not None
            _check(self.captured, call)
            ret = self.captured(call.buffers, call.var_vals, call.tensors)
        self.cnt += 1
        return ret

    def _replay_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Buffer], list[Any]] | None:
        """The common replay checked without building the whole call: positional arguments only, no variables,
        each tensor realized with the captured view, dtype and device, in memory of its own, and the same plain
        values. Returns the inputs' buffers and tensors, or None when anything differs: the full path (`_prepare`,
        `_check`) then realizes, or names what changed."""
        captured = self.captured
        assert captured is not None
        if self._layout is None or self._layout[0] is not captured:
            self._layout = (captured, _positional_layout(captured))
        layout = self._layout[1]
        if layout is None or kwargs or len(args) != len(layout):
            return None
        buffers: list[Buffer] = []
        tensors: list[Any] = []
        for x, (info, value) in zip(args, layout):
            if info is None:
                if not _plain(x) or repr(x) != repr(value):
                    return None
                continue
            lb = getattr(x, "lazydata", None)
            if not isinstance(lb, LazyBuffer) or (buf := lb.base.realized) is None:
                return None
            if not (lb.st is info.st or lb.st == info.st) or lb.dtype != info.dtype or lb.device != info.device:
                return None
            buffers.append(buf)
            tensors.append(x)
        if len({id(buf.base or buf) for buf in buffers}) != len(buffers):
            return None
        return buffers, tensors

    def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], call: _Call) -> R:
        assert self.fxn is not None
        recorded = _Recorder()
        capturing.append(recorded)
        try:
            ret = self.fxn(*args, **kwargs)
            outs = [lb for t in _returned_tensors(ret) for lb in _shards(t.lazydata)]
            if unrealized := [lb for lb in outs if lb.base.realized is None]:
                realize(unrealized)
        finally:
            capturing.remove(recorded)
        if not recorded.items:
            raise JitError("jit: the function ran no kernel, copy or view while captured, so a replay would have "
                           "nothing to run; call it without jit")  # fmt: skip
        returned = {id(lb.base.buffer) for lb in outs}
        items = keep_peer_reads_safe(device_order(recorded.without_unread_snapshots(returned)))
        onetime: list[ExecItem] = []
        if self.prune:
            items, onetime = _prune(items, call.buffers)
        keep = recorded.kept_memory(items, call.buffers, returned) | {id(b) for ei in onetime for b in ei.bufs}
        # memory another device reads in place keeps its own allocation: the planner sees no use of it there
        lent = [b for ei in items if isinstance(ei.runner, PeerRead) for b in ei.bufs]
        keep |= {id(b if b.base is None else b.base) for b in lent}
        # memory code outside lazy sees (DLPack) keeps its own allocation
        plan_memory(items, {id(b): b for b in recorded.written if id(b) not in keep and not b.shared})
        upgrade_kernels([ei.runner for ei in items])  # replays run the kernels' full builds
        where = {id(buf): k for k, buf in enumerate(call.buffers)}
        replace = {(i, j): where[id(b)] for i, ei in enumerate(items) for j, b in enumerate(ei.bufs) if id(b) in where}
        template = map_tensors(ret, lambda x: _output_rule(x, call))
        variables = tuple(sorted(call.var_vals, key=lambda v: v.expr))
        self.captured = CapturedJit(template, items, replace, call.infos, variables, call.constants)
        if DEBUG >= 1:
            print(
                f"jit: captured {len(items)} items ({len(self.captured.graph_batches)} graph batches) with "
                f"{len(call.buffers)} input buffers" + (f", {len(onetime)} run once (pruned)" if self.prune else "")
            )
        return ret


def jit(fxn: Callable[..., R]) -> TinyJit[R]:
    """Capture and replay the kernels of `fxn` (LAZY_JIT=0 turns it off)."""
    return TinyJit(fxn)


# -- capture -----------------------------------------------------------------------------------------------------------


class _Recorder:
    """Listens to `run_schedule` while a function is captured: every item that runs, the buffers written, which of
    those are written in place by an assign, which items are snapshots (`LazyBuffer.is_snapshot`), and a weak
    reference to each written buffer's LazyBuffer."""

    def __init__(self) -> None:
        self.items: list[ExecItem] = []
        self.written: list[Buffer] = []
        self.owners: list[weakref.ref[LazyBuffer]] = []
        self.assigned: set[int] = set()
        self.snapshots: set[int] = set()

    def __call__(self, ei: ExecItem, outputs: tuple[LazyBuffer, ...]) -> None:
        if any(out.is_snapshot for out in outputs):
            self.snapshots.add(len(self.items))
        self.items.append(ExecItem(ei.runner, list(ei.bufs), dict(ei.var_vals)))
        for out in outputs:
            self.written.append(out.buffer)
            self.owners.append(weakref.ref(out))
            if out.op is Ops.ASSIGN:
                self.assigned.add(id(out.buffer))

    def without_unread_snapshots(self, returned: set[int]) -> list[ExecItem]:
        """The items less the snapshots no later item reads: those kept an old value for tensors outside the
        function, which exist only at capture (a replay makes no new ones)."""
        read_later: set[int] = set()
        kept: list[ExecItem] = []
        for i in reversed(range(len(self.items))):
            ei = self.items[i]
            if i not in self.snapshots or id(ei.bufs[0]) in read_later or id(ei.bufs[0]) in returned:
                kept.append(ei)
                read_later |= {id(b) for b in ei.bufs[1:]} | {id(b.base) for b in ei.bufs if b.base is not None}
        return kept[::-1]

    def kept_memory(self, items: list[ExecItem], inputs: list[Buffer], returned: set[int]) -> set[int]:
        """ids of the written buffers that must keep their own memory: inputs, returned buffers, assign targets (a
        parameter, the random generator's state: their value lives on between calls), buffers a live LazyBuffer
        still owns (a tensor outside may read them), and buffers sharing memory (views and their bases)."""
        keep = {id(b) for b in inputs} | returned | self.assigned
        keep |= {id(buf) for buf, owner in zip(self.written, self.owners) if owner() is not None}
        views = [b for ei in items for b in ei.bufs if b.base is not None]
        return keep | {id(b) for b in views} | {id(b.base) for b in views}


def _returned_tensors(ret: Any) -> list[Any]:
    """The tensors in what the function returned; anything else but None is refused: a replay could not recompute
    it (a number computed from the inputs would keep its captured value)."""
    found: list[Any] = []

    def visit(x: Any) -> None:
        if _is_tensor(x):
            found.append(x)
        elif x is not None:
            raise JitError(f"jit: the function returned a {type(x).__name__} ({x!r:.40}); a replay returns only "
                           "tensors it recomputes: return tensors (or None), or call it without jit")  # fmt: skip

    map_tensors(ret, visit)
    return found


def _output_rule(x: Any, call: _Call) -> Any:
    """A returned tensor as the replay returns it: the tensor itself (its memory is rewritten by every replay), or a
    `FromInput` when it is an input or reads an input's memory (a replay rebuilds it from the new input)."""
    if not _is_tensor(x):
        return x
    for k, t in enumerate(call.tensors):
        if x is t:
            return FromInput(k, None, type(x), x.requires_grad)
    if isinstance(x.lazydata, MultiLazyBuffer):  # each shard may read an input's memory
        multi: MultiLazyBuffer = x.lazydata
        shards = tuple(_shard_rule(lb, call, type(x)) for lb in multi.lbs)
        if any(isinstance(shard, FromInput) for shard in shards):
            return ShardedOutput(shards, multi.axis, multi.bounds, type(x), x.requires_grad)
        return x
    rule = _shard_rule(x.lazydata, call, type(x), x.requires_grad)
    return x if rule is x.lazydata else rule


def _shard_rule(lb: LazyBuffer, call: _Call, cls: type, requires_grad: bool | None = None) -> LazyBuffer | FromInput:
    """`lb` itself, or a `FromInput` when it reads an input's memory."""
    for k, buf in enumerate(call.buffers):
        if lb.base.buffer is buf:
            return FromInput(k, lb.st, cls, requires_grad)
    return lb


def _prune(items: list[ExecItem], inputs: list[Buffer]) -> tuple[list[ExecItem], list[ExecItem]]:
    """Split `items` into those a replay must run and those that ran once at capture, for good: an item is rerun when
    it reads or writes memory whose value changes from call to call (an input's, or what a rerun item writes)."""

    def memory(buf: Buffer) -> int:
        return id(buf.base if buf.base is not None else buf)

    changing = {memory(b) for b in inputs}
    changing |= {memory(b) for ei in items for b in ei.bufs if b.shared}  # other code may write it between calls
    rerun: set[int] = set()
    while True:  # to a fixed point: an item that reads what a later rerun item writes is rerun too
        new = {i for i, ei in enumerate(items) if i not in rerun and any(memory(b) in changing for b in ei.bufs)}
        if not new:
            break
        rerun |= new
        changing |= {memory(items[i].bufs[0]) for i in new}
    return [ei for i, ei in enumerate(items) if i in rerun], [ei for i, ei in enumerate(items) if i not in rerun]


def plan_memory(items: list[ExecItem], internal: dict[int, Buffer]) -> int:
    """Let internal buffers whose lifetimes (first to last use in `items`) do not overlap share one allocation.
    Rewrites `items` in place; returns how many buffers were folded into others."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, ei in enumerate(items):
        for buf in ei.bufs:
            if id(buf) in internal:
                first.setdefault(id(buf), i)
                last[id(buf)] = i
    slots: dict[tuple[str, int], list[list[Any]]] = {}  # (device, nbytes) -> [[busy until, buffer], ...]
    replace: dict[int, Buffer] = {}
    for key in sorted(first, key=first.__getitem__):
        buf = internal[key]
        pool = slots.setdefault((buf.device, buf.nbytes), [])
        free = next((slot for slot in pool if slot[0] < first[key]), None)  # strictly before: no in-place hazard
        if free is None:
            pool.append([last[key], buf])
        else:
            replace[key], free[0] = free[1], last[key]
    for ei in items:
        ei.bufs = [replace.get(id(b), b) for b in ei.bufs]
    return len(replace)


# -- replay checks -----------------------------------------------------------------------------------------------------


def _check(captured: CapturedJit, call: _Call) -> None:
    """Raise `JitError` naming the first way this call differs from the captured one."""
    names = list(dict.fromkeys(info.name for info in captured.inputs))  # one per tensor (a sharded one has several)
    if call.names != names or [n for n, _ in call.constants] != [n for n, _ in captured.constants]:
        names, call_names = names + [n for n, _ in captured.constants], call.names + [n for n, _ in call.constants]
        raise JitError(f"jit: called with arguments {call_names}, captured with {names}; pass the same "
                       "arguments every call, or .reset() to capture again")  # fmt: skip
    _check_variables(captured.variables, tuple(call.var_vals))
    for (name, old), (_, new) in zip(captured.constants, call.constants):
        if repr(new) != repr(old):  # by repr: 1 and True differ, nan equals nan
            raise JitError(f"jit: argument {name} is {new!r}, captured with {old!r}; a replay runs the captured "
                           "kernels, which hold the captured value: pass what changes as a tensor or a bound "
                           "Variable, or .reset() to capture again")  # fmt: skip
    first = {info.name: info for info in reversed(captured.inputs)}  # each tensor's first (or only) buffer
    for new in call.infos:
        if new.sharding != (old := first[new.name]).sharding:
            raise JitError(f"jit: input {new.name} is {_placement(new)}, captured {_placement(old)}; "
                           "a replay runs the captured kernels and copies, made for the captured layout: shard it "
                           "as it was captured, or .reset() to capture again")  # fmt: skip
    for new, old in zip(call.infos, captured.inputs):
        if new == old:
            continue
        what = ("shape", new.st.shape, old.st.shape) if new.st.shape != old.st.shape else \
            ("dtype", new.dtype, old.dtype) if new.dtype != old.dtype else \
            ("device", new.device, old.device) if new.device != old.device else \
            ("a view of its memory", _view_text(new.st), _view_text(old.st))  # fmt: skip
        raise JitError(f"jit: {new.where} has {what[0]} {what[1]}, captured with {what[2]}; a replay runs the "
                       "captured kernels, made for the captured inputs (only a symbolic dimension, a bound Variable, "
                       "may change, within its range): pass inputs like the captured ones, or .reset() to capture "
                       "again")  # fmt: skip


def _placement(info: InputInfo) -> str:
    """Where an input tensor lies, in words: its sharding, or its one device."""
    return f"on one device ({info.device})" if info.sharding is None else str(info.sharding)


def _view_text(st: ShapeTracker) -> str:
    return " then ".join(f"(strides {v.strides}, offset {v.offset}, mask {v.mask})" for v in st.views)


def _check_variables(captured: tuple[Variable, ...], now: tuple[Variable, ...]) -> None:
    had = {v.expr: v for v in captured}
    has = {v.expr: v for v in now}
    for name in sorted(had.keys() | has.keys()):
        old, new = had.get(name), has.get(name)
        if old is None or new is None:
            state = "was not bound when captured" if old is None else "was bound when captured but is not now"
            raise JitError(f"jit: variable {name} {state}; bind the same variables on every call")
        if (old.min, old.max) != (new.min, new.max):
            raise JitError(f"jit: variable {name} has range [{new.min}, {new.max}], captured with [{old.min}, "
                           f"{old.max}]: the captured buffers and kernels hold values up to {old.max}; keep the "
                           "range, or .reset() to capture again")  # fmt: skip

"""`TinyJit` (also `jit`): the first call runs the function, the second captures the kernels, copies and views it
runs on every device (a `CapturedJit`), later calls replay them with the new inputs swapped in (a sharded tensor's
shards each). A replay computes what the function computes eagerly; what it cannot reproduce is refused with
`JitError`, naming what changed."""

from __future__ import annotations

import enum
import functools
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
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
from lazy.engine.realize import realize
from lazy.engine.runners import ExecItem, PeerRead, capturing, keep_peer_reads_safe, upgrade_kernels, written_by
from lazy.helpers import DEBUG, JIT
from lazy.lazy import LazyBuffer, pending_assigns
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
    constants: list[tuple[str, Any]]  # the other arguments, as passed: a replay checks them against the captured ones


def _named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, argument): positional ones by index, keyword ones by name (in sorted order, so the order they are passed
    in does not matter)."""
    return [(str(i), x) for i, x in enumerate(args)] + [(k, kwargs[k]) for k in sorted(kwargs)]


def _items(x: Any) -> list[tuple[Any, Any]]:
    """(key, item) of a list, tuple or dict (a dict's sorted by key, as keyword arguments are); none of others."""
    if isinstance(x, dict):
        return sorted(x.items(), key=lambda item: repr(item[0]))
    return list(enumerate(x)) if isinstance(x, (list, tuple)) else []


def _nested(name: str, x: Any) -> Iterator[tuple[str, Any]]:
    """(path, item) of everything inside argument `x`, at any depth, depth first: `"1[0]['w']"`."""
    for key, item in _items(x):
        yield (path := f"{name}[{key!r}]"), item
        yield from _nested(path, item)


def _tensor_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, tensor) of each tensor argument, then of the tensors inside list, tuple and dict arguments, at any depth
    (a tensor found before is not an input twice)."""
    named = _named(args, kwargs)
    found = [(name, x) for name, x in named if _is_tensor(x)]
    for name, x in named:
        found += [(path, t) for path, t in _nested(name, x) if _is_tensor(t) and not any(t is f for _, f in found)]
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
    for name, x in _named(args, kwargs):
        for path, var in [(name, x), *_nested(name, x)]:
            if isinstance(var, Variable):
                if var._val is None:
                    raise JitError(f"jit: argument {path} is the unbound variable {var.expr}; pass it bound: "
                                   ".bind(value)")  # fmt: skip
                merge_bindings(call.var_vals, dict([var.unbind()]))
        if not _is_tensor(x) and not isinstance(x, Variable):
            call.constants.append((name, x))
    return call


def _positional_layout(captured: CapturedJit) -> list[tuple[InputInfo | None, Any]] | None:
    """For each positional argument of the captured call, its tensor input's `InputInfo` or its captured value (see
    `_captured_value`); None when the capture had variables, keyword arguments, sharded tensors, or tensors inside
    lists, tuples or dicts."""
    if captured.variables or any(info.sharding is not None for info in captured.inputs):
        return None
    slots: dict[str, tuple[InputInfo | None, Any]] = {info.name: (info, None) for info in captured.inputs}
    slots.update((name, (None, value)) for name, value in captured.constants)
    if sorted(slots) != sorted(map(str, range(len(slots)))):
        return None
    return [slots[str(i)] for i in range(len(slots))]


# -- the other arguments: what a captured kernel may have baked in, checked on every replay ----------------------------

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class _Slot(enum.Enum):
    """Where a tensor or a bound Variable was, in a captured argument: their own checks compare them."""

    TENSOR = "a tensor"
    VARIABLE = "a bound Variable"

    def __repr__(self) -> str:
        return self.value


class _Identity:
    """A captured argument compared by identity (its type defines no equality): held weakly where it can be, so a
    jitted method does not keep its object alive. Pickled, it keeps its type's name only: a loaded jit checks that."""

    def __init__(self, obj: Any, kind: str | None = None):
        self.kind = kind or f"{type(obj).__module__}.{type(obj).__qualname__}"
        self.ref: Callable[[], Any] | None = None
        if obj is not None:
            try:
                self.ref = weakref.ref(obj)
            except TypeError:  # no weak references to it (`__slots__`, some builtins): held
                self.ref = lambda: obj

    def holds(self, x: Any) -> bool:
        if self.ref is None:
            return f"{type(x).__module__}.{type(x).__qualname__}" == self.kind
        return self.ref() is x

    def __reduce__(self) -> tuple[Any, ...]:
        return _Identity, (None, self.kind)

    def __repr__(self) -> str:
        obj = None if self.ref is None else self.ref()
        return f"<a {self.kind}>" if obj is None else repr(obj)


def _numpy_value(x: Any) -> bool:
    """A numpy scalar or array (numpy is not imported here: an object of it exists only once it has been)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, (numpy.ndarray, numpy.generic))


def _captured_value(x: Any) -> Any:
    """Argument `x` as a replay checks it (`_difference`), taken before the captured call runs: lists, tuples and
    dicts item by item, tensors and Variables as `_Slot`s, numbers, strings and None as they are, numpy scalars and
    arrays copied (compared by value), other objects as they are when their type defines equality, else by
    identity (`_Identity`)."""

    def leaf(y: Any) -> Any:
        if _is_tensor(y) or isinstance(y, Variable):
            return _Slot.TENSOR if _is_tensor(y) else _Slot.VARIABLE
        if type(y) in _PLAIN:
            return y
        if _numpy_value(y):
            return y.copy()
        return y if type(y).__eq__ is not object.__eq__ else _Identity(y)

    return map_tensors(x, leaf)


def _same(old: Any, new: Any) -> bool:
    """Whether argument leaf `new` is what was captured as `old`."""
    if isinstance(old, _Slot):
        return _is_tensor(new) if old is _Slot.TENSOR else isinstance(new, Variable)
    if isinstance(old, _Identity):
        return old.holds(new)
    if type(new) is not type(old):
        return False
    if type(old) in _PLAIN:
        return repr(new) == repr(old)  # by repr: nan equals nan, -0.0 differs from 0.0
    if _numpy_value(old):  # by bytes: nan equals nan; a big array costs a copy per call (pass a tensor instead)
        return bool(old.dtype == new.dtype and old.shape == new.shape and old.tobytes() == new.tobytes())
    try:
        return new is old or (new == old) is True
    except Exception:  # an equality that fails (or compares tensors inside) says nothing: not the same
        return False


def _difference(old: Any, new: Any, name: str) -> tuple[str, Any, Any] | None:
    """The first place argument `new` differs from its captured value `old`: (path, captured, now), or None."""
    if not isinstance(old, (list, tuple, dict)):
        return None if _same(old, new) else (name, old, new)
    # `_captured_value` keeps any dict (an OrderedDict, say) as a dict
    same_kind = isinstance(new, dict) if isinstance(old, dict) else type(new) is type(old)
    if not same_kind or len(new) != len(old) or (isinstance(old, dict) and old.keys() != new.keys()):
        return name, old, new
    for (key, old_item), (_, new_item) in zip(_items(old), _items(new)):
        if (found := _difference(old_item, new_item, f"{name}[{key!r}]")) is not None:
            return found
    return None


class TinyJit(Generic[R]):
    """Decorate a function whose tensor inputs keep their shapes, dtypes, devices and sharding (a sharded tensor's
    devices, axis and bounds) from call to call (a symbolic dimension, a bound `Variable`, may change within its
    range). `TinyJit(fxn, captured=None, prune=False)`: `captured` rebuilds a jit from a `CapturedJit` (as pickling
    does); `prune` runs the kernels that do not depend on the inputs once, at capture, instead of on every replay
    (never one that updates state an assign keeps between calls, as `Tensor.rand`'s counter). `@TinyJit(prune=True)`
    decorates too.

    Tensors anywhere in list, tuple and dict arguments are inputs like the others. Every other argument, at any depth,
    is checked on each replay against its captured value (numbers, strings and numpy values by value, other objects
    by equality where their type defines it, else by identity): a replay runs kernels that hold the captured values,
    so a change is refused with `JitError`. Calls from several threads run one at a time; a replay's returned tensors
    are rewritten by the next replay, from any thread, so read or copy them before calling again."""

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
        self._lock = threading.RLock()  # one call at a time: calls from several threads run one after another
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
        with self._lock:
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
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        if capturing and self.cnt >= 1 and _capturing_here():
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
        other arguments. Returns the inputs' buffers and tensors, or None when anything differs: the full path
        (`_prepare`, `_check`) then realizes, or names what changed."""
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
                if _difference(value, x, "") is not None:
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
        constants = [(name, _captured_value(x)) for name, x in call.constants]  # before the function can change them
        if earlier := pending_assigns():  # writes left from before (an eager call's): not part of the capture
            realize(earlier)
        recorded = _Recorder()
        capturing.append(recorded)
        try:
            ret = self.fxn(*args, **kwargs)
            outs = [lb for t in _returned_tensors(ret) for lb in _shards(t.lazydata)]
            # the returned values, and the writes the function made but did not run (`W.assign(W - g)` of a tensor it
            # does not return: a replay runs only what was captured, and would have dropped them)
            if unrealized := [lb for lb in outs if lb.base.realized is None] + pending_assigns():
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
            items, onetime = _prune(items, call.buffers, recorded.assigned_memory())
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
        self.captured = CapturedJit(template, items, replace, call.infos, variables, constants)
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


def _capturing_here() -> bool:
    """Whether a jit captures on this thread (one on another thread neither sees nor stops this thread's work)."""
    here = threading.get_ident()
    return any(getattr(listener, "thread", here) == here for listener in capturing)


class _Recorder:
    """Listens to `run_schedule` while a function is captured: every item that runs, the buffers written, which of
    those are written in place by an assign, which items are snapshots (`LazyBuffer.is_snapshot`), and a weak
    reference to each written buffer's LazyBuffer."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()  # the capturing thread: work other threads run meanwhile is theirs
        self.items: list[ExecItem] = []
        self.written: list[Buffer] = []
        self.owners: list[weakref.ref[LazyBuffer]] = []
        self.assigned: set[int] = set()
        self.snapshots: set[int] = set()

    def __call__(self, ei: ExecItem, outputs: tuple[LazyBuffer, ...]) -> None:
        if threading.get_ident() != self.thread:
            return
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

    def assigned_memory(self) -> set[int]:
        """ids of the allocations an assign wrote into (`_memory`)."""
        return {_memory(buf) for buf in self.written if id(buf) in self.assigned}

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


def _memory(buf: Buffer) -> int:
    """The id of the allocation `buf` lies in (a view's base's)."""
    return id(buf.base if buf.base is not None else buf)


def _prune(items: list[ExecItem], inputs: list[Buffer], assigned: set[int]) -> tuple[list[ExecItem], list[ExecItem]]:
    """Split `items` into those a replay must run and those that ran once at capture, for good: an item is rerun when
    it reads or writes memory whose value changes from call to call (an input's, or what a rerun item writes), or
    writes into memory an assign updates (`assigned`: state such as a parameter or the random generator's counter,
    whose value lives on between calls and moves on every call)."""
    changing = {_memory(b) for b in inputs}
    changing |= {_memory(b) for ei in items for b in ei.bufs if b.shared}  # other code may write it between calls
    updates_state = {i for i, ei in enumerate(items) if any(_memory(b) in assigned for b in written_by(ei))}
    rerun: set[int] = set()
    while True:  # to a fixed point: an item that reads what a rerun item (before or after it) writes is rerun too
        new = {i for i, ei in enumerate(items)
               if i not in rerun and (i in updates_state or any(_memory(b) in changing for b in ei.bufs))}  # fmt: skip
        if not new:
            break
        rerun |= new
        changing |= {_memory(b) for i in new for b in written_by(items[i])}
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
        if (found := _difference(old, new, name)) is not None:
            where, was, now = found
            raise JitError(f"jit: argument {where} is {_shown(now)}, captured with {_shown(was)}; a replay runs the "
                           "captured kernels, which hold the captured value: pass what changes as a tensor or a bound "
                           "Variable, or .reset() (or a new TinyJit) to capture again")  # fmt: skip
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


def _shown(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


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

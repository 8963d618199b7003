"""`LazyBuffer`: a node of the lazy graph. A *base* has an op and sources and (once realized) a `Buffer`; a *view*
is a ShapeTracker over a base. Movement ops only make views; constants fold; identical nodes are shared."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Collection
from typing import Any

from lazy.device import Buffer, get_device
from lazy.dtype import ConstType, DType, dtypes
from lazy.helpers import all_int, dedup, prod
from lazy.ops import REDUCE_ALU, GroupOp, Ops, identity_element, truncate
from lazy.rewrite import rewrite
from lazy.shape import ShapeTracker
from lazy.symbolic import Node, Variable, sint

# identical live nodes are shared: the hash of a structure (`_key`) -> a weak reference to the node, whose own key must
# equal the one looked up (a plain dict of weak references costs less per lookup than a WeakValueDictionary, and keying
# by the hash hashes a key once per node, not at every lookup, store and removal: the eager path pays these for every
# op). A dead node's entry stays until the slot is taken again or the dead entries are swept, once the cache has grown
# to `_sweep_at` entries: no Python callback runs as each node dies (an eager op's nodes die by the handful).
_cache: dict[int, weakref.ref[LazyBuffer]] = {}
# writes made by `assign` and not yet run (realized ones leave at the next `pending_assigns`): a jit runs those left
# from before it captures, and those its function leaves unrun as part of the capture
_pending_assigns: weakref.WeakSet[LazyBuffer] = weakref.WeakSet()


def pending_assigns() -> list[LazyBuffer]:
    """The assigns made so far that have not run and whose node is still held."""
    while True:
        try:
            nodes = list(_pending_assigns)
            break
        except RuntimeError:  # another thread's assign changed the set meanwhile
            continue
    for lb in nodes:
        if lb.realized is not None:
            _pending_assigns.discard(lb)
    return [lb for lb in nodes if lb.realized is None]


SWEEP_MIN = 4096
_sweep_at = SWEEP_MIN
# the constants of recent ops, kept alive (a strong, bounded cache): `x + 1` in a loop makes its broadcast constant
# once, not three nodes per op
_consts: dict[tuple[Any, ...], LazyBuffer] = {}
CONST_CACHE_SIZE = 512
PEER_READ = "peer read"  # the argument of a COPY its destination may read in place (`LazyBuffer.copy_to_device`)


def _kernels_need_copies_of_views(device: str) -> bool:
    """Whether `device` runs kernels but its allocator cannot hand one a view at an offset (no `"offset"` feature):
    such a view is readable and writable through its base, but a kernel that takes it fails."""
    dev = get_device(device)
    return dev.kernel_refusal is None and not dev.allocator.supports("offset")


def create_lazybuffer(device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                      srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> LazyBuffer:  # fmt: skip
    """Make (or reuse an identical) LazyBuffer. EMPTY buffers are never shared: each is its own memory."""
    if st.size == 0 and op not in (Ops.EMPTY, Ops.CONST):
        op, arg, srcs, base = Ops.CONST, 0, (), None
        st = ShapeTracker.from_shape(st.shape)
    key = _key(device, st, dtype, op, arg, srcs, base)
    slot = hash(key)
    if op is not Ops.EMPTY and (ref := _cache.get(slot)) is not None and (hit := ref()) is not None:
        if hit._cache_key == key:
            hit.shared = True
            return hit
    ret = LazyBuffer(device, st, dtype, op, arg, srcs, base)
    if op is not Ops.EMPTY:  # (a node of another structure with the same hash loses its entry, not its sharing)
        _cache[slot] = weakref.ref(ret)
        ret._cache_slot, ret._cache_key = slot, key
        if len(_cache) >= _sweep_at:
            _sweep()
    return ret


def _sweep() -> None:
    """Drop the entries of dead nodes; sweep again when the cache has doubled (amortized: a few per node made)."""
    global _sweep_at
    # (a snapshot, taken in C: another thread may add entries meanwhile; at worst a live node loses its entry, which
    # costs it its sharing, never its value)
    for slot, ref in list(_cache.items()):
        if ref() is None and _cache.get(slot) is ref:
            _cache.pop(slot, None)
    _sweep_at = max(SWEEP_MIN, 2 * len(_cache))


def _is_zero(value: Any) -> bool:
    """A constant that is exactly zero (of either sign): its padding is zero too, and any sum of it is +0."""
    return not isinstance(value, Node) and type(value) in (int, float, bool) and value == 0


def _key(device: str, st: ShapeTracker, dtype: DType, op: Ops | None, arg: Any, srcs: tuple[LazyBuffer, ...],
         base: LazyBuffer | None) -> tuple[Any, ...]:  # fmt: skip
    """What makes two nodes identical. It holds `srcs` (the node's own tuple) and `base`: strong refs, so the entry
    dies with the value it maps to. Variables compare equal whatever they are bound to, so the bound values are part
    of the key (n=3 and n=5 are different nodes that share one compiled kernel)."""
    bound: Any = None if st.static else tuple(sorted((v.expr, val) for v, val in st.var_vals.items()))
    if isinstance(arg, Node):  # a constant whose value is a bound variable (or an expression of them)
        bound = (bound, tuple(sorted((v.expr, v.val) for v in arg.vars() if v._val is not None)))
    if isinstance(arg, ShapeTracker) and not arg.static:  # an assign through a view with bound variables
        bound = (bound, tuple(sorted((v.expr, val) for v, val in arg.var_vals.items())))
    # 0.0 == -0.0 == False and 1 == 1.0 == True: the repr (floats) or type keeps such constants apart
    return (device, st, bound, dtype, op, arg, repr(arg) if isinstance(arg, float) else type(arg), srcs, base)


def forget_graph(lb: LazyBuffer) -> None:
    """After `lb` (a base) is realized its sources are no longer needed: drop them so memory can be freed (the
    cache key holds them too)."""
    if lb._cache_key is not None and (ref := _cache.get(slot := lb._cache_slot)) is not None and ref() is lb:
        del _cache[slot]
    lb.srcs, lb._cache_key = (), None


# -- old values an assign overwrites ---------------------------------------------------------------------------------
#
# An ASSIGN writes into its target's memory. A node that reads the target's current value and is still unrealized
# when the assign runs would read the new value if realized later. Those the schedule itself runs are ordered before
# the assign; any other that may still be realized (a tensor holds it, or holds a node above it) is re-pointed at a
# snapshot: a copy of the old value made before the assign (`Snapshot`). The search follows each node's consumers
# (`_consumers`, weak references kept as nodes are made) from the target upwards, so it costs only the part of the
# graph that reads the target, and a copy only when such a reader may outlive the assign.


class _Probe:
    pass


def _refcount(ref: weakref.ref[Any]) -> int:
    obj = ref()
    return sys.getrefcount(obj)


# the references a frame like `_refcount`'s adds (its local, the call's argument): measured, not assumed. The probe
# is held by this module's global only.
_probe = _Probe()
_OWN_REFS = _refcount(weakref.ref(_probe)) - 1
del _probe


def _consumers(lb: LazyBuffer) -> list[LazyBuffer]:
    """The live nodes that hold `lb` now: views of it, and bases with it among their sources."""
    found = [c for ref in lb._consumers if (c := ref()) is not None]
    return [c for c in found if c._base is lb or any(src is lb for src in c.srcs)]


def _references_to(lb: LazyBuffer, holder: LazyBuffer) -> int:
    """How many strong references `holder` has to `lb`: in its sources, as its base, in its cache key (which holds
    the sources' tuple itself, and a view's base)."""
    count = sum(src is lb for src in holder.srcs) + (holder._base is lb)
    for part in holder._cache_key or ():
        if part is lb:
            count += 1
        elif isinstance(part, tuple) and part is not holder.srcs:
            count += sum(x is lb for x in part)
    return count


def _look_up(ref: weakref.ref[LazyBuffer], realized: set[int]) -> tuple[bool | None, list[weakref.ref[LazyBuffer]]]:
    """Of the node `ref` refers to: may it be realized later (True: something outside the graph refers to it; False:
    it is realized, or realized by this schedule; None: only its consumers can tell), and weak refs to its consumers.
    References are counted with `sys.getrefcount`, less those its consumers hold (`_references_to`) and this frame's
    own: any reference unaccounted for counts as outside, so a doubt costs a copy, never a wrong value. Nothing but
    this frame may hold the node strongly while it counts."""
    lb = ref()
    if lb is None or id(lb) in realized or lb.is_realized():
        return False, []
    consumers = _consumers(lb)
    from_graph = sum(_references_to(lb, c) for c in consumers)
    outside = sys.getrefcount(lb) - _OWN_REFS > from_graph
    return (True if outside else None), [weakref.ref(c) for c in consumers]


def _may_be_realized(start: weakref.ref[LazyBuffer], realized: set[int], memo: dict[int, bool]) -> bool:
    """Whether the node `start` refers to may be realized after this schedule: it, or a node above it, is held from
    outside the graph. Walks up through consumers, holding only weak references."""
    stack: list[tuple[weakref.ref[LazyBuffer], list[weakref.ref[LazyBuffer]] | None]] = [(start, None)]
    while stack:
        ref, consumers = stack.pop()
        if ref() is None:
            continue
        key = id(ref())
        if consumers is not None:  # everything above is settled
            memo[key] = any(memo.get(id(c()), False) for c in consumers)
            continue
        if key in memo:
            continue
        found, consumers = _look_up(ref, realized)
        if found is not None:
            memo[key] = found
            continue
        stack.append((ref, consumers))
        stack += [(c, None) for c in consumers if id(c()) not in memo]
    return memo.get(id(start()), False)


def outliving_readers(targets: list[LazyBuffer], realized: set[int],
                      clobbered: Collection[int] = ()) -> dict[LazyBuffer, list[LazyBuffer]]:  # fmt: skip
    """For each target (a realized base an assign is about to overwrite), the unrealized nodes that read its current
    value directly and may still be realized afterwards (see `_may_be_realized`). `realized`: ids of the nodes this
    schedule realizes (they drop their sources once run). `clobbered`: ids of the targets whose every unrealized
    reader counts (some kernel reads both their old and their new value)."""
    memo: dict[int, bool] = {}
    decided = []  # weak refs only until every count is done: a strong one would count as an outside holder
    for target in targets:
        refs = _reader_refs(target)
        if id(target) not in clobbered:
            refs = [ref for ref in refs if _may_be_realized(ref, realized, memo)]
        decided.append((target, refs))
    found = {
        target: [lb for ref in refs if (lb := ref()) is not None and not lb.is_realized()] for target, refs in decided
    }
    return {target: readers for target, readers in found.items() if readers}


def _reader_refs(target: LazyBuffer) -> list[weakref.ref[LazyBuffer]]:
    """Weak refs to the live nodes that read `target`'s value, directly or through a view of it or of a buffer view
    of its memory (a bitcast, a slice taken without a kernel)."""
    held, stack = [], [target]
    while stack:
        node = stack.pop()
        held.append(node)
        stack += [c for c in _consumers(node) if c._base is node or _aliases(c, node)]
    readers = dedup(c for v in held for c in _consumers(v) if c._base is None and any(x is v for x in _value_srcs(c)))
    return [weakref.ref(lb) for lb in readers]


def _aliases(lb: LazyBuffer, of: LazyBuffer) -> bool:
    """Whether `lb` is a buffer view of `of`'s memory: it reads whatever that memory holds when it runs."""
    return lb.op is Ops.BUFFER_VIEW and lb._base is None and bool(lb.srcs) and lb.srcs[0].base is of


def _value_srcs(lb: LazyBuffer) -> tuple[LazyBuffer, ...]:
    """The sources whose values `lb` reads: an assign's target and a BUFFER_VIEW's source share memory with it."""
    return () if lb.op is Ops.BUFFER_VIEW else lb.srcs[:1] if lb.op is Ops.ASSIGN else lb.srcs


class Snapshot:
    """A copy of `target`'s current value (`copy`, unrealized) for `readers` that may be realized after an assign
    overwrites the target. `reroute` points the readers at the copy."""

    def __init__(self, target: LazyBuffer, readers: list[LazyBuffer]):
        self.target, self.readers = target, readers
        self.copy = target.clone()
        self.copy.is_snapshot = True

    def reroute(self) -> None:
        for reader in self.readers:
            n_read, srcs = len(_value_srcs(reader)), reader.srcs
            reader._reroute(tuple(self._of_copy(x) if i < n_read else x for i, x in enumerate(srcs)))

    def _of_copy(self, x: LazyBuffer) -> LazyBuffer:
        """`x` read from the copy where it reads the target's memory (through a view, or a buffer view of it)."""
        if x.base is self.target:
            return _view_of(self.copy, x)
        base = x.base
        if base.op is Ops.BUFFER_VIEW and base.srcs and (src := self._of_copy(base.srcs[0])) is not base.srcs[0]:
            alias = create_lazybuffer(base.device, ShapeTracker.from_shape(base.shape), base.dtype, Ops.BUFFER_VIEW,
                                      base.arg, (src,))  # fmt: skip
            return _view_of(alias, x)
        return x


def snapshots_for(targets: list[LazyBuffer], realized: set[int], clobbered: Collection[int] = ()) -> list[Snapshot]:
    """A `Snapshot` for each target with readers `outliving_readers` finds. The copies must be realized before the
    assigns (the scheduler orders every reader of a target first)."""
    return [Snapshot(target, readers) for target, readers in outliving_readers(targets, realized, clobbered).items()]


def same_memory(a: LazyBuffer, b: LazyBuffer) -> bool:
    """Whether two realized bases use the same memory (one buffer, or views of one, e.g. through a bitcast)."""
    x, y = a.buffer, b.buffer
    return (x.base or x) is (y.base or y)


def storable_view(st: ShapeTracker) -> bool:
    """Whether a kernel can write through `st`: one view, no padding, and no element reached twice (no expanded axis),
    so every element of the view is one distinct element of memory."""
    view = st.views[-1] if len(st.views) == 1 else None
    return (
        view is not None
        and view.mask is None
        and all(stride != 0 or size == 1 for size, stride in zip(view.shape, view.strides))
    )


def gatherable(lb: LazyBuffer) -> bool:
    """Whether a gather can read `lb` as a load at a computed address: concrete sizes, and one view of its base with
    no padding and integer strides, over a base that gets memory (not a constant or the index ramp)."""
    if not all_int(lb.shape) or lb.base.op in GroupOp.Computed and lb.base.realized is None:
        return False
    st = lb.st.simplify()
    return len(st.views) == 1 and st.views[0].mask is None and all_int(st.views[0].strides)


def _view_of(base: LazyBuffer, like: LazyBuffer) -> LazyBuffer:
    """`like` (a view of some base, or that base) read from `base` instead: same shape, same view."""
    return base if like.base is like else base._view(like.st)


# (chunks, lanes) of a split reduction of each axis length met so far (`LazyBuffer._split_reduce`): the first plan
# whose chunks and lanes divide the length (with lanes, rows of at least 16), else the first with lanes; None where
# none has rows of 16
_SPLIT_PLANS: dict[int, tuple[int, int] | None] = {}


def _split_plan(size: int) -> tuple[int, int] | None:
    if size in _SPLIT_PLANS:
        return _SPLIT_PLANS[size]
    plans = [(p, w) for w in (32, 16, 8, 1) for p in (64, 32, 16, 8) if size // (p * w) >= 16]
    exact = next(((p, w) for p, w in plans if size % (p * w) == 0 and w > 1), None)
    plan = exact or next(((p, w) for p, w in plans if w > 1), None)
    if len(_SPLIT_PLANS) < 4096:
        _SPLIT_PLANS[size] = plan
    return plan


class LazyBuffer:
    # slots: every eager op makes nodes, and a per-node __dict__ was one more object to allocate and collect
    __slots__ = ("is_snapshot", "shared", "_consumers", "_consumers_kept", "_cache_key", "_cache_slot", "_structure",
                 "device", "st", "dtype", "shape", "size", "_base", "_buffer", "op", "arg", "srcs", "forced_realize",
                 "done", "__weakref__")  # fmt: skip
    # the nodes made reading this one (its views, bases with it among their sources), as weak refs; the dead ones
    # are dropped whenever the list has doubled since the last time
    _consumers: list[weakref.ref[LazyBuffer]]

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None):  # fmt: skip
        self.is_snapshot = False  # a copy of an assign target's old value, made for readers that may outlive it
        # handed to more than one holder (the identical-node cache returned it again; a tensor became it by assign
        # while another tensor held it): an in-place write would show in every holder, so `Tensor.assign` writes a
        # shared realized node's new value into memory of its own instead
        self.shared = False
        self._consumers_kept = 0
        self._cache_key: tuple[Any, ...] | None = None
        self._cache_slot = 0  # the hash of `_cache_key`, its entry in `_cache`
        self._structure: tuple[Any, ...] | None = None
        self.device, self.st, self.dtype = device, st, dtype
        self.shape: tuple[sint, ...] = st.shape
        self.size: sint = st.size
        self._base = base
        self._buffer: Buffer | None = None  # made on first use (most nodes never get one: constants, fused ops)
        if base is None:
            self.op, self.arg, self.srcs = op, arg, srcs
            self.forced_realize = op is Ops.CONTIGUOUS
            self.done = False  # set once the buffer holds this node's value
        else:
            assert base.base is base, "a view's base must be a base"
            self.op, self.arg, self.srcs = Ops.VIEW, None, ()
        self._consumers = []
        self._consumed_by(self.srcs if base is None else (base,))

    @property
    def structure(self) -> tuple[Any, ...]:
        """What makes this node what it is, without its sources: device, view, bound variable values, and for a base
        dtype, op and argument (the schedule cache keys graphs by it; see `lazy.engine.schedule.Structure`)."""
        if (desc := self._structure) is None:
            key = self._cache_key or _key(self.device, self.st, self.dtype, self.op, self.arg, self.srcs, self._base)
            desc = self._structure = key[:3] if self._base is not None else key[:7]
        return desc

    def _consumed_by(self, held: tuple[LazyBuffer, ...]) -> None:
        """Record this node as a consumer of each node it holds."""
        ref = weakref.ref(self)
        for lb in held:
            lb._consumers.append(ref)
            if len(lb._consumers) > 2 * lb._consumers_kept + 8:  # amortized: a long-lived node is read by many
                lb._consumers = [r for r in lb._consumers if r() is not None]
                lb._consumers_kept = len(lb._consumers)

    @property
    def buffer(self) -> Buffer:
        """The memory of this node's base: an ASSIGN writes into its target's, a BUFFER_VIEW reads its source's, the
        rest own theirs (made on first use, allocated when first run)."""
        if self._base is not None:
            return self._base.buffer
        if (buf := self._buffer) is None:
            if self.op is Ops.ASSIGN:
                buf = self.srcs[1].base.buffer
            elif self.op is Ops.BUFFER_VIEW:
                buf = self.srcs[0].buffer.view(self._buffer_size(), self.dtype, self.arg)
            else:
                buf = Buffer(self.device, self._buffer_size(), self.dtype)
            self._buffer = buf
        return buf

    @buffer.setter
    def buffer(self, buf: Buffer) -> None:
        self._buffer = buf

    def _buffer_size(self) -> int:
        size = self.st.size
        if isinstance(size, Node):
            size = size.max  # symbolic shape: allocate for the largest value the variable can take
        return int(size)

    def __repr__(self) -> str:
        if self._base is not None:
            return f"<LB view {self.device} {self.shape} {self.dtype} of {self._base!r}>"
        state = "realized" if self.realized is not None else self.op
        return f"<LB {self.device} {self.shape} {self.dtype} {state}>"

    @property
    def base(self) -> LazyBuffer:
        return self._base if self._base is not None else self

    @property
    def realized(self) -> Buffer | None:
        base = self.base
        return base.buffer if base.done else None

    def is_realized(self) -> bool:
        return self.realized is not None

    def _reroute(self, srcs: tuple[LazyBuffer, ...]) -> None:
        """Read `srcs` instead (the same values, elsewhere in memory). Leaves the cache: no new node may share it."""
        assert self._base is None and len(srcs) == len(self.srcs), "only a base's sources can be replaced"
        forget_graph(self)
        self.srcs = srcs
        self._consumed_by(srcs)

    # -- creation ----------------------------------------------------------------------------------------------------

    @staticmethod
    def metaop(op: Ops, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:  # fmt: skip
        return create_lazybuffer(device, ShapeTracker.from_shape(shape), dtype, op, arg, srcs)

    @staticmethod
    def from_buffer(buf: Buffer, shape: tuple[sint, ...]) -> LazyBuffer:
        """A realized base of `shape` whose memory is `buf` (already holding its value): how a loaded jit returns
        the buffers its replays write."""
        lb = LazyBuffer(buf.device, ShapeTracker.from_shape(shape), buf.dtype, Ops.EMPTY)
        lb.buffer, lb.done = buf, True
        return lb

    def const(self, val: ConstType | Node, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        return LazyBuffer.const_like(val, self.dtype, self.device, self.shape if shape is None else shape)

    @staticmethod
    def const_like(val: ConstType | Node, dtype: DType, device: str, shape: tuple[sint, ...]) -> LazyBuffer:
        # a bound variable's value would not be part of the key: such constants (and shapes) are never kept, so a
        # lookup (first: most calls are hits) finds none. 0.0 == -0.0 == False: the type and a float's hex keep such
        # constants apart
        key = (val.hex() if type(val) is float else val, type(val), dtype, device, shape)
        if (hit := _consts.get(key)) is not None and not (hit._base or hit).done:
            return hit
        keep = not isinstance(val, Node) and all_int(shape)
        value = val if isinstance(val, Node) else dtypes.as_const(val, dtype)
        if prod(shape) == 0:  # nothing to broadcast: an empty constant of that shape
            return LazyBuffer.metaop(Ops.CONST, shape, dtype, device, arg=value)
        scalar = LazyBuffer.metaop(Ops.CONST, (), dtype, device, arg=value)
        ret = scalar.reshape((1,) * len(shape)).expand(shape)
        if keep:
            if len(_consts) >= CONST_CACHE_SIZE:
                del _consts[next(iter(_consts))]
            _consts[key] = ret
        return ret

    def is_unrealized_const(self) -> bool:
        return self.base.realized is None and self.base.op is Ops.CONST

    def is_unrealized_unmasked_const(self) -> bool:
        return self.is_unrealized_const() and all(v.mask is None for v in self.st.views)

    def const_value(self) -> Any:
        return self.base.arg

    # -- realization hints --------------------------------------------------------------------------------------------

    def contiguous(self) -> LazyBuffer:
        """A base whose memory holds exactly these elements in order (a copy kernel only when needed)."""
        if self.st.contiguous and self.size == self.base.size and not self.is_unrealized_const():
            self.base.forced_realize = True
            return self
        return create_lazybuffer(
            self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.CONTIGUOUS, None, (self,)
        )

    def clone(self) -> LazyBuffer:
        """A new base with memory of its own holding these elements: a copy kernel even for a plain buffer, and never
        shared with an identical node (a write into one clone must not show in another)."""
        if self.size == 0:
            return LazyBuffer.const_like(0, self.dtype, self.device, self.shape)
        return LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.CONTIGUOUS, None, (self,))

    def assign(self, value: LazyBuffer, view: ShapeTracker | None = None) -> LazyBuffer:
        """Write `value` into this buffer's memory (which must be a realized, contiguous base): all of it, or only the
        elements `view` (a view of this buffer, `value`'s shape, a `storable_view`) selects. The result is this
        buffer after the write; the kernel runs over `value`'s elements only."""
        assert self.base is self and self.st.contiguous, "assign target must be a contiguous base"
        assert view is None or storable_view(view), f"cannot store through {view}"
        written = view if view is not None else ShapeTracker.from_shape(self.shape)
        if value.base.realized is not None and same_memory(value.base, self) and value.st != written:
            # the kernel would read the memory it writes, elsewhere than where it writes (`x.assign(x.flip(0))`):
            # a copy first (a computed value gets memory of its own anyway, see `lazy.engine.schedule`)
            value = value.clone()
        ret = create_lazybuffer(
            self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.ASSIGN, view, (value, self)
        )
        _pending_assigns.add(ret)
        return ret

    def copy_to_device(self, device: str, peer: bool = False) -> LazyBuffer:
        """This value on `device`. `peer`: for a value `device`'s kernels only read, never write (an allreduce's
        partial sums): where `device` can read this one's memory in place (`lazy.device.peers`), it does,
        and nothing is copied; elsewhere it is an ordinary copy."""
        if device == self.device:
            return self
        if self.is_unrealized_unmasked_const() and not isinstance(self.const_value(), Node):
            return LazyBuffer.const_like(self.const_value(), self.dtype, device, self.shape)
        src = self.buffer_view()  # a plain slice is copied straight out of the source's memory
        if src is None and self is not self.base and self.base.op not in GroupOp.Computed and \
                get_device(self.device).kernel_refusal is not None:  # fmt: skip
            # a transpose or a column of memory on a device that runs no kernels (DISK): the whole buffer is copied
            # and the view taken on `device`
            return self.base.copy_to_device(device, peer)._view(self.st)
        src = src or self.contiguous()
        arg = PEER_READ if peer else None
        return create_lazybuffer(device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.COPY, arg, (src,))

    def buffer_view(self, dtype: DType | None = None) -> LazyBuffer | None:
        """A base sharing memory with this node's base, when it reads one consecutive range of it (a shrink or
        reshape of a contiguous buffer): no kernel needed. With `dtype`, the same bytes reinterpreted (a bitcast,
        which may change the element size and so the last dimension)."""
        st, base = self.st, self.base
        if (
            not st.consecutive
            or not isinstance(st.views[0].offset, int)
            or base.op is None
            or base.op in GroupOp.Computed
        ):
            return None
        if base.op is not Ops.BUFFER_VIEW and self is base and dtype is None:
            return self
        dtype = dtype or self.dtype
        shape = self.shape
        if dtype.itemsize != self.dtype.itemsize:
            last = shape[-1] if shape else 1
            if not isinstance(last, int) or (last * self.dtype.itemsize) % dtype.itemsize:
                return None
            shape = (*shape[:-1], last * self.dtype.itemsize // dtype.itemsize)
        offset = st.views[0].offset * self.dtype.itemsize
        if offset and _kernels_need_copies_of_views(self.device):
            return None  # computed by a kernel instead: a later kernel could not take the view
        return create_lazybuffer(self.device, ShapeTracker.from_shape(shape), dtype, Ops.BUFFER_VIEW, offset, (base,))

    # -- compute ------------------------------------------------------------------------------------------------------

    def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        if dtype == self.dtype:
            return self
        if bitcast and dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"bitcast from {self.dtype} to {dtype} changes the element size; use a same-size dtype")
        if not bitcast and self.is_unrealized_unmasked_const() and not isinstance(self.const_value(), Node):
            return LazyBuffer.const_like(self.const_value(), dtype, self.device, self.shape)
        op = Ops.BITCAST if bitcast else Ops.CAST
        return create_lazybuffer(self.device, ShapeTracker.from_shape(self.shape), dtype, op, dtype, (self,))

    def e(self, op: Ops, *in_srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        srcs = (self,) + in_srcs
        shape, dtype = self.shape, self.dtype
        for src in in_srcs:
            assert src.shape == shape, f"{op}: shapes differ {[s.shape for s in srcs]}"
        if op is Ops.WHERE:
            assert srcs[0].dtype == dtypes.bool and srcs[1].dtype == srcs[2].dtype, (
                f"where dtypes {[s.dtype for s in srcs]}"
            )
            out_dtype = srcs[1].dtype
        else:
            for src in in_srcs:  # (identity first: a DType's == is a Python call, and every eager op comes here)
                assert src.dtype is dtype or src.dtype == dtype, f"{op}: dtypes differ {[s.dtype for s in srcs]}"
            out_dtype = dtypes.bool if op in GroupOp.Comparison else dtype
        if (simpler := rewrite(_LAZY_GRAPH, op, out_dtype, srcs)) is not None:  # constants fold (lazy.rewrite)
            return simpler
        st = self.st if self._base is None else ShapeTracker.from_shape(shape)  # (a base's tracker is the plain one)
        return create_lazybuffer(self.device, st, out_dtype, op, arg, srcs)

    def r(self, op: Ops, axis: tuple[int, ...], shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        """`op` over `axis`, the reduced axes kept with size 1; or, given `shape` (those axes dropped, or any shape of
        the same elements), reshaped to it: one view node made, not one per reshape."""
        new_shape = tuple([1 if i in axis else s for i, s in enumerate(self.shape)])
        out_shape = new_shape if shape is None else shape
        if not axis or new_shape == self.shape:
            return self if shape is None else self.reshape(shape)
        if self.size == 0:
            return LazyBuffer.const_like(identity_element(op, self.dtype), self.dtype, self.device, out_shape)
        base = self._base or self
        if base.op is Ops.CONST and not base.done:  # an unrealized constant (`is_unrealized_const`)
            value = base.arg
            if op is Ops.RMAX and not isinstance(value, Node) and all(v.mask is None for v in self.st.views):
                return self.const(value, out_shape)
            if op is Ops.SUM and _is_zero(value):
                return self.const(0, out_shape)  # a sum of zeros (padded or not): a gradient of an unused branch
            if op is Ops.SUM and not isinstance(value, Node) and all(v.mask is None for v in self.st.views) and \
                    (dtypes.is_int(self.dtype) or dtypes.is_float(self.dtype)) and all_int(self.shape):  # fmt: skip
                # a sum of a repeated constant is its product with the count, rounded once (ints wrap as a kernel's
                # sum would): `Tensor.ones(2**40, 2**30).sum()` looped 2^70 times
                count = prod(self.shape[a] for a in axis)
                return self.const(truncate(value * count, self.dtype), out_shape)
        if all_int(self.shape) and self.size >= 2**63:
            raise ValueError(f"a reduction over {self.shape} ({self.size} elements) would count past int64 and never "
                             "finish; reduce fewer elements")  # fmt: skip
        if (split := self._split_reduce(op, axis, new_shape, out_shape)) is not None:
            return split
        out = self._reduce_node(op, axis, new_shape)
        return out if shape is None else out.reshape(shape)

    def gather(self, index: LazyBuffer, axis: int) -> LazyBuffer:
        """self[..., index, ...] along `axis` (0 where the index is outside [0, n)): `index` has the result's shape,
        which is self's but along `axis`. self must read its base through one plain view (`gatherable`)."""
        assert gatherable(self) and index.shape[:axis] + index.shape[axis + 1 :] == self.shape[:axis] + self.shape[
            axis + 1 :], f"gather of {self.shape} by {index.shape} along {axis}"  # fmt: skip
        return create_lazybuffer(self.device, ShapeTracker.from_shape(index.shape), self.dtype, Ops.GATHER, axis,
                                 (self, index))  # fmt: skip

    def _reduce_node(self, op: Ops, axis: tuple[int, ...], new_shape: tuple[sint, ...]) -> LazyBuffer:
        """The reduction's own node (of the kept shape `new_shape`), with none of `r`'s simplifications."""
        return create_lazybuffer(self.device, ShapeTracker.from_shape(new_shape), self.dtype, op, axis, (self,))

    def _split_reduce(self, op: Ops, axis: tuple[int, ...], new_shape: tuple[sint, ...],
                      out_shape: tuple[sint, ...]) -> LazyBuffer | None:  # fmt: skip
        """Reduce one long axis in two stages: (P, R, W) partial results first, P chunks for the cores and W
        contiguous lanes (vector accumulators) each, summing R rows read in order; then the P*W partials. A length no
        such plan divides splits the longest prefix that one does, and reduces the rest (fewer than P*W elements) on
        its own: one accumulator over a whole long row rounded 100x more (1.5e-4 relative error at 100003). The
        result comes in `out_shape`."""
        if len(axis) != 1 or not all_int(self.shape):
            return None
        ax = axis[0]
        size = self.shape[ax]
        assert isinstance(size, int)
        if size < 32768 or self.size // size >= 1024:
            return None
        if (plan := _split_plan(size)) is None:
            return None
        chunks, lanes = plan
        main = size - size % (chunks * lanes)
        head = (
            self
            if main == size
            else self.shrink(tuple((0, main) if i == ax else (0, s) for i, s in enumerate(self.shape)))
        )
        before, after = self.shape[:ax], self.shape[ax + 1 :]
        # the first stage splits again where its rows are long enough (`r`); the second reduces at most 2048 partials
        rows = main // (chunks * lanes)
        view = head.reshape((*before, chunks, rows, lanes, *after))
        if rows >= 32768:
            partial = view.r(op, (ax + 1,))
        else:
            partial = view._reduce_node(op, (ax + 1,), (*before, chunks, 1, lanes, *after))
        total = partial._reduce_node(op, (ax, ax + 2), (*before, 1, 1, 1, *after))
        if main == size:
            return total.reshape(out_shape)
        rest = self.shrink(tuple((main, size) if i == ax else (0, s) for i, s in enumerate(self.shape))).r(op, axis)
        out = total.reshape(new_shape).e(REDUCE_ALU[op], rest)
        return out if out_shape == new_shape else out.reshape(out_shape)

    # -- movement (views) ---------------------------------------------------------------------------------------------

    def bind(self, var_vals: dict[Variable, int]) -> LazyBuffer:
        """This realized node with its variables bound to `var_vals` (keyed by the unbound variable), reading the same
        memory: how a jit replay returns a tensor of symbolic shape with this call's values, not the capture's."""
        if not self.st.vars():
            return self
        base = self.base
        if base.st.vars():
            assert base.realized is not None, "only a realized node is rebound"
            base = LazyBuffer.from_buffer(base.realized, base.st.bind(var_vals).shape)
        return base if self.base is self else base._view(self.st.bind(var_vals))

    def _view(self, st: ShapeTracker) -> LazyBuffer:
        if st.size == 0 or (st.views[-1].mask is not None and any(b - a == 0 for a, b in st.views[-1].mask)):
            return LazyBuffer.const_like(0, self.dtype, self.device, st.shape)
        if st.contiguous and st.shape == self.base.shape:
            return self.base
        return create_lazybuffer(self.device, st, self.dtype, base=self.base)

    def reshape(self, shape: tuple[sint, ...]) -> LazyBuffer:
        return self._view(self.st.reshape(shape))

    def permute(self, order: tuple[int, ...]) -> LazyBuffer:
        return self._view(self.st.permute(order))

    def expand(self, shape: tuple[sint, ...]) -> LazyBuffer:
        return self._view(self.st.expand(shape))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        return self._view(self.st.pad(arg))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        return self._view(self.st.shrink(arg))

    def stride(self, arg: tuple[int, ...]) -> LazyBuffer:
        return self._view(self.st.stride(arg))


class _LazyGraph:
    """The rewrite rules' view of the lazy graph: a constant is an unrealized, unmasked CONST base whose value is a
    number (a symbolic one is only known when the kernel runs)."""

    @staticmethod
    def const_value(lb: LazyBuffer) -> Any:
        base = lb._base or lb
        if base.op is not Ops.CONST or base.done or isinstance(base.arg, Node):  # most operands: not a constant
            return None
        for view in lb.st.views:
            if view.mask is not None:
                return None
        return base.arg

    @staticmethod
    def make_const(value: Any, dtype: DType, like: LazyBuffer) -> LazyBuffer:
        return LazyBuffer.const_like(value, dtype, like.device, like.shape)


_LAZY_GRAPH = _LazyGraph()

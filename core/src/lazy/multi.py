"""`MultiLazyBuffer`: one tensor held on several devices, replicated or split along one axis, with the LazyBuffer
methods the Functions use (so every op and its gradient runs per shard), and the ring allreduce that combines
per-device partial reductions through the devices' copy paths."""

from __future__ import annotations

from typing import Any, TypeVar

from lazy.device import peers
from lazy.dtype import DType, dtypes
from lazy.helpers import ArgumentError, ShapeError, all_int, prod
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.symbolic import sint

Bounds = tuple[tuple[int, int], ...]

# how two partial results of a reduction combine (also how the allreduce adds one device's chunk to another's)
_COMBINE = {Ops.SUM: Ops.ADD, Ops.RMAX: Ops.MAX}


def split_bounds(size: int, parts: int) -> Bounds:
    """[start, end) of each of `parts` consecutive pieces of `size` elements: equal pieces of ceil(size/parts), the
    last smaller; when that would leave a piece empty (5 over 4), sizes that differ by at most one, larger first."""
    chunk = -(-size // parts)
    if (parts - 1) * chunk < size:
        return tuple((i * chunk, min((i + 1) * chunk, size)) for i in range(parts))
    small, extra = divmod(size, parts)
    starts = [i * small + min(i, extra) for i in range(parts + 1)]
    return tuple(zip(starts[:-1], starts[1:]))


T = TypeVar("T")


def _with(items: tuple[T, ...], axis: int, item: T) -> tuple[T, ...]:
    """`items` with the one at `axis` replaced (a shape's size, a pad's or shrink's pair)."""
    return items[:axis] + (item,) + items[axis + 1 :]


def _pad_on(lb: LazyBuffer, axis: int, before: int, after: int) -> LazyBuffer:
    return lb.pad(tuple((before, after) if i == axis else (0, 0) for i in range(len(lb.shape))))


def _shrink_on(lb: LazyBuffer, axis: int, start: int, end: int) -> LazyBuffer:
    return lb.shrink(tuple((start, end) if i == axis else (0, s) for i, s in enumerate(lb.shape)))


def _concat(pieces: list[LazyBuffer], axis: int, bounds: Bounds, size: int) -> LazyBuffer:
    """The pieces (all on one device) placed at their bounds along `axis` of a `size`-long result: each padded with
    zeros to the full length, then added (or-ed for bools); one elementwise kernel."""
    join = Ops.OR if pieces[0].dtype == dtypes.bool else Ops.ADD
    out: LazyBuffer | None = None
    for piece, (start, end) in zip(pieces, bounds):
        if end > start:
            padded = _pad_on(piece, axis, start, size - end)
            out = padded if out is None else out.e(join, padded)
    if out is None:  # every piece empty (a split axis of size 0): the empty result, as the first piece is
        return _pad_on(pieces[0], axis, 0, size - int(pieces[0].shape[axis]))
    return out


def _own_copy(lb: LazyBuffer, device: str) -> LazyBuffer:
    """`lb` on `device` in memory of its own, also where it is already there: a shard is written in place (an
    optimizer's step) and that must not change the tensor it was split from. Constants stay constants."""
    if lb.device == device and not lb.is_unrealized_const():
        return lb.clone()
    return lb.copy_to_device(device)


def ring_allreduce(op: Ops, partials: list[LazyBuffer]) -> list[LazyBuffer]:
    """Combine the same-shaped `partials` (one per device) by `op` (SUM or RMAX) so that every device holds the
    whole result. A ring: the flattened values are cut into one chunk per device; in n-1 reduce-scatter steps each
    device passes a chunk to the next, which folds it into its own, until device i holds the finished chunk i+1;
    n-1 all-gather steps pass the finished chunks around. Each device sends 2(n-1)/n of the data in all, whatever n."""
    n, shape = len(partials), partials[0].shape
    devices = [lb.device for lb in partials]
    combine = _COMBINE[op]
    size = int(prod(shape))
    flat = [lb.reshape((size,)) for lb in partials]
    # Devices that read each other's memory in place (`peers`: host devices of one process) fold in every other's
    # whole value directly: one kernel per device, all at once, nothing copied (a ring would copy 2(n-1)/n of the
    # data and assemble the chunks, each step waiting for the last); too few elements for a chunk each, likewise.
    direct = all(peers(a, b) for a in devices for b in devices if a != b)
    if size < n or n == 1 or direct:
        out = []
        for device in devices:  # in the same order on every device: the replicas are bit for bit equal
            terms = [flat[j].copy_to_device(device, peer=direct) for j in range(n)]
            acc = terms[0]
            for term in terms[1:]:
                acc = acc.e(combine, term)
            out.append(acc.reshape(shape))
        return out
    bounds = split_bounds(size, n)
    chunks = [[lb.shrink(((start, end),)) for start, end in bounds] for lb in flat]
    for step in range(n - 1):  # reduce-scatter: device i sends chunk i-step, which device i+1 folds in
        for i in range(n):
            c, dst = (i - step) % n, (i + 1) % n
            chunks[dst][c] = chunks[dst][c].e(combine, chunks[i][c].copy_to_device(devices[dst]))
    for step in range(n - 1):  # all-gather: device i sends finished chunk i+1-step, which replaces device i+1's
        for i in range(n):
            c, dst = (i + 1 - step) % n, (i + 1) % n
            chunks[dst][c] = chunks[i][c].copy_to_device(devices[dst])
    return [_concat(chunks[i], 0, bounds, size).reshape(shape) for i in range(n)]


class MultiLazyBuffer:
    """One value on several devices: `lbs[i]` on `device[i]`. `axis` None: each holds the whole value (replicated);
    else each holds the slice `bounds[i]` ([start, end)) of that axis. Bounds need not be equal or in device order
    (a slice or flip of a sharded tensor moves them), and a slice may leave a device an empty shard."""

    __slots__ = ("lbs", "axis", "bounds", "shape")

    def __init__(self, lbs: list[LazyBuffer], axis: int | None, bounds: Bounds | None = None):
        assert lbs and all(lb.dtype == lbs[0].dtype for lb in lbs), "shards of one dtype"
        self.lbs, self.axis = lbs, axis
        if axis is None:
            self.bounds: Bounds = ()
            self.shape: tuple[sint, ...] = lbs[0].shape
        else:
            self.bounds = bounds if bounds is not None else self._bounds_of(lbs, axis)
            self.shape = _with(lbs[0].shape, axis, max(end for _, end in self.bounds))

    @staticmethod
    def _bounds_of(lbs: list[LazyBuffer], axis: int) -> Bounds:
        ends = [0]
        for lb in lbs:
            ends.append(ends[-1] + int(lb.shape[axis]))
        return tuple(zip(ends[:-1], ends[1:]))

    @staticmethod
    def from_lazybuffer(lb: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> MultiLazyBuffer:
        """`lb` copied to each device: whole, or the device's slice of `axis` (split by `split_bounds`)."""
        if axis is None:
            return MultiLazyBuffer([_own_copy(lb, d) for d in devices], None)
        size = lb.shape[axis]
        if not isinstance(size, int):
            raise ShapeError(f"shard: axis {axis} has the symbolic size {size}; shard a concretely sized axis")
        if size < len(devices):
            raise ShapeError(f"shard: axis {axis} of shape {lb.shape} has {size} elements, fewer than the "
                             f"{len(devices)} devices; shard another axis or use fewer devices")  # fmt: skip
        bounds = split_bounds(size, len(devices))
        lbs = [_own_copy(_shrink_on(lb, axis, start, end), d) for d, (start, end) in zip(devices, bounds)]
        return MultiLazyBuffer(lbs, axis, bounds)

    # -- what a LazyBuffer answers -------------------------------------------------------------------------------------

    @property
    def device(self) -> tuple[str, ...]:
        return tuple(lb.device for lb in self.lbs)

    @property
    def dtype(self) -> DType:
        return self.lbs[0].dtype

    @property
    def size(self) -> sint:
        return prod(self.shape)

    def layout(self) -> str:
        """The placement in words, for error messages."""
        where = ", ".join(self.device)
        if self.axis is None:
            return f"replicated on ({where})"
        return f"sharded on axis {self.axis} of {self.shape} as {list(self.bounds)} on ({where})"

    def __repr__(self) -> str:
        return f"<MultiLazyBuffer {self.layout()} {self.dtype}>"

    def _new(self, lbs: list[LazyBuffer], axis: int | None = -1, bounds: Bounds | None = None) -> MultiLazyBuffer:
        """Shards in this layout (or in `axis`, `bounds` when given)."""
        return MultiLazyBuffer(lbs, self.axis if axis == -1 else axis, self.bounds if bounds is None else bounds)

    def shards_like(self, like: MultiLazyBuffer) -> list[LazyBuffer]:
        """This value's shards in `like`'s layout: the same shards; a replicated value's slices (each device slices its
        part locally, no copy); or, split on the same axis elsewhere (after a slice or flip), each device's range
        put together from the shards that hold it (copying only what lives on another device). Split on another
        axis (an all-to-all): an ArgumentError naming both layouts."""
        if self.device != like.device:
            raise ArgumentError(f"operands are on different devices: one {self.layout()}, one {like.layout()}; "
                                "shard both over the same devices")  # fmt: skip
        if self.axis == like.axis and self.bounds == like.bounds:
            return self.lbs
        if self.axis is None and like.axis is not None:
            return [_shrink_on(lb, like.axis, s, e) for lb, (s, e) in zip(self.lbs, like.bounds)]
        if self.axis == like.axis and like.axis is not None:
            return [self._range_on(device, like.axis, bound) for device, bound in zip(like.device, like.bounds)]
        raise ArgumentError(f"operands are sharded differently: one {self.layout()}, one {like.layout()}; reshard "
                            "one with .shard(devices, axis) to match the other")  # fmt: skip

    def _range_on(self, device: str, axis: int, bound: tuple[int, int]) -> LazyBuffer:
        """Elements [start, end) of the split axis on `device`: the overlapping part of each shard, copied only when
        it lives on another device (what a slice or flip moved), put together there."""
        start, end = bound
        pieces, places = [], []
        for lb, (a, b) in zip(self.lbs, self.bounds):
            low, high = max(a, start), min(b, end)
            if high > low:
                pieces.append(_shrink_on(lb, axis, low - a, high - a).copy_to_device(device))
                places.append((low - start, high - start))
        if not pieces:  # an empty shard
            return LazyBuffer.const_like(0, self.dtype, device, _with(self.shape, axis, 0))
        return pieces[0] if places == [(0, end - start)] else _concat(pieces, axis, tuple(places), end - start)

    def to_layout(self, like: MultiLazyBuffer) -> list[LazyBuffer]:
        """This value's shards in `like`'s layout (same devices), copying between devices when the layouts differ:
        each device gathers the whole value, then keeps its part."""
        if self.device == like.device and (self.axis is None or (self.axis, self.bounds) == (like.axis, like.bounds)):
            return self.shards_like(like)
        whole = MultiLazyBuffer([self.gather(d) for d in like.device], None)
        return whole.shards_like(like)

    def resharded(self, axis: int | None) -> MultiLazyBuffer:
        """This value split along `axis` (None: replicated) over the same devices, as `from_lazybuffer` splits."""
        if axis is None:
            like = MultiLazyBuffer(self.lbs, None)
        else:
            size = self.shape[axis]
            assert isinstance(size, int), "a symbolic split axis"
            bounds = split_bounds(size, len(self.lbs))
            like = MultiLazyBuffer([_shrink_on(lb, axis, 0, end - start) for lb, (start, end) in zip(self.lbs, bounds)]
                                   if self.axis is None else self.lbs, axis, bounds)  # fmt: skip
        if (like.axis, like.bounds) == (self.axis, self.bounds):
            return self
        return like._new(self.to_layout(like))

    def gather(self, device: str) -> LazyBuffer:
        """The whole value on `device`: the shards copied there and placed by their bounds."""
        if self.axis is None:
            return next((lb for lb in self.lbs if lb.device == device), self.lbs[0]).copy_to_device(device)
        size = self.shape[self.axis]
        assert isinstance(size, int)
        pieces = [lb.copy_to_device(device) for lb in self.lbs]
        return _concat(pieces, self.axis, self.bounds, size)

    def copy_to_device(self, device: str) -> LazyBuffer:
        return self.gather(device)

    def const(self, val: Any, shape: tuple[sint, ...] | None = None) -> MultiLazyBuffer:
        if shape is None or shape == self.shape:
            return self._new([lb.const(val) for lb in self.lbs])
        return MultiLazyBuffer([LazyBuffer.const_like(val, self.dtype, d, shape) for d in self.device], None)

    def is_unrealized_const(self) -> bool:
        return all(lb.is_unrealized_const() for lb in self.lbs)

    def is_unrealized_unmasked_const(self) -> bool:
        values = {repr(lb.const_value()) for lb in self.lbs}
        return all(lb.is_unrealized_unmasked_const() for lb in self.lbs) and len(values) == 1

    def const_value(self) -> Any:
        return self.lbs[0].const_value()

    def is_realized(self) -> bool:
        return all(lb.is_realized() for lb in self.lbs)

    # -- compute -------------------------------------------------------------------------------------------------------

    def e(self, op: Ops, *in_srcs: MultiLazyBuffer, arg: Any = None) -> MultiLazyBuffer:
        srcs = (self, *in_srcs)
        like = next((s for s in srcs if s.axis is not None), self)  # a sharded operand's layout wins: slicing is free
        shards = [s.shards_like(like) for s in srcs]
        return like._new([first.e(op, *rest, arg=arg) for first, *rest in zip(*shards)])

    def r(self, op: Ops, axis: tuple[int, ...], shape: tuple[sint, ...] | None = None) -> MultiLazyBuffer:
        partials = [lb.r(op, axis) for lb in self.lbs]
        if self.axis is None or self.axis not in axis:
            out = self._new(partials)
        else:
            out = MultiLazyBuffer(ring_allreduce(op, partials), None)  # a reduction over the split axis: replicated
        return out if shape is None else out.reshape(shape)

    def cast(self, dtype: DType, bitcast: bool = False) -> MultiLazyBuffer:
        return self._new([lb.cast(dtype, bitcast) for lb in self.lbs])

    def contiguous(self) -> MultiLazyBuffer:
        return self._new([lb.contiguous() for lb in self.lbs])

    def clone(self) -> MultiLazyBuffer:
        return self._new([lb.clone() for lb in self.lbs])

    def assign(self, value: MultiLazyBuffer) -> MultiLazyBuffer:
        """Write `value` (resharded to this layout, by copies if it must) into each shard's memory."""
        out = []
        for target, new in zip(self.lbs, value.to_layout(self)):
            base = target.base
            if base.realized is None or not base.st.contiguous or base.op is Ops.CONST:
                out.append(new)  # no memory of its own yet: the shard simply becomes the value
            elif target is base:
                out.append(base.assign(new))
            else:
                raise ArgumentError("assign: cannot write through a view of a sharded tensor; assign to the whole "
                                    "tensor")  # fmt: skip
        return self._new(out)

    # -- movement ------------------------------------------------------------------------------------------------------

    def _local(self, shape: tuple[sint, ...], i: int) -> tuple[sint, ...]:
        """`shape` (a full shape with this sharded axis) as device i's shard sees it."""
        assert self.axis is not None
        start, end = self.bounds[i]
        return _with(shape, self.axis, end - start)

    def reshape(self, shape: tuple[sint, ...]) -> MultiLazyBuffer:
        if self.axis is None:
            return self._new([lb.reshape(shape) for lb in self.lbs])
        if 0 in self.shape and shape != self.shape:  # no elements: no layout to keep (and positions in units of a
            return self.resharded(None).reshape(shape)  # 0-size inner part mean nothing)
        if self.shape[self.axis] == 1 and shape != self.shape:
            # a split axis sliced (or indexed) down to one element: replicated, then reshaped (no axis need hold the
            # split: `x[4]` of a split vector drops it, and with other size-1 axes where it went was a guess)
            return self._replicated().reshape(shape)
        axis, bounds = self._reshaped_axis(shape)
        lbs = [lb.reshape(_with(shape, axis, end - start)) for lb, (start, end) in zip(self.lbs, bounds)]
        return MultiLazyBuffer(lbs, axis, bounds)

    def _reshaped_axis(self, shape: tuple[sint, ...]) -> tuple[int, Bounds]:
        """Where the split axis goes in `shape`: the new axis k with as many elements before it as before the old one,
        whose positions (in units of the elements after k) hold each shard's range whole. Splitting the axis (the shard
        is on the outer part) and merging it with the axes after it both qualify; anything else is refused."""
        assert self.axis is not None
        old = self.shape
        if not all_int(old) or not all_int(shape):
            raise ShapeError(f"reshape of a sharded tensor needs concrete shapes, got {old} -> {shape}")
        outer, inner = prod(old[: self.axis]), prod(old[self.axis + 1 :])
        for k in range(len(shape)):
            if prod(shape[:k]) != outer or shape[k] == 1 and old[self.axis] != 1:
                continue
            new_inner = prod(shape[k + 1 :])
            edges = [edge * inner for bound in self.bounds for edge in bound]
            if all(edge % new_inner == 0 for edge in edges) and prod(shape[k:]) == prod(old[self.axis :]):
                scaled = [edge // new_inner for edge in edges]
                return k, tuple(zip(scaled[0::2], scaled[1::2]))
        raise ShapeError(f"reshape {old} -> {shape} would cut across the shards of axis {self.axis} "
                         f"({list(self.bounds)}); reshard on another axis first (.shard(devices, axis))")  # fmt: skip

    def permute(self, order: tuple[int, ...]) -> MultiLazyBuffer:
        axis = None if self.axis is None else order.index(self.axis)
        return self._new([lb.permute(order) for lb in self.lbs], axis)

    def expand(self, shape: tuple[sint, ...]) -> MultiLazyBuffer:
        if self.axis is None:
            return self._new([lb.expand(shape) for lb in self.lbs])
        if shape[self.axis] != self.shape[self.axis]:
            # the split axis, sliced to one element, expanded: every device gets that element and the value is
            # replicated (each shard expanding its own part kept the shape of one element: (1, 4), not (4, 4))
            return self._replicated().expand(shape)
        return self._new([lb.expand(self._local(shape, i)) for i, lb in enumerate(self.lbs)])

    def _replicated(self) -> MultiLazyBuffer:
        """This value (split on an axis of one element) whole on every device: that element, copied where needed."""
        assert self.axis is not None and self.shape[self.axis] == 1
        return MultiLazyBuffer([self._range_on(d, self.axis, (0, 1)) for d in self.device], None)

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> MultiLazyBuffer:
        if self.axis is None or arg[self.axis] == (0, self.shape[self.axis]):
            return self._new([lb.shrink(self._local_arg(arg, i)) for i, lb in enumerate(self.lbs)])
        # a slice of the split axis: each device keeps the part of its shard inside it (no copy; may be empty)
        low, high = arg[self.axis]
        assert isinstance(low, int) and isinstance(high, int), "a symbolic slice of the split axis"
        lbs, bounds = [], []
        for i, (lb, (start, end)) in enumerate(zip(self.lbs, self.bounds)):
            keep_start, keep_end = min(max(low, start), end), min(max(high, start), end)  # (inside the shard)
            local = self._local_arg(arg, i)
            local = _with(local, self.axis, (keep_start - start, keep_end - start))
            lbs.append(lb.shrink(local))
            bounds.append((min(max(keep_start, low), high) - low, min(max(keep_end, low), high) - low))
        return self._new(lbs, self.axis, tuple(bounds))

    def _local_arg(self, arg: tuple[tuple[sint, sint], ...], i: int) -> tuple[tuple[sint, sint], ...]:
        if self.axis is None:
            return arg
        return _with(arg, self.axis, (0, self.lbs[i].shape[self.axis]))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> MultiLazyBuffer:
        if self.axis is None or arg[self.axis] == (0, 0):
            return self._new([lb.pad(self._zero_on_axis(arg)) for lb in self.lbs])
        # padding the split axis: the shard at its start takes the front padding, the shard at its end the back
        before, after = arg[self.axis]
        assert isinstance(before, int) and isinstance(after, int), "symbolic padding of the split axis"
        size = self.shape[self.axis]
        first = min(range(len(self.lbs)), key=lambda i: (self.bounds[i][0], -self.bounds[i][1]))
        last = max(range(len(self.lbs)), key=lambda i: (self.bounds[i][1], self.bounds[i][0]))
        lbs, bounds = [], []
        for i, (lb, (start, end)) in enumerate(zip(self.lbs, self.bounds)):
            front, back = (before if i == first else 0), (after if i == last else 0)
            local = _with(self._zero_on_axis(arg), self.axis, (front, back))
            lbs.append(lb.pad(local))
            bounds.append((start + before - front, end + before + back))
        assert max(e for _, e in bounds) == size + before + after
        return self._new(lbs, self.axis, tuple(bounds))

    def _zero_on_axis(self, arg: tuple[tuple[sint, sint], ...]) -> tuple[tuple[sint, sint], ...]:
        return arg if self.axis is None else _with(arg, self.axis, (0, 0))

    def stride(self, arg: tuple[int, ...]) -> MultiLazyBuffer:
        if self.axis is None or arg[self.axis] == 1:
            return self._new([lb.stride(arg) for lb in self.lbs])
        if arg[self.axis] != -1:
            raise ShapeError(
                f"a stride of {arg[self.axis]} on the split axis {self.axis} is not supported; only a flip"
            )
        size = self.shape[self.axis]
        assert isinstance(size, int)
        bounds = tuple((size - end, size - start) for start, end in self.bounds)  # a flip mirrors where shards are
        return self._new([lb.stride(arg) for lb in self.lbs], self.axis, bounds)

"""`Tensor` indexing: `__getitem__` and `__setitem__` with ints, slices (any step), `None`, `...`, lists, numpy arrays
and integer or boolean tensors, plus the index-driven ops that share its one mechanism, selection by a one-hot mask
(`gather`, `scatter`, `scatter_reduce`, `masked_select`). A mixin of `Tensor`.

Plain indices (ints, slices, None) are movement ops: no kernel of their own. Index tensors become one-hot masks
(`index == arange(size)`) that select with `where` and a sum over the indexed axes, so everything decomposes into
the primitive ops and has gradients. Boolean masks have a data-dependent shape, so they are read on the host
(`nonzero`) and turned into integer indices, as in PyTorch. An index tensor's values are not read: one outside its
axis selects nothing (zeros), unless `LAZY_CHECK_INDEX=1` reads it on the host and raises (`_check_index`).
A slice may have bound-variable bounds (`a[:, :vi]`, `a[vi : vi + 2]`): step 1, a shrink of symbolic size checked
against the variables' bound values."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Generic

from lazy import function as F
from lazy.dtype import ConstType, dtypes, is_numpy
from lazy.engine.runners import copy_now
from lazy.helpers import CHECK_INDEX, ArgumentError, ShapeError, all_int, broadcast_shape, prod
from lazy.lazy import LazyBuffer, gatherable
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.record import field, record
from lazy.symbolic import Node, bound_value, concrete, sint, to_sint
from lazy.tensor_base import PyInt, TensorBase, TensorT

if TYPE_CHECKING:
    from typing_extensions import Self


def _copy_only(device: str) -> bool:
    """Whether `device` declares it runs no kernels (it only stores and copies, like DISK)."""
    return Device[device].kernel_refusal is not None


def _is_int(x: Any) -> bool:
    if isinstance(x, (int, Node)):
        return not isinstance(x, bool)
    return is_numpy(x, "integer")


def _is_mask(x: Any) -> bool:
    return is_numpy(x, "ndarray") and x.dtype.kind == "b"


def _symbolic_slice(idx: slice, size: sint, axis: int, shape: tuple[sint, ...]) -> tuple[sint, sint]:
    """(start, count) of a step-1 slice whose bounds or axis are symbolic. Negative int bounds count from the end;
    the bounds must hold for the variables' bound values (like a shrink), since a symbolic slice is not clipped."""
    if idx.step not in (None, 1):
        raise IndexError(f"a slice with symbolic bounds or axis must have step 1, got {idx} on axis {axis} (shape "
                         f"{shape}); slice with step 1, then stride the result")  # fmt: skip
    start: sint = 0 if idx.start is None else idx.start
    stop: sint = size if idx.stop is None else idx.stop
    start, stop = (x + size if isinstance(x, int) and x < 0 else x for x in (start, stop))
    lo, hi, whole = bound_value(start), bound_value(stop), bound_value(size)
    if None not in (lo, hi, whole) and not 0 <= lo <= hi <= whole:  # type: ignore[operator]
        raise IndexError(f"slice {start}:{stop} is out of range for axis {axis} of size {size} (shape {shape}) with "
                         f"the bound values ({lo}:{hi} of {whole}); need 0 <= start <= stop <= size")  # fmt: skip
    return to_sint(start), to_sint(stop - start)


@record()
class _Plan(Generic[TensorT]):
    """What an index does: per axis of the source a plain step, then one-hot selection by index tensors."""

    # per source axis: ("int", i) | ("slice", start, count, step) | ("all",) for axes an index tensor selects on
    axes: list[tuple[Any, ...]] = field(default_factory=list)
    shape: list[sint] = field(default_factory=list)  # after the plain steps (None adds 1, ints drop their axis)
    tensors: list[tuple[int, TensorT]] = field(default_factory=list)  # (axis in `shape`, integer index tensor)


def _can_gather(x: TensorBase, index: TensorBase) -> bool:
    """Whether `Ops.GATHER` can take x and index: one device that runs kernels (not a sharded tensor, not DISK),
    concrete sizes, and elements on both sides (an empty source or result needs no load)."""
    return (
        isinstance(x.lazydata, LazyBuffer)
        and isinstance(index.lazydata, LazyBuffer)
        and x.device == index.device
        and not _copy_only(x.device)
        and all_int(x.shape)
        and all_int(index.shape)
        and 0 not in x.shape
        and 0 not in index.shape
    )


class _Gather(F.Function):
    """x[..., index, ...] along `axis` as one `Ops.GATHER` node (a load at the index's element); its gradient adds
    each output's gradient into the element it read (`_gather_grad`)."""

    def forward(self, x: LazyBuffer, index: LazyBuffer, axis: int = 0, permutation: bool = False) -> LazyBuffer:
        self.axis, self.permutation = axis, permutation
        return x.gather(index, axis)

    def backward(self, grad_output: Any, ret: Any, x: Any, index: Any) -> tuple[Any, None]:
        traced = isinstance(grad_output, F.TracedBuffer)
        g, idx = (b.tensor if traced else F._constant(b) for b in (grad_output, index))
        n = int(x.shape[self.axis])
        if self.permutation and (inverse := _inverse_permutation(idx, n)) is not None:
            grad = g._gather(self.axis, inverse)  # (element k came from position inverse[k])
        else:
            grad = _gather_grad(g, idx, self.axis, n)
        return (F.TracedBuffer(grad) if traced else grad.lazydata), None


def _gather_grad(g: TensorT, idx: TensorT, axis: int, n: int) -> TensorT:
    """The gradient of a gather of n rows along `axis`: each of g's elements added into the row its index names
    (none for an index outside [0, n)). In general a one-hot sum over the index's positions, O(n x g's size). An
    index that is the same along every other axis (an `Embedding`, `x[idx]`, `index_select`: T row numbers for
    rows of M elements) takes the rows instead (`_row_grad`): O(T^2 M + n T + n M), where the one-hot sum is
    O(n T M) (GPT-2's token embedding, 50257 x 768, 512 tokens: 5.3 s -> ms)."""
    if (ids := _axis_ids(idx, axis)) is not None and (rows := _row_grad(g, ids, axis, n)) is not None:
        return rows
    hit = idx.unsqueeze(-1) == type(g).arange(n, device=g.device)  # (*index.shape, n)
    return hit.where(g.unsqueeze(-1), 0).sum(axis, keepdim=True).transpose(axis, -1).squeeze(-1)


def _inverse_permutation(idx: TensorT, n: int) -> TensorT | None:
    """The inverse of permutations of the last axis (n long), by the sorting network: sorting the positions by the
    values they hold (O(n log^2 n), where the one-hot gradient was O(n^2)); None below the network's length or where
    the device cannot run it."""
    from lazy.tensor_nn import SORT_NETWORK_MIN, _sorting_network

    if n < SORT_NETWORK_MIN or (keys := idx._sort_keys(False)) is None:
        return None
    return _sorting_network(keys, n)


def _is_ramp(t: TensorBase) -> bool:
    """Whether `t` is `arange(n)` (0, 1, ..., n-1 in an integer dtype), seen from its node (`Ops.RAMP`, maybe
    cast to another integer dtype), without reading it."""
    lb = t.lazydata
    if not isinstance(lb, LazyBuffer) or lb.base is not lb or not dtypes.is_int(lb.dtype):
        return False
    n = prod(t.shape)
    while lb.op is Ops.CAST and lb.srcs and dtypes.is_int(lb.srcs[0].dtype) and lb.srcs[0].base is lb.srcs[0]:
        if isinstance(n, int) and n - 1 > dtypes.max(lb.dtype):  # a cast that wraps the ramp's values
            return False
        lb = lb.srcs[0]
    return lb.op is Ops.RAMP and lb.shape == t.shape


def _axis_ids(idx: TensorT, axis: int) -> TensorT | None:
    """The index's values along `axis` (1-d), when it reads the same value along every other axis (one view of
    stride 0 there: an index broadcast over the rows, as `x[idx]` and `Embedding` make); else None."""
    lb = idx.lazydata
    if not isinstance(lb, LazyBuffer) or not all_int(idx.shape):
        return None
    st = lb.st.simplify()
    view = st.views[-1]
    if len(st.views) != 1 or view.mask is not None or any(s != 0 for d, s in enumerate(view.strides) if d != axis):
        return None
    return idx.shrink(tuple(None if d == axis else (0, 1) for d in range(idx.ndim))).reshape(int(idx.shape[axis]))


# chunks of tokens `_row_grad` may take (each is a few kernels of its own); the most it weighs against the one-hot sum
ROW_GRAD_CHUNKS = 64


def _row_grad(g: TensorT, ids: TensorT, axis: int, n: int) -> TensorT | None:
    """The gather gradient for T row numbers `ids` (g: T rows of M elements along `axis`), in chunks of B tokens:
    tokens that name the same row have their gradients summed first ((B, B) equality matrix @ (B, M) rows: one
    matmul), then each of the n rows takes the sum of a token that names it, or 0 (a gather at the token's position,
    -1 for none). Cost T*B*M + n*T + (T/B)*n*M, for the B that minimizes it; None where the one-hot sum, n*T*M,
    costs less."""
    tokens = int(g.shape[axis])
    width = int(g.numel()) // tokens if tokens else 0
    if tokens == 0 or width == 0 or n == 0:
        return None

    def cost(b: int) -> int:
        return tokens * b * width + n * tokens + -(-tokens // b) * n * width * 2

    sizes = [tokens]
    while sizes[-1] > 16 and -(-tokens // (sizes[-1] // 2)) <= ROW_GRAD_CHUNKS:
        sizes.append(sizes[-1] // 2)
    block = min(sizes, key=cost)
    if cost(block) >= n * tokens * width:
        return None
    order = (axis, *[d for d in range(g.ndim) if d != axis])
    rows = g.permute(order).reshape(tokens, width)
    tensor = type(g)
    every = tensor.arange(n, device=g.device).reshape(n, 1)
    out: TensorT | None = None
    for lo in range(0, tokens, block):
        b = min(block, tokens - lo)
        chunk = ids.shrink(((lo, lo + b),))
        same = (chunk.reshape(b, 1) == chunk.reshape(1, b)).cast(g.dtype)
        summed = same @ rows.shrink(((lo, lo + b), None))  # (b, M): each token's row total
        pos = (chunk.reshape(1, b) == every).where(tensor.arange(b, device=g.device).reshape(1, b), -1).max(1)
        part = summed._gather(0, pos.reshape(n, 1).expand(n, width))  # (n, M), 0 where no token names the row
        out = part if out is None else out + part
    assert out is not None
    inverse = tuple(order.index(d) for d in range(g.ndim))
    return out.reshape(n, *[g.shape[d] for d in order[1:]]).permute(inverse)


class IndexingMixin(TensorBase):
    """`__getitem__`, `__setitem__`, gather, scatter, scatter_reduce, masked_select of `Tensor`."""

    __slots__ = ()

    # -- checking index tensors ----------------------------------------------------------------------------------------

    def _check_index(self, op: str, low: int, high: sint, target: str, ignore: int | None = None) -> None:
        """With LAZY_CHECK_INDEX=1, raise an IndexError naming `op`, the first value of this index tensor outside
        [low, high) (other than `ignore`) and its position. Off by default: it reads the index on the host (a sync),
        and without it an out-of-range index selects nothing (zeros), as the one-hot selection does. Inside `jit` it
        runs while the function is captured; replays run only the captured kernels, unchecked."""
        if not CHECK_INDEX or not isinstance(high, int) or not all_int(self.shape) or self.numel() == 0:
            return
        values = self.numpy()
        bad = (values < low) | (values >= high)
        if ignore is not None:
            bad &= values != ignore
        if not bad.any():
            return
        import numpy as np

        position = tuple(int(p) for p in np.argwhere(bad)[0])
        raise IndexError(
            f"{op}: index {values[position]} at position {position} of the index tensor is out of range for "
            f"{target} (valid: {low} to {high - 1}{'' if ignore is None else f', or {ignore} to ignore'})"
        )

    # -- the plan ------------------------------------------------------------------------------------------------------

    def _index_plan(self, indices: Any, op: str = "index") -> _Plan[Self]:
        if not isinstance(indices, tuple) and not (
            isinstance(indices, list) and indices and not all(_is_int(i) or isinstance(i, bool) for i in indices)
        ):
            indices = (indices,)
        items: list[Any] = []
        for idx in indices:
            if idx is None or idx is Ellipsis or isinstance(idx, slice) or _is_int(idx):
                items.append(idx)
            elif isinstance(idx, type(self)):
                if idx.dtype == dtypes.bool:
                    import numpy as np

                    items.append(np.asarray(idx.numpy(), dtype=np.bool_))
                elif dtypes.is_int(idx.dtype):
                    items.append(idx)
                else:
                    raise IndexError(f"index tensors must have an integer or bool dtype, not {idx.dtype}")
            elif isinstance(idx, (list, tuple, bool)) or is_numpy(idx, "ndarray", "bool_"):
                import numpy as np

                arr = np.asarray(idx)
                if arr.size == 0 and arr.dtype != np.bool_:
                    arr = arr.astype(np.int64)
                if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer):
                    raise IndexError(f"list and array indices must hold ints or bools, not {arr.dtype}: {idx!r}")
                items.append(arr)
            else:
                raise IndexError(
                    f"cannot index a tensor with {type(idx).__name__} {idx!r}: use ints, slices, None, ..., "
                    "lists, or integer/boolean tensors"
                )
        if sum(1 for i in items if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")

        def width(i: Any) -> int:  # how many source axes an index consumes
            if i is None or i is Ellipsis:
                return 0
            return i.ndim if _is_mask(i) else 1

        consumed = sum(width(i) for i in items)
        if consumed > self.ndim:
            raise IndexError(f"too many indices for a tensor of shape {self.shape}: {consumed} axes indexed")
        fill = [slice(None)] * (self.ndim - consumed)
        if Ellipsis in [i for i in items if not (is_numpy(i, "ndarray") or isinstance(i, TensorBase))]:
            pos = next(k for k, i in enumerate(items) if i is Ellipsis)
            items[pos : pos + 1] = fill
        else:
            items += fill

        plan: _Plan[Self] = _Plan()
        axis = 0
        for idx in items:
            if idx is None:
                plan.shape.append(1)
                continue
            if _is_mask(idx):  # a mask: the positions where it is True
                if idx.ndim == 0:
                    if not idx:
                        raise IndexError("indexing with a scalar False (an empty result) is not supported")
                    plan.shape.append(1)  # x[True] adds an axis of 1, like None
                    continue
                covered = self.shape[axis : axis + idx.ndim]
                if tuple(idx.shape) != tuple(covered):
                    raise IndexError(
                        f"boolean index of shape {idx.shape} does not match the indexed axes {tuple(covered)} "
                        f"of a tensor of shape {self.shape} (starting at axis {axis})"
                    )
                import numpy as np

                for p in np.nonzero(idx):
                    plan.tensors.append((len(plan.shape), type(self)(p.astype(np.int32), device=self.device)))
                    plan.axes.append(("all",))
                    plan.shape.append(self.shape[axis])
                    axis += 1
                continue
            size = self.shape[axis]
            if _is_int(idx):
                i = idx if isinstance(idx, Node) else int(idx)
                if isinstance(size, int) and isinstance(i, int) and not -size <= i < size:
                    raise IndexError(
                        f"index {i} is out of bounds for axis {axis} with size {size} (shape {self.shape})"
                    )
                plan.axes.append(("int", i + size if isinstance(i, int) and i < 0 else i))
            elif isinstance(idx, slice):
                if idx.step == 0:
                    raise ValueError(f"slice step cannot be zero: {idx}")
                if any(isinstance(x, Node) for x in (size, idx.start, idx.stop)):
                    start, count = _symbolic_slice(idx, size, axis, self.shape)
                    plan.axes.append(("slice", start, count, 1))
                    plan.shape.append(count)
                    axis += 1
                    continue
                start, stop, step = idx.indices(size)
                count = len(range(start, stop, step))
                plan.axes.append(("slice", start, count, step))
                plan.shape.append(count)
            else:  # an integer index: a tensor, or a host array checked here
                if is_numpy(idx, "ndarray"):
                    if isinstance(size, int) and idx.size and not (-size <= idx.min() and idx.max() < size):
                        bad = idx[(idx < -size) | (idx >= size)].flat[0]
                        raise IndexError(
                            f"index {bad} is out of bounds for axis {axis} with size {size} (shape {self.shape})"
                        )
                    import numpy as np

                    t = type(self)(np.where(idx < 0, idx + size, idx).astype(np.int32), device=self.device)
                else:
                    idx._check_index(op, -size if isinstance(size, int) else 0, size,
                                     f"axis {axis} with size {size} (shape {self.shape})")  # fmt: skip
                    t = idx.to(self.device)
                    if dtypes.is_int(t.dtype) and t.dtype.itemsize < 4:  # idx + size in int8 wraps (-1 + 200)
                        t = t.cast(dtypes.int32)
                    if not _is_ramp(t):  # (an arange has no negative values: it stays recognizable, `_gather_diagonal`)
                        t = (t < 0).where(t + size, t)
                plan.tensors.append((len(plan.shape), t))
                plan.axes.append(("all",))
                plan.shape.append(size)
            axis += 1
        return plan

    # -- the plain part: movement ops and their inverse ----------------------------------------------------------------

    def _index_plain(self, plan: _Plan[Self]) -> Self:
        x = self
        for axis, step in enumerate(plan.axes):
            if step[0] == "int":
                x = x.shrink(tuple((step[1], step[1] + 1) if a == axis else None for a in range(x.ndim)))
            elif step[0] == "slice":
                _, start, count, stride = step
                if stride == 1:  # also the only step a symbolic start or count can have
                    x = x.shrink(tuple((start, start + count) if a == axis else None for a in range(x.ndim)))
                    continue
                low = start if stride > 0 else start + (count - 1) * stride if count else 0
                high = low + (count - 1) * abs(stride) + 1 if count else low
                # a span of whole steps where the axis has room (the far end after the last element taken, or before
                # it stepping backwards): `_stride` then pads nothing, and the view stays one strided view, which
                # assign and __setitem__ can write through
                size, whole = self.shape[axis], count * abs(stride)
                if count and stride > 0 and isinstance(size, int) and low + whole <= size:
                    high = low + whole
                elif count and stride < 0 and high - whole >= 0:
                    low = high - whole
                x = x.shrink(tuple((low, high) if a == axis else None for a in range(x.ndim)))
                if stride < 0:
                    x = x.flip(axis)
                x = x._stride(axis, abs(stride))
        return x.reshape(tuple(plan.shape))

    def _index_embed(self, plan: _Plan[Self], value: Self) -> tuple[Self, Self]:
        """The inverse of `_index_plain`: `value` (shaped like its result) placed into this tensor's shape, and the
        bool mask of the places it covers (zero and False elsewhere)."""
        # value is shaped like plan.shape: drop the None axes, put back the int ones as 1
        src_shape = tuple(1 if step[0] == "int" else step[2] if step[0] == "slice" else self.shape[a]
                          for a, step in enumerate(plan.axes))  # fmt: skip
        value = value.reshape(src_shape)
        parts = [value, type(self).ones(src_shape, dtype=dtypes.bool, device=self.device)]
        for axis, step in enumerate(plan.axes):
            size = self.shape[axis]
            if step[0] == "all":
                continue
            if step[0] == "int":
                low, span = step[1], 1
            else:
                _, start, count, stride = step
                if count == 0:
                    continue  # nothing of value lands on this axis; the pads below still give the right shape
                low = start if stride > 0 else start + (count - 1) * stride
                span = (count - 1) * abs(stride) + 1
            for k, p in enumerate(parts):
                if step[0] == "slice" and step[3] < 0:
                    p = p.flip(axis)
                if step[0] == "slice" and abs(step[3]) > 1:
                    s, c = abs(step[3]), step[2]
                    shp = p.shape
                    p = p.reshape(shp[: axis + 1] + (1,) + shp[axis + 1 :])
                    p = p.pad(tuple((0, s - 1) if a == axis + 1 else (0, 0) for a in range(p.ndim)))
                    p = p.reshape(shp[:axis] + (c * s,) + shp[axis + 1 :])
                    p = p.shrink(tuple((0, span) if a == axis else None for a in range(p.ndim)))
                parts[k] = p.pad(tuple((low, size - low - span) if a == axis else (0, 0) for a in range(p.ndim)))
        if any(p.shape != self.shape for p in parts):  # an empty slice: nothing is covered
            return self.zeros_like(), type(self).zeros(self.shape, dtype=dtypes.bool, device=self.device)
        return parts[0], parts[1]

    # -- the fancy part: one-hot selection -----------------------------------------------------------------------------

    def _gather_along(self, axis: int, index: Self) -> Self | None:
        """self[..., index, ...] with one index tensor on `axis` (its values in [0, n) or picking 0 outside), as a
        gather: None when that does not apply, or does not pay (a short axis of a value not in memory: the one-hot
        sum computes it in the same kernel, where a gather would first copy it)."""
        if not _can_gather(self, index) or not dtypes.is_int(index.dtype):
            return None
        shape = self.shape
        n, before, after = shape[axis], prod(shape[:axis]), prod(shape[axis + 1 :])
        x = self.reshape(before, n, after)
        if not gatherable(x.lazydata) and n < 32:
            return None
        rows = index.reshape(1, -1, 1).expand(before, index.numel(), after)
        return x._gather(1, rows).reshape(shape[:axis] + index.shape + shape[axis + 1 :])

    def _gather_adjacent(self, tensors: list[tuple[int, Self]]) -> Self | None:
        """self[..., i, j, ...] with index tensors on adjacent axes (`logp[arange(n), y]`) as one gather along those
        axes merged: the flat index is i * size_j + j, and -1 (nothing picked, 0) where any index is out of range,
        as the one-hot selection gives. None where that does not apply (axes apart, symbolic sizes, broadcast
        failure: the one-hot path names it)."""
        dims = [d for d, _ in tensors]
        sizes = [self.shape[d] for d in dims]
        if dims != list(range(dims[0], dims[0] + len(dims))) or not all_int(sizes) or not all_int(self.shape):
            return None
        if not all(dtypes.is_int(t.dtype) and t.device == self.device for _, t in tensors):
            return None
        try:
            big = broadcast_shape("index", *(t.shape for _, t in tensors))
        except ValueError:
            return None
        if (diagonal := self._gather_diagonal(tensors, big)) is not None:
            return diagonal
        total = prod(sizes)
        wide = dtypes.int64 if total >= 2**31 else dtypes.int32
        flat: Self | None = None
        inside: Self | None = None
        ints = [int(size) for size in sizes]  # (concrete: checked above)
        for (_, t), size, stride in zip(tensors, ints, [prod(ints[k + 1 :]) for k in range(len(ints))]):
            t = t.cast(wide)
            ok = (t >= 0) & (t < size)
            flat, inside = (t * stride, ok) if flat is None else (flat + t * stride, inside & ok)  # type: ignore[operator]
        assert flat is not None and inside is not None
        flat = inside.where(flat, -1)._broadcast_to(big)
        d0 = dims[0]
        merged = self.reshape(self.shape[:d0] + (total,) + self.shape[d0 + len(dims) :])
        return merged._gather_along(d0, flat)

    def _gather_diagonal(self, tensors: list[tuple[int, Self]], big: tuple[sint, ...]) -> Self | None:
        """x[arange(n), j] (or x[j, arange(n)]) on two adjacent axes, the arange running over its whole axis: each
        position t picks x[t, j_t], a gather along j's axis with j at the arange's place. Its gradient is then a
        one-hot over j's axis only, O(n x size): the flat gather of the merged axes had one over both, O(n^2 x size)
        (`-logp[arange(n), y]` for 2048 x 1000 logits took 1.1 s to differentiate). None for any other pair."""
        if len(tensors) != 2 or len(big) != 1:
            return None
        for k in (0, 1):
            (ramp_axis, ramp), (axis, other) = tensors[k], tensors[1 - k]
            n = self.shape[ramp_axis]
            if ramp.shape != (n,) or big != (n,) or not _is_ramp(ramp):
                continue
            # the index in x's shape with 1 on the gathered axis: j_t along the arange's axis
            first = min(axis, ramp_axis)
            pair = (n, 1) if ramp_axis < axis else (1, n)
            index = other._broadcast_to(big).reshape((1,) * first + pair + (1,) * (self.ndim - first - 2))
            full = tuple(1 if d == axis else size for d, size in enumerate(self.shape))
            return self._gather(axis, index.expand(full)).squeeze(axis)
        return None

    def _index_masks(self, plan: _Plan[Self]) -> tuple[Self, tuple[sint, ...], list[int]]:
        """(mask, broadcast index shape, indexed axes): mask has shape x[:d0] + big + x[d0:] with True where the
        index tensors pick the element."""
        dims = [d for d, _ in plan.tensors]
        try:
            big = broadcast_shape("index", *(t.shape for _, t in plan.tensors))
        except ValueError:
            shapes = ", ".join(str(t.shape) for _, t in plan.tensors)
            raise IndexError(f"index tensors of shapes {shapes} cannot be broadcast together") from None
        d0, nb, nd = dims[0], len(big), len(plan.shape)
        mask: Self | None = None
        for d, t in plan.tensors:
            idx = t.reshape((1,) * d0 + (1,) * (nb - t.ndim) + t.shape + (1,) * (nd - d0))
            size = plan.shape[d]
            ramp = type(self).arange(concrete(size, "tensor indexing"), device=self.device)
            ramp = ramp.reshape(tuple(size if a == d + nb else 1 for a in range(nd + nb)))
            hit = idx == ramp
            mask = hit if mask is None else mask & hit
        assert mask is not None
        return mask, big, dims

    @staticmethod
    def _fancy_perm(d0: int, nb: int, dims: list[int], ndim: int) -> list[int] | None:
        """Index tensors on axes that are not next to each other put their broadcast axes first (as PyTorch does):
        the permutation from the mask layout to the result, or None when the layout is already the result."""
        if len(dims) == 1 or d0 == 0 or dims == list(range(d0, dims[-1] + 1)):
            return None
        return [*range(d0, d0 + nb), *range(0, d0), *range(d0 + nb, ndim)]

    def __getitem__(self, indices: Any) -> Self:
        return self._getitem(indices, "index")

    def _getitem(self, indices: Any, op: str) -> Self:
        plan = self._index_plan(indices, op)
        x = self._index_plain(plan)
        if not plan.tensors:
            if x is not self and isinstance(x.lazydata, LazyBuffer):
                x._viewed = (weakref.ref(self), indices)
                views = getattr(self, "_views", None)
                if views is None:
                    self._views = views = []
                elif len(views) >= 8 and len(views) & (len(views) - 1) == 0:  # (the dead dropped now and then)
                    views[:] = [ref for ref in views if ref() is not None]
                views.append(weakref.ref(x))
            return x
        if len(plan.tensors) == 1 and (picked := x._gather_along(*plan.tensors[0])) is not None:
            return picked
        if len(plan.tensors) > 1 and (picked := x._gather_adjacent(plan.tensors)) is not None:
            return picked
        mask, big, dims = self._index_masks(plan)
        d0, nb = dims[0], len(big)
        src = x.reshape(x.shape[:d0] + (1,) * nb + x.shape[d0:])
        work = src.cast(dtypes.int32) if src.dtype == dtypes.bool else src
        picked = mask.where(work, 0).sum(tuple(d + nb for d in dims), dtype=work.dtype)
        picked = picked.cast(x.dtype) if work is not src else picked
        perm = self._fancy_perm(d0, nb, dims, picked.ndim)
        return picked if perm is None else picked.permute(perm)

    def __setitem__(self, indices: Any, value: Self | ConstType) -> None:
        if isinstance(self.device, tuple):
            raise ArgumentError(f"__setitem__ of a tensor sharded over {self.device} is not supported; build the new "
                                "value with where() and a mask, or set it on one device (.to(device)) and shard the "
                                "result again")  # fmt: skip
        if _copy_only(self.device):
            return self._setitem_by_copy(indices, value)
        v = value if isinstance(value, type(self)) else type(self)(value, device=self.device, dtype=self.dtype)
        v = v.to(self.device).cast(self.dtype)
        if self.requires_grad and self._ctx is None:
            raise RuntimeError(
                "a leaf tensor that requires grad cannot be assigned to in place; assign to a copy "
                "(y = x.clone(); y[...] = v) or to x.detach()"
            )
        self._refresh_view()  # (a view of a tensor written since: the write starts from its current value)
        # the value before assignment, as its own node: `self` is about to become the node after it
        this = type(self)(self.lazydata, device=self.device, requires_grad=self.requires_grad)
        this._ctx = self._ctx
        if isinstance(indices, type(self)) and indices.dtype == dtypes.bool and indices.shape == self.shape \
                and v.numel() == 1:  # fmt: skip
            new = indices.where(v.reshape(()), this)  # a full mask with a scalar: no host round trip
        else:
            plan = this._index_plan(indices, "setitem")
            region = this._index_plain(plan)
            if plan.tensors:
                mask, big, dims = this._index_masks(plan)
                d0, nb = dims[0], len(big)
                layout_shape = region.shape[:d0] + big + tuple(s for a, s in enumerate(region.shape)
                                                               if a >= d0 and a not in dims)  # fmt: skip
                perm = this._fancy_perm(d0, nb, dims, len(layout_shape))
                if perm is None:
                    vb = this._broadcast_value(v, layout_shape)
                else:  # the value is shaped like the getitem result: undo its permutation
                    vb = this._broadcast_value(v, tuple(layout_shape[p] for p in perm))
                    vb = vb.permute([perm.index(a) for a in range(len(perm))])
                # back to mask layout: a 1 at each indexed axis
                layout = list(vb.shape)
                for d in dims:
                    layout.insert(d + nb, 1)
                vb = vb.reshape(tuple(layout))
                # repeated indices: the last write wins (as in a sequential loop), found by the largest position
                order = (type(self).arange(prod(big), device=this.device) + 1).reshape(
                    (1,) * d0 + big + (1,) * (mask.ndim - d0 - nb)
                )
                big_axes = tuple(range(d0, d0 + nb))
                last = mask.where(order, 0)._max(big_axes, keepdim=True)  # (0 where nothing lands)
                chosen = mask & (order == last)
                work = vb.cast(dtypes.int32) if vb.dtype == dtypes.bool else vb
                picked = chosen.where(work, 0).sum(big_axes, dtype=work.dtype).cast(this.dtype)
                region = (last.reshape(last.shape[:d0] + last.shape[d0 + nb :]) > 0).where(picked, region)
            else:
                region = this._broadcast_value(v, region.shape)
            placed, covered = this._index_embed(plan, region)
            new = covered.where(placed, this)
        if self.requires_grad or v.requires_grad:  # self becomes the new node, its gradient reaches its inputs
            self.lazydata, self._ctx = new.lazydata, new._ctx
            self.requires_grad_(True)
            return
        # otherwise written into the same buffer when self is realized (what optimizers and `jit` rely on); a
        # recorded history (requires_grad undecided, for `gradient()`) moves on to the assignment's node, whose
        # gradient needs only the mask of what was covered, not the overwritten values
        history = new._ctx if self._ctx is not None or v._ctx is not None else None
        in_memory = self.lazydata.base.realized is not None
        try:
            self.assign(new)
        except ArgumentError as e:  # (assign's message names assign and suggests __setitem__)
            raise ArgumentError(f"__setitem__: this tensor is a view that pads or repeats the elements of its "
                                f"{self.lazydata.base.shape} buffer (an expand or a pad), so it cannot be written "
                                "in place; write into the tensor it was made from, or call .contiguous() on it "
                                "first") from e  # fmt: skip
        self._ctx = history
        if in_memory:  # written now, as a write through a view is (`assign`): other tensors may hold this very node
            # (b.T.T and b.flip(0).flip(0) are b's node again), and they read the memory, not a pending write
            self.realize()

    def _setitem_by_copy(self, indices: Any, value: Self | ConstType) -> None:
        """Setitem on a device that only copies (DISK): the value is computed where it lives and copied into the
        consecutive range of memory the index selects."""
        plan = self._index_plan(indices)
        view = None if plan.tensors else self._index_plain(plan).lazydata.buffer_view()
        if view is None:
            raise IndexError(
                f"setitem on {self.device}, a copy-only device: the index must select one consecutive range of "
                f"memory (ints and plain slices of the leading axes), got {indices!r}; or write a copy on a "
                "compute device and copy it back"
            )
        self._copy_into(view, value)

    def _assign_by_copy(self, value: Self) -> None:
        """assign on a device that only copies (DISK): the value, computed on a compute device, copied into the
        memory this tensor views (which must be one consecutive range). Nothing is made on the copy-only device: a
        new buffer there would be the file's start."""
        view = self.lazydata.buffer_view() if isinstance(self.lazydata, LazyBuffer) else None
        if view is None:
            raise ArgumentError(f"assign on {self.device}, a copy-only device: this tensor is not one consecutive "
                                "range of the device's memory (a transposed or strided view); assign to a plain slice, "
                                "or compute on a compute device and copy the result back")  # fmt: skip
        self._copy_into(view, value)

    def _copy_into(self, view: LazyBuffer, value: Self | ConstType) -> None:
        """Copy `value` (broadcast to `view`'s shape) into `view`, a consecutive range of this copy-only device's
        memory; the value is computed where it lives, or on the default device."""
        src = value if isinstance(value, type(self)) else type(self)(value, device=Device.DEFAULT, dtype=self.dtype)
        if _copy_only(src.device):  # computed on the default device, then copied
            src = src.to(Device.DEFAULT)
        src = self._broadcast_value(src.cast(self.dtype), view.shape).contiguous().realize()
        self.realize()
        dest = type(self)(view, device=self.device).realize().lazydata.base.realized
        data = src.lazydata.base.realized
        assert dest is not None and data is not None
        copy_now(dest, data)  # through the engine, so a jit capturing now records it

    def _broadcast_value(self, v: Self, shape: tuple[sint, ...]) -> Self:
        extra = v.shape[: max(v.ndim - len(shape), 0)]  # leading dimensions beyond the region's: only 1s can go
        try:
            broadcast_shape("setitem", v.shape, shape)
            if any(d != 1 for d in extra):
                raise ValueError
        except ValueError:
            raise ShapeError(f"setitem: a value of shape {v.shape} cannot be assigned to a region of shape {shape}") \
                from None  # fmt: skip
        if v.ndim > len(shape):
            v = v.reshape(v.shape[v.ndim - len(shape) :])
        return v._broadcast_to(shape)

    # -- index-driven ops ----------------------------------------------------------------------------------------------

    def masked_select(self, mask: Self, size: PyInt | None = None, fill_value: ConstType = 0) -> Self:
        """The elements where `mask` (broadcast to this shape) is True, as a 1-d tensor. Without `size` the mask is
        read on the host (the length depends on it); with `size` the result has that length, cut or filled with
        `fill_value`, and nothing leaves the device (so it can run inside `jit`)."""
        mask = self._operand(mask, "masked_select", "the mask")
        if mask.dtype != dtypes.bool:
            raise ArgumentError(f"masked_select: the mask must be a bool tensor, not {mask.dtype}")
        if size is not None and size < 0:
            raise ArgumentError(f"masked_select: size must be >= 0 (the length of the result), got {size}")
        shape = broadcast_shape("masked_select", self.shape, mask.shape)
        x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
        if size is None:
            return x[m]
        # element i lands at slot cumsum(m)[i] - 1 when m[i]: a (size, n) one-hot of slots, summed over n
        slot = m.cast(dtypes.int32).cumsum() - 1
        hit = (slot.unsqueeze(0) == type(self).arange(size, device=self.device).unsqueeze(1)) & m.unsqueeze(0)
        work = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x
        picked = hit.where(work.unsqueeze(0), 0).sum(1, dtype=work.dtype).cast(self.dtype)
        return hit.any(1).where(picked, type(self)(fill_value, device=self.device, dtype=self.dtype))

    def nonzero(self, size: PyInt | None = None, fill_value: ConstType = 0) -> Self:
        """(count, ndim) int32 coordinates of the non-zero elements in row-major order; `size` fixes the count
        (cut or filled with `fill_value`) so that nothing leaves the device."""
        if size is not None and size < 0:
            raise ArgumentError(f"nonzero: size must be >= 0 (the number of rows of the result), got {size}")
        if size is None:
            import numpy as np

            found = np.argwhere(self.numpy()).astype(np.int32)  # (count, ndim): (1, 0) or (0, 0) for a 0-d self
            return type(self)(found, device=self.device)
        if self.ndim == 0:
            return type(self).zeros(size, 0, dtype=dtypes.int32, device=self.device)
        coords = [type(self).arange(concrete(n, "nonzero"), device=self.device).reshape(
            tuple(n if a == i else 1 for a in range(self.ndim))) for i, n in enumerate(self.shape)]  # fmt: skip
        grid = type(self).stack(*[c._broadcast_to(self.shape).flatten() for c in coords], dim=-1)  # (numel, ndim)
        mask = (self != 0).flatten().unsqueeze(-1)._broadcast_to(grid.shape)
        return grid.masked_select(mask, size * self.ndim, fill_value).reshape(size, self.ndim)

    def gather(self, dim: int, index: Self) -> Self:
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along `dim`; other dims of index may be smaller. An
        index outside [0, size) gives 0 (an IndexError with LAZY_CHECK_INDEX=1)."""
        index = self._operand(index, "gather", "the index")
        dim = self._resolve_axis(dim)
        if self.ndim == 0:  # a 0-d tensor is its only element (PyTorch's rule)
            if index.ndim != 0:
                raise ShapeError(f"gather: index has {index.ndim} dimensions, self has 0")
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        n = self.shape[dim]
        if dtypes.is_int(index.dtype):  # (a float index is refused by _gather, before its values are read)
            index._check_index("gather", 0, n, f"dimension {dim} with size {n} (shape {self.shape})")
        return self._gather(dim, index)

    def _gather(self, dim: int, index: Self, permutation: bool = False) -> Self:
        """gather without the index check, for callers that checked (or mean) the indices themselves. `permutation`:
        the index is a permutation of the last axis (sort's), so the gradient is a gather at the inverse one."""
        if index.ndim != self.ndim:
            raise ShapeError(f"gather: index has {index.ndim} dimensions, self has {self.ndim} ({self.shape})")
        if not dtypes.is_int(index.dtype):
            raise ArgumentError(f"gather: index must have an integer dtype, not {index.dtype}")
        dim = self._resolve_axis(dim)
        if any(i > s for d, (s, i) in enumerate(zip(self.shape, index.shape)) if d != dim):
            raise ShapeError(f"gather: index shape {index.shape} is larger than {self.shape} outside dim {dim}")
        n = self.shape[dim]
        x = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        if _can_gather(x, index):  # a load at the index's element: O(result), where the one-hot sum below is
            # O(result x n)
            if not gatherable(x.lazydata):
                x = x.contiguous()
            return _Gather.apply(x, index.to(self.device), axis=dim,  # type: ignore[arg-type, return-value]
                                 permutation=permutation and dim == self.ndim - 1)  # fmt: skip
        # (..., 1 at dim, ..., n): the candidates along dim moved to a new last axis
        x = x.unsqueeze(-1).transpose(-1, dim)
        hit = index.unsqueeze(-1) == type(self).arange(concrete(n, "gather"), device=self.device)  # (*index.shape, n)
        work = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x
        out = hit.where(work, 0).sum(-1, dtype=work.dtype)
        return out.cast(self.dtype) if work is not x else out

    def _scatter_hits(self, op: str, dim: int, index: Self, src: Self | ConstType
                      ) -> tuple[int, Self, Self]:  # fmt: skip
        """(dim, hit, values): hit[..., t at dim, ..., k] is True where source element k (along `dim`) lands on
        target t; values[..., 1 at dim, ..., k] are the source values. Both are padded to this tensor's shape."""
        if index.ndim != self.ndim:
            raise ShapeError(f"{op}: index has {index.ndim} dimensions, self has {self.ndim} ({self.shape})")
        if not dtypes.is_int(index.dtype):
            raise ArgumentError(f"{op}: index must have an integer dtype, not {index.dtype}")
        dim = self._resolve_axis(dim)
        if not isinstance(src, TensorBase):
            src = type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
        if src.ndim != self.ndim or any(i > s for i, s in zip(index.shape, src.shape)) or \
                any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):  # fmt: skip
            raise ShapeError(
                f"{op}: index shape {index.shape} must be no larger than src {src.shape} in every dimension, "
                f"and than self {self.shape} outside dim {dim}"
            )
        n = self.shape[dim]
        index._check_index(op, 0, n, f"dimension {dim} with size {n} (shape {self.shape})")
        src = src.to(self.device).cast(self.dtype).shrink(tuple((0, i) for i in index.shape))
        hit = (index.to(self.device).unsqueeze(-1) == type(self).arange(concrete(n, op), device=self.device)).transpose(
            dim, -1
        )
        values = src.unsqueeze(-1).transpose(dim, -1)
        pad = tuple((0, s - i) if d != dim else (0, 0) for d, (s, i) in enumerate(zip(self.shape, index.shape)))
        return dim, hit.pad(pad + ((0, 0),)), values.pad(pad + ((0, 0),))

    def scatter(self, dim: int, index: Self, src: Self | ConstType, reduce: str | None = None) -> Self:
        """self with src[..., k, ...] written at [..., index[..., k, ...], ...] along `dim` (a new tensor). With
        `reduce` "add" or "multiply", combined with what is there instead. Of repeated indices, the last wins."""
        if reduce is not None:
            if reduce not in ("add", "multiply"):
                raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', not {reduce!r}")
            if isinstance(src, type(self)):  # (tinygrad's rule; PyTorch would accept it)
                raise ArgumentError("scatter: reduce= takes a scalar src; for a tensor src use scatter_reduce")
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")  # type: ignore[arg-type]
        _check_src_dtype("scatter", self, src)

        dim, hit, values = self._scatter_hits("scatter", dim, index, src)
        k = hit.shape[-1]
        order = (type(self).arange(concrete(k, "scatter"), device=self.device) + 1).reshape((1,) * self.ndim + (k,))
        last = hit.where(order, 0)._max(-1)  # (0 where nothing lands)
        chosen = hit & (order == last.unsqueeze(-1))
        work = values.cast(dtypes.int32) if values.dtype == dtypes.bool else values
        picked = chosen.where(work, 0).sum(-1, dtype=work.dtype).cast(self.dtype)
        return (last > 0).where(picked, self)

    def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str,
                       include_self: bool = True) -> Self:  # fmt: skip
        """Combine src into self along `dim` at `index` with "sum", "prod", "mean", "amax" or "amin" (PyTorch's
        semantics; `include_self=False` leaves out the original value wherever something lands)."""
        _check_src_dtype("scatter_reduce", self, src)
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ArgumentError(
                f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', not {reduce!r}"
            )
        if reduce in ("sum", "mean"):
            if (rows := self._scatter_rows(dim, index, src, reduce, include_self)) is not None:
                return rows
        dim, hit, values = self._scatter_hits("scatter_reduce", dim, index, src)
        landed = hit.any(-1)
        keep = self if include_self else None
        if reduce in ("sum", "mean"):
            total = hit.where(values, 0).sum(-1, dtype=self.dtype)
            if reduce == "sum":
                out = total if keep is None else total + keep
                return landed.where(out, self)
            count = hit.sum(-1) + (1 if include_self else 0)
            out = total if keep is None else total + keep
            mean = out / count.maximum(1) if dtypes.is_float(self.dtype) else out // count.maximum(1)
            return landed.where(mean.cast(self.dtype), self)
        if reduce == "prod":
            prod_ = hit.where(values, 1).prod(-1).cast(self.dtype)
            return landed.where(prod_ if keep is None else prod_ * keep, self)
        ext = dtypes.min(self.dtype) if reduce == "amax" else dtypes.max(self.dtype)
        pick = hit.where(values, ext)
        red = pick._max(-1) if reduce == "amax" else pick._min(-1)  # (an empty index: nothing lands, unused)
        if keep is not None:
            red = red.maximum(keep) if reduce == "amax" else red.minimum(keep)
        return landed.where(red, self)

    def _scatter_rows(self, dim: int, index: Self, src: Self, reduce: str, include_self: bool) -> Self | None:
        """scatter_reduce "sum" or "mean" of whole rows (an index the same along every other axis, covering them:
        `index_add`, a graph network's messages summed into their nodes) as the gather gradient's rows
        (`_row_grad`): O(T^2 M / chunks + n T + n M) where the one-hot is O(n T M). None where that does not apply
        or pay (the caller's one-hot then checks the arguments)."""
        if not (isinstance(src, TensorBase) and dtypes.is_float(self.dtype) and index.ndim == self.ndim == src.ndim):
            return None
        if not (all_int(self.shape) and all_int(index.shape) and all_int(src.shape)) or not dtypes.is_int(index.dtype):
            return None
        dim = self._resolve_axis(dim)
        if any(i != s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
            return None
        if any(i > s for i, s in zip(index.shape, src.shape)) or index.device != self.device:
            return None
        if (ids := _axis_ids(index, dim)) is None:
            return None
        n = int(self.shape[dim])
        index._check_index("scatter_reduce", 0, n, f"dimension {dim} with size {n} (shape {self.shape})")
        values = src.to(self.device).cast(self.dtype).shrink(tuple((0, i) for i in index.shape))
        if (total := _row_grad(values, ids, dim, n)) is None:
            return None
        count = (ids.reshape(1, -1) == type(self).arange(n, device=self.device).reshape(n, 1)).sum(1)  # (n,)
        along = tuple(n if d == dim else 1 for d in range(self.ndim))
        count = count.reshape(along)
        landed = count > 0
        out = total + self if include_self else total
        if reduce == "mean":
            out = out / (count + (1 if include_self else 0)).maximum(1).cast(self.dtype)
        return landed.where(out.cast(self.dtype), self)

    def index_select(self, dim: PyInt, index: Self) -> Self:
        """The slices at positions `index` (1-d) along `dim`."""
        dim = self._resolve_axis(dim)
        if index.ndim != 1:
            raise ValueError(f"index_select: index must be 1-d, got shape {index.shape}")
        return self._getitem((slice(None),) * dim + (index,), "index_select")


def _check_src_dtype(op: str, target: TensorBase, src: Any) -> None:
    """A tensor src must have the target's dtype (a RuntimeError in PyTorch and tinygrad): no silent rounding."""
    if hasattr(src, "lazydata") and src.dtype != target.dtype:
        raise RuntimeError(f"{op}: src is {src.dtype} but self is {target.dtype}; cast src with .cast({target.dtype})")

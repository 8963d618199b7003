"""Writes into a tensor's memory: `assign` (in place where the tensor has memory of its own, through a view of it,
under a jit capture, or by copy on a copy-only device) and `replace`, with what keeps a write from reaching a tensor
it must not (`_unshared`) and making it reach the tensor a view was indexed from (`_own_memory`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from lazy.dtype import ConstType
from lazy.engine.realize import capturing
from lazy.helpers import ArgumentError, ShapeError, broadcast_shape
from lazy.lazy import LazyBuffer, pending_assigns, storable_view
from lazy.multi import MultiLazyBuffer
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.tensor_base import TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self


def _refs_three_frames_down(x: object) -> int:
    return _refs_two_frames_down(x)


def _refs_two_frames_down(x: object) -> int:
    return _refs_here(x)


def _refs_here(x: object) -> int:
    return sys.getrefcount(x)


# the references `_unshared` counts on a temporary passed to `Tensor.assign` (its local, `_write`'s, `_unshared`'s,
# the count's argument): measured as `lazy.lazy._OWN_REFS` is, not assumed; one more means someone else holds it
_ASSIGN_REFS = _refs_three_frames_down(object())


def _unshared(x: TensorBase) -> LazyBuffer:
    """`x`'s value for a tensor that becomes it by assign: a copy when `x` is in memory already (a later write through
    the tensor must not change `x`), else `x`'s node, marked shared when anything but the assign's caller holds `x`
    (a realized value then gets a copy at the first in-place write)."""
    value = x.lazydata
    if value.base.realized is not None:
        return value.clone()
    if sys.getrefcount(x) > _ASSIGN_REFS:
        value.base.shared = True
    return value


class AssignMixin(TensorBase):
    """`assign` and `replace`: how a tensor's value changes without a new tensor."""

    __slots__ = ()

    def replace(self, x: Self) -> Self:
        """Make self refer to `x`'s data (same shape required; nothing is copied or run) and return self; self's
        gradient history is kept."""
        if x.shape != self.shape:
            raise ShapeError(f"replace: shape {x.shape} does not match {self.shape}")
        self.lazydata = x.lazydata
        return self

    def assign(self, x: Self | ConstType | Any) -> Self:
        """Write `x` into this tensor's memory (keeps the same buffer: what optimizers and `jit` rely on); `x` is
        broadcast to this tensor's shape and cast to its dtype, as PyTorch's `copy_`."""
        if not isinstance(x, type(self)):
            x = type(self)(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            try:  # a value that broadcasts to this shape (a scalar, a row), as PyTorch's copy_
                fits = broadcast_shape("assign", x.shape, self.shape) == self.shape
            except ValueError:
                fits = False
            if not fits:
                raise ShapeError(f"assign: shape {x.shape} does not match {self.shape} (nor broadcasts to it)")
            x = x._broadcast_to(self.shape)
        if isinstance(self.device, str) and Device[self.device].kernel_refusal is not None:
            self._assign_by_copy(x)
            return self
        self._write(x)
        self._refresh_views()
        return self

    def _refresh_views(self) -> None:
        """The views indexing took of this tensor, taken again where this tensor has moved to another node (a write
        gave it memory of its own, or left an assign pending): they read what it holds, as PyTorch's views do (they
        read the node they were taken from, which the write no longer reaches)."""
        views = getattr(self, "_views", None)
        if not views or not isinstance(lb := self.lazydata, LazyBuffer):
            return
        for ref in list(views):
            if (view := ref()) is None or (viewed := view._view_parent()) is None or viewed[0] is not self:
                continue
            if isinstance(view.lazydata, LazyBuffer) and view.lazydata.base is not lb.base:
                view.lazydata = self[viewed[1]].lazydata
                view._refresh_views()

    def _write(self, x: Self) -> None:
        """`assign`'s write of `x` (a tensor of this shape, on a device that runs kernels)."""
        if x.device != self.device:
            x = x.to(self.device)
        x = x.cast(self.dtype) if x.dtype != self.dtype else x
        if isinstance(self.lazydata, MultiLazyBuffer):
            self.lazydata = self.lazydata.assign(x.lazydata)
            return
        self._refresh_view()
        lb, target = self.lazydata, self.lazydata.base
        if target.realized is None and (
            target.op is Ops.ASSIGN or (lb is not target and target.op is not Ops.CONST and not target.shared)
        ):
            # a buffer with a write pending (the tensor or the one it views), or a view of a value not yet computed:
            # that first, then this write in place. Else this one went to memory of its own: a second pending
            # `W.assign` moved W off the buffer a jit captured, and a view's write never reached the viewed tensor.
            # (Not a value two identical expressions share: its other holders would see the write.)
            type(self)(target).realize() if lb is not target else self.realize()
            lb, target = self.lazydata, self.lazydata.base
        if (
            target.realized is None
            or not target.st.contiguous
            or target.op is Ops.CONST
            or (lb is target and target.shared)
        ):
            if lb is not target and (viewed := self._view_parent()) is not None:
                # a view (`x[1:3]`) of a value with no memory of its own (a constant, or one node that identical
                # expressions share): the indexed tensor gets memory of its own, and the write goes there
                parent, index = viewed
                parent._own_memory()
                self.lazydata = parent[index].lazydata
                self._write(x)
                return
            if capturing and lb is target and target.realized is None and target.op is not Ops.CONST \
                    and not target.shared:  # fmt: skip
                # a jit is capturing: a tensor that became the value would leave a replay nothing to write (its state
                # would stay the capture's: BatchNorm's running mean, not realized before the jit). Its current value
                # is realized in place, outside the capture (a replay must not recompute it; `x` reads that node),
                # and the write goes there, captured, as for a tensor realized before the jit
                held = capturing[:]
                capturing.clear()
                try:
                    type(self)(target).realize()
                finally:
                    capturing.extend(held)
                self._write(x)
                return
            # no memory of its own yet, or memory other tensors hold too (two identical expressions made one node):
            # the tensor becomes the value, in memory it does not share with `x` (`_unshared`)
            self.lazydata = _unshared(x)
        elif lb is target:
            self.lazydata = target.assign(x.lazydata)
            if (viewed := self._view_parent()) is not None and viewed[0].lazydata is lb:
                viewed[0].lazydata = self.lazydata  # an index that selects all of it (`t[::-1]` of one element)
                viewed[0]._refresh_views()
        elif storable_view(st := lb.st.simplify()):  # a view of a buffer (a KV cache's slice, a strided slice,
            # whose padding nothing reads): write those elements in place now, not lazily: the tensors holding the
            # whole buffer read its memory and would not see a pending write. Writes into that memory still pending
            # (`t.assign(...)` after this view was taken) run first: they were made first
            for pending in pending_assigns():
                if len(pending.srcs) > 1 and pending.srcs[1].base is target:
                    type(self)(pending).realize()
            self.lazydata = target.assign(x.lazydata, st)._view(st)
            self.realize()
            # then named by the buffer's own node again, as the viewed tensor names it: a later write through either
            # finds the other's readers (a realized assign drops its sources, and with them the link to the buffer)
            self.lazydata = target._view(st)
        else:
            raise ArgumentError(f"assign: cannot write through this view of a {target.shape} buffer (it pads or "
                                "repeats elements); assign to the whole tensor, or use __setitem__")  # fmt: skip

    def _refresh_view(self) -> None:
        """Before a write through a view made by indexing: when its tensor has moved to another node since (written,
        given memory of its own, an assign pending), the view is taken again from it, so that the write starts from
        the tensor's current value and lands where the tensor reads (it wrote stale values back over newer ones)."""
        if (viewed := self._view_parent()) is None or not isinstance(lb := self.lazydata, LazyBuffer):
            return
        parent, index = viewed
        if isinstance(parent.lazydata, LazyBuffer) and parent.lazydata.base is not lb.base:
            self.lazydata = parent[index].lazydata

    def _view_parent(self) -> tuple[Self, Any] | None:
        """The tensor this one is a basic-indexing view of, and the index (`_viewed`), while it is alive."""
        viewed = getattr(self, "_viewed", None)
        if viewed is None or (parent := viewed[0]()) is None:
            return None
        return parent, viewed[1]

    def _own_memory(self) -> None:
        """Have this tensor's value in memory that only it holds (a copy, realized now), or, for a view made by
        indexing, in its indexed tensor's, which it then views; so that a write through it is seen by every tensor
        that views it."""
        if (viewed := self._view_parent()) is not None:
            parent, index = viewed
            parent._own_memory()
            self.lazydata = parent[index].lazydata
            return
        lb = self.lazydata
        if not isinstance(lb, LazyBuffer):
            return
        base = lb.base
        if lb is base and base.realized is not None and base.st.contiguous and not base.shared:
            return
        self.lazydata = lb.clone()
        self.realize()
        self._refresh_views()

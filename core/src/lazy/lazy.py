"""`LazyBuffer`: a node of the lazy graph. A *base* has an op and sources and (once realized) a `Buffer`; a *view*
is a ShapeTracker over a base. Movement ops only make views; constants fold; identical nodes are shared."""

from __future__ import annotations

import weakref
from typing import Any

from lazy.device import Buffer
from lazy.dtype import ConstType, DType, dtypes
from lazy.helpers import all_int, prod
from lazy.ops import GroupOp, Ops, exec_alu, identity_element
from lazy.shape import ShapeTracker
from lazy.symbolic import Node, sint

_cache: weakref.WeakValueDictionary[tuple[Any, ...], LazyBuffer] = weakref.WeakValueDictionary()


def create_lazybuffer(device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                      srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> LazyBuffer:  # fmt: skip
    """Make (or reuse an identical) LazyBuffer. EMPTY buffers are never shared: each is its own memory."""
    if st.size == 0 and op not in (Ops.EMPTY, Ops.CONST):
        op, arg, srcs, base = Ops.CONST, 0, (), None
        st = ShapeTracker.from_shape(st.shape)
    # strong refs: the entry dies with the value it maps to. Variables compare equal whatever they are bound to, so
    # the bound values are part of the key (n=3 and n=5 are different nodes that share one compiled kernel).
    bound: Any = None if st.static else tuple(sorted((v.expr, val) for v, val in st.var_vals.items()))
    if isinstance(arg, Node):  # a constant whose value is a bound variable (or an expression of them)
        bound = (bound, tuple(sorted((v.expr, v.val) for v in arg.vars() if v._val is not None)))
    # 0.0 == -0.0 == False and 1 == 1.0 == True: the repr (floats) or type keeps such constants apart
    key = (device, st, bound, dtype, op, arg, repr(arg) if isinstance(arg, float) else type(arg), srcs, base)
    if op is not Ops.EMPTY and (hit := _cache.get(key)) is not None:
        return hit
    ret = LazyBuffer(device, st, dtype, op, arg, srcs, base)
    if op is not Ops.EMPTY:
        _cache[key] = ret
        ret._cache_key = key
    return ret


def forget_graph(lb: LazyBuffer) -> None:
    """After `lb` (a base) is realized its sources are no longer needed: drop them so memory can be freed (the
    cache key holds them too)."""
    _cache.pop(getattr(lb, "_cache_key", None), None)  # type: ignore[arg-type]
    lb.srcs, lb._cache_key = (), None


class LazyBuffer:
    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None):  # fmt: skip
        self._cache_key: tuple[Any, ...] | None = None
        self.device, self.st, self.dtype = device, st, dtype
        self.shape: tuple[sint, ...] = st.shape
        self.size: sint = st.size
        self._base = base
        if base is None:
            self.op, self.arg, self.srcs = op, arg, srcs
            # an ASSIGN writes into its target's memory, a BUFFER_VIEW reads its source's; the rest own their memory
            if op is Ops.ASSIGN:
                self.buffer: Buffer = srcs[1].base.buffer
            elif op is Ops.BUFFER_VIEW:
                self.buffer = srcs[0].buffer.view(self._buffer_size(), dtype, arg)
            else:
                self.buffer = Buffer(device, self._buffer_size(), dtype)
            self.forced_realize = op in (Ops.CONTIGUOUS,)
            self.done = False  # set once the buffer holds this node's value
        else:
            assert base.base is base, "a view's base must be a base"
            self.op, self.arg, self.srcs = Ops.VIEW, None, ()

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

    # -- creation ----------------------------------------------------------------------------------------------------

    @staticmethod
    def metaop(op: Ops, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:  # fmt: skip
        return create_lazybuffer(device, ShapeTracker.from_shape(shape), dtype, op, arg, srcs)

    def const(self, val: ConstType | Node, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        return LazyBuffer.const_like(val, self.dtype, self.device, self.shape if shape is None else shape)

    @staticmethod
    def const_like(val: ConstType | Node, dtype: DType, device: str, shape: tuple[sint, ...]) -> LazyBuffer:
        value = val if isinstance(val, Node) else dtypes.as_const(val, dtype)
        if prod(shape) == 0:  # nothing to broadcast: an empty constant of that shape
            return LazyBuffer.metaop(Ops.CONST, shape, dtype, device, arg=value)
        scalar = LazyBuffer.metaop(Ops.CONST, (), dtype, device, arg=value)
        return scalar.reshape((1,) * len(shape)).expand(shape)

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

    def assign(self, value: LazyBuffer) -> LazyBuffer:
        """Write `value` into this buffer's memory (which must be a realized, contiguous base)."""
        assert self.base is self and self.st.contiguous, "assign target must be a contiguous base"
        return create_lazybuffer(
            self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.ASSIGN, None, (value, self)
        )

    def copy_to_device(self, device: str) -> LazyBuffer:
        if device == self.device:
            return self
        if self.is_unrealized_unmasked_const() and not isinstance(self.const_value(), Node):
            return LazyBuffer.const_like(self.const_value(), self.dtype, device, self.shape)
        src = self.buffer_view() or self.contiguous()  # a plain slice is copied straight out of the source's memory
        return create_lazybuffer(device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.COPY, None, (src,))

    def buffer_view(self, dtype: DType | None = None) -> LazyBuffer | None:
        """A base sharing memory with this node's base, when it reads one consecutive range of it (a shrink or
        reshape of a contiguous buffer): no kernel needed. With `dtype`, the same bytes reinterpreted (a bitcast,
        which may change the element size and so the last dimension)."""
        st, base = self.st, self.base
        if not st.consecutive or not isinstance(st.views[0].offset, int) or base.op in (Ops.CONST, None):
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
        assert all(s.shape == self.shape for s in srcs), f"{op}: shapes differ {[s.shape for s in srcs]}"
        if op is Ops.WHERE:
            assert srcs[0].dtype == dtypes.bool and srcs[1].dtype == srcs[2].dtype, (
                f"where dtypes {[s.dtype for s in srcs]}"
            )
            out_dtype = srcs[1].dtype
        else:
            assert all(s.dtype == self.dtype for s in srcs), f"{op}: dtypes differ {[s.dtype for s in srcs]}"
            out_dtype = dtypes.bool if op in GroupOp.Comparison else self.dtype
        if (folded := self._fold(op, srcs, out_dtype)) is not None:
            return folded
        return create_lazybuffer(self.device, ShapeTracker.from_shape(self.shape), out_dtype, op, arg, srcs)

    @staticmethod
    def _fold(op: Ops, srcs: tuple[LazyBuffer, ...], dtype: DType) -> LazyBuffer | None:
        consts = [
            s.const_value() if s.is_unrealized_unmasked_const() and not isinstance(s.const_value(), Node) else None
            for s in srcs
        ]
        if all(c is not None for c in consts):
            return srcs[0].const_like(exec_alu(op, dtype, consts), dtype, srcs[0].device, srcs[0].shape)
        if op is Ops.ADD:
            if consts[1] == 0:
                return srcs[0]  # x+0 -> x
            if consts[0] == 0:
                return srcs[1]  # 0+x -> x
        if op is Ops.MUL:
            if consts[1] == 1:
                return srcs[0]  # x*1 -> x
            if consts[0] == 1:
                return srcs[1]  # 1*x -> x
            if (consts[1] == 0 or consts[0] == 0) and dtypes.is_int(dtype) | (dtype == dtypes.bool):
                return srcs[0].const(0)  # x*0 -> 0 (ints only: for floats, inf*0 is nan)
        if op is Ops.IDIV and consts[1] == 1:
            return srcs[0]  # x//1 -> x
        if op is Ops.WHERE and consts[0] is not None:
            return srcs[1] if consts[0] else srcs[2]  # where(c, x, y) with a constant c
        return None

    def r(self, op: Ops, axis: tuple[int, ...]) -> LazyBuffer:
        new_shape = tuple(1 if i in axis else s for i, s in enumerate(self.shape))
        if not axis or new_shape == self.shape:
            return self
        if self.size == 0:
            return LazyBuffer.const_like(identity_element(op, self.dtype), self.dtype, self.device, new_shape)
        if self.is_unrealized_unmasked_const() and op is Ops.RMAX and not isinstance(self.const_value(), Node):
            return self.const(self.const_value(), new_shape)
        if (split := self._split_reduce(op, axis, new_shape)) is not None:
            return split
        return create_lazybuffer(self.device, ShapeTracker.from_shape(new_shape), self.dtype, op, axis, (self,))

    def _split_reduce(self, op: Ops, axis: tuple[int, ...], new_shape: tuple[sint, ...]) -> LazyBuffer | None:
        """Reduce one long axis in two stages: (P, R, W) partial results first, P chunks for the cores and W
        contiguous lanes (vector accumulators) each, summing R rows read in order; then the P*W partials."""
        if not all_int(self.shape) or len(axis) != 1:
            return None
        reduced = prod(self.shape) // prod(new_shape)
        if reduced < 32768 or prod(new_shape) >= 1024:
            return None
        ax = axis[0]
        size = self.shape[ax]
        assert isinstance(size, int)
        candidates = ((p, w) for w in (32, 16, 8, 1) for p in (64, 32, 16, 8))
        plan = next(((p, w) for p, w in candidates if size % (p * w) == 0 and size // (p * w) >= 16), None)
        if plan is None:
            return None
        chunks, lanes = plan
        shape = self.shape[:ax] + (chunks, size // (chunks * lanes), lanes) + self.shape[ax + 1 :]
        stage1 = self.reshape(shape).r(op, (ax + 1,))
        return stage1.r(op, (ax, ax + 2)).reshape(new_shape)

    # -- movement (views) ---------------------------------------------------------------------------------------------

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

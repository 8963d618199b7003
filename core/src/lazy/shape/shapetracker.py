"""`ShapeTracker`: a stack of views; the last one gives the shape, each earlier one addresses the one after it.

A movement op changes only the last view and pushes a new view only when that one cannot absorb the op.
`expr_idxs` turns the stack into one (index, valid) pair of symbolic expressions for the code generator.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from lazy.helpers import cached_property, prod
from lazy.record import record
from lazy.shape.view import View, strides_for_shape, unravel
from lazy.symbolic import MulNode, Node, SumNode, Variable, sint, to_sint


def _index_var(name: str, lo: sint, hi: sint) -> Variable:
    """A variable ranging over `[lo, hi)`; symbolic limits use their bounds."""
    lo, hi = to_sint(lo), to_sint(hi - 1)
    return Variable(name, lo if isinstance(lo, int) else lo.min, max(hi if isinstance(hi, int) else hi.max, 0))


@record(frozen=True)
class ShapeTracker:
    """A stack of views: `views[-1]` maps an element to a flat index into the shape of `views[-2]`, and so on down to
    `views[0]`, which addresses the buffer. Hashable and immutable; every movement op returns a new tracker."""

    views: tuple[View, ...]

    def __hash__(self) -> int:  # computed once: every graph node and kernel key hashes its views
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash(self.views)
            return h

    def __getstate__(self) -> dict[str, Any]:  # a hash is only valid in the process that computed it
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @staticmethod
    def from_shape(shape: Sequence[sint]) -> ShapeTracker:
        shape = tuple(shape)
        for s in shape:
            if type(s) is not int:
                return ShapeTracker((View.create(shape),))
        return _from_static_shape(shape)

    @cached_property
    def static(self) -> bool:
        """No symbolic variable anywhere: movement results can be memoised (a bound variable could not be)."""
        return not self.vars()

    def _move(self, op: str, arg: tuple[Any, ...]) -> ShapeTracker:
        if self.static and _all_static(arg):
            return _cached_move(self, op, arg)
        return getattr(self, f"_{op}")(arg)

    @cached_property
    def shape(self) -> tuple[sint, ...]:  # (cached: every graph node reads it)
        return self.views[-1].shape

    @cached_property
    def size(self) -> sint:
        return to_sint(prod(self.shape))

    @property
    def contiguous(self) -> bool:
        """One view reading the buffer in order from its start."""
        return len(self.views) == 1 and self.views[0].contiguous

    @property
    def consecutive(self) -> bool:
        """One unmasked view with row-major strides, from any offset."""
        view = self.views[-1]
        return len(self.views) == 1 and view.mask is None and view.strides == strides_for_shape(view.shape)

    def real_size(self) -> int:
        """How many elements of the underlying buffer are reachable: the largest valid index of the first view + 1."""
        view = self.views[0]
        if 0 in view.shape or (view.mask is not None and view.mask[0] == (0, 0)):
            return 0
        box = view.mask or tuple((0, size) for size in view.shape)
        idx, _ = view.expr_idxs([_index_var(f"_ridx{i}", lo, hi) for i, (lo, hi) in enumerate(box)])
        return idx.max + 1

    def vars(self) -> set[Variable]:
        return set().union(*(view.vars() for view in self.views))

    @property
    def var_vals(self) -> dict[Variable, int]:
        """Values of the bound variables, keyed by the unbound variable."""
        return {v.unbind()[0]: v.val for v in self.vars() if v._val is not None}

    def unbind(self) -> tuple[ShapeTracker, dict[Variable, int]]:
        if self.static:
            return self, {}
        views, var_vals = zip(*(view.unbind() for view in self.views))
        return ShapeTracker(tuple(views)), {k: v for vals in var_vals for k, v in vals.items()}

    def bind(self, var_vals: dict[Variable, int]) -> ShapeTracker:
        """This tracker with each of its variables found in `var_vals` (keyed by the unbound variable) bound to that
        value, replacing an earlier binding."""
        bound = {v: v.bind(var_vals[v]) for v in self.vars() if v in var_vals}
        return ShapeTracker(tuple(view.substitute(bound) for view in self.views)) if bound else self

    # -- movement ops ------------------------------------------------------------------------------------------------

    def _replace_last(self, view: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (view,))

    def reshape(self, new_shape: Any) -> ShapeTracker:
        return self._move("reshape", tuple(new_shape))

    def _reshape(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
        if (view := self.views[-1].reshape(new_shape)) is not None:
            return self._replace_last(view)
        return ShapeTracker(self.views + (View.create(new_shape),))

    def permute(self, axis: Any) -> ShapeTracker:
        return self._move("permute", tuple(axis))

    def _permute(self, axis: tuple[int, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].permute(axis))

    def expand(self, new_shape: Any) -> ShapeTracker:
        return self._move("expand", tuple(new_shape))

    def _expand(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].expand(new_shape))

    def pad(self, arg: Any) -> ShapeTracker:
        return self._move("pad", tuple(arg))

    def _pad(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].pad(arg))

    def shrink(self, arg: Any) -> ShapeTracker:
        return self._move("shrink", tuple(arg))

    def _shrink(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].shrink(arg))

    def stride(self, mul: Any) -> ShapeTracker:
        return self._move("stride", tuple(mul))

    def _stride(self, mul: tuple[int, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].stride(mul))

    def flip(self, axis: tuple[bool, ...]) -> ShapeTracker:
        return self.stride(tuple(-1 if f else 1 for f in axis))

    def simplify(self) -> ShapeTracker:
        """Merge adjacent views wherever `View.__add__` can express two as one."""
        if len(self.views) == 1:
            return self
        return _cached_simplify(self) if self.static else self._simplify()

    def _simplify(self) -> ShapeTracker:
        views = list(self.views)
        i = len(views) - 2
        while i >= 0:
            if (merged := views[i] + views[i + 1]) is not None:
                views[i : i + 2] = [merged]
                i = min(i, len(views) - 2)
            else:
                i -= 1
        return ShapeTracker(tuple(views))

    def __add__(self, other: ShapeTracker) -> ShapeTracker:
        """`other` applied on top of this tracker (its first view addresses this tracker's shape)."""
        if other.contiguous and other.shape == self.shape:  # reading every element in order adds nothing
            return self
        if self.contiguous:  # a plain buffer: `other` addresses it directly (scheduling composes these by the thousand)
            return other.simplify()
        return ShapeTracker(self.views + other.views).simplify()

    # -- index expressions -------------------------------------------------------------------------------------------

    def default_idxs(self) -> list[Variable]:
        """`idx0..idxN`, one variable per axis, each over `[0, size)`."""
        return [_index_var(f"idx{i}", 0, size) for i, size in enumerate(self.shape)]

    def expr_idxs(self, idxs: Sequence[Node] | None = None) -> tuple[Node, Node]:
        """(buffer index, valid) for the element at `idxs` (default `default_idxs()`); valid is 0 on padding."""
        idx, valid = self.views[-1].expr_idxs(self.default_idxs() if idxs is None else idxs)
        for view in reversed(self.views[:-1]):
            if valid == 0:
                break
            idx, view_valid = view.expr_idxs(unravel(view.shape, idx))
            valid = Node.ands([valid, view_valid])
        return idx, valid

    def expr_node(self, idx: Node | None = None) -> tuple[Node, Node]:
        """`expr_idxs` for one row-major flat index over the current shape (default: `idx` over `[0, size)`)."""
        flat = _index_var("idx", 0, self.size) if idx is None else idx
        return self.expr_idxs(unravel(self.shape, flat))

    def real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
        """The stride of each axis through all views; None where it is not one constant (or the axis is masked)."""
        return _cached_real_strides(self, ignore_valid) if self.static else self._real_strides(ignore_valid)

    def _real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
        idxs = self.default_idxs()
        idx, valid = self.expr_idxs(idxs)
        strides: dict[Node, sint] = {v: 0 for v in idxs}
        nonlinear = valid.vars() if not ignore_valid else set()
        for term in idx.nodes if isinstance(idx, SumNode) else [idx]:
            if term in strides:
                strides[term] = 1
            elif isinstance(term, MulNode) and term.a in strides:
                strides[term.a] = term.b
            else:
                nonlinear |= term.vars()
        return tuple(0 if size == 1 else None if v in nonlinear else strides[v] for v, size in zip(idxs, self.shape))

    def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
        return [axis for axis, st in enumerate(self.real_strides(ignore_valid)) if st == 1]

    def axis_is_masked(self, axis: int) -> bool:
        """Whether padding depends on this axis."""
        idxs = self.default_idxs()
        _, valid = self.expr_idxs(idxs)
        return idxs[axis] in valid.vars()


def _all_static(arg: Any) -> bool:
    for a in arg:  # (a loop: every movement op checks its argument)
        if not (_all_static(a) if type(a) is tuple else type(a) is int):
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _from_static_shape(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker((View.create(shape),))


@functools.lru_cache(maxsize=16384)
def _cached_move(st: ShapeTracker, op: str, arg: tuple[Any, ...]) -> ShapeTracker:
    return getattr(st, f"_{op}")(arg)


@functools.lru_cache(maxsize=8192)
def _cached_simplify(st: ShapeTracker) -> ShapeTracker:
    return st._simplify()


@functools.lru_cache(maxsize=8192)
def _cached_real_strides(st: ShapeTracker, ignore_valid: bool) -> tuple[sint | None, ...]:
    return st._real_strides(ignore_valid)

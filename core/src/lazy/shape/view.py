"""`View`: one strided, offset, masked window onto a buffer; every movement op on it is pure and returns a new View.

Element `(i0, .., in)` of a view lives at `offset + sum(ik * strides[k])` and exists only where every `ik` is inside
`mask[k]` (elsewhere it reads as padding). Views are kept canonical by `View.create`, so equal views compare equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lazy.helpers import all_int, prod
from lazy.record import record
from lazy.symbolic import (
    AndNode,
    LtNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    Variable,
    bound_value,
    check_variables,
    is_sym,
    sint,
    to_sint,
)

Mask = tuple[tuple[sint, sint], ...]


def strides_for_shape(shape: Sequence[sint]) -> tuple[sint, ...]:
    """Row-major strides for `shape`, 0 on size-1 axes (the canonical form)."""
    strides: list[sint] = []
    acc: sint = 1
    for size in reversed(shape):
        strides.append(0 if size == 1 else acc)
        acc = to_sint(acc * size)
    return tuple(reversed(strides))


def _suffix_products(sizes: Sequence[int]) -> list[int]:
    """w[k] = prod(sizes[k+1:]): the weight of axis k in a row-major flat index."""
    return [prod(sizes[k + 1 :]) for k in range(len(sizes))]


def _ceildiv(num: sint, amt: int) -> sint:
    return to_sint(-(-num // amt))


def _is_empty(lo: sint, hi: sint) -> bool:
    width = to_sint(hi - lo)
    return width <= 0 if isinstance(width, int) else width.max <= 0


def _ordered(*xs: sint) -> bool:
    """Whether `xs[0] <= xs[1] <= ...` holds for every value of their variables."""
    return all(_known_ge(b, a) for a, b in zip(xs, xs[1:]))


def _ordered_when_bound(*xs: sint) -> bool:
    """Whether `xs[0] <= xs[1] <= ...` holds for the variables' bound values (False when one is unbound). A slice
    like `[i : i + 2]` of an axis of 11 with `i` in [1, 10] is valid for the values `i` takes (up to 9) but not for
    every value in its range; the caller vouches for the values it binds, as tinygrad does."""
    values = [bound_value(x) for x in xs]
    return None not in values and all(a <= b for a, b in zip(values, values[1:]))  # type: ignore[operator]


def _known_ge(a: sint, b: sint) -> bool:
    diff = to_sint(a - b)
    return diff >= 0 if isinstance(diff, int) else diff.min >= 0


def _smax(a: sint, b: sint) -> sint:
    return _pick_ordered(a, b)[1]


def _smin(a: sint, b: sint) -> sint:
    return _pick_ordered(a, b)[0]


def _pick_ordered(a: sint, b: sint) -> tuple[sint, sint]:
    """(smaller, larger) of two values whose order holds for every value of their variables."""
    if _known_ge(b, a):
        return a, b
    if _known_ge(a, b):
        return b, a
    raise ValueError(f"cannot order the symbolic values {a} and {b}; give their variables bounds that decide it")


def _canonical_mask(
    shape: tuple[sint, ...], strides: tuple[sint, ...], offset: sint, mask: Mask
) -> tuple[Mask | None, tuple[sint, ...], sint]:
    """(mask, strides, offset) with full masks dropped, empty masks made all-empty, size-1 ranges folded into offset."""
    mask = tuple(
        (max(lo, 0), min(hi, size)) if all_int((lo, hi, size)) else (lo, hi) for (lo, hi), size in zip(mask, shape)
    )
    if any(_is_empty(lo, hi) for lo, hi in mask):
        return ((0, 0),) * len(shape), (0,) * len(shape), 0
    if all(lo == 0 and hi == size for (lo, hi), size in zip(mask, shape)):
        return None, strides, offset
    new_strides = list(strides)
    for axis, (lo, hi) in enumerate(mask):
        if to_sint(hi - lo) == 1:  # only index `lo` is valid: its address is a constant
            offset, new_strides[axis] = to_sint(offset + lo * strides[axis]), 0
    return mask, tuple(new_strides), offset


def _check_len(op: str, shape: tuple[sint, ...], arg: Sequence) -> None:
    if len(arg) != len(shape):
        raise ValueError(
            f"{op}: argument {tuple(arg)} has {len(arg)} entries but the shape {shape} has {len(shape)} axes"
        )


@record(frozen=True)
class View:
    """Shape, strides and offset into a buffer, and the box of valid indices (`mask`, None when all are valid).

    Build one with `View.create`, which canonicalizes; `contiguous` means row-major from offset 0 with no mask.
    """

    shape: tuple[sint, ...]
    strides: tuple[sint, ...]
    offset: sint
    mask: Mask | None
    contiguous: bool

    def __hash__(self) -> int:  # computed once: every graph node and kernel key hashes its views
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash((self.shape, self.strides, self.offset, self.mask, self.contiguous))
            return h

    def __getstate__(self) -> dict[str, Any]:  # a hash is only valid in the process that computed it
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @staticmethod
    def create(
        shape: Sequence[sint], strides: Sequence[sint] | None = None, offset: sint = 0, mask: Sequence | None = None
    ) -> View:
        """The canonical view: strides 0 on size-1 axes, full masks dropped, empty masks as `((0, 0), ...)`."""
        shape = tuple(to_sint(s) for s in shape)
        parts = (*shape, *(strides or ()), offset, *(x for lo_hi in mask or () for x in lo_hi))
        if not all(type(x) is int for x in parts):  # symbolic: one range and one value per variable name
            check_variables(parts)
        if any(isinstance(s, int) and s < 0 for s in shape):
            raise ValueError(f"View: negative size in shape {shape}")
        if 0 in shape:
            return View(shape, (0,) * len(shape), 0, None, True)
        strides = strides_for_shape(shape) if strides is None else tuple(to_sint(st) for st in strides)
        _check_len("View", shape, strides)
        strides = tuple(0 if size == 1 else st for size, st in zip(shape, strides))
        offset = to_sint(offset)
        if mask is not None:
            _check_len("View mask", shape, mask)
            mask = tuple((to_sint(lo), to_sint(hi)) for lo, hi in mask)
            mask, strides, offset = _canonical_mask(shape, strides, offset, mask)
        contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
        return View(shape, strides, offset, mask, contiguous)

    @property
    def size(self) -> sint:
        return to_sint(prod(self.shape))

    def vars(self) -> set[Variable]:
        flat = [*self.shape, *self.strides, self.offset, *(x for m in self.mask or () for x in m)]
        return set().union(*(x.vars() for x in flat if isinstance(x, Node)))

    def substitute(self, var_vals: Mapping[Variable, sint]) -> View:
        def sub(x: sint) -> sint:
            return to_sint(x.substitute(var_vals)) if isinstance(x, Node) else x

        mask = tuple((sub(lo), sub(hi)) for lo, hi in self.mask) if self.mask is not None else None
        return View.create(tuple(map(sub, self.shape)), tuple(map(sub, self.strides)), sub(self.offset), mask)

    def unbind(self) -> tuple[View, dict[Variable, int]]:
        """This view with bound variables replaced by unbound ones, and their values."""
        bound = [v for v in self.vars() if v._val is not None]
        unbound = {v: v.unbind()[0] for v in bound}
        return self.substitute(unbound), {v.unbind()[0]: v.val for v in bound}

    def expr_idxs(self, idxs: Sequence[Node]) -> tuple[Node, Node]:
        """(buffer index, valid) of the element at `idxs`, one node per axis; valid is 0 where it is padding."""
        terms = [idx * st for idx, size, st in zip(idxs, self.shape, self.strides) if size != 1 and st != 0]
        valid: list[Node] = [NumNode(1)]
        for idx, (lo, hi) in zip(idxs, self.mask or ()):
            valid += [idx.ge(lo), idx.lt(hi)]
        return Node.sum([self.offset, *terms]), Node.ands(valid)

    # -- movement ops ------------------------------------------------------------------------------------------------

    def permute(self, axis: tuple[int, ...]) -> View:
        if sorted(axis) != list(range(len(self.shape))):
            raise ValueError(f"permute: {axis} is not a permutation of the {len(self.shape)} axes of {self.shape}")
        mask = tuple(self.mask[a] for a in axis) if self.mask is not None else None
        return View.create(tuple(self.shape[a] for a in axis), tuple(self.strides[a] for a in axis), self.offset, mask)

    def expand(self, new_shape: tuple[sint, ...]) -> View:
        _check_len("expand", self.shape, new_shape)
        for axis, (old, new) in enumerate(zip(self.shape, new_shape)):
            if old != new and old != 1:
                raise ValueError(
                    f"expand: axis {axis} of {self.shape} has size {old}, not 1; cannot expand to {new_shape}"
                )
        if 0 in self.shape:
            return View.create(new_shape)
        mask = None
        if self.mask is not None:
            mask = tuple(
                m if old == new else (0, new) if m == (0, 1) else (0, 0)
                for m, old, new in zip(self.mask, self.shape, new_shape)
            )
        return View.create(new_shape, self.strides, self.offset, mask)

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
        """Add `before, after` invalid elements on each axis."""
        _check_len("pad", self.shape, arg)
        if any(isinstance(x, int) and x < 0 for pair in arg for x in pair):
            raise ValueError(f"pad: {arg} has a negative amount for shape {self.shape}")
        if all(before == 0 and after == 0 for before, after in arg):
            return self
        return self._resize(tuple((-before, size + after) for size, (before, after) in zip(self.shape, arg)))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
        """Keep `[start, end)` of each axis."""
        _check_len("shrink", self.shape, arg)
        for (start, end), size in zip(arg, self.shape):
            if not _ordered(0, start, end, size) and not _ordered_when_bound(0, start, end, size):
                raise ValueError(
                    f"shrink: {arg} is out of range for shape {self.shape}: need 0 <= start <= end <= size for "
                    "every value of the variables, or for their bound values"
                )
        if self.mask is None:  # the window lies inside the axis, so all of it stays valid
            region = tuple((to_sint(start), to_sint(end)) for start, end in arg)
            offset = to_sint(self.offset + sum(start * st for (start, _), st in zip(region, self.strides)))
            return View.create(tuple(to_sint(end - start) for start, end in region), self.strides, offset, None)
        return self._resize(arg)

    def _resize(self, region: tuple[tuple[sint, sint], ...]) -> View:
        """Window `[start, end)` per axis in current coordinates; what falls outside the old valid box is invalid."""
        offset = to_sint(self.offset + sum(start * st for (start, _), st in zip(region, self.strides)))
        old_mask = self.mask or tuple((0, size) for size in self.shape)
        mask = tuple(
            (_smax(0, to_sint(lo - start)), _smin(to_sint(end - start), to_sint(hi - start)))
            for (lo, hi), (start, end) in zip(old_mask, region)
        )
        return View.create(tuple(to_sint(end - start) for start, end in region), self.strides, offset, mask)

    def stride(self, mul: tuple[int, ...]) -> View:
        """Keep every `m`-th element of each axis; a negative `m` walks the axis backwards (`-1` flips it)."""
        _check_len("stride", self.shape, mul)
        if not all(isinstance(m, int) and m != 0 for m in mul):
            raise ValueError(f"stride: {mul} must be non-zero ints for shape {self.shape}")
        return self._flip(tuple(m < 0 for m in mul))._step(tuple(abs(m) for m in mul))

    def _flip(self, axes: tuple[bool, ...]) -> View:
        if not any(axes):
            return self
        offset = to_sint(self.offset + sum((size - 1) * st for size, st, f in zip(self.shape, self.strides, axes) if f))
        strides = tuple(-st if f else st for st, f in zip(self.strides, axes))
        mask = None
        if self.mask is not None:
            mask = tuple(
                (size - hi, size - lo) if f else (lo, hi) for (lo, hi), size, f in zip(self.mask, self.shape, axes)
            )
        return View.create(self.shape, strides, offset, mask)

    def _step(self, mul: tuple[int, ...]) -> View:
        if all(m == 1 for m in mul):
            return self
        shape = tuple(_ceildiv(size, m) for size, m in zip(self.shape, mul))
        mask = tuple((_ceildiv(lo, m), _ceildiv(hi, m)) for (lo, hi), m in zip(self.mask, mul)) if self.mask else None
        return View.create(shape, tuple(st * m for st, m in zip(self.strides, mul)), self.offset, mask)

    def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
        """The same elements in a new shape as one view, or None when one view cannot express it."""
        new_shape = tuple(to_sint(s) for s in new_shape)
        if any(isinstance(s, int) and s < 0 for s in new_shape) or to_sint(prod(new_shape)) != self.size:
            raise ValueError(f"reshape: cannot reshape {self.shape} to {new_shape}: the number of elements differs")
        if new_shape == self.shape:
            return self
        if 0 in self.shape or self.contiguous:
            return View.create(new_shape)
        if self.mask is not None and _is_empty(*self.mask[0]):
            # no element is valid; a 0-d view has no axis to mask, so it stays on top of this one (one view would
            # read the buffer: `(x.pad(((0, 1),)) * 2)[1:2].sum()` gave 2 and read past a buffer's end)
            return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
        return _reshape_strided(self, new_shape)

    def minify(self) -> View:
        """The same view with mergeable adjacent axes merged."""
        shape, prev = [], None
        for axis, size in enumerate(self.shape):
            if size == 1:
                continue
            mask = self.mask[axis] if self.mask is not None else (0, size)
            full = mask == (0, size)
            if prev is not None and prev[2] and full and prev[1] == to_sint(self.strides[axis] * size):
                shape[-1] = to_sint(shape[-1] * size)
            else:
                shape.append(size)
            prev = (size, self.strides[axis], full)
        return self.reshape(tuple(shape)) or self

    def __add__(self, other: View) -> View | None:
        """`other` applied on top of this (older) view, as one view; None when that is not one view."""
        if other.contiguous and other.shape == self.shape:
            return self
        if other.contiguous and other.size == self.size and (reshaped := self.reshape(other.shape)) is not None:
            return reshaped  # a contiguous view over this one is a reshape of it (also for symbolic shapes)
        if self.contiguous or 0 in other.shape or (other.mask is not None and _is_empty(*other.mask[0])):
            return other
        if self.mask is not None and _is_empty(*self.mask[0]):  # (0-d: no axis to mask, see `reshape`)
            return View.create(other.shape, mask=((0, 0),) * len(other.shape)) if other.shape else None
        if all_int(self.shape + other.shape):
            return _merge_views(self, other)
        return _merge_window(self, other)


def _merge_window(old: View, new: View) -> View | None:
    """`new` over `old` as one view when `new` is a window of `old`'s contiguous layout (a pad, or a shrink that
    starts at 0): same axes, the contiguous strides of `old.shape`, and an offset that the mask's starts account
    for. `_merge_views` cannot compose symbolic sizes (it would take an index modulo a variable); a window composes
    without unravelling. Axes of `new` with stride 0 (an expand, or an inserted axis padded: `Tensor.stack`) are
    set aside, the others merged, and those put back."""
    if len(new.shape) != len(old.shape):
        keep = [axis for axis, st in enumerate(new.strides) if not (isinstance(st, int) and st == 0)]
        if len(keep) != len(old.shape) or len(keep) == len(new.shape):
            return None
        inner = View.create(tuple(new.shape[a] for a in keep), tuple(new.strides[a] for a in keep), new.offset,
                            tuple(new.mask[a] for a in keep) if new.mask is not None else None)  # fmt: skip
        if (part := _merge_window(old, inner)) is None:
            return None
        strides: list[sint] = [0] * len(new.shape)
        bounds: list[tuple[sint, sint]] = list(new.mask or [(0, size) for size in new.shape])
        for k, axis in enumerate(keep):
            strides[axis] = part.strides[k]
            bounds[axis] = part.mask[k] if part.mask is not None else (0, new.shape[axis])
        return View.create(new.shape, tuple(strides), part.offset, tuple(bounds))
    contiguous = strides_for_shape(old.shape)
    if any(size != 1 and st != want for size, st, want in zip(new.shape, new.strides, contiguous)):
        return None
    starts = [-lo for lo, _ in new.mask] if new.mask is not None else [0] * len(new.shape)
    if to_sint(new.offset - sum(start * st for start, st in zip(starts, contiguous))) != 0:
        return None
    try:
        merged = old._resize(tuple((start, start + size) for start, size in zip(starts, new.shape)))
        if new.mask is None:
            return merged
        mask = merged.mask or tuple((0, size) for size in merged.shape)
        both = tuple((_smax(a, c), _smin(b, d)) for (a, b), (c, d) in zip(mask, new.mask))
    except ValueError:  # an order of symbolic bounds that their ranges do not decide
        return None
    return View.create(merged.shape, merged.strides, merged.offset, both)


def _reshape_strided(view: View, new_shape: tuple[sint, ...]) -> View | None:
    """Reshape by groups of axes whose sizes multiply to the same number; size-1 axes are dropped and re-inserted."""
    old = [(size, st, m) for size, st, m in zip(view.shape, view.strides, view.mask or [None] * len(view.shape))]
    old = [(size, st, m if m is not None else (0, size)) for size, st, m in old if size != 1]
    new_axes = [axis for axis, size in enumerate(new_shape) if size != 1]
    groups = _group_axes([size for size, _, _ in old], [new_shape[axis] for axis in new_axes])
    if groups is None:
        return None
    strides: list[sint] = [0] * len(new_shape)
    mask: list[tuple[sint, sint]] = [(0, 1)] * len(new_shape)
    offset = view.offset
    for (o0, o1), (n0, n1) in groups:
        if (split := _reshape_group(old[o0:o1], [new_shape[axis] for axis in new_axes[n0:n1]])) is None:
            return None
        group_strides, group_mask, delta = split
        for axis, st, m in zip(new_axes[n0:n1], group_strides, group_mask):
            strides[axis], mask[axis] = st, m
        offset = to_sint(offset + delta)
    return View.create(new_shape, strides, offset, mask)


def _group_axes(old: list[sint], new: list[sint]) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Pair runs of old and new axes (no size-1 axes) with equal products; a symbolic axis must map to itself."""
    groups, i, j = [], 0, 0
    while i < len(old) and j < len(new):
        i0, j0, acc_old, acc_new = i, j, old[i], new[j]
        i, j = i + 1, j + 1
        if is_sym(acc_old) or is_sym(acc_new):
            if acc_old != acc_new:
                return None
        while acc_old != acc_new:
            if acc_old < acc_new and i < len(old) and not is_sym(old[i]):
                acc_old, i = acc_old * old[i], i + 1
            elif acc_new < acc_old and j < len(new) and not is_sym(new[j]):
                acc_new, j = acc_new * new[j], j + 1
            else:
                return None
        groups.append(((i0, i), (j0, j)))
    return groups if i == len(old) and j == len(new) else None


def _reshape_group(old: list[tuple[Any, Any, Any]], new_sizes: list[Any]) -> tuple[list, list, sint] | None:
    """Strides, mask and offset change for new axes `new_sizes` covering old axes `old` = [(size, stride, mask)].

    The valid elements of the group are a box; flattened row-major it must be one interval of addresses that advance
    by a fixed unit `u`: every axis inside the outermost axis with more than one valid index must be fully valid, and
    those axes must have strides `u * weight`. The interval must then be a box in the new axes too.
    """
    if len(old) == 1 and len(new_sizes) == 1:
        return [old[0][1]], [old[0][2]], 0
    sizes, strides, masks = zip(*old)
    if any(is_sym(x) for x in sizes + tuple(b for m in masks for b in m)):
        return None  # whether a symbolic mask covers one or many indices is not known for every value: keep the views
    weights = _suffix_products(sizes)
    wide = [k for k, (lo, hi) in enumerate(masks) if hi - lo > 1]
    first = wide[0] if wide else len(old)
    if any(masks[k] != (0, sizes[k]) for k in range(first + 1, len(old))):
        return None
    unit = strides[-1] if wide else 0
    if any(to_sint(unit * weights[k]) != strides[k] for k in range(first, len(old))):
        return None
    flat_base = sum(masks[k][0] * weights[k] for k in range(first))
    fixed_addr = to_sint(sum(masks[k][0] * strides[k] for k in range(first)))
    if wide:
        interval = (flat_base + masks[first][0] * weights[first], flat_base + masks[first][1] * weights[first])
    else:
        interval = (flat_base, flat_base + 1)
    if (box := _interval_to_box(*interval, new_sizes)) is None:
        return None
    new_strides = [to_sint(unit * w) for w in _suffix_products(new_sizes)]
    return new_strides, box, to_sint(fixed_addr - unit * flat_base)


def _interval_to_box(start: int, end: int, sizes: list[int]) -> list[tuple[int, int]] | None:
    """The box of row-major flat indices `[start, end)` in an array of `sizes`, or None if they are not a box."""
    weights = _suffix_products(sizes)
    for axis, (size, weight) in enumerate(zip(sizes, weights)):
        block = weight * size
        if start % weight or end % weight or start // block != (end - 1) // block:
            continue
        lo = (start // weight) % size
        outer = [((start // weights[k]) % sizes[k],) * 2 for k in range(axis)]
        return (
            [(a, a + 1) for a, _ in outer] + [(lo, lo + (end - start) // weight)] + [(0, s) for s in sizes[axis + 1 :]]
        )
    return None


def unravel(shape: Sequence[sint], flat: Node) -> list[Node]:
    """Row-major indices into `shape` of the flat index `flat` (assumed in range: the outermost axis is not wrapped)."""
    if 0 in shape:
        return [NumNode(0)] * len(shape)  # no elements: any index will do
    idxs: list[Node] = []
    acc: sint = 1
    for axis in reversed(range(len(shape))):
        quot = flat // acc
        idxs.append(NumNode(0) if shape[axis] == 1 else quot if axis == 0 else quot % shape[axis])
        acc = to_sint(acc * shape[axis])
    return idxs[::-1]


def _merge_views(old: View, new: View) -> View | None:
    """Compose symbolically over the valid box of `new`; one view iff the index is affine and the valid set a box."""
    box = new.mask or tuple((0, size) for size in new.shape)
    ranges = [(lo, hi) for lo, hi in box if isinstance(lo, int) and isinstance(hi, int)]
    if len(ranges) != len(box):
        return None
    gvars = [Variable(f"_merge{axis}", lo, hi - 1) for axis, (lo, hi) in enumerate(ranges)]
    flat, _ = new.expr_idxs(gvars)
    idx, valid = old.expr_idxs(unravel(old.shape, flat))
    if (affine := _affine(idx, gvars)) is None or (mask := _box_from_valid(valid, gvars, box)) is None:
        return None
    return View.create(new.shape, affine[0], affine[1], mask)


def _affine(node: Node, gvars: list[Variable]) -> tuple[list[sint], sint] | None:
    """(coefficient of each of `gvars`, the rest) when `node` is linear in `gvars`, else None."""
    coeffs: dict[Node, sint] = {v: 0 for v in gvars}
    rest: list[Node] = []
    for term in node.nodes if isinstance(node, SumNode) else [node]:
        if term in coeffs:
            coeffs[term] = to_sint(coeffs[term] + 1)
        elif isinstance(term, MulNode) and term.a in coeffs:
            coeffs[term.a] = to_sint(coeffs[term.a] + term.b)
        elif term.vars().isdisjoint(gvars):
            rest.append(term)
        else:
            return None
    return [coeffs[v] for v in gvars], to_sint(Node.sum(rest))


def _box_from_valid(valid: Node, gvars: list[Variable], box: Mask) -> Mask | None:
    """Narrow `box` by `valid` when it is a conjunction of single-variable bounds (`g < c`, `k*g < c` for an integer
    k: a strided slice's padding, `2*g < 5`, bounds g by 3), else None."""
    if isinstance(valid, NumNode):  # (never valid in 0-d: no axis to mask, so not one view)
        return box if valid.b else ((0, 0),) * len(box) if box else None
    axis_of: dict[Node, int] = {v: axis for axis, v in enumerate(gvars)}
    bounds = [list(pair) for pair in box]
    for part in valid.nodes if isinstance(valid, AndNode) else [valid]:
        if not isinstance(part, LtNode) or not isinstance(part.b, int):
            return None
        if part.a in axis_of:
            bound = bounds[axis_of[part.a]]
            bound[1] = min(bound[1], part.b)  # g < c
        elif isinstance(part.a, MulNode) and isinstance(k := part.a.b, int) and k != 0 and part.a.a in axis_of:
            bound = bounds[axis_of[part.a.a]]
            if k > 0:
                bound[1] = min(bound[1], -(-part.b // k))  # k*g < c <=> g < ceil(c/k)
            else:
                bound[0] = max(bound[0], part.b // k + 1)  # k*g < c <=> g > c/k <=> g >= floor(c/k) + 1
        else:
            return None
    return tuple((lo, hi) for lo, hi in bounds)

"""`Tensor` methods that move and view data: reshape, expand, permute, pad, shrink, flip and what is built from them
(cat, stack, split, repeat, roll, diagonals, triangles, unfold, rearrange). A mixin of `Tensor` on `TensorBase`:
tensor.py had grown two concepts, the array with its autograd and realization, and its views."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lazy import function as F
from lazy.dtype import ConstType, dtypes, least_upper_dtype
from lazy.helpers import ArgumentError, ShapeError, argfix, check_int, prod
from lazy.symbolic import Node, concrete, sint
from lazy.tensor_base import PyFloat, PyInt, TensorBase
from lazy.tensor_create import _check_sizes

if TYPE_CHECKING:
    from typing_extensions import Self

PAD_MODES = ("constant", "reflect", "replicate", "circular")


class ModeError(ArgumentError, NotImplementedError):
    """A mode an op does not have (`pad`'s): the NotImplementedError tinygrad and PyTorch raise, besides the types of
    `ArgumentError`."""


class MovementMixin(TensorBase):
    """Movement and view operations of `Tensor`."""

    __slots__ = ()

    def _resolve_shape(self, shape: tuple[Any, ...]) -> tuple[sint, ...]:
        if sum(1 for s in shape if isinstance(s, int) and s == -1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {shape}")
        if -1 in shape:
            known = prod(s for s in shape if not (isinstance(s, int) and s == -1))
            if known == 0 or self.numel() % known != 0:
                raise ShapeError(f"reshape: cannot reshape {self.shape} to {shape}")
            shape = tuple(self.numel() // known if isinstance(s, int) and s == -1 else s for s in shape)
        return shape

    def reshape(self, shape: Any, *args: Any) -> Self:
        """The same elements in a new shape; one size may be -1 (inferred), None keeps that axis's size."""
        wanted = _check_sizes(argfix(shape, *args), "reshape", keep=(-1, None))
        if any(s is None for s in wanted):
            if len(wanted) > self.ndim:
                raise ShapeError(f"reshape: None keeps an axis's size, but {wanted} has more axes than {self.shape}")
            wanted = tuple(self.shape[i] if s is None else s for i, s in enumerate(wanted))
        new_shape = self._resolve_shape(wanted)
        if prod(new_shape) != self.numel():
            raise ShapeError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {new_shape}")
        return self if new_shape == self.shape else self._apply(F.Reshape, shape=new_shape)

    def view(self, *shape: Any) -> Self:
        """`reshape`, with the shape given as arguments or a tuple (PyTorch's name)."""
        return self.reshape(argfix(*shape))

    def expand(self, shape: Any, *args: Any) -> Self:
        """A view in which axes of size 1 repeat to `shape` (ints or one tuple; -1 keeps an axis's size; new axes are
        added in front). Nothing is copied."""
        new_shape = _check_sizes(argfix(shape, *args), "expand", keep=(-1,))
        if len(new_shape) < self.ndim:
            raise ShapeError(f"expand: cannot expand {self.shape} to fewer dimensions {new_shape}")
        padded = (1,) * (len(new_shape) - self.ndim) + self.shape
        if any(isinstance(s, int) and s == -1 for s in new_shape[: len(new_shape) - self.ndim]):
            raise ShapeError(f"expand: -1 (keep the size) in a new leading axis of {new_shape}: {self.shape} has no "
                             "such axis to keep; give its size")  # fmt: skip
        target = tuple(p if isinstance(s, int) and s == -1 else s for s, p in zip(new_shape, padded))
        for p, s in zip(padded, target):
            if p != s and not (isinstance(p, int) and p == 1):
                raise ShapeError(f"expand: cannot expand {self.shape} to {new_shape}")
        x = self.reshape(padded) if padded != self.shape else self
        return x if target == x.shape else x._apply(F.Expand, shape=target)

    def _resolve_axis(self, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not isinstance(axis, int):  # numpy integers are accepted (as PyTorch does); anything else is named
            if not hasattr(axis, "__index__"):
                raise TypeError(f"an axis must be an integer, got {axis!r} (shape {self.shape})")
            axis = int(axis)
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(f"axis {axis} is out of range for a tensor with {n} dimensions (shape {self.shape})")
        return axis + n if axis < 0 else axis

    def permute(self, order: Any, *args: Any) -> Self:
        """A view with the axes in `order` (ints or one tuple; negative counts from the end)."""
        order = tuple(self._resolve_axis(a) for a in argfix(order, *args))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        # the axes in their order: self, as reshape to the same shape gives (composite ops permute "to" the order
        # they already have, and every recorded op costs an eager op's Python)
        return self if order == tuple(range(self.ndim)) else self._apply(F.Permute, order=order)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """A view with axes `dim0` and `dim1` swapped (by default the first two)."""
        order = list(range(self.ndim))
        a, b = self._resolve_axis(dim0), self._resolve_axis(dim1)
        if self.ndim == 0:  # (axes 0 and -1 name a 0-d tensor itself, as in PyTorch)
            return self
        order[a], order[b] = order[b], order[a]
        return self.permute(tuple(order))

    @property
    def T(self) -> Self:
        """`transpose()`: the first two axes swapped (a matrix's transpose). Unlike PyTorch's `.T`, which reverses all
        axes, it swaps only those two for more than two axes."""
        return self.transpose()

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Axes `start_dim` to `end_dim` (both included) merged into one."""
        start, end = self._resolve_axis(start_dim), self._resolve_axis(end_dim)
        if start > end and self.ndim:
            raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} (shape {self.shape})")
        return self.reshape(self.shape[:start] + (prod(self.shape[start : end + 1]),) + self.shape[end + 1 :])

    def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Self:
        """Axis `dim` split into axes of `sizes`."""
        dim = self._resolve_axis(dim)
        sizes = tuple(sizes)
        n = self.shape[dim]
        if sizes.count(-1) == 1 and isinstance(n, int):  # the -1 worked out from this axis alone (a 0 elsewhere in
            # the shape would leave reshape nothing to divide)
            known = prod(s for s in sizes if s != -1)
            if known and n % known == 0:
                sizes = tuple(n // known if s == -1 else s for s in sizes)
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])

    def squeeze(self, dim: int | None = None) -> Self:
        """Every axis of size 1 removed, or with `dim` only that axis (self when its size is not 1)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._resolve_axis(dim)
        if self.ndim == 0 or self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def unsqueeze(self, dim: int) -> Self:
        """A new axis of size 1 at `dim` (negative counts from the end of the result)."""
        dim = self._resolve_axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Self:
        """`padding`: ((before, after), ...) per axis, or a flat torch-style tuple for the last axes, last axis
        first; a negative amount crops. `mode`: "constant" (with `value`), "reflect", "replicate" or "circular"."""
        if mode not in PAD_MODES:
            raise ModeError(f"pad: mode must be one of {', '.join(map(repr, PAD_MODES))}, got {mode!r}")
        if mode != "constant" and value != 0:
            raise ArgumentError(f"pad: a fill value ({value}) goes only with mode='constant'; {mode!r} pads with the "
                                "tensor's own elements")  # fmt: skip
        if not isinstance(padding, Sequence) or isinstance(padding, str):
            raise ArgumentError(f"pad: padding must be a sequence of amounts, flat (torch-style) or a (before, after) "
                                f"pair per axis, got {padding!r}")  # fmt: skip
        if len(padding) == 0:  # nothing to pad (PyTorch's and tinygrad's no-op)
            return self
        if padding and not isinstance(padding[0], (tuple, list)) and padding[0] is not None:
            flat = list(padding)
            if len(flat) % 2:
                raise ValueError(f"pad: flat padding needs an even number of values, got {flat}")
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            arg = [(0, 0)] * (self.ndim - len(pairs)) + pairs
        else:
            arg = [(0, 0) if p is None else tuple(p) for p in padding]
        if len(arg) != self.ndim:
            raise ShapeError(f"pad: padding {padding} does not match the {self.ndim} axes of {self.shape}")
        if any(len(pair) != 2 or not all(hasattr(v, "__index__") or hasattr(v, "vars") for v in pair) for pair in arg):
            raise ArgumentError(f"pad: padding {padding} must be whole numbers of elements, (before, after) per axis")
        arg = [tuple(v if hasattr(v, "vars") else int(v) for v in pair) for pair in arg]  # (numpy integers too)
        for axis, ((b, a), size) in enumerate(zip(arg, self.shape)):
            if not (isinstance(size, int) and isinstance(b, int) and isinstance(a, int)):
                continue
            # reflect and replicate crop after growing the axis (below): the growth counts
            grown = size if mode in ("constant", "circular") else size + max(b, 0) + max(a, 0)
            if -min(b, 0) - min(a, 0) > grown:
                raise ShapeError(f"pad: padding {(b, a)} crops {-min(b, 0) - min(a, 0)} elements from axis {axis}, "
                                 f"which has {grown} (shape {self.shape})")  # fmt: skip
        if not any(b < 0 or a < 0 for b, a in arg):
            return self._pad_grown(tuple(arg), mode, value)
        grow = tuple((max(b, 0), max(a, 0)) for b, a in arg)
        # constant and circular padding crop first (the wrap reads what is left); reflect and replicate mirror or
        # repeat the whole axis, then crop (the order of PyTorch and tinygrad)
        if mode in ("constant", "circular"):
            return self._crop(tuple(arg))._pad_grown(grow, mode, value)
        return self._pad_grown(grow, mode, value)._crop(tuple(arg))

    def pad2d(self, padding: Sequence[Any], value: PyFloat = 0.0) -> Self:
        """`pad(padding, value=value)`: older tinygrad's name."""
        return self.pad(padding, value=value)

    def _crop(self, arg: tuple[tuple[sint, sint], ...]) -> Self:
        """Drop -before and -after elements where they are negative."""
        return self.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(arg, self.shape)))

    def _pad_grown(self, arg: tuple[tuple[sint, sint], ...], mode: str, value: float) -> Self:
        """`pad` by amounts >= 0."""
        if mode != "constant":
            return self._pad_mode(arg, mode)  # type: ignore[arg-type]
        if all(b == 0 and a == 0 for b, a in arg):
            return self
        out = self._apply(F.Pad, arg=arg)
        if value != 0:
            mask = type(self).ones(*self.shape, dtype=dtypes.bool, device=self.device)._apply(F.Pad, arg=arg)
            out = mask.where(out, value)
        return out

    def _pad_mode(self, arg: tuple[tuple[int, int], ...], mode: str) -> Self:
        """Padding filled from the tensor itself, one axis at a time: mirrored ("reflect", edge not repeated), the
        edge value ("replicate") or wrapped around ("circular")."""
        x = self
        for axis, (before, after) in enumerate(arg):
            n = x.shape[axis]
            assert isinstance(n, int), "pad modes need concrete sizes"
            if before == after == 0:
                continue
            limit = n - 1 if mode == "reflect" else n if mode == "circular" else math.inf
            if max(before, after) > limit or (n == 0 and before + after):
                raise ValueError(f"pad: {mode} padding {(before, after)} is too large for an axis of size {n}")

            if mode == "reflect":
                left = x._axis_range(axis, 1, before + 1).flip(axis)
                right = x._axis_range(axis, n - 1 - after, n - 1).flip(axis)
            elif mode == "circular":
                left, right = x._axis_range(axis, n - before, n), x._axis_range(axis, 0, after)
            else:
                edge = [s if i != axis else 1 for i, s in enumerate(x.shape)]
                left = x._axis_range(axis, 0, 1).expand(tuple(before if i == axis else s for i, s in enumerate(edge)))
                right = x._axis_range(axis, n - 1, n).expand(
                    tuple(after if i == axis else s for i, s in enumerate(edge))
                )
            pieces = [p for p in (left, x, right) if p.shape[axis] != 0]
            x = pieces[0].cat(*pieces[1:], dim=axis)
        return x

    def _axis_range(self, axis: int, start: sint, stop: sint) -> Self:
        """The range [start, stop) of axis `axis`, the other axes whole."""
        return self.shrink(tuple((start, stop) if i == axis else None for i in range(self.ndim)))

    def shrink(self, arg: Sequence[tuple[sint, sint] | None]) -> Self:
        """A view of the range (start, end) of each axis (None keeps an axis whole): tinygrad's primitive for slices."""
        if len(arg) != self.ndim:
            raise ShapeError(f"shrink: {arg} does not match the {self.ndim} axes of {self.shape}")
        full = tuple((0, s) if a is None else tuple(a) for a, s in zip(arg, self.shape))
        for (b, e), s in zip(full, self.shape):
            if isinstance(b, int) and isinstance(e, int) and isinstance(s, int) and not 0 <= b <= e <= s:
                raise ShapeError(f"shrink: range {(b, e)} is outside an axis of size {s} (shape {self.shape})")
        if all(b == 0 and e == s for (b, e), s in zip(full, self.shape)):
            return self
        return self._apply(F.Shrink, arg=full)

    def flip(self, axis: Any, *args: Any) -> Self:
        """The elements in reverse order along the given axes (one or more ints, or a tuple)."""
        axes = tuple(self._resolve_axis(a) for a in argfix(axis, *args))
        if len(set(axes)) != len(axes):
            raise ShapeError(f"flip: axis {argfix(axis, *args)} names a dimension twice (shape {self.shape})")
        return self._apply(F.Flip, axis=axes) if axes else self

    def _stride(self, axis: int, step: int) -> Self:
        """Every `step`-th element along `axis` (step > 0)."""
        if step == 1:
            return self
        n = self.shape[axis]
        n = concrete(n, "a strided slice")
        count = math.ceil(n / step)
        padded = self.pad(tuple((0, count * step - n) if i == axis else (0, 0) for i in range(self.ndim)))
        shape = self.shape[:axis] + (count, step) + self.shape[axis + 1 :]
        picked = padded.reshape(shape).shrink(tuple((0, 1) if i == axis + 1 else (0, s) for i, s in enumerate(shape)))
        return picked.reshape(self.shape[:axis] + (count,) + self.shape[axis + 1 :])

    def cat(self, *others: Self, dim: int = 0) -> Self:
        """self and `others` joined along the existing axis `dim` (shapes equal elsewhere; the dtype is their common
        one). Called on the first tensor, `a.cat(b, c, dim=1)`, or PyTorch's way, `Tensor.cat([a, b, c], dim=1)`."""
        if isinstance(self, (list, tuple)):
            if others:
                raise ArgumentError("cat: pass the tensors either as one list, Tensor.cat([a, b]), or as a.cat(b), "
                                    "not both")  # fmt: skip
            if not self:
                raise ArgumentError("cat: no tensors to join; pass at least one")
            return self[0].cat(*self[1:], dim=dim)
        others = tuple(self._operand(t, "cat", "each tensor") for t in others)
        if any(t.ndim == 0 for t in (self, *others)):
            raise ShapeError("cat: a 0-d tensor has no axis to join along; use stack, or reshape it to (1,) first")
        dim = self._resolve_axis(dim)
        tensors = (self,) + others
        for t in others:
            if t.device != self.device:  # (named here: the join would name its own op, a where)
                raise ValueError(f"cat: tensors are on different devices ({self.device} and {t.device}); move them to "
                                 "one with .to() first")  # fmt: skip
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != dim):
                raise ShapeError(f"cat: shapes {self.shape} and {t.shape} differ outside dimension {dim}")
        dtype = least_upper_dtype(*(t.dtype for t in tensors))
        total = sum(t.shape[dim] for t in tensors)
        out: Self | None = None
        offset = 0
        for t in tensors:
            size = t.shape[dim]
            place = tuple((offset, total - offset - size) if i == dim else (0, 0) for i in range(self.ndim))
            padded = t.cast(dtype).pad(place)
            if out is None:
                out = padded
            elif dtypes.is_float(dtype):  # selected, not added: -0.0 + 0.0 (the others' padding) would be +0.0
                out = t.ones_like(dtype=dtypes.bool).pad(place).where(padded, out)
            else:
                out = out + padded
            offset += size  # type: ignore[assignment]
        assert out is not None
        return out

    def stack(self, *others: Self, dim: int = 0) -> Self:
        """Join tensors of one shape along a new axis `dim` (`Tensor.stack(a, b)` or `a.stack(b)`)."""
        tensors = argfix(self, *others)
        first = tensors[0]
        for t in tensors[1:]:
            if t.shape != first.shape:
                raise ShapeError(f"stack: shapes {first.shape} and {t.shape} differ")
        dim = first._resolve_axis(dim, first.ndim + 1)
        return tensors[0].unsqueeze(dim).cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)

    def repeat(self, repeats: Any, *args: Any) -> Self:
        """The tensor tiled `repeats[i]` times along axis i (PyTorch's `repeat`; extra leading repeats add axes)."""
        reps = argfix(repeats, *args)
        if len(reps) < self.ndim:
            raise ShapeError(f"repeat: {reps} gives fewer repeats than the {self.ndim} axes of {self.shape}")
        if any(not isinstance(r, int) or r < 0 for r in reps):
            raise ArgumentError(f"repeat: repeats must be whole numbers >= 0, got {reps}")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        expanded = base.reshape(tuple(x for s in base.shape for x in (1, s)))
        expanded = expanded.expand(tuple(x for r, s in zip(reps, base.shape) for x in (r, s)))
        return expanded.reshape(tuple(r * s for r, s in zip(reps, base.shape)))

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces of `sizes` elements along `dim` (the last one shorter), or of each size in a list of them."""
        dim = self._resolve_axis(dim)
        n = self.shape[dim]
        n = concrete(n, "split")
        if isinstance(sizes, Sequence):
            parts = list(_check_sizes(tuple(sizes), "split"))
        else:
            (size,) = _check_sizes((sizes,), "split")
            if size == 0 and n:
                raise ValueError(f"split: split_size must be a positive int, got 0 (dimension {dim} of {self.shape})")
            parts = [min(size, n - start) for start in range(0, n, size)] if n else [0]
        if sum(parts) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n} (dimension {dim} of {self.shape})")
        out, offset = [], 0
        for p in parts:
            out.append(self.shrink(tuple((offset, offset + p) if i == dim else None for i in range(self.ndim))))
            offset += p
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """At most `chunks` pieces of equal size along `dim` (the last one shorter)."""
        n = self.shape[self._resolve_axis(dim)]
        n = concrete(n, "chunk")
        if type(chunks) is not int or chunks <= 0:
            raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
        if n == 0:  # `chunks` empty pieces (PyTorch's and tinygrad's): `a, b = x.chunk(2)` of an empty batch
            return self.split([0] * chunks, dim)
        return self.split(math.ceil(n / chunks), dim)

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Self:
        """Each element `repeats` times in a row along `dim` (the flattened tensor when None)."""
        if not isinstance(repeats, int) or repeats < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be a whole number >= 0, got {repeats!r}")
        x, axis = (self.flatten(), 0) if dim is None else (self, self._resolve_axis(dim))
        shape = x.shape
        x = x.reshape(shape[: axis + 1] + (1,) + shape[axis + 1 :]).expand(
            shape[: axis + 1] + (repeats,) + shape[axis + 1 :]
        )
        return x.reshape(shape[:axis] + (shape[axis] * repeats,) + shape[axis + 1 :])

    def roll(self, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Self:
        """Shift elements circularly along `dims` (the flattened tensor when None)."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        axes = tuple(self._resolve_axis(d) for d in ((dims,) if isinstance(dims, int) else dims))
        amounts = (shifts,) if hasattr(shifts, "__index__") else tuple(shifts) if isinstance(shifts, Sequence) else ()
        if not amounts or not all(hasattr(a, "__index__") for a in amounts):
            raise ArgumentError(f"roll: shifts must be whole numbers of elements (an int or a tuple of them), got "
                                f"{shifts!r}")  # fmt: skip
        amounts = tuple(int(a) for a in amounts)
        if len(axes) != len(amounts):
            raise ArgumentError(f"roll: {len(amounts)} shifts for {len(axes)} dims; give one shift per dim")
        if 0 in self.shape:
            return self
        total: dict[int, int] = {}  # a dim named twice is rolled by the sum of its shifts (PyTorch's)
        for axis, shift in zip(axes, amounts):
            total[axis] = total.get(axis, 0) + shift
        window: list[tuple[sint, sint] | None] = [None] * self.ndim
        for axis, shift in total.items():
            size = self.shape[axis]
            start = size - shift % size
            window[axis] = (start, start + size)
        # two copies side by side hold every rotation as a window
        return self.repeat(tuple(2 if i in axes else 1 for i in range(self.ndim))).shrink(window)

    def meshgrid(self, *args: Self, indexing: str = "ij") -> tuple[Self, ...]:
        """Coordinate grids from 1-D (or scalar) tensors; `indexing` "ij" (matrix) or "xy" (Cartesian)."""
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f'meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
        tensors = (self, *args)
        if len(tensors) == 1:
            return tensors
        sizes = [int(prod(t.shape)) for t in tensors]
        order = list(range(len(tensors)))
        if indexing == "xy":
            order[0], order[1] = 1, 0
        shape = tuple(sizes[i] for i in order)
        out = []
        for i, t in enumerate(tensors):
            axis = order.index(i)
            out.append(t.reshape(tuple(sizes[i] if a == axis else 1 for a in range(len(shape)))).expand(shape))
        return tuple(out)

    @classmethod
    def _tri(cls, rows: PyInt, cols: PyInt, diagonal: PyInt, device: str | None) -> Self:
        """(rows, cols) bool mask, True where col - row >= diagonal (the upper triangle)."""
        return cls.arange(rows, device=device).unsqueeze(-1) + diagonal <= cls.arange(cols, device=device)

    def triu(self, diagonal: int = 0) -> Self:
        """The upper triangle of the last two axes: elements with column - row >= `diagonal` kept, the others 0."""
        self._check_matrix("triu")
        rows, cols = self.shape[-2], self.shape[-1]
        rows, cols = concrete(rows, "triu"), concrete(cols, "triu")
        return type(self)._tri(rows, cols, diagonal, self.device).where(self, self.zeros_like())

    def tril(self, diagonal: int = 0) -> Self:
        """The lower triangle of the last two axes: elements with column - row <= `diagonal` kept, the others 0."""
        self._check_matrix("tril")
        rows, cols = self.shape[-2], self.shape[-1]
        rows, cols = concrete(rows, "tril"), concrete(cols, "tril")
        return type(self)._tri(rows, cols, diagonal + 1, self.device).where(self.zeros_like(), self)

    def _check_matrix(self, op: str) -> None:
        if self.ndim < 2:
            raise ShapeError(f"{op}: needs a matrix (at least 2 dimensions), got shape {self.shape}")

    def masked_fill(self, mask: Self, value: Self | ConstType) -> Self:
        """`value` where `mask` is True, self elsewhere (broadcast)."""
        return self._operand(mask, "masked_fill", "the mask").where(value, self)

    # -- diagonals, windows, padding to a shape --------------------------------------------------------------------

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal of axes dim1 and dim2 (above it for offset > 0, below for < 0), as a new last axis."""
        offset = check_int("diagonal", "offset", offset)
        a, b = self._resolve_axis(dim1), self._resolve_axis(dim2)
        if a == b:
            raise ShapeError(f"diagonal: dim1 and dim2 are the same axis ({a}) of {self.shape}")
        x = self.permute(tuple(i for i in range(self.ndim) if i not in (a, b)) + (a, b))
        lead: tuple[None, ...] = (None,) * (x.ndim - 2)
        rows, cols = x.shape[-2], x.shape[-1]
        assert isinstance(rows, int) and isinstance(cols, int), "diagonal needs concrete sizes"
        x = x.shrink(
            lead + ((0, rows), (min(offset, cols), cols))
            if offset >= 0
            else lead + ((min(-offset, rows), rows), (0, cols))
        )
        d = min(x.shape[-2], x.shape[-1])
        d = concrete(d, "diagonal")
        if d == 0:
            return x.reshape(*x.shape[:-2], 0)
        # a d x d block read with a row length of d + 1 walks down its diagonal
        x = x.shrink(lead + ((0, d), (0, d))).flatten(-2)
        x = x.pad(lead + ((0, d),)).reshape(*x.shape[:-1], d, d + 1)
        return x.shrink(lead + ((0, d), (0, 1))).reshape(*x.shape[:-2], d)

    def diag(self) -> Self:
        """A 1-d tensor as the diagonal of a square matrix (zeros elsewhere)."""
        if self.ndim != 1:
            raise ShapeError(f"diag: expects a 1-d tensor, got shape {self.shape}")
        n = self.shape[0]
        n = concrete(n, "diag")
        return self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)

    def pad_to(self, shape: Any, *args: Any, value: ConstType = 0) -> Self:
        """Pad at the end of each axis up to `shape` (None keeps an axis)."""
        target = argfix(shape, *args)
        if len(target) != self.ndim:
            raise ShapeError(f"pad_to: {target} does not match the {self.ndim} axes of {self.shape}")
        if any(t is not None and not isinstance(t, Node) and not isinstance(s, Node) and t < s
               for s, t in zip(self.shape, target)):  # fmt: skip
            raise ShapeError(f"pad_to: {tuple(target)} is smaller than {self.shape} on some axis; padding only grows "
                             "a tensor (shrink_to makes it smaller)")  # fmt: skip
        return self.pad(tuple((0, 0) if t is None else (0, t - s) for s, t in zip(self.shape, target)), value=value)

    def shrink_to(self, shape: Any, *args: Any) -> Self:
        """Keep the first `shape` elements of each axis (None keeps an axis)."""
        target = argfix(shape, *args)
        if len(target) != self.ndim:
            raise ShapeError(f"shrink_to: {target} does not match the {self.ndim} axes of {self.shape}")
        return self.shrink(tuple(None if t is None else (0, t) for t in target))

    def unfold(self, dim: int, size: int, step: int) -> Self:
        """Windows of `size` every `step` along `dim`: that axis becomes (n_windows, ...) and a new last axis `size`."""
        if self.ndim == 0:
            raise ShapeError("unfold: a 0-d tensor has no dimension to take windows along; reshape it to (1,) first")
        d = self._resolve_axis(dim)
        n = self.shape[d]
        if step <= 0:
            raise ArgumentError(f"unfold: step must be at least 1, got {step}")
        if size < 0 or not isinstance(n, int) or size > n:
            raise ShapeError(f"unfold: size={size}, step={step} do not fit dimension {dim} of {self.shape}")
        order = tuple(i for i in range(self.ndim) if i != d) + (d,)
        win = self.permute(order)._windows((size,), (step,), (1,))  # (..., n_windows, size)
        back = [order.index(i) for i in range(self.ndim)]
        return win.permute(tuple(back) + (self.ndim,))

    def rearrange(self, formula: str, **sizes: int) -> Self:
        """einops-style "b (h w) c -> b c h w": split groups in parentheses on the left (sizes by keyword or -1),
        permute by name, merge groups on the right; "..." stands for the axes not named."""

        def parse(side: str) -> list[list[str]]:
            groups: list[list[str]] = []
            current: list[str] | None = None
            for tok in side.replace("(", " ( ").replace(")", " ) ").split():
                if tok == "(" and current is None:
                    current = []
                elif tok == ")" and current is not None:
                    groups.append(current)
                    current = None
                elif tok in "()":
                    raise ValueError(f"rearrange: unbalanced or nested parentheses in {formula!r}")
                elif current is not None:
                    current.append(tok)
                else:
                    groups.append([tok])
            if current is not None:
                raise ValueError(f"rearrange: unbalanced parentheses in {formula!r}")
            return groups

        if formula.count("->") != 1:
            raise ValueError(f'rearrange: need exactly one "->" in {formula!r}')
        lhs, rhs = (parse(side) for side in formula.split("->"))
        names_l = [n for g in lhs for n in g]
        names_r = [n for g in rhs for n in g if n != "1"]
        if sorted(names_l) != sorted(names_r) or len(set(names_l)) != len(names_l):
            raise ValueError(f"rearrange: the two sides of {formula!r} must name the same axes, once each")
        if "..." in names_l:
            if ["..."] not in lhs:
                raise ValueError(f"rearrange: '...' cannot be inside parentheses on the left of {formula!r}")
            ell = [f"...{i}" for i in range(self.ndim - (len(lhs) - 1))]

            def widen(groups: list[list[str]]) -> list[list[str]]:
                out: list[list[str]] = []
                for g in groups:
                    if g == ["..."]:
                        out.extend([e] for e in ell)
                    else:
                        out.append([e for n in g for e in (ell if n == "..." else [n])])
                return out

            lhs, rhs = widen(lhs), widen(rhs)
            names_l = [n for g in lhs for n in g]
            names_r = [n for g in rhs for n in g if n != "1"]
        if len(lhs) != self.ndim:
            raise ShapeError(f"rearrange: {formula!r} has {len(lhs)} axes on the left, the tensor has {self.ndim}")
        x, split_shape = self, []
        for g, n in zip(lhs, self.shape):
            if len(g) == 1:
                split_shape.append(n)
                continue
            known = [sizes.get(name, -1) for name in g]
            split_shape.extend(known)
        x = x.reshape(tuple(split_shape))
        for name, n in zip(names_l, x.shape):
            if name in sizes and sizes[name] != n:
                raise ShapeError(f"rearrange: axis {name} has size {n}, not {sizes[name]}")
        x = x.permute(tuple(names_l.index(n) for n in names_r))
        merged: list[sint] = []
        i = 0
        for g in rhs:
            real = [n for n in g if n != "1"]
            merged.append(prod(x.shape[i : i + len(real)]))
            i += len(real)
        return x.reshape(tuple(merged))

    # -- windows (convolution and pooling) -----------------------------------------------------------------------

    def _windows(self, kernel: tuple[PyInt, ...], stride: tuple[PyInt, ...], dilation: tuple[PyInt, ...]) -> Self:
        """(..., *spatial) -> (..., *out, *kernel): every window over the last len(kernel) axes. Movement ops only (no
        copy, no kernel of its own): a window axis is the input repeated and re-read with a row length that shifts
        each kernel tap by its dilation (see docs/architecture.md, "Windows without copies")."""
        nd = len(kernel)
        spatial = self.shape[-nd:]
        outs = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel, stride, dilation)]
        if any(o <= 0 for o in outs):
            raise ShapeError(
                f"conv: kernel {kernel} (dilation {dilation}) does not fit the input's spatial shape {spatial}"
            )
        x = self
        for axis in range(self.ndim - nd, self.ndim):
            k, st, d, o = (
                kernel[axis - self.ndim],
                stride[axis - self.ndim],
                dilation[axis - self.ndim],
                outs[axis - self.ndim],
            )
            x = x._window_axis(axis, k, st, d, concrete(o, "pooling and convolution"))
        return x

    def _window_axis(self, axis: PyInt, k: PyInt, st: PyInt, d: PyInt, o: PyInt) -> Self:
        """Axis `axis` of size n becomes `o` windows (in place) and a new last axis of the `k` taps: out[w, j] =
        in[w * st + j * d]."""
        n = self.shape[axis]
        n = concrete(n, "a sliding window (unfold, pooling)")
        pre, post = self.shape[:axis], self.shape[axis + 1 :]
        if k <= st and d == 1:  # windows that do not overlap: cut the axis into rows of `st` and keep `k` of each
            x = self.pad(tuple((0, max(0, o * st - n)) if a == axis else (0, 0) for a in range(self.ndim)))
            x = x.shrink(tuple((0, o * st) if a == axis else None for a in range(x.ndim)))
            x = x.reshape(*pre, o, st, *post).shrink(
                tuple((0, k) if a == axis + 1 else None for a in range(self.ndim + 1))
            )
        else:
            # the axis repeated end to end, read as k rows of length row = n * f + d: row j starts j * d further
            # along the input (mod n), and its first o * st entries never wrap
            row = n + d
            while row < o * st:
                row += n
            reps = -(-k * row // n)
            x = self.reshape(*pre, 1, n, *post).expand(*pre, reps, n, *post).reshape(*pre, reps * n, *post)
            x = x.shrink(tuple((0, k * row) if a == axis else None for a in range(self.ndim)))
            x = x.reshape(*pre, k, row, *post).shrink(
                tuple((0, o * st) if a == axis + 1 else None for a in range(self.ndim + 1))
            )
            x = x.reshape(*pre, k, o, st, *post).shrink(
                tuple((0, 1) if a == axis + 2 else None for a in range(self.ndim + 2))
            )
            x = x.reshape(*pre, k, o, *post).transpose(axis, axis + 1)  # (..., o, k, ...)
        # (..., o, k, *post) -> (..., o, *post, k)
        order = [*range(axis + 1), *range(axis + 2, x.ndim), axis + 1]
        return x.permute(order)

"""`Tensor` reductions: sums, extrema and their indices, mean/var/std, softmax and logsumexp, products, norms and the
cumulative forms. A mixin of `Tensor`: each reduction is `lazy.function`'s Sum or Max over some axes, with the
casts (accumulation dtypes) and shifts (max subtraction) that keep it exact and finite."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

from lazy import function as F
from lazy.dtype import (
    NARROW_FLOATS,
    ConstType,
    DType,
    dtypes,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
)
from lazy.helpers import ArgumentError, prod
from lazy.symbolic import Node, concrete
from lazy.tensor_base import Axis, PyFloat, TensorBase, TensorT

if TYPE_CHECKING:
    from typing_extensions import Self

# `prod` multiplies halves pairwise: a kernel fuses this many of each output's factors at most before its partial
# products are realized (log2 of it halvings per kernel), so a long axis costs a few kernels, not one expression per
# output of every factor
PROD_FUSED_FAN_IN = 4
# running sums, products and maxima (`cumsum`, `cumprod`, `cummax`, `logcumsumexp`) of a longer axis go block by
# block (`_blocked_scan`)
CUMULATIVE_BLOCK = 64


class EmptyReductionError(IndexError, RuntimeError):
    """max/min/argmax/argmin over no elements, which have no identity to return. Both an IndexError (what PyTorch
    raises when an axis is named) and a RuntimeError (what it raises for a whole empty tensor)."""


class ReduceMixin(TensorBase):
    """Reductions and cumulative ops of `Tensor`."""

    __slots__ = ()

    def _reduce_axes(self, axis: Axis) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)  # (`_resolve_axis` names a bad one)
        resolved = [self._resolve_axis(a) for a in axes]
        if len(set(resolved)) != len(resolved):
            raise ArgumentError(f"axis {tuple(axes)} names a dimension twice (of {self.ndim}); name each once")
        return tuple(sorted(resolved))

    def sum(self, axis: Axis = None, keepdim: bool = False, acc_dtype: DType | None = None,
            dtype: DType | str | None = None) -> Self:  # fmt: skip
        """The sum over `axis` (all axes when None; `keepdim` keeps them with size 1). It accumulates in `acc_dtype`
        (default: float32 for half types, int32 or uint32 for narrower ints and bool, as tinygrad); the result has
        `dtype` when given (the elements are cast to it first), else a float input's dtype, else the accumulation
        dtype (an int8 sum is int32)."""
        own = self.dtype
        if own is dtypes.float32 and acc_dtype is None and dtype is None:  # the common case: no casts to make
            return self._reduce(F.Sum, axis, keepdim)
        acc, x = acc_dtype or sum_acc_dtype(own), self
        if dtype is not None and acc_dtype is None:
            # each element in `dtype` first, as PyTorch and tinygrad: a float sum(dtype=int32) truncates the
            # elements, not the total
            dtype = to_dtype(dtype)
            x = self.cast(dtype)
            acc = sum_acc_dtype(dtype)
        out = x.cast(acc)._reduce(F.Sum, axis, keepdim)
        if dtype is not None:
            return out.cast(dtype)
        return out.cast(own) if dtypes.is_float(own) and acc_dtype is None else out

    def _check_nonempty(self, op: str, axis: Axis) -> None:
        """Raise for a reduction without identity (max, min, argmax, argmin) over no elements: the identity the
        kernel starts from (-inf, or the dtype's lowest value) would come out as if it were an element."""
        if self.ndim == 0:
            return
        empty = [a for a in self._reduce_axes(axis) if isinstance(self.shape[a], int) and self.shape[a] == 0]
        if not empty:
            return
        if axis is None:
            raise EmptyReductionError(
                f"{op}: the tensor of shape {self.shape} is empty and the {op} of no elements is undefined; pass an "
                "axis whose size is not 0, or check numel() before reducing"
            )
        raise EmptyReductionError(
            f"{op}: axis {empty[0]} of shape {self.shape} has size 0 and the {op} of no elements is undefined; reduce "
            "over axes whose size is not 0"
        )

    def max(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """The largest value over `axis` (NaN if there is one, as in PyTorch); raises for no elements."""
        self._check_nonempty("max", axis)
        return self._max(axis, keepdim)

    def _max(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """max without the emptiness check, for ops that define their own result over no elements (softmax, any,
        scatter): an empty axis gives the dtype's lowest value."""
        return self._reduce(F.Max, axis, keepdim)

    def _order_flip(self) -> Self:
        """An order-reversing map with no overflow: -x for floats, ~x for ints (-x-1), not x for bool."""
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return -self if dtypes.is_float(self.dtype) else ~self

    def min(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """The smallest value over `axis` (NaN if there is one, as in PyTorch); raises for no elements."""
        self._check_nonempty("min", axis)
        return self._min(axis, keepdim)

    def _min(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """min without the emptiness check (see `_max`)."""
        return self._order_flip()._max(axis, keepdim)._order_flip()

    def mean(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """The mean over `axis` (all axes when None), in a float dtype (integers give the default float); NaN over no
        elements."""
        out_dtype = least_upper_float(self.dtype)
        total = self.cast(out_dtype).sum(axis, keepdim, acc_dtype=sum_acc_dtype(out_dtype))  # divided before rounding
        count = prod(s for i, s in enumerate(self.shape) if i in self._reduce_axes(axis))
        return (total.div(count) if count != 0 else total * math.nan).cast(out_dtype)

    def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Self:
        """The variance over `axis`: the squared deviations from the mean summed and divided by max(0, n - correction)
        (Bessel's correction by default, as PyTorch). Half and bfloat16 compute in float32 and round once (as PyTorch):
        the squared deviations of half values of a few hundred overflow half."""
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: x.var(axis, keepdim, correction))
        squares = (self - self.mean(axis, keepdim=True)).square()
        count = prod(s for i, s in enumerate(self.shape) if i in self._reduce_axes(axis))
        total = squares.sum(axis, keepdim, acc_dtype=sum_acc_dtype(squares.dtype))  # divided before rounding
        if isinstance(count, Node):  # a symbolic count: clamped at 0 for each value, on the device
            return total.div(type(self)(count - correction, device=self.device).maximum(0)).cast(squares.dtype)
        return total.div(max(0, count - correction)).cast(squares.dtype)

    def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Self:
        """sqrt(var(axis, keepdim, correction)); its gradient is 0 where the variance is 0 (PyTorch's convention).
        Half and bfloat16 in float32, rounded once: a half std of 300 has a variance half cannot hold."""
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: x.std(axis, keepdim, correction))
        var = self.var(axis, keepdim, correction)
        # where the variance is exactly 0 the gradient is 0, not 0 * inf (PyTorch's convention)
        positive = var > 0
        return positive.where(positive.where(var, 1).sqrt(), var.sqrt().detach())

    def _exp_sum(self, axis: int | None, shift: Self, broadcast: bool) -> tuple[Self, Self]:
        """(exp(self - shift), its sum over `axis`), for a shift that is the max along `axis` (or equals it where it
        is finite); the sum kept (size 1) along `axis`, or broadcast to self's shape. The elements at the max (each
        exp(0) = 1) and the rest are summed apart and added last: summed together, each small term added to the
        running 1 could round away (1 + 5e-8 is 1 in float32), and a softmax of widely spread values lost them all.
        Both sums are one reduce over a new axis of two (row 0 the elements at the max, row 1 the rest); it
        broadcasts self, which a realized input does for free, and the two are added where they are used, so that
        no kernel of its own adds them. The rows are told apart by a float selector (0 for row 0, 1 for row 1), not
        a bool one, so that the reduce reads only float data: what the lowerer keeps in vector registers."""
        e = (self - shift).exp()
        if self.ndim == 0:
            return e, e
        axes = self._reduce_axes(axis)
        kept = tuple(i for i in range(self.ndim) if i not in axes)
        kept_shape, n = tuple(self.shape[i] for i in kept), prod(self.shape[i] for i in axes)
        x = self.permute(kept + axes).reshape(*kept_shape, 1, n)._broadcast_to((*kept_shape, 2, n))
        top = shift.permute(kept + axes).reshape(*kept_shape, 1, 1)  # (size 1 along the reduced axes)
        one = type(self).full((1, 1), 1.0, dtype=self.dtype, device=self.device)
        at_max, is_rest = one.pad(((0, 1), None)), one.pad(((1, 0), None))  # (2, 1): [[1], [0]] and [[0], [1]]
        # selected, not multiplied: 0 * exp(inf - 0) would be NaN where it must be the other row's inf
        parts = ((x != top).where(is_rest, at_max) != 0).where((x - top).exp(), 0).sum(-1)  # (*kept, 2)
        # back to self's axes, size 1 along the reduced ones
        back = [0] * self.ndim
        for pos, i in enumerate(kept + axes):
            back[i] = pos
        target = self.shape if broadcast else tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        # (a shrink, not `parts[..., k]`: indexing's argument handling was a fifth of building a small softmax)
        whole: tuple[None, ...] = (None,) * len(kept)
        at_max, rest = (
            parts.shrink((*whole, (k, k + 1)))
            .reshape(*kept_shape, *(1,) * len(axes))
            .permute(back)
            ._broadcast_to(target)
            for k in (0, 1)
        )
        return e, at_max + rest

    def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
        """exp(x) / sum(exp(x)) along `axis`, with the maximum subtracted first (no overflow); in `dtype` when given,
        else in a float dtype (half and bfloat16 computed in float32, rounded once: a sum of 70,000 ones is inf in
        half, and 1 / inf gave zeros)."""
        x = self.cast(dtype) if dtype is not None else self._float()
        if x.dtype in NARROW_FLOATS:
            return x._in_float32(lambda y: y.softmax(axis))
        # (the max carries no gradient: the result does not depend on the shift, so its gradient there is 0)
        e, total = x._exp_sum(axis, x._max(axis, keepdim=True).detach(), broadcast=True)
        return e.div(total)

    def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
        """x - log(sum(exp(x))) along `axis`, with the maximum subtracted first (no overflow); in `dtype` when given,
        else in a float dtype (half and bfloat16 in float32, rounded once)."""
        x = self.cast(dtype) if dtype is not None else self._float()
        if x.dtype in NARROW_FLOATS:
            return x._in_float32(lambda y: y.log_softmax(axis))
        top = x._max(axis, keepdim=True).detach()  # (no gradient through the shift, as in softmax)
        return x - top - x._exp_sum(axis, top, broadcast=True)[1].log()

    def softmin(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
        """softmax(-x) along `axis`."""
        return (-self).softmax(axis, dtype)

    def logsumexp(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """log(sum(exp(x))) over `axis` (all axes when None), with the maximum factored out (no overflow); -inf when
        every term is -inf."""
        x = self._float()  # (ints would wrap in x - max)
        if x.dtype in NARROW_FLOATS:  # in float32, rounded once
            return x._in_float32(lambda y: y.logsumexp(axis, keepdim))
        m = x._max(axis, keepdim=True).detach()
        # all -inf: shift by nothing, the log gives -inf. A +inf: shift by the largest finite value, so that the
        # finite terms' exp is 0 (unshifted, exp(100) overflowed float32, and inf / inf made their gradient NaN) and
        # the inf term's inf gives the result inf
        exponent_bits, mantissa_bits = dtypes.finfo(x.dtype)
        largest = (2 - 2.0**-mantissa_bits) * 2.0 ** (2 ** (exponent_bits - 1) - 1)
        m = (m == math.inf).where(largest, m.isinf().where(0, m))
        return x._exp_sum(axis, m, broadcast=False)[1].log().add(m).squeeze_axes(axis, keepdim, self.ndim)

    def squeeze_axes(self, axis: Axis, keepdim: bool, ndim: int) -> Self:
        """self with the reduced axes `axis` (all `ndim` of them when None) dropped, unless `keepdim`: the shape of a
        reduction without keepdim."""
        if keepdim:
            return self
        axes = tuple(range(ndim)) if axis is None else self._reduce_axes(axis)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """The (int32) index of the first maximum along `axis` (of the flattened tensor when None); a NaN counts as
        the maximum (PyTorch's rule); raises for no elements."""
        self._check_nonempty("argmax", axis)
        return self._argmax(axis, keepdim)

    def _argmax(self, axis: int | None, keepdim: bool) -> Self:
        if axis is None:
            return self.flatten()._argmax(0, False)
        axis = self._resolve_axis(axis)
        n = self.shape[axis]
        n = concrete(n, "argmax")
        is_max = (self == self._max(axis, keepdim=True)) | (self != self)  # a NaN is the maximum, like torch
        # the first maximum wins: score n - i for index i, take the largest score
        score = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - axis - 1))
        best = (is_max * score)._max(axis, keepdim=keepdim)
        return (n - best).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """The (int32) index of the first minimum along `axis`; a NaN counts as the minimum (PyTorch's rule)."""
        self._check_nonempty("argmin", axis)
        return self._order_flip()._argmax(axis, keepdim)

    def any(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Whether any element over `axis` is nonzero (False over no elements), a bool tensor."""
        return self.cast(dtypes.bool)._max(axis, keepdim)  # (False over no elements)

    def all(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Whether every element over `axis` is nonzero (True over no elements), a bool tensor."""
        return self.logical_not().any(axis, keepdim).logical_not()

    def prod(self, axis: Axis = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Self:  # fmt: skip
        """Product over `axis`, keeping the dtype (ints stay ints): halves multiplied pairwise, log2(n) steps, two to a
        kernel (`PROD_FUSED_FAN_IN`), whose gradients are kernels of their own too (`contiguous_backward`).
        Odd sizes are not padded with 1: products of shrinks of a padded view currently come out wrong (engine bug)."""
        x = self.cast(dtype) if dtype is not None else self
        if x.dtype in NARROW_FLOATS:  # in float32, rounded once: half pairwise partials over- or underflow
            return x._in_float32(lambda y: y.prod(axis, keepdim))
        axes = x._reduce_axes(axis)  # (checked for a 0-d tensor too)
        if x.ndim == 0:
            return x
        kept = tuple(i for i in range(x.ndim) if i not in axes)
        kept_shape = tuple(x.shape[i] for i in kept)
        count = prod(x.shape[i] for i in axes)
        assert isinstance(count, int), "prod needs concrete sizes along the reduced axes"
        flat = x.permute(kept + axes).reshape(kept_shape + (count,))  # (*kept, n)
        if count == 0:  # the empty product is 1; x stays in the graph, with a zero gradient
            flat = x.sum(axes).reshape(kept_shape + (1,)) * 0 + 1
        if x.dtype == dtypes.bool:
            flat = flat.cast(dtypes.int32)
        lead: tuple[None, ...] = (None,) * len(kept_shape)
        rest: Self | None = None  # the product of the odd elements out, set aside, not padded with 1 (see the note)
        fan_in = rest_fan_in = 1  # the elements of `x` each element of `flat` and of `rest` multiplies, fused
        while flat.shape[-1] != 1:
            n = flat.shape[-1]
            n = concrete(n, "prod")
            if fan_in >= PROD_FUSED_FAN_IN:  # a kernel per few halvings, forward and backward (each level's gradient
                # is the sum of the next one's, padded, over both halves: fused whole, an element of the gradient of a
                # product of 128 summed 128 masked branches, 168 s to build; the forward of 4096, 22 s)
                flat, fan_in = flat.contiguous().contiguous_backward(), 1
                if rest is not None and rest_fan_in > 1:
                    rest, rest_fan_in = rest.contiguous().contiguous_backward(), 1
            if n % 2:
                odd = flat.shrink(lead + ((n - 1, n),))
                rest, rest_fan_in = (odd, fan_in) if rest is None else (rest * odd, rest_fan_in + fan_in)
                flat, n = flat.shrink(lead + ((0, n - 1),)), n - 1
            flat, fan_in = flat.shrink(lead + ((0, n // 2),)) * flat.shrink(lead + ((n // 2, n),)), 2 * fan_in
        if rest is not None:
            flat = flat * rest
        out = flat.cast(x.dtype)
        return out.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdim else kept_shape)

    def var_mean(self, axis: Axis = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Self, Self]:  # fmt: skip
        """(var, mean) over `axis`, as torch.var_mean."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: Axis = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Self, Self]:  # fmt: skip
        """(std, mean) over `axis`, as torch.std_mean."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def norm(self, ord: PyFloat = 2.0, axis: Axis = None, keepdim: bool = False) -> Self:
        """Vector p-norm over `axis` (all elements when None): inf/-inf are max/min of |x|, 0 counts non-zeros. Half
        and bfloat16 in float32, rounded once (the squares of a half norm of 300 overflow half)."""
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: x.norm(ord, axis, keepdim))
        if ord == 2:  # (squared as it is: abs's second derivative is 0 at 0, and a Hessian through the norm needs it)
            return self._float().square().sum(axis, keepdim)._root_at_zero(lambda s: s.sqrt())
        x = self._float().abs()
        if ord == math.inf:
            return x.max(axis, keepdim)
        if ord == -math.inf:
            return x.min(axis, keepdim)
        if ord == 0:
            return (x != 0).cast(x.dtype).sum(axis, keepdim)
        if ord == 1:
            return x.sum(axis, keepdim)
        return x.pow(ord).sum(axis, keepdim)._root_at_zero(lambda s: s.pow(1.0 / ord))

    def _root_at_zero(self, root: Callable[[Self], Self]) -> Self:
        """root(self) of a sum of powers, 0 with gradient 0 where the sum is 0 (PyTorch's norm: a root's slope at 0
        is infinite, times the powers' 0 was NaN: the gradient norm of all-zero gradients)."""
        zero = self == 0
        return zero.where(0.0, root(zero.where(1.0, self)))

    def _cumulative(self, axis: int, reduce: str, identity: ConstType) -> Self:
        """out[i] = reduce(x[0..i]) along `axis` (reduce: "sum", "prod" or "max"): each output of a block of
        `CUMULATIVE_BLOCK` sees the whole block, masked to its prefix; longer axes scan in blocks (`_blocked_scan`)."""
        axis = self._resolve_axis(axis)
        if self.ndim == 0 or 0 in self.shape:  # nothing to scan; the dtype a scan would give (a bool or int8 running
            # sum is int32, whatever the shape)
            return self.cast(sum_acc_dtype(self.dtype)) if reduce == "sum" and not dtypes.is_float(self.dtype) else self
        x = self.transpose(axis, -1)  # (..., n)
        n = x.shape[-1]
        n = concrete(n, "a running sum, product or max (cumsum, cumprod, cummax)")
        # (not along an axis split over devices: its blocks would cut across the shards)
        sharded_here = getattr(x.lazydata, "axis", None) == x.ndim - 1
        if n > CUMULATIVE_BLOCK and not sharded_here:
            combine = {"sum": operator.add, "prod": operator.mul, "max": _nan_first_maximum}[reduce]
            return x._blocked_scan(lambda b: b._prefix_reduce(reduce, identity), combine, identity).transpose(-1, axis)
        return x._prefix_reduce(reduce, identity).transpose(-1, axis)

    def _prefix_reduce(self, reduce: str, identity: ConstType) -> Self:
        """`reduce` over each prefix of the last axis: the axis masked to the prefix for every output (n x n)."""
        n = self.shape[-1]
        assert isinstance(n, int)
        prefix = type(self)._tri(n, n, 1, self.device)  # (i, j): True where j > i, outside the prefix of i
        windows = prefix.where(identity, self.unsqueeze(-2))  # (..., n_out, n_in)
        return getattr(windows, reduce)(-1)

    def _blocked_scan(self, scan: Callable[[Self], Self], combine: Callable[[Self, Self], Self],
                      identity: ConstType) -> Self:  # fmt: skip
        """A running reduction along the last axis in blocks of `CUMULATIVE_BLOCK`: `scan` (running values along the
        last axis, n x n work) within each block, each then combined with the running value through the blocks
        before it (the same scan over the block totals, blocked again when they are many). `identity` pads the last
        block and starts the first. n * block work and memory, not n * n: the running product of 70000 floats had
        realized partial products of 2 x 70000 x 17500 (OOM), the running sum summed 4.9e9 terms a row, a running
        max of 65536 took 2.5 s."""
        n, block = self.shape[-1], CUMULATIVE_BLOCK
        n = concrete(n, "a running sum, product or max")
        blocks = -(-n // block)
        lead = ((0, 0),) * (self.ndim - 1)
        padded = self.pad((*lead, (0, blocks * block - n)), value=identity)  # the identity changes no running value
        inner = scan(padded.reshape(*self.shape[:-1], blocks, block))  # (..., m, b)
        totals = inner[..., -1]  # (..., m): through the end of each block
        totals = totals._blocked_scan(scan, combine, identity) if blocks > block else scan(totals)
        before = totals.pad((*lead, (1, 0)), value=identity)[..., :blocks].unsqueeze(-1)  # (..., m, 1)
        return combine(before, inner).reshape(*self.shape[:-1], blocks * block)[..., :n]

    def cumsum(self, axis: int = 0, dtype: DType | str | None = None) -> Self:
        """Running sums along `axis`: in `dtype` when given (a DType or its name; the input is cast first, as
        PyTorch), else in the sum's accumulation dtype (small ints sum to int32, as tinygrad)."""
        return self._cumulative_in(axis, "sum", 0, dtype)

    def cumprod(self, axis: int, dtype: DType | str | None = None) -> Self:
        """Running products along `axis`, in `dtype` when given (the input is cast first)."""
        return self._cumulative_in(axis, "prod", 1, dtype)

    def _cumulative_in(self, axis: int, reduce: str, identity: ConstType, dtype: DType | str | None) -> Self:
        x = self.cast(to_dtype(dtype)) if dtype is not None else self
        if x.dtype in NARROW_FLOATS:  # half types: in float32 and rounded once (a half running product of 300 and
            # 1/300 overflowed in its pairwise partials)
            return x._in_float32(lambda y: y._cumulative(axis, reduce, identity))
        out = x._cumulative(axis, reduce, identity)
        return out.cast(x.dtype) if dtype is not None else out  # (small ints accumulate in int32)

    def cummax(self, axis: int = 0) -> tuple[Self, Self]:
        """The running maximum along `axis` and the index where it was first reached."""
        axis = self._resolve_axis(axis)
        if self.ndim == 0:
            return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
        values = self._cumulative(axis, "max", dtypes.min(self.dtype))
        n = self.shape[axis]
        n = concrete(n, "cummax")
        # the index is where the running max last changed: there it was reached for the first time (it only grows,
        # and a NaN stays from where it appears); a running max of those positions, O(n) like the values
        best = values.detach().transpose(axis, -1)  # (..., n)
        lead = ((0, 0),) * (best.ndim - 1)
        before = best.pad((*lead, (1, 0)), value=math.nan if dtypes.is_float(self.dtype) else 0)[..., :n]
        kept = best == before
        if dtypes.is_float(self.dtype):
            kept = kept | (best.isnan() & before.isnan())
        first = type(self).arange(n, device=self.device) == 0
        changed = kept.logical_not() | first
        positions = changed.where(type(self).arange(n, device=self.device), 0)
        return values, positions._cumulative(-1, "max", 0).cast(dtypes.int32).transpose(-1, axis)

    def cummin(self, axis: int = 0) -> tuple[Self, Self]:
        """The running minimum along `axis` and the index where it was first reached."""
        values, idx = self._order_flip().cummax(axis)
        return values._order_flip(), idx

    def logcumsumexp(self, axis: int = 0) -> Self:
        """log(cumsum(exp(x))) without overflow: every prefix is shifted by its own running max; in blocks of
        `CUMULATIVE_BLOCK` along a longer axis, joined by log-add-exp (`_blocked_scan`)."""
        axis = self._resolve_axis(axis)
        if self.ndim == 0 or 0 in self.shape:
            return self._float()
        if self.dtype in NARROW_FLOATS:  # in float32, rounded once (each exp, sum and log in half: 3 ulp)
            return self._in_float32(lambda x: x.logcumsumexp(axis))
        x = self._float().transpose(axis, -1)  # (..., n)
        n = x.shape[-1]
        n = concrete(n, "logcumsumexp")
        if n > CUMULATIVE_BLOCK and getattr(x.lazydata, "axis", None) != x.ndim - 1:
            return x._blocked_scan(type(self)._prefix_logsumexp, type(self)._logaddexp, -math.inf).transpose(-1, axis)
        return x._prefix_logsumexp().transpose(-1, axis)

    def _prefix_logsumexp(self) -> Self:
        """logsumexp over each prefix of the last axis (n x n), each shifted by its running max. A prefix holding
        +inf is +inf, taken from the max (its gradient goes to the inf element, the limit of the others' 0): the
        formula there is exp(inf - inf), and a NaN gradient into such a prefix of a block reached every element."""
        n = self.shape[-1]
        assert isinstance(n, int)
        peak = self._prefix_reduce("max", -math.inf)  # (..., n)
        running = peak.detach()
        big = running == math.inf
        shift = running.isinf().where(0, running)
        outside = type(self)._tri(n, n, 1, self.device)  # (i, j): j > i
        grid = (*self.shape, n)
        x = big.unsqueeze(-1)._broadcast_to(grid).where(0, self.unsqueeze(-2)._broadcast_to(grid))
        shifted = outside.where(-math.inf, x - shift.unsqueeze(-1))  # (..., i, j)
        # a prefix of -inf only is -inf, the max too: its sum of exps is 0, whose log's gradient (0 * inf) was NaN
        # wherever the prefix met a gradient, even a 0 one (a block's first -inf, joined to a finite running value)
        return _log_sum_shifted(peak, running, shifted.exp().sum(-1), shift)

    def _logaddexp(self, other: Self) -> Self:
        """log(exp(self) + exp(other)), shifted by the larger (0 where that is -inf: -inf + -inf is -inf). Where
        the larger is +inf the result is that max (the operands are masked before any exp, as in
        `_prefix_logsumexp`)."""
        peak = self.maximum(other)
        top = peak.detach()
        big = top == math.inf
        shift = top.isinf().where(0, top)
        a, b = big.where(0, self), big.where(0, other)
        return _log_sum_shifted(peak, top, (a - shift).exp() + (b - shift).exp(), shift)


def _log_sum_shifted(peak: TensorT, top: TensorT, total: TensorT, shift: TensorT) -> TensorT:
    """log(total) + shift, a log-sum-exp shifted by `shift`; where the max (`top`, detached) is +inf or -inf, the
    max itself (`peak`): +inf wins, and -inf's sum of exps is 0, whose log must not be differentiated (the where's
    untaken side still gets 0 * inf = NaN), so the sum is 1 there."""
    edge = top.isinf()
    return edge.where(peak, edge.where(1.0, total).log() + shift)


def _nan_first_maximum(before: TensorT, inner: TensorT) -> TensorT:
    """maximum(before, inner) whose gradient goes to the NaN where there is one (a running max's NaN stays, and
    takes every later output's gradient, as a max reduction's does), not to both sides, as `maximum`'s does."""
    if not dtypes.is_float(before.dtype):
        return before.maximum(inner)
    return before.isnan().where(before, inner.isnan().where(inner, before.maximum(inner)))

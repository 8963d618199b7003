"""`Tensor` methods for neural networks: matmul and linear, attention, sorting, resampling, normalization, losses.
A mixin of `Tensor`, kept apart from the array itself (tensor.py had grown two concepts); convolution and pooling
are `lazy.tensor_conv`'s."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lazy.dtype import NARROW_FLOATS, DType, dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from lazy.helpers import TRAINING, ArgumentError, ShapeError, all_int, broadcast_shape, check_int
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.symbolic import concrete, sint
from lazy.tensor_base import PyBool, PyFloat, PyInt, TensorBase, TensorT

if TYPE_CHECKING:
    from typing_extensions import Self


def _nearest_sources(n_in: int, n_out: int, exact: bool) -> list[int]:
    """The source index of each output position for mode "nearest" (floor(o * in / out)) or "nearest-exact"
    (floor((o + 0.5) * in / out)), rounded as PyTorch (and tinygrad) compute them: the scale in float32, so that an
    exact tie such as 37 * 6 / 74 = 3 lands where theirs does (2), not where exact arithmetic puts it."""
    import numpy as np

    o = np.arange(n_out)
    if not exact and n_out in (n_in, 2 * n_in):  # PyTorch's exact cases: a copy, or each source twice
        return (o * n_in // n_out).tolist()
    scale = np.float32(n_in) / np.float32(n_out)
    if exact:  # (o + 0.5) in double, times the float scale, rounded to float before the floor
        src = np.floor(((o + 0.5) * np.float64(scale)).astype(np.float32))
    else:
        src = np.floor(o.astype(np.float32) * scale)
    return np.minimum(src.astype(np.int64), n_in - 1).tolist()


def _lerp_uint8(at_low: TensorT, at_high: TensorT, frac: list[PyFloat], view: tuple[PyInt, ...]) -> TensorT:
    """at_low + frac * (at_high - at_low) for uint8 values (held as int32), as PyTorch resamples uint8 images: the
    weights as integers with the most fraction bits (at most 15) that keep the largest below 2**15 (an int16), then
    the sum rounded to nearest and clamped to [0, 255]. `frac` has one weight per output position along the axis
    that `view` (1 elsewhere) reshapes it to."""
    largest = max([*frac, *(1 - f for f in frac)], default=1.0)
    bits = next(b for b in range(15, 0, -1) if math.floor(0.5 + largest * 2**b) < 2**15)

    weight_low, weight_high = (
        type(at_low)([math.floor(0.5 + w * 2**bits) for w in ws], dtype=dtypes.int32, device=at_low.device).reshape(
            view
        )
        for ws in ([1 - f for f in frac], frac)
    )
    total = at_low * weight_low + at_high * weight_high
    return ((total + (1 << (bits - 1))) >> bits).maximum(0).minimum(255)


class NNOpsMixin(TensorBase):
    """Linear algebra and neural-network operations of `Tensor`."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    # -- linear algebra and nn -----------------------------------------------------------------------------------------

    def dot(self, w: Self, dtype: Any = None) -> Self:
        """The matrix product with PyTorch's matmul rules (1-d operands, broadcast batch axes): a broadcast multiply and
        a sum over the shared axis. Float products are computed in the accumulation dtype (float32 for half) and rounded
        once; `dtype` sets the result's dtype."""
        w = self._operand(w, "matmul", "the other operand")
        if self.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul: both arguments need at least 1 dimension, got {self.shape} and {w.shape}")
        if isinstance(w, TensorBase) and w.device != self.device:
            raise ValueError(f"matmul: tensors are on different devices ({self.device} and {w.device}); use .to() "
                             "first")  # fmt: skip
        k_x, k_w = self.shape[-1], w.shape[-min(w.ndim, 2)]
        if k_x != k_w:
            raise ShapeError(f"matmul: shapes {self.shape} and {w.shape} are not aligned ({k_x} != {k_w})")
        try:
            broadcast_shape("matmul", self.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ShapeError(
                f"matmul: the batch dimensions of shapes {self.shape} and {w.shape} cannot be broadcast together"
            ) from None
        x = self.reshape(*self.shape[:-1], *[1] * min(self.ndim - 1, w.ndim - 1, 1), self.shape[-1])
        w2 = w.reshape(*w.shape[:-2], *[1] * min(self.ndim - 1, w.ndim - 1, 1), *w.shape[-min(w.ndim, 2) :])
        w2 = w2.transpose(-1, -min(w.ndim, 2))
        out_dtype = least_upper_dtype(x.dtype, w2.dtype) if dtype is None else to_dtype(dtype)
        acc = sum_acc_dtype(out_dtype)
        if dtypes.is_float(acc):  # products in the accumulator's precision (exact for half): as PyTorch, one rounding
            x, w2 = x.cast(acc), w2.cast(acc)
        return (x * w2).sum(-1, acc_dtype=acc).cast(out_dtype)

    def matmul(self, w: Self, reverse: PyBool = False, dtype: Any = None) -> Self:
        """self @ w (see `dot`); `reverse=True` gives w @ self."""
        return w.dot(self, dtype) if reverse else self.dot(w, dtype)

    def linear(self, weight: Self, bias: Self | None = None, dtype: Any = None) -> Self:
        """self @ weight + bias with weight (in, out), the transpose of PyTorch's (out, in) layout; a 1-d weight
        multiplies elementwise."""
        if bias is not None and weight.ndim > 1:
            out = least_upper_dtype(self.dtype, weight.dtype, bias.dtype) if dtype is None else to_dtype(dtype)
            if out in NARROW_FLOATS:  # half types: the bias added to the float32 product, rounded once (as addmm)
                acc = sum_acc_dtype(out)
                return self.dot(weight, acc).add(bias.cast(acc)).cast(out)
        x = self.mul(weight) if weight.ndim == 1 else self.dot(weight, dtype)
        return x.add(bias) if bias is not None else x

    @staticmethod
    def einsum(formula: str, *operands: TensorT | Sequence[TensorT], dtype: DType | str | None = None) -> TensorT:
        """Einstein summation: "ij,jk->ik", "...ij,...jk->...ik" (broadcast batch axes), "ii->i" (a letter twice
        in one operand takes its diagonal); without "->" the output is the letters used once, in order."""
        tensors: list[TensorT] = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) \
            else list(operands)  # type: ignore[arg-type]  # fmt: skip
        spec = formula.replace(" ", "")
        inputs, output = spec.split("->") if "->" in spec else (spec, None)
        terms = inputs.split(",")
        if len(terms) != len(tensors):
            raise ShapeError(f"einsum: {formula} names {len(terms)} operands, got {len(tensors)}")
        # "..." becomes letters of its own (upper case after the used ones), right-aligned across operands
        n_ell = max((t.ndim - len(term.replace("...", "")) for term, t in zip(terms, tensors) if "..." in term),
                    default=0)  # fmt: skip
        free = [chr(c) for c in range(ord("A"), ord("Z") + 1) if chr(c) not in spec][:n_ell]
        expanded = []
        for term, t in zip(terms, tensors):
            if "..." in term:
                k = t.ndim - len(term.replace("...", ""))
                if k < 0:
                    raise ShapeError(f"einsum: term {term!r} has more letters than shape {t.shape} has axes")
                term = term.replace("...", "".join(free[n_ell - k :]))
            if len(term) != t.ndim:
                raise ShapeError(f"einsum: term {term!r} does not match shape {t.shape}")
            expanded.append(term)
        if output is None:
            used = "".join(expanded)
            output = "".join(free) + "".join(sorted(c for c in set(used) if used.count(c) == 1 and c not in free))
        else:
            output = output.replace("...", "".join(free))
            letters_in = set("".join(expanded))
            if missing := [c for c in output if c not in letters_in]:
                raise ShapeError(f"einsum: output letter {missing[0]!r} of {formula!r} appears in no input term")
            if twice := [c for c in dict.fromkeys(output) if output.count(c) > 1]:
                raise ShapeError(f"einsum: output letter {twice[0]!r} appears more than once in {formula!r}")
        sizes: dict[str, sint] = {}
        aligned = []
        for term, t in zip(expanded, tensors):
            for c in dict.fromkeys(term):  # a repeated letter: keep the diagonal of those axes
                while term.count(c) > 1:
                    first, second = term.index(c), term.index(c, term.index(c) + 1)
                    t = t.diagonal(dim1=first, dim2=second)  # moves the diagonal axis last
                    term = term[:first] + term[first + 1 : second] + term[second + 1 :] + c
            for c, n in zip(term, t.shape):
                if c in sizes and sizes[c] != n and n != 1 and sizes[c] != 1:
                    what = f"an axis of '...' ({n_ell - free.index(c)} from the end)" if c in free else f"letter {c!r}"
                    raise ShapeError(f"einsum: {what} has sizes {sizes[c]} and {n} in {formula}")
                if c not in sizes or sizes[c] == 1:
                    sizes[c] = n
            aligned.append((term, t))
        letters = sorted(sizes)
        out_dtype = least_upper_dtype(*(t.dtype for _, t in aligned)) if dtype is None else to_dtype(dtype)
        acc = sum_acc_dtype(out_dtype)
        widen = dtypes.is_float(acc) and any(t.dtype != acc for _, t in aligned)
        if widen:  # half types: products in float32, rounded once (as dot's and PyTorch's)
            aligned = [(term, t.cast(acc)) for term, t in aligned]
        product: TensorT | None = None
        for term, t in aligned:
            t = t.permute(tuple(term.index(c) for c in sorted(term)))
            t = t.reshape(tuple(t.shape[sorted(term).index(c)] if c in term else 1 for c in letters))
            product = t if product is None else product * t
        assert product is not None
        product = product._broadcast_to(tuple(sizes[c] for c in letters))
        summed = tuple(i for i, c in enumerate(letters) if c not in output)
        kept = [c for c in letters if c in output]
        if widen:
            out = (product.sum(summed, acc_dtype=acc) if summed else product).cast(out_dtype)
        elif summed:
            out = product.sum(summed, dtype=dtype)
        else:
            out = product.cast(dtype) if dtype is not None else product
        return out.permute(tuple(kept.index(c) for c in output)) if output else out

    def qr(self) -> tuple[Self, Self]:
        """QR decomposition of (..., m, n) by Householder reflections: Q (..., m, m) orthogonal, R (..., m, n) upper
        triangular, Q @ R == self. One reflection per column, each a rank-1 update built from tensor ops."""
        if self.ndim < 2:
            raise ShapeError(f"qr: expects a matrix (or a batch of them), got shape {self.shape}")
        m, n = self.shape[-2], self.shape[-1]
        assert isinstance(m, int) and isinstance(n, int), "qr needs concrete sizes"
        lead = self.shape[:-2]
        r = self._float()
        q = (
            type(self)
            .eye(m, dtype=r.dtype, device=self.device)
            .reshape((1,) * len(lead) + (m, m))
            .expand(lead + (m, m))
        )
        for k in range(min(m - 1, n)):
            x = r[..., k:, k]  # (..., m - k): the column below the diagonal
            norm = x.square().sum(-1, keepdim=True).sqrt()
            head = x[..., :1]
            alpha = -(head >= 0).where(1.0, -1.0) * norm  # the sign that avoids cancellation
            v = x - alpha * (type(self).arange(m - k, device=self.device) == 0)
            length = v.square().sum(-1, keepdim=True).sqrt()
            v = (length > 0).where(v / (length > 0).where(length, 1.0), 0.0)  # a zero column needs no reflection
            v = v.pad(tuple((0, 0) for _ in lead) + ((k, 0),)).unsqueeze(-1)  # (..., m, 1), zeros above row k
            r = r - 2 * v @ (v.transpose(-2, -1) @ r)
            q = q - 2 * (q @ v) @ v.transpose(-2, -1)
        return q, r.triu()  # (what is left below the diagonal is rounding error)

    # -- attention -----------------------------------------------------------------------------------------------------

    def scaled_dot_product_attention(
        self,
        key: Self,
        value: Self,
        attn_mask: Self | None = None,
        dropout_p: PyFloat = 0.0,
        is_causal: PyBool = False,
        enable_gqa: PyBool = False,
    ) -> Self:
        """softmax(q @ k^T / sqrt(E) + mask) @ v for q (..., L, E), k (..., S, E), v (..., S, Ev). `attn_mask`: bool
        (True = attend) or an additive float mask; is_causal masks out keys after each query (no attn_mask then)."""
        key, value = self._operand(key, "scaled_dot_product_attention", "key"), \
            self._operand(value, "scaled_dot_product_attention", "value")  # fmt: skip
        if enable_gqa:  # grouped-query attention: each key/value head serves a group of query heads
            heads, kv_heads = self.shape[-3], key.shape[-3]
            assert isinstance(heads, int) and isinstance(kv_heads, int)
            if kv_heads == 0 or heads % kv_heads:
                raise ShapeError(f"scaled_dot_product_attention: enable_gqa needs the {heads} query heads (axis -3 of "
                                 f"{self.shape}) to be a multiple of the {kv_heads} key/value heads "
                                 f"({key.shape})")  # fmt: skip
            key = key.repeat_interleave(heads // kv_heads, dim=-3)
            value = value.repeat_interleave(heads // kv_heads, dim=-3)
        q = self._float()
        e = q.shape[-1]
        e = concrete(e, "scaled_dot_product_attention")
        k = key._float()
        if q.dtype in NARROW_FLOATS:  # the scores, softmax and weighted sum in float32, rounded once at the end
            # (as PyTorch's CPU kernel): half scores of vectors of ~100 overflowed (1.4e5), and scores rounded to
            # half before the softmax were 10x PyTorch's error
            out = q.float().scaled_dot_product_attention(k.float(), value.float(), attn_mask, dropout_p, is_causal)
            return out.cast(least_upper_dtype(q.dtype, value._float().dtype))
        qk = q.matmul(k.transpose(-2, -1)) / math.sqrt(e)
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError("scaled_dot_product_attention: attn_mask cannot be given with is_causal=True")
            rows, cols = qk.shape[-2], qk.shape[-1]
            rows, cols = concrete(rows, "scaled_dot_product_attention"), concrete(cols, "scaled_dot_product_attention")
            qk = type(self)._tri(rows, cols, 1, self.device).where(-math.inf, qk)
        elif attn_mask is not None:
            qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
        return qk.softmax(-1).dropout(dropout_p).matmul(value._float())

    # -- sorting -------------------------------------------------------------------------------------------------------

    def sort(self, dim: PyInt = -1, descending: PyBool = False) -> tuple[Self, Self]:
        """The values along `dim` in order and their (int32) indices; a stable sort (equal values keep their order,
        -0.0 ties with 0.0 and stays -0.0) with NaN above +inf: last ascending, first descending, as in PyTorch.
        From `SORT_NETWORK_MIN` elements on (and where the device has 64-bit ints) a sorting network orders
        (value, index) keys (`_sort_keys`, `_sorting_network`): O(n log^2 n) work in log^2 n kernels. Shorter axes
        (and other dtypes) rank each element by counting the elements before it, O(n^2) in two kernels, and a
        one-hot of the ranks gives the indices. The values are gathered at the indices."""
        dim = self._resolve_axis(dim)
        n = self.shape[dim] if self.ndim else 1
        n = concrete(n, "sort")
        if self.ndim == 0 or n <= 1:
            return self, type(self).zeros(*self.shape, dtype=dtypes.int32, device=self.device)
        x = self.transpose(dim, -1)  # (..., n)
        if n >= SORT_NETWORK_MIN and (keys := x.detach()._sort_keys(descending)) is not None:
            indices = _sorting_network(keys, n)
        else:
            indices = x.detach()._sort_by_ranks(n, descending)
        # (a load per element: keeps -0.0, which a one-hot sum lost; its gradient a gather at the inverse permutation)
        values = x._gather(x.ndim - 1, indices, permutation=True)
        return values.transpose(dim, -1), indices.transpose(dim, -1)

    def _sort_by_ranks(self, n: int, descending: bool) -> Self:
        """The indices that sort the last axis (n long): each element's rank counts the elements ordered before it
        (ties by position), and a one-hot of the ranks places the positions."""
        grid = (*self.shape, n)
        # (..., i, j): broadcast before any op, so that no elementwise result is expanded (which would realize it)
        xi, xj = self.unsqueeze(-1)._broadcast_to(grid), self.unsqueeze(-2)._broadcast_to(grid)
        before, same = xj < xi, xj == xi  # (..., i, j): j sorts before i ascending, j ties with i
        if dtypes.is_float(self.dtype):
            # NaN orders above +inf and ties with NaN (PyTorch's order: last ascending, first descending); without
            # this every comparison with a NaN is False and the ranks collide
            nan_i, nan_j = xi.isnan(), xj.isnan()
            before, same = before | (nan_i & nan_j.logical_not()), same | (nan_i & nan_j)
        after = (before | same).logical_not()  # (..., i, j): j sorts after i ascending
        ahead = after if descending else before
        earlier = type(self)._tri(n, n, 0, self.device).logical_not()  # (i, j): j < i
        rank = (ahead | (same & earlier)).cast(dtypes.int32).sum(-1)  # (..., i): a permutation of 0..n-1
        place = rank.unsqueeze(-1) == type(self).arange(n, device=self.device)  # (..., i, position)
        index = type(self).arange(n, device=self.device).reshape(n, 1)
        return place.where(index, 0).sum(-2, dtype=dtypes.int32)

    def _sort_keys(self, descending: bool) -> Self | None:
        """uint64 keys of the last axis whose order is the sort's: the value mapped to a uint32 of the same order in
        the high half (floats: -0.0 as 0.0, NaN above +inf; complemented for `descending`), the element's position in
        the low half (ties keep their order, and every key differs). None where the values do not fit 32 bits (64-bit
        types), the device has no uint64, or the tensor is sharded."""
        from lazy.plugins import Device

        if not isinstance(self.device, str) or not Device[self.device].renderer.caps.supports(dtypes.uint64):
            return None
        dt, u32 = self.dtype, dtypes.uint32
        if dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16):
            f = self.cast(dtypes.float32) if dt != dtypes.float32 else self
            f = (f == 0).where(0.0, f)  # -0.0 ties with 0.0
            bits = f.bitcast(u32)
            # negative floats: every bit flipped (larger magnitudes first); others: the sign bit set
            ordered = (bits >= 0x80000000).where(bits ^ 0xFFFFFFFF, bits | 0x80000000)
            ordered = f.isnan().where(0xFFFFFFFF, ordered)
        elif dt in (dtypes.int8, dtypes.int16, dtypes.int32):
            ordered = self.cast(dtypes.int32).bitcast(u32) ^ 0x80000000
        elif dt in (dtypes.bool, dtypes.uint8, dtypes.uint16, dtypes.uint32):
            ordered = self.cast(u32)
        else:
            return None
        if descending:
            ordered = ordered ^ 0xFFFFFFFF
        n = self.shape[-1]
        assert isinstance(n, int)
        position = type(self).arange(n, device=self.device).cast(dtypes.uint64)
        return (ordered.cast(dtypes.uint64) << 32) | position

    def argsort(self, dim: PyInt = -1, descending: PyBool = False) -> Self:
        """The (int32) indices that sort self along `dim`: a stable sort, largest first with `descending`."""
        return self.sort(dim, descending)[1]

    def topk(self, k: PyInt, dim: PyInt = -1, largest: PyBool = True, sorted_: PyBool = True) -> tuple[Self, Self]:
        """The k largest (or smallest) values along `dim` and their indices, always in sorted order (which also
        satisfies sorted_=False); equal values keep their order, NaN counts as the largest (as in `sort`). A few out of
        many (`_selects`) are taken one by one, k reductions (`_select_first`); otherwise the first k of a sort."""
        dim = self._resolve_axis(dim)
        n = self.shape[dim] if self.ndim else 1
        n = concrete(n, "topk")
        k = check_int("topk", "k", k)
        if not 0 <= k <= n:
            raise ValueError(f"topk: k={k} is out of range for a dimension of size {n}")
        if self.ndim and _selects(n, k) and (keys := self.transpose(dim, -1).detach()._sort_keys(largest)) is not None:
            x = self.transpose(dim, -1)
            indices = _select_first(keys, k)
            return x._gather(x.ndim - 1, indices).transpose(dim, -1), indices.transpose(dim, -1)
        values, indices = self.sort(dim, descending=largest)
        if self.ndim == 0:
            return values, indices
        keep = tuple((0, k) if i == dim else None for i in range(self.ndim))
        return values.shrink(keep), indices.shrink(keep)

    # -- resampling ----------------------------------------------------------------------------------------------------

    def interpolate(self, size: Sequence[PyInt], mode: str = "linear", align_corners: PyBool = False) -> Self:
        """Resamples the last len(size) axes to `size` (any batch axes before them). mode: "linear" (bilinear,
        trilinear, ... by the length of size), "nearest" (floor(o * in / out)) or "nearest-exact" (pixel centres); the
        nearest source pixels are PyTorch's (`_nearest_sources`)."""
        if not isinstance(size, (tuple, list)) or not all_int(size) or not 0 < len(size) <= self.ndim or min(size) < 0:
            raise ArgumentError(f"interpolate: invalid size {size} for a tensor of shape {self.shape}; one size >= 0 "
                                "per resampled axis (the last ones)")  # fmt: skip
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise ArgumentError(f'interpolate: mode must be "linear", "nearest" or "nearest-exact", got {mode!r}')
        if align_corners and mode != "linear":
            raise ArgumentError("interpolate: align_corners only goes with mode='linear'")
        resampled = self.shape[self.ndim - len(size) :]
        if any(n_in == 0 and n_out != 0 for n_in, n_out in zip(resampled, size)):
            raise ShapeError(f"interpolate: cannot resample an axis of size 0 to {tuple(size)} (shape {self.shape}): "
                             "there are no values to take")  # fmt: skip
        # uint8 images resample as PyTorch's: integer weights with 14 or 15 fraction bits, rounded after each axis
        fixed_point = mode == "linear" and self.dtype == dtypes.uint8
        # half and bfloat16 blend in float32 and round once at the end, as PyTorch's (each lerp rounded: 16-18 ulp)
        x = self.cast(dtypes.int32) if fixed_point else self._float() if mode == "linear" else self
        x = x.cast(dtypes.float32) if mode == "linear" and x.dtype in NARROW_FLOATS else x
        for axis in reversed(range(self.ndim - len(size), self.ndim)):  # the last axis first (it matters for uint8)
            n_in, n_out = self.shape[axis], size[axis - self.ndim + len(size)]
            assert isinstance(n_in, int)
            if mode == "linear":
                if align_corners:
                    num, den = [o * (n_in - 1) for o in range(n_out)], max(n_out - 1, 1)
                else:  # source position (o + 0.5) * in / out - 0.5, clamped at 0, as num / den
                    num, den = [(2 * o + 1) * n_in - n_out for o in range(n_out)], 2 * n_out
                num = [min(max(v, 0), (n_in - 1) * den) for v in num]
                low, high = [v // den for v in num], [-(-v // den) for v in num]
                frac = [(v % den) / den for v in num]
            else:
                low = _nearest_sources(n_in, n_out, exact=mode == "nearest-exact")
            shape = tuple(n_out if i == axis else s for i, s in enumerate(x.shape))
            view = tuple(n_out if i == axis else 1 for i in range(x.ndim))

            # the source positions along the axis, broadcast to the output's shape
            at_low_index, at_high_index = (
                type(self)(values, dtype=dtypes.int32, device=self.device).reshape(view).expand(shape)
                for values in (low, high if mode == "linear" else low)
            )
            if mode != "linear":
                x = x.gather(axis, at_low_index)
                continue
            at_low, at_high = x.gather(axis, at_low_index), x.gather(axis, at_high_index)
            if fixed_point:
                x = _lerp_uint8(at_low, at_high, frac, view)
            else:
                x = at_low.lerp(at_high, type(self)(frac, dtype=x.dtype, device=self.device).reshape(view))
        return x.cast(self.dtype)

    def sequential(self, layers: list[Any]) -> Self:
        """self passed through each callable of `layers` in turn."""
        x = self
        for f in layers:
            x = f(x)
        return x

    def layernorm(self, axis: PyInt = -1, eps: PyFloat = 1e-5) -> Self:
        """(x - mean) / sqrt(var + eps) over `axis`, with the biased variance and no weight or bias; half and bfloat16
        in float32, rounded once (their squared deviations overflow half)."""
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: x.layernorm(axis, eps))
        y = self - self.mean(axis, keepdim=True)
        return y.mul((y * y).mean(axis, keepdim=True).add(eps).rsqrt())

    @classmethod
    def _training_mode(cls) -> PyBool:
        """Training mode, in which dropout drops and batchnorm uses batch statistics: `Tensor.training` (what
        `Tensor.train()` sets) or the TRAINING setting (`Context(TRAINING=1)`, tinygrad's switch)."""
        return bool(cls.training or TRAINING)

    def dropout(self, p: PyFloat = 0.5) -> Self:
        """Zero each element with probability p and scale the rest by 1 / (1 - p), in training mode only (see
        `_training_mode`); the same draws as tinygrad's after the same `manual_seed`."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"dropout: p={p!r} is not a probability in [0, 1]")
        if not type(self)._training_mode() or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = self.rand_like(dtype=dtypes.float32) >= p  # (split as self is, when self is sharded)
        return keep.where(self, 0) / (1.0 - p)

    def one_hot(self, num_classes: PyInt = -1) -> Self:
        """(...) -> (..., num_classes) int32 from integer class indices; a class outside [0, num_classes) gives a row
        of zeros (an IndexError with LAZY_CHECK_INDEX=1). num_classes=-1: the largest index + 1 (read on the host, a
        sync, as in tinygrad and PyTorch)."""
        if not dtypes.is_int(self.dtype):  # (a RuntimeError in tinygrad and PyTorch alike)
            raise RuntimeError(f"one_hot needs integer class indices, not {self.dtype}; cast them with .cast('int')")
        if num_classes == -1 and not isinstance(num_classes, bool):
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
            raise ShapeError(f"one_hot: num_classes must be an int >= 0, got {num_classes!r}")
        self._check_index("one_hot", 0, num_classes, f"{num_classes} classes")
        return (self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(dtypes.int32)

    def _do_reduction(self, reduction: str = "mean") -> Self:
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f'reduction must be "none", "mean" or "sum", not {reduction!r}')
        return self.mean() if reduction == "mean" else self.sum() if reduction == "sum" else self

    def sparse_categorical_crossentropy(
        self, Y: Self, ignore_index: PyInt = -1, label_smoothing: PyFloat = 0.0, reduction: str = "mean"
    ) -> Self:
        """Cross entropy of logits (..., classes) against integer labels Y (...); labels equal to ignore_index
        count for nothing (the mean divides by the labels that count). The default, -1, ignores nothing (tinygrad's
        rule): a label of -1 picks no class but still counts in the mean and in the smoothing term; pass
        ignore_index=-100 (PyTorch's default) or another value for labels to skip."""
        Y = self._operand(Y, "sparse_categorical_crossentropy", "the labels")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        log_probs = self.log_softmax()
        n_classes = self.shape[-1]
        assert isinstance(n_classes, int)
        Y._check_index("sparse_categorical_crossentropy", 0, n_classes, f"{n_classes} classes", ignore=ignore_index)
        # (ignore_index -1: every label counts, one that is -1 picks no class; no mask is built then, and without
        # label smoothing no smoothing term: each op costs an eager step's Python, and 0 * a mean of -inf was NaN)
        keep = (Y != ignore_index) if ignore_index != -1 else None
        y = Y.unsqueeze(-1) == type(self).arange(n_classes, device=self.device)
        picked = (y if keep is None else y & keep.unsqueeze(-1)).where(log_probs, 0).sum(-1)
        loss = -picked
        if label_smoothing:
            smooth = log_probs.mean(-1) if keep is None else keep.where(log_probs.mean(-1), 0)
            loss = -((1 - label_smoothing) * picked + label_smoothing * smooth)
        if reduction != "mean":
            return loss._do_reduction(reduction)
        if keep is not None:
            return loss.sum()._mean_of(keep.sum())
        count = Y.numel()
        return loss.sum() / count if isinstance(count, int) and count else loss.sum() / Y.ones_like().sum()

    def cross_entropy(self, Y: Self, reduction: str = "mean", label_smoothing: PyFloat = 0.0) -> Self:
        """Cross entropy of logits with classes on axis 1 (PyTorch's layout: (N, C) or (N, C, d1, ...)) against
        class indices (N, d1, ...) or class probabilities shaped like the logits."""
        Y = self._operand(Y, "cross_entropy", "the target")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        axis = 1 if self.ndim > 1 else 0
        n = self.shape[axis]
        n = concrete(n, "cross_entropy")
        indices_shape = self.shape[:axis] + self.shape[axis + 1 :]
        if Y.shape not in (self.shape, indices_shape):
            raise ShapeError(f"cross_entropy: targets of shape {Y.shape} fit logits of shape {self.shape} neither as "
                             f"class indices {indices_shape} nor as class probabilities {self.shape}")  # fmt: skip
        logp = self.log_softmax(axis)
        if Y.ndim < self.ndim:  # class indices: the target's log-probability picked, not 0 * the others (a masked
            # class's -inf times 0 was NaN), plus the smoothing's share of every class (inf there, as PyTorch's)
            hot = Y.one_hot(n)
            hot = hot if hot.ndim <= 2 else hot.permute((0, hot.ndim - 1, *range(1, hot.ndim - 1)))
            picked = hot.where(logp, 0).sum(axis)
            loss = -(1 - label_smoothing) * picked
            if label_smoothing and n:
                loss = loss - label_smoothing / n * logp.sum(axis)
            return loss._do_reduction(reduction)
        y = (1 - label_smoothing) * Y.cast(self.dtype) + (label_smoothing / n if n else 0.0)  # (no classes: no share)
        return (-(logp * y).sum(axis))._do_reduction(reduction)

    def nll_loss(self, Y: Self, weight: Self | None = None, ignore_index: PyInt | None = None,
                 reduction: str = "mean") -> Self:  # fmt: skip
        """Negative log likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...); `weight` per class;
        the mean is weighted (divided by the weights of the labels that count), as PyTorch's."""
        Y = self._operand(Y, "nll_loss", "the target")
        axis = 1 if self.ndim > 1 else 0
        n_classes = self.shape[axis]
        if Y.shape != self.shape[:axis] + self.shape[axis + 1 :]:
            raise ShapeError(f"nll_loss: targets of shape {Y.shape} do not fit log-probabilities of shape "
                             f"{self.shape}: expected {self.shape[:axis] + self.shape[axis + 1 :]}")  # fmt: skip
        if weight is not None and weight.shape != (n_classes,):
            raise ShapeError(f"nll_loss: weight of shape {weight.shape}; expected one per class, ({n_classes},)")
        Y._check_index("nll_loss", 0, n_classes, f"{n_classes} classes", ignore=ignore_index)
        # (checked above; an ignored label, often -100, picks nothing: unchecked gathers)
        w = Y.ones_like(dtype=self.dtype) if weight is None else weight._gather(0, Y.flatten()).reshape(Y.shape)
        if ignore_index is not None:
            w = (Y != ignore_index).where(w, 0)
        picked = self._gather(axis, Y.unsqueeze(axis) if self.ndim > 1 else Y.reshape(1)).squeeze(axis)
        loss = -picked * w
        if reduction == "mean":
            return loss.sum()._mean_of(w.sum())
        return loss._do_reduction(reduction)

    def _mean_of(self, count: Self) -> Self:
        """self / count for a loss summed over the labels that count: NaN when none does (0 / 0, as PyTorch), with
        zero gradients then (1 / 0 times the ignored labels' zero weights was NaN: one batch of padding labels made
        every weight NaN)."""
        none = count == 0
        return none.where(math.nan, self / none.where(1, count))

    def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:
        """BCE of probabilities against targets; logs are clamped at -100 like PyTorch's, and so is their slope, at
        1e12: a probability of exactly 0 or 1 (a saturated sigmoid) that is wrong gets PyTorch's gradient of -+1e12,
        not NaN (the clamp's flat side multiplied 0 by the log's infinite slope) and not 0 (no signal to learn from)."""
        return (-(Y * self._clamped_log() + (1 - Y) * (1 - self)._clamped_log()))._do_reduction(reduction)

    def _clamped_log(self) -> Self:
        """max(log(x), -100), whose slope is 1 / max(x, 1e-12) (PyTorch's BCE gradient divides by max(x (1 - x),
        1e-12)): below 1e-12 the value is the clamped log and the slope the constant 1e12 (at 0 the log's own slope
        is infinite), above it the log's own."""
        eps = 1e-12
        slope = min(1.0 / eps, float(dtypes.max(self.dtype)))  # (half types: their largest value)
        x = self.detach()
        below = x.log().maximum(-100) + (self - x) * slope  # (self - x is 0, its gradient 1)
        return (self < eps).where(below, self.maximum(eps).log())

    def binary_crossentropy_logits(self, Y: Self, reduction: str = "mean",
                                   pos_weight: Self | None = None) -> Self:  # fmt: skip
        """BCE of logits, computed stably through logsigmoid; `pos_weight` scales the positive term."""
        log_p, log_not_p = self.logsigmoid(), (-self).logsigmoid()
        pos = Y * log_p if pos_weight is None else pos_weight * Y * log_p
        return (-(pos + (1 - Y) * log_not_p))._do_reduction(reduction)

    def mse_loss(self, Y: Self, reduction: str = "mean") -> Self:
        """(self - Y)^2 reduced by `reduction` ("mean", "sum" or "none")."""
        return (self - Y).square()._do_reduction(reduction)

    def l1_loss(self, Y: Self, reduction: str = "mean") -> Self:
        """|self - Y| reduced by `reduction` ("mean", "sum" or "none")."""
        return (self - Y).abs()._do_reduction(reduction)

    def smooth_l1_loss(self, Y: Self, reduction: str = "mean", beta: PyFloat = 1.0) -> Self:
        """0.5 * d^2 / beta where |d| < beta, else |d| - 0.5 * beta, for d = self - Y, reduced by `reduction` (PyTorch's
        smooth_l1_loss)."""
        diff = (self - Y).abs()
        if beta == 0:  # l1 (PyTorch's): the quadratic side is never taken, and its 1 / beta made the gradient NaN
            return diff._do_reduction(reduction)
        return (diff < beta).where(0.5 * diff.square() / beta, diff - 0.5 * beta)._do_reduction(reduction)

    def normalize(self, p: PyFloat = 2.0, dim: PyInt = 1, eps: PyFloat = 1e-12) -> Self:
        """self / max(||self||_p along dim, eps)."""
        return self / self.norm(p, dim, keepdim=True).maximum(eps)

    def batchnorm(self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self,
                  axis: PyInt | tuple[PyInt, ...] = 1) -> Self:  # fmt: skip
        """(self - mean) * invstd * weight + bias, the statistics shaped like the axes in `axis` (half types in float32,
        rounded once: (x - mean) * weight overflowed half before invstd scaled it)."""
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: x.batchnorm(weight, bias, mean, invstd, axis))
        axes = tuple(self._resolve_axis(a) for a in ((axis,) if isinstance(axis, int) else axis))
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return x + bias.reshape(shape) if bias is not None else x


# the axis length from which `sort` (and `argsort`, `topk`) orders by a sorting network rather than by ranks: 2 kernels
# of n^2 work were faster below it (n = 256: 0.9 ms against 36 network stages), far slower above (n = 65536: 20 s)
SORT_NETWORK_MIN = 512


def _network_stages(n: int) -> int:
    """How many stages (kernels) `_sorting_network` runs for an axis of n: L (L + 1) / 2 for 2^L >= n."""
    levels = (n - 1).bit_length()
    return levels * (levels + 1) // 2


def _selects(n: int, k: int) -> bool:
    """Whether `topk` of k out of n takes its k keys one by one (`_select_first`: k reductions over the n keys) rather
    than sorting all n: where a sort would be the network (n >= SORT_NETWORK_MIN) and k is well under its stage count,
    as a round costs about what a stage does (topk(10) of 50257: 136 network stages, 37 ms, against 10 rounds)."""
    return n >= SORT_NETWORK_MIN and k <= _network_stages(n) // 2


def _select_first(keys: TensorT, k: int) -> TensorT:
    """The int32 positions (low halves) of the k smallest uint64 `keys` (..., n) (`TensorBase._sort_keys`, all
    different), smallest first: round j takes the smallest key above round j-1's, one reduction over the keys each
    (as the largest of the complemented keys, a max being every device's reduction)."""
    ones = 2**64 - 1
    flipped = (keys ^ ones).contiguous().lazydata  # read by every round: computed once
    # built on the lazy graph directly, as the sorting network is (the keys carry no gradient): a round of Tensor ops
    # and the Tensor cat of their results cost ~130 us of Python a round, as much as its kernels
    *lead, _ = flipped.shape
    shape, axis = flipped.shape, (len(lead),)
    none = flipped.const_like(0, dtypes.uint64, flipped.device, shape)  # no key's complement
    rounds: list[LazyBuffer] = []
    for _ in range(k):
        below = flipped.e(Ops.CMPLT, rounds[-1].expand(shape)) if rounds else None
        candidates = flipped if below is None else below.e(Ops.WHERE, flipped, none)
        # one kernel a round: no two-stage split of a long row (its partials cost more kernels than a max saves)
        rounds.append(candidates._reduce_node(Ops.RMAX, axis, (*lead, 1)))
    # the rounds' (..., 1) results joined in groups, so that no kernel reads more than SELECT_JOIN of them
    while len(rounds) > 1:
        joined = []
        for i in range(0, len(rounds), SELECT_JOIN):
            group = rounds[i : i + SELECT_JOIN]
            sizes = [lb.shape[-1] for lb in group]
            edges = [sum(sizes[:j]) for j in range(len(group) + 1)]
            keep = [(0, 0)] * len(lead)
            placed = [lb.pad((*keep, (edges[j], edges[-1] - edges[j + 1]))) for j, lb in enumerate(group)]
            total = placed[0]
            for lb in placed[1:]:
                total = total.e(Ops.ADD, lb)
            joined.append(total)
        rounds = [lb.contiguous() for lb in joined] if len(joined) > 1 else joined
    chosen = type(keys)(rounds[0], device=keys.device, requires_grad=False) if rounds else \
        keys.shrink((*[None] * len(lead), (0, 0)))  # fmt: skip
    return ((chosen ^ ones) & 0xFFFFFFFF).cast(dtypes.int32)


SELECT_JOIN = 16  # `_select_first`: round results joined per kernel


def _sorting_network(keys: TensorT, n: int) -> TensorT:
    """The int32 positions the uint64 `keys` (..., n) (`TensorBase._sort_keys`) hold in their low halves, in the
    keys' order: a bitonic sorting network on the keys padded to a power of two with the largest key. Each stage
    is one elementwise kernel reading the keys twice, as pairs and as their partners (a flip of the same view), and
    keeping the smaller key in a pair's first place. A merge of two sorted runs first pairs each element with its
    mirror in the other run, then halves as the usual bitonic merge does, so every comparison puts the smaller
    first (no direction per block)."""
    *lead, _ = keys.shape
    size = 1 << (n - 1).bit_length()
    if size != n:
        pad = type(keys).full((*lead, size - n), 2**64 - 1, dtype=dtypes.uint64, device=keys.device)
        keys = keys.cat(pad, dim=-1)

    # The stages are built on the lazy graph directly: the keys carry no gradient, and a Tensor op per node (its
    # Function, broadcasting and checks) made building the 136 stages of a 65536-element sort 16 ms, most of its time.
    second = (type(keys).arange(2, device=keys.device).reshape(2, 1) != 0).lazydata  # a pair's second place
    lb = keys.lazydata

    def stage(lb: LazyBuffer, groups: int, half: int, mirror: bool) -> LazyBuffer:
        shape = (*lead, groups, 2, half)
        pairs = lb.reshape(shape)
        partner = pairs.stride((*[1] * (len(shape) - 2), -1, -1 if mirror else 1))  # (a view: one kernel reads both)
        # the smaller key in a pair's first place, the larger in its second
        keep = pairs.e(Ops.CMPLT, partner).e(Ops.CMPNE, second.reshape((*[1] * len(lead), 1, 2, 1)).expand(shape))
        return keep.e(Ops.WHERE, pairs, partner).reshape((*lead, size)).contiguous()

    run = 2
    while run <= size:
        lb = stage(lb, size // run, run // 2, mirror=True)
        step = run // 4
        while step >= 1:
            lb = stage(lb, size // (2 * step), step, mirror=False)
            step //= 2
        run *= 2
    keys = type(keys)(lb, device=keys.device, requires_grad=False)
    return (keys.shrink((*[None] * len(lead), (0, n))) & 0xFFFFFFFF).cast(dtypes.int32)

"""`Tensor` quotients, remainders and rounding: division, integer and floor division, C's and Python's
remainders, trunc, floor, ceil and round, with the edges defined as PyTorch and C define them (signed zeros, divisors
whose reciprocal overflows, infinite divisors, quotients that round to an integer, integer division by zero). A mixin
of `Tensor`, built on its basic methods; kept apart from the elementwise basics in `lazy.tensor` because its rules
belong together: `//` is built from the exact remainder, which is built from the quotient and from `trunc`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy import function as F
from lazy.dtype import NARROW_FLOATS, ConstType, dtypes
from lazy.helpers import ArgumentError
from lazy.tensor_base import PyBool, TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self


class DivisionMixin(TensorBase):
    """Quotients, remainders and rounding of `Tensor`."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    def div(self, y: Self | ConstType, reverse: PyBool = False, rounding_mode: str | None = None) -> Self:
        """self / y in a float dtype (integers promote to the default float). rounding_mode "trunc" (toward zero) or
        "floor" rounds the quotient and keeps integer dtypes, as PyTorch's; `reverse=True` gives y / self."""
        if rounding_mode not in (None, "trunc", "floor"):
            raise ArgumentError(f'div: rounding_mode must be None, "trunc" or "floor", got {rounding_mode!r}')
        if rounding_mode is None and isinstance(y, int) and not dtypes.is_float(self.dtype):
            # a true division is a float op: a Python int divides (or is divided by) the float of an integer tensor,
            # never first made a constant of the tensor's dtype (uint8 / 256 wrapped 256 to 0 and gave inf)
            return self._float().div(float(y), reverse)
        if self._inexact_scalar(y):
            if rounding_mode is not None:  # in float32 with the scalar as it is (PyTorch's), rounded once
                return self.float().div(y, reverse, rounding_mode).cast(self.dtype)
            # y / self as PyTorch's: the reciprocal in self's dtype, times y
            return self.reciprocal().mul(y) if reverse else self.float().div(y).cast(self.dtype)
        x, y2 = self._broadcasted(y, reverse, "div")
        if x.dtype == dtypes.bool and rounding_mode is not None:
            raise TypeError(f'div(rounding_mode="{rounding_mode}") of bool tensors is not defined (as in PyTorch); '
                            "cast them to an integer dtype first")  # fmt: skip
        if rounding_mode == "trunc":
            if dtypes.is_int(x.dtype):
                return x.idiv(y2)
            # PyTorch's: the quotient rounded to the dtype, then truncated (33312 / -48 rounds to -694 in half; 41 / 41
            # is 1 where division is exact, `Ops.FDIV`)
            return (x / y2).trunc()
        if rounding_mode == "floor":
            return x._floordiv(y2)
        x, y2 = x._float(), y2._float()
        if x.dtype in NARROW_FLOATS:  # in float32, rounded once: a half divisor below 2^-16 has no half reciprocal
            return x.float()._quotient(y2.float()).cast(x.dtype)
        return x._quotient(y2)

    def _quotient(self, y: Self) -> Self:
        """self / y for float tensors of one dtype and shape, rounded once (`Ops.FDIV`) where the device's division
        is exact (CPU, LLVM, CUDA, PYTHON), else within about 1.5 ulp (the lowerer's x * (1 / y), which scales a divisor
        whose reciprocal would overflow: `lazy.codegen.transcendental.division`)."""
        return self._apply(F.Div, y)

    def idiv(self, y: Self | ConstType, reverse: PyBool = False) -> Self:
        """Integer division truncating toward zero (C semantics); a divisor of 0 gives 0 (as numpy; C leaves it
        undefined, PyTorch raises)."""
        x, y2 = self._broadcasted(y, reverse, "idiv")
        return x._apply(F.IDiv, y2)

    def _floor_quotient(self, y: Self) -> Self:
        """x / y rounded toward -inf, for float tensors of one shape and dtype, Python's and PyTorch's float //: (x -
        fmod(x, y)) / y, an integer up to the division's rounding, taken to the nearest integer (floor(x / y) rounds
        the quotient first: 1 // 0.1 was 10, not 9), one less where the remainder's sign differs from y's."""
        # a zero divisor gives x / y (inf or NaN), below: the rest divides by 1 there, so that no 1 / 0 reaches the
        # gradient, which is 0 everywhere (PyTorch's)
        zero = y == 0
        ys = zero.where(1.0, y)
        r = self._float_remainder(ys)
        div = (self - r) / ys
        div = ((r != 0) & ((r < 0) != (ys < 0))).where(div - 1, div)
        whole = div.floor()
        whole = (div - whole > 0.5).where(whole + 1, whole)
        quotient = (self / y).detach()
        whole = (div == 0).where(quotient * 0, whole)  # a zero quotient has the sign of x / y
        return zero.where(quotient, whole)

    def _floordiv(self, y: Self) -> Self:
        if not dtypes.is_int(self.dtype):
            return self._floor_quotient(y)
        q = self._apply(F.IDiv, y)
        # truncation differs from floor when the signs differ and there is a remainder
        fix = ((self < 0) != (y < 0)) & (self._apply(F.Mod, y) != 0)
        return q - fix.cast(q.dtype)

    def floordiv(self, y: Self | ConstType, reverse: PyBool = False) -> Self:
        """floor(self / y), Python's `//`: integers stay integers, rounded toward -inf (an integer divisor of 0 gives 0,
        as numpy); `reverse=True` gives y // self."""
        if self._inexact_scalar(y):  # in float32 with the scalar as it is (PyTorch's), rounded once
            return self.float().floordiv(y, reverse).cast(self.dtype)
        x, y2 = self._broadcasted(y, reverse, "floordiv")
        x._no_bool_division("//")
        return x._floordiv(y2)

    def _no_bool_division(self, op: str) -> None:
        if self.dtype == dtypes.bool:
            raise TypeError(f"{op} of bool tensors is not defined (as in PyTorch); cast them to an integer dtype first")

    def mod(self, y: Self | ConstType, reverse: PyBool = False) -> Self:
        """Python/PyTorch modulo: the result has the sign of the divisor (an integer divisor of 0 gives 0, as numpy)."""
        x, y2 = self._broadcasted(y, reverse, "mod")
        x._no_bool_division("%")
        if not dtypes.is_int(x.dtype):  # C's exact remainder, moved onto the divisor's side (-1 % inf is inf)
            r = x._float_remainder(y2)
            return ((r != 0) & ((r < 0) != (y2 < 0))).where(r + y2, r)
        r = x._apply(F.Mod, y2)
        fix = (r != 0) & ((r < 0) != (y2 < 0))
        return fix.where(r + y2, r)

    def fmod(self, other: Self | ConstType) -> Self:
        """C's remainder: the sign follows the dividend (truncating division), unlike `%` (floor, Python's); a finite
        x over an infinite divisor is x, as C's fmod, and an integer divisor of 0 gives 0, as numpy's. Floats are
        exact while the quotient is below 2^22 (`_float_remainder`)."""
        a, b = self._broadcasted(other, op="fmod")
        a._no_bool_division("fmod")
        if not dtypes.is_float(a.dtype):
            return (b == 0).where(0, a - a.div(b, rounding_mode="trunc") * b)
        return a._float_remainder(b)

    def _float_remainder(self, y: Self) -> Self:
        """fmod(self, y) for float tensors of one shape and dtype: x - q y with q = trunc(x / y), where q y is taken
        exactly as p + e (Dekker's product of split halves) and the quotient's rounding corrected by one step
        (x / y rounding up to an integer: 1 % 0.1 came out 0, not 0.0999999). x - q y rounded as one product was off
        by up to a whole divisor. Exact while |q| < 2^22 and |y| < 2^100 (float32; float64 likewise); beyond, the
        one-product result."""
        if self.dtype in NARROW_FLOATS:  # in float32, rounded once
            return self.float()._float_remainder(y.float()).cast(self.dtype)
        splitter, limit = (4097.0, 2.0**100) if self.dtype == dtypes.float32 else (134217729.0, 2.0**500)
        x = self
        q = (x / y).trunc()
        p = q * y

        def halves(v: Self) -> tuple[Self, Self]:
            t = v * splitter
            hi = t - (t - v)
            return hi, v - hi

        (qh, ql), (yh, yl) = halves(q), halves(y)
        e = ((qh * yh - p) + qh * yl + ql * yh) + ql * yl  # q y - p, exactly
        r = (x - p) - e
        size = y.maximum(-y)
        # one step back where the quotient rounded up to the next integer (1 % 0.1), one forward where it rounded
        # down below one (41 % 41: 41 * (1 / 41) is 0.99999994)
        r = ((x > 0) & (r < 0)).where(r + size, ((x < 0) & (r > 0)).where(r - size, r))
        r = ((x > 0) & (r >= size)).where(r - size, ((x < 0) & (r <= -size)).where(r + size, r))
        exact = (q.maximum(-q) < 2.0**22) & (size < limit)
        r = exact.where(r, x - p)
        # a zero remainder has the dividend's sign (C's fmod(-6, 3) is -0.0), and r's gradient (1 for x, -q for y, as
        # PyTorch's; x * 0 alone had 0: every integer-valued x): the signed zero minus (r - r), which is +0
        r = (r == 0).where((x * 0).detach() - (r.detach() - r), r)
        return (y.isinf() & x.isfinite()).where(x, r)

    def trunc(self) -> Self:
        """Rounded toward zero (integer dtypes unchanged)."""
        if not dtypes.is_float(self.dtype):
            return self
        return self._apply(F.Trunc)

    def floor(self) -> Self:
        """The largest integer value not above each element, in the same dtype (integers unchanged)."""
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Self:
        """The smallest integer value not below each element, in the same dtype (integers unchanged)."""
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def round(self) -> Self:
        """Round half to even, like PyTorch and numpy; a zero result keeps the sign of x (round(-0.4) is -0.0)."""
        floor = self.floor()
        diff = self - floor
        even_floor = floor.cast(dtypes.int64).mod(2).eq(0)
        up = floor + 1  # (-1 + 1 is +0.0: for x in [-0.5, 0) the result is -0.0, x * 0)
        if dtypes.is_float(self.dtype):
            up = up.eq(0).where(self * 0, up)
        return (diff > 0.5).where(up, (diff < 0.5).where(floor, even_floor.where(floor, up)))

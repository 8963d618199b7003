"""`Tensor` elementwise functions beyond the basics: inverse trig and hyperbolic functions, erf, float checks,
the activation zoo, logical ops. A mixin of `Tensor`, built only from its basic methods."""

# mypy: disable-error-code="misc"
# (the methods annotate `self: Tensor`, the class they are mixed into; see lazy.tensor_nn)

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lazy.dtype import dtypes, to_np_dtype
from lazy.helpers import ArgumentError

if TYPE_CHECKING:
    from lazy.tensor import PyBool, PyFloat, Tensor, TensorLike


class MathMixin:
    """Derived elementwise math and activations of `Tensor`."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    # -- more elementwise: inverse trig/hyperbolic, erf, activations, float checks -------------------------------------

    def _poly(self: Tensor, coefficients: Sequence[PyFloat]) -> Tensor:
        """c[0]*x^(k-1) + ... + c[-1], by Horner's rule."""
        out: Tensor | PyFloat = coefficients[0]
        for c in coefficients[1:]:
            out = out * self + c
        assert isinstance(out, type(self))
        return out

    def asin(self: Tensor) -> Tensor:
        # Abramowitz & Stegun 4.4.46 on |x|, |error| <= 2e-8: asin(x) = pi/2 - sqrt(1 - x) * poly(x)
        a = self._float().abs()
        coefficients = (
            -0.0012624911,
            0.0066700901,
            -0.0170881256,
            0.0308918810,
            -0.0501743046,
            0.0889789874,
            -0.2145988016,
            1.5707963050,
        )
        return self._float().sign() * (math.pi / 2 - (1.0 - a).sqrt() * a._poly(coefficients))

    def acos(self: Tensor) -> Tensor:
        return math.pi / 2 - self.asin()

    def atan(self: Tensor) -> Tensor:
        x = self._float()
        big = x.abs() > 1  # atan(x) = sign(x) pi/2 - atan(1/x) there: x*x would overflow for large x
        inner = big.where(x.reciprocal(), x)
        a = (inner / (1 + inner * inner).sqrt()).asin()
        return big.where(x.sign() * (math.pi / 2) - a, a)

    def sinh(self: Tensor) -> Tensor:
        return (self.exp() - (-self._float()).exp()) / 2

    def cosh(self: Tensor) -> Tensor:
        return (self.exp() + (-self._float()).exp()) / 2

    def asinh(self: Tensor) -> Tensor:
        x = self._float()
        a = x.abs()
        big = a > 1e4  # log(2|x|) there, before x*x overflows (the dropped term is below float precision)
        small = big.where(1.0, a)
        return x.sign() * big.where(a.log() + math.log(2), (small + (small.square() + 1).sqrt()).log())

    def acosh(self: Tensor) -> Tensor:
        x = self._float()
        big = x > 1e4  # log(2x) there, before x*x overflows
        small = (x.abs() > 1e4).where(x.sign(), x)  # (x <= -1e4 stays below 1: NaN, as it should)
        return big.where(x.log() + math.log(2), (small + (small.square() - 1).sqrt()).log())

    def atanh(self: Tensor) -> Tensor:
        x = self._float()
        return ((1 + x) / (1 - x)).log() / 2

    def erf(self: Tensor) -> Tensor:
        # Abramowitz & Stegun 7.1.26 on |x|, |error| <= 1.5e-7
        x = self._float()
        t = 1.0 / (1.0 + 0.3275911 * x.abs())
        tail = t * t._poly((1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)) * (-x.square()).exp()
        return x.sign() * (1.0 - tail)

    def lerp(self: Tensor, end: Tensor, weight: TensorLike) -> Tensor:
        return self + (end - self) * weight

    def isnan(self: Tensor) -> Tensor:
        return self != self

    def isinf(self: Tensor, detect_positive: PyBool = True, detect_negative: PyBool = True) -> Tensor:
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtype=dtypes.bool)
        return pos | (self == -math.inf) if detect_negative else pos

    def isfinite(self: Tensor) -> Tensor:
        return (self.isinf() | self.isnan()).logical_not()

    def nan_to_num(
        self: Tensor, nan: PyFloat = 0.0, posinf: PyFloat | None = None, neginf: PyFloat | None = None
    ) -> Tensor:
        """NaN -> `nan`, +inf -> `posinf`, -inf -> `neginf` (default: the largest/lowest finite value of the dtype)."""
        if not dtypes.is_float(self.dtype):
            return self
        finite_max = float(np.finfo(to_np_dtype(self.dtype) if self.dtype != dtypes.bfloat16 else np.float32).max)
        if self.dtype == dtypes.bfloat16:
            finite_max = 3.3895313892515355e38
        hi = finite_max if posinf is None else posinf
        lo = -finite_max if neginf is None else neginf
        out = self.isnan().where(nan, self)
        return (self == math.inf).where(hi, (self == -math.inf).where(lo, out))

    def relu6(self: Tensor) -> Tensor:
        return self.relu().minimum(6)  # (not relu(x) - relu(x - 6): inf - inf, and rounding for large x)

    def hardswish(self: Tensor) -> Tensor:
        return self * (self + 3).relu6() * (1 / 6)

    def hardsigmoid(self: Tensor, alpha: PyFloat = 1 / 6, beta: PyFloat = 0.5) -> Tensor:
        return (alpha * self + beta).relu().minimum(1)

    def hardtanh(self: Tensor, min_val: PyFloat = -1, max_val: PyFloat = 1) -> Tensor:
        return self.clip(min_val, max_val)

    def quick_gelu(self: Tensor) -> Tensor:
        return self * (self * 1.702).sigmoid()

    def _negative_part(self: Tensor) -> Tensor:
        """min(x, 0) whose gradient is exactly 1 below zero and 0 above: exp() of it never overflows into a NaN."""
        return (self < 0).where(self, 0)

    def celu(self: Tensor, alpha: PyFloat = 1.0) -> Tensor:
        return (self >= 0).where(self, alpha * ((self._negative_part() / alpha).exp() - 1))

    def selu(self: Tensor, alpha: PyFloat = 1.67326, gamma: PyFloat = 1.0507) -> Tensor:
        return gamma * (self >= 0).where(self, alpha * (self._negative_part().exp() - 1))

    def mish(self: Tensor) -> Tensor:
        return self * self.softplus().tanh()

    def logsigmoid(self: Tensor) -> Tensor:
        return -(-self).softplus()

    def softsign(self: Tensor) -> Tensor:
        return self / (1 + self.abs())

    def logical_and(self: Tensor, y: TensorLike) -> Tensor:
        x, y2 = self._broadcasted(y, op="logical_and")
        return x.cast(dtypes.bool) & y2.cast(dtypes.bool)

    def logical_or(self: Tensor, y: TensorLike) -> Tensor:
        x, y2 = self._broadcasted(y, op="logical_or")
        return x.cast(dtypes.bool) | y2.cast(dtypes.bool)

    def logical_xor(self: Tensor, y: TensorLike) -> Tensor:
        x, y2 = self._broadcasted(y, op="logical_xor")
        return x.cast(dtypes.bool) ^ y2.cast(dtypes.bool)

    def bitwise_not(self: Tensor) -> Tensor:
        if dtypes.is_float(self.dtype):
            raise ArgumentError(f"bitwise_not needs an integer or bool tensor, not {self.dtype}")
        return ~self

    # -- more binary math ----------------------------------------------------------------------------------------------

    def log10(self: Tensor) -> Tensor:
        return self.log2() * math.log10(2)

    def logaddexp(self: Tensor, other: TensorLike) -> Tensor:
        """log(exp(self) + exp(other)) without overflow: the larger argument is factored out."""
        a, b = self._broadcasted(other, op="logaddexp")
        top = a.maximum(b).detach()
        top = top.isinf().where(0, top)  # both -inf (or inf): factor out nothing, the log gives the answer
        return ((a - top).exp() + (b - top).exp()).log() + top

    def copysign(self: Tensor, other: TensorLike) -> Tensor:
        """|self| with the sign of `other`: its sign bit for floats (-0.0 and -NaN count as negative), exactly and
        with PyTorch's gradient (`function.CopySign`). Integers keep their dtype (tinygrad's rule)."""
        from lazy import function as F

        if isinstance(other, float):  # only its sign counts (and a constant -0.0 would not survive as such)
            other = math.copysign(1.0, other)
        a, b = self._broadcasted(other, op="copysign")
        if dtypes.is_float(a.dtype):
            return F.CopySign.apply(a, b)
        magnitude = a.abs()
        return (b < 0).where(-magnitude, magnitude)

    def fmod(self: Tensor, other: TensorLike) -> Tensor:
        """C's remainder: the sign follows the dividend (truncating division), unlike `%` (floor, Python's)."""
        a, b = self._broadcasted(other, op="fmod")
        return a - a.div(b, rounding_mode="trunc") * b

    def isclose(self: Tensor, other: TensorLike, rtol: PyFloat = 1e-05, atol: PyFloat = 1e-08,
                equal_nan: PyBool = False) -> Tensor:  # fmt: skip
        """|self - other| <= atol + rtol * |other| elementwise; infinities are close only to themselves, NaN only to
        NaN and only with equal_nan."""
        a, b = self._broadcasted(other, op="isclose")
        finite = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
        out = finite | ((a.isinf() | b.isinf()) & (a == b))
        return out | (a.isnan() & b.isnan()) if equal_nan else out

    def allclose(self: Tensor, other: TensorLike, rtol: PyFloat = 1e-05, atol: PyFloat = 1e-08,
                 equal_nan: PyBool = False) -> Tensor:  # fmt: skip
        """Whether every element is `isclose` (a bool scalar tensor; `.item()` gives the Python bool)."""
        return self.isclose(other, rtol, atol, equal_nan).all()

"""`Tensor` elementwise functions beyond the basics: inverse trig and hyperbolic functions, erf, float checks, the
activations built from others (tanh, gelu, silu, elu, softplus and the rest of the zoo), logical ops. A mixin of
`Tensor`, built only from its basic methods."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lazy import function as F
from lazy.dtype import ConstType, dtypes, to_np_dtype
from lazy.helpers import ArgumentError
from lazy.tensor_base import PyBool, PyFloat, TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self


class MathMixin(TensorBase):
    """Derived elementwise math and activations of `Tensor`."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    # -- more elementwise: inverse trig/hyperbolic, erf, activations, float checks -------------------------------------

    def _poly(self, coefficients: Sequence[PyFloat]) -> Self:
        """c[0]*x^(k-1) + ... + c[-1], by Horner's rule."""
        out: Self | PyFloat = coefficients[0]
        for c in coefficients[1:]:
            out = out * self + c
        assert isinstance(out, type(self))
        return out

    def asin(self) -> Self:
        """arcsin(x) in [-pi/2, pi/2], NaN outside [-1, 1] (Abramowitz & Stegun 4.4.46: |error| <= 2e-8 before
        rounding)."""
        # on |x|: asin(x) = pi/2 - sqrt(1 - x) * poly(x)
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

    def acos(self) -> Self:
        """arccos(x) = pi/2 - asin(x), in [0, pi]."""
        return math.pi / 2 - self.asin()

    def atan(self) -> Self:
        """arctan(x) in (-pi/2, pi/2), through asin (of 1/x where |x| > 1, so that nothing overflows)."""
        x = self._float()
        big = x.abs() > 1  # atan(x) = sign(x) pi/2 - atan(1/x) there: x*x would overflow for large x
        inner = big.where(x.reciprocal(), x)
        a = (inner / (1 + inner * inner).sqrt()).asin()
        return big.where(x.sign() * (math.pi / 2) - a, a)

    def sinh(self) -> Self:
        """(exp(x) - exp(-x)) / 2."""
        return (self.exp() - (-self._float()).exp()) / 2

    def cosh(self) -> Self:
        """(exp(x) + exp(-x)) / 2."""
        return (self.exp() + (-self._float()).exp()) / 2

    def asinh(self) -> Self:
        """log(x + sqrt(x^2 + 1)), and sign(x) * log(2|x|) where |x| > 1e4 (before x^2 overflows)."""
        x = self._float()
        a = x.abs()
        big = a > 1e4  # log(2|x|) there, before x*x overflows (the dropped term is below float precision)
        small = big.where(1.0, a)
        return x.sign() * big.where(a.log() + math.log(2), (small + (small.square() + 1).sqrt()).log())

    def acosh(self) -> Self:
        """log(x + sqrt(x^2 - 1)), NaN below 1, and log(2x) where x > 1e4 (before x^2 overflows)."""
        x = self._float()
        big = x > 1e4  # log(2x) there, before x*x overflows
        small = (x.abs() > 1e4).where(x.sign(), x)  # (x <= -1e4 stays below 1: NaN, as it should)
        return big.where(x.log() + math.log(2), (small + (small.square() - 1).sqrt()).log())

    def atanh(self) -> Self:
        """log((1 + x) / (1 - x)) / 2: +-inf at +-1, NaN outside [-1, 1]."""
        x = self._float()
        return ((1 + x) / (1 - x)).log() / 2

    def erf(self) -> Self:
        """The error function (Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7 before rounding)."""
        # on |x|, with the sign put back
        x = self._float()
        t = 1.0 / (1.0 + 0.3275911 * x.abs())
        tail = t * t._poly((1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)) * (-x.square()).exp()
        return x.sign() * (1.0 - tail)

    def lerp(self, end: Self, weight: Self | ConstType) -> Self:
        """self + (end - self) * weight: linear interpolation from self (weight 0) to `end` (weight 1)."""
        return self + (end - self) * weight

    def isnan(self) -> Self:
        """Whether each element is NaN (x != x), a bool tensor."""
        return self != self

    def isinf(self, detect_positive: PyBool = True, detect_negative: PyBool = True) -> Self:
        """Whether each element is +inf (with `detect_positive`) or -inf (with `detect_negative`), a bool tensor."""
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtype=dtypes.bool)
        return pos | (self == -math.inf) if detect_negative else pos

    def isfinite(self) -> Self:
        """Whether each element is neither infinite nor NaN, a bool tensor."""
        return (self.isinf() | self.isnan()).logical_not()

    def nan_to_num(self, nan: PyFloat = 0.0, posinf: PyFloat | None = None, neginf: PyFloat | None = None) -> Self:
        """NaN -> `nan`, +inf -> `posinf`, -inf -> `neginf` (default: the largest/lowest finite value of the dtype)."""
        if not dtypes.is_float(self.dtype):
            return self
        import numpy as np

        finite_max = float(np.finfo(to_np_dtype(self.dtype) if self.dtype != dtypes.bfloat16 else np.float32).max)
        if self.dtype == dtypes.bfloat16:
            finite_max = 3.3895313892515355e38
        hi = finite_max if posinf is None else posinf
        lo = -finite_max if neginf is None else neginf
        out = self.isnan().where(nan, self)
        return (self == math.inf).where(hi, (self == -math.inf).where(lo, out))

    def tanh(self) -> Self:
        """tanh(x), as 2 * sigmoid(2x) - 1."""
        return 2.0 * ((2.0 * self._float()).sigmoid()) - 1.0

    def gelu(self, approximate: str = "tanh") -> Self:
        """GELU; approximate="tanh" (tinygrad's default) or "none" (exact, with erf, PyTorch's default)."""
        if approximate == "none":
            return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise ValueError(f'gelu: approximate must be "tanh" or "none", not {approximate!r}')
        return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self**3)).tanh())

    def silu(self) -> Self:
        """x * sigmoid(x) (also called swish)."""
        return self * self.sigmoid()

    swish = silu

    def leaky_relu(self, neg_slope: PyFloat = 0.01) -> Self:
        """x where x > 0, else neg_slope * x."""
        return self.relu() - (-neg_slope * self).relu()

    leakyrelu = leaky_relu  # (older tinygrad's name)

    def elu(self, alpha: PyFloat = 1.0) -> Self:
        """x where x > 0, else alpha * (exp(x) - 1)."""
        return (self > 0).where(self, alpha * (self._negative_part().exp() - 1))

    def softplus(self, beta: PyFloat = 1.0, threshold: PyFloat = 20.0) -> Self:
        """log(1 + exp(beta*x)) / beta, and x itself where beta*x > threshold (as torch: no overflow to inf)."""
        scaled = self * beta
        # max(s, 0) + log(1 + exp(-|s|)): no exp overflows, in the value or in its gradient
        stable = scaled.relu() + (1 + (-scaled.abs()).exp()).log()
        return (scaled > threshold).where(self, (1 / beta) * stable)

    def square(self) -> Self:
        """x * x."""
        return self * self

    def relu6(self) -> Self:
        """min(max(x, 0), 6)."""
        return self.relu().minimum(6)  # (not relu(x) - relu(x - 6): inf - inf, and rounding for large x)

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6."""
        return self * (self + 3).relu6() * (1 / 6)

    def hardsigmoid(self, alpha: PyFloat = 1 / 6, beta: PyFloat = 0.5) -> Self:
        """min(max(alpha * x + beta, 0), 1); the defaults are PyTorch's (1/6, 0.5)."""
        return (alpha * self + beta).relu().minimum(1)

    def hardtanh(self, min_val: PyFloat = -1, max_val: PyFloat = 1) -> Self:
        """x clipped to [min_val, max_val]."""
        return self.clip(min_val, max_val)

    def quick_gelu(self) -> Self:
        """x * sigmoid(1.702 * x), a cheaper approximation of GELU."""
        return self * (self * 1.702).sigmoid()

    def _negative_part(self) -> Self:
        """min(x, 0) whose gradient is exactly 1 below zero and 0 above: exp() of it never overflows into a NaN."""
        return (self < 0).where(self, 0)

    def celu(self, alpha: PyFloat = 1.0) -> Self:
        """x where x >= 0, else alpha * (exp(x / alpha) - 1)."""
        return (self >= 0).where(self, alpha * ((self._negative_part() / alpha).exp() - 1))

    def selu(self, alpha: PyFloat = 1.67326, gamma: PyFloat = 1.0507) -> Self:
        """gamma * (x where x >= 0, else alpha * (exp(x) - 1)); the default constants are tinygrad's, rounded (PyTorch's
        have more digits)."""
        return gamma * (self >= 0).where(self, alpha * (self._negative_part().exp() - 1))

    def mish(self) -> Self:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def logsigmoid(self) -> Self:
        """log(sigmoid(x)), computed as -softplus(-x) (no overflow for large |x|)."""
        return -(-self).softplus()

    def softsign(self) -> Self:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())

    def logical_and(self, y: Self | ConstType) -> Self:
        """Both operands cast to bool (nonzero is True), then and; a bool tensor (broadcast)."""
        x, y2 = self._broadcasted(y, op="logical_and")
        return x.cast(dtypes.bool) & y2.cast(dtypes.bool)

    def logical_or(self, y: Self | ConstType) -> Self:
        """Both operands cast to bool (nonzero is True), then or; a bool tensor (broadcast)."""
        x, y2 = self._broadcasted(y, op="logical_or")
        return x.cast(dtypes.bool) | y2.cast(dtypes.bool)

    def logical_xor(self, y: Self | ConstType) -> Self:
        """Both operands cast to bool (nonzero is True), then xor; a bool tensor (broadcast)."""
        x, y2 = self._broadcasted(y, op="logical_xor")
        return x.cast(dtypes.bool) ^ y2.cast(dtypes.bool)

    def bitwise_not(self) -> Self:
        """~x for integer and bool tensors (logical not for bool); a float tensor raises ArgumentError."""
        if dtypes.is_float(self.dtype):
            raise ArgumentError(f"bitwise_not needs an integer or bool tensor, not {self.dtype}")
        return ~self

    # -- more binary math ----------------------------------------------------------------------------------------------

    def log10(self) -> Self:
        """The base-10 logarithm, log2(x) * log10(2)."""
        return self.log2() * math.log10(2)

    def logaddexp(self, other: Self | ConstType) -> Self:
        """log(exp(self) + exp(other)) without overflow: the larger argument is factored out."""
        a, b = self._broadcasted(other, op="logaddexp")
        top = a.maximum(b).detach()
        top = top.isinf().where(0, top)  # both -inf (or inf): factor out nothing, the log gives the answer
        return ((a - top).exp() + (b - top).exp()).log() + top

    def copysign(self, other: Self | ConstType) -> Self:
        """|self| with the sign of `other`: its sign bit for floats (-0.0 and -NaN count as negative), exactly and
        with PyTorch's gradient (`function.CopySign`). Integers keep their dtype (tinygrad's rule)."""
        if isinstance(other, float):  # only its sign counts (and a constant -0.0 would not survive as such)
            other = math.copysign(1.0, other)
        a, b = self._broadcasted(other, op="copysign")
        if dtypes.is_float(a.dtype):
            return a._apply(F.CopySign, b)
        magnitude = a.abs()
        return (b < 0).where(-magnitude, magnitude)

    def fmod(self, other: Self | ConstType) -> Self:
        """C's remainder: the sign follows the dividend (truncating division), unlike `%` (floor, Python's)."""
        a, b = self._broadcasted(other, op="fmod")
        return a - a.div(b, rounding_mode="trunc") * b

    def isclose(self, other: Self | ConstType, rtol: PyFloat = 1e-05, atol: PyFloat = 1e-08,
                equal_nan: PyBool = False) -> Self:  # fmt: skip
        """|self - other| <= atol + rtol * |other| elementwise; infinities are close only to themselves, NaN only to
        NaN and only with equal_nan."""
        a, b = self._broadcasted(other, op="isclose")
        finite = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
        out = finite | ((a.isinf() | b.isinf()) & (a == b))
        return out | (a.isnan() & b.isnan()) if equal_nan else out

    def allclose(self, other: Self | ConstType, rtol: PyFloat = 1e-05, atol: PyFloat = 1e-08,
                 equal_nan: PyBool = False) -> Self:  # fmt: skip
        """Whether every element is `isclose` (a bool scalar tensor; `.item()` gives the Python bool)."""
        return self.isclose(other, rtol, atol, equal_nan).all()

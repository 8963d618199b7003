"""`Tensor` elementwise functions beyond the basics: inverse trig and hyperbolic functions, erf, float checks, the
activations built from others (tanh, gelu, silu, elu, softplus and the rest of the zoo), logical ops. A mixin of
`Tensor`, built only from its basic methods."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from lazy import function as F
from lazy.dtype import NARROW_FLOATS, ConstType, DType, dtypes, least_upper_float, to_np_dtype
from lazy.helpers import ArgumentError, ShapeError, broadcast_shape
from lazy.tensor_base import PyBool, PyFloat, TensorBase, TensorT

if TYPE_CHECKING:
    from typing_extensions import Self

# Taylor coefficients in powers of x^2, lowest first: tanh(x) = x * (1 - x^2/3 + 2 x^4/15 - 17 x^6/315 + ...), the
# coefficient of x^(2n-1) being 2^2n (2^2n - 1) B_2n / (2n)!, and sinh(x) = x * (1 + x^2/3! + x^4/5! + ...). Below
# |x| = 0.55 the first 9 of tanh's and 5 of sinh's reach float32 precision, 18 and 8 float64's.
_TANH_TAYLOR = (
    1.0, -0.3333333333333333, 0.13333333333333333, -0.05396825396825397, 0.021869488536155203, -0.008863235529902197,
    0.003592128036572481, -0.0014558343870513183, 0.000590027440945586, -0.00023912911424355248, 9.691537956929451e-05,
    -3.927832388331683e-05, 1.5918905069328964e-05, -6.451689215655431e-06, 2.6147711512907546e-06,
    -1.0597268320104654e-06, 4.294911078273806e-07, -1.7406618963571648e-07,
)  # fmt: skip
_SINH_TAYLOR = tuple(1 / math.factorial(2 * n + 1) for n in range(8))
_ASIN_TAYLOR = tuple(math.comb(2 * n, n) / (4**n * (2 * n + 1)) for n in range(24))  # asin(x) = sum c_n x^(2n+1)
_SERIES_BOUND = 0.55  # |x| below which tanh and sinh use their series (above it their exp formulas cancel little)


class _ErfFit(NamedTuple):
    """erf as two polynomial fits (least squares on Chebyshev nodes against Python's `math.erf` and `math.erfc`,
    computed for this file): for |x| < 1, erf(x) = x P(u) with u = 2 x^2 - 1; above, erf(|x|) = 1 - exp(-x^2) R(v),
    R(t) = erfc(1/t) exp(1/t^2) smooth in t = 1 / |x| on [1 / cut, 1], v = (t - center) / half_width. From `cut` on,
    exp(-x^2) R is below half an ulp of 1. Highest coefficient first (`_poly`)."""

    inner: tuple[float, ...]
    outer: tuple[float, ...]
    outer_center: float
    outer_half_width: float
    cut: float


_ERF_F32 = _ErfFit(
    inner=(
        1.2316401733353134e-06,
        -1.7669080811661653e-05,
        0.00021751198975769874,
        -0.0022854195288924406,
        0.01985249772277939,
        -0.140536097281537,
        0.9654687386375509,
    ),
    outer=(
        -1.8342505057504474e-06,
        3.816594676490105e-06,
        1.8064687544126244e-06,
        -2.8078154349494795e-05,
        0.00012019700204980897,
        -0.0003481154057051952,
        0.0004613694251042853,
        0.0023080212061440393,
        -0.024243014032924226,
        0.143356414461966,
        0.3059529923238462,
    ),
    outer_center=0.625,
    outer_half_width=0.375,
    cut=4.0,
)
_ERF_F64 = _ErfFit(
    inner=(
        -3.762330159929307e-13,
        9.210082546908027e-12,
        -2.0354206165217545e-10,
        4.1157564325604514e-09,
        -7.511566394056073e-08,
        1.2233827571130292e-06,
        -1.7537169460230657e-05,
        0.00021751715603937044,
        -0.0022854855611388653,
        0.0198524966889834,
        -0.14053608902271755,
        0.9654687386698672,
    ),
    outer=(
        7.913502226117255e-10,
        -1.6660004686562645e-10,
        -4.956351394252388e-09,
        2.467763194197094e-09,
        9.34261825313646e-09,
        -1.934122419080634e-09,
        -1.1222075031839302e-08,
        -1.5754767713163876e-08,
        6.290750380633182e-08,
        -9.72352973312737e-08,
        1.164943439287908e-07,
        2.7792015188695822e-09,
        -6.591944678286422e-07,
        2.5826049469214956e-06,
        -6.4992584268487485e-06,
        1.0882757795261571e-05,
        -4.046416126341306e-06,
        -5.528650971460904e-05,
        0.00026560544743001017,
        -0.0007383867420390375,
        0.001034432227358305,
        0.0028211318978539476,
        -0.030831050508448556,
        0.16536269001261472,
        0.28972211632346434,
    ),
    outer_center=0.5833333333333334,
    outer_half_width=0.4166666666666667,
    cut=6.0,
)


def _half_in_float32(method: Callable[..., TensorT]) -> Callable[..., TensorT]:
    """The method on half types computed in float32 and rounded once (`Tensor._in_float32`), as PyTorch computes
    them: in half, exp(x) - 1 near 0 was 14% off (elu), x * sigmoid(x) rounded twice (silu), asinh 34 ulp."""

    @functools.wraps(method)
    def wrapper(self: TensorT, *args: Any, **kwargs: Any) -> TensorT:
        if self.dtype in NARROW_FLOATS:
            return self._in_float32(lambda x: method(x, *args, **kwargs))
        return method(self, *args, **kwargs)

    return wrapper


def _sqrt_eps(dtype: DType) -> float:
    """sqrt(eps) of a float dtype: below it x^2 is lost next to 1, above its inverse 1 next to x^2."""
    return 2.0 ** (-dtypes.finfo(dtype)[1] / 2)


def _series_terms(dtype: DType, float32_terms: int, float64_terms: int) -> int:
    """How many terms of a series reach `dtype`'s precision: float64's count for float64, float32's for the rest."""
    return float64_terms if dtypes.finfo(dtype)[1] > 23 else float32_terms


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

    def _odd_series(self, coefficients: Sequence[PyFloat]) -> Self:
        """x * (c[0] + c[1] x^2 + c[2] x^4 + ...), an odd series given lowest coefficient first (-0.0 stays -0.0)."""
        return self * self.square()._poly(coefficients[::-1])

    def _near_zero(self, slope: PyFloat, otherwise: Self) -> Self:
        """slope * x where |x| < sqrt(eps) of the dtype, else `otherwise`: an odd f(x) = slope * x * (1 + c x^2 + ...)
        with |c| <= 1/3 rounds to slope * x there, tiny x and the sign of -0.0 included (where a formula built for
        larger x rounds them away)."""
        return (self.abs() < _sqrt_eps(self.dtype)).where(self * slope, otherwise)

    def _arcsine_series(self) -> Self:
        """asin(s) for |s| <= 1/2: its Taylor series, whose terms shrink by 4 or more each."""
        return self._odd_series(_ASIN_TAYLOR[: _series_terms(self.dtype, 10, 24)])

    @_half_in_float32
    def asin(self) -> Self:
        """arcsin(x) in [-pi/2, pi/2], NaN outside [-1, 1]: the series where |x| <= 1/2, and pi/2 - 2 asin(s) with
        s = sqrt((1 - |x|) / 2) <= 1/2 above (the series again), so the relative error stays a few ulp for every x
        (x itself below sqrt(eps), -0.0 too)."""
        x = self._float()
        a = x.abs()
        big = a > 0.5
        core = big.where(((1 - a) * 0.5).sqrt(), a)._arcsine_series()  # (NaN above 1: the sqrt of a negative)
        return x._near_zero(1.0, x.sign() * big.where(math.pi / 2 - 2 * core, core))

    @_half_in_float32
    def acos(self) -> Self:
        """arccos(x) in [0, pi]: pi/2 - asin(x) where |x| <= 1/2, else 2 asin(sqrt((1 - |x|) / 2)) (pi minus that
        below -1/2), which keeps the relative error small near x = 1, where pi/2 - asin(x) cancels."""
        x = self._float()
        a = x.abs()
        big = a > 0.5
        core = big.where(((1 - a) * 0.5).sqrt(), x)._arcsine_series()
        return big.where((x < 0).where(math.pi - 2 * core, 2 * core), math.pi / 2 - core)

    @_half_in_float32
    def atan(self) -> Self:
        """arctan(x) in (-pi/2, pi/2), through asin (of 1/x where |x| > 1, so that nothing overflows), with its
        accuracy (x itself for tiny x)."""
        x = self._float()
        big = x.abs() > 1  # atan(x) = sign(x) pi/2 - atan(1/x) there: x*x would overflow for large x
        inner = big.where(big.where(x, 1).reciprocal(), x)  # (1/x of 0 untaken would make its gradient 0 * inf)
        a = (inner / (1 + inner * inner).sqrt()).asin()
        return big.where(x.sign() * (math.pi / 2) - a, a)

    def sinh(self) -> Self:
        """sinh(x): its Taylor series where |x| < 0.55 (no cancellation: about 1.5 ulp), elsewhere `_exp_pair`'s
        (exp(x) - exp(-x)) / 2, as precise as exp and finite as long as the result is."""
        x = self._float()
        small = x.abs() < _SERIES_BOUND
        series = small.where(x, 0.0)._odd_series(_SINH_TAYLOR[: _series_terms(x.dtype, 5, 8)])
        return small.where(series, x._exp_pair(odd=True))

    def cosh(self) -> Self:
        """(exp(x) + exp(-x)) / 2 (see `_exp_pair`): as precise as exp, finite as long as the result is."""
        return self._float()._exp_pair(odd=False)

    def _exp_pair(self, odd: PyBool) -> Self:
        """(exp(x) - exp(-x)) / 2 if `odd` (sinh), else (exp(x) + exp(-x)) / 2 (cosh). Past |x| = (mantissa bits + 3)
        ln(2) / 2, where exp(-x) is below rounding, it is (sign(x) if odd) exp(|x| - 2) * e^2 / 2: |x| - 2 is exact
        there, and exp(|x| - 2) does not overflow before the result does (exp(x) / 2 would, for float32 |x| in
        (88.72, 89.42]; exp(|x| - ln 2) would round |x| - ln 2)."""
        a = self.abs()
        big = a > (dtypes.finfo(self.dtype)[1] + 3) * math.log(2) / 2
        far = (a - 2).exp() * (math.exp(2) / 2)
        moderate = big.where(0.0, self)  # (finite where unused: its zero gradient would meet exp's inf, 0 * inf = NaN)
        up, down = moderate.exp(), (-moderate).exp()
        return big.where(self.sign() * far if odd else far, (up - down if odd else up + down) / 2)

    @_half_in_float32
    def asinh(self) -> Self:
        """sign(x) log(|x| + sqrt(x^2 + 1)); sign(x) log(2|x|) above 1/sqrt(eps), where the dropped 1/(4x^2) is below
        rounding (and x^2 could overflow); x itself below sqrt(eps) (between that and 1, log(1 + small) costs up to
        about ulp(1) / |x| relative error)."""
        x = self._float()
        a = x.abs()
        big = a > 1 / _sqrt_eps(x.dtype)
        small, large = big.where(1.0, a), big.where(a, 1.0)  # each branch's operand finite where it is not taken
        # (1/x, the log's gradient, is inf for a subnormal x: the untaken branch's 0 gradient became NaN)
        return x._near_zero(
            1.0, x.sign() * big.where(large.log() + math.log(2), (small + (small.square() + 1).sqrt()).log())
        )

    @_half_in_float32
    def acosh(self) -> Self:
        """log(x + sqrt(x - 1) sqrt(x + 1)), NaN below 1 (sqrt(x - 1) is), and log(2x) above 1/sqrt(eps), where the
        dropped -1/(4x^2) is below rounding. Near 1, log(1 + small) costs up to about ulp(1) / acosh(x) relative
        error."""
        x = self._float()
        cutoff = 1 / _sqrt_eps(x.dtype)
        big = x > cutoff
        small = (x.abs() > cutoff).where(x.sign(), x)  # (x <= -cutoff stays below 1: NaN, as it should)
        # (not sqrt(x^2 - 1), which rounds to |x| for large negative x: log(x + |x|) = log(0) gave -inf, not NaN)
        return big.where(x.log() + math.log(2), (small + (small - 1).sqrt() * (small + 1).sqrt()).log())

    @_half_in_float32
    def atanh(self) -> Self:
        """log((1 + x) / (1 - x)) / 2: +-inf at +-1, NaN outside [-1, 1], x itself below sqrt(eps) (between that and
        1, log(1 + small) costs up to about ulp(1) / |x| relative error)."""
        x = self._float()
        return x._near_zero(1.0, ((1 + x) / (1 - x)).log() / 2)

    def erf(self) -> Self:
        """The error function, within about 2 ulp in float32 and 4 in float64 (`_ErfFit`; half types in float32,
        rounded once). Abramowitz & Stegun 7.1.26, used before, was 1.5e-7 off absolutely: 2e-4 relative in exact GELU,
        PyTorch's default, and float32's precision in float64."""
        x = self._float()
        if x.dtype in NARROW_FLOATS:
            return x._in_float32(lambda y: y.erf())
        fit = _ERF_F64 if x.dtype == dtypes.float64 else _ERF_F32
        # |x| held where exp(-x^2) is at most a subnormal, so that the gradient at inf is 0, not inf * 0
        a = x.abs().minimum(27.0 if x.dtype == dtypes.float64 else 10.0)
        far = a >= 1
        near = far.where(0.0, x)  # (0 where not taken: the other branch's inf would make the gradient NaN)
        inner = near * (near * near * 2 - 1)._poly(fit.inner)
        # R from the fit up to `cut` (its argument held in its range: a polynomial outside it grows), beyond from R's
        # asymptotic series, t / sqrt(pi) (1 - t^2 / 2 + 3 t^4 / 4 - 15 t^6 / 8 + ...): the value is 1 either way there,
        # but the gradient, 2 / sqrt(pi) exp(-x^2), comes from R and its slope
        t = 1 / far.where(a, 1)
        fitted = ((t.maximum(1 / fit.cut) - fit.outer_center) * (1 / fit.outer_half_width))._poly(fit.outer)
        series = t * (t * t)._poly((105 / 16, -15 / 8, 3 / 4, -1 / 2, 1.0)) * (1 / math.sqrt(math.pi))
        tail = (a < fit.cut).where(fitted, series) * (-(a * a)).exp()
        return x._near_zero(2 / math.sqrt(math.pi), far.where(x.sign() * (1 - tail), inner))

    def lerp(self, end: Self, weight: Self | ConstType) -> Self:
        """self + (end - self) * weight: linear interpolation from self (weight 0) to `end` (weight 1)."""
        shapes = [self.shape, *(getattr(v, "shape", ()) for v in (end, weight))]
        try:
            broadcast_shape("lerp", *shapes)
        except ValueError:
            raise ShapeError(f"lerp: self {shapes[0]}, end {shapes[1]} and weight {shapes[2]} cannot be broadcast "
                             "together") from None  # fmt: skip
        # from the nearer end (PyTorch's form): from self alone, weight 1 gave 0 for lerp(1e8, 1) (the difference
        # rounds away 1); and end itself comes out at weight 1
        diff = end - self
        if not isinstance(weight, TensorBase):
            return self + diff * weight if weight < 0.5 else end - diff * (1 - weight)
        return (weight < 0.5).where(self + diff * weight, end - diff * (1 - weight))

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
        """tanh(x): its Taylor series where |x| < 0.55 (about 1 ulp; 2 * sigmoid(2x) - 1 would lose small x to
        rounding), 2 * sigmoid(2x) - 1 elsewhere (up to about 3 ulp)."""
        x = self._float()
        small = x.abs() < _SERIES_BOUND
        series = small.where(x, 0.0)._odd_series(_TANH_TAYLOR[: _series_terms(x.dtype, 9, 18)])
        return small.where(series, 2.0 * ((2.0 * x).sigmoid()) - 1.0)

    def gelu(self, approximate: str = "tanh") -> Self:
        """GELU; approximate="tanh" (tinygrad's default) or "none" (exact, with erf, PyTorch's default). Half types
        compute in float32 and round once, as PyTorch's (in float16 the tanh rounds to -1 on the negative tail, and
        the result to -0)."""
        if self.dtype in NARROW_FLOATS and approximate in ("none", "tanh"):
            return self._in_float32(lambda x: x.gelu(approximate))
        if approximate == "none":
            return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise ValueError(f'gelu: approximate must be "tanh" or "none", not {approximate!r}')
        return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self**3)).tanh())

    @_half_in_float32
    def silu(self) -> Self:
        """x * sigmoid(x) (also called swish)."""
        return self * self.sigmoid()

    swish = silu

    def leaky_relu(self, neg_slope: PyFloat = 0.01) -> Self:
        """x where x > 0, else neg_slope * x; its gradient at 0 is neg_slope (PyTorch's)."""
        return (self > 0).where(self, self * neg_slope)

    leakyrelu = leaky_relu  # (older tinygrad's name)

    @_half_in_float32
    def elu(self, alpha: PyFloat = 1.0) -> Self:
        """x where x > 0 (NaN stays NaN), else alpha * (exp(x) - 1) (see `_exp_below_zero` for its accuracy)."""
        return self._exp_below_zero(alpha, 1.0)

    def _exp_below_zero(self, alpha: PyFloat, scale: PyFloat) -> Self:
        """x where x > 0 or NaN (a select on x <= 0, which NaN fails), else alpha * (exp(x / scale) - 1), the elu
        family's curve. exp(x / scale) - 1 has an absolute error of about eps, so a large relative one for small |x|;
        below |x / scale| = eps it would round to 0, and alpha / scale * x (-0.0 keeping its sign) is used instead."""
        eps = 2.0 ** -dtypes.finfo(least_upper_float(self.dtype))[1]
        negative = self._negative_part()
        curve = alpha * ((negative if scale == 1 else negative / scale).exp() - 1)
        tiny = self > -eps * abs(scale)
        return (self <= 0).where(tiny.where(self * (alpha / scale), curve), self)

    def softplus(self, beta: PyFloat = 1.0, threshold: PyFloat = 20.0) -> Self:
        """log(1 + exp(beta*x)) / beta, and x itself where beta*x > threshold (as torch: no overflow to inf)."""
        if beta == 0:
            raise ArgumentError("softplus: beta must not be 0: the result, log(1 + exp(beta x)) / beta, divides by it; "
                                "pass a positive beta")  # fmt: skip
        scaled = self * beta
        # s + log(1 + exp(-s)) above 0, log(1 + exp(s)) elsewhere: no exp overflows, in the value or its gradient
        # (sigmoid(s), 0.5 at 0: max(s, 0) + log(1 + exp(-|s|)) had 0 there, relu's and abs's gradients at 0). Each
        # branch reads 0 where it is not taken, so its gradient there is finite and the where passes none of it.
        up = scaled > 0
        above, below = up.where(scaled, 0), up.where(0, scaled)
        # (log1p: log(1 + exp(s)) rounded 1 + exp(s) first, and was 0 from s = -17 on, 4e-4 off at -10)
        stable = up.where(above + (-above).exp().log1p(), below.exp().log1p())
        return (scaled > threshold).where(self, (1 / beta) * stable)

    def square(self) -> Self:
        """x * x."""
        return self * self

    def relu6(self) -> Self:
        """min(max(x, 0), 6), with PyTorch's gradient: 1 strictly between, 0 at both kinks."""
        return self.hardtanh(0, 6)  # (not relu(x) - relu(x - 6): inf - inf, and rounding for large x)

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6 (the relu6 scaled first: x * 6 overflowed float16 from 10923 on)."""
        return self * ((self + 3).relu6() * (1 / 6))

    def hardsigmoid(self, alpha: PyFloat = 1 / 6, beta: PyFloat = 0.5) -> Self:
        """min(max(alpha * x + beta, 0), 1); the defaults are PyTorch's (1/6, 0.5)."""
        return (alpha * self + beta).hardtanh(0, 1)  # (its gradient 0 at the kinks, as PyTorch's)

    def hardtanh(self, min_val: PyFloat = -1, max_val: PyFloat = 1) -> Self:
        """x clipped to [min_val, max_val]; the gradient is PyTorch's, 1 strictly inside and 0 at the bounds (clip's
        is 1 there, as clamp's)."""
        inside = (self > min_val) & (self < max_val)
        return inside.where(self, self.clip(min_val, max_val).detach())

    @_half_in_float32
    def quick_gelu(self) -> Self:
        """x * sigmoid(1.702 * x), a cheaper approximation of GELU."""
        return self * (self * 1.702).sigmoid()

    def _negative_part(self) -> Self:
        """min(x, 0) whose gradient is exactly 1 below zero and 0 above: exp() of it never overflows into a NaN."""
        return (self < 0).where(self, 0)

    @_half_in_float32
    def celu(self, alpha: PyFloat = 1.0) -> Self:
        """x where x >= 0 (NaN stays NaN), else alpha * (exp(x / alpha) - 1) (see `_exp_below_zero`)."""
        return self._exp_below_zero(alpha, alpha)

    @_half_in_float32
    def selu(self, alpha: PyFloat = 1.67326, gamma: PyFloat = 1.0507) -> Self:
        """gamma * (x where x >= 0, else alpha * (exp(x) - 1)), NaN staying NaN (see `_exp_below_zero`); the default
        constants are tinygrad's, rounded (PyTorch's have more digits)."""
        return gamma * self._exp_below_zero(alpha, 1.0)

    @_half_in_float32
    def mish(self) -> Self:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    @_half_in_float32
    def logsigmoid(self) -> Self:
        """log(sigmoid(x)), computed as -softplus(-x) (no overflow for large |x|)."""
        return -(-self).softplus()

    @_half_in_float32
    def log1p(self) -> Self:
        """log(1 + x), exact for small |x| too (where 1 + x rounds): log(u) * x / (u - 1) with u = 1 + x, the second
        factor correcting u's rounding, and x itself where u rounds to 1. Its gradient is 1 / (1 + x)."""
        x = self._float()
        u = 1 + x
        one = u == 1
        exact = one | (u == 0) | x.isinf()  # (log(u) needs no correction there: -inf, inf)
        log = u.log()
        # log(u) * correction in value, the correction x / (u - 1) being 1 up to u's rounding; log(u)'s gradient,
        # 1/u (the correction's own would scale it by its error)
        adjust = exact.where(0, log * (x / (u - 1) - 1)).detach()
        return one.where(x, log + adjust)

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
        hi, lo = a.maximum(b), a.minimum(b)
        # hi + log1p(exp(lo - hi)): exp(lo - hi) <= 1 never overflows, and log1p keeps it where 1 + it rounds to 1
        # (logaddexp(-20, 0) was 0). An infinite hi is the answer itself (both -inf: -inf; an inf: inf), and its
        # branch reads 0 so that no NaN reaches the gradient through the branch not taken
        infinite = hi.isinf()
        return infinite.where(hi, hi + infinite.where(0, lo - hi).exp().log1p())

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

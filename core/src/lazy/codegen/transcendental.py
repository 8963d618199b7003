"""EXP2, LOG2 and SIN as polynomial code in primitive UOps, for renderers without a fast native version that works on
vectors (`Capabilities.native_math`): a libm call is scalar and keeps the compiler from vectorizing the loop.

Range reduction works on the exponent bits (BITCAST and integer shifts), a minimax polynomial covers the reduced range,
and every special case (0, denormals, inf, NaN, overflow) is a select, never a branch. float32 and float64 have their
own polynomials; narrower floats compute in float32 and round once."""

from __future__ import annotations

import struct

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.record import record

POLYNOMIAL_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})

# floor(2/pi * 2^2240): the binary digits of 2/pi that Payne-Hanek reduction multiplies an argument by
TWO_OVER_PI = int(
    "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E006492EEA09D1921CFE1DEB1CB129A73E"
    "E88235F52EBB4484E99C7026B45F7E413991D639835339F49C845F8BBDF9283B1FF897FFDE05980FEF2F118B5A0A6D1F6D367ECF27CB09B7"
    "4F463F669E5FEA2D7527BAC7EBE5F17B3D0739F78A5292EA6BFB5FB11F8D5D0856033046FC7B6BABF0CFBC209AF4361DA9E391615EE61B08"
    "6599855F14A068408DFFD8804D73273106061556CA73A8C960E27BC08C6B47C419C367CDDCE8092A8359C4768B961CA6DDAF44D15719053E"
    "A5FF07053F7E33E832C2DE4F98327DBBC33D26EF6B1E5EF89F3A1F35CAF27F1D87F121907C7C246AFA6ED5772D30433B15C614B59D19C3C2",
    16,
)
TWO_OVER_PI_BITS = 2240


@record(frozen=True)
class FloatFormat:
    """One float dtype as the polynomial code sees it: its bit layout and its polynomials (coefficients of x^0 first,
    each a minimax fit of the relative error, rounded to the dtype coefficient by coefficient)."""

    dtype: DType
    bits: DType  # the unsigned integer of the same size
    mantissa: int  # stored mantissa bits
    exponent: int  # exponent bits
    exp2: tuple[float, ...]  # 2^r on [-1/2, 1/2]
    log2: tuple[float, ...]  # log2(1+f) = f/ln2 + f^2 P(f) on [m-1, 2m-1], m the dtype's 1/sqrt(2): P
    log2e: tuple[float, float]  # 1/ln2 as hi + lo
    ln2: tuple[float, float]  # ln 2 as hi + lo, hi short enough that n * hi is exact for any exponent n (Cody-Waite)
    sin: tuple[float, ...]  # sin(x) = x + x^3 P(x^2) on [0, pi/4]: P
    cos: tuple[float, ...]  # cos(x) = 1 - x^2/2 + x^4 Q(x^2) on [0, pi/4]: Q
    half_pi: tuple[float, float]  # pi/2 as hi + lo
    mantissa_limbs: int  # 32-bit limbs of the significand, in Payne-Hanek reduction
    window_limbs: int  # 32-bit limbs of 2/pi it multiplies by: enough for the closest multiple of pi/2 of any input

    @property
    def bias(self) -> int:
        return (1 << (self.exponent - 1)) - 1

    @property
    def size(self) -> int:
        return 8 * self.dtype.itemsize

    def to_bits(self, value: float) -> int:
        fmt = {4: ("<f", "<I"), 8: ("<d", "<Q")}[self.dtype.itemsize]
        return struct.unpack(fmt[1], struct.pack(fmt[0], value))[0]

    def from_bits(self, bits: int) -> float:
        fmt = {4: ("<I", "<f"), 8: ("<Q", "<d")}[self.dtype.itemsize]
        return struct.unpack(fmt[1], struct.pack(fmt[0], bits))[0]


# minimax fits of the relative error (Remez exchange in 45-digit arithmetic); float32 coefficients rounded one at a
# time, lowest first, the later ones fitted again each time; float64 ones rounded once. Worst relative error of the
# rounded polynomials, float32 / float64: exp2 2^-27.5 / 2^-55.5, log2 2^-27.7 / 2^-54.5, sin 2^-32.5 / 2^-57,
# cos 2^-37 / 2^-59.5 (an ulp is 2^-23 / 2^-52)
FLOAT32 = FloatFormat(
    dtype=dtypes.float32,
    bits=dtypes.uint32,
    mantissa=23,
    exponent=8,
    exp2=(1.0, 0.6931472420692444, 0.24022655189037323, 0.05550272390246391, 0.009617063216865063,
          0.0013418203452602029, 0.0001582050754223019),
    log2=(-0.7213473320007324, 0.4808982014656067, -0.3606986701488495, 0.28857141733169556, -0.2395673543214798,
          0.20448660850524902, -0.19139091670513153, 0.18708786368370056, -0.11025495082139969),
    log2e=(1.4426950216293335, 1.925963033500011e-08),
    ln2=(0.693145751953125, 1.428606765330187e-06),
    sin=(-0.1666666716337204, 0.008333379402756691, -0.00019853064441122115, 2.8325100629444933e-06),
    cos=(0.0416666679084301, -0.0013888980029150844, 2.482202216924634e-05, -2.888123447064572e-07),
    half_pi=(1.5707963705062866, -4.371138828673793e-08),
    mantissa_limbs=1,
    window_limbs=3,
)  # fmt: skip
FLOAT64 = FloatFormat(
    dtype=dtypes.float64,
    bits=dtypes.uint64,
    mantissa=52,
    exponent=11,
    exp2=(1.0, 0.6931471805599453, 0.24022650695910072, 0.055504108664821736, 0.009618129107628562,
          0.0013333558146381738, 0.00015403530393171832, 1.5252733864845228e-05, 1.3215487003410286e-06,
          1.0178047531126534e-07, 7.054814835761013e-09, 4.4572393219000267e-10, 2.5855239845543763e-11),
    log2=(-0.7213475204444827, 0.4808983469629885, -0.3606737602216702, 0.28853900817710404, -0.2404491735793988,
          0.20609929171965077, -0.18033687250873925, 0.1602994326417734, -0.14426981991287086, 0.13115493256285415,
          -0.12021710641004135, 0.11095222701039895, -0.1031492367722479, 0.09659219767179612, -0.08953691325195476,
          0.08087326492842054, -0.08017156184763598, 0.09534875990893064, -0.09259399060803145,
          0.042131990276628666),
    log2e=(1.4426950408889634, 2.0355273740931033e-17),
    ln2=(0.6931471805601177, -1.7239444525614835e-13),
    sin=(-0.16666666666666666, 0.008333333333333323, -0.000198412698412548, 2.755731921406492e-06,
         -2.5052104881870868e-08, 1.6058363167320444e-10, -7.578540409484281e-13),
    cos=(0.041666666666666664, -0.0013888888888888872, 2.480158730157055e-05, -2.755731921499979e-07,
         2.087675428708152e-09, -1.147028484342536e-11, 4.737750796424621e-14),
    half_pi=(1.5707963267948966, 6.123233995736766e-17),
    mantissa_limbs=2,
    window_limbs=6,
)  # fmt: skip
FORMATS = {FLOAT32.dtype: FLOAT32, FLOAT64.dtype: FLOAT64}

LIMB = 0xFFFFFFFF
U64 = dtypes.uint64


class VectorMath:
    """Appends the UOps of elementwise math on values of one vector width (`count` lanes; 1 is scalar): constants
    come out as vectors of that width, and each helper is one primitive op."""

    def __init__(self, builder: UOpBuilder, count: int):
        self.builder, self.count = builder, count

    def const(self, value: float | int, dtype: DType) -> UOp:
        return self.builder.const(dtypes.as_const(value, dtype), dtype.vec(self.count))

    def alu(self, op: Ops, *src: UOp) -> UOp:
        return self.builder.alu(op, *src)

    def scalar(self, x: UOp) -> DType:
        assert x.dtype is not None
        return x.dtype.scalar()

    def operand(self, y: UOp | float | int, like: UOp) -> UOp:
        """`y`, a Python number becoming a constant of `like`'s dtype."""
        return y if isinstance(y, UOp) else self.const(y, self.scalar(like))

    def binary(self, op: Ops, x: UOp | float | int, y: UOp | float | int) -> UOp:
        """`op` of x and y, at least one of them a UOp."""
        if isinstance(x, UOp):
            return self.alu(op, x, self.operand(y, x))
        assert isinstance(y, UOp)
        return self.alu(op, self.operand(x, y), y)

    def add(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.ADD, x, y)

    def sub(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        # x - y is x + (-y) exactly, for floats too; unsigned negation wraps
        return self.add(x, self.alu(Ops.NEG, y) if isinstance(y, UOp) else -y)

    def mul(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.MUL, x, y)

    def mulacc(self, x: UOp, y: UOp | float, z: UOp | float) -> UOp:
        """x*y + z (one rounding where the renderer fuses it)."""
        return self.alu(Ops.MULACC, x, self.operand(y, x), self.operand(z, x))

    def max(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.MAX, x, y)

    def lt(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.CMPLT, x, y)

    def ne(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.CMPNE, x, y)

    def where(self, cond: UOp, x: UOp | float | int, y: UOp | float | int) -> UOp:
        like = x if isinstance(x, UOp) else y
        assert isinstance(like, UOp)
        return self.alu(Ops.WHERE, cond, self.operand(x, like), self.operand(y, like))

    def bit_and(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.AND, x, y)

    def bit_or(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.OR, x, y)

    def bit_xor(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.XOR, x, y)

    def shl(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.SHL, x, y)

    def shr(self, x: UOp | float | int, y: UOp | float | int) -> UOp:
        return self.binary(Ops.SHR, x, y)

    def cast(self, x: UOp, dtype: DType) -> UOp:
        return x if self.scalar(x) == dtype else self.builder.add(UOps.CAST, dtype.vec(self.count), (x,))

    def bitcast(self, x: UOp, dtype: DType) -> UOp:
        return x if self.scalar(x) == dtype else self.builder.add(UOps.BITCAST, dtype.vec(self.count), (x,))

    def horner(self, x: UOp, coefs: tuple[float, ...]) -> UOp:
        """c0 + x*(c1 + x*(c2 + ...))."""
        acc = self.const(coefs[-1], self.scalar(x))
        for c in reversed(coefs[:-1]):
            acc = self.mulacc(acc, x, c)
        return acc


def division(builder: UOpBuilder, x: UOp, y: UOp) -> UOp:
    """x / y (`Ops.FDIV`) for a renderer whose division is not exact (`Capabilities.exact_division`): x * (1 / y),
    within about 1.5 ulp. A divisor so small that its reciprocal overflows (a float32 below 2^-128: 0 / 1e-40 would be
    0 * inf = NaN, 1e-39 / 1e-40 inf) is scaled up by 2^k first and the quotient scaled back, one so large that its
    reciprocal is subnormal scaled down: exact, the scalings powers of two. Tested as y * y < 2^-2k and max(y, -y) <
    2^(emax - 2): ops with vector forms. Half types compute in float32, rounded once."""
    assert x.dtype is not None and y.dtype is not None
    dtype, count = x.dtype.scalar(), x.dtype.count
    math = VectorMath(builder, count)
    if dtype not in FORMATS:
        if not dtypes.is_float(dtype):  # (not reached: Tensor code divides floats only)
            return math.mul(x, math.alu(Ops.RECIP, y))
        wide = FLOAT32.dtype
        return math.cast(division(builder, math.cast(x, wide), math.cast(y, wide)), dtype)
    k, huge = (64, 2.0**125) if dtype == FLOAT32.dtype else (512, 2.0**1021)
    c = y.arg if y.op is UOps.CONST and isinstance(y.arg, (int, float)) else None
    if c is not None and not (c != 0 and abs(c) < 2.0**-k) and not abs(c) > huge:  # a reciprocal that is normal
        return math.mul(x, math.alu(Ops.RECIP, y))
    # and a divisor so large that its reciprocal is subnormal (3e38 / 3e38 was 4 ulp off) scaled down by 2^k
    s = math.where(math.lt(math.max(y, math.alu(Ops.NEG, y)), huge), 1.0, math.const(2.0**-k, dtype))
    s = math.where(math.lt(math.mul(y, y), 2.0 ** (-2 * k)), math.const(2.0**k, dtype), s)
    return math.mul(math.mul(x, math.alu(Ops.RECIP, math.mul(y, s))), s)


def lower_transcendental(builder: UOpBuilder, op: Ops, x: UOp, natural: UOp | None = None,
                         native_exp2: bool = False) -> UOp:  # fmt: skip
    """`op` (one of `POLYNOMIAL_OPS`) of `x` as polynomial code appended to `builder`. `x` is a float scalar or
    vector; float16, bfloat16 and fp8 compute in float32 and round once, as their Tensor math does. `natural`: for an
    EXP2 of `y * log2(e)` (how `exp` reaches a kernel), y itself, so that the reduction can start from y (`exp`);
    with `native_exp2` (a renderer whose EXP2 is native) only that reduction is code, 2^r the native EXP2."""
    assert x.dtype is not None and op in POLYNOMIAL_OPS
    dtype, count = x.dtype.scalar(), x.dtype.count
    if not dtypes.is_float(dtype):
        return builder.alu(op, x)  # (not reached from Tensor code, which computes these in a float dtype)
    math = VectorMath(builder, count)
    fmt = FORMATS.get(dtype, FLOAT32)
    if natural is not None and op is Ops.EXP2:
        return math.cast(exp(math, fmt, math.cast(natural, fmt.dtype), native_exp2), dtype)
    value = math.cast(x, fmt.dtype)
    out = {Ops.EXP2: exp2, Ops.LOG2: log2, Ops.SIN: sin}[op](math, fmt, value)
    return math.cast(out, dtype)


# ---------------------------------------------------------------------------------------------------------------------
# exp2


def exp2(math: VectorMath, fmt: FloatFormat, x: UOp) -> UOp:
    """2^x = 2^n * 2^r, n = round(x), |r| <= 1/2: a polynomial for 2^r, then 2^n built in the exponent field, in two
    factors so that the results near overflow and the denormal ones (one rounding, at the last multiply) come out
    right. Clamping x first makes the too large inf and the too small 0; NaN stays NaN through every step."""
    low, high = -(fmt.bias + fmt.mantissa + 1), fmt.bias + 2  # 2^low * sqrt(2) rounds to 0, 2^high / sqrt(2) is inf
    x = math.where(math.lt(x, low), low, x)  # (a NaN compares false: it stays)
    x = math.where(math.lt(high, x), high, x)
    magic = 1.5 * 2.0**fmt.mantissa  # adding it rounds to an integer (to even), and its low bits then hold n
    shifted = math.add(x, magic)
    r = math.sub(x, math.sub(shifted, magic))
    return scale_by_power(math, fmt, math.horner(r, fmt.exp2), shifted)


def exp(math: VectorMath, fmt: FloatFormat, y: UOp, native_exp2: bool = False) -> UOp:
    """e^y = 2^n * 2^r with n = round(y log2(e)) and r = (y - n ln2) log2(e), where y - n ln2 is exact (Cody-Waite:
    n times ln2's short high part is exact, then its low part). exp2 of the rounded product y log2(e) loses
    |y log2(e)| ulp(1) of relative accuracy (63 ulp near 88 in float32, 8 in [1, 10)); this is within about an ulp.
    y is clamped to the range where exp2's clamp would put y log2(e), so huge and infinite y give inf or 0."""
    low, high = -(fmt.bias + fmt.mantissa + 1) * fmt.ln2[0], (fmt.bias + 2) * fmt.ln2[0]
    y = math.where(math.lt(y, low), low, y)
    y = math.where(math.lt(high, y), high, y)
    magic = 1.5 * 2.0**fmt.mantissa
    shifted = math.add(math.mul(y, fmt.log2e[0]), magic)
    n = math.sub(shifted, magic)
    # y - n ln2, |.| <= ln2/2: n * ln2's high part is exact, so fused or not the first step rounds once
    reduced = math.mulacc(n, -fmt.ln2[1], math.mulacc(n, -fmt.ln2[0], y))
    r = math.mul(reduced, fmt.log2e[0])
    # a native exp2 (a GPU's) is within an ulp or two for |r| <= 1/2; of the rounded product y log2(e) it lost up to
    # 54 ulp near |y| = 88: only the reduction is needed from here then
    return scale_by_power(math, fmt, math.alu(Ops.EXP2, r) if native_exp2 else math.horner(r, fmt.exp2), shifted)


def scale_by_power(math: VectorMath, fmt: FloatFormat, poly: UOp, shifted: UOp) -> UOp:
    """poly * 2^n, n the integer in the low bits of `shifted` (n + 1.5 * 2^mantissa), in two factors so that results
    near overflow and the denormal ones (one rounding, at the last multiply) come out right."""
    magic = 1.5 * 2.0**fmt.mantissa
    # n + 2^exponent_bits, non-negative, from the bits of x + magic; half of n goes into each factor
    offset = math.sub(math.bitcast(shifted, fmt.bits), fmt.to_bits(magic) - (1 << fmt.exponent))
    half = math.shr(offset, 1)
    first = math.bitcast(math.shl(math.sub(half, 1), fmt.mantissa), fmt.dtype)  # 2^(floor(n/2)), biased
    second = math.bitcast(math.shl(math.sub(math.sub(offset, half), 1), fmt.mantissa), fmt.dtype)  # 2^(n - that)
    return math.mul(math.mul(poly, first), second)


# ---------------------------------------------------------------------------------------------------------------------
# log2


def log2(math: VectorMath, fmt: FloatFormat, x: UOp) -> UOp:
    """log2(x) = e + log2(m), x = m * 2^e with m in [1/sqrt(2), sqrt(2)): e and m straight from the bits (denormals
    scaled up first), log2(m) = f * P(f) with f = m - 1 exact. Special values by select."""
    smallest_normal = 2.0 ** (1 - fmt.bias)
    tiny = math.lt(x, smallest_normal)  # (also true for 0 and negatives: both replaced below)
    scaled = math.where(tiny, math.mul(x, 2.0**fmt.mantissa), x)
    split = fmt.to_bits(0.5**0.5)  # m's lower end, as the dtype rounds it
    # adding (1.0 - split) carries into the exponent exactly when the mantissa is at least split's
    bits = math.add(math.bitcast(scaled, fmt.bits), fmt.to_bits(1.0) - split)
    biased = math.shr(bits, fmt.mantissa)
    bias = math.where(tiny, math.const(fmt.bias + fmt.mantissa, fmt.dtype), fmt.bias)
    exponent = math.sub(small_uint_to_float(math, fmt, biased), bias)
    mantissa = math.bitcast(math.add(math.bit_and(bits, (1 << fmt.mantissa) - 1), split), fmt.dtype)
    f = math.sub(mantissa, 1.0)
    # f*log2e_hi + f*(log2e_lo + f*P(f)): the largest product exactly, so the result is rounded about once
    product, error = two_product(math, fmt, f, fmt.log2e[0])
    tail = math.mul(f, math.mulacc(f, math.horner(f, fmt.log2), fmt.log2e[1]))
    out = math.add(math.add(product, math.add(error, tail)), exponent)
    # one select of the result, on one comparison: gcc 12 vectorizes neither a deeper nest of selects (at most 4 values
    # meet in one if-converted join, and the caller may nest this one again) nor a select on an AND of comparisons
    special = math.where(math.lt(x, 0.0), float("nan"), math.where(math.ne(x, 0.0), x, float("-inf")))  # -0 too
    positive_bits = fmt.to_bits(float("inf")) - 1  # bits - 1 below this: x is positive, finite and not 0
    regular = math.lt(math.sub(math.bitcast(x, fmt.bits), 1), positive_bits)
    return math.where(regular, out, special)  # +inf and NaN: x itself


def small_uint_to_float(math: VectorMath, fmt: FloatFormat, value: UOp) -> UOp:
    """An unsigned integer below 2^mantissa as a float, exactly: placed in the mantissa of 2^mantissa, which is then
    subtracted (vectorizes where an unsigned 64-bit conversion would not)."""
    one = fmt.to_bits(2.0**fmt.mantissa)
    return math.sub(math.bitcast(math.bit_or(math.cast(value, fmt.bits), one), fmt.dtype), 2.0**fmt.mantissa)


# ---------------------------------------------------------------------------------------------------------------------
# sin


def sin(math: VectorMath, fmt: FloatFormat, x: UOp) -> UOp:
    """sin(x) = +-sin or +-cos of r, |x| = q*pi/2 + r, |r| <= pi/4. Below pi/4 r is x; above, Payne-Hanek reduction
    (exact for every finite input) gives r as hi + lo. Both run for every lane (selects, no branches), so a
    separate moderate-range reduction would only add work."""
    sign_bit = 1 << (fmt.size - 1)
    bits = math.bitcast(x, fmt.bits)
    ax = math.bitcast(math.bit_and(bits, sign_bit - 1), fmt.dtype)
    quadrant, hi, lo = reduce_half_pi(math, fmt, ax)
    direct = math.lt(ax, 0.785398)  # below pi/4 (0.7853981...): no reduction
    quadrant = math.where(direct, 0, quadrant)
    hi = math.where(direct, ax, hi)
    lo = math.where(direct, 0.0, lo)
    z = math.mul(hi, hi)
    # sin(hi + lo) = hi + (lo + hi^3 P(z)) and cos(hi + lo) = 1 - z/2 + (z^2 Q(z) - hi*lo), the rounding of 1 - z/2
    # added back
    sine = math.add(hi, math.mulacc(math.mul(hi, z), math.horner(z, fmt.sin), lo))
    half_z = math.mul(z, 0.5)
    big = math.sub(1.0, half_z)
    small = math.add(math.sub(math.sub(1.0, big), half_z), math.sub(math.mul(math.mul(z, z), math.horner(z, fmt.cos)),
                                                                    math.mul(hi, lo)))  # fmt: skip
    cosine = math.add(big, small)
    odd = math.ne(math.bit_and(quadrant, 1), 0)
    value = math.where(odd, cosine, sine)
    # the sign: x's, flipped in quadrants 2 and 3
    flip = math.cast(math.shl(math.bit_and(quadrant, 2), fmt.size - 2), fmt.bits)
    sign = math.bit_xor(math.bit_and(bits, sign_bit), flip)
    out = math.bitcast(math.bit_xor(math.bitcast(value, fmt.bits), sign), fmt.dtype)
    return math.where(math.lt(ax, float("inf")), out, float("nan"))  # inf and NaN -> NaN


def reduce_half_pi(math: VectorMath, fmt: FloatFormat, ax: UOp) -> tuple[UOp, UOp, UOp]:
    """Payne-Hanek: |x| = m * 2^E, m an integer; x * 2/pi mod 4 needs only the bits of 2/pi from E - 1 on (earlier ones
    give multiples of 4), so a window of them times m, in 32-bit limbs mod 2^(32 * window_limbs), holds the quadrant in
    its top two bits and the fraction below. Returns the quadrant (uint64, mod 4 in its low bits) and the fraction
    times pi/2 as hi + lo. Valid for ax >= 1/2 (smaller inputs get a result to discard)."""
    bits = math.cast(math.bitcast(ax, fmt.bits), U64)
    biased = math.shr(bits, fmt.mantissa)
    significand = math.bit_or(math.bit_and(bits, (1 << fmt.mantissa) - 1), 1 << fmt.mantissa)
    # the window starts at table bit E - 2 + pad: pad zero bits in front of 2/pi keep that >= 0 for ax >= 1/2
    start = fmt.bias + fmt.mantissa + 2 - 32 * pad_words(fmt)
    position = math.sub(math.max(biased, start), start)
    window = select_window(math, fmt, position)
    limbs = [significand] if fmt.mantissa_limbs == 1 else [math.shr(significand, 32), math.bit_and(significand, LIMB)]
    product = multiply_low(math, limbs, window)
    top = product[0]
    half = math.bit_and(math.shr(top, 29), 1)  # fraction >= 1/2: round up to the next quadrant, fraction negative
    quadrant = math.add(math.shr(top, 30), half)
    flip = math.bit_and(math.sub(math.const(0, U64), half), LIMB)  # |negative fraction| ~ its bits flipped
    magnitude = [math.bit_xor(math.bit_and(top, (1 << 30) - 1), math.bit_and(flip, (1 << 30) - 1))]
    magnitude += [math.bit_xor(limb, flip) for limb in product[1:]]
    hi, lo = times_half_pi(math, fmt, *fraction_to_float(math, fmt, magnitude))
    negative = math.ne(half, 0)
    return quadrant, math.where(negative, math.alu(Ops.NEG, hi), hi), math.where(negative, math.alu(Ops.NEG, lo), lo)


def pad_words(fmt: FloatFormat) -> int:
    """32-bit words of zeros before 2/pi in the table: the window starts up to mantissa + 2 bits before its point."""
    return (fmt.mantissa + 2 + 31) // 32


def select_window(math: VectorMath, fmt: FloatFormat, position: UOp) -> list[UOp]:
    """The window_limbs 32-bit words of the table starting at bit `position`: whole words chosen by a barrel shifter
    of selects (one stage per bit of the word index), then the bit offset shifted in."""
    word, offset = math.shr(position, 5), math.bit_and(position, 31)
    max_position = (1 << fmt.exponent) - 1 - (fmt.bias + fmt.mantissa + 2) + 32 * pad_words(fmt)
    stages = (max_position >> 5).bit_length()
    needed = fmt.window_limbs + 1  # one more word to shift bits in from
    count = needed + (1 << stages) - 1
    pad = 32 * pad_words(fmt)
    assert pad + TWO_OVER_PI_BITS >= 32 * count, "the 2/pi table is too short for this format"
    table = TWO_OVER_PI >> (pad + TWO_OVER_PI_BITS - 32 * count)  # the first count words of pad zeros, then 2/pi
    words = [math.const((table >> (32 * (count - 1 - i))) & LIMB, U64) for i in range(count)]
    for stage in reversed(range(stages)):
        step = 1 << stage
        take = math.ne(math.bit_and(word, step), 0)
        words = [math.where(take, words[i + step], words[i]) for i in range(needed + step - 1)]
    back = math.sub(math.const(32, U64), offset)  # in 1..32: a 64-bit shift, never undefined
    return [math.bit_and(math.shr(math.bit_or(math.shl(words[i], 32), words[i + 1]), back), LIMB)
            for i in range(fmt.window_limbs)]  # fmt: skip


def multiply_low(math: VectorMath, a: list[UOp], b: list[UOp]) -> list[UOp]:
    """The len(b) low 32-bit limbs of a*b (limbs most significant first, each held in a uint64). Each step's sum
    (a limb product, a result limb and a carry) fits 64 bits."""
    out: list[UOp | None] = [None] * len(b)
    for shift, limb in enumerate(reversed(a)):
        carry: UOp | None = None
        for k in reversed(range(len(b) - shift)):
            total = math.mul(limb, b[k + shift])
            for extra in (out[k], carry):
                if extra is not None:
                    total = math.add(total, extra)
            out[k] = math.bit_and(total, LIMB)
            carry = math.shr(total, 32) if k > 0 else None
    return [limb for limb in out if limb is not None]


def fraction_to_float(math: VectorMath, fmt: FloatFormat, limbs: list[UOp]) -> tuple[UOp, UOp]:
    """A fraction in [0, 1/2] held as a 30-bit limb and 32-bit limbs after it, as hi + lo floats (hi the sum rounded,
    lo its error): enough bits survive however many leading zeros the closest multiples of pi/2 cause."""
    if fmt.dtype == dtypes.float32:  # int32 conversions (the limbs, shifted to 31 bits): hi's error is exact
        first = math.cast(math.cast(limbs[0], dtypes.int32), fmt.dtype)
        error = math.sub(math.cast(limbs[0], dtypes.int32), math.cast(first, dtypes.int32))
        rest = math.cast(math.cast(math.shr(limbs[1], 1), dtypes.int32), fmt.dtype)
        lo = math.add(math.mul(math.cast(error, fmt.dtype), 2.0**-30), math.mul(rest, 2.0**-61))
        return math.mul(first, 2.0**-30), lo
    terms = [math.mul(small_uint_to_float(math, fmt, limb), 2.0 ** (-30 - 32 * i)) for i, limb in enumerate(limbs[:4])]
    hi, lo = two_sum(math, terms[0], terms[1])
    lo = math.add(lo, math.add(terms[2], terms[3]))
    hi2 = math.add(hi, lo)  # (|hi| >= |lo|: the sum and its error, exactly)
    return hi2, math.sub(lo, math.sub(hi2, hi))


def two_sum(math: VectorMath, a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """a + b rounded, and its rounding error exactly (Knuth)."""
    total = math.add(a, b)
    b_part = math.sub(total, a)
    return total, math.add(math.sub(a, math.sub(total, b_part)), math.sub(b, b_part))


def times_half_pi(math: VectorMath, fmt: FloatFormat, hi: UOp, lo: UOp) -> tuple[UOp, UOp]:
    """(hi + lo) * pi/2 as hi + lo: the main product and its rounding error exactly, the small products rounded."""
    product, error = two_product(math, fmt, hi, fmt.half_pi[0])
    return product, math.add(error, math.add(math.mul(hi, fmt.half_pi[1]), math.mul(lo, fmt.half_pi[0])))


def two_product(math: VectorMath, fmt: FloatFormat, a: UOp, constant: float) -> tuple[UOp, UOp]:
    """a * constant rounded, and its rounding error exactly, by Dekker's splitting of both factors into halves whose
    products are exact: needs no fused multiply-add (float64 MULACC is two roundings on some renderers)."""
    splitter = 2.0 ** ((fmt.mantissa + 2) // 2) + 1
    product = math.mul(a, constant)
    big = math.mul(a, splitter)
    a_hi = math.sub(big, math.sub(big, a))
    a_lo = math.sub(a, a_hi)
    c_big = round_to(fmt, constant * splitter)
    c_hi = round_to(fmt, c_big - round_to(fmt, c_big - constant))
    c_lo = round_to(fmt, constant - c_hi)
    error = math.add(math.add(math.sub(math.mul(a_hi, c_hi), product), math.mul(a_hi, c_lo)), math.mul(a_lo, c_hi))
    return product, math.add(error, math.mul(a_lo, c_lo))


def round_to(fmt: FloatFormat, value: float) -> float:
    """`value` rounded to the format (Python computes in float64)."""
    return fmt.from_bits(fmt.to_bits(value))

"""Data types: `DType`, the `dtypes` namespace, the promotion lattice (PyTorch's rules, tinygrad's for fp8), the numpy
mapping, and the host-side conversions of the types numpy has no type for (bfloat16, fp8). numpy is imported by the
functions that take or give arrays, on first use: `import lazy` does not load it."""

from __future__ import annotations

import functools
import math
import struct
import sys
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeGuard

from lazy.helpers import cached_property
from lazy.record import record

if TYPE_CHECKING:
    import numpy as np

ConstType = float | int | bool
PyBool: TypeAlias = bool  # the builtin, for annotations inside `dtypes` (whose attribute `bool` shadows it)
PyInt: TypeAlias = int  # the builtin int, likewise (`dtypes.int` shadows it)


@record(frozen=True, order=True)
class DType:
    """A scalar or vector element type. `count > 1` is a vector of `count` scalars (used inside kernels only)."""

    priority: int
    itemsize: int
    name: str
    fmt: str | None  # struct module format character; None for types numpy/struct cannot hold (bfloat16)
    count: int = 1

    def __hash__(self) -> int:  # computed once: every graph node and kernel key hashes its dtype
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash(
                (type(self), self.priority, self.itemsize, self.name, self.fmt, self.count)
            )
            return h

    def __getstate__(self) -> dict[str, Any]:  # a hash is only valid in the process that computed it
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"

    def vec(self, count: int) -> DType:
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector type {self}")
        if count == 1:
            return self
        if (known := _VECTORS.get((self, count))) is None:  # (kernels ask for the same few thousands of times)
            known = _VECTORS[(self, count)] = DType(self.priority, self.itemsize * count, f"{self.name}{count}", None,
                                                    count)  # fmt: skip
        return known

    def scalar(self) -> DType:
        return DTYPES_DICT[self.name[: -len(str(self.count))]] if self.count > 1 else self

    def ptr(self) -> PtrDType:
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count)

    is_ptr = False  # (a class attribute, not a property: every Buffer checks it)

    @property
    def min(self) -> ConstType:
        """The lowest value (tinygrad's `DType.min`): -inf for every float type, even fp8e4m3 which has no infinity."""
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        """The highest value (tinygrad's `DType.max`): inf for every float type."""
        return dtypes.max(self)


_VECTORS: dict[tuple[DType, int], DType] = {}  # each vector dtype made once: `DType.vec`


@record(frozen=True, order=True)
class PtrDType(DType):
    """A pointer to elements of a base dtype: the type of a kernel's buffer arguments."""

    def __repr__(self) -> str:
        return f"{self.base()!r}.ptr()"

    def base(self) -> DType:
        return DType(self.priority, self.itemsize, self.name, self.fmt, self.count)

    is_ptr = True


class dtypes:
    """Every dtype, with predicates and helpers (`dtypes.float32`, `dtypes.is_float(d)`...)."""

    bool: Final[DType] = DType(0, 1, "bool", "?")
    int8: Final[DType] = DType(1, 1, "char", "b")
    uint8: Final[DType] = DType(2, 1, "uchar", "B")
    int16: Final[DType] = DType(3, 2, "short", "h")
    uint16: Final[DType] = DType(4, 2, "ushort", "H")
    int32: Final[DType] = DType(5, 4, "int", "i")
    uint32: Final[DType] = DType(6, 4, "uint", "I")
    int64: Final[DType] = DType(7, 8, "long", "q")
    uint64: Final[DType] = DType(8, 8, "ulong", "Q")
    fp8e4m3: Final[DType] = DType(9, 1, "fp8e4m3", None)  # OCP E4M3 ("e4m3fn"): no infinity, saturating
    fp8e5m2: Final[DType] = DType(10, 1, "fp8e5m2", None)  # OCP E5M2: has infinity, saturating as tinygrad does
    float16: Final[DType] = DType(11, 2, "half", "e")
    bfloat16: Final[DType] = DType(12, 2, "bfloat16", None)
    float32: Final[DType] = DType(13, 4, "float", "f")
    float64: Final[DType] = DType(14, 8, "double", "d")

    # aliases
    half = float16
    float = float32
    double = float64
    uchar = uint8
    ushort = uint16
    uint = uint32
    ulong = uint64
    char = int8
    short = int16
    int = int32
    long = int64

    default_float: DType = float32
    default_int: DType = int32

    # groups, as tinygrad names them
    fp8s: Final[tuple[DType, ...]] = (fp8e4m3, fp8e5m2)
    floats: Final[tuple[DType, ...]] = (*fp8s, float16, bfloat16, float32, float64)
    uints: Final[tuple[DType, ...]] = (uint8, uint16, uint32, uint64)
    sints: Final[tuple[DType, ...]] = (int8, int16, int32, int64)
    ints: Final[tuple[DType, ...]] = (*uints, *sints)

    @staticmethod
    def is_float(x: DType) -> PyBool:
        return x.scalar() in FLOATS

    @staticmethod
    def is_int(x: DType) -> PyBool:
        return x.scalar() in INTS

    @staticmethod
    def is_unsigned(x: DType) -> PyBool:
        return x.scalar() in UINTS

    @staticmethod
    def is_bool(x: DType) -> PyBool:
        return x.scalar() == dtypes.bool

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype a Python value (or nested list of values) becomes."""
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        if type(x).__module__ == "numpy" and hasattr(x, "tolist"):
            # a numpy scalar or array in a list: the Python values it holds (`Tensor([np.ones(2), np.ones(2)])`)
            return dtypes.from_py(x.tolist())
        raise TypeError(f"cannot make a tensor element from {type(x).__name__} {x!r}; use bool, int or float")

    @staticmethod
    def from_np(x: Any) -> DType:
        import numpy as np

        np_dtype, table = np.dtype(x), _numpy_dtypes()
        if np_dtype not in table:
            raise TypeError(f"numpy dtype {np_dtype} has no lazy dtype; cast the array to one of {list(table)}")
        return table[np_dtype]

    @staticmethod
    @functools.cache
    def min(dtype: DType) -> ConstType:
        """The lowest value of `dtype`: -inf for floats (tinygrad's rule, fp8e4m3 included), False for bool."""
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(2 ** (dtype.itemsize * 8 - 1))
        return False if dtype == dtypes.bool else -math.inf

    @staticmethod
    @functools.cache
    def max(dtype: DType) -> ConstType:
        """The highest value of `dtype`: inf for floats, True for bool."""
        if dtypes.is_int(dtype):
            return 2 ** (dtype.itemsize * 8 - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
        return True if dtype == dtypes.bool else math.inf

    @staticmethod
    def finfo(dtype: DType) -> tuple[PyInt, PyInt]:
        """(exponent bits, mantissa bits) of a float dtype (tinygrad's `dtypes.finfo`)."""
        if dtype.scalar() not in FLOAT_BITS:
            raise ValueError(f"{dtype} is not a floating point type; finfo takes one of {list(FLOAT_BITS)}")
        return FLOAT_BITS[dtype.scalar()]

    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType:
        """`val` as the Python value a constant of `dtype` holds: ints wrap like the hardware does, floats round to
        the nearest value of `dtype` (so a constant cast to half and back is what a tensor cast gives)."""
        if dtypes.is_float(dtype):
            return truncate[dtype.scalar()](float(val))
        if dtypes.is_int(dtype):
            bits = dtype.itemsize * 8
            iv = int(val) if not (isinstance(val, float) and not math.isfinite(val)) else 0
            iv &= (1 << bits) - 1
            return iv - (1 << bits) if not dtypes.is_unsigned(dtype) and iv >= 1 << (bits - 1) else iv
        return bool(val)

    @staticmethod
    def fields() -> dict[str, DType]:
        return DTYPES_DICT


DTYPES_DICT: dict[str, DType] = {
    d.name: d
    for d in (
        dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
        dtypes.int64, dtypes.uint64, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.float16, dtypes.bfloat16, dtypes.float32,
        dtypes.float64,
    )
}  # fmt: skip
ALL_DTYPES: tuple[DType, ...] = tuple(DTYPES_DICT.values())
FLOATS = frozenset(dtypes.floats)
FP8S = frozenset(dtypes.fp8s)
UINTS = frozenset(dtypes.uints)
INTS = frozenset(dtypes.ints)
# numpy has no type for these: their values go to and from the host as float32 (`storage_to_values`,
# `values_to_storage`), their bytes as the unsigned int of their size (`to_np_dtype`)
HOST_FLOAT32 = frozenset({dtypes.bfloat16, *dtypes.fp8s})
# floats narrower than float32: transcendental functions and pow compute them in float32 and round once at the end
NARROW_FLOATS = frozenset({dtypes.float16, dtypes.bfloat16, *dtypes.fp8s})


@functools.cache
def _numpy_dtypes() -> dict[np.dtype, DType]:
    """numpy dtype -> the lazy dtype of the same values, built on first use (it imports numpy)."""
    import numpy as np

    return {np.dtype(d.fmt): d for d in ALL_DTYPES if d.fmt is not None}


def to_np_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype that holds `dtype`'s bytes (bfloat16 is held as uint16 and fp8 as uint8: numpy has neither)."""
    import numpy as np

    if dtype in HOST_FLOAT32:
        return np.dtype(f"u{dtype.itemsize}")
    if dtype.fmt is None:
        raise TypeError(f"{dtype} has no numpy equivalent")
    return np.dtype(dtype.fmt)


def _to_np_dtype(dtype: DType) -> type | None:
    """tinygrad's numpy mapping: the numpy scalar type of `dtype`'s values as `.numpy()` gives them (float32 for
    bfloat16 and fp8), None for a dtype numpy cannot hold. (`to_np_dtype` is the type of the stored bytes.)"""
    import numpy as np

    if dtype in HOST_FLOAT32:
        return np.float32
    return np.dtype(dtype.fmt).type if dtype.fmt is not None else None


def _from_np_dtype(np_dtype: Any) -> DType:
    """tinygrad's name for `dtypes.from_np`."""
    return dtypes.from_np(np_dtype)


def _to_torch_dtype(dtype: DType) -> Any:
    """tinygrad's torch mapping: the torch dtype holding `dtype` (uint8 for fp8, whose bits it holds), or None."""
    import numpy as np
    import torch  # (only for code that asks: lazy does not need torch)

    if dtype == dtypes.bfloat16:
        return torch.bfloat16
    if dtype in FP8S:
        return torch.uint8
    if dtype == dtypes.uint64:
        return torch.uint64
    np_type = _to_np_dtype(dtype)
    return torch.from_numpy(np.array([], dtype=np_type)).dtype if np_type is not None else None


def _from_torch_dtype(torch_dtype: Any) -> DType:
    """The dtype `_to_torch_dtype` maps to `torch_dtype` (uint8 is uint8, not fp8)."""
    found = {_to_torch_dtype(d): d for d in reversed(ALL_DTYPES)}.get(torch_dtype)
    if found is None:
        raise TypeError(f"torch dtype {torch_dtype} has no lazy dtype; known: {sorted(DTYPES_DICT)}")
    return found


def storage_to_values(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """The values held in `raw` (an array of `to_np_dtype(dtype)`): bfloat16 and fp8 bits become float32, what
    `Tensor.numpy()` gives for them (as in tinygrad); other dtypes are returned as they are."""
    import numpy as np

    if dtype == dtypes.bfloat16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in FP8S:
        return fp8_to_float(raw, dtype)
    return raw


def values_to_storage(values: Any, dtype: DType) -> np.ndarray:
    """Values (a number, nested lists or an array) as the numpy array holding their bytes in `dtype`, rounded to
    nearest even: bfloat16 as uint16 bits, fp8 as uint8 bits (`float_to_fp8`); other dtypes as numpy casts them."""
    import numpy as np

    if dtype == dtypes.bfloat16:
        return _bf16_bits(values)
    if dtype in FP8S:
        return np.asarray(float_to_fp8(np.asarray(values, np.float64), dtype), np.uint8)
    return np.asarray(values, to_np_dtype(dtype))


# promotion: each dtype's direct parents in the lattice; the result of mixing two dtypes is their least upper bound.
# This reproduces PyTorch's table: int8+uint8 -> int16, int64+float16 -> float16, float16+bfloat16 -> float32.
# PyTorch does not promote fp8 at all; tinygrad puts it between the integers and half: int+fp8e4m3 -> fp8e4m3,
# fp8e4m3+fp8e5m2 -> float16, fp8+bfloat16 -> bfloat16.
PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: dtypes.fp8s,
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: dtypes.fp8s,
    dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _ancestors(dtype: DType) -> frozenset[DType]:
    return frozenset({dtype}).union(*(_ancestors(p) for p in PROMO_LATTICE[dtype]))


@functools.cache  # asked on every binary op of the Tensor front end, with few distinct arguments
def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to (PyTorch's type promotion; tinygrad's for fp8)."""
    scalars = [d.scalar() for d in ds]
    common = frozenset.intersection(*(_ancestors(d) for d in scalars))
    if FP8S.isdisjoint(scalars):  # fp8 only results from mixing in an fp8: int64+uint64 stays float16
        common -= FP8S
    return min(common, key=lambda d: d.priority)


def least_upper_float(dtype: DType) -> DType:
    """`dtype` if it is a float, else the default float: the result type of `exp`, `/` and friends."""
    return dtype if dtypes.is_float(dtype) else least_upper_dtype(dtype, dtypes.default_float)


def sum_acc_dtype(dtype: DType) -> DType:
    """The dtype a sum of `dtype` accumulates in (tinygrad's rule): unsigned ints in at least uint32, ints and bool in
    at least int32, floats in at least float32 (half, bfloat16 and fp8 sums are cast back by `Tensor.sum`)."""
    if dtypes.is_unsigned(dtype):
        return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype == dtypes.bool:
        return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.float32)


class UnknownDTypeError(ValueError, AttributeError):
    """A dtype name that does not exist: a ValueError (a bad argument) and the AttributeError tinygrad raises (it looks
    the name up on `dtypes`)."""


def to_dtype(x: Any) -> DType:
    """A `dtype=` argument as a DType: a DType, its name ("float32", or an alias like "half"), or a numpy dtype,
    numpy scalar type or Python type read as numpy reads it (`np.float32`, `np.dtype("int16")`, `float` is
    float64, `int` int64, `bool` bool, as in numpy and PyTorch)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = DTYPES_DICT.get(x, getattr(dtypes, x, None))
        if not isinstance(found, DType):  # (`dtypes` also holds helpers such as `is_float`)
            raise UnknownDTypeError(f"unknown dtype {x!r}; known: {sorted(DTYPES_DICT)}")
        return found
    if isinstance(x, type) or is_numpy(x, "dtype"):
        if (np_dtype := _np_dtype_of(x)) is not None and np_dtype in (table := _numpy_dtypes()):
            return table[np_dtype]
    raise TypeError(
        f"dtype={x!r} is not a dtype; pass a lazy dtype (dtypes.float32), its name ('float32'), a numpy dtype "
        f"(np.float32) or one of float, int, bool; known: {sorted(DTYPES_DICT)}"
    )


def _np_dtype_of(x: Any) -> np.dtype | None:
    import numpy as np

    try:
        return np.dtype(x)
    except TypeError:
        return None


DTypeLike: TypeAlias = "str | DType | type | np.dtype"  # what `dtype=` arguments take (see `to_dtype`)
INVERSE_DTYPES_DICT: dict[DType, str] = {d: name for name, d in DTYPES_DICT.items()}

# (exponent bits, mantissa bits) of the floats: what a cast can keep
FLOAT_BITS: dict[DType, tuple[int, int]] = {
    dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7),
    dtypes.float32: (8, 23), dtypes.float64: (11, 52),
}  # fmt: skip


@functools.cache
def can_lossless_cast(dt0: DType, dt1: DType) -> bool:
    """Whether every value of `dt0` survives a cast to `dt1` exactly (numpy's `can_cast` in "safe" mode)."""
    if dt0 == dt1 or dt0 == dtypes.bool:
        return True
    if dt1 == dtypes.bool or dtypes.is_float(dt0) and not dtypes.is_float(dt1):
        return False
    if dtypes.is_float(dt0):  # float to float: both the range and the precision must fit
        (e0, m0), (e1, m1) = FLOAT_BITS[dt0], FLOAT_BITS[dt1]
        return e0 <= e1 and m0 <= m1
    if dtypes.is_float(dt1):  # an int fits when its magnitude bits fit in the mantissa (and the implicit bit)
        magnitude = dt0.itemsize * 8 - (0 if dtypes.is_unsigned(dt0) else 1)
        return magnitude <= FLOAT_BITS[dt1][1] + 1
    return dtypes.min(dt1) <= dtypes.min(dt0) and dtypes.max(dt0) <= dtypes.max(dt1)


_HALF, _SINGLE, _SINGLE_BITS = struct.Struct("<e"), struct.Struct("<f"), struct.Struct("<I")


def _round_ieee(fmt: struct.Struct, x: float) -> float:
    """`x` rounded to the nearest value of the IEEE format `fmt` packs (ties to even), inf beyond its range. struct
    rounds as C does and refuses (OverflowError) exactly where that rounding reaches infinity."""
    try:
        return fmt.unpack(fmt.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def float_to_fp16(x: float) -> float:
    """`x` rounded to the nearest float16 (inf beyond its range), as a Python float."""
    return _round_ieee(_HALF, x) if math.isfinite(x) else x


def float_to_bf16(x: float) -> float:
    """`x` rounded to the nearest bfloat16 (ties to even), as a Python float."""
    if not math.isfinite(x):
        return x
    (bits,) = _SINGLE_BITS.unpack(_SINGLE.pack(_round_ieee(_SINGLE, x)))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return _SINGLE.unpack(_SINGLE_BITS.pack(bits))[0]


def _bf16_bits(values: Any) -> np.ndarray:
    """The bfloat16 bits (uint16) of an array of values rounded as `float_to_bf16` rounds one, NaN kept."""
    import numpy as np

    with np.errstate(over="ignore"):
        floats = np.ascontiguousarray(values, np.float32)
    bits = floats.view(np.uint32)
    # a NaN unrounded (it would carry out), its quiet bit set (a payload only in the low half would truncate to inf)
    rounded = np.where(np.isnan(floats), bits | 0x400000, bits + 0x7FFF + ((bits >> 16) & 1))
    return (rounded >> 16).astype(np.uint16)


# ---------------------------------------------------------------------------------------------------------------------
# fp8: the host-side reference conversions (the devices do the same with integer operations, `lazy.renderer.emulate`)


@record(frozen=True)
class Fp8Format:
    """An 8-bit float: 1 sign bit, `exponent` bits, `mantissa` bits, IEEE-style subnormals. E5M2 has infinities and
    NaNs like IEEE; E4M3 ("e4m3fn") has no infinity and one NaN per sign (all exponent and mantissa bits set).
    Finite values past the largest one saturate to it (tinygrad's rule; PyTorch gives NaN or inf for some)."""

    exponent: int
    mantissa: int
    has_inf: bool

    @cached_property
    def bias(self) -> int:
        return (1 << (self.exponent - 1)) - 1

    @cached_property
    def nan_bits(self) -> int:  # with the sign bit clear
        return 0x7F

    @cached_property
    def inf_bits(self) -> int:  # what an infinity becomes: itself where the format has one, else NaN (tinygrad)
        return ((1 << self.exponent) - 1) << self.mantissa if self.has_inf else self.nan_bits

    @cached_property
    def max_bits(self) -> int:  # the largest finite value
        return self.inf_bits - 1 if self.has_inf else self.nan_bits - 1

    @cached_property
    def max_value(self) -> float:
        return _fp8_values(self)[self.max_bits]


FP8_FORMATS: dict[DType, Fp8Format] = {
    dtypes.fp8e4m3: Fp8Format(exponent=4, mantissa=3, has_inf=False),
    dtypes.fp8e5m2: Fp8Format(exponent=5, mantissa=2, has_inf=True),
}


def lowest_value(dtype: DType) -> ConstType:
    """The lowest value `dtype` holds: `dtypes.min`, except in a float format without infinity (fp8e4m3), where -inf
    would become NaN: its most negative finite value. What a max starts from (and pads with)."""
    fp8 = FP8_FORMATS.get(dtype.scalar())
    return -fp8.max_value if fp8 is not None and not fp8.has_inf else dtypes.as_const(dtypes.min(dtype), dtype)


def _fp8_format(dtype: DType) -> Fp8Format:
    if dtype not in FP8_FORMATS:
        raise ValueError(f"{dtype} is not an fp8 dtype; use one of {list(FP8_FORMATS)}")
    return FP8_FORMATS[dtype]


def float_to_fp8(x: Any, dtype: DType) -> Any:
    """The fp8 bits (0..255) of `x` rounded to the nearest `dtype` value, ties to even: a Python int for a number, a
    uint8 array for a numpy array. Finite values past the largest saturate to it; inf is inf in fp8e5m2 and NaN in
    fp8e4m3; NaN keeps its sign (tinygrad 0.14's `float_to_fp8`, which differs from PyTorch at overflow)."""
    fmt = _fp8_format(dtype)
    if not is_numpy(x, "ndarray"):
        return _fp8_bits(float(x), fmt)
    import numpy as np

    with np.errstate(invalid="ignore"):  # (signalling NaNs of narrower floats)
        values = x.astype(np.float64)
    magnitude = np.abs(values)
    lowest_normal = magnitude >= 2.0 ** (1 - fmt.bias)
    exponent = np.where(lowest_normal, np.frexp(magnitude)[1] - 1, 1 - fmt.bias)  # as in `_fp8_bits`
    with np.errstate(invalid="ignore", over="ignore"):
        steps = np.rint(np.ldexp(magnitude, fmt.mantissa - exponent))  # (rint: ties to even)
        bits = np.minimum((exponent + fmt.bias - 1) * 2.0**fmt.mantissa + steps, fmt.max_bits)
    bits = np.where(np.isinf(magnitude), fmt.inf_bits, np.where(np.isnan(magnitude), fmt.nan_bits, bits))
    return (bits.astype(np.uint8) | np.where(np.signbit(values), 0x80, 0)).astype(np.uint8)


def _fp8_bits(x: float, fmt: Fp8Format) -> int:
    """`float_to_fp8` of one Python float."""
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    magnitude = abs(x)
    if not math.isfinite(magnitude):
        return sign | (fmt.nan_bits if magnitude != magnitude else fmt.inf_bits)
    # the exponent of magnitude's binade (the lowest normal one for subnormals and zero): values there are multiples
    # of 2**(exponent - mantissa), so rounding to nearest even is round() of magnitude over that step
    exponent = math.frexp(magnitude)[1] - 1 if magnitude >= 2.0 ** (1 - fmt.bias) else 1 - fmt.bias
    steps = round(math.ldexp(magnitude, fmt.mantissa - exponent))
    # steps is in [2**m, 2**(m+1)] for normal values and [0, 2**m] for subnormals: adding the exponent field below
    # gives the bits either way (a carry to 2**(m+1) moves to the next binade by itself)
    return sign | min(((exponent + fmt.bias - 1) << fmt.mantissa) + steps, fmt.max_bits)


def fp8_to_float(x: Any, dtype: DType) -> Any:
    """The value of fp8 bits (0..255) of `dtype`: a Python float for a number, a float32 array for a numpy array."""
    fmt = _fp8_format(dtype)
    if not is_numpy(x, "ndarray"):
        if not (isinstance(x, int) or is_numpy(x, "integer")) or not 0 <= x <= 255:
            raise ValueError(f"fp8_to_float takes fp8 bit patterns, integers 0..255; got {x!r}")
        return _fp8_values(fmt)[int(x)]
    import numpy as np

    if x.dtype.kind not in "biu" or (x.size and (x.min() < 0 or x.max() > 255)):
        raise ValueError(f"fp8_to_float takes fp8 bit patterns, integers 0..255; got an array of {x.dtype}")
    return np.array(_fp8_values(fmt), np.float32)[x.astype(np.intp)]


@functools.cache
def _fp8_values(fmt: Fp8Format) -> tuple[float, ...]:
    """The value of each of the 256 bit patterns."""
    values = []
    for bits in range(256):
        exponent, mantissa = (bits >> fmt.mantissa) & ((1 << fmt.exponent) - 1), bits & ((1 << fmt.mantissa) - 1)
        significand = mantissa + (1 << fmt.mantissa if exponent else 0)  # normal values have an implicit bit
        value = math.ldexp(significand, max(exponent, 1) - fmt.bias - fmt.mantissa)
        if bits & 0x7F == fmt.inf_bits:
            value = math.inf if fmt.has_inf else math.nan
        elif bits & 0x7F > fmt.inf_bits:
            value = math.nan
        values.append(-value if bits & 0x80 else value)
    return tuple(values)


def _round_fp8(x: float, dtype: DType) -> float:
    """`x` rounded to the nearest `dtype` value (fp8), as a Python float."""
    fmt = FP8_FORMATS[dtype]
    return _fp8_values(fmt)[_fp8_bits(float(x), fmt)]


def _truncate_int(dtype: DType) -> Any:
    return lambda x: dtypes.as_const(x, dtype)


def _float_to_fp32(x: float) -> float:
    return _round_ieee(_SINGLE, x) if math.isfinite(x) else x


def loaded_numpy() -> Any:
    """The numpy module if something has imported it, else None. A value can be a numpy array or scalar only once numpy
    is imported, so type checks ask this instead of importing numpy (which `import lazy` must not do)."""
    return sys.modules.get("numpy")


def is_numpy(x: Any, *kinds: str) -> TypeGuard[Any]:
    """Is `x` an instance of one of numpy's types named `kinds` ("ndarray", "generic", "integer", "bool_", "dtype")?
    Asked without importing numpy: if nothing has imported it, nothing is a numpy value."""
    return (np := loaded_numpy()) is not None and isinstance(x, tuple(getattr(np, kind) for kind in kinds))


# dtype -> a function rounding a Python value to what that dtype holds (ints wrap, floats round)
truncate: dict[DType, Any] = {
    dtypes.bool: bool, dtypes.float16: float_to_fp16, dtypes.bfloat16: float_to_bf16,
    dtypes.float32: _float_to_fp32, dtypes.float64: float,
    **{d: functools.partial(_round_fp8, dtype=d) for d in FP8S},
    **{d: _truncate_int(d) for d in INTS},
}  # fmt: skip

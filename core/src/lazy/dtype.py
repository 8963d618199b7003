"""Data types: `DType`, the `dtypes` namespace, the promotion lattice (PyTorch's rules) and the numpy mapping."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np

ConstType = float | int | bool
PyBool: TypeAlias = bool  # the builtin, for annotations inside `dtypes` (whose attribute `bool` shadows it)


@dataclass(frozen=True, order=True)
class DType:
    """A scalar or vector element type. `count > 1` is a vector of `count` scalars (used inside kernels only)."""

    priority: int
    itemsize: int
    name: str
    fmt: str | None  # struct module format character; None for types numpy/struct cannot hold (bfloat16)
    count: int = 1

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"

    def vec(self, count: int) -> DType:
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector type {self}")
        if count == 1:
            return self
        return DType(self.priority, self.itemsize * count, f"{self.name}{count}", None, count)

    def scalar(self) -> DType:
        return DTYPES_DICT[self.name[: -len(str(self.count))]] if self.count > 1 else self

    def ptr(self) -> PtrDType:
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count)

    @property
    def is_ptr(self) -> bool:
        return False


@dataclass(frozen=True, order=True)
class PtrDType(DType):
    """A pointer to elements of a base dtype: the type of a kernel's buffer arguments."""

    def __repr__(self) -> str:
        return f"{self.base()!r}.ptr()"

    def base(self) -> DType:
        return DType(self.priority, self.itemsize, self.name, self.fmt, self.count)

    @property
    def is_ptr(self) -> bool:
        return True


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
    float16: Final[DType] = DType(9, 2, "half", "e")
    bfloat16: Final[DType] = DType(10, 2, "bfloat16", None)
    float32: Final[DType] = DType(11, 4, "float", "f")
    float64: Final[DType] = DType(12, 8, "double", "d")

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
        raise TypeError(f"cannot make a tensor element from {type(x).__name__} {x!r}; use bool, int or float")

    @staticmethod
    def from_np(x: Any) -> DType:
        np_dtype = np.dtype(x)
        if np_dtype not in NP_TO_DTYPE:
            raise TypeError(f"numpy dtype {np_dtype} has no lazy dtype; cast the array to one of {list(NP_TO_DTYPE)}")
        return NP_TO_DTYPE[np_dtype]

    @staticmethod
    def min(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(2 ** (dtype.itemsize * 8 - 1))
        return False if dtype == dtypes.bool else -math.inf

    @staticmethod
    def max(dtype: DType) -> ConstType:
        if dtypes.is_int(dtype):
            return 2 ** (dtype.itemsize * 8 - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
        return True if dtype == dtypes.bool else math.inf

    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType:
        """`val` as the Python value a constant of `dtype` holds (ints wrap like the hardware does)."""
        if dtypes.is_float(dtype):
            return float(val)
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
        dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
    )
}  # fmt: skip
ALL_DTYPES: tuple[DType, ...] = tuple(DTYPES_DICT.values())
FLOATS = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
UINTS = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
INTS = UINTS | frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64})

NP_TO_DTYPE: dict[np.dtype, DType] = {np.dtype(d.fmt): d for d in ALL_DTYPES if d.fmt is not None}


def to_np_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype that holds `dtype`'s bytes (bfloat16 is held as uint16: numpy has no bfloat16)."""
    if dtype == dtypes.bfloat16:
        return np.dtype(np.uint16)
    if dtype.fmt is None:
        raise TypeError(f"{dtype} has no numpy equivalent")
    return np.dtype(dtype.fmt)


# promotion: each dtype's direct parents in the lattice; the result of mixing two dtypes is their least upper bound.
# This reproduces PyTorch's table: int8+uint8 -> int16, int64+float16 -> float16, float16+bfloat16 -> float32.
PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}


@functools.cache
def _ancestors(dtype: DType) -> frozenset[DType]:
    return frozenset({dtype}).union(*(_ancestors(p) for p in PROMO_LATTICE[dtype]))


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to (PyTorch's type promotion)."""
    common = frozenset.intersection(*(_ancestors(d.scalar()) for d in ds))
    return min(common, key=lambda d: d.priority)


def least_upper_float(dtype: DType) -> DType:
    """`dtype` if it is a float, else the default float: the result type of `exp`, `/` and friends."""
    return dtype if dtypes.is_float(dtype) else least_upper_dtype(dtype, dtypes.default_float)


def sum_acc_dtype(dtype: DType) -> DType:
    """The dtype a sum of `dtype` accumulates in (tinygrad's rule): unsigned ints in at least uint32, ints and bool in
    at least int32, floats in at least float32 (half and bfloat16 sums are cast back by `Tensor.sum`)."""
    if dtypes.is_unsigned(dtype):
        return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype == dtypes.bool:
        return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.float32)


def to_dtype(x: Any) -> DType:
    """A `dtype=` argument as a DType: a DType, its name ("float32", or an alias like "half"), or a numpy dtype,
    numpy scalar type or Python type read as numpy reads it (`np.float32`, `np.dtype("int16")`, `float` is
    float64, `int` int64, `bool` bool, as in numpy and PyTorch)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = DTYPES_DICT.get(x, getattr(dtypes, x, None))
        if not isinstance(found, DType):  # (`dtypes` also holds helpers such as `is_float`)
            raise ValueError(f"unknown dtype {x!r}; known: {sorted(DTYPES_DICT)}")
        return found
    if isinstance(x, (type, np.dtype)) and (np_dtype := _np_dtype_of(x)) in NP_TO_DTYPE:
        return NP_TO_DTYPE[np_dtype]
    raise TypeError(
        f"dtype={x!r} is not a dtype; pass a lazy dtype (dtypes.float32), its name ('float32'), a numpy dtype "
        f"(np.float32) or one of float, int, bool; known: {sorted(DTYPES_DICT)}"
    )


def _np_dtype_of(x: Any) -> np.dtype | None:
    try:
        return np.dtype(x)
    except TypeError:
        return None


DTypeLike: TypeAlias = "str | DType | type | np.dtype"  # what `dtype=` arguments take (see `to_dtype`)
INVERSE_DTYPES_DICT: dict[DType, str] = {d: name for name, d in DTYPES_DICT.items()}

# (exponent bits, mantissa bits) of the floats: what a cast can keep
_FLOAT_BITS: dict[DType, tuple[int, int]] = {
    dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52),
}  # fmt: skip


@functools.cache
def can_lossless_cast(dt0: DType, dt1: DType) -> bool:
    """Whether every value of `dt0` survives a cast to `dt1` exactly (numpy's `can_cast` in "safe" mode)."""
    if dt0 == dt1 or dt0 == dtypes.bool:
        return True
    if dt1 == dtypes.bool or dtypes.is_float(dt0) and not dtypes.is_float(dt1):
        return False
    if dtypes.is_float(dt0):  # float to float: both the range and the precision must fit
        (e0, m0), (e1, m1) = _FLOAT_BITS[dt0], _FLOAT_BITS[dt1]
        return e0 <= e1 and m0 <= m1
    if dtypes.is_float(dt1):  # an int fits when its magnitude bits fit in the mantissa (and the implicit bit)
        magnitude = dt0.itemsize * 8 - (0 if dtypes.is_unsigned(dt0) else 1)
        return magnitude <= _FLOAT_BITS[dt1][1] + 1
    return dtypes.min(dt1) <= dtypes.min(dt0) and dtypes.max(dt0) <= dtypes.max(dt1)  # type: ignore[operator]


def float_to_fp16(x: float) -> float:
    """`x` rounded to the nearest float16 (inf beyond its range), as a Python float."""
    if not math.isfinite(x):
        return x
    with np.errstate(over="ignore"):
        return float(np.float64(x).astype(np.float16))


def float_to_bf16(x: float) -> float:
    """`x` rounded to the nearest bfloat16 (ties to even), as a Python float."""
    if not math.isfinite(x):
        return x
    bits = int(np.array(x, np.float32).view(np.uint32))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(np.array(bits, np.uint32).view(np.float32))


def _truncate_int(dtype: DType) -> Any:
    return lambda x: dtypes.as_const(x, dtype)


# dtype -> a function rounding a Python value to what that dtype holds (ints wrap, floats round)
truncate: dict[DType, Any] = {
    dtypes.bool: bool, dtypes.float16: float_to_fp16, dtypes.bfloat16: float_to_bf16,
    dtypes.float32: lambda x: float(np.float32(x)), dtypes.float64: float,
    **{d: _truncate_int(d) for d in INTS},
}  # fmt: skip

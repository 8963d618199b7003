"""`Tensor`'s Python operators: `+`, `-`, `*`, `/`, `//`, `%`, `**`, `@`, the comparisons, the bitwise operators, their
reflected forms (`1 - x`) and the in-place forms (`x += y`, an assign), each one of `Tensor`'s named methods. A mixin
of `Tensor`, built only from those methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy.dtype import ConstType, DType, dtypes
from lazy.helpers import ArgumentError
from lazy.tensor_base import TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self


class OperatorsMixin(TensorBase):
    """Python operator syntax on `Tensor`, mapped onto its named methods."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    def __lt__(self, y: Self | ConstType) -> Self:
        return self.lt(y)

    def __gt__(self, y: Self | ConstType) -> Self:
        return self.gt(y)

    def __ge__(self, y: Self | ConstType) -> Self:
        return self.gt(y) | self.eq(y)  # (not `not x < y`: NaN compares false both ways)

    def __le__(self, y: Self | ConstType) -> Self:
        return self.lt(y) | self.eq(y)

    def __eq__(self, y: Self | ConstType) -> Self:  # type: ignore[override]
        return self.eq(y)

    def __ne__(self, y: Self | ConstType) -> Self:  # type: ignore[override]
        return self.ne(y)

    def __and__(self, y: Self | ConstType) -> Self:
        return self.bitwise_and(y)

    def __or__(self, y: Self | ConstType) -> Self:
        return self.bitwise_or(y)

    def __xor__(self, y: Self | ConstType) -> Self:
        return self.xor(y)

    def __lshift__(self, y: Self | ConstType) -> Self:
        return self.lshift(y)

    def __rshift__(self, y: Self | ConstType) -> Self:
        return self.rshift(y)

    def __rand__(self, y: Self | ConstType) -> Self:
        return self.bitwise_and(y, True)

    def __ror__(self, y: Self | ConstType) -> Self:
        return self.bitwise_or(y, True)

    def __rxor__(self, y: Self | ConstType) -> Self:
        return self.xor(y, True)

    def __rlshift__(self, y: Self | ConstType) -> Self:
        return self.lshift(y, True)

    def __rrshift__(self, y: Self | ConstType) -> Self:
        return self.rshift(y, True)

    def __invert__(self) -> Self:
        if dtypes.is_float(self.dtype):
            raise ArgumentError(f"~ (bitwise not) needs an integer or bool tensor, not {self.dtype}; for floats use "
                                "-x, or logical_not for a bool result")  # fmt: skip
        return (
            self.logical_not()
            if self.dtype == dtypes.bool
            else self ^ ((1 << (8 * self.dtype.itemsize)) - 1 if dtypes.is_unsigned(self.dtype) else -1)
        )

    def __neg__(self) -> Self:
        return self.neg()

    def __add__(self, y: Self | ConstType) -> Self:
        return self.add(y)

    def __radd__(self, y: Self | ConstType) -> Self:
        return self.add(y, True)

    def __sub__(self, y: Self | ConstType) -> Self:
        return self.sub(y)

    def __rsub__(self, y: Self | ConstType) -> Self:
        return self.sub(y, True)

    def __mul__(self, y: Self | ConstType) -> Self:
        return self.mul(y)

    def __rmul__(self, y: Self | ConstType) -> Self:
        return self.mul(y, True)

    def __truediv__(self, y: Self | ConstType) -> Self:
        return self.div(y)

    def __rtruediv__(self, y: Self | ConstType) -> Self:
        return self.div(y, True)

    def __floordiv__(self, y: Self | ConstType) -> Self:
        return self.floordiv(y)

    def __rfloordiv__(self, y: Self | ConstType) -> Self:
        return self.floordiv(y, True)

    def __mod__(self, y: Self | ConstType) -> Self:
        return self.mod(y)

    def __rmod__(self, y: Self | ConstType) -> Self:
        return self.mod(y, True)

    def __pow__(self, y: Self | ConstType) -> Self:
        return self.pow(y)

    def __rpow__(self, y: Self | ConstType) -> Self:
        return self.pow(y, True)

    def __matmul__(self, y: Self) -> Self:
        return self.matmul(y)

    def __rmatmul__(self, y: Self) -> Self:
        return y.matmul(self)

    def _in_place(self, result: Self, op: str) -> Self:
        """`self op= y`: the result assigned into self, refused where self's dtype cannot hold the result's kind of
        value (a float result into an integer or bool tensor, an integer one into bool), as PyTorch refuses it;
        `int_tensor += 1.7` silently truncated before. Narrower types of the same kind are cast (float64 into
        float32, int64 into uint8), as PyTorch does."""
        have, got = self.dtype, result.dtype

        def kind(dt: DType) -> int:
            return 2 if dtypes.is_float(dt) else 1 if dtypes.is_int(dt) else 0

        if kind(got) > kind(have):
            raise TypeError(f"{op}=: the result is {got.name}, which this {have.name} tensor cannot hold (as in "
                            f"PyTorch); write x = x {op} y for a new tensor, or x.assign((x {op} y).cast(x.dtype)) to "
                            "convert on purpose")  # fmt: skip
        return self.assign(result)

    def __iadd__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.add(y), "+")

    def __isub__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.sub(y), "-")

    def __imul__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.mul(y), "*")

    def __itruediv__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.div(y), "/")

    def __ifloordiv__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.floordiv(y), "//")

    def __imod__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.mod(y), "%")

    def __ipow__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.pow(y), "**")

    def __imatmul__(self, y: Self) -> Self:
        return self._in_place(self.matmul(y), "@")

    def __iand__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.bitwise_and(y), "&")

    def __ior__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.bitwise_or(y), "|")

    def __ixor__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.xor(y), "^")

    def __ilshift__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.lshift(y), "<<")

    def __irshift__(self, y: Self | ConstType) -> Self:
        return self._in_place(self.rshift(y), ">>")

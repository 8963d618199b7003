"""fp8 for renderers without fp8 types: `emulate_fp8` rewrites a UOp list so that fp8 buffers hold their 8 bits
(uint8) and fp8 values live in float32 registers, every result rounded to the fp8 grid by integer bit manipulation
UOps. A renderer calls it first and then sees only the types it has; the C-style renderers and LLVM do. Rounding is
the host reference's (`lazy.dtype.float_to_fp8`): to nearest even, subnormals kept, saturating at the largest finite
value; inf stays inf in fp8e5m2 and becomes NaN in fp8e4m3."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import FP8_FORMATS, DType, Fp8Format, PtrDType, dtypes, float_to_fp8
from lazy.ops import GroupOp, Ops, truncate

REGISTER = dtypes.float32  # what an fp8 value is held and computed in (it holds every fp8 value exactly)
EXACT = frozenset({Ops.MAX, Ops.NEG, Ops.WHERE})  # ops whose result on fp8 values is an fp8 value: no rounding


def emulate_fp8(uops: list[UOp]) -> list[UOp]:
    """`uops` with every fp8 dtype replaced (the same list when there is none)."""
    if not any(u.dtype is not None and _value_dtype(u.dtype) in FP8_FORMATS for u in uops):
        return uops
    return _Fp8Rewriter(uops).rewrite()


def _value_dtype(dtype: DType) -> DType:
    """The scalar element type of a value or pointer dtype."""
    return (dtype.base() if isinstance(dtype, PtrDType) else dtype).scalar()


def _register(dtype: DType | None) -> DType | None:
    """The dtype a value of `dtype` has after the rewrite: fp8 (and fp8 vectors) become float32."""
    if dtype is None or dtype.scalar() not in FP8_FORMATS:
        return dtype
    return REGISTER.vec(dtype.count)


class _Fp8Rewriter:
    """One pass over the list, in order: each UOp becomes the UOps computing the same value in the new types."""

    def __init__(self, uops: list[UOp]):
        self.uops = uops
        self.out: list[UOp] = []
        self.new: dict[int, UOp] = {}  # id(old UOp) -> the UOp that now holds its value
        self.bit_buffers: set[int] = set()  # ids of the new DEFINE_GLOBALs that hold fp8 bits

    def rewrite(self) -> list[UOp]:
        for uop in self.uops:
            src = tuple(self.new[id(s)] for s in uop.src)
            handler = getattr(self, f"on_{uop.op.name.lower()}", self.copy)
            self.new[id(uop)] = handler(uop, src)
        return self.out

    # --- building ---------------------------------------------------------------------------------------------------
    def add(self, op: UOps, dtype: DType | None, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        uop = UOp(op, dtype, src, arg)
        self.out.append(uop)
        return uop

    def const(self, value: Any, dtype: DType) -> UOp:
        return self.add(UOps.CONST, dtype, (), dtypes.as_const(value, dtype))

    def alu(self, op: Ops, a: UOp, *rest: UOp | int | float) -> UOp:
        """`op` on UOps; plain numbers become constants of `a`'s dtype (a WHERE with numbers goes through `select`)."""
        assert a.dtype is not None and (op is not Ops.WHERE or all(isinstance(x, UOp) for x in rest))
        src = (a, *(x if isinstance(x, UOp) else self.const(x, a.dtype) for x in rest))
        dtype = dtypes.bool if op in GroupOp.Comparison else src[-1].dtype
        return self.add(UOps.ALU, dtype, src, op)

    def cast(self, x: UOp, dtype: DType) -> UOp:
        return x if x.dtype == dtype else self.add(UOps.CAST, dtype, (x,))

    def select(self, cond: UOp, a: UOp | int | float, b: UOp | int | float, dtype: DType) -> UOp:
        a_uop = a if isinstance(a, UOp) else self.const(a, dtype)
        b_uop = b if isinstance(b, UOp) else self.const(b, dtype)
        return self.alu(Ops.WHERE, cond, a_uop, b_uop)

    def per_lane(self, fn: Callable[[UOp], UOp], x: UOp, out: DType) -> UOp:
        """`fn` (scalar -> scalar of dtype `out`) on each lane of a vector `x`, or on `x` itself."""
        assert x.dtype is not None
        if x.dtype.count == 1:
            return fn(x)
        lanes = [fn(self.add(UOps.GEP, x.dtype.scalar(), (x,), i)) for i in range(x.dtype.count)]
        return self.add(UOps.VECTORIZE, out.vec(x.dtype.count), tuple(lanes))

    # --- conversions ------------------------------------------------------------------------------------------------
    def encode(self, x: UOp, fp8: DType) -> UOp:
        """The fp8 bits (uint8) of a float32 or float64 `x`, rounded to nearest even, saturating."""
        return self.per_lane(lambda lane: self.encode_scalar(lane, FP8_FORMATS[fp8]), x, dtypes.uint8)

    def encode_scalar(self, x: UOp, fmt: Fp8Format) -> UOp:
        wide = x.dtype == dtypes.float64
        uint, width, man, src_bias = (dtypes.uint64, 64, 52, 1023) if wide else (dtypes.uint32, 32, 23, 127)
        bits = self.add(UOps.BITCAST, uint, (x,))
        magnitude = self.alu(Ops.AND, bits, (1 << (width - 1)) - 1)
        field = self.alu(Ops.SHR, magnitude, man)  # the source's biased exponent
        implicit = self.select(self.alu(Ops.CMPNE, field, 0), 1 << man, 0, uint)
        significand = self.alu(Ops.OR, self.alu(Ops.AND, magnitude, (1 << man) - 1), implicit)
        # binade: the fp8 exponent field minus 1 (negative below fp8's normal range, where the step stays the one of
        # the lowest binade: the significand is shifted further right, at most until it is all rounded away)
        binade = self.alu(Ops.ADD, self.cast(self.alu(Ops.MAX, field, 1), dtypes.int32), fmt.bias - 1 - src_bias)
        below = self.alu(Ops.MAX, self.alu(Ops.NEG, binade), 0)
        below = self.select(self.alu(Ops.CMPLT, below, fmt.mantissa + 3), below, fmt.mantissa + 3, dtypes.int32)
        shift = self.alu(Ops.ADD, below, man - fmt.mantissa)
        # significand >> shift rounded to nearest even: add half a step less one, plus the kept lowest bit
        half = self.alu(Ops.SHL, self.const(1, uint), self.cast(self.alu(Ops.ADD, shift, -1), uint))
        shift_u = self.cast(shift, uint)
        odd = self.alu(Ops.AND, self.alu(Ops.SHR, significand, shift_u), 1)
        rounded = self.alu(Ops.ADD, self.alu(Ops.ADD, significand, self.alu(Ops.ADD, half, -1)), odd)
        steps = self.alu(Ops.SHR, rounded, shift_u)
        # normal values have steps in [2**m, 2**(m+1)], subnormals in [0, 2**m]: added to the binade's bits, a carry
        # of the rounding (2**(m+1), or 2**m from a subnormal) lands in the exponent by itself
        exponent_bits = self.alu(Ops.SHL, self.cast(self.alu(Ops.MAX, binade, 0), uint), fmt.mantissa)
        finite = self.alu(Ops.ADD, exponent_bits, steps)
        finite = self.select(self.alu(Ops.CMPLT, finite, fmt.max_bits + 1), finite, fmt.max_bits, uint)
        src_inf = ((1 << (width - 1 - man)) - 1) << man
        special = self.select(self.alu(Ops.CMPNE, magnitude, src_inf), fmt.nan_bits, fmt.inf_bits, uint)
        value = self.select(self.alu(Ops.CMPLT, magnitude, src_inf), finite, special, uint)
        return self.cast(
            self.alu(Ops.OR, value, self.alu(Ops.SHL, self.alu(Ops.SHR, bits, width - 1), 7)), dtypes.uint8
        )

    def decode(self, bits: UOp, fp8: DType) -> UOp:
        """The float32 value of fp8 bits (uint8)."""
        return self.per_lane(lambda lane: self.decode_scalar(lane, FP8_FORMATS[fp8]), bits, REGISTER)

    def decode_scalar(self, bits: UOp, fmt: Fp8Format) -> UOp:
        x = self.cast(bits, dtypes.uint32)
        field = self.alu(Ops.AND, self.alu(Ops.SHR, x, fmt.mantissa), (1 << fmt.exponent) - 1)
        implicit = self.select(self.alu(Ops.CMPNE, field, 0), 1 << fmt.mantissa, 0, dtypes.uint32)
        significand = self.alu(Ops.OR, self.alu(Ops.AND, x, (1 << fmt.mantissa) - 1), implicit)
        # significand * 2**(max(field, 1) - bias - mantissa): both factors and the product are exact in float32
        scale_field = self.alu(Ops.ADD, self.alu(Ops.MAX, field, 1), 127 - fmt.bias - fmt.mantissa)
        scale = self.add(UOps.BITCAST, REGISTER, (self.alu(Ops.SHL, scale_field, 23),))
        magnitude = self.alu(Ops.MUL, self.cast(significand, REGISTER), scale)
        low = self.alu(Ops.AND, x, 0x7F)
        if fmt.has_inf:
            special = self.select(self.alu(Ops.CMPNE, low, fmt.inf_bits), float("nan"), float("inf"), REGISTER)
            magnitude = self.select(self.alu(Ops.CMPLT, low, fmt.inf_bits), magnitude, special, REGISTER)
        else:
            magnitude = self.select(self.alu(Ops.CMPNE, low, fmt.nan_bits), magnitude, float("nan"), REGISTER)
        negative = self.alu(Ops.CMPNE, self.alu(Ops.AND, x, 0x80), 0)
        return self.select(negative, self.alu(Ops.NEG, magnitude), magnitude, REGISTER)

    def to_fp8(self, x: UOp, src: DType, fp8: DType) -> UOp:
        """A value of dtype `src` (already rewritten) rounded to `fp8`, in a register. float64 is encoded from its own
        bits (through float32 it would round twice); everything else goes through float32, exactly or from so far
        past fp8's range that it saturates anyway (ints past 2**24)."""
        wide = src.scalar() == dtypes.float64
        return self.decode(self.encode(x if wide else self.cast(x, REGISTER.vec(src.count)), fp8), fp8)

    # --- one method per UOps member that may carry fp8 ---------------------------------------------------------------
    def copy(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        return self.add(u.op, _register(u.dtype), src, u.arg)

    def on_define_global(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if _value_dtype(u.dtype) not in FP8_FORMATS:  # type: ignore[arg-type]
            return self.copy(u, src)
        buf = self.add(UOps.DEFINE_GLOBAL, dtypes.uint8.ptr(), src, u.arg)
        self.bit_buffers.add(id(buf))
        return buf

    def on_define_local(self, u: UOp, src: tuple[UOp, ...]) -> UOp:  # local memory holds register values
        dtype = u.dtype.base() if isinstance(u.dtype, PtrDType) else u.dtype
        return self.add(UOps.DEFINE_LOCAL, _register(dtype).ptr(), src, u.arg)  # type: ignore[union-attr]

    def on_const(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if u.dtype is None or u.dtype.scalar() not in FP8_FORMATS:
            return self.copy(u, src)
        scalar = u.dtype.scalar()
        value = (
            tuple(truncate(v, scalar) for v in u.arg) if isinstance(u.arg, (tuple, list)) else truncate(u.arg, scalar)
        )
        return self.add(u.op, _register(u.dtype), src, value)

    on_define_acc = on_const

    def on_load(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if id(src[0]) not in self.bit_buffers:
            return self.copy(u, src)
        fp8, bits_dtype = u.dtype.scalar(), dtypes.uint8.vec(u.dtype.count)  # type: ignore[union-attr]
        if len(src) == 2:
            return self.decode(self.add(UOps.LOAD, bits_dtype, src), fp8)
        alt = u.src[3]
        if alt.op is UOps.CONST and not isinstance(alt.arg, (tuple, list)):  # the alternative as bits
            loaded = self.add(UOps.LOAD, bits_dtype, (*src[:3], self.const(float_to_fp8(alt.arg, fp8), bits_dtype)))
            return self.decode(loaded, fp8)
        loaded = self.add(UOps.LOAD, bits_dtype, (*src[:3], self.const(0, bits_dtype)))
        return self.alu(Ops.WHERE, src[2], self.decode(loaded, fp8), src[3])

    def on_store(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        if id(src[0]) not in self.bit_buffers:
            return self.copy(u, src)
        bits = self.encode(src[2], u.src[2].dtype.scalar())  # type: ignore[union-attr]
        return self.add(UOps.STORE, None, (src[0], src[1], bits, *src[3:]), u.arg)

    def on_alu(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        result = self.copy(u, src)
        if u.dtype is None or u.dtype.scalar() not in FP8_FORMATS or u.arg in EXACT:
            return result
        return self.decode(self.encode(result, u.dtype.scalar()), u.dtype.scalar())  # computed in float32, rounded once

    def on_cast(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        old, new = u.src[0].dtype, u.dtype
        assert old is not None and new is not None
        if old.scalar() in FP8_FORMATS and new.scalar() in FP8_FORMATS:
            return src[0] if old == new else self.to_fp8(src[0], REGISTER.vec(old.count), new.scalar())
        if new.scalar() in FP8_FORMATS:
            return self.to_fp8(src[0], old, new.scalar())
        if old.scalar() in FP8_FORMATS:
            return self.cast(src[0], new)  # exact from float32 (the register) to any float, as float32 to the rest
        return self.copy(u, src)

    def on_bitcast(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        old, new = u.src[0].dtype, u.dtype
        assert old is not None and new is not None
        if old.scalar() not in FP8_FORMATS and new.scalar() not in FP8_FORMATS:
            return self.copy(u, src)
        if old.itemsize != new.itemsize or old.count != new.count:
            raise NotImplementedError(f"bitcast {old} -> {new} inside a kernel: fp8 bitcasts keep the element count")
        uint8 = dtypes.uint8.vec(new.count)
        bits = self.encode(src[0], old.scalar()) if old.scalar() in FP8_FORMATS else self.cast_bits(src[0], uint8)
        return self.decode(bits, new.scalar()) if new.scalar() in FP8_FORMATS else self.cast_bits(bits, new)

    def cast_bits(self, x: UOp, dtype: DType) -> UOp:
        return x if x.dtype == dtype else self.add(UOps.BITCAST, dtype, (x,))

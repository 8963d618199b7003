"""`LLVMRenderer`: the UOp list as LLVM IR text. Accumulators and loop counters live in allocas that the optimizer
promotes to registers; gated loads and stores branch around the access; bool is i1 in registers and i8 in memory;
bfloat16 is held as its 16 bits (i16) and computed in float; half transcendentals and fma are computed in float; fp8 is
rewritten to uint8 bits and float32 values first (`lazy.renderer.emulate`)."""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import DType, dtypes
from lazy.ops import GroupOp, Ops, truncate
from lazy.renderer import Renderer
from lazy.renderer.cstyle import operand_dtype
from lazy.renderer.emulate import emulate_fp8
from lazy_cpu.hostcpu import host_capabilities

SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
    dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
    dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double",
}  # fmt: skip
INTRINSIC_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}
MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt"}
# one instruction per (op, kind); kind: f float, s signed, u unsigned, b bool
BINARY: dict[Ops, dict[str, str]] = {
    Ops.ADD: {"f": "fadd", "s": "add", "u": "add", "b": "or"},
    Ops.MUL: {"f": "fmul", "s": "mul", "u": "mul", "b": "and"}, Ops.FDIV: {"f": "fdiv"},
    Ops.AND: {"s": "and", "u": "and", "b": "and"}, Ops.OR: {"s": "or", "u": "or", "b": "or"},
    Ops.XOR: {"s": "xor", "u": "xor", "b": "xor"},
    Ops.SHL: {"s": "shl", "u": "shl"}, Ops.SHR: {"s": "ashr", "u": "lshr"},
    Ops.CMPLT: {"f": "fcmp olt", "s": "icmp slt", "u": "icmp ult", "b": "icmp ult"},
    Ops.CMPNE: {"f": "fcmp une", "s": "icmp ne", "u": "icmp ne", "b": "icmp ne"},
    Ops.MOD: {"f": "frem"}, Ops.MAX: {"b": "or"},
}  # fmt: skip


def ll_type(dtype: DType, memory: bool = False) -> str:
    """The LLVM type of a value of `dtype` (`memory`: as stored, where bool is a byte)."""
    if dtype.is_ptr:
        return "ptr"
    scalar = "i8" if memory and dtype.scalar() == dtypes.bool else SCALAR_TYPES[dtype.scalar()]
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def kind(dtype: DType) -> str:
    scalar = dtype.scalar()
    if scalar == dtypes.bool:
        return "b"
    return "f" if dtypes.is_float(scalar) and scalar != dtypes.bfloat16 else "u" if dtypes.is_unsigned(scalar) else "s"


def ll_const(value: Any, dtype: DType) -> str:
    """A scalar constant as LLVM writes it (floats in hex: exact, and inf/nan need no special spelling)."""
    if dtype == dtypes.bool:
        return "true" if value else "false"
    if dtype == dtypes.bfloat16:
        return str(struct.unpack("<i", struct.pack("<f", truncate(value, dtypes.bfloat16)))[0] >> 16)
    if dtype == dtypes.float16:
        return f"0xH{struct.unpack('<H', struct.pack('<e', truncate(value, dtypes.float16)))[0]:04X}"
    if dtypes.is_float(dtype):
        return f"0x{struct.unpack('<Q', struct.pack('<d', truncate(value, dtype)))[0]:016X}"
    bits = dtype.itemsize * 8
    signed = int(value) & ((1 << bits) - 1)
    return str(signed - (1 << bits) if signed >= 1 << (bits - 1) else signed)


def compute_dtype(op: Ops, dtype: DType) -> DType:
    scalar = dtype.scalar()
    if (scalar == dtypes.bfloat16 and op is not Ops.WHERE) or (
        scalar == dtypes.float16 and (op in MATH or op is Ops.MULACC)
    ):
        return dtypes.float32.vec(dtype.count)
    return dtype


class LLVMRenderer(Renderer):
    """LLVM IR for the host (the module has no triple or data layout: the compiler sets the host's)."""

    device = "LLVM"
    # i64 index arithmetic (`Capabilities.wide_index`): with i32 indices, which may wrap, every address is a sign
    # extension of a non-`nsw` sum, and LLVM's scalar evolution (indvars, loop-idiom, loop-load-elim) spent seconds
    # on the CNN step's convolution kernels proving things about them (cold first step 10.7 -> 4.1 s, steady
    # 633 -> 530 ms; matmul 1024 94 -> 117 GFLOP/s, conv forward 82 -> 106, see docs/benchmarks.md)
    caps = replace(host_capabilities(), wide_index=True, exact_division=True)

    def render(self, name: str, uops: list[UOp]) -> str:
        return _IRWriter(emulate_fp8(uops)).write(name)  # fp8 as bits in memory, float32 in registers


class _IRWriter:
    """The state of one `render` call."""

    def __init__(self, uops: list[UOp]):
        self.uops = uops
        self.names: dict[int, str] = {}
        self.allocas: list[str] = []
        self.body: list[str] = []
        self.decls: set[str] = set()
        self.slots: dict[int, tuple[str, str]] = {}  # DEFINE_ACC/ASSIGN -> (alloca, type): read with a load
        self.loops: dict[int, tuple[int, str, str, str]] = {}  # RANGE -> (label, counter alloca, value, type)
        self.ifs: dict[int, int] = {}  # IF -> label number
        self.buffers: list[tuple[int, str]] = []
        self.vars: list[str] = []
        self.count = 0
        self.block = "entry"

    # --- emitting -------------------------------------------------------------------------------------------------
    def fresh(self) -> int:
        self.count += 1
        return self.count

    def emit(self, line: str) -> None:
        self.body.append(f"  {line}")

    def op(self, rhs: str) -> str:
        reg = f"%.{self.fresh()}"
        self.emit(f"{reg} = {rhs}")
        return reg

    def label(self, name: str) -> None:
        self.body.append(f"{name}:")
        self.block = name

    def ref(self, uop: UOp) -> str:
        if (slot := self.slots.get(id(uop))) is not None:
            return self.op(f"load {slot[1]}, ptr {slot[0]}")
        return self.names[id(uop)]

    def const(self, value: Any, dtype: DType) -> str:
        scalar = ll_const(value, dtype.scalar())
        return scalar if dtype.count == 1 else f"splat ({SCALAR_TYPES[dtype.scalar()]} {scalar})"

    def call(self, fn: str, dtype: DType, args: list[str]) -> str:
        t = ll_type(dtype)
        suffix = INTRINSIC_SUFFIX[SCALAR_TYPES[dtype.scalar()]]
        name = f"llvm.{fn}.{suffix if dtype.count == 1 else f'v{dtype.count}{suffix}'}"
        self.decls.add(f"declare {t} @{name}({', '.join([t] * len(args))})")
        return self.op(f"call {t} @{name}({', '.join(f'{t} {a}' for a in args)})")

    def write(self, name: str) -> str:
        for uop in self.uops:
            handler = getattr(self, f"on_{uop.op.name.lower()}", None)
            if handler is None:
                raise NotImplementedError(f"LLVMRenderer cannot render {uop.op}")
            handler(uop)
        params = [p for _, p in sorted(self.buffers)] + self.vars
        lines = [
            f"define void @{name}({', '.join(params)}) #0 {{",
            "entry:",
            *self.allocas,
            *self.body,
            "  ret void",
            "}",
        ]
        return "\n".join([*lines, *sorted(self.decls), "attributes #0 = { nounwind }"]) + "\n"

    # --- conversions ----------------------------------------------------------------------------------------------
    def cast(self, x: str, src: DType, dst: DType) -> str:
        if src.scalar() == dst.scalar():
            return x
        f32 = dtypes.float32.vec(dst.count)
        if src.scalar() == dtypes.bfloat16:  # the bits are the top half of a float32
            wide = self.op(f"zext {ll_type(src)} {x} to {ll_type(dtypes.int32.vec(src.count))}")
            shifted = self.op(
                f"shl {ll_type(dtypes.int32.vec(src.count))} {wide}, {self.const(16, dtypes.int32.vec(src.count))}"
            )
            return self.cast(
                self.op(f"bitcast {ll_type(dtypes.int32.vec(src.count))} {shifted} to {ll_type(f32)}"), f32, dst
            )
        if dst.scalar() == dtypes.bfloat16:
            return self.float_to_bf16(self.cast(x, src, f32), dst.count)
        if src.scalar() == dtypes.float64 and dst.scalar() == dtypes.float16:
            return self.cast(self.double_to_float_odd(x, src.count), f32, dst)
        st, dt, sk, dk = ll_type(src), ll_type(dst), kind(src), kind(dst)
        if dk == "b":
            return self.op(f"{'fcmp une' if sk == 'f' else 'icmp ne'} {st} {x}, zeroinitializer")  # NaN -> true
        if sk == "f" and dk == "f":
            ins = "fpext" if dst.itemsize > src.itemsize else "fptrunc"
        elif sk == "f":
            if dst.scalar().itemsize < 4:  # through int32, then wrapped: out of a small type's range, C's conversion
                # (the reference) wraps, while a direct fptosi is poison there (vectorized: saturated on some CPUs)
                return self.cast(self.op(f"fptosi {st} {x} to {ll_type(dtypes.int32.vec(dst.count))}"),
                                 dtypes.int32.vec(dst.count), dst)  # fmt: skip
            ins = "fptosi" if dk == "s" else "fptoui"
        elif dk == "f":
            ins = "sitofp" if sk == "s" else "uitofp"
        else:
            src_bits, dst_bits = (1 if sk == "b" else src.scalar().itemsize * 8), dst.scalar().itemsize * 8
            if src_bits == dst_bits:
                return x
            ins = "trunc" if src_bits > dst_bits else "sext" if sk == "s" else "zext"
        return self.op(f"{ins} {st} {x} to {dt}")

    def double_to_float_odd(self, x: str, count: int) -> str:
        """double -> float rounding to odd, so that a further float -> half rounds exactly once. (A direct
        `fptrunc double to half` becomes a call to __truncdfhf2, which the JIT cannot always resolve.)"""
        f64, f32, i32 = (ll_type(d.vec(count)) for d in (dtypes.float64, dtypes.float32, dtypes.int32))
        i1 = ll_type(dtypes.bool.vec(count))
        near = self.op(f"fptrunc {f64} {x} to {f32}")
        back = self.op(f"fpext {f32} {near} to {f64}")
        inexact = self.op(f"fcmp one {f64} {back}, {x}")  # false for NaN (kept) and exact results
        fabs = self.call("fabs", dtypes.float64.vec(count), [back])
        away = self.op(f"fcmp ogt {f64} {fabs}, {self.call('fabs', dtypes.float64.vec(count), [x])}")
        bits = self.op(f"bitcast {f32} {near} to {i32}")
        toward_zero = self.op(f"sub {i32} {bits}, {self.op(f'zext {i1} {away} to {i32}')}")
        odd = self.op(f"or {i32} {toward_zero}, {self.const(1, dtypes.int32.vec(count))}")
        chosen = self.op(f"select {i1} {inexact}, {i32} {odd}, {i32} {bits}")
        return self.op(f"bitcast {i32} {chosen} to {f32}")

    def float_to_bf16(self, x: str, count: int) -> str:
        """Round to nearest even, NaN kept a NaN (its quiet bit set), as `lazy.ops.truncate` does."""
        i32, c = ll_type(dtypes.int32.vec(count)), lambda v: self.const(v, dtypes.int32.vec(count))
        bits = self.op(f"bitcast {ll_type(dtypes.float32.vec(count))} {x} to {i32}")
        odd = self.op(f"and {i32} {self.op(f'lshr {i32} {bits}, {c(16)}')}, {c(1)}")
        rounded = self.op(f"add {i32} {bits}, {self.op(f'add {i32} {odd}, {c(0x7FFF)}')}")
        nan = self.op(f"fcmp uno {ll_type(dtypes.float32.vec(count))} {x}, {x}")
        quiet = self.op(f"or {i32} {bits}, {c(0x400000)}")  # a NaN stays one (a low-half payload would truncate to inf)
        chosen = self.op(f"select {ll_type(dtypes.bool.vec(count))} {nan}, {i32} {quiet}, {i32} {rounded}")
        top = self.op(f"lshr {i32} {chosen}, {c(16)}")
        return self.op(f"trunc {i32} {top} to {ll_type(dtypes.bfloat16.vec(count))}")

    # --- arithmetic -----------------------------------------------------------------------------------------------
    def alu(self, op: Ops, dtype: DType, xs: list[str], divisor: UOp | None) -> str:
        """`op` on operands `xs` of `dtype` (the compute dtype): the register holding the result."""
        t, k, n = ll_type(dtype), kind(dtype), dtype.count
        if op in BINARY and k in BINARY[op]:
            return self.op(f"{BINARY[op][k]} {t} {xs[0]}, {xs[1]}")
        if op in MATH:
            return self.call(MATH[op], dtype, xs)
        if op is Ops.NEG:
            return self.op(f"fneg {t} {xs[0]}" if k == "f" else f"xor {t} {xs[0]}, {self.const(True, dtype)}"
                           if k == "b" else f"sub {t} {self.const(0, dtype)}, {xs[0]}")  # fmt: skip
        if op is Ops.RECIP:
            return self.op(f"fdiv {t} {self.const(1.0, dtype)}, {xs[0]}")
        if op is Ops.WHERE:
            return self.op(f"select {ll_type(dtypes.bool.vec(n))} {xs[0]}, {t} {xs[1]}, {t} {xs[2]}")
        if op is Ops.MAX:
            cmp = {"f": "fcmp oge", "s": "icmp sgt", "u": "icmp ugt"}[k]
            take = self.op(f"{cmp} {t} {xs[0]}, {xs[1]}")
            if k == "f":  # NaN in either operand propagates
                take = self.op(f"or {ll_type(dtypes.bool.vec(n))} {take}, {self.op(f'fcmp uno {t} {xs[0]}, {xs[0]}')}")
            return self.op(f"select {ll_type(dtypes.bool.vec(n))} {take}, {t} {xs[0]}, {t} {xs[1]}")
        if op is Ops.MULACC:
            if dtype.scalar() == dtypes.float32:
                return self.call("fma", dtype, xs)
            product = self.op(f"{'fmul' if k == 'f' else 'mul'} {t} {xs[0]}, {xs[1]}")
            return self.op(f"{'fadd' if k == 'f' else 'add'} {t} {product}, {xs[2]}")
        if op is Ops.IDIV and k == "f":
            return self.call("trunc", dtype, [self.op(f"fdiv {t} {xs[0]}, {xs[1]}")])
        if op in (Ops.IDIV, Ops.MOD):
            return self.int_div(op, dtype, xs[0], xs[1], divisor)
        raise NotImplementedError(f"LLVMRenderer: no {op} for {dtype}")

    def int_div(self, op: Ops, dtype: DType, a: str, b: str, divisor: UOp | None) -> str:
        """x/0 is 0 and INT_MIN/-1 wraps, as in `lazy.ops`, instead of undefined behaviour (a trap)."""
        t, signed, i1 = ll_type(dtype), kind(dtype) == "s", ll_type(dtypes.bool.vec(dtype.count))
        ins = ("sdiv" if signed else "udiv") if op is Ops.IDIV else ("srem" if signed else "urem")
        if divisor is not None and divisor.op is UOps.CONST and divisor.arg > 0:
            return self.op(f"{ins} {t} {a}, {b}")
        zero = self.op(f"icmp eq {t} {b}, {self.const(0, dtype)}")
        bad = zero
        if signed:
            minus_one = self.op(f"icmp eq {t} {b}, {self.const(-1, dtype)}")
            bad = self.op(f"or {i1} {zero}, {minus_one}")
        safe = self.op(f"select {i1} {bad}, {t} {self.const(1, dtype)}, {t} {b}")
        result = self.op(f"{ins} {t} {a}, {safe}")  # a/1 == a and a%1 == 0: only a/-1 needs fixing below
        if signed and op is Ops.IDIV:
            negated = self.op(f"sub {t} {self.const(0, dtype)}, {a}")
            result = self.op(f"select {i1} {minus_one}, {t} {negated}, {t} {result}")
        return self.op(f"select {i1} {zero}, {t} {self.const(0, dtype)}, {t} {result}")

    # --- one method per UOps member -----------------------------------------------------------------------------------
    def on_define_global(self, u: UOp) -> None:
        idx, name, written = u.arg
        self.names[id(u)] = f"%{name}"
        self.buffers.append((idx, f"ptr noalias {'' if written else 'readonly '}%{name}"))

    def on_define_var(self, u: UOp) -> None:
        # every int parameter is an i64 (hosts pass 64-bit values whatever the index dtype), narrowed in the entry block
        name, t = f"%{u.arg[0]}", ll_type(u.dtype or dtypes.int32)
        self.vars.append(f"i64 {name}")
        self.names[id(u)] = name if t == "i64" else f"{name}.{t}"
        if t != "i64":
            self.allocas.append(f"  {name}.{t} = trunc i64 {name} to {t}")

    def on_define_local(self, u: UOp) -> None:
        self.names[id(u)] = f"%{u.arg[0]}"
        self.allocas.append(f"  %{u.arg[0]} = alloca [{u.arg[1]} x {ll_type(u.dtype.base(), True)}], align 64")  # type: ignore[union-attr]

    def on_define_acc(self, u: UOp) -> None:
        dtype: DType = u.dtype  # type: ignore[assignment]
        t, ptr = ll_type(dtype), f"%acc{self.fresh()}"
        self.allocas.append(f"  {ptr} = alloca {t}")
        if isinstance(u.arg, (tuple, list)):  # one initial value per lane
            value = self.vector([ll_const(v, dtype.scalar()) for v in u.arg], dtype)
        else:
            value = self.const(u.arg, dtype)
        self.emit(f"store {t} {value}, ptr {ptr}")
        self.slots[id(u)] = (ptr, t)

    def on_assign(self, u: UOp) -> None:
        ptr, t = self.slots[id(u.src[0])]
        self.emit(f"store {t} {self.ref(u.src[1])}, ptr {ptr}")
        self.slots[id(u)] = (ptr, t)

    def on_const(self, u: UOp) -> None:
        self.names[id(u)] = self.const(u.arg, u.dtype)  # type: ignore[arg-type]

    def on_special(self, u: UOp) -> None:
        raise NotImplementedError("LLVMRenderer: no thread ids (SPECIAL) on a CPU; the kernel loops itself")

    def on_range(self, u: UOp) -> None:
        n = self.fresh()
        start, end = (self.ref(s) for s in u.src)
        ptr, reg, t = f"%ridx{n}.addr", f"%ridx{n}", ll_type(u.dtype)  # type: ignore[arg-type]
        self.allocas.append(f"  {ptr} = alloca {t}")
        self.emit(f"store {t} {start}, ptr {ptr}")
        self.emit(f"br label %loop{n}")
        self.label(f"loop{n}")
        self.emit(f"{reg} = load {t}, ptr {ptr}")
        self.emit(f"br i1 {self.op(f'icmp slt {t} {reg}, {end}')}, label %body{n}, label %exit{n}")
        self.label(f"body{n}")
        self.names[id(u)] = reg
        self.loops[id(u)] = (n, ptr, reg, t)

    def on_endrange(self, u: UOp) -> None:
        n, ptr, reg, t = self.loops[id(u.src[0])]
        self.emit(f"store {t} {self.op(f'add nsw {t} {reg}, 1')}, ptr {ptr}")
        self.emit(f"br label %loop{n}")
        self.label(f"exit{n}")

    def on_if(self, u: UOp) -> None:
        n = self.ifs[id(u)] = self.fresh()
        self.emit(f"br i1 {self.ref(u.src[0])}, label %if{n}, label %endif{n}")
        self.label(f"if{n}")

    def on_endif(self, u: UOp) -> None:
        n = self.ifs[id(u.src[0])]
        self.emit(f"br label %endif{n}")
        self.label(f"endif{n}")

    def on_barrier(self, u: UOp) -> None:
        pass  # one thread per kernel call: nothing to wait for

    def typed_index(self, idx: UOp) -> str:
        """An index operand with its type (i32 or i64: the kernel's index dtype), as `getelementptr` takes it."""
        return f"{ll_type(idx.dtype)} {self.ref(idx)}"  # type: ignore[arg-type]

    def address(self, buf: UOp, idx: str, dtype: DType) -> str:
        return self.op(f"getelementptr inbounds {ll_type(dtype.scalar(), True)}, ptr {self.ref(buf)}, {idx}")

    def on_load(self, u: UOp) -> None:
        dtype: DType = u.dtype  # type: ignore[assignment]
        idx = self.typed_index(u.src[1])
        gate = self.ref(u.src[2]) if len(u.src) > 2 else None
        alt = self.ref(u.src[3]) if gate is not None else None
        if gate is not None:
            n, before = self.fresh(), self.block
            self.emit(f"br i1 {gate}, label %load{n}, label %loaded{n}")
            self.label(f"load{n}")
        mt = ll_type(dtype, memory=True)
        value = self.op(f"load {mt}, ptr {self.address(u.src[0], idx, dtype)}, align {dtype.scalar().itemsize}")
        if dtype.scalar() == dtypes.bool:
            value = self.op(f"icmp ne {mt} {value}, zeroinitializer")
        if gate is not None:
            loaded = self.block
            self.emit(f"br label %loaded{n}")
            self.label(f"loaded{n}")
            value = self.op(f"phi {ll_type(dtype)} [ {value}, %{loaded} ], [ {alt}, %{before} ]")
        self.names[id(u)] = value

    def on_store(self, u: UOp) -> None:
        dtype: DType = u.src[2].dtype  # type: ignore[assignment]
        idx, value = self.typed_index(u.src[1]), self.ref(u.src[2])
        if len(u.src) > 3:
            n = self.fresh()
            self.emit(f"br i1 {self.ref(u.src[3])}, label %store{n}, label %stored{n}")
            self.label(f"store{n}")
        mt = ll_type(dtype, memory=True)
        if dtype.scalar() == dtypes.bool:
            value = self.op(f"zext {ll_type(dtype)} {value} to {mt}")
        self.emit(f"store {mt} {value}, ptr {self.address(u.src[0], idx, dtype)}, align {dtype.scalar().itemsize}")
        if len(u.src) > 3:
            self.emit(f"br label %stored{n}")
            self.label(f"stored{n}")

    def on_alu(self, u: UOp) -> None:
        dtype: DType = u.dtype  # type: ignore[assignment]
        src_dtypes: list[DType] = [s.dtype for s in u.src]  # type: ignore[misc]
        xs = [self.ref(s) for s in u.src]
        if dtype.count > 1:  # a scalar operand of a vector op: broadcast it
            xs = [self.splat(x, d, dtype.count) if d.count == 1 else x for x, d in zip(xs, src_dtypes)]
        src = operand_dtype(u.arg, src_dtypes).scalar().vec(dtype.count)
        compute = compute_dtype(u.arg, src)
        if compute != src:
            xs = [x if i == 0 and u.arg is Ops.WHERE else self.cast(x, src, compute) for i, x in enumerate(xs)]
        result = self.alu(u.arg, compute, xs, u.src[1] if len(u.src) > 1 else None)
        if compute != src and u.arg not in GroupOp.Comparison:
            result = self.cast(result, compute, dtype)
        self.names[id(u)] = result

    def on_cast(self, u: UOp) -> None:
        self.names[id(u)] = self.cast(self.ref(u.src[0]), u.src[0].dtype, u.dtype)  # type: ignore[arg-type]

    def on_bitcast(self, u: UOp) -> None:
        x, st, dt = self.ref(u.src[0]), ll_type(u.src[0].dtype), ll_type(u.dtype)  # type: ignore[arg-type]
        self.names[id(u)] = x if st == dt else self.op(f"bitcast {st} {x} to {dt}")

    def vector(self, lanes: list[str], dtype: DType) -> str:
        value, t, st = "poison", ll_type(dtype), SCALAR_TYPES[dtype.scalar()]
        for i, lane in enumerate(lanes):
            value = self.op(f"insertelement {t} {value}, {st} {lane}, i32 {i}")
        return value

    def splat(self, x: str, dtype: DType, count: int) -> str:
        return self.vector([x] * count, dtype.vec(count))

    def on_vectorize(self, u: UOp) -> None:
        self.names[id(u)] = self.vector([self.ref(s) for s in u.src], u.dtype)  # type: ignore[arg-type]

    def on_gep(self, u: UOp) -> None:
        src = u.src[0]
        self.names[id(u)] = self.op(f"extractelement {ll_type(src.dtype)} {self.ref(src)}, i32 {u.arg}")  # type: ignore[arg-type]

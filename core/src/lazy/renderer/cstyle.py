"""The shared C-style renderer: one walk over the UOp list that writes C-like source. Everything that differs
between C, OpenCL C, CUDA C and MSL is data (the dialect table at the top of `CStyleLanguage`) or one small
method a dialect overrides, so a device renderer is usually a short subclass."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from typing import Any

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import DType, PtrDType, dtypes
from lazy.ops import GroupOp, Ops, truncate
from lazy.renderer import Renderer, TensorCore
from lazy.renderer.emulate import emulate_fp8

HALF_IN_FLOAT = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.MULACC, Ops.FDIV})
POSITIVE_INT = re.compile(r"[1-9][0-9]*[uUlL]*")  # a divisor literal that needs no zero check


def checked_div(op: str) -> Callable[..., str]:
    """Integer `/` or `%` (`op`) with `lazy.ops` semantics in C: x/0 is 0 and INT_MIN/-1 wraps, instead of the trap
    that kills the process on a CPU (or an undefined result elsewhere). Dialects use it in their `code_for_op`."""

    def render(a: str, b: str, dtype: DType) -> str:
        if POSITIVE_INT.fullmatch(b):
            return f"({a}{op}{b})"
        if dtypes.is_unsigned(dtype) or dtype == dtypes.bool:
            return f"(({b})?({a}{op}{b}):0)"
        minus_one = f"(-{a})" if op == "/" else "0"
        return f"(({b})==0?0:({b})==-1?{minus_one}:({a}{op}{b}))"

    return render


def _trunc_div(a: str, b: str, dtype: DType) -> str:
    return f"trunc({a}/{b})" if dtypes.is_float(dtype) else checked_div("/")(a, b, dtype)


def _fmod(a: str, b: str, dtype: DType) -> str:
    return f"fmod({a},{b})" if dtypes.is_float(dtype) else checked_div("%")(a, b, dtype)


def _fma_mulacc(a: str, b: str, c: str, dtype: DType) -> str:
    # float32 (and half computed in float32): one rounding of a*b+c, as the reference's exact product then rounding;
    # other dtypes two roundings, as written (the GPU dialects compile without contraction)
    return f"fma({a},{b},{c})" if dtype.scalar() == dtypes.float32 else f"(({a}*{b})+{c})"


# IDIV, MOD and MULACC in the GPU C dialects (OpenCL C, CUDA C++, MSL), which have trunc, fmod and a vector fma
GPU_DIVISION_OPS: dict[Ops, Callable[..., str]] = {Ops.IDIV: _trunc_div, Ops.MOD: _fmod, Ops.MULACC: _fma_mulacc}

KernelParam = tuple[str, DType, bool]  # (name, dtype: a PtrDType for buffers or the index dtype for vars, written?)


def operand_dtype(op: Ops, src_dtypes: list[DType]) -> DType:
    """The dtype an ALU op computes on: its first operand's, except WHERE's (whose first operand is the condition)."""
    return src_dtypes[1] if op is Ops.WHERE else src_dtypes[0]


def _float_fn(name: str) -> Callable[..., str]:
    return lambda x, dtype: f"{name}({x})"


def _max(a: str, b: str, dtype: DType) -> str:
    if dtypes.is_float(dtype):
        return f"((({a}>={b})||({a}!={a}))?{a}:{b})"  # NaN from either side propagates
    return f"(({a}>{b})?{a}:{b})"


def _idiv(a: str, b: str, dtype: DType) -> str:
    return f"trunc({a}/{b})" if dtypes.is_float(dtype) else f"({a}/{b})"


def _mod(a: str, b: str, dtype: DType) -> str:
    return f"fmod({a},{b})" if dtypes.is_float(dtype) else f"({a}%{b})"


BASE_CODE_FOR_OP: dict[Ops, Callable[..., str]] = {
    Ops.EXP2: _float_fn("exp2"), Ops.LOG2: _float_fn("log2"), Ops.SIN: _float_fn("sin"), Ops.SQRT: _float_fn("sqrt"),
    Ops.RECIP: lambda x, dtype: f"(1/{x})",
    Ops.NEG: lambda x, dtype: f"(!{x})" if dtype == dtypes.bool else f"(-{x})",
    Ops.ADD: lambda a, b, dtype: f"({a}+{b})", Ops.MUL: lambda a, b, dtype: f"({a}*{b})",
    Ops.FDIV: lambda a, b, dtype: f"({a}/{b})",
    Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MAX: _max,
    Ops.CMPLT: lambda a, b, dtype: f"({a}<{b})", Ops.CMPNE: lambda a, b, dtype: f"({a}!={b})",
    Ops.AND: lambda a, b, dtype: f"({a}&{b})", Ops.OR: lambda a, b, dtype: f"({a}|{b})",
    Ops.XOR: lambda a, b, dtype: f"({a}^{b})",
    Ops.SHL: lambda a, b, dtype: f"({a}<<{b})", Ops.SHR: lambda a, b, dtype: f"({a}>>{b})",
    Ops.WHERE: lambda c, a, b, dtype: f"({c}?{a}:{b})",
    Ops.MULACC: lambda a, b, c, dtype: f"(({a}*{b})+{c})",
}  # fmt: skip

# uops after which a not-yet-used inlined expression could read a different value (or leave its scope)
SIDE_EFFECTS = frozenset({UOps.ASSIGN, UOps.STORE, UOps.RANGE, UOps.ENDRANGE, UOps.IF, UOps.ENDIF, UOps.BARRIER,
                          UOps.DEFINE_ACC})  # fmt: skip
INLINABLE = frozenset({UOps.ALU, UOps.CAST, UOps.BITCAST, UOps.GEP, UOps.VECTORIZE})
VALUE_PREFIX = {UOps.LOAD: "val", UOps.ALU: "alu", UOps.CAST: "cast", UOps.BITCAST: "cast", UOps.GEP: "gep",
                UOps.VECTORIZE: "vec", UOps.WMMA: "wmma"}  # fmt: skip


class CStyleLanguage(Renderer):
    """Renders a UOp list as one C-like kernel function. Subclasses change the dialect table below."""

    # --- the dialect table ---------------------------------------------------------------------------------------
    kernel_prefix: str = ""  # before `void name(...)`: "__kernel ", 'extern "C" __global__ ', "kernel "
    buffer_prefix: str = ""  # before a buffer parameter's type: "__global ", "device "
    buffer_suffix: str = ""  # after the `*`: " restrict", " __restrict__"
    # every int parameter (symbolic variables, core_split lo/hi) is passed as this type whatever index dtype the
    # kernel computes in, so a host passes any value the same way; the kernel narrows it to the DEFINE_VAR's dtype
    int_param_dtype: DType = dtypes.int64
    smem_prefix: str = ""  # before a DEFINE_LOCAL array: "__local ", "__shared__ ", "threadgroup "
    barrier: str = ""  # the statement for BARRIER
    code_for_workitem: dict[str, Callable[[int], str]] = {}  # "g"/"l" -> dim -> expression, for SPECIAL
    type_map: dict[DType, str] = {
        dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.bfloat16: "__bf16",
        dtypes.float32: "float", dtypes.float64: "double",
    }  # fmt: skip
    vector_ctor: str = "(({type}){{{args}}})"  # building a vector from lanes: OpenCL "(({type})({args}))"
    vector_cast: str | None = None  # a whole-vector conversion, e.g. "__builtin_convertvector({x}, {type})"
    infinity: str = "INFINITY"
    nan: str = "NAN"
    float_suffix: dict[DType, str] = {dtypes.float32: "f"}  # literal suffixes; other float types get a cast
    int_suffix: dict[DType, str] = {dtypes.uint32: "u", dtypes.int64: "ll", dtypes.uint64: "ull"}
    # bfloat16 held as its 16 bits (type_map says which unsigned type) and computed in float through the helpers
    # lazy_bf2f / lazy_f2bf, which the dialect's prelude defines
    bf16_as_bits: bool = False
    half_math_in_float: bool = False  # exp2/log2/sin/sqrt/mulacc of half computed in float (no half versions)
    code_for_op: dict[Ops, Callable[..., str]] = BASE_CODE_FOR_OP
    # ops the dialect's vector types do directly, and for which element types; everything else is done per lane
    native_vector_ops: frozenset[Ops] = frozenset({Ops.ADD, Ops.MUL, Ops.NEG})
    native_vector_dtypes: frozenset[DType] = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64})
    # ops whose C text repeats an operand: their operands become named variables instead of inlined expressions
    repeating_ops: frozenset[Ops] = frozenset({Ops.MAX, Ops.IDIV, Ops.MOD})
    # results C would compute in a wider type (integer promotion, excess precision): cast back after each op
    narrow_dtypes: frozenset[DType] = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
                                                 dtypes.float16})  # fmt: skip

    # --- types and constants -------------------------------------------------------------------------------------
    def render_dtype(self, dtype: DType) -> str:
        if dtype.is_ptr:
            dtype = dtype.base()  # type: ignore[attr-defined]
        return self.vector_type(dtype) if dtype.count > 1 else self.type_map[dtype]

    def vector_type(self, dtype: DType) -> str:
        return dtype.name  # float4, half8, int4 ...

    def render_const(self, value: Any, dtype: DType) -> str:
        if dtype.count > 1:
            lanes = value if isinstance(value, (tuple, list)) else [value] * dtype.count
            return self.render_vectorize(dtype, [self.render_const(v, dtype.scalar()) for v in lanes])
        if dtype == dtypes.bool:
            return "1" if value else "0"
        if dtypes.is_float(dtype):
            return self.render_float_const(float(value), dtype)
        return self.render_int_const(int(value), dtype)

    def render_float_const(self, value: float, dtype: DType) -> str:
        if self.bf16_as_bits and dtype == dtypes.bfloat16:  # the constant's bits
            return self.render_bf16_const(value)
        if math.isnan(value):
            text = self.nan
        elif math.isinf(value):
            text = self.infinity if value > 0 else f"(-{self.infinity})"
        else:
            text = repr(value) + self.float_suffix.get(dtype, "")
            text = f"({text})" if value < 0 else text
        if dtype in (dtypes.float32, dtypes.float64) or (dtype in self.float_suffix and math.isfinite(value)):
            return text
        return f"(({self.render_dtype(dtype)}){text})"

    def render_bf16_const(self, value: float) -> str:
        bits = struct.unpack("<I", struct.pack("<f", truncate(value, dtypes.bfloat16)))[0] >> 16
        return f"(({self.type_map[dtypes.bfloat16]})0x{bits:04x})"

    def render_int_const(self, value: int, dtype: DType) -> str:
        bits = dtype.itemsize * 8
        suffix = self.int_suffix.get(dtype, "")
        if value == -(1 << (bits - 1)) and bits >= 32:  # the most negative value has no literal of its own
            text = f"(-{(1 << (bits - 1)) - 1}{suffix}-1)"
        else:
            text = f"({value}{suffix})" if value < 0 else f"{value}{suffix}"
        return text if bits >= 32 else f"(({self.render_dtype(dtype)}){text})"

    # --- conversions and vectors ----------------------------------------------------------------------------------
    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if self.bf16_as_bits and dtypes.bfloat16 in (src.scalar(), dst.scalar()) and src != dst:
            return self.render_bf16_cast(x, src, dst)
        if dst.count > 1:
            if self.vector_cast is not None and dtypes.bool not in (src.scalar(), dst.scalar()):
                return self.vector_cast.format(x=x, type=self.render_dtype(dst))
            return self.render_vectorize(dst, [self.render_cast(self.render_gep(x, i), src.scalar(), dst.scalar())
                                               for i in range(dst.count)])  # fmt: skip
        return f"(({self.render_dtype(dst)}){x})"

    def render_bf16_cast(self, x: str, src: DType, dst: DType) -> str:
        """A cast from or to bfloat16 held as bits: through float with the lazy_bf2f / lazy_f2bf helpers."""
        if dst.count > 1:
            lanes = [self.render_cast(self.render_gep(x, i), src.scalar(), dst.scalar()) for i in range(dst.count)]
            return self.render_vectorize(dst, lanes)
        if src == dtypes.bfloat16:
            as_float = f"lazy_bf2f({x})"
            return as_float if dst == dtypes.float32 else self.render_cast(as_float, dtypes.float32, dst)
        return f"lazy_f2bf({x if src == dtypes.float32 else self.render_cast(x, src, dtypes.float32)})"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"((union {{ {self.render_dtype(src)} src; {self.render_dtype(dst)} dst; }}){{.src = {x}}}).dst"

    def render_vectorize(self, dtype: DType, lanes: list[str]) -> str:
        return self.vector_ctor.format(type=self.render_dtype(dtype), args=",".join(lanes))

    def render_gep(self, x: str, lane: int) -> str:
        return f"{x}[{lane}]"

    # --- arithmetic -----------------------------------------------------------------------------------------------
    def compute_dtype(self, op: Ops, dtype: DType) -> DType:
        """The type `op` on `dtype` operands is computed in (a dialect without half math says float32)."""
        if self.bf16_as_bits and dtype == dtypes.bfloat16 and op is not Ops.WHERE:
            return dtypes.float32
        if self.half_math_in_float and dtype == dtypes.float16 and op in HALF_IN_FLOAT:
            return dtypes.float32
        return dtype

    def vector_native(self, op: Ops, dtype: DType, src_dtype: DType) -> bool:
        return op in self.native_vector_ops and src_dtype.scalar() in self.native_vector_dtypes and dtype == src_dtype

    def repeats_operands(self, uop: UOp) -> bool:
        """True when rendering `uop` writes one of its operands more than once (so operands must be variables)."""
        if uop.dtype is None:
            return False
        vector = uop.dtype.count > 1
        if uop.op is UOps.ALU:
            src_dtype = operand_dtype(uop.arg, [s.dtype for s in uop.src])  # type: ignore[misc]
            return uop.arg in self.repeating_ops or (vector and not self.vector_native(uop.arg, uop.dtype, src_dtype))
        return uop.op in (UOps.CAST, UOps.BITCAST) and vector

    def render_alu_uop(self, u: UOp, operands: list[str]) -> str:
        """The expression of ALU uop `u` from its operands' expressions: `render_alu`, unless a dialect renders some
        pattern of `u` and its sources better as a whole (the CPU's select of the larger of two values)."""
        return self.render_alu(u.arg, u.dtype, [s.dtype for s in u.src], operands)  # type: ignore[arg-type,misc]

    def render_alu(self, op: Ops, dtype: DType, src_dtypes: list[DType], operands: list[str]) -> str:
        src_dtype = operand_dtype(op, src_dtypes)
        if dtype.count > 1 and not self.vector_native(op, dtype, src_dtype):  # one lane at a time
            lanes = [[self.render_gep(x, i) if d.count > 1 else x for x, d in zip(operands, src_dtypes)]
                     for i in range(dtype.count)]  # fmt: skip
            scalars = [d.scalar() for d in src_dtypes]
            return self.render_vectorize(dtype, [self.render_alu(op, dtype.scalar(), scalars, xs) for xs in lanes])
        compute = self.compute_dtype(op, src_dtype)
        if compute != src_dtype:
            first = 1 if op is Ops.WHERE else 0  # the condition stays a bool
            operands = [x if i < first else self.render_cast(x, src_dtype, compute) for i, x in enumerate(operands)]
        expr = self.code_for_op[op](*operands, dtype=compute)
        if compute != src_dtype and dtype.scalar() != dtypes.bool:
            return self.render_cast(expr, compute, dtype)
        if dtype in self.narrow_dtypes and op not in GroupOp.Comparison and op is not Ops.WHERE:
            return f"(({self.render_dtype(dtype)}){expr})"
        return expr

    # --- memory -----------------------------------------------------------------------------------------------------
    def render_load(self, buf: str, idx: str, dtype: DType, gate: str | None = None, alt: str | None = None) -> str:
        expr = f"{buf}[{idx}]" if dtype.count == 1 else self.render_vector_load(buf, idx, dtype)
        return expr if gate is None else f"({gate}?{expr}:{alt})"

    def render_vector_load(self, buf: str, idx: str, dtype: DType) -> str:
        return f"(*(({self.buffer_prefix}{self.render_dtype(dtype)}*)({buf}+{idx})))"

    def render_store(self, buf: str, idx: str, val: str, dtype: DType, gate: str | None = None) -> str:
        stmt = f"{buf}[{idx}] = {val};" if dtype.count == 1 else self.render_vector_store(buf, idx, val, dtype)
        return stmt if gate is None else f"if ({gate}) {{ {stmt} }}"

    def render_vector_store(self, buf: str, idx: str, val: str, dtype: DType) -> str:
        return f"*(({self.buffer_prefix}{self.render_dtype(dtype)}*)({buf}+{idx})) = {val};"

    def render_held(self, name: str, dtype: DType) -> str | None:
        """A statement after a vector load that got a variable (it has several users: a micro-kernel's operand
        vector, used by a row of multiply-adds) keeping the value in a register, or None (the default). A compiler
        may otherwise fold the load into every user's memory operand: one load per use instead of one."""
        return None

    # --- the kernel -------------------------------------------------------------------------------------------------
    def render_param(self, name: str, dtype: DType, written: bool) -> str:
        if not dtype.is_ptr:
            return f"const {self.render_dtype(self.int_param_dtype)} {name}"
        const = "" if written else "const "
        return f"{self.buffer_prefix}{const}{self.render_dtype(dtype)}*{self.buffer_suffix} {name}"

    @staticmethod
    def dtypes_used(uops: list[UOp]) -> set[DType]:
        """Every value and buffer element dtype in the kernel (what a prelude may need typedefs or helpers for)."""
        return {u.dtype.base() if isinstance(u.dtype, PtrDType) else u.dtype for u in uops if u.dtype is not None}

    def render_prelude(self, uops: list[UOp]) -> list[str]:
        """Lines before the kernel: type definitions and helpers the body uses."""
        return []

    def render_kernel(self, name: str, params: list[KernelParam], body_lines: list[str], uops: list[UOp]) -> str:
        args = ", ".join(self.render_param(*p) for p in params)
        return (
            "\n".join([*self.render_prelude(uops), f"{self.kernel_prefix}void {name}({args}) {{", *body_lines, "}"])
            + "\n"
        )

    def render_wmma(self, tc: TensorCore, a: str, b: str, c: str) -> str:
        """The expression of a WMMA UOp (`lazy.codegen.uops`) with tensor core `tc` on fragments `a`, `b`, `c`: a
        dialect that declares tensor cores renders it, usually as a call of a helper its prelude defines."""
        raise NotImplementedError(f"{type(self).__name__} declares no tensor core {tc.name}")

    def render(self, name: str, uops: list[UOp]) -> str:
        return _KernelWriter(self, emulate_fp8(uops)).write(name)  # (no C dialect has fp8 arithmetic)


def inlinable(lang: CStyleLanguage, uops: list[UOp]) -> set[int]:
    """ids of the values written inline into their one user rather than given a variable: pure, used exactly once,
    by a user that writes it once, with no side effect between the two that could change what it reads."""
    users: dict[int, list[int]] = {}
    for i, u in enumerate(uops):
        for s in u.src:
            users.setdefault(id(s), []).append(i)
    effects_before = [0]  # effects_before[i]: side effects among uops[:i]
    for u in uops:
        effects_before.append(effects_before[-1] + (u.op in SIDE_EFFECTS))
    out: set[int] = set()
    for i, u in enumerate(uops):
        use = users.get(id(u), [])
        if u.op in INLINABLE and len(use) == 1 and effects_before[use[0]] == effects_before[i + 1]:
            if not lang.repeats_operands(uops[use[0]]):
                out.add(id(u))
    return out


class _KernelWriter:
    """The state of one `render` call: the text each value is referred to by, emitted lines and loop depth."""

    def __init__(self, lang: CStyleLanguage, uops: list[UOp]):
        self.lang, self.uops = lang, uops
        self.inline = inlinable(lang, uops)
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counts: dict[str, int] = {}
        self.buffers: list[tuple[int, KernelParam]] = []
        self.vars: list[KernelParam] = []

    def fresh(self, prefix: str) -> str:
        n = self.counts[prefix] = self.counts.get(prefix, -1) + 1
        return f"{prefix}{n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def ref(self, uop: UOp) -> str:
        return self.names[id(uop)]

    def value(self, uop: UOp, expr: str) -> None:
        """Give `uop` its text: inline, or a fresh variable holding `expr`."""
        if id(uop) in self.inline:
            self.names[id(uop)] = expr
            return
        name = self.names[id(uop)] = self.fresh(VALUE_PREFIX[uop.op])
        self.emit(f"{self.lang.render_dtype(uop.dtype)} {name} = {expr};")  # type: ignore[arg-type]

    def write(self, name: str) -> str:
        for uop in self.uops:
            handler = getattr(self, f"on_{uop.op.name.lower()}", None)
            if handler is None:
                raise NotImplementedError(f"{type(self.lang).__name__} cannot render {uop.op}")
            handler(uop)
        params = [p for _, p in sorted(self.buffers, key=lambda x: x[0])] + self.vars
        return self.lang.render_kernel(name, params, self.lines, self.uops)

    # one method per UOps member
    def on_define_global(self, u: UOp) -> None:
        idx, name, written = u.arg
        self.names[id(u)] = name
        self.buffers.append((idx, (name, u.dtype, written)))  # type: ignore[arg-type]

    def on_define_var(self, u: UOp) -> None:
        name, dtype, passed = u.arg[0], u.dtype or dtypes.int32, self.lang.int_param_dtype
        self.names[id(u)] = name if dtype == passed else self.lang.render_cast(name, passed, dtype)
        self.vars.append((name, dtype, False))

    def on_define_local(self, u: UOp) -> None:
        self.names[id(u)] = u.arg[0]
        self.emit(f"{self.lang.smem_prefix}{self.lang.render_dtype(u.dtype)} {u.arg[0]}[{u.arg[1]}];")  # type: ignore[arg-type]

    def on_define_acc(self, u: UOp) -> None:
        name = self.names[id(u)] = self.fresh("acc")
        init = self.lang.render_const(u.arg, u.dtype)  # type: ignore[arg-type]
        self.emit(f"{self.lang.render_dtype(u.dtype)} {name} = {init};")  # type: ignore[arg-type]

    def on_const(self, u: UOp) -> None:
        self.names[id(u)] = self.lang.render_const(u.arg, u.dtype)  # type: ignore[arg-type]

    def on_special(self, u: UOp) -> None:
        name = self.names[id(u)] = u.arg[0]
        workitem = self.lang.code_for_workitem[name[0]](int(name[4:]))
        self.emit(f"{self.lang.render_dtype(u.dtype)} {name} = {workitem}; /* {u.arg[1]} */")  # type: ignore[arg-type]

    def on_range(self, u: UOp) -> None:
        name = self.names[id(u)] = self.fresh("ridx")
        start, end = (self.ref(s) for s in u.src)
        self.emit(f"for ({self.lang.render_dtype(u.dtype)} {name} = {start}; {name} < {end}; {name}++) {{")  # type: ignore[arg-type]
        self.depth += 1

    def on_if(self, u: UOp) -> None:
        self.emit(f"if ({self.ref(u.src[0])}) {{")
        self.depth += 1

    def on_endrange(self, u: UOp) -> None:
        self.depth -= 1
        self.emit("}")

    on_endif = on_endrange

    def on_barrier(self, u: UOp) -> None:
        self.emit(self.lang.barrier)

    def on_load(self, u: UOp) -> None:
        buf, idx, *gated = (self.ref(s) for s in u.src)
        dtype = u.dtype
        assert dtype is not None
        self.value(u, self.lang.render_load(buf, idx, dtype, *gated))
        if dtype.count > 1 and id(u) not in self.inline and (held := self.lang.render_held(self.ref(u), dtype)):
            self.emit(held)

    def on_store(self, u: UOp) -> None:
        buf, idx, val, *gate = (self.ref(s) for s in u.src)
        self.emit(self.lang.render_store(buf, idx, val, u.src[2].dtype, *gate))  # type: ignore[arg-type]

    def on_alu(self, u: UOp) -> None:
        self.value(u, self.lang.render_alu_uop(u, [self.ref(s) for s in u.src]))

    def on_cast(self, u: UOp) -> None:
        self.value(u, self.lang.render_cast(self.ref(u.src[0]), u.src[0].dtype, u.dtype))  # type: ignore[arg-type]

    def on_bitcast(self, u: UOp) -> None:
        self.value(u, self.lang.render_bitcast(self.ref(u.src[0]), u.src[0].dtype, u.dtype))  # type: ignore[arg-type]

    def on_vectorize(self, u: UOp) -> None:
        self.value(u, self.lang.render_vectorize(u.dtype, [self.ref(s) for s in u.src]))  # type: ignore[arg-type]

    def on_gep(self, u: UOp) -> None:
        self.value(u, self.lang.render_gep(self.ref(u.src[0]), u.arg))

    def on_wmma(self, u: UOp) -> None:  # never inlined: every lane of the warp executes it where the UOps say
        name = self.names[id(u)] = self.fresh(VALUE_PREFIX[u.op])
        expr = self.lang.render_wmma(u.arg, *(self.ref(s) for s in u.src))
        self.emit(f"{self.lang.render_dtype(u.dtype)} {name} = {expr};")  # type: ignore[arg-type]

    def on_assign(self, u: UOp) -> None:
        acc = self.names[id(u)] = self.ref(u.src[0])
        self.emit(f"{acc} = {self.ref(u.src[1])};")

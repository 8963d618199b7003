"""Renderers of the CPU plugin: `ClangRenderer` (C for clang or gcc, a dialect of core's C-style renderer) and
`LLVMRenderer` (LLVM IR text, in `lazy_cpu.llvmir`), both for a kernel that loops over its whole range itself."""

from __future__ import annotations

from collections.abc import Callable

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.record import replace
from lazy.renderer.cstyle import BASE_CODE_FOR_OP, CStyleLanguage, KernelParam, checked_div
from lazy_cpu.hostcpu import host_capabilities
from lazy_cpu.llvmir import LLVMRenderer

__all__ = ["ClangRenderer", "LLVMRenderer", "HOST_CAPS"]

# kernels are compiled for this machine, so the vector widths are what its CPU has (16 float lanes with AVX-512)
HOST_CAPS = host_capabilities()


def _builtin(name: str) -> Callable[..., str]:
    return lambda *xs, dtype: f"__builtin_{name}{'' if dtype == dtypes.float64 else 'f'}({','.join(xs)})"


def _idiv(a: str, b: str, dtype: DType) -> str:
    return _builtin("trunc")(f"({a}/{b})", dtype=dtype) if dtypes.is_float(dtype) else checked_div("/")(a, b, dtype)


def _mod(a: str, b: str, dtype: DType) -> str:
    return _builtin("fmod")(a, b, dtype=dtype) if dtypes.is_float(dtype) else checked_div("%")(a, b, dtype)


def _mulacc(a: str, b: str, c: str, dtype: DType) -> str:
    # float32 (and half, computed in float32): one rounding of a*b+c, which is what the reference's exact-in-double
    # product followed by one rounding gives; float64 and ints keep the plain multiply-add. A float32 vector goes
    # through the prelude's lazy_fma_floatN, one vector FMA instruction
    if dtype.scalar() == dtypes.float32 and dtype.count > 1:
        return f"lazy_fma_{dtype.name}({a},{b},{c})"
    return _builtin("fma")(a, b, c, dtype=dtype) if dtype == dtypes.float32 else f"(({a}*{b})+{c})"


# x86 builtins of one vector FMA instruction, by float lanes: (the macro the compiler defines when the target has it,
# the call); gcc and clang name them alike and need no header for them
X86_VECTOR_FMA = {
    16: ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask(a, b, c, -1, 4)"),  # all lanes, current rounding
    8: ("__FMA__", "__builtin_ia32_vfmaddps256(a, b, c)"),
    4: ("__FMA__", "__builtin_ia32_vfmaddps(a, b, c)"),
}


# `LAZY_HOLDn(v)` (n: the vector's bytes): an empty asm statement that says it changes `v` in a vector register, so
# the compiler must keep the loaded value there. gcc otherwise folds a micro-kernel's operand load into each FMA that
# uses it (a memory operand per FMA): on a 4x2 AVX2 tile 8 vector loads a step instead of 2, more than the load ports
# take beside the 8 FMAs (matmul 1024 on one Zen 3 core: 51 -> 71 GFLOP/s). Only where the target has registers of
# that size ("v": any vector register of AVX-512, zmm16-31 too); elsewhere it does nothing
HOLD_MACRO = [
    "#if defined(__x86_64__) || defined(__i386__)",
    "#ifdef __AVX512F__",
    '#define LAZY_VREG "+v"',
    "#else",
    '#define LAZY_VREG "+x"',
    "#endif",
    '#define LAZY_HOLD16(v) __asm__("" : LAZY_VREG(v))',
    "#endif",
    "#ifdef __AVX__",
    '#define LAZY_HOLD32(v) __asm__("" : LAZY_VREG(v))',
    "#endif",
    "#ifdef __AVX512F__",
    '#define LAZY_HOLD64(v) __asm__("" : LAZY_VREG(v))',
    "#endif",
    "#ifdef __aarch64__",
    '#define LAZY_HOLD16(v) __asm__("" : "+w"(v))',
    "#endif",
    *(line for n in (16, 32, 64) for line in (f"#ifndef LAZY_HOLD{n}", f"#define LAZY_HOLD{n}(v) ((void)0)", "#endif")),
]


# before the first `vector_fma`: whether the compiler has clang's elementwise FMA (`__has_builtin` is gcc 10+, clang)
ELEMENTWISE_FMA_CHECK = [
    "#ifdef __has_builtin",
    "#if __has_builtin(__builtin_elementwise_fma)",
    "#define LAZY_ELEMENTWISE_FMA 1",
    "#endif",
    "#endif",
]


def vector_fma(name: str, lanes: int) -> list[str]:
    """The prelude's `lazy_fma_<name>`: a*b+c of float32 lanes with one rounding. The compiler's own vector FMA where
    it has one (clang's elementwise builtin; the x86 instruction when the target has it); else a loop of fmaf, which
    compilers also turn into one instruction, but only through the loop vectorizer, run once per call after inlining:
    that doubled gcc's time on the convolutions' kernels (hundreds of FMAs each)."""
    guard, x86 = X86_VECTOR_FMA.get(lanes, ("", ""))
    return [
        f"static inline {name} lazy_fma_{name}({name} a, {name} b, {name} c) {{",
        "#ifdef LAZY_ELEMENTWISE_FMA",
        "  return __builtin_elementwise_fma(a, b, c);",
        *([f"#elif defined({guard})", f"  return {x86};"] if guard else []),
        "#else",
        f"  {name} r; for (int i = 0; i < {lanes}; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]); return r;",
        "#endif",
        "}",
    ]


# x86's float max and min of whole vectors, for gcc (`pick`): MAXPS(x, y) is exactly `x > y ? x : y` lane by lane and
# MINPS(x, y) `x < y ? x : y` (y where either is NaN). clang turns the select form into them itself, and has other
# builtins; gcc makes each a compare and a masked move (the relu of an exp chain two compares, an OR of masks and a
# move): the exp chain's kernel on one core 447 -> 339 us with the picks (clang's 337-342)
X86_PICK = {
    16: ("__AVX512F__", "__builtin_ia32_{op}ps512_mask(x, y, y, -1, 4)"),  # all lanes, current rounding
    8: ("__AVX__", "__builtin_ia32_{op}ps256(x, y)"),
    4: ("__SSE__", "__builtin_ia32_{op}ps(x, y)"),
}


def vector_picks(name: str, lanes: int) -> list[str]:
    """The prelude's `lazy_pick_gt_<name>(x, y)` (`x > y ? x : y` lane by lane, y where either is NaN) and
    `lazy_pick_lt_<name>` (`x < y ? x : y`), and `lazy_max_<name>`: lazy's MAX, whose NaN from either side propagates,
    as a pick plus a select for a NaN `b` (which the compiler drops for a constant `b`, as a relu's)."""
    guard, x86 = X86_PICK.get(lanes, ("", ""))
    lines = []
    for op, cmp, insn in (("gt", "y < x", "max"), ("lt", "x < y", "min")):
        native = [f"#if defined({guard}) && !defined(__clang__)", f"  return {x86.format(op=insn)};", "#else"]
        lines += [
            f"static inline {name} lazy_pick_{op}_{name}({name} x, {name} y) {{",
            *(native if guard else []),
            f"  return lazy_where_{name}(-({cmp}), x, y);",
            *(["#endif"] if guard else []),
            "}",
        ]
    return [*lines, f"static inline {name} lazy_max_{name}({name} a, {name} b) {{ "
                    f"return lazy_where_{name}(-(b != b), b, lazy_pick_gt_{name}(b, a)); }}"]  # fmt: skip


def min_max_pick(u: UOp) -> str | None:
    """`"gt"` for `where(p < q, q, p)` (the larger of p and q: `q > p ? q : p`), "lt" for `where(p < q, p, q)` (the
    smaller), as `lazy_pick_<kind>` takes them: its operands are the where's two values in order. None otherwise."""
    if u.arg is not Ops.WHERE or (cmp := u.src[0]).op is not UOps.ALU or cmp.arg is not Ops.CMPLT:
        return None
    if u.src[1] is cmp.src[1] and u.src[2] is cmp.src[0]:
        return "gt"
    if u.src[1] is cmp.src[0] and u.src[2] is cmp.src[1]:
        return "lt"
    return None


VECTOR_SELECT = (dtypes.float32, dtypes.int32, dtypes.uint32)  # lane types with whole-vector compares and selects


# Scalar picks and max (as `vector_picks`, one lane): under gcc on x86 the packed MAXPS/MINPS (MAXPD/MINPD) on lane 0,
# which gcc does not find in the selects (a max pool over relu outputs, one core: 1648 -> 822 us; clang's 1171). Not
# the scalar MAXSS/MINSS builtins: gcc 12 at -O1 swapped their operands where one was a constant (exp2's clamp: exp2
# of NaN came out inf). Elsewhere selects of computed values, which compilers if-convert into a compare and a blend.
# The C-style `((a>=b)||(a!=a))?a:b` became branches on the data (the pooling kernel 2.2-3.7x slower at -O1 and -O2).
def scalar_picks() -> list[str]:
    """The prelude's `lazy_pick_gt_<t>`, `lazy_pick_lt_<t>` and `lazy_max_<t>` for float and double scalars."""
    lines = [
        "#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__) && !defined(__clang__)",
        "#define LAZY_SCALAR_PICKS 1",
        "typedef float lazy_v4sf __attribute__((vector_size(16)));",
        "typedef double lazy_v2df __attribute__((vector_size(16)));",
        "#endif",
    ]
    for ctype, vec, suffix, zeros in (("float", "lazy_v4sf", "ps", "0, 0, 0"), ("double", "lazy_v2df", "pd", "0")):
        for op, cmp, insn in (("gt", "y < x", "max"), ("lt", "x < y", "min")):
            lines += [
                f"static inline {ctype} lazy_pick_{op}_{ctype}({ctype} x, {ctype} y) {{",
                "#ifdef LAZY_SCALAR_PICKS",
                f"  return __builtin_ia32_{insn}{suffix}(({vec}){{x, {zeros}}}, ({vec}){{y, {zeros}}})[0];",
                "#else",
                f"  return {cmp} ? x : y;",
                "#endif",
                "}",
            ]
        lines += [
            f"static inline {ctype} lazy_max_{ctype}({ctype} a, {ctype} b) {{",
            "#ifdef LAZY_SCALAR_PICKS",
            f"  return b != b ? b : lazy_pick_gt_{ctype}(b, a);",
            "#else",
            f"  {ctype} m = a >= b ? a : b; return a != a ? a : m;",
            "#endif",
            "}",
        ]
    return lines


SCALAR_MAX = scalar_picks()
SCALAR_MAX_DTYPES = (dtypes.float32, dtypes.float64)

BF16_HELPERS = [
    "static inline float lazy_bf2f(unsigned short x) { unsigned int u = (unsigned int)x << 16; float f; "
    "__builtin_memcpy(&f, &u, 4); return f; }",
    "static inline unsigned short lazy_f2bf(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4); "
    "if ((u & 0x7fffffffu) <= 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); else u |= 0x400000u; "
    "return (unsigned short)(u >> 16); }",
]


# half: _Float16 where the compiler has it (gcc 12, clang 15+ define __FLT16_MAX__ then); older clang on x86-64 only
# has the storage type __fp16, whose arithmetic happens in float and is rounded back on assignment: the same results
# double -> __fp16 would call a libgcc helper with another ABI: go through float, rounded to odd so the second
# rounding (float -> half) gives the correctly rounded result
HALF_TYPE = (
    "#ifdef __FLT16_MAX__",
    "typedef _Float16 lazy_half;",
    "#else",
    "typedef __fp16 lazy_half;",
    "#endif",
    "static inline float lazy_odd_float(double x) { float f = (float)x; if ((double)f != x && x == x) {",
    "  unsigned int b; __builtin_memcpy(&b, &f, 4); if (((double)f > x) == (x > 0)) b -= 1;",
    "  b |= 1; __builtin_memcpy(&f, &b, 4); } return f; }",
)


# gcc before 12.4 / 13.2 vectorizes a loop summing floats loaded in reverse order (a flipped axis) into wrong code at
# -O2: `Tensor(A)[:n].flip(2).sum()` with a bound variable gave 302, not 276 (a scalar kernel with a runtime trip
# count; correct at -O1, with -fno-tree-loop-vectorize and with clang). A float sum cannot be reordered without
# -ffast-math, so the loop vectorizer has nothing to gain in such a kernel: it is turned off there for those gccs
SCALAR_REDUCE = (
    "#if defined(__GNUC__) && !defined(__clang__) && (__GNUC__ < 13 || (__GNUC__ == 13 && __GNUC_MINOR__ < 2))",
    '#define LAZY_SCALAR_REDUCE __attribute__((optimize("no-tree-loop-vectorize")))',
    "#else",
    "#define LAZY_SCALAR_REDUCE",
    "#endif",
)


def _scalar_float_reduce(uops: list[UOp]) -> bool:
    """Whether a kernel accumulates a float in a scalar (`SCALAR_REDUCE`)."""
    return any(u.op is UOps.DEFINE_ACC and u.dtype is not None and u.dtype.count == 1 and dtypes.is_float(u.dtype)
               for u in uops)  # fmt: skip


class ClangRenderer(CStyleLanguage):
    """C for the host compiler: GCC vector extensions (`vector_size`) for vectors, `_Float16` for half, bfloat16
    held as its 16 bits and computed in float, and checked integer division."""

    device = "CPU"
    # gcc with -fwrapv: see `Capabilities.wide_index`; gcc keeps a padded tile's gated rows cheap (`padded_tiles`);
    # gcc -O1 emits a reduce step's updates in the order given (`interleave_reduce`)
    caps = replace(HOST_CAPS, wide_index=True, padded_tiles=True, interleave_reduce=True, exact_division=True)
    buffer_suffix = " restrict"
    type_map = {**CStyleLanguage.type_map, dtypes.bool: "_Bool", dtypes.float16: "lazy_half",
                dtypes.bfloat16: "unsigned short"}  # fmt: skip
    vector_cast = "__builtin_convertvector({x}, {type})"
    bf16_as_bits = True  # unsigned short bits, arithmetic in float (BF16_HELPERS)
    half_math_in_float = True
    infinity = "__builtin_inff()"
    nan = '__builtin_nanf("")'
    code_for_op = {**BASE_CODE_FOR_OP, Ops.EXP2: _builtin("exp2"), Ops.LOG2: _builtin("log2"), Ops.SIN: _builtin("sin"),
                   Ops.SQRT: _builtin("sqrt"), Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MULACC: _mulacc}  # fmt: skip
    native_vector_ops = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.RECIP, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
                                   Ops.SHR, Ops.MULACC})  # fmt: skip
    native_vector_dtypes = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64,
                                      dtypes.uint64})  # fmt: skip

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if src == dtypes.float64 and dst == dtypes.float16:
            return f"((lazy_half)lazy_odd_float({x}))"
        small_int = dtypes.is_int(dst.scalar()) and dst.scalar().itemsize < 4
        if small_int and dtypes.is_float(src.scalar()) and src.scalar() != dtypes.bfloat16:  # (bf16: bits, via float)
            # through int, then wrapped, as the reference converts: a float out of a small int type's range is
            # undefined in C, and vectorized conversions saturate on some targets (AVX2's packs). Lane by lane for
            # a vector: the prelude declares only the vector types the kernel's uops use
            if dst.count > 1:
                lanes = [self.render_cast(self.render_gep(x, i), src.scalar(), dst.scalar()) for i in range(dst.count)]
                return self.render_vectorize(dst, lanes)
            return f"(({self.render_dtype(dst)})((int){x}))"
        return super().render_cast(x, src, dst)

    def render_alu_uop(self, u: UOp, operands: list[str]) -> str:
        dtype = u.dtype
        assert dtype is not None
        if (pick := self.pick_of(u)) is not None:  # (the compare is not written)
            name = dtype.name if dtype.count > 1 else self.type_map[dtype]
            return f"lazy_pick_{pick}_{name}({operands[1]},{operands[2]})"
        return super().render_alu_uop(u, operands)

    @staticmethod
    def pick_of(u: UOp) -> str | None:
        """`min_max_pick` of a WHERE of float32 vectors, or of float32 or float64 scalars (the types with picks)."""
        dtype = u.dtype
        if (
            dtype is None
            or u.op is not UOps.ALU
            or not (dtype in SCALAR_MAX_DTYPES or (dtype.count > 1 and dtype.scalar() == dtypes.float32))
        ):
            return None
        return min_max_pick(u) if all(s.dtype == dtype for s in u.src[1:]) else None

    def render_alu(self, op: Ops, dtype: DType, src_dtypes: list[DType], operands: list[str]) -> str:
        """Vector compares, selects and float max as whole-vector GCC operations (a compare gives 0/-1 per lane:
        negated, the 0/1 a bool lane holds); everything else as the C-style base renders it."""
        lanes_ok = VECTOR_SELECT
        if dtype.count > 1 and all(d.count == dtype.count for d in src_dtypes):
            if op in (Ops.CMPNE, Ops.CMPLT) and src_dtypes[0].scalar() in lanes_ok:
                return f"(-({operands[0]}{'!=' if op is Ops.CMPNE else '<'}{operands[1]}))"  # GCC gives 0/-1
            if op is Ops.WHERE and dtype.scalar() in lanes_ok:
                return f"lazy_where_{dtype.name}({operands[0]},{operands[1]},{operands[2]})"
            if op is Ops.MAX and dtype.scalar() == dtypes.float32:
                return f"lazy_max_{dtype.name}({operands[0]},{operands[1]})"
        if op is Ops.MAX and dtype in SCALAR_MAX_DTYPES:
            return f"lazy_max_{dtype.name}({operands[0]},{operands[1]})"
        return super().render_alu(op, dtype, src_dtypes, operands)

    def repeats_operands(self, uop: UOp) -> bool:
        vector = uop.dtype is not None and uop.dtype.count > 1
        if vector and uop.op is UOps.ALU and uop.arg in (Ops.CMPNE, Ops.CMPLT, Ops.WHERE, Ops.MAX):
            return False  # rendered as one call or one vector compare (render_alu)
        if uop.op is UOps.ALU and uop.arg is Ops.MAX and uop.dtype in SCALAR_MAX_DTYPES:
            return False  # a call of the prelude's helper
        return super().repeats_operands(uop)

    def render_vector_load(self, buf: str, idx: str, dtype: DType) -> str:
        return f"lazy_load_{self.render_dtype(dtype)}({buf}+{idx})"

    def render_vector_store(self, buf: str, idx: str, val: str, dtype: DType) -> str:
        return f"lazy_store_{self.render_dtype(dtype)}({buf}+{idx}, {val});"

    def render_kernel(self, name: str, params: list[KernelParam], body_lines: list[str], uops: list[UOp]) -> str:
        src = super().render_kernel(name, params, body_lines, uops)
        if _scalar_float_reduce(uops):  # (see SCALAR_REDUCE)
            src = src.replace(f"void {name}(", f"LAZY_SCALAR_REDUCE void {name}(", 1)
        return src

    def render_vectorize(self, dtype: DType, lanes: list[str]) -> str:
        # one value in every lane (a constant, a broadcast operand): the type's splat macro, so a 16-lane kernel's
        # source does not spell each of its constants 16 times (a cross entropy gradient's exp: 25.7k -> 15.6k chars)
        if len(lanes) > 1 and all(lane == lanes[0] for lane in lanes):
            return f"lazy_splat_{self.render_dtype(dtype)}({lanes[0]})"
        return super().render_vectorize(dtype, lanes)

    def render_held(self, name: str, dtype: DType) -> str | None:
        return f"LAZY_HOLD{dtype.itemsize}({name});" if dtype.itemsize in (16, 32, 64) else None

    def render_prelude(self, uops: list[UOp]) -> list[str]:
        """Type definitions and helpers, each block behind an include guard, so that kernels concatenate into one
        translation unit (`ClangCompiler.compile_batch`) with every helper defined once."""
        used = self.dtypes_used(uops)
        blocks: list[tuple[str, list[str]]] = []
        if any(d.scalar() == dtypes.bfloat16 for d in used):
            blocks.append(("BF16", BF16_HELPERS))
        if any(d.scalar() == dtypes.float16 for d in used):
            blocks.append(("HALF", list(HALF_TYPE)))
        if any(d.count > 1 and d.scalar() == dtypes.float32 for d in used):
            blocks.append(("FMA_CHECK", ELEMENTWISE_FMA_CHECK))
        if any(u.op is UOps.LOAD and u.dtype is not None and u.dtype.count > 1 for u in uops):
            blocks.append(("HOLD", HOLD_MACRO))
        if any(
            u.op is UOps.ALU and u.dtype in SCALAR_MAX_DTYPES and (u.arg is Ops.MAX or self.pick_of(u)) for u in uops
        ):
            blocks.append(("SCALAR_MAX", SCALAR_MAX))
        if _scalar_float_reduce(uops):
            blocks.append(("SCALAR_REDUCE", list(SCALAR_REDUCE)))
        for vec in sorted((d for d in used if d.count > 1), key=lambda d: d.name):
            blocks.append((f"VEC_{vec.name}", self.vector_helpers(vec)))
        return [line for guard, block in blocks for line in
                (f"#ifndef LAZY_PRELUDE_{guard}", f"#define LAZY_PRELUDE_{guard}", *block, "#endif")]  # fmt: skip

    def vector_helpers(self, vec: DType) -> list[str]:
        """The typedef of vector dtype `vec` and its helpers: a splat (one value in every lane), loads, stores,
        selects, max, FMA."""
        name, elem = vec.name, self.type_map[vec.scalar()]
        splat = f"#define lazy_splat_{name}(x) (({name}){{{','.join(['(x)'] * vec.count)}}})"
        if vec.scalar() == dtypes.bool:  # a compare's result: int lanes holding 0 or 1 (never loaded or stored)
            return [f"typedef int {name} __attribute__((vector_size({vec.count * 4})));", splat]
        # stores go through an under-aligned vector type, not memcpy: gcc 12 with AVX-512 (-march=native on Zen 4 and
        # Xeons) expands a memcpy of a constant 32- or 64-byte vector of 4- or 8-byte lanes as a broadcast of its first
        # lane, so `{c,c,c,c,c,c,0,0}` (a padded constant's row) was stored as eight c's
        unaligned = f"lazy_unaligned_{name}"
        lines = [f"typedef {elem} {name} __attribute__((vector_size({vec.itemsize})));", splat,
                 f"typedef {elem} {unaligned} __attribute__((vector_size({vec.itemsize}), "
                 f"aligned({vec.scalar().itemsize}), may_alias));",
                 f"static inline {name} lazy_load_{name}(const {elem}* p) {{ {name} v; "
                 f"__builtin_memcpy(&v, p, sizeof(v)); return v; }}",
                 f"static inline void lazy_store_{name}({elem}* p, {name} v) {{ *({unaligned}*)p = v; }}"]  # fmt: skip
        if vec.scalar() in VECTOR_SELECT:  # a select and a NaN-propagating max as whole-vector bit operations
            mask = f"int __attribute__((vector_size({vec.count * 4})))"
            lines.append(
                f"static inline {name} lazy_where_{name}({mask} c, {name} a, {name} b) {{ "
                f"typedef {mask} m; m k = -c; return ({name})((k & (m)a) | (~k & (m)b)); }}"
            )
            if vec.scalar() == dtypes.float32:
                lines += vector_picks(name, vec.count)
        if vec.scalar() == dtypes.float32:
            lines += vector_fma(name, vec.count)
        return lines

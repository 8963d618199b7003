"""`MetalRenderer`: Metal Shading Language (MSL 3.1), a dialect of core's C-style renderer, with the capabilities of one
Apple GPU (`MetalTarget`) and its 8x8 `simdgroup_matrix` tensor core. Imports no Metal binding: it renders text only,
on any platform (the golden tests and `LAZY_EMULATE=METAL` use it on Linux)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import ALL_DTYPES, DType, dtypes
from lazy.ops import Ops
from lazy.renderer import Capabilities, FragmentLayout, TensorCore
from lazy.renderer.cstyle import BASE_CODE_FOR_OP, GPU_DIVISION_OPS, CStyleLanguage, KernelParam

# The thread_elements() of an 8x8 simdgroup_matrix: lane l holds row ((l>>1)&3) + 4*((l>>4)&1) and columns
# 2*((l&1) + 2*((l>>3)&1)) + e, e = 0, 1 (the "Morton order" of Apple's simdgroup matrices). The same for A, B and C.
# Sources, which agree: metal-flash-attention's `morton_order` (GEMMHeaders.swift, with its lane map drawing), MLX's
# steel `BlockMMA` (sm/sn in mma.h) and tinygrad's PYTHON emulator (`c_map` for METAL).
SIMDGROUP_LAYOUT = FragmentLayout(rows=("l1", "l2", "l4"), cols=("e0", "l0", "l3"))
SIMDGROUP_TC_NAME = "simdgroup_8x8x8"
WARP = 32  # threads_per_simdgroup on every Apple GPU


def simdgroup_tensor_core(dtype_in: DType, dtype_out: DType) -> TensorCore:
    """`simdgroup_multiply_accumulate` on 8x8 matrices, D = A @ B + C, 2 elements per thread in each operand."""
    layout = SIMDGROUP_LAYOUT
    return TensorCore(SIMDGROUP_TC_NAME, (8, 8, 8), WARP, dtype_in, dtype_out, layout, layout, layout)


@dataclass(frozen=True)
class MetalTarget:
    """What the renderer needs to know about one Metal device (read from the MTLDevice by `lazy_metal.device`). The
    defaults are an Apple-silicon GPU (family Apple7, M1, and later) on macOS 14 or later: what the golden files, the
    offline code generation target and `LAZY_EMULATE=METAL` use."""

    local_max: tuple[int, int, int] = (1024, 1024, 1024)  # MTLDevice.maxThreadsPerThreadgroup
    local_size_max: int = 1024  # threads in one threadgroup (a pipeline may allow fewer: checked at launch)
    shared_max: int = 1 << 15  # MTLDevice.maxThreadgroupMemoryLength: 32 KiB
    bfloat16: bool = True  # MSL 3.1 (macOS 14) has `bfloat`
    simdgroup_matrix: bool = True  # family Apple7 and later: simdgroup_matrix 8x8 multiply-accumulate

    def capabilities(self) -> Capabilities:
        missing = [("float64", "Metal has no 64-bit floating point type (MSL has no double)")]
        if not self.bfloat16:
            missing.append(("bfloat16", "MSL's bfloat needs Metal 3.1 (macOS 14 or later)"))
        unsupported = {dtypes.float64} | (set() if self.bfloat16 else {dtypes.bfloat16})
        # threadgroups per grid dimension: a 32-bit count (MTLSize holds more; the thread ids are 32-bit)
        return Capabilities(has_threads=True, has_local=True, global_max=(2**32 - 1,) * 3, local_max=self.local_max,
                            local_size_max=self.local_size_max, shared_max=self.shared_max,
                            vector_widths=(4,), dtypes=frozenset(d for d in ALL_DTYPES if d not in unsupported),
                            unsupported=tuple(missing), native_math=frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN}),
                            tensor_cores=self.tensor_cores())  # fmt: skip

    def tensor_cores(self) -> tuple[TensorCore, ...]:
        # float32 and float16 (and bfloat16) inputs accumulate in float32. Narrow inputs are converted to float before
        # the multiply (`MetalRenderer.render_wmma`): their products are exact in float32, so that is what a mixed
        # multiply gives too. half -> half is left out: its rounding (per product or fused, and the order of the sum)
        # is not documented, so neither the emulator nor a test could promise the hardware's numbers.
        if not self.simdgroup_matrix:
            return ()
        inputs = (dtypes.float32, dtypes.float16) + ((dtypes.bfloat16,) if self.bfloat16 else ())
        return tuple(simdgroup_tensor_core(dtype_in, dtypes.float32) for dtype_in in inputs)


def precise(name: str) -> Callable[..., str]:
    """`metal::precise::name`: the accurate version (a few ulp at most), whatever the compiler's math mode."""
    return lambda x, dtype: f"precise::{name}({x})"


class MetalRenderer(CStyleLanguage):
    """MSL: `kernel` functions whose buffers are `device` pointers bound with `[[buffer(i)]]`, int parameters as
    `constant long&`, thread ids from `[[threadgroup_position_in_grid]]` / `[[thread_position_in_threadgroup]]`,
    `threadgroup` arrays and `threadgroup_barrier`, `half` and `bfloat` (computed in float), transcendentals from
    `metal::precise`, checked integer division, vectors loaded and stored lane by lane (safe at any alignment and in
    any address space), and WMMA as a call of a `simdgroup_matrix` helper."""

    device = "METAL"
    kernel_prefix = "kernel "
    buffer_prefix = "device "
    smem_prefix = "threadgroup "
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    code_for_workitem = {"g": lambda dim: f"gid.{'xyz'[dim]}", "l": lambda dim: f"lid.{'xyz'[dim]}"}
    type_map = {
        dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
        dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
        dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float",
    }  # fmt: skip
    vector_ctor = "{type}({args})"
    vector_cast = "{type}({x})"
    int_suffix = {dtypes.uint32: "u", dtypes.int64: "l", dtypes.uint64: "ul"}
    half_math_in_float = True  # exp2/log2/sin/sqrt/fma of half by metal::precise's float versions, rounded once
    code_for_op = {
        **BASE_CODE_FOR_OP, Ops.EXP2: precise("exp2"), Ops.LOG2: precise("log2"), Ops.SIN: precise("sin"),
        Ops.SQRT: precise("sqrt"), **GPU_DIVISION_OPS,
    }  # fmt: skip
    # MSL's arithmetic operators and math functions take vectors (its `?:` does not: MAX and WHERE go lane by lane)
    native_vector_ops = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.MULACC, Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN,
                                   Ops.SQRT})  # fmt: skip
    native_vector_dtypes = frozenset({dtypes.float32, dtypes.int32, dtypes.uint32})

    def __init__(self, target: MetalTarget | None = None):
        self.target = target or MetalTarget()
        self.caps = self.target.capabilities()

    # --- types, constants and conversions ---------------------------------------------------------------------------
    def vector_type(self, dtype: DType) -> str:
        return f"{self.type_map[dtype.scalar()]}{dtype.count}"  # float4, half2, bfloat4, uchar4 ...

    def render_float_const(self, value: float, dtype: DType) -> str:
        # a float literal (MSL has no double, and an unsuffixed literal of a narrower type reads as one), cast down
        text = super().render_float_const(value, dtypes.float32)
        return text if dtype == dtypes.float32 else f"(({self.render_dtype(dtype)}){text})"

    def compute_dtype(self, op: Ops, dtype: DType) -> DType:
        # bfloat arithmetic in float, rounded once back: float has 24 bits, at least 2*8 + 2, so + - * / and sqrt
        # rounded to float and then to bfloat give the correctly rounded result (the reference's); a select needs no
        # arithmetic
        if dtype == dtypes.bfloat16 and op is not Ops.WHERE:
            return dtypes.float32
        if dtype == dtypes.float16 and op is Ops.RECIP:  # half division's accuracy is not documented: in float
            return dtypes.float32
        return super().compute_dtype(op, dtype)

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        # MSL 3.1 converts bfloat to and from float (exactly, and with one rounding); anything else goes through float
        pair = (src.scalar(), dst.scalar())
        if src != dst and dtypes.bfloat16 in pair and dtypes.float32 not in pair:
            via = dtypes.float32.vec(src.count)
            return self.render_cast(self.render_cast(x, src, via), via, dst)
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_type<{self.render_dtype(dst)}>({x})"

    # --- memory: vectors lane by lane --------------------------------------------------------------------------------
    # A vector pointer cast needs the pointer's address space (device or threadgroup) and 16-byte alignment, which an
    # index into a view does not promise. Lanes read and written one by one are right everywhere; the compiler merges
    # neighbouring accesses where it can prove the alignment.
    def repeats_operands(self, uop: UOp) -> bool:
        if uop.op is UOps.LOAD and uop.dtype is not None and uop.dtype.count > 1:
            return True  # the index is written once per lane
        if uop.op is UOps.STORE and uop.src[2].dtype is not None and uop.src[2].dtype.count > 1:
            return True  # the index and the value, once per lane
        return super().repeats_operands(uop)

    def render_vector_load(self, buf: str, idx: str, dtype: DType) -> str:
        lanes = ", ".join(f"{buf}[{_plus(idx, i)}]" for i in range(dtype.count))
        return f"{self.render_dtype(dtype)}({lanes})"

    def render_vector_store(self, buf: str, idx: str, val: str, dtype: DType) -> str:
        return " ".join(f"{buf}[{_plus(idx, i)}] = {self.render_gep(val, i)};" for i in range(dtype.count))

    # --- tensor cores -----------------------------------------------------------------------------------------------
    def wmma_helper_name(self, tc: TensorCore) -> str:
        if tc not in self.caps.tensor_cores:
            declared = ", ".join(f"{t.name} {t.dtype_in.name}->{t.dtype_out.name}" for t in self.caps.tensor_cores)
            raise ValueError(f"MetalRenderer: WMMA with {tc.name} {tc.dtype_in.name}->{tc.dtype_out.name}, which this "
                             f"target does not declare (it has: {declared or 'none'})")  # fmt: skip
        return f"lazy_wmma_{self.type_map[tc.dtype_in]}_{self.type_map[tc.dtype_out]}"

    def render_wmma(self, tc: TensorCore, a: str, b: str, c: str) -> str:
        """A WMMA: this lane's 2 elements of D from its 2 elements of A, B and C (the helper `wmma_helper`)."""
        return f"{self.wmma_helper_name(tc)}({a}, {b}, {c})"

    def wmma_helper(self, tc: TensorCore) -> list[str]:
        """The helper function of one tensor core: the lane's fragments put into 8x8 simdgroup matrices of the
        accumulator's type (inputs converted exactly), one simdgroup_multiply_accumulate, the lane's elements of D."""
        acc = self.type_map[tc.dtype_out]
        frag_in, frag_out = self.render_dtype(tc.dtype_in.vec(2)), f"{acc}2"
        mat = f"simdgroup_{acc}8x8"
        convert = {"a": tc.dtype_in != tc.dtype_out, "b": tc.dtype_in != tc.dtype_out, "c": False}
        fill = [f"  m{x}.thread_elements()[{e}] = {f'{acc}({x}[{e}])' if convert[x] else f'{x}[{e}]'};"
                for x in "abc" for e in range(2)]  # fmt: skip
        return [
            f"{frag_out} {self.wmma_helper_name(tc)}({frag_in} a, {frag_in} b, {frag_out} c) {{",
            f"  {mat} ma, mb, mc;",
            *fill,
            "  simdgroup_multiply_accumulate(mc, ma, mb, mc);",
            f"  return {frag_out}(mc.thread_elements()[0], mc.thread_elements()[1]);",
            "}",
        ]

    # --- the kernel -------------------------------------------------------------------------------------------------
    def render_prelude(self, uops: list[UOp]) -> list[str]:
        lines = ["#include <metal_stdlib>", "using namespace metal;"]
        tensor_cores = list(dict.fromkeys(u.arg for u in uops if u.op is UOps.WMMA))
        if tensor_cores:
            lines.insert(1, "#include <metal_simdgroup_matrix>")
        for tc in tensor_cores:
            lines += self.wmma_helper(tc)
        return lines

    def render_kernel(self, name: str, params: list[KernelParam], body_lines: list[str], uops: list[UOp]) -> str:
        # buffers and int parameters bound by position: buffer i is argument i of the launch (`MetalProgram.encode`)
        args = [self.render_bound_param(i, *param) for i, param in enumerate(params)]
        args += ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
        head = f"{self.kernel_prefix}void {name}({', '.join(args)}) {{"
        return "\n".join([*self.render_prelude(uops), head, *body_lines, "}"]) + "\n"

    def render_bound_param(self, index: int, name: str, dtype: DType, written: bool) -> str:
        if not dtype.is_ptr:  # int parameters are 64-bit whatever the index dtype (`int_param_dtype`)
            return f"constant {self.render_dtype(self.int_param_dtype)}& {name} [[buffer({index})]]"
        return f"{self.render_param(name, dtype, written)} [[buffer({index})]]"


def _plus(idx: str, offset: int) -> str:
    """The index expression `idx + offset` (idx is a variable or a literal: `repeats_operands` names the others)."""
    if offset == 0:
        return idx
    return str(int(idx) + offset) if idx.isdigit() else f"{idx}+{offset}"

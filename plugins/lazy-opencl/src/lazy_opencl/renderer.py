"""`OpenCLRenderer`: OpenCL C, a dialect of core's C-style renderer, with capabilities read from the device (work-group
limits, local memory, fp16/fp64) by `DeviceLimits`. Imports no OpenCL binding: it renders text only."""

from __future__ import annotations

from dataclasses import dataclass

from lazy.codegen.uops import UOp
from lazy.dtype import ALL_DTYPES, DType, dtypes
from lazy.ops import Ops
from lazy.renderer import Capabilities
from lazy.renderer.cstyle import BASE_CODE_FOR_OP, GPU_DIVISION_OPS, CStyleLanguage


@dataclass(frozen=True)
class DeviceLimits:
    """What the renderer needs to know about one OpenCL device (read with clGetDeviceInfo by `lazy_opencl.device`)."""

    local_max: tuple[int, int, int] = (1024, 1024, 64)
    local_size_max: int = 1024
    shared_max: int = 1 << 15
    fp16: bool = False
    fp64: bool = False
    float_vector_width: int = 4  # CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT: a CPU's SIMD lanes (PoCL), 1 on most GPUs
    cpu: bool = False  # CL_DEVICE_TYPE_CPU

    def vector_widths(self) -> tuple[int, ...]:
        # OpenCL C has vectors of 2, 3, 4, 8 and 16 lanes; 4 everywhere (float4 loads), wider up to the device's SIMD
        return tuple(w for w in (4, 8, 16) if w == 4 or w <= self.float_vector_width)

    def vector_registers(self) -> int:
        # OpenCL does not tell; a CPU whose preferred float vector is 16 lanes has AVX-512's 32 registers, else 16
        return 32 if self.float_vector_width >= 16 else 16

    def capabilities(self) -> Capabilities:
        unsupported = {dtypes.float16: not self.fp16, dtypes.float64: not self.fp64}
        missing = []
        if not self.fp16:
            missing.append(("float16", "the OpenCL device does not report cl_khr_fp16"))
        if not self.fp64:
            missing.append(("float64", "the OpenCL device does not report cl_khr_fp64"))
        return Capabilities(has_threads=True, has_local=True, local_max=self.local_max,
                            local_size_max=self.local_size_max, shared_max=self.shared_max,
                            vector_widths=self.vector_widths(), vector_registers=self.vector_registers(),
                            dtypes=frozenset(d for d in ALL_DTYPES if not unsupported.get(d, False)),
                            core_split=False, unsupported=tuple(missing),
                            native_math=self.native_math(), serial_work_groups=self.cpu)  # fmt: skip

    def native_math(self) -> frozenset[Ops]:
        # a GPU's exp2/log2/sin are fast and exact enough; on a CPU (PoCL) they are library calls, one element at a
        # time (exp2 ran 10x slower than a copy), while core's polynomial code vectorizes across work-items
        return frozenset() if self.cpu else frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})


BF16_HELPERS = (
    "inline float lazy_bf2f(ushort x) { return as_float(((uint)x) << 16); }",
    "inline ushort lazy_f2bf(float f) { uint u = as_uint(f); "
    "if ((u & 0x7fffffffu) <= 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); else u |= 0x400000u; "
    "return (ushort)(u >> 16); }",
)


class OpenCLRenderer(CStyleLanguage):
    """OpenCL C: `__kernel`/`__global`/`__local`, work-item ids from `get_group_id`/`get_local_id`, vload4/vstore4 for
    vectors (safe at any element alignment), bool buffers held as uchar, bfloat16 held as ushort and computed in float,
    checked integer division, and no implicit fma (`FP_CONTRACT OFF`)."""

    device = "CL"
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    buffer_suffix = " restrict"
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    code_for_workitem = {"g": lambda dim: f"get_group_id({dim})", "l": lambda dim: f"get_local_id({dim})"}
    type_map = {
        dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
        dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
        dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.bfloat16: "ushort", dtypes.float32: "float",
        dtypes.float64: "double",
    }  # fmt: skip
    vector_ctor = "(({type})({args}))"
    vector_cast = "convert_{type}({x})"
    int_suffix = {dtypes.uint32: "u", dtypes.int64: "l", dtypes.uint64: "ul"}
    bf16_as_bits = True  # ushort bits, arithmetic in float (BF16_HELPERS)
    half_math_in_float = True
    code_for_op = {**BASE_CODE_FOR_OP, **GPU_DIVISION_OPS}
    # OpenCL C's operators and math builtins take vectors: a float16 tile's fma is one instruction on AVX-512 (PoCL).
    # MAX too: on vectors a comparison gives -1 (all bits) per true lane and `c ? a : b` selects lane by lane
    native_vector_ops = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.MULACC, Ops.RECIP, Ops.MAX, Ops.EXP2, Ops.LOG2,
                                   Ops.SIN, Ops.SQRT})  # fmt: skip
    native_vector_dtypes = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64,
                                      dtypes.uint64})  # fmt: skip

    def __init__(self, limits: DeviceLimits | None = None):
        self.limits = limits or DeviceLimits()
        self.caps = self.limits.capabilities()
        if self.limits.cpu:  # see `inline_helpers`
            self.code_for_op = {**self.code_for_op, Ops.MULACC: _inline_fma_mulacc}

    # --- types --------------------------------------------------------------------------------------------------
    def vector_type(self, dtype: DType) -> str:
        scalar = dtype.scalar()
        return f"{'uchar' if scalar == dtypes.bool else self.type_map[scalar]}{dtype.count}"

    def render_param(self, name: str, dtype: DType, written: bool) -> str:
        if dtype.is_ptr and dtype.base() == dtypes.bool:  # type: ignore[attr-defined]
            return f"__global {'' if written else 'const '}uchar* restrict {name}"  # bool is no kernel argument type
        return super().render_param(name, dtype, written)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"as_{self.render_dtype(dst)}({x})"

    def render_vectorize(self, dtype: DType, lanes: list[str]) -> str:
        if len(set(lanes)) == 1 and dtype.scalar() != dtypes.bool:  # a broadcast: OpenCL widens a scalar cast
            return f"(({self.render_dtype(dtype)})({lanes[0]}))"
        return super().render_vectorize(dtype, lanes)

    def render_gep(self, x: str, lane: int) -> str:
        return f"({x}).s{lane:x}"

    def render_vector_load(self, buf: str, idx: str, dtype: DType) -> str:
        if self.limits.cpu:
            return f"lazy_vload{dtype.count}({buf}+{idx})"
        return f"vload{dtype.count}(0, {buf}+{idx})"

    def render_vector_store(self, buf: str, idx: str, val: str, dtype: DType) -> str:
        if self.limits.cpu:
            return f"lazy_vstore{dtype.count}({buf}+{idx}, {val});"
        return f"vstore{dtype.count}({val}, 0, {buf}+{idx});"

    # --- the kernel -------------------------------------------------------------------------------------------------
    def render_prelude(self, uops: list[UOp]) -> list[str]:
        used = self.dtypes_used(uops)
        scalars = {d.scalar() for d in used}
        lines = ["#pragma OPENCL FP_CONTRACT OFF"]  # a*b+c stays two roundings unless the kernel asked for MULACC
        if dtypes.float64 in scalars:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if dtypes.float16 in scalars:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        if dtypes.bfloat16 in scalars:
            lines += BF16_HELPERS
        if self.limits.cpu:
            lines += self.inline_helpers(used)
        return lines

    def inline_helpers(self, used: set[DType]) -> list[str]:
        """On a CPU device, helpers in the kernel's own source for what would be calls of the OpenCL C library there.
        PoCL (3.0, LLVM 14) called its `fma`, `vload8` and `vstore8` out of line, so every multiply-add of a matmul's
        register tile was a call around which the accumulators were spilled: 1024x1024 matmul ran at ~11 GFLOP/s, a
        tenth of the CPU device's kernel. A helper of the kernel's source is inlined: `lazy_fma` contracts `a * b + c`
        in its own body only (`FP_CONTRACT ON` there: one fused multiply-add, bit for bit `fma`'s result; contraction
        stays off elsewhere), and vector loads and stores go through a pointer to a vector type aligned like its
        element (safe at any element offset, as vload is), overloaded for the global, local and private spaces."""
        lines = []
        for t in ("float", "float2", "float3", "float4", "float8", "float16"):  # (half math computes in these too)
            lines.append(f"static inline {t} __attribute__((overloadable)) lazy_fma({t} a, {t} b, {t} c) {{\n"
                         "#pragma OPENCL FP_CONTRACT ON\n  return a * b + c;\n}")  # fmt: skip
        for dtype in sorted((d for d in used if d.count > 1), key=lambda d: (d.count, d.name)):
            vec, n = self.vector_type(dtype), dtype.count
            scalar, unaligned = vec[: -len(str(n))], f"lazy_{vec}_u"
            attrs = f"ext_vector_type({n}), aligned(sizeof({scalar}))"
            lines.append(f"typedef {scalar} {unaligned} __attribute__(({attrs}));")
            for space in ("__global", "__local", "__private"):
                lines += [
                    f"static inline {vec} __attribute__((overloadable)) lazy_vload{n}(const {space} {scalar}* p) "
                    f"{{ return *(const {space} {unaligned}*)p; }}",
                    f"static inline void __attribute__((overloadable)) lazy_vstore{n}({space} {scalar}* p, {vec} v) "
                    f"{{ *({space} {unaligned}*)p = v; }}",
                ]
        return lines


def _inline_fma_mulacc(a: str, b: str, c: str, dtype: DType) -> str:
    # as core's GPU MULACC (one rounding in float32, two elsewhere), through the kernel's own helper (`inline_helpers`)
    return f"lazy_fma({a},{b},{c})" if dtype.scalar() == dtypes.float32 else f"(({a}*{b})+{c})"

"""`CUDARenderer`: CUDA C++ for NVRTC, a dialect of core's C-style renderer, and the tensor cores it declares (PTX
`mma.sync` m16n8k16, float16 and bfloat16 in, float32 accumulate). Imports no CUDA binding: it renders text only.

Nothing is included: NVRTC from pip has no CUDA headers, so the prelude defines what a kernel uses. `half` is a
2-byte struct converted with PTX `cvt` (round to nearest even), computed in float and rounded after every op (the
C-style base casts narrow results back); bfloat16 is held as its 16 bits and computed in float (core's
`bf16_as_bits`, rounded as the reference does). Vector types are structs used for memory only: a wide load or store
is taken only where the address is aligned for it, else element by element (a misaligned wide access faults)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lazy.codegen.uops import UOp, UOps
from lazy.dtype import ALL_DTYPES, DType, dtypes
from lazy.helpers import prod
from lazy.ops import Ops, truncate
from lazy.renderer import Capabilities, FragmentLayout, TensorCore
from lazy.renderer.cstyle import BASE_CODE_FOR_OP, GPU_DIVISION_OPS, CStyleLanguage, KernelParam

# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (lane l, groupID = l>>2, tig = l%4; e the
# element's index in the thread's fragment, which is PTX's a_i / b_i / c_i numbering):
#   A 16x16: row = groupID + 8*((e>>1)&1), col = 2*tig + (e&1) + 8*(e>>2)
#   B 16x8:  row = 2*tig + (e&1) + 8*(e>>1), col = groupID
#   C/D 16x8: row = groupID + 8*(e>>1), col = 2*tig + (e&1)
MMA_A = FragmentLayout(rows=("l2", "l3", "l4", "e1"), cols=("e0", "l0", "l1", "e2"))
MMA_B = FragmentLayout(rows=("e0", "l0", "l1", "e1"), cols=("l2", "l3", "l4"))
MMA_C = FragmentLayout(rows=("l2", "l3", "l4", "e1"), cols=("e0", "l0", "l1"))
MMA_NAME = "mma.m16n8k16"
PTX_TYPE = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32"}


def mma_tensor_core(dtype_in: DType) -> TensorCore:
    return TensorCore(MMA_NAME, (16, 8, 16), 32, dtype_in, dtypes.float32, MMA_A, MMA_B, MMA_C)


TENSOR_CORES = (mma_tensor_core(dtypes.float16), mma_tensor_core(dtypes.bfloat16))


@dataclass(frozen=True)
class Arch:
    """A GPU's compute capability (`sm_XY`): what the renderer may use on it."""

    major: int
    minor: int

    @classmethod
    def parse(cls, name: str) -> Arch:
        """`"sm_80"` -> Arch(8, 0); `"sm_120"` -> Arch(12, 0)."""
        digits = name.removeprefix("sm_")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"not a CUDA architecture name: {name!r} (expected sm_XY, e.g. sm_80)")
        return cls(int(digits[:-1]), int(digits[-1]))

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def capabilities(self) -> Capabilities:
        # mma.m16n8k16 with f16/bf16 inputs needs sm_80 (sm_75 has only m16n8k8)
        tensor_cores = TENSOR_CORES if (self.major, self.minor) >= (8, 0) else ()
        return Capabilities(has_threads=True, has_local=True, global_max=(2**31 - 1, 65535, 65535),
                            local_max=(1024, 1024, 64), local_size_max=1024,
                            shared_max=48 * 1024,  # static __shared__ per block without the dynamic opt-in
                            vector_widths=(2, 4),  # float2/float4: 64- and 128-bit loads
                            vector_registers=32,  # float4 tiles in 128 of a thread's 255 registers
                            dtypes=frozenset(ALL_DTYPES), native_math=frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN}),
                            exact_division=True,  # (NVRTC with --prec-div=true: `compiler.OPTIONS`)
                            tensor_cores=tensor_cores)  # fmt: skip


HALF_PRELUDE = (
    # half as its bits with exact PTX conversions: NVRTC from pip has no cuda_fp16.h
    "__device__ __forceinline__ unsigned short lazy_f2h(float x) { unsigned short h; "
    'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }',
    "__device__ __forceinline__ unsigned short lazy_d2h(double x) { unsigned short h; "
    'asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(x)); return h; }',
    "__device__ __forceinline__ float lazy_h2f(unsigned short h) { float x; "
    'asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h)); return x; }',
    "struct __align__(2) half {",
    "  unsigned short bits;",
    "  half() = default;",
    "  __device__ half(double x) : bits(lazy_d2h(x)) {}  // directly: through float would round twice",
    "  template <class T> __device__ half(T x) : bits(lazy_f2h((float)x)) {}",
    "  __device__ operator float() const { return lazy_h2f(bits); }",
    "};",
    "__device__ __forceinline__ half lazy_hbits(unsigned short b) { half h; h.bits = b; return h; }",
)
BF16_PRELUDE = (
    "__device__ __forceinline__ float lazy_bf2f(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }",
    # round to nearest even on the bits, a NaN kept a NaN (quiet bit set: a payload only in the low half would
    # truncate to inf): exactly the reference's (lazy.ops.truncate)
    "__device__ __forceinline__ unsigned short lazy_f2bf(float f) { unsigned u = __float_as_uint(f); "
    "if ((u & 0x7fffffffu) <= 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); else u |= 0x400000u; "
    "return (unsigned short)(u >> 16); }",
)
BITCAST_PRELUDE = (
    "template <class D, class S> __device__ __forceinline__ D lazy_bitcast(S x) { "
    'static_assert(sizeof(D) == sizeof(S), "bitcast between sizes"); union { S s; D d; } u = {x}; return u.d; }',
)
VECTOR_PRELUDE = (
    # one wide access where the address is aligned for it; element by element elsewhere (a view at an odd offset)
    "template <class V, class T> __device__ __forceinline__ V lazy_vload(const T* p) {",
    "  if (reinterpret_cast<unsigned long long>(p) % alignof(V) == 0) return *reinterpret_cast<const V*>(p);",
    "  V v;",
    "  for (int i = 0; i < int(sizeof(V) / sizeof(T)); i++) v.v[i] = p[i];",
    "  return v;",
    "}",
    "template <class T, class V> __device__ __forceinline__ void lazy_vstore(T* p, const V& v) {",
    "  if (reinterpret_cast<unsigned long long>(p) % alignof(V) == 0) { *reinterpret_cast<V*>(p) = v; return; }",
    "  for (int i = 0; i < int(sizeof(V) / sizeof(T)); i++) p[i] = v.v[i];",
    "}",
)


class CUDARenderer(CStyleLanguage):
    """CUDA C++: `extern "C" __global__` kernels with `__launch_bounds__` of their work-group size, `blockIdx` /
    `threadIdx` for `gidxN` / `lidxN` (global_size counts blocks), `__shared__` arrays and `__syncthreads()`, checked
    integer division, `fma` only for MULACC, tensor cores through inline PTX `mma.sync`. Buffers are not
    `__restrict__`: an in-place assign passes one buffer as output and input, whose reads must not go through the
    read-only cache."""

    device = "CUDA"
    kernel_prefix = 'extern "C" __global__ '
    smem_prefix = "__shared__ __align__(16) "
    barrier = "__syncthreads();"
    code_for_workitem = {"g": lambda dim: f"blockIdx.{'xyz'[dim]}", "l": lambda dim: f"threadIdx.{'xyz'[dim]}"}
    type_map = {**CStyleLanguage.type_map, dtypes.float16: "half", dtypes.bfloat16: "unsigned short"}
    vector_ctor = "{type}{{{args}}}"  # C++ aggregate initialization of the vector struct
    infinity = "__int_as_float(0x7f800000)"  # no math.h: the bits
    nan = "__int_as_float(0x7fffffff)"
    bf16_as_bits = True
    half_math_in_float = True
    code_for_op = {**BASE_CODE_FOR_OP, **GPU_DIVISION_OPS}
    native_vector_ops: frozenset[Ops] = frozenset()  # the vector structs have no arithmetic: lane by lane

    def __init__(self, arch: str = "sm_80"):
        self.arch = Arch.parse(arch)
        self.caps = self.arch.capabilities()

    # --- types --------------------------------------------------------------------------------------------------
    def vector_type(self, dtype: DType) -> str:
        return f"lazy_{dtype.scalar().name}x{dtype.count}"

    def render_float_const(self, value: float, dtype: DType) -> str:
        if dtype == dtypes.float16:  # the bits: exact, and no conversion instruction per use
            bits = struct.unpack("<H", struct.pack("<e", truncate(value, dtypes.float16)))[0]  # too large: inf
            return f"lazy_hbits(0x{bits:04x})"
        return super().render_float_const(value, dtype)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"lazy_bitcast<{self.render_dtype(dst)}>({x})"

    def render_gep(self, x: str, lane: int) -> str:
        return f"({x}).v[{lane}]"

    def render_vector_load(self, buf: str, idx: str, dtype: DType) -> str:
        return f"lazy_vload<{self.render_dtype(dtype)}>({buf}+{idx})"

    def render_vector_store(self, buf: str, idx: str, val: str, dtype: DType) -> str:
        return f"lazy_vstore({buf}+{idx}, {val});"

    # --- the kernel -------------------------------------------------------------------------------------------------
    def render_wmma(self, tc: TensorCore, a: str, b: str, c: str) -> str:
        return f"{self.mma_helper_name(tc)}({a}, {b}, {c})"  # every lane of the warp calls it (the prelude's helper)

    def render_kernel(self, name: str, params: list[KernelParam], body_lines: list[str], uops: list[UOp]) -> str:
        # the block size the kernel is launched with, so ptxas may use as many registers as that allows
        local = {u.arg[0]: u.arg[1] for u in uops if u.op is UOps.SPECIAL and u.arg[0].startswith("lidx")}
        threads = prod(local.values())
        args = ", ".join(self.render_param(*p) for p in params)
        head = f"{self.kernel_prefix}void __launch_bounds__({threads}) {name}({args}) {{"
        return "\n".join([*self.render_prelude(uops), head, *body_lines, "}"]) + "\n"

    def render_prelude(self, uops: list[UOp]) -> list[str]:
        used = self.dtypes_used(uops)
        scalars = {d.scalar() for d in used}
        lines: list[str] = []
        if dtypes.float16 in scalars:
            lines += HALF_PRELUDE
        if dtypes.bfloat16 in scalars:
            lines += BF16_PRELUDE
        if any(u.op is UOps.BITCAST for u in uops):
            lines += BITCAST_PRELUDE
        vectors = sorted((d for d in used if d.count > 1), key=lambda d: (d.scalar().name, d.count))
        for vec in vectors:
            size = vec.count * vec.scalar().itemsize
            align = min(16, size & -size)  # the largest power of two dividing the size: no padding, wide loads
            lines.append(f"struct __align__({align}) {self.vector_type(vec)} {{ {self.type_map[vec.scalar()]} "
                         f"v[{vec.count}]; }};")  # fmt: skip
        if any(u.op in (UOps.LOAD, UOps.STORE) and _accessed(u).count > 1 for u in uops):
            lines += VECTOR_PRELUDE
        for tc in dict.fromkeys(u.arg for u in uops if u.op is UOps.WMMA):
            lines += self.render_mma_helper(tc)
        return lines

    # --- tensor cores -----------------------------------------------------------------------------------------------
    def mma_helper_name(self, tc: TensorCore) -> str:
        if tc not in TENSOR_CORES or tc not in self.caps.tensor_cores:
            known = ", ".join(f"{t.name} {t.dtype_in.name}->{t.dtype_out.name}" for t in self.caps.tensor_cores)
            raise NotImplementedError(
                f"CUDARenderer ({self.arch.name}) has no tensor core {tc.name} "
                f"{tc.dtype_in.name}->{tc.dtype_out.name} (it has: {known or 'none'})"
            )
        return f"lazy_mma_m16n8k16_{PTX_TYPE[tc.dtype_in]}_{PTX_TYPE[tc.dtype_out]}"

    def render_mma_helper(self, tc: TensorCore) -> list[str]:
        """D = A @ B + C for one warp: PTX takes A as 4 and B as 2 .b32 registers of two 16-bit elements each, the
        lower-numbered element in the low half (`{a0,a1}`, `{a2,a3}`, ...), and C and D as 4 f32 registers."""
        name, ptx_in = self.mma_helper_name(tc), PTX_TYPE[tc.dtype_in]
        a_t, b_t, c_t = (self.vector_type(d) for d in (tc.dtype_in.vec(8), tc.dtype_in.vec(4), dtypes.float32.vec(4)))
        low, high = ("x.bits", "y.bits") if tc.dtype_in == dtypes.float16 else ("x", "y")
        elem = self.type_map[tc.dtype_in]
        return [
            f"__device__ __forceinline__ unsigned lazy_pack_{ptx_in}({elem} x, {elem} y) {{ "
            f"return (unsigned){low} | ((unsigned){high} << 16); }}",
            f"__device__ __forceinline__ {c_t} {name}({a_t} a, {b_t} b, {c_t} c) {{",
            f"  {c_t} d;",
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx_in}.{ptx_in}.f32 {{%0,%1,%2,%3}}, '
            '{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"',
            '      : "=f"(d.v[0]), "=f"(d.v[1]), "=f"(d.v[2]), "=f"(d.v[3])',
            f'      : "r"(lazy_pack_{ptx_in}(a.v[0], a.v[1])), "r"(lazy_pack_{ptx_in}(a.v[2], a.v[3])), '
            f'"r"(lazy_pack_{ptx_in}(a.v[4], a.v[5])), "r"(lazy_pack_{ptx_in}(a.v[6], a.v[7])),',
            f'        "r"(lazy_pack_{ptx_in}(b.v[0], b.v[1])), "r"(lazy_pack_{ptx_in}(b.v[2], b.v[3])),',
            '        "f"(c.v[0]), "f"(c.v[1]), "f"(c.v[2]), "f"(c.v[3]));',
            "  return d;",
            "}",
        ]


def _accessed(uop: UOp) -> DType:
    """The dtype a LOAD reads or a STORE writes."""
    dtype = uop.dtype if uop.op is UOps.LOAD else uop.src[2].dtype
    assert dtype is not None
    return dtype

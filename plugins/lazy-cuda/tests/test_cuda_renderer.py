"""CUDA C++ from hand-built UOp kernels, compiled by NVRTC to cubins for sm_80 and sm_90 (no GPU needed): the
dialect's text, each feature's kernel, tensor cores, compile errors and warnings, and core's compile cache."""

from __future__ import annotations

import pytest
from cuda_testing import bfloat16_select, elementwise, group_sum, half_math, int64_variable, vector_odd_offset, wmma

import lazy
from lazy.device import CompileError
from lazy.diskcache import compile_stats
from lazy.dtype import dtypes
from lazy_cuda import cuda_targets
from lazy_cuda.compiler import NVRTCCompiler
from lazy_cuda.renderer import MMA_A, MMA_B, MMA_C, TENSOR_CORES, CUDARenderer, mma_tensor_core

ARCHS = ("sm_80", "sm_90")
KERNELS = {
    "elementwise": elementwise,
    "elementwise_half": lambda: elementwise(dtypes.float16),
    "reduction_local_barrier": group_sum,
    "half": half_math,
    "bfloat16": bfloat16_select,
    "vectors": vector_odd_offset,
    "int64_variable": int64_variable,
    "wmma_half": lambda: wmma(TENSOR_CORES[0]),
    "wmma_bfloat16": lambda: wmma(TENSOR_CORES[1]),
}


def is_cubin(lib: bytes) -> bool:
    return len(lib) > 64 and lib[:4] == b"\x7fELF"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_kernel_compiles_to_cubin(kernel, arch):
    src = CUDARenderer(arch).render(f"k_{kernel}", KERNELS[kernel]())
    assert is_cubin(NVRTCCompiler(arch).compile(src)), src


def test_dialect_text():
    src = CUDARenderer().render("k", group_sum())
    assert 'extern "C" __global__ void __launch_bounds__(16) k(float* data0, const float* data1) {' in src
    assert "blockIdx.x" in src and "threadIdx.x" in src
    assert "__shared__ __align__(16) float temp[16];" in src and "__syncthreads();" in src
    assert "#include" not in src and "__restrict__" not in src  # no headers with NVRTC from pip; in-place assigns


def test_half_and_bfloat16_have_their_own_definitions():
    half = CUDARenderer().render("k", half_math())
    assert "struct __align__(2) half" in half and "cvt.rn.f16.f32" in half and "cvt.rn.f16.f64" in half
    assert "lazy_hbits(0x3800)" in half  # 0.5 as half bits: no conversion at run time
    assert CUDARenderer().render_float_const(-1e6, dtypes.float16) == "lazy_hbits(0xfc00)"  # past the range: -inf
    assert "exp2(((float)val0))" in half  # half math in float, rounded back
    bf16 = CUDARenderer().render("k", bfloat16_select())
    assert "lazy_bf2f" in bf16 and "lazy_f2bf" in bf16 and "const unsigned short* data3" in bf16
    assert "half" not in CUDARenderer().render("k", elementwise())  # only what the kernel uses


def test_vector_access_checks_alignment():
    """A float4 at element 4*g+1 is never 16-byte aligned: the load helper takes the wide path only when the address
    is aligned for it, so the kernel reads element by element instead of faulting."""
    src = CUDARenderer().render("k", vector_odd_offset())
    assert "struct __align__(16) lazy_floatx4 { float v[4]; };" in src
    assert "lazy_vload<lazy_floatx4>(data1+alu0)" in src and "lazy_vstore(data0+alu0, " in src
    assert "% alignof(V) == 0" in src


def test_int64_variable_is_a_64_bit_parameter():
    src = CUDARenderer().render("k", int64_variable())
    assert "const long long n)" in src and "for (long long ridx0 = 0ll; ridx0 < n; ridx0++)" in src


def test_capabilities_per_architecture():
    caps = CUDARenderer("sm_90").caps
    assert caps.has_threads and caps.has_local and caps.local_size_max == 1024 and caps.local_max == (1024, 1024, 64)
    assert caps.shared_max == 48 * 1024 and caps.global_max == (2**31 - 1, 65535, 65535)
    declared = [(tc.name, tc.dtype_in, tc.dtype_out) for tc in caps.tensor_cores]
    assert declared == [
        ("mma.m16n8k16", dtypes.float16, dtypes.float32),
        ("mma.m16n8k16", dtypes.bfloat16, dtypes.float32),
    ]
    assert CUDARenderer("sm_75").caps.tensor_cores == ()  # m16n8k16 on f16/bf16 needs sm_80
    assert [t.name for t in cuda_targets()] == ["sm_80", "sm_90"]


def test_mma_layouts_are_the_ptx_fragments():
    """The PTX ISA's m16n8k16 figures (groupID = lane>>2, tig = lane%4), element by element."""
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for e in range(8):
            assert MMA_A.coords(lane, e) == (group + 8 * ((e >> 1) & 1), 2 * tig + (e & 1) + 8 * (e >> 2))
        for e in range(4):
            assert MMA_B.coords(lane, e) == (2 * tig + (e & 1) + 8 * (e >> 1), group)
            assert MMA_C.coords(lane, e) == (group + 8 * (e >> 1), 2 * tig + (e & 1))


def test_wmma_packs_registers_in_ptx_order():
    src = CUDARenderer("sm_80").render("k", wmma(TENSOR_CORES[1]))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    assert '"r"(lazy_pack_bf16(a.v[0], a.v[1]))' in src and '"r"(lazy_pack_bf16(b.v[2], b.v[3]))' in src
    assert "(unsigned)x | ((unsigned)y << 16)" in src  # the lower-numbered element in the low half
    assert "__launch_bounds__(32)" in src


def test_unknown_tensor_core_is_refused():
    with pytest.raises(NotImplementedError, match="has no tensor core mma.m16n8k16 half->float"):
        CUDARenderer("sm_75").render("k", wmma(mma_tensor_core(dtypes.float16)))


def test_rejected_kernel_names_kernel_and_line():
    src = (
        CUDARenderer().render("broken_kernel", elementwise()).replace("data0[gidx0] =", "data0[gidx0] = undefined_x +")
    )
    with pytest.raises(CompileError) as info:
        NVRTCCompiler("sm_80").compile(src)
    message = info.value.message
    assert "rejected kernel broken_kernel" in message and 'identifier "undefined_x" is undefined' in message
    line = next(i + 1 for i, text in enumerate(src.splitlines()) if "undefined_x" in text)
    assert f"line {line}: error" in message and "undefined_x +" in message  # the offending source line itself


def test_warnings_that_matter_fail_and_unused_values_do_not():
    base = CUDARenderer().render("warned", elementwise())
    unused = base.replace("int gidx0 = blockIdx.x;", "int gidx0 = blockIdx.x; int unused = 3;")
    assert is_cubin(NVRTCCompiler("sm_80").compile(unused))
    truncating = base.replace("int gidx0 = blockIdx.x;", "int gidx0 = blockIdx.x; int big = 1 << 40;")
    with pytest.raises(CompileError, match=r"warned about kernel warned:\nline \d+: warning #63"):
        NVRTCCompiler("sm_80").compile(truncating)


def test_compile_goes_through_core_cache(tmp_path):
    compiler = NVRTCCompiler("sm_90")
    assert compiler.cachekey is not None and "sm_90" in compiler.cachekey and "nvrtc 13." in compiler.cachekey
    src = CUDARenderer("sm_90").render("cached_kernel", elementwise())
    with lazy.Context(CACHE_DIR=str(tmp_path)):
        before = dict(compile_stats.counts)
        first = compiler.compile_cached(src)
        second = compiler.compile_cached(src)
    grew = {k: compile_stats.counts[k] - before.get(k, 0) for k in compile_stats.counts}
    assert first == second and is_cubin(first)
    assert grew.get("compile miss") == 1 and grew.get("compile hit") == 1 and grew.get("compiler") == 1
    assert NVRTCCompiler("sm_80").cachekey != compiler.cachekey  # another architecture, another entry

"""MSL from hand-built UOp kernels: the dialect's text (parameters bound by index, thread ids, threadgroup memory and
barriers, half and bfloat, vectors, int64 parameters), the target's capabilities, the simdgroup tensor core's layout
against Apple's lane map, and the compiler's error message (no Metal compiler runs here: the text is what is
checked)."""

from __future__ import annotations

import pytest

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import CompileError
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.renderer import FragmentLayout
from lazy_metal.compiler import compile_error_message
from lazy_metal.renderer import SIMDGROUP_LAYOUT, MetalRenderer, MetalTarget, simdgroup_tensor_core

INDEX = dtypes.int32


def elementwise(op: Ops, dtype: DType, out_dtype: DType | None = None) -> list[UOp]:
    """out[gidx0] = op(a[gidx0], b[gidx0], ...) over 8 threads, one per work group."""
    b = UOpBuilder()
    arity = 1 if op in (Ops.EXP2, Ops.NEG, Ops.SQRT, Ops.RECIP) else 2
    bufs = [b.add(UOps.DEFINE_GLOBAL, d.ptr(), (), (i, f"data{i}", i == 0))
            for i, d in enumerate([out_dtype or dtype] + [dtype] * arity)]  # fmt: skip
    i = b.add(UOps.SPECIAL, INDEX, (), ("gidx0", 8))
    b.add(UOps.STORE, None, (bufs[0], i, b.alu(op, *(b.add(UOps.LOAD, dtype, (buf, i)) for buf in bufs[1:]))))
    return b.uops


def group_sum() -> list[UOp]:
    """out[gidx0] = sum of a[gidx0*16 + lidx0] over the group's 16 threads, through threadgroup memory."""
    b = UOpBuilder()
    f32 = dtypes.float32
    out, a = (b.add(UOps.DEFINE_GLOBAL, f32.ptr(), (), (i, f"data{i}", i == 0)) for i in range(2))
    temp = b.add(UOps.DEFINE_LOCAL, f32.ptr(), (), ("temp", 16))
    g, lane = b.add(UOps.SPECIAL, INDEX, (), ("gidx0", 4)), b.add(UOps.SPECIAL, INDEX, (), ("lidx0", 16))
    b.add(
        UOps.STORE,
        None,
        (temp, lane, b.add(UOps.LOAD, f32, (a, b.alu(Ops.ADD, b.alu(Ops.MUL, g, b.const(16, INDEX)), lane)))),
    )
    b.add(UOps.BARRIER)
    b.add(UOps.STORE, None, (out, g, b.add(UOps.LOAD, f32, (temp, b.const(0, INDEX)))))
    return b.uops


def test_kernel_signature_binds_buffers_then_int_parameters_by_index():
    b = UOpBuilder()
    out = b.add(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), (0, "data0", True))
    a = b.add(UOps.DEFINE_GLOBAL, dtypes.float16.ptr(), (), (1, "data1", False))
    n = b.add(UOps.DEFINE_VAR, INDEX, (), ("n", 1, 64))
    i = b.add(UOps.SPECIAL, INDEX, (), ("gidx0", 64))
    b.add(UOps.IF, None, (b.alu(Ops.CMPLT, i, n),))
    b.add(UOps.STORE, None, (out, i, b.add(UOps.CAST, dtypes.float32, (b.add(UOps.LOAD, dtypes.float16, (a, i)),))))
    src = MetalRenderer().render("k", b.uops)
    assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert ("kernel void k(device float* data0 [[buffer(0)]], device const half* data1 [[buffer(1)]], "
            "constant long& n [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], "
            "uint3 lid [[thread_position_in_threadgroup]]) {") in src  # fmt: skip
    assert "int gidx0 = gid.x;" in src and "((int)n)" in src  # int parameters are 64-bit, narrowed inside


def test_threadgroup_memory_and_barrier():
    src = MetalRenderer().render("k", group_sum())
    assert "threadgroup float temp[16];" in src and "threadgroup_barrier(mem_flags::mem_threadgroup);" in src
    assert "int lidx0 = lid.x;" in src and "int gidx0 = gid.x;" in src


def test_half_computes_transcendentals_in_float_through_precise_math():
    src = MetalRenderer().render("k", elementwise(Ops.EXP2, dtypes.float16))
    assert "data0[gidx0] = ((half)precise::exp2(((float)val0)));" in src
    assert "((half)(val0+val1))" in MetalRenderer().render("k", elementwise(Ops.ADD, dtypes.float16))  # native half
    # half division's rounding is not documented: 1/x in float, rounded once
    assert "((half)(1/((float)val0)))" in MetalRenderer().render("k", elementwise(Ops.RECIP, dtypes.float16))


def test_bfloat_is_stored_as_bfloat_and_computed_in_float():
    src = MetalRenderer().render("k", elementwise(Ops.ADD, dtypes.bfloat16))
    assert "device bfloat* data0" in src and "bfloat val0 = data1[gidx0];" in src
    assert "data0[gidx0] = ((bfloat)(((float)val0)+((float)val1)));" in src
    # conversions other than to and from float go through float
    to_int = MetalRenderer().render("k", _cast(dtypes.bfloat16, dtypes.int32))
    assert "data0[gidx0] = ((int)((float)val0));" in to_int
    assert "((bfloat)1.5f)" in MetalRenderer().render_const(1.5, dtypes.bfloat16)


def _cast(src: DType, dst: DType) -> list[UOp]:
    b = UOpBuilder()
    out = b.add(UOps.DEFINE_GLOBAL, dst.ptr(), (), (0, "data0", True))
    a = b.add(UOps.DEFINE_GLOBAL, src.ptr(), (), (1, "data1", False))
    i = b.add(UOps.SPECIAL, INDEX, (), ("gidx0", 8))
    b.add(UOps.STORE, None, (out, i, b.add(UOps.CAST, dst, (b.add(UOps.LOAD, src, (a, i)),))))
    return b.uops


def test_fp8_is_held_as_uchar_bits():
    src = MetalRenderer().render("k", elementwise(Ops.MUL, dtypes.fp8e4m3))
    assert "device uchar* data0" in src and "as_type<float>" in src and "fp8" not in src


def test_vectors_are_read_and_written_lane_by_lane():
    b = UOpBuilder()
    f4 = dtypes.float32.vec(4)
    out, a = (b.add(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), (i, f"data{i}", i == 0)) for i in range(2))
    base = b.alu(Ops.MUL, b.add(UOps.SPECIAL, INDEX, (), ("gidx0", 4)), b.const(4, INDEX))
    v = b.add(UOps.LOAD, f4, (a, base))
    b.add(UOps.STORE, None, (out, base, b.alu(Ops.ADD, v, v)))
    src = MetalRenderer().render("k", b.uops)
    # the index and the stored value are variables, each lane its own access: right at any alignment, in any space
    assert "float4 val0 = float4(data1[alu0], data1[alu0+1], data1[alu0+2], data1[alu0+3]);" in src
    assert "float4 alu1 = (val0+val0);" in src
    assert "data0[alu0] = alu1[0]; data0[alu0+1] = alu1[1]; data0[alu0+2] = alu1[2]; data0[alu0+3] = alu1[3];" in src


def test_capabilities_declare_what_metal_lacks_and_has():
    caps = MetalRenderer().caps
    assert caps.has_threads and caps.has_local and caps.local_size_max == 1024 and caps.shared_max == 32 * 1024
    assert not caps.supports(dtypes.float64) and "no double" in dict(caps.unsupported)["float64"]
    assert caps.supports(dtypes.float16) and caps.supports(dtypes.bfloat16) and caps.supports(dtypes.fp8e5m2)
    assert caps.native_math == frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})
    pairs = [(tc.dtype_in, tc.dtype_out) for tc in caps.tensor_cores]
    assert pairs == [(dtypes.float32, dtypes.float32), (dtypes.float16, dtypes.float32),
                     (dtypes.bfloat16, dtypes.float32)]  # fmt: skip
    old = MetalRenderer(MetalTarget(bfloat16=False, simdgroup_matrix=False)).caps  # macOS 13, a pre-M1 GPU
    assert not old.supports(dtypes.bfloat16) and "Metal 3.1" in dict(old.unsupported)["bfloat16"]
    assert old.tensor_cores == ()


# Apple's lane map of an 8x8 simdgroup matrix (metal-flash-attention, GEMMHeaders.swift): the lane holding each
# element, row by row; each lane holds two neighbouring elements of a row (thread_elements()[0] and [1])
MORTON_LANES = """
 0  0  1  1  8  8  9  9
 2  2  3  3 10 10 11 11
 4  4  5  5 12 12 13 13
 6  6  7  7 14 14 15 15
16 16 17 17 24 24 25 25
18 18 19 19 26 26 27 27
20 20 21 21 28 28 29 29
22 22 23 23 30 30 31 31
"""


def test_simdgroup_layout_is_apples_lane_map():
    grid = [[int(x) for x in row.split()] for row in MORTON_LANES.strip().splitlines()]
    for lane in range(32):
        for elem in range(2):
            row, col = SIMDGROUP_LAYOUT.coords(lane, elem)
            assert grid[row][col] == lane and col % 2 == elem, (lane, elem, row, col)
    # one layout for A (M x K), B (K x N) and C (M x N), as MLX's BlockMMA reads all three
    tc = simdgroup_tensor_core(dtypes.float16, dtypes.float32)
    assert tc.a == tc.b == tc.c == SIMDGROUP_LAYOUT and tc.dims == (8, 8, 8) and tc.threads == 32


def wmma_kernel(dtype_in: DType) -> list[UOp]:
    """Each lane's 2 elements of A, B and C read at its lane id, D written back: the shape of a WMMA use."""
    tc = simdgroup_tensor_core(dtype_in, dtypes.float32)
    b = UOpBuilder()
    out = b.add(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), (0, "data0", True))
    a, bb = (b.add(UOps.DEFINE_GLOBAL, dtype_in.ptr(), (), (i, f"data{i}", False)) for i in (1, 2))
    lane = b.add(UOps.SPECIAL, INDEX, (), ("lidx0", 32))
    idx = [b.alu(Ops.ADD, b.alu(Ops.MUL, lane, b.const(2, INDEX)), b.const(e, INDEX)) for e in range(2)]
    frag_a, frag_b = (b.add(UOps.VECTORIZE, dtype_in.vec(2), tuple(b.add(UOps.LOAD, dtype_in, (buf, i)) for i in idx))
                      for buf in (a, bb))  # fmt: skip
    zero = b.const(0.0, dtypes.float32)
    d = b.add(
        UOps.WMMA,
        dtypes.float32.vec(2),
        (frag_a, frag_b, b.add(UOps.VECTORIZE, dtypes.float32.vec(2), (zero, zero))),
        tc,
    )
    for e in range(2):
        b.add(UOps.STORE, None, (out, idx[e], b.add(UOps.GEP, dtypes.float32, (d,), e)))
    return b.uops


def test_wmma_calls_a_simdgroup_matrix_helper():
    src = MetalRenderer().render("k", wmma_kernel(dtypes.float16))
    assert "#include <metal_simdgroup_matrix>" in src
    helper = [
        "float2 lazy_wmma_half_float(half2 a, half2 b, float2 c) {",
        "  simdgroup_float8x8 ma, mb, mc;",
        "  ma.thread_elements()[0] = float(a[0]);",  # half products are exact in float: converted first
        "  mc.thread_elements()[1] = c[1];",
        "  simdgroup_multiply_accumulate(mc, ma, mb, mc);",
        "  return float2(mc.thread_elements()[0], mc.thread_elements()[1]);",
    ]
    assert all(line in src.splitlines() for line in helper), src
    assert "float2 wmma0 = lazy_wmma_half_float(half2(val0,val1), half2(val2,val3), float2(0.0f,0.0f));" in src
    assert src.count("lazy_wmma_half_float(") == 2  # one helper, one call
    bf16 = MetalRenderer().render("k", wmma_kernel(dtypes.bfloat16))
    assert "float2 lazy_wmma_bfloat_float(bfloat2 a, bfloat2 b, float2 c) {" in bf16


def test_wmma_of_an_undeclared_tensor_core_is_refused():
    no_tc = MetalRenderer(MetalTarget(simdgroup_matrix=False))
    with pytest.raises(ValueError, match="does not declare.*has: none"):
        no_tc.render("k", wmma_kernel(dtypes.float16))
    other = simdgroup_tensor_core(dtypes.float16, dtypes.float32)
    wrong = type(other)("mma.m16n8k16", (8, 8, 8), 32, other.dtype_in, other.dtype_out, other.a, other.b, other.c)
    with pytest.raises(ValueError, match="mma.m16n8k16 half->float"):
        MetalRenderer().wmma_helper_name(wrong)


def test_compile_error_names_kernel_and_line():
    src = MetalRenderer().render("E_8", elementwise(Ops.ADD, dtypes.float32)).replace("(val0+val1)", "(val0+val9)")
    line = next(i + 1 for i, text in enumerate(src.splitlines()) if "val9" in text)
    log = (f"program_source:{line}:15: error: use of undeclared identifier 'val9'\n"
           "program_source:2:1: warning: unused variable")  # fmt: skip
    message = compile_error_message(src, log)
    assert message.startswith(f"kernel E_8: line {line}: ")
    assert "val9" in message.splitlines()[0] and "undeclared identifier" in message
    err = CompileError("METAL", src, message)  # what MetalCompiler raises: the numbered source follows
    assert "kernel E_8" in str(err) and f"{line:4d}  " in str(err)


def test_layout_declaration_must_be_a_bit_permutation():
    with pytest.raises(ValueError):
        FragmentLayout(rows=("l1", "l2", "l4"), cols=("e0", "l0", "l0"))

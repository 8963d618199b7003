"""OpenCL C from hand-built UOp kernels: the text of the dialect, then kernels with local memory, vectors, bool,
bfloat16 and integer division run on the device."""

from __future__ import annotations

import numpy as np
from cl_testing import buffers, run, special

from lazy.codegen.uops import UOpBuilder, UOps
from lazy.dtype import dtypes
from lazy.ops import Ops
from lazy_opencl.renderer import DeviceLimits, OpenCLRenderer

f32 = dtypes.float32
GROUP = 16


def add_one():
    """out[gidx0] = a[gidx0] + 1"""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    i = special(b, "gidx0", 8)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, f32, (a, i)), b.const(1.0, f32))))
    return b.uops


def group_sum():
    """out[gidx0] = sum(a[gidx0*GROUP + lidx0]): partial sums in local memory, a barrier, then lane 0 adds them."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    temp = b.add(UOps.DEFINE_LOCAL, f32.ptr(), (), ("temp", GROUP))
    g, lane = special(b, "gidx0", 4), special(b, "lidx0", GROUP)
    idx = b.alu(Ops.ADD, b.alu(Ops.MUL, g, b.const(GROUP, dtypes.int32)), lane)
    b.add(UOps.STORE, None, (temp, lane, b.add(UOps.LOAD, f32, (a, idx))))
    b.add(UOps.BARRIER)
    is_zero = b.add(UOps.IF, None, (b.alu(Ops.CMPLT, lane, b.const(1, dtypes.int32)),))
    acc = b.add(UOps.DEFINE_ACC, f32, (), 0.0)
    rng = b.add(UOps.RANGE, dtypes.int32, (b.const(0, dtypes.int32), b.const(GROUP, dtypes.int32)), (1, True))
    total = b.add(UOps.ASSIGN, f32, (acc, b.alu(Ops.ADD, acc, b.add(UOps.LOAD, f32, (temp, rng)))))
    b.add(UOps.ENDRANGE, None, (rng,))
    b.add(UOps.STORE, None, (out, g, total))
    b.add(UOps.ENDIF, None, (is_zero,))
    return b.uops


def test_dialect_text():
    src = OpenCLRenderer().render("k", add_one())
    assert "__kernel void k(__global float* restrict data0, __global const float* restrict data1)" in src
    assert "get_group_id(0)" in src and "#pragma OPENCL FP_CONTRACT OFF" in src
    local = OpenCLRenderer().render("k", group_sum())
    assert "__local float temp[16];" in local and "barrier(CLK_LOCAL_MEM_FENCE);" in local
    assert "get_local_id(0)" in local


def test_capabilities_follow_the_device():
    caps = OpenCLRenderer(DeviceLimits(local_max=(256, 256, 64), local_size_max=256, shared_max=1 << 14)).caps
    assert caps.has_threads and caps.has_local and caps.local_size_max == 256 and caps.shared_max == 1 << 14
    assert not caps.supports(dtypes.float16) and not caps.supports(dtypes.float64)
    assert dict(caps.unsupported)["float16"].endswith("cl_khr_fp16")
    both = OpenCLRenderer(DeviceLimits(fp16=True, fp64=True)).caps
    assert both.supports(dtypes.float16) and both.supports(dtypes.float64)


def test_add_one_runs(dev):
    a = np.arange(8, dtype=np.float32)
    got = run(dev, add_one(), [np.zeros(8, np.float32), a], global_size=(8, 1, 1))[0]
    np.testing.assert_array_equal(got, a + 1)


def test_group_sum_with_local_memory(dev):
    a = np.random.default_rng(0).random(4 * GROUP, dtype=np.float32)
    got = run(dev, group_sum(), [np.zeros(4, np.float32), a], global_size=(4, 1, 1), local_size=(GROUP, 1, 1))[0]
    np.testing.assert_allclose(got, a.reshape(4, GROUP).sum(axis=1), rtol=1e-6)


def test_vector_load_store_at_odd_offsets(dev):
    """float4 through vload4/vstore4 at an index that is not a multiple of 4."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    idx = b.alu(Ops.ADD, b.alu(Ops.MUL, special(b, "gidx0", 2), b.const(4, dtypes.int32)), b.const(1, dtypes.int32))
    vec = b.add(UOps.LOAD, f32.vec(4), (a, idx))
    b.add(UOps.STORE, None, (out, idx, b.alu(Ops.MUL, vec, vec)))
    src = OpenCLRenderer().render("k", b.uops)
    assert "vload4(0, " in src and "vstore4(" in src
    a_np = np.arange(12, dtype=np.float32)
    got = run(dev, b.uops, [np.zeros(12, np.float32), a_np], global_size=(2, 1, 1))[0]
    np.testing.assert_array_equal(got[1:9], a_np[1:9] ** 2)
    assert got[0] == 0 and not got[9:].any()


def test_integer_division_by_zero_is_zero(dev):
    b = UOpBuilder()
    out, x, y = buffers(b, (dtypes.int32, True), (dtypes.int32, False), (dtypes.int32, False))
    i = special(b, "gidx0", 4)
    quotient = b.alu(Ops.IDIV, b.add(UOps.LOAD, dtypes.int32, (x, i)), b.add(UOps.LOAD, dtypes.int32, (y, i)))
    b.add(UOps.STORE, None, (out, i, quotient))
    xs, ys = np.array([7, -7, 5, -(2**31)], np.int32), np.array([2, 2, 0, -1], np.int32)
    got = run(dev, b.uops, [np.zeros(4, np.int32), xs, ys], global_size=(4, 1, 1))[0]
    np.testing.assert_array_equal(got, [3, -3, 0, -(2**31)])  # truncation, x/0 -> 0, INT_MIN/-1 wraps


def test_bool_buffers_and_bfloat16(dev):
    b = UOpBuilder()
    out, flags, vals = buffers(b, (dtypes.bfloat16, True), (dtypes.bool, False), (dtypes.bfloat16, False))
    i = special(b, "gidx0", 4)
    v = b.add(UOps.LOAD, dtypes.bfloat16, (vals, i))
    doubled = b.alu(Ops.ADD, v, v)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.WHERE, b.add(UOps.LOAD, dtypes.bool, (flags, i)), doubled, v)))
    src = OpenCLRenderer().render("k", b.uops)
    assert "__global const uchar* restrict data1" in src and "lazy_bf2f" in src
    as_bf16 = lambda x: (np.array(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    got = run(dev, b.uops, [np.zeros(4, np.uint16), np.array([1, 0, 1, 0], np.bool_), as_bf16([1.5, 2, -3, 4])],
              global_size=(4, 1, 1))[0]  # fmt: skip
    np.testing.assert_array_equal((got.astype(np.uint32) << 16).view(np.float32), [3, 2, -6, 4])


def mulacc_through_memory(count: int):
    """out[1..1+count] = fma(a, b, c) at odd element offsets: `a` and `c` loaded from global memory, `b` stored to
    and loaded from local memory; count == 1 is scalar."""
    b = UOpBuilder()
    vec = f32.vec(count) if count > 1 else f32
    out, xs = buffers(b, (f32, True), (f32, False))
    temp = b.add(UOps.DEFINE_LOCAL, f32.ptr(), (), ("temp", 2 * count + 1))
    one = b.const(1, dtypes.int32)
    a = b.add(UOps.LOAD, vec, (xs, one))
    b.add(UOps.STORE, None, (temp, one, b.add(UOps.LOAD, vec, (xs, b.const(1 + count, dtypes.int32)))))
    c = b.add(UOps.LOAD, vec, (xs, b.const(1 + 2 * count, dtypes.int32)))
    b.add(UOps.BARRIER)
    total = b.alu(Ops.MULACC, a, b.add(UOps.LOAD, vec, (temp, one)), c)
    b.add(UOps.STORE, None, (out, one, total))
    return b.uops


def test_a_cpu_device_gets_its_multiply_adds_and_vector_moves_inline_bit_for_bit(dev):
    """On a CPU OpenCL device the kernel defines its own `lazy_fma` and vector loads and stores (PoCL called the
    library's out of line, spilling a matmul's accumulators around every multiply-add): the same bits as `fma`,
    `vload` and `vstore` of the GPU dialect, at odd element offsets in global and local memory. (Whether the kernel's
    other `a * b + c` stay two roundings is the OpenCL compiler's: PoCL 3.0 contracts them despite `FP_CONTRACT OFF`,
    with either dialect.)"""
    from lazy_opencl.renderer import DeviceLimits, OpenCLRenderer

    cpu, gpu = OpenCLRenderer(DeviceLimits(cpu=True)), OpenCLRenderer(DeviceLimits(cpu=False))
    rng = np.random.default_rng(0)
    for count in (1, 4, 8):
        uops = mulacc_through_memory(count)
        text = cpu.render("k", uops)
        assert "lazy_fma(" in text and "fma(" not in text.replace("lazy_fma(", "")
        if count > 1:
            assert f"lazy_vload{count}(" in text and f"lazy_vstore{count}(" in text and "vload" not in text.replace(
                "lazy_vload", "")  # fmt: skip
        assert "fma(" in gpu.render("k", uops)
        xs = rng.standard_normal(3 * count + 2).astype(np.float32)
        got = []
        for renderer in (cpu, gpu):
            saved, dev.renderer = dev.renderer, renderer
            try:
                got.append(run(dev, uops, [np.zeros(count + 2, np.float32), xs], local_size=(1, 1, 1))[0])
            finally:
                dev.renderer = saved
        np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
        a, b, c = (xs[1 + k * count : 1 + (k + 1) * count].astype(np.float64) for k in range(3))
        np.testing.assert_allclose(got[0][1 : 1 + count], a * b + c, rtol=1e-6)

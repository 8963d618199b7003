"""Hand-built UOp kernels (loops, reductions, gates, vectors, branches) rendered, compiled and run on both devices."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_testing import buffers, end, from_device, load_program, loop, run, to_device

from lazy.codegen.uops import UOpBuilder, UOps
from lazy.dtype import dtypes
from lazy.helpers import Context
from lazy.ops import Ops
from lazy_cpu.renderer import ClangRenderer

f32 = dtypes.float32


def row_sum(rows: int, cols: int, op: Ops = Ops.ADD, split: bool = False) -> list:
    """out[i] = reduce(op, a[i*cols + j] for j); with `split` the outer loop runs over [core_lo, core_hi)."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    if split:
        lo = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_lo", 0, rows))
        hi = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_hi", 0, rows))
        i = loop(b, hi, lo)
    else:
        i = loop(b, rows)
    acc = b.add(UOps.DEFINE_ACC, f32, (), 0.0 if op is Ops.ADD else -np.inf)
    j = loop(b, cols)
    x = b.add(UOps.LOAD, f32, (a, b.alu(Ops.ADD, b.alu(Ops.MUL, i, b.const(cols, dtypes.int32)), j)))
    assign = b.add(UOps.ASSIGN, f32, (acc, b.alu(op, acc, x)))
    end(b, j)
    b.add(UOps.STORE, None, (out, i, assign))
    end(b, i)
    return b.uops


def test_add_loop(dev):
    b = UOpBuilder()
    out, x, y = buffers(b, (f32, True), (f32, False), (f32, False))
    n = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("n", 0, 1000))
    i = loop(b, n)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, f32, (x, i)), b.add(UOps.LOAD, f32, (y, i)))))
    end(b, i)
    xs, ys = np.random.rand(100).astype(np.float32), np.random.rand(100).astype(np.float32)
    got = run(dev, b.uops, [np.zeros(100, np.float32), xs, ys], vals=(77,))[0]
    np.testing.assert_array_equal(got[:77], xs[:77] + ys[:77])
    assert not got[77:].any()


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX], ids=["sum", "max"])
def test_reduction(dev, op):
    a = np.random.randn(12, 33).astype(np.float32)
    a[3, 5] = np.nan
    got = run(dev, row_sum(12, 33, op), [np.zeros(12, np.float32), a])[0]
    want = a.sum(axis=1) if op is Ops.ADD else a.max(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_core_split_matches_single_call(dev):
    rows, cols = 1001, 17
    a = np.random.randn(rows, cols).astype(np.float32)
    prg = load_program(dev, row_sum(rows, cols, split=True), core_split=rows)
    results, saved = [], dev.split_min_work
    try:
        for threads, min_work in [(1, 0), (2, 0), (3, 0), (8, 0), (3, float("inf"))]:
            out, src = to_device(dev, np.zeros(rows, np.float32)), to_device(dev, a)
            dev.split_min_work = min_work  # 0: split even this small kernel; inf: never split
            with Context(THREADS=threads):
                prg(out, src)
            results.append(from_device(dev, out, np.zeros(rows, np.float32)))
    finally:
        dev.split_min_work = saved
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], a.sum(axis=1), rtol=1e-5, atol=1e-5)


def gated_copy_uops(n: int, valid: int) -> list:
    """out[i] = a[i] if i < valid else -1, over a constant n: a pad's loads, which a compiler may vectorize with a
    mask it knows when compiling."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    i = loop(b, n)
    inside = b.alu(Ops.CMPLT, i, b.const(valid, dtypes.int32))
    b.add(UOps.STORE, None, (out, i, b.add(UOps.LOAD, f32, (a, i, inside, b.const(-1.0, f32)))))
    end(b, i)
    return b.uops


def test_gated_load_and_store(dev):
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    i = loop(b, 8)
    inside = b.alu(Ops.CMPLT, i, b.const(5, dtypes.int32))
    x = b.add(UOps.LOAD, f32, (a, i, inside, b.const(-1.0, f32)))  # a has only 5 elements
    even = b.alu(Ops.CMPNE, b.alu(Ops.MOD, i, b.const(2, dtypes.int32)), b.const(1, dtypes.int32))
    b.add(UOps.STORE, None, (out, i, x, even))
    end(b, i)
    got = run(dev, b.uops, [np.full(8, 9.0, np.float32), np.arange(5, dtype=np.float32)])[0]
    np.testing.assert_array_equal(got, [0, 9, 2, 9, 4, 9, -1, 9])


def test_if_block(dev):
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    i = loop(b, 6)
    x = b.add(UOps.LOAD, f32, (a, i))
    cond = b.add(UOps.IF, None, (b.alu(Ops.CMPLT, b.const(0.0, f32), x),))
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.MUL, x, b.const(2.0, f32))))
    b.add(UOps.ENDIF, None, (cond,))
    end(b, i)
    got = run(dev, b.uops, [np.zeros(6, np.float32), np.array([1, -1, 2, -2, 3, 0], np.float32)])[0]
    np.testing.assert_array_equal(got, [2, 0, 4, 0, 6, 0])


@pytest.mark.parametrize("width", [4, 8])
def test_vector_load_math_store(dev, width):
    """out[4k:4k+4] = max(a*b + c, where(a < 0, 0, a)) with vector loads, lane-wise ops and a vector store;
    plus a vector accumulator folded to a scalar with GEP."""
    vec = f32.vec(width)
    b = UOpBuilder()
    out, total, x, y, z = buffers(b, (f32, True), (f32, True), (f32, False), (f32, False), (f32, False))
    acc = b.add(UOps.DEFINE_ACC, vec, (), 0.0)
    k = loop(b, 5)
    idx = b.alu(Ops.MUL, k, b.const(width, dtypes.int32))
    va, vb, vc = (b.add(UOps.LOAD, vec, (buf, idx)) for buf in (x, y, z))
    zero = b.add(UOps.VECTORIZE, vec, tuple(b.const(0.0, f32) for _ in range(width)))
    # b.alu would type a vector comparison as a scalar bool (reported), so add it with its bool vector dtype
    negative = b.add(UOps.ALU, dtypes.bool.vec(width), (va, zero), Ops.CMPLT)
    relu = b.alu(Ops.WHERE, negative, zero, va)
    value = b.alu(Ops.MAX, b.alu(Ops.ADD, b.alu(Ops.MUL, va, vb), vc), relu)
    b.add(UOps.STORE, None, (out, idx, value))
    b.add(UOps.ASSIGN, vec, (acc, b.alu(Ops.MULACC, va, vb, acc)))
    end(b, k)
    lanes = [b.add(UOps.GEP, f32, (acc,), lane) for lane in range(width)]
    s = lanes[0]
    for lane in lanes[1:]:
        s = b.alu(Ops.ADD, s, lane)
    b.add(UOps.STORE, None, (total, b.const(0, dtypes.int32), s))
    n = 5 * width
    a, bb, c = (np.random.randn(n + 1).astype(np.float32)[1:] for _ in range(3))  # misaligned on purpose
    got, got_total = run(dev, b.uops, [np.zeros(n, np.float32), np.zeros(1, np.float32), a, bb, c])[:2]
    np.testing.assert_allclose(got, np.maximum(a * bb + c, np.maximum(a, 0)), rtol=1e-6)
    np.testing.assert_allclose(got_total[0], (a * bb).sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width", [2, 4, 8, 16])
def test_vector_mulacc_rounds_once(dev, width):
    """A float vector MULACC is a*b+c with one rounding at every width (the C prelude's lazy_fma_floatN: the x86 FMA
    builtin where the target has one, a loop of fmaf otherwise). The lanes are chosen so that rounding a*b first
    gives 0 where the fused result is 2**-24 * 2**lane."""
    vec = f32.vec(width)
    b = UOpBuilder()
    out, x, y, z = buffers(b, (f32, True), (f32, False), (f32, False), (f32, False))
    zero = b.const(0, dtypes.int32)
    va, vb, vc = (b.add(UOps.LOAD, vec, (buf, zero)) for buf in (x, y, z))
    b.add(UOps.STORE, None, (out, zero, b.alu(Ops.MULACC, va, vb, vc)))
    scale = np.exp2(np.arange(width)).astype(np.float32)
    a = ((1 + 2.0**-12) * scale).astype(np.float32)
    bb = np.full(width, 1 + 2.0**-12, np.float32)
    c = (-(1 + 2.0**-11) * scale).astype(np.float32)
    assert not (a * bb + c).any()  # rounded twice: every lane cancels
    got = run(dev, b.uops, [np.zeros(width, np.float32), a, bb, c])[0]
    np.testing.assert_array_equal(got, 2.0**-24 * scale)


def test_one_value_in_every_lane_renders_as_a_splat(dev):
    """A 16-lane vector of one constant or one loaded scalar is the type's splat macro in C (one spelling, not 16),
    with the same bits: -0.0 stays negative, infinities and NaN stay what they are."""
    vec = f32.vec(16)
    b = UOpBuilder()
    out, nans, scaled, x, s = buffers(b, (f32, True), (f32, True), (f32, True), (f32, False), (f32, False))
    zero = b.const(0, dtypes.int32)
    va = b.add(UOps.LOAD, vec, (x, zero))

    def splat(value):  # one scalar in all 16 lanes
        return b.add(UOps.VECTORIZE, vec, tuple(value for _ in range(16)))

    negative = b.add(UOps.ALU, dtypes.bool.vec(16), (va, splat(b.const(0.0, f32))), Ops.CMPLT)
    b.add(UOps.STORE, None, (out, zero, b.alu(Ops.WHERE, negative, splat(b.const(float("-inf"), f32)),
                                              splat(b.const(-0.0, f32)))))  # fmt: skip
    b.add(UOps.STORE, None, (nans, zero, b.alu(Ops.MAX, va, splat(b.const(float("nan"), f32)))))
    b.add(UOps.STORE, None, (scaled, zero, b.alu(Ops.MUL, va, splat(b.add(UOps.LOAD, f32, (s, zero))))))
    if isinstance(dev.renderer, ClangRenderer):
        src = dev.renderer.render("splat_kernel", b.uops)
        assert src.count("lazy_splat_float16(") >= 5 and "(-__builtin_inff()),(-__builtin_inff())" not in src
    a = np.linspace(-8, 7, 16, dtype=np.float32)
    arrays = [np.zeros(16, np.float32), np.zeros(16, np.float32), np.zeros(16, np.float32), a, np.float32([2.5])]
    got, got_nans, got_scaled = run(dev, b.uops, arrays)[:3]
    np.testing.assert_array_equal(got[a < 0], -np.inf)
    assert (got[a >= 0] == 0).all() and np.signbit(got[a >= 0]).all()
    assert np.isnan(got_nans).all()  # lazy's MAX propagates NaN
    np.testing.assert_array_equal(got_scaled, a * np.float32(2.5))


def test_value_read_before_assign_is_not_moved_past_it(dev):
    """t = acc*2 is computed before acc is assigned and used after: it must not be inlined after the ASSIGN."""
    b = UOpBuilder()
    (out,) = buffers(b, (f32, True))
    acc = b.add(UOps.DEFINE_ACC, f32, (), 3.0)
    twice = b.alu(Ops.MUL, acc, b.const(2.0, f32))
    b.add(UOps.ASSIGN, f32, (acc, b.alu(Ops.ADD, acc, b.const(1.0, f32))))
    b.add(UOps.STORE, None, (out, b.const(0, dtypes.int32), b.alu(Ops.ADD, twice, acc)))
    assert run(dev, b.uops, [np.zeros(1, np.float32)])[0][0] == 10.0  # 3*2 + 4


def test_c_source_shape():
    """What gcc/clang need to vectorize out[i] = a[i]*b[i]+c[i]: restrict pointers, const inputs, an int counter."""
    b = UOpBuilder()
    out, x, y, z = buffers(b, (f32, True), (f32, False), (f32, False), (f32, False))
    lo = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_lo", 0, 100))
    hi = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_hi", 0, 100))
    i = loop(b, hi, lo)
    loads = [b.add(UOps.LOAD, f32, (buf, i)) for buf in (x, y, z)]
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.alu(Ops.MUL, loads[0], loads[1]), loads[2])))
    end(b, i)
    src = ClangRenderer().render("fma_kernel", b.uops)
    assert "void fma_kernel(float* restrict data0, const float* restrict data1," in src
    assert "const long long core_lo, const long long core_hi)" in src
    assert "for (int ridx0 = ((int)core_lo); ridx0 < ((int)core_hi); ridx0++) {" in src
    assert "data0[ridx0] = ((val0*val1)+val2);" in src


def test_constants_render():
    r = ClangRenderer()
    assert r.render_const(float("inf"), f32) == "__builtin_inff()"
    assert r.render_const(float("-inf"), dtypes.float64) == "(-__builtin_inff())"
    assert r.render_const(float("nan"), f32) == '__builtin_nanf("")'
    assert r.render_const(1.5, f32) == "1.5f" and r.render_const(-2.0, dtypes.float64) == "(-2.0)"
    assert (
        r.render_const(7, dtypes.uint32) == "7u"
        and r.render_const(-(2**63), dtypes.int64) == "(-9223372036854775807ll-1)"
    )
    assert r.render_const(True, dtypes.bool) == "1" and r.render_const(5, dtypes.int8) == "((signed char)5)"
    assert r.render_const(1.0, dtypes.bfloat16) == "((unsigned short)0x3f80)"


def test_constant_defined_in_loop_used_after(dev):
    b = UOpBuilder()
    (out,) = buffers(b, (f32, True))
    i = loop(b, 3)
    seven = b.const(7.0, f32)  # made inside the loop...
    b.add(UOps.STORE, None, (out, i, seven))
    end(b, i)
    b.add(UOps.STORE, None, (out, b.const(3, dtypes.int32), seven))  # ...and used after it
    np.testing.assert_array_equal(run(dev, b.uops, [np.zeros(4, np.float32)])[0], [7, 7, 7, 7])


def test_only_kernels_that_take_long_split_over_the_cores():
    """Splitting costs a wake-up and a join of another thread (tens of us on a small VM): the backward of a small
    layer (64x10 @ 10x64 with a ReLU's mask, 160k operations: ~10 us on one core) runs whole; a 128x128 matmul and an
    elementwise kernel over 1M floats (12 MB moved) split. Arithmetic counts for less than memory moved
    (`OPS_PER_WORD`)."""
    from lazy import Device, Tensor
    from lazy.codegen.program import get_program
    from lazy_cpu.device import SPLIT_MIN_WORK, estimated_work

    def work(out: Tensor) -> float:
        (si,) = [si for si in out.schedule() if si.ast.op is Ops.SINK]
        return estimated_work(get_program(si.ast, Device["CPU"].renderer))

    def empty(*shape: int) -> Tensor:
        return Tensor.empty(*shape, device="CPU")

    assert work((empty(64, 10) @ empty(64, 10).T) * (empty(64, 64) > 0)) < SPLIT_MIN_WORK
    assert work(empty(128, 128) @ empty(128, 128)) >= SPLIT_MIN_WORK
    assert work(empty(1 << 20) + empty(1 << 20)) >= SPLIT_MIN_WORK

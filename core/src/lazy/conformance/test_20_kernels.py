"""Layer kernels: renderer + compiler + runtime on kernels built from UOps, checked against `lazy.ops` semantics.

Every kernel goes through the device's own `renderer.render` -> `compiler.compile_cached` -> `runtime(name, lib, spec)`.
Kernels use `KernelBuilder.global_index`, so they are valid on thread-style and loop-style devices alike.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from lazy.codegen.uops import UOps
from lazy.conformance.support import INDEX, KernelBuilder, buffer_from, empty_buffer, np_values, raw_bytes, values_of
from lazy.dtype import ALL_DTYPES, DType, dtypes, fp8_to_float
from lazy.ops import GroupOp, Ops, exec_alu, truncate

pytestmark = pytest.mark.requires("kernels")  # a copy-only device skips this layer, with its reason

N = 33  # odd on purpose
FLOATS = [d for d in ALL_DTYPES if dtypes.is_float(d)]
INTS = [d for d in ALL_DTYPES if dtypes.is_int(d)]
TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP})


def need(caps: Any, *needed: DType) -> None:
    for dtype in needed:
        if not caps.supports(dtype):
            pytest.skip(f"device does not support {dtype} (caps.dtypes)")


# ---------------------------------------------------------------------------------------------------------------------
# basic shapes of kernel


def test_elementwise_add(device, device_name):
    k = KernelBuilder(device, "conf_add")
    out, a, b = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32), k.buffer(dtypes.float32)
    idx = k.global_index(N)
    k.store(out, idx, k.alu(Ops.ADD, k.load(a, idx), k.load(b, idx)))
    x, y = np.random.default_rng(0).random((2, N), dtype=np.float32)
    bufs = [
        empty_buffer(device_name, N, dtypes.float32),
        *(buffer_from(device_name, v, dtypes.float32) for v in (x, y)),
    ]
    k.run(*bufs)
    np.testing.assert_array_equal(bufs[0].numpy(), x + y)


@pytest.mark.parametrize("dtype,op", [(dtypes.float32, Ops.ADD), (dtypes.int32, Ops.MAX)], ids=["sum", "max"])
def test_reduction_with_accumulator(device, device_name, dtype, op):
    rows, cols = 5, 19
    k = KernelBuilder(device, f"conf_reduce_{op.name.lower()}")
    out, a = k.buffer(dtype, True), k.buffer(dtype)
    row = k.global_index(rows)
    acc = k.b.add(UOps.DEFINE_ACC, dtype, (), 0 if op is Ops.ADD else dtypes.min(dtype))
    col = k.loop(cols, axis=1, reduce=True)
    val = k.load(a, k.alu(Ops.ADD, k.alu(Ops.MUL, row, k.const(cols)), col))
    k.b.add(UOps.ASSIGN, dtype, (acc, k.alu(op, acc, val)))
    k.close()
    k.store(out, row, acc)
    data = (
        np.random.default_rng(1)
        .integers(-50, 50, rows * cols)
        .astype(np.float32 if dtype == dtypes.float32 else np.int32)
    )
    bufs = [empty_buffer(device_name, rows, dtype), buffer_from(device_name, data, dtype)]
    k.run(*bufs)
    reduce = np.sum if op is Ops.ADD else np.max
    np.testing.assert_array_equal(bufs[0].numpy(), reduce(data.reshape(rows, cols), axis=1))  # small ints: exact


# ---------------------------------------------------------------------------------------------------------------------
# every ALU primitive on every dtype where it makes sense, against exec_alu

FLOAT_OPS = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP,
             Ops.WHERE, Ops.MULACC)  # fmt: skip
INT_OPS = (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
           Ops.SHR, Ops.NEG, Ops.WHERE, Ops.MULACC)  # fmt: skip
BOOL_OPS = (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPNE, Ops.CMPLT, Ops.MAX, Ops.WHERE)
ALU_CASES = [(op, d) for d in FLOATS for op in FLOAT_OPS] + [(op, d) for d in INTS for op in INT_OPS]
ALU_CASES += [(op, dtypes.bool) for op in BOOL_OPS]


def arity(op: Ops) -> int:
    return 1 if op in GroupOp.Unary else 3 if op in GroupOp.Ternary else 2


def operand_values(op: Ops, dtype: DType, operand: int, rnd: random.Random) -> list[Any]:
    """Inputs in the range where C, the hardware and exec_alu agree (no signed overflow, no division by zero)."""
    if op is Ops.WHERE and operand == 0:
        return [rnd.random() < 0.5 for _ in range(N)]
    if dtype == dtypes.bool:
        return [rnd.random() < 0.5 for _ in range(N)]
    if dtypes.is_float(dtype):
        lo, hi = {Ops.LOG2: (0.1, 8.0), Ops.SQRT: (0.0, 8.0), Ops.EXP2: (-8.0, 8.0), Ops.SIN: (-6.0, 6.0)}.get(
            op, (-4.0, 4.0)
        )
        values = [rnd.uniform(lo, hi) for _ in range(N)]
        if op is Ops.RECIP:
            values = [v if abs(v) > 0.25 else 0.5 for v in values]
        if op is Ops.WHERE:  # the value not chosen must not leak into the result (c*a + (1-c)*b gives NaN for inf)
            special = (math.inf, -math.inf, math.nan)
            values = [special[i // 3 % 3] if i % 3 == operand - 1 else v for i, v in enumerate(values)]
        return [truncate(v, dtype) for v in values]
    bits, lo, hi = dtype.itemsize * 8, int(dtypes.min(dtype)), int(dtypes.max(dtype))
    if op in (Ops.SHL, Ops.SHR):
        lo, hi = (0, 7) if operand == 1 else (0, (hi >> 8) if op is Ops.SHL else hi)
    elif op in (Ops.IDIV, Ops.MOD) and operand == 1:
        lo, hi = (1, 20) if lo == 0 else (-20, 20)
    elif op in (Ops.MUL, Ops.MULACC) and operand < 2:
        limit = math.isqrt(hi) // 2
        lo, hi = max(lo, -limit), limit
    elif op in (Ops.ADD, Ops.MULACC, Ops.NEG):
        lo, hi = lo // 4 + (op is Ops.NEG), hi // 4
    values = [rnd.randint(lo, hi) for _ in range(N)]
    if op in (Ops.IDIV, Ops.MOD) and operand == 1:
        values = [v or 3 for v in values]
    return [v + (bits == 0) for v in values]


def tolerance(op: Ops, dtype: DType) -> float:
    """Relative tolerance: exact for ints and exact ops; transcendental functions may differ by a few ulp."""
    if dtype == dtypes.bfloat16:
        return 1e-2
    if dtype == dtypes.float16:
        return 2e-3
    if op in TRANSCENDENTAL or op is Ops.MULACC:
        return 1e-5 if dtype == dtypes.float32 else 1e-12 if dtype == dtypes.float64 else 0.0
    return 0.0


@pytest.mark.parametrize("op,dtype", ALU_CASES, ids=[f"{op.name}-{d.name}" for op, d in ALU_CASES])
def test_alu(device, device_name, caps, op, dtype):
    need(caps, dtype)
    rnd = random.Random(f"{op.name}-{dtype.name}")
    in_dtypes = [dtypes.bool if op is Ops.WHERE and j == 0 else dtype for j in range(arity(op))]
    inputs = [operand_values(op, dtype, j, rnd) for j in range(arity(op))]
    out_dtype = dtypes.bool if op in GroupOp.Comparison else dtype
    expected = [exec_alu(op, out_dtype, list(xs)) for xs in zip(*inputs)]
    k = KernelBuilder(device, f"conf_alu_{op.name.lower()}_{dtype.name}")
    out = k.buffer(out_dtype, True)
    params = [k.buffer(d) for d in in_dtypes]
    idx = k.global_index(N)
    k.store(out, idx, k.alu(op, *(k.load(p, idx) for p in params)))
    bufs = [empty_buffer(device_name, N, out_dtype)]
    bufs += [buffer_from(device_name, np_values(v, d), d) for v, d in zip(inputs, in_dtypes)]
    k.run(*bufs)
    got = values_of(bufs[0])
    rtol = tolerance(op, dtype)
    if rtol == 0.0:
        assert all(map(_same, got, expected)), _mismatch(inputs, got, expected)
    else:
        np.testing.assert_allclose(
            got, expected, rtol=rtol, atol=rtol, equal_nan=True, err_msg=_mismatch(inputs, got, expected)
        )


def _same(got: Any, expected: Any) -> bool:
    """Equal, or both NaN."""
    return bool(got == expected or (got != got and expected != expected))


def _mismatch(inputs: list[list[Any]], got: list[Any], expected: list[Any]) -> str:
    bad = [(i, [x[i] for x in inputs], g, e) for i, (g, e) in enumerate(zip(got, expected)) if not _same(g, e)]
    return "first mismatches (index, inputs, got, expected): " + "; ".join(map(str, bad[:5]))


def test_idiv_mod_on_negatives_truncate_toward_zero(device, device_name):
    a, b = [-7, 7, -7, 7, -1, 0, -9], [2, -2, -2, 2, 5, 3, 3]
    for op, expected in ((Ops.IDIV, [-3, -3, 3, 3, 0, 0, -3]), (Ops.MOD, [-1, 1, -1, 1, -1, 0, 0])):
        k = KernelBuilder(device, f"conf_neg_{op.name.lower()}")
        out, x, y = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32), k.buffer(dtypes.int32)
        idx = k.global_index(len(a))
        k.store(out, idx, k.alu(op, k.load(x, idx), k.load(y, idx)))
        bufs = [empty_buffer(device_name, len(a), dtypes.int32)]
        bufs += [buffer_from(device_name, np.array(v, np.int32), dtypes.int32) for v in (a, b)]
        k.run(*bufs)
        assert values_of(bufs[0]) == expected, op


# ---------------------------------------------------------------------------------------------------------------------
# CAST and BITCAST

CAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]


def cast_inputs(src: DType, dst: DType) -> list[Any]:
    """Values whose conversion C defines: floats are multiples of 0.25 inside the target's range."""
    rnd = random.Random(f"{src.name}-{dst.name}")
    if src == dtypes.bool:
        return [rnd.random() < 0.5 for _ in range(N)]
    lo, hi = -100, 100
    if dtypes.is_unsigned(src) or (dtypes.is_float(src) and dtypes.is_unsigned(dst)):
        lo = 0
    if dtypes.is_int(dst) and dtypes.is_float(src):
        lo, hi = max(lo, int(dtypes.min(dst)) + 1), min(hi, int(dtypes.max(dst)) - 1)
    if dtypes.is_int(src):
        lo, hi = max(lo, int(dtypes.min(src))), min(hi, int(dtypes.max(src)))
        return [rnd.randint(lo, hi) for _ in range(N)]
    return [truncate(rnd.randint(lo * 4, hi * 4) / 4, src) for _ in range(N)]


@pytest.mark.parametrize("src,dst", CAST_PAIRS, ids=[f"{s.name}-to-{d.name}" for s, d in CAST_PAIRS])
def test_cast(device, device_name, caps, src, dst):
    need(caps, src, dst)
    inputs = cast_inputs(src, dst)
    k = KernelBuilder(device, f"conf_cast_{src.name}_{dst.name}")
    out, a = k.buffer(dst, True), k.buffer(src)
    idx = k.global_index(N)
    k.store(out, idx, k.b.add(UOps.CAST, dst, (k.load(a, idx),)))
    bufs = [empty_buffer(device_name, N, dst), buffer_from(device_name, np_values(inputs, src), src)]
    k.run(*bufs)
    expected = [truncate(v, dst) for v in inputs]
    assert values_of(bufs[0]) == expected, _mismatch([inputs], values_of(bufs[0]), expected)


BITCAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES
                 if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]  # fmt: skip


def finite_bit_patterns(itemsize: int, count: int) -> np.ndarray:
    """Random bit patterns that are finite numbers in every float format of this size (NaN payloads may change)."""
    rng = np.random.default_rng(itemsize)
    uint = np.dtype(f"u{itemsize}")
    bits = rng.integers(0, np.iinfo(uint).max, count * 4, dtype=uint, endpoint=True)
    ok = np.ones(len(bits), bool)
    with np.errstate(invalid="ignore", over="ignore"):
        if itemsize == 2:
            ok &= np.isfinite(bits.view(np.float16)) & np.isfinite((bits.astype(np.uint32) << 16).view(np.float32))
        elif itemsize == 1:  # fp8: e5m2 has several NaN patterns
            ok &= np.isfinite(fp8_to_float(bits, dtypes.fp8e4m3)) & np.isfinite(fp8_to_float(bits, dtypes.fp8e5m2))
        elif itemsize in (4, 8):
            ok &= np.isfinite(bits.view(np.float32 if itemsize == 4 else np.float64))
    return bits[ok][:count]


@pytest.mark.parametrize("src,dst", BITCAST_PAIRS, ids=[f"{s.name}-to-{d.name}" for s, d in BITCAST_PAIRS])
def test_bitcast(device, device_name, caps, src, dst):
    need(caps, src, dst)
    bits = finite_bit_patterns(src.itemsize, N)
    k = KernelBuilder(device, f"conf_bitcast_{src.name}_{dst.name}")
    out, a = k.buffer(dst, True), k.buffer(src)
    idx = k.global_index(N)
    k.store(out, idx, k.b.add(UOps.BITCAST, dst, (k.load(a, idx),)))
    bufs = [empty_buffer(device_name, N, dst), buffer_from(device_name, bits, src)]
    k.run(*bufs)
    assert raw_bytes(bufs[0]) == bits.tobytes()


# ---------------------------------------------------------------------------------------------------------------------
# control flow, gates, vectors, locals, symbolic sizes


def test_gated_load_and_store(device, device_name):
    k = KernelBuilder(device, "conf_gated")
    out, a = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32)
    idx = k.global_index(12)
    val = k.load(a, idx, gate=k.alu(Ops.CMPLT, idx, k.const(7)), alt=k.const(-1))  # a has only 7 elements
    k.store(out, idx, val, gate=k.alu(Ops.CMPNE, k.alu(Ops.MOD, idx, k.const(3)), k.const(1)))
    bufs = [
        empty_buffer(device_name, 12, dtypes.int32, fill=99),
        buffer_from(device_name, np.arange(7, dtype=np.int32), dtypes.int32),
    ]
    k.run(*bufs)
    assert values_of(bufs[0]) == [0, 99, 2, 3, 99, 5, 6, 99, -1, -1, 99, -1]


def test_if_block(device, device_name):
    k = KernelBuilder(device, "conf_if")
    out = k.buffer(dtypes.int32, True)
    idx = k.global_index(10)
    k.open_if(k.alu(Ops.CMPLT, idx, k.const(4)))
    k.store(out, idx, k.alu(Ops.ADD, idx, k.const(100)))
    k.close()
    bufs = [empty_buffer(device_name, 10, dtypes.int32)]
    k.run(*bufs)
    assert values_of(bufs[0]) == [100, 101, 102, 103, 0, 0, 0, 0, 0, 0]


def test_vector_dtypes(device, device_name, caps):
    if not caps.vector_widths:
        pytest.skip("device declares no vector widths (caps.vector_widths=())")
    for width in caps.vector_widths:
        vec, count = dtypes.float32.vec(width), 5
        k = KernelBuilder(device, f"conf_vector{width}")
        out, a = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32)
        base = k.alu(Ops.MUL, k.global_index(count), k.const(width))
        v = k.load(a, base, vec)
        summed = k.alu(Ops.ADD, v, v)
        lanes = [k.b.add(UOps.GEP, dtypes.float32, (summed,), lane) for lane in range(width)]
        k.store(out, base, k.b.add(UOps.VECTORIZE, vec, tuple(reversed(lanes))))
        data = np.arange(count * width, dtype=np.float32)
        bufs = [empty_buffer(device_name, data.size, dtypes.float32), buffer_from(device_name, data, dtypes.float32)]
        k.run(*bufs)
        np.testing.assert_array_equal(
            bufs[0].numpy(), (data * 2).reshape(count, width)[:, ::-1].reshape(-1), err_msg=f"width {width}"
        )


def test_local_memory_and_barrier(device, device_name, caps):
    if not caps.has_local:
        pytest.skip("device declares no local memory (caps.has_local=False)")
    size = min(16, caps.local_size_max, *(caps.local_max or (16,))[:1])
    groups = 4
    k = KernelBuilder(device, "conf_locals")
    out, a = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32)
    local = k.b.add(UOps.DEFINE_LOCAL, dtypes.int32.ptr(), (), ("temp", size))
    gid, lid = k.b.add(UOps.SPECIAL, INDEX, (), ("gidx0", groups)), k.b.add(UOps.SPECIAL, INDEX, (), ("lidx0", size))
    gidx = k.alu(Ops.ADD, k.alu(Ops.MUL, gid, k.const(size)), lid)
    k.store(local, lid, k.load(a, gidx))
    k.b.add(UOps.BARRIER)
    k.store(out, gidx, k.load(local, k.alu(Ops.ADD, k.const(size - 1), k.alu(Ops.NEG, lid))))
    data = np.arange(groups * size, dtype=np.int32) * 3
    bufs = [empty_buffer(device_name, data.size, dtypes.int32), buffer_from(device_name, data, dtypes.int32)]
    k.run(*bufs, launch=([groups, 1, 1], [size, 1, 1]))
    np.testing.assert_array_equal(bufs[0].numpy(), data.reshape(groups, size)[:, ::-1].reshape(-1))


def test_symbolic_size(device, device_name):
    k = KernelBuilder(device, "conf_symbolic")
    out = k.buffer(dtypes.int32, True)
    n, step = k.var("n", 1, 16), k.var("step", 1, 10)
    idx = k.global_index(n, max_size=16)
    k.store(out, idx, k.alu(Ops.MUL, idx, step))
    program, spec = k.program()
    from lazy.conformance.support import run_program

    for size, mult in ((5, 2), (13, 3)):
        buf = empty_buffer(device_name, 16, dtypes.int32, fill=-1)
        run_program(device, program, (buf,), (size, mult), spec.global_size, spec.local_size)
        assert values_of(buf) == [i * mult for i in range(size)] + [-1] * (16 - size)

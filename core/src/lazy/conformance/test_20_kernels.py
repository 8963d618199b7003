"""Layer kernels: renderer + compiler + runtime on kernels built from UOps, checked against `lazy.ops` semantics.

The kernels are `lazy.conformance.kernels`' (the list that `--compile-only` and golden-file tests render); each test
here gives one of them its inputs and checks what it computes. Every kernel goes through the device's own
`renderer.render` -> `compiler.compile_cached` -> `runtime(name, lib, spec)`; they are valid on thread-style and
loop-style devices alike.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from lazy.conformance import kernels
from lazy.conformance.kernels import ALU_CASES, BITCAST_PAIRS, CAST_PAIRS, REDUCE_CASES, N, arity
from lazy.conformance.support import (
    buffer_from,
    compile_kernel,
    empty_buffer,
    np_values,
    raw_bytes,
    run_kernel,
    run_program,
    values_of,
)
from lazy.dtype import DType, dtypes, fp8_to_float
from lazy.ops import Ops, exec_alu, truncate

pytestmark = pytest.mark.requires("kernels")  # a copy-only device skips this layer, with its reason

TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP})


def need(caps: Any, *needed: DType) -> None:
    for dtype in needed:
        if not caps.supports(dtype):
            pytest.skip(f"device does not support {dtype} (caps.dtypes)")


# ---------------------------------------------------------------------------------------------------------------------
# basic shapes of kernel


def test_elementwise_add(device, device_name):
    x, y = np.random.default_rng(0).random((2, N), dtype=np.float32)
    bufs = [
        empty_buffer(device_name, N, dtypes.float32),
        *(buffer_from(device_name, v, dtypes.float32) for v in (x, y)),
    ]
    run_kernel(device, kernels.elementwise_add(device.renderer.caps), *bufs)
    np.testing.assert_array_equal(bufs[0].numpy(), x + y)


@pytest.mark.parametrize("dtype,op", REDUCE_CASES, ids=["sum", "max"])
def test_reduction_with_accumulator(device, device_name, dtype, op):
    rows, cols = kernels.REDUCE_ROWS, kernels.REDUCE_COLS
    data = (
        np.random.default_rng(1)
        .integers(-50, 50, rows * cols)
        .astype(np.float32 if dtype == dtypes.float32 else np.int32)
    )
    bufs = [empty_buffer(device_name, rows, dtype), buffer_from(device_name, data, dtype)]
    run_kernel(device, kernels.reduction(device.renderer.caps, dtype, op), *bufs)
    reduce = np.sum if op is Ops.ADD else np.max
    np.testing.assert_array_equal(bufs[0].numpy(), reduce(data.reshape(rows, cols), axis=1))  # small ints: exact


# ---------------------------------------------------------------------------------------------------------------------
# every ALU primitive on every dtype where it makes sense, against exec_alu


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
        if op is Ops.RECIP or (op is Ops.FDIV and operand == 1):
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
    in_dtypes = kernels.alu_input_dtypes(op, dtype)
    inputs = [operand_values(op, dtype, j, rnd) for j in range(arity(op))]
    out_dtype = kernels.alu_output_dtype(op, dtype)
    expected = [exec_alu(op, out_dtype, list(xs)) for xs in zip(*inputs)]
    bufs = [empty_buffer(device_name, N, out_dtype)]
    bufs += [buffer_from(device_name, np_values(v, d), d) for v, d in zip(inputs, in_dtypes)]
    run_kernel(device, kernels.alu(caps, op, dtype), *bufs)
    got = values_of(bufs[0])
    rtol = tolerance(op, dtype)
    if op is Ops.FDIV and not caps.exact_division and dtype in (dtypes.float32, dtypes.float64):
        rtol = tolerance(Ops.RECIP, dtype)  # x * (1 / y): two roundings (`Capabilities.exact_division`)
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
        bufs = [empty_buffer(device_name, len(a), dtypes.int32)]
        bufs += [buffer_from(device_name, np.array(v, np.int32), dtypes.int32) for v in (a, b)]
        run_kernel(device, kernels.int_division(device.renderer.caps, op, len(a)), *bufs)
        assert values_of(bufs[0]) == expected, op


# ---------------------------------------------------------------------------------------------------------------------
# CAST and BITCAST


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
    bufs = [empty_buffer(device_name, N, dst), buffer_from(device_name, np_values(inputs, src), src)]
    run_kernel(device, kernels.cast(caps, src, dst), *bufs)
    expected = [truncate(v, dst) for v in inputs]
    assert values_of(bufs[0]) == expected, _mismatch([inputs], values_of(bufs[0]), expected)


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
    bufs = [empty_buffer(device_name, N, dst), buffer_from(device_name, bits, src)]
    run_kernel(device, kernels.cast(caps, src, dst, bitcast=True), *bufs)
    assert raw_bytes(bufs[0]) == bits.tobytes()


# ---------------------------------------------------------------------------------------------------------------------
# control flow, gates, vectors, locals, symbolic sizes


def test_gated_load_and_store(device, device_name):
    bufs = [
        empty_buffer(device_name, 12, dtypes.int32, fill=99),
        buffer_from(device_name, np.arange(7, dtype=np.int32), dtypes.int32),  # 7 elements: the load is gated
    ]
    run_kernel(device, kernels.gated_load_and_store(device.renderer.caps), *bufs)
    assert values_of(bufs[0]) == [0, 99, 2, 3, 99, 5, 6, 99, -1, -1, 99, -1]


def test_if_block(device, device_name):
    bufs = [empty_buffer(device_name, 10, dtypes.int32)]
    run_kernel(device, kernels.if_block(device.renderer.caps), *bufs)
    assert values_of(bufs[0]) == [100, 101, 102, 103, 0, 0, 0, 0, 0, 0]


def test_vector_dtypes(device, device_name, caps):
    if not caps.vector_widths:
        pytest.skip("device declares no vector widths (caps.vector_widths=())")
    for width in caps.vector_widths:
        count = kernels.VECTOR_COUNT
        data = np.arange(count * width, dtype=np.float32)
        bufs = [empty_buffer(device_name, data.size, dtypes.float32), buffer_from(device_name, data, dtypes.float32)]
        run_kernel(device, kernels.vector(caps, width), *bufs)
        np.testing.assert_array_equal(
            bufs[0].numpy(), (data * 2).reshape(count, width)[:, ::-1].reshape(-1), err_msg=f"width {width}"
        )


def test_local_memory_and_barrier(device, device_name, caps):
    if not caps.has_local:
        pytest.skip("device declares no local memory (caps.has_local=False)")
    kernel = kernels.local_memory(caps)
    assert kernel.global_size is not None and kernel.local_size is not None
    groups, size = kernel.global_size[0], kernel.local_size[0]
    data = np.arange(groups * size, dtype=np.int32) * 3
    bufs = [empty_buffer(device_name, data.size, dtypes.int32), buffer_from(device_name, data, dtypes.int32)]
    run_kernel(device, kernel, *bufs)
    np.testing.assert_array_equal(bufs[0].numpy(), data.reshape(groups, size)[:, ::-1].reshape(-1))


def test_symbolic_size(device, device_name):
    program, spec = compile_kernel(device, kernels.symbolic_size(device.renderer.caps))
    for size, mult in ((5, 2), (13, 3)):
        buf = empty_buffer(device_name, 16, dtypes.int32, fill=-1)
        run_program(device, program, (buf,), (size, mult), spec.global_size, spec.local_size)
        assert values_of(buf) == [i * mult for i in range(size)] + [-1] * (16 - size)


def test_tensor_cores(device, device_name, caps):
    """D = A @ B + C on each declared tensor core, one warp and one tile, fragments placed by the declared layouts:
    small integers, so every dtype computes the product exactly and any misplaced element shows."""
    if not caps.tensor_cores:
        pytest.skip("device declares no tensor cores (caps.tensor_cores=())")
    for tc in caps.tensor_cores:
        m, n, k = tc.dims
        rng = np.random.default_rng(7)
        a, b, c = (rng.integers(-2, 3, shape).astype(np.float64) for shape in ((m, k), (k, n), (m, n)))
        bufs = [empty_buffer(device_name, m * n, tc.dtype_out)]
        for values, dtype in ((a, tc.dtype_in), (b, tc.dtype_in), (c, tc.dtype_out)):
            bufs.append(buffer_from(device_name, np_values(values.ravel().tolist(), dtype), dtype))
        run_kernel(device, kernels.wmma(caps, tc), *bufs)
        got = np.asarray(values_of(bufs[0]), dtype=np.float64).reshape(m, n)
        np.testing.assert_array_equal(got, a @ b + c, err_msg=f"tensor core {tc.name} {tc.dtype_in}->{tc.dtype_out}")

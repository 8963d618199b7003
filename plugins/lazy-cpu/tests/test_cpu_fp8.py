"""fp8 on CPU (C) and LLVM, which have no fp8 types: the kernels hold fp8 as uint8 bits and float32 values
(`lazy.renderer.emulate`). Every conversion is checked exhaustively or on a dense sample against the host reference
`lazy.dtype.float_to_fp8`/`fp8_to_float` (itself checked against PyTorch and tinygrad in tests/core/test_fp8.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_testing import buffers, end, loop, run

from lazy import Tensor, dtypes
from lazy.codegen.uops import UOpBuilder, UOps
from lazy.conformance.support import check_fp8_arithmetic_of_all_pairs
from lazy.dtype import FP8_FORMATS, float_to_fp8, fp8_to_float
from lazy.ops import Ops
from lazy_cpu.renderer import ClangRenderer, LLVMRenderer

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the fp8 comparisons against it are skipped")

FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2]
TORCH = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
ALL_BITS = np.arange(256, dtype=np.uint8)
DEVICES = ["CPU", "LLVM"]


def dense_float32() -> np.ndarray:
    """Every top 16 bits of a float32 (every sign, exponent and leading mantissa: the fp8 values, ties and ranges)
    with low halves beside the rounding positions; infinities and NaNs included."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    return (high[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)).ravel().view(np.float32)


def near_every_value(dtype, float_type) -> np.ndarray:
    """The finite fp8 values, the ties between neighbours and one ulp either side of them, in `float_type`."""
    values = np.unique(fp8_to_float(ALL_BITS, dtype).astype(np.float64))
    values = values[np.isfinite(values)]
    mids = ((values[1:] + values[:-1]) / 2).astype(float_type)
    beside = [np.nextafter(mids, float_type(np.inf)), np.nextafter(mids, float_type(-np.inf))]
    return np.concatenate(
        [values.astype(float_type), mids, *beside, np.array([1e6, -1e300, np.inf, np.nan], float_type)]
    )


def bits_of(t: Tensor) -> np.ndarray:
    return t.bitcast(dtypes.uint8).numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_every_bit_pattern_reads_as_torch(device, dtype):
    t = Tensor(ALL_BITS, device=device).bitcast(dtype)
    want = torch.from_numpy(ALL_BITS).view(TORCH[dtype]).float().numpy()
    for other in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16):
        np.testing.assert_array_equal(t.cast(other).cast(dtypes.float32).numpy(), want, err_msg=str(other))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float32_to_fp8_on_a_dense_sample(device, dtype):
    x = dense_float32()
    np.testing.assert_array_equal(bits_of(Tensor(x, device=device).cast(dtype)), float_to_fp8(x, dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float64_to_fp8_rounds_once(device, dtype):
    x = np.concatenate([near_every_value(dtype, np.float64), [1.0625 + 2.0**-40, -(1.0625 + 2.0**-40), 5e-324]])
    np.testing.assert_array_equal(bits_of(Tensor(x, device=device).cast(dtype)), float_to_fp8(x, dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_every_half_and_bfloat16_to_fp8(device, dtype):
    patterns = np.arange(1 << 16, dtype=np.uint16)
    half = patterns.view(np.float16).astype(np.float64)
    got = bits_of(Tensor(patterns, device=device).bitcast(dtypes.float16).cast(dtype))
    np.testing.assert_array_equal(got, float_to_fp8(half, dtype))
    bf16 = (patterns.astype(np.uint32) << 16).view(np.float32)
    got = bits_of(Tensor(patterns, device=device).bitcast(dtypes.bfloat16).cast(dtype))
    np.testing.assert_array_equal(got, float_to_fp8(bf16, dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_ints_and_bools_to_and_from_fp8(device, dtype):
    for np_type in (np.int8, np.uint8, np.int32, np.int64, np.uint64):
        info = np.iinfo(np_type)
        wanted = [0, 1, 3, 17, 100, 255, 448, 1000, 57344, 61440, int(info.min), int(info.max)]
        ints = np.array([min(max(v, int(info.min)), int(info.max)) for v in wanted], np_type)
        want = float_to_fp8(ints.astype(np.float64), dtype)
        np.testing.assert_array_equal(bits_of(Tensor(ints, device=device).cast(dtype)), want, err_msg=str(np_type))
    np.testing.assert_array_equal(bits_of(Tensor([True, False], device=device).cast(dtype)),
                                  float_to_fp8(np.array([1.0, 0.0]), dtype))  # fmt: skip
    values = fp8_to_float(ALL_BITS, dtype).astype(np.float64)
    finite = ALL_BITS[np.isfinite(values)]
    t = Tensor(finite, device=device).bitcast(dtype)
    np.testing.assert_array_equal(t.cast(dtypes.int32).numpy(), np.trunc(values[finite]).astype(np.int32))
    np.testing.assert_array_equal(t.cast(dtypes.bool).numpy(), values[finite] != 0)
    positive = ALL_BITS[np.isfinite(values) & (values >= 0)]
    u = Tensor(positive, device=device).bitcast(dtype).cast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(u, np.trunc(values[positive]).astype(np.int64).astype(np.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_to_fp8_and_bitcasts(device):
    for src, dst in ((dtypes.fp8e4m3, dtypes.fp8e5m2), (dtypes.fp8e5m2, dtypes.fp8e4m3)):
        t = Tensor(ALL_BITS, device=device).bitcast(src)
        np.testing.assert_array_equal(bits_of(t.cast(dst)), float_to_fp8(fp8_to_float(ALL_BITS, src), dst))
        # the same bytes as another type of their size (a NaN's payload may change: every NaN is one NaN)
        keep = ALL_BITS[np.isfinite(fp8_to_float(ALL_BITS, src)) & np.isfinite(fp8_to_float(ALL_BITS, dst))]
        t = Tensor(keep, device=device).bitcast(src)
        np.testing.assert_array_equal(t.bitcast(dtypes.int8).numpy(), keep.view(np.int8))
        np.testing.assert_array_equal(bits_of(t.bitcast(dtypes.int8).bitcast(src)), keep)
        np.testing.assert_array_equal(bits_of(t.bitcast(dst)), keep)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_arithmetic_of_all_pairs_rounds_once(device, dtype):
    """a+b, a*b, a-b, max and a<b over every pair of finite fp8 values: the exact result rounded once."""
    check_fp8_arithmetic_of_all_pairs(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_reductions(device, dtype):
    """max starts below every value (fp8e4m3 has no -inf: it started from NaN); sums accumulate in float32."""
    t = Tensor([-1.0, -2.0, -300.0, -0.5], device=device).cast(dtype)
    assert t.max().cast(dtypes.float32).item() == -0.5
    assert Tensor([-448.0] * 5, device=device).cast(dtype).max().cast(dtypes.float32).item() == -448.0
    total = Tensor.ones(1000, device=device).cast(dtype).sum()  # an fp8 accumulator would stop at 16 (or 8)
    assert total.dtype == dtype and total.cast(dtypes.float32).item() == fp8_to_float(float_to_fp8(1000, dtype), dtype)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_vector_lanes_of_fp8_are_converted_one_by_one(dev, dtype):
    """A hand-written kernel with fp8 vectors (the lowerer makes none, but the IR allows them): load 4 fp8 lanes,
    double them, store; every lane goes through the conversions."""
    b = UOpBuilder()
    out, inp = buffers(b, (dtype, True), (dtype, False))
    i = loop(b, 4)
    idx = b.alu(Ops.MUL, i, b.const(4, dtypes.int32))
    vec = b.add(UOps.LOAD, dtype.vec(4), (inp, idx))
    b.add(UOps.STORE, None, (out, idx, b.alu(Ops.ADD, vec, vec)))
    end(b, i)
    largest = FP8_FORMATS[dtype].max_value
    x = float_to_fp8(np.linspace(-largest, largest, 16), dtype)
    (got, _) = run(dev, b.uops, [np.zeros(16, np.uint8), x])
    want = float_to_fp8(2 * fp8_to_float(x, dtype).astype(np.float64), dtype)
    np.testing.assert_array_equal(got, want)
    assert FP8_FORMATS[dtype].max_bits in got  # (saturated lanes included)


def test_rendered_kernels_hold_fp8_as_bytes():
    b = UOpBuilder()
    out, inp = buffers(b, (dtypes.fp8e4m3, True), (dtypes.fp8e5m2, False))
    i = loop(b, 8)
    b.add(UOps.STORE, None, (out, i, b.add(UOps.CAST, dtypes.fp8e4m3, (b.add(UOps.LOAD, dtypes.fp8e5m2, (inp, i)),))))
    end(b, i)
    for source in (ClangRenderer().render("k", b.uops), LLVMRenderer().render("k", b.uops)):
        assert "fp8" not in source and ("unsigned char" in source or "i8" in source)

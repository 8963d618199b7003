"""fp8 (`dtypes.fp8e4m3`, `dtypes.fp8e5m2`) and `DType.min`/`max`: the host conversions `float_to_fp8`/`fp8_to_float`
against PyTorch's and tinygrad 0.14's, promotion, and fp8 tensors on the PYTHON reference device (every other device
rewrites fp8 into integer UOps, `lazy.renderer.emulate`: the plugins' tests check those against the same host
reference). Where PyTorch and tinygrad disagree (overflow, infinities) tinygrad is followed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.dtype import (
    FP8_FORMATS,
    _from_torch_dtype,
    _to_np_dtype,
    _to_torch_dtype,
    can_lossless_cast,
    float_to_fp8,
    fp8_to_float,
    least_upper_dtype,
    least_upper_float,
    lowest_value,
    storage_to_values,
    sum_acc_dtype,
    to_dtype,
    values_to_storage,
)

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the fp8 comparisons against it are skipped")

FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2]
TORCH = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
ALL_BITS = np.arange(256, dtype=np.uint8)


def torch_bits(x: np.ndarray, dtype) -> np.ndarray:
    return torch.from_numpy(x).to(TORCH[dtype]).view(torch.uint8).numpy()


def torch_values(bits: np.ndarray, dtype) -> np.ndarray:
    return torch.from_numpy(bits).view(TORCH[dtype]).float().numpy()


def near_every_value(dtype, float_type=np.float32) -> np.ndarray:
    """Every finite fp8 value, every midpoint between neighbours (the ties), one ulp either side of each midpoint,
    the subnormal range's edges and zeros of both signs, in `float_type`."""
    values = np.unique(fp8_to_float(ALL_BITS, dtype).astype(np.float64))
    values = values[np.isfinite(values)]
    mids = (values[1:] + values[:-1]) / 2
    cast = [a.astype(float_type) for a in (values, mids)]
    above = [np.nextafter(m, float_type(np.inf)) for m in cast[1:]]
    below = [np.nextafter(m, float_type(-np.inf)) for m in cast[1:]]
    tiny = np.array([2.0**-10, 2.0**-17, 2.0**-18, 1e-30, -0.0, 0.0], float_type)
    return np.concatenate([*cast, *above, *below, tiny, -tiny])


# ---------------------------------------------------------------------------------------------------------------------
# host conversions


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_to_float_of_all_256_bit_patterns_matches_torch(dtype):
    want = torch_values(ALL_BITS, dtype)
    np.testing.assert_array_equal(fp8_to_float(ALL_BITS, dtype), want)
    for bits in range(256):  # the scalar form: a Python float, the same value
        got = fp8_to_float(bits, dtype)
        assert type(got) is float and (got == want[bits] or math.isnan(got) and math.isnan(want[bits])), bits
    assert math.copysign(1.0, fp8_to_float(0x80, dtype)) == -1.0  # -0.0


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float_to_fp8_rounds_to_nearest_even_like_torch_within_range(dtype):
    """Values, ties, one ulp beside the ties, subnormals, signed zeros, and a dense sample of float32 bit patterns
    (every top half, with low halves that straddle the rounding positions): all inside the range, where PyTorch
    and tinygrad agree."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    dense = (high[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)).ravel().view(np.float32)
    limit = FP8_FORMATS[dtype].max_value
    dense = dense[np.isfinite(dense) & (np.abs(dense) <= limit)]
    for x in (near_every_value(dtype), dense):
        np.testing.assert_array_equal(float_to_fp8(x, dtype), torch_bits(x, dtype))
    for x in near_every_value(dtype)[:300]:  # the scalar form: a Python int, the same bits
        got = float_to_fp8(float(x), dtype)
        assert type(got) is int and got == float_to_fp8(np.array([x]), dtype)[0]


# tinygrad 0.14's float_to_fp8 (PyTorch 2.13 differs where marked: e4m3fn saturates inf to 448, e5m2 overflows to inf)
TINYGRAD_BITS = {
    dtypes.fp8e4m3: [(448.0, 0x7E), (464.0, 0x7E), (465.0, 0x7E), (1e6, 0x7E), (-1e30, 0xFE),
                     (math.inf, 0x7F), (-math.inf, 0xFF), (math.nan, 0x7F), (-math.nan, 0xFF)],  # torch: inf -> 0x7E
    dtypes.fp8e5m2: [(57344.0, 0x7B), (61439.0, 0x7B), (61440.0, 0x7B), (1e6, 0x7B), (-1e30, 0xFB),
                     (math.inf, 0x7C), (-math.inf, 0xFC), (math.nan, 0x7F), (-math.nan, 0xFF)],  # torch: 61440 -> inf
}  # fmt: skip


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float_to_fp8_saturates_and_maps_inf_and_nan_as_tinygrad(dtype):
    for x, bits in TINYGRAD_BITS[dtype]:
        assert float_to_fp8(x, dtype) == bits, x
        assert float_to_fp8(np.array([x]), dtype)[0] == bits, x


def test_float_to_fp8_rounds_a_double_once():
    # halfway between 1 and 1.125 plus 2**-40: rounding through float32 first would land on the tie and go to 1
    x = 1.0625 + 2.0**-40
    assert fp8_to_float(float_to_fp8(x, dtypes.fp8e4m3), dtypes.fp8e4m3) == 1.125
    assert float_to_fp8(np.float32(x), dtypes.fp8e4m3) == float_to_fp8(1.0, dtypes.fp8e4m3)


def test_fp8_conversions_refuse_what_is_not_fp8():
    with pytest.raises(ValueError, match="0..255"):
        fp8_to_float(256, dtypes.fp8e4m3)
    with pytest.raises(ValueError, match="0..255"):
        fp8_to_float(np.array([1.5]), dtypes.fp8e5m2)
    with pytest.raises(ValueError, match="not an fp8 dtype"):
        float_to_fp8(1.0, dtypes.float16)


def test_storage_round_trip_of_bfloat16_and_fp8():
    x = np.array([0.0, -1.5, 2.5, 1000.0, -3e-3, np.inf], np.float32)
    for dtype in (dtypes.bfloat16, *FP8):
        stored = values_to_storage(x, dtype)
        assert stored.dtype == np.dtype(f"u{dtype.itemsize}")
        values = storage_to_values(stored, dtype)
        assert values.dtype == np.float32
        np.testing.assert_array_equal(values_to_storage(values, dtype), stored)  # values are exactly representable
    np.testing.assert_array_equal(storage_to_values(values_to_storage(x, dtypes.fp8e4m3), dtypes.fp8e4m3),
                                  [0.0, -1.5, 2.5, 448.0, -2.0**-8, np.nan])  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# dtypes


def test_dtype_min_and_max_as_tinygrad():
    assert (dtypes.int8.min, dtypes.int8.max, dtypes.uint16.min, dtypes.uint16.max) == (-128, 127, 0, 65535)
    assert (dtypes.int64.min, dtypes.uint64.max) == (-(2**63), 2**64 - 1)
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    for dtype in (*FP8, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert (dtype.min, dtype.max) == (-math.inf, math.inf) == (dtypes.min(dtype), dtypes.max(dtype))
    assert lowest_value(dtypes.fp8e4m3) == -448.0 and lowest_value(dtypes.fp8e5m2) == -math.inf  # what max starts at


def test_fp8_dtype_facts():
    assert dtypes.fp8e4m3.itemsize == dtypes.fp8e5m2.itemsize == 1
    assert repr(dtypes.fp8e4m3) == "dtypes.fp8e4m3" and to_dtype("fp8e5m2") == dtypes.fp8e5m2
    assert all(dtypes.is_float(d) and d in dtypes.floats for d in FP8) and dtypes.fp8s == tuple(FP8)
    assert [dtypes.finfo(d) for d in (*FP8, dtypes.half)] == [(4, 3), (5, 2), (5, 10)]
    with pytest.raises(ValueError, match="not a floating point type"):
        dtypes.finfo(dtypes.int32)
    assert can_lossless_cast(dtypes.fp8e4m3, dtypes.float16) and not can_lossless_cast(dtypes.float16, dtypes.fp8e4m3)
    assert not can_lossless_cast(dtypes.uint8, dtypes.fp8e5m2)


def test_numpy_and_torch_mappings_as_tinygrad():
    """tinygrad's `_to_np_dtype` is the type of the values `.numpy()` gives; fp8 goes to torch as its bits (uint8)."""
    assert _to_np_dtype(dtypes.fp8e4m3) is np.float32 and _to_np_dtype(dtypes.bfloat16) is np.float32
    assert _to_np_dtype(dtypes.int16) is np.int16 and _to_np_dtype(dtypes.half) is np.float16
    assert _to_torch_dtype(dtypes.fp8e5m2) == torch.uint8 and _to_torch_dtype(dtypes.bfloat16) == torch.bfloat16
    assert _from_torch_dtype(torch.float16) == dtypes.half and _from_torch_dtype(torch.uint8) == dtypes.uint8


def test_fp8_promotion_as_tinygrad():
    assert least_upper_dtype(dtypes.int32, dtypes.fp8e4m3) == dtypes.fp8e4m3
    assert least_upper_dtype(dtypes.bool, dtypes.fp8e5m2) == dtypes.fp8e5m2
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) == dtypes.float16
    assert least_upper_dtype(dtypes.fp8e5m2, dtypes.bfloat16) == dtypes.bfloat16
    assert least_upper_dtype(dtypes.fp8e4m3, dtypes.float32) == dtypes.float32
    assert least_upper_dtype(dtypes.int64, dtypes.uint64) == dtypes.float16  # no fp8 in: none out
    assert sum_acc_dtype(dtypes.fp8e4m3) == dtypes.float32 and least_upper_float(dtypes.fp8e5m2) == dtypes.fp8e5m2


def test_constants_hold_what_their_dtype_holds():
    """A constant cast to a narrow float and back is rounded, as a tensor's elements are (it was kept exact)."""
    assert Tensor(1.1, device="PYTHON").cast(dtypes.half).cast(dtypes.float32).item() == 1.099609375
    assert Tensor(1000.0, device="PYTHON").cast(dtypes.fp8e4m3).cast(dtypes.float32).item() == 448.0
    assert Tensor(0.1, device="PYTHON").cast(dtypes.fp8e5m2).cast(dtypes.float32).item() == 0.09375


# ---------------------------------------------------------------------------------------------------------------------
# fp8 tensors on the PYTHON reference device


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_python_device_reads_every_bit_pattern_as_torch(dtype):
    t = Tensor(ALL_BITS, device="PYTHON").bitcast(dtype)
    np.testing.assert_array_equal(t.cast(dtypes.float32).numpy(), torch_values(ALL_BITS, dtype))
    np.testing.assert_array_equal(t.cast(dtypes.float64).numpy(), torch_values(ALL_BITS, dtype).astype(np.float64))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_python_device_rounds_float32_and_float64_like_the_host(dtype):
    for float_type in (np.float32, np.float64):
        x = near_every_value(dtype, float_type)
        x = np.concatenate([x, np.array([1e6, -1e30, np.inf, -np.inf, np.nan], float_type)])
        got = Tensor(x, device="PYTHON").cast(dtype).bitcast(dtypes.uint8).numpy()
        np.testing.assert_array_equal(got, float_to_fp8(x, dtype))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_python_device_casts_fp8_to_and_from_every_dtype(dtype):
    finite = ALL_BITS[np.isfinite(fp8_to_float(ALL_BITS, dtype))]
    t = Tensor(finite, device="PYTHON").bitcast(dtype)
    values = fp8_to_float(finite, dtype).astype(np.float64)
    for other in (dtypes.float16, dtypes.bfloat16, dtypes.float64):  # every fp8 value is exact in them
        np.testing.assert_array_equal(t.cast(other).cast(dtypes.float64).numpy(), values)
        np.testing.assert_array_equal(t.cast(other).cast(dtype).bitcast(dtypes.uint8).numpy(), finite)
    np.testing.assert_array_equal(t.cast(dtypes.int32).numpy(), np.trunc(values).astype(np.int32))
    np.testing.assert_array_equal(t.cast(dtypes.bool).numpy(), values != 0)
    ints = np.array([0, 1, -7, 100, -1000, 2**20, -(2**31)], np.int32)
    np.testing.assert_array_equal(Tensor(ints, device="PYTHON").cast(dtype).bitcast(dtypes.uint8).numpy(),
                                  float_to_fp8(ints.astype(np.float64), dtype))  # fmt: skip
    np.testing.assert_array_equal(Tensor([True, False], device="PYTHON").cast(dtype).cast(dtypes.float32).numpy(),
                                  [1.0, 0.0])  # fmt: skip
    other_fp8 = next(d for d in FP8 if d != dtype)
    np.testing.assert_array_equal(t.cast(other_fp8).bitcast(dtypes.uint8).numpy(), float_to_fp8(values, other_fp8))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_python_device_fp8_arithmetic_rounds_once(dtype):
    """a+b, a*b, max and a<b of fp8 values: the exact result rounded once to fp8 (bits: the signs of zeros too)."""
    values = fp8_to_float(ALL_BITS, dtype).astype(np.float64)
    finite = ALL_BITS[np.isfinite(values) & (np.abs(values) < 64)][::3]
    a_bits, b_bits = (g.ravel() for g in np.meshgrid(finite, finite))
    a, b = (Tensor(bits, device="PYTHON").bitcast(dtype) for bits in (a_bits, b_bits))
    x, y = (fp8_to_float(bits, dtype).astype(np.float64) for bits in (a_bits, b_bits))
    for got, want in ((a + b, x + y), (a * b, x * y)):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.bitcast(dtypes.uint8).numpy(), float_to_fp8(want, dtype))
    # (max(-0.0, 0.0) is either zero: compared as values)
    np.testing.assert_array_equal(a.maximum(b).cast(dtypes.float64).numpy(), np.maximum(x, y))
    np.testing.assert_array_equal((a < b).numpy(), x < y)


def test_python_device_max_of_negative_fp8e4m3_values():
    """fp8e4m3 has no -inf: a max reduction starting from it started from NaN."""
    t = Tensor([-1.0, -2.0, -300.0], device="PYTHON").cast(dtypes.fp8e4m3)
    assert t.max().cast(dtypes.float32).item() == -1.0
    assert Tensor([-448.0], device="PYTHON").cast(dtypes.fp8e4m3).max().cast(dtypes.float32).item() == -448.0


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_tensors_from_lists_and_to_numpy_as_tinygrad(dtype):
    """Tensor(list, dtype=fp8) rounds the values; .numpy() and .tolist() give float32 values (numpy has no fp8)."""
    t = Tensor([1.0, 2.5, -1000.0, 0.3], dtype=dtype, device="PYTHON")
    want = fp8_to_float(float_to_fp8(np.array([1.0, 2.5, -1000.0, 0.3]), dtype), dtype)
    assert t.dtype == dtype and t.numpy().dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), want)
    assert t.tolist() == want.tolist()
    assert Tensor([-1, 1, 2], dtype=dtype, device="PYTHON").tolist() == [-1.0, 1.0, 2.0]


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_transcendentals_compute_in_float32_and_round_once(dtype):
    x = np.array([0.5, 1.0, 2.5, 3.0], np.float32)
    t = Tensor(x, device="PYTHON").cast(dtype)
    for fn, ref in ((Tensor.exp, np.exp), (Tensor.log, np.log), (Tensor.sqrt, np.sqrt), (Tensor.sin, np.sin)):
        got = fn(t)
        assert got.dtype == dtype
        want = float_to_fp8(ref(fp8_to_float(float_to_fp8(x, dtype), dtype).astype(np.float64)), dtype)
        np.testing.assert_array_equal(got.bitcast(dtypes.uint8).numpy(), want, err_msg=fn.__name__)


def test_fp8_mean_and_var_divide_before_rounding_as_tinygrad():
    """The float32 sum is divided, then rounded once, as tinygrad does (rounding the sum to fp8 first gave an fp8e5m2
    mean of 96 and an fp8e4m3 variance of 160)."""
    for dtype, mean, var in ((dtypes.fp8e4m3, 96.0, 448.0), (dtypes.fp8e5m2, 112.0, 8192.0)):
        t = Tensor([1.0, -2.0, 300.0], device="PYTHON").cast(dtype)
        x = Tensor([0.1, 3.3, 17.0, 200.0], device="PYTHON").cast(dtype)
        assert t.mean().dtype == x.var().dtype == dtype
        assert (t.mean().cast(dtypes.float32).item(), x.var().cast(dtypes.float32).item()) == (mean, var), dtype

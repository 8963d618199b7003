"""fp8 on CL, which has no fp8 type: kernels hold fp8 as uchar bits and float values (`lazy.renderer.emulate`).
Conversions and arithmetic against the host reference `lazy.dtype.float_to_fp8`/`fp8_to_float` (itself checked
against PyTorch and tinygrad in tests/core/test_fp8.py), exhaustively or on a dense sample."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.conformance.support import check_fp8_arithmetic_of_all_pairs
from lazy.dtype import float_to_fp8, fp8_to_float

FP8 = [dtypes.fp8e4m3, dtypes.fp8e5m2]
ALL_BITS = np.arange(256, dtype=np.uint8)


@pytest.fixture
def device(dev) -> str:  # (the dev fixture skips, with the reason, where no OpenCL device is usable)
    return "CL"


def bits_of(t: Tensor) -> np.ndarray:
    return t.bitcast(dtypes.uint8).numpy()


def need(dtype) -> None:
    from lazy import Device

    reason = dict(Device["CL"].renderer.caps.unsupported).get(dtype.name)
    if reason is not None:
        pytest.skip(f"{dtype} on CL: {reason}")


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_every_bit_pattern_and_back(device, dtype):
    t = Tensor(ALL_BITS, device=device).bitcast(dtype)
    values = fp8_to_float(ALL_BITS, dtype)
    np.testing.assert_array_equal(t.cast(dtypes.float32).numpy(), values)
    np.testing.assert_array_equal(t.cast(dtypes.bfloat16).cast(dtypes.float32).numpy(), values)
    np.testing.assert_array_equal(bits_of(t.cast(dtypes.float32).cast(dtype)), float_to_fp8(values, dtype))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float32_to_fp8_on_a_dense_sample(device, dtype):
    """Every top 16 bits of a float32 with low halves beside the rounding positions: values, ties, subnormals,
    overflow, infinities, NaNs."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    x = (high[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)).ravel().view(np.float32)
    np.testing.assert_array_equal(bits_of(Tensor(x, device=device).cast(dtype)), float_to_fp8(x, dtype))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_float64_to_fp8_rounds_once(device, dtype):
    need(dtypes.float64)
    x = np.array([1.0625 + 2.0**-40, -(1.0625 + 2.0**-40), 5e-324, 1e300, np.inf, np.nan, 0.3, -2.5])
    np.testing.assert_array_equal(bits_of(Tensor(x, device=device).cast(dtype)), float_to_fp8(x, dtype))
    values = fp8_to_float(ALL_BITS, dtype).astype(np.float64)
    np.testing.assert_array_equal(Tensor(ALL_BITS, device=device).bitcast(dtype).cast(dtypes.float64).numpy(), values)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_ints_to_and_from_fp8(device, dtype):
    ints = np.array([0, 1, -3, 17, 100, -255, 448, 1000, 57344, 61440, -(2**31), 2**31 - 1], np.int32)
    np.testing.assert_array_equal(
        bits_of(Tensor(ints, device=device).cast(dtype)), float_to_fp8(ints.astype(float), dtype)
    )
    values = fp8_to_float(ALL_BITS, dtype).astype(np.float64)
    finite = ALL_BITS[np.isfinite(values)]
    t = Tensor(finite, device=device).bitcast(dtype)
    np.testing.assert_array_equal(t.cast(dtypes.int32).numpy(), np.trunc(values[finite]).astype(np.int32))
    np.testing.assert_array_equal(t.cast(dtypes.bool).numpy(), values[finite] != 0)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_arithmetic_of_all_pairs_rounds_once(device, dtype):
    check_fp8_arithmetic_of_all_pairs(device, dtype)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_max_of_negative_values(device, dtype):
    t = Tensor([-1.0, -2.0, -300.0], device=device).cast(dtype)
    assert t.max().cast(dtypes.float32).item() == -1.0

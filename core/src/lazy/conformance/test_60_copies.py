"""Layer copies: `Tensor.to()` between this device and every other usable device, both directions."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.dtype import dtypes
from lazy.tensor import Tensor

DTYPES = [dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.float16, dtypes.bool, dtypes.int64]


def data_for(dtype):
    if dtype == dtypes.bool:
        return [True, False, True, True, False]
    return [0, 1, 7, 42, 100] if not dtypes.is_float(dtype) else [0.0, -1.5, 3.25, 1e-3, 7.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_both_ways(device_name, caps, other_device, dtype):
    if other_device is None:
        pytest.skip("no other usable device is installed to copy to")
    from lazy.plugins import Device

    if not (caps.supports(dtype) and Device[other_device].renderer.caps.supports(dtype)):
        pytest.skip(f"{dtype} is not supported on both {device_name} and {other_device}")
    data = data_for(dtype)
    here = Tensor(data, device=device_name, dtype=dtype)
    there = here.to(other_device)
    assert there.device == Device.canonicalize(other_device)
    want = np.array(data, dtype=np.float16 if dtype == dtypes.float16 else None)
    np.testing.assert_array_equal(there.numpy(), want.astype(there.numpy().dtype))
    back = there.to(device_name)
    np.testing.assert_array_equal(back.numpy(), want.astype(back.numpy().dtype))
    if "kernels" not in dict(Device[other_device].renderer.caps.unsupported):  # a value computed there comes back too
        doubled = there + there
        np.testing.assert_array_equal(doubled.to(device_name).numpy(), doubled.numpy())

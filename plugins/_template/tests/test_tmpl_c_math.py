"""The template device's C: float math rounded to float32 inside expressions, and a gcc 12 -O2 loop-vectorizer
miscompile kept out (found by fuzzing random programs across devices)."""

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.plugins import Device

pytestmark = pytest.mark.skipif("TMPL" not in Device.specs(), reason="the template plugin (TMPL) is not installed")


@pytest.mark.parametrize("axis", [0, 1, 2, (1, 2)])
def test_sum_over_a_flipped_view(axis):
    # gcc 12.2 -O2 vectorized the reversed loads of this kernel into a sum of the wrong elements (96 for 78)
    x = np.arange(1, 13, dtype=np.float32).reshape(2, 2, 3)
    got = Tensor(x, device="TMPL").flip(axis).sum().numpy()
    assert got == 78.0
    np.testing.assert_array_equal(Tensor(x, device="TMPL").flip(axis).sum(2).numpy(), np.flip(x, axis).sum(2))


def test_float_math_rounds_to_float32_inside_expressions():
    # C's sqrt of a float is a double: sqrt(sqrt(x)) and sqrt(x) * y ran in double, never rounded to float32
    x = np.random.default_rng(0).random(2000, dtype=np.float32) + np.float32(0.01)
    y = np.random.default_rng(1).random(2000, dtype=np.float32)
    t, u = Tensor(x, device="TMPL"), Tensor(y, device="TMPL")
    np.testing.assert_array_equal(t.sqrt().sqrt().numpy(), np.sqrt(np.sqrt(x)))
    np.testing.assert_array_equal((t.sqrt() * u).numpy(), np.sqrt(x) * y)
    assert Tensor([3.0], device="TMPL").sqrt().cast(dtypes.float64).item() == float(np.sqrt(np.float32(3.0)))

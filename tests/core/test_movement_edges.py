"""Edge cases of movement, creation and scan ops found by fuzzing against PyTorch and numpy: wide dtypes in
linspace, empty axes, 0-d tensors, crops of grown axes, and PyTorch's calling forms."""

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.helpers import ArgumentError, ShapeError


def test_linspace_float64_keeps_its_precision():
    # computed in float32 before, the steps of 2 between 1e8 and 1e8 + 8 collapsed to 1e8 and 1e8 + 8
    out = Tensor.linspace(1e8, 1e8 + 8, 5, dtype=dtypes.float64).numpy()
    np.testing.assert_array_equal(out, [1e8, 1e8 + 2, 1e8 + 4, 1e8 + 6, 1e8 + 8])
    fine = Tensor.linspace(0, 1, 11, dtype=dtypes.float64).numpy()
    # (within 1 ulp of numpy's: the second half counts down from 1, as PyTorch's)
    np.testing.assert_allclose(fine, np.linspace(0, 1, 11), rtol=0, atol=2.3e-16)


def test_linspace_int64_beyond_float32():
    out = Tensor.linspace(2**40, 2**40 + 4, 5, dtype=dtypes.int64).numpy()
    np.testing.assert_array_equal(out, [2**40 + i for i in range(5)])
    # ints truncate toward zero, as numpy's astype
    np.testing.assert_array_equal(Tensor.linspace(0, -5, 3, dtype=dtypes.int32).numpy(), [0, -2, -5])


def test_chunk_of_an_empty_axis_gives_every_chunk():
    pieces = Tensor.zeros(0, 4).chunk(3)
    assert [p.shape for p in pieces] == [(0, 4)] * 3
    a, b = Tensor.zeros(5, 0).chunk(2, dim=1)
    assert a.shape == b.shape == (5, 0)
    a, b = Tensor.zeros(5, 0).chunk(2)  # (an empty axis other than the one chunked splits as usual)
    assert a.shape == (3, 0) and b.shape == (2, 0)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_mirrored_pads_crop_after_growing(mode):
    # PyTorch pads first, then crops: a crop longer than the axis is fine where the growth covers it
    x = Tensor([1.0, 2.0, 3.0])
    # reflect grows [1, 2, 3] to [1, 2, 3, 2, 1] or [3, 2, 1, 2, 3], replicate to [1, 2, 3, 3, 3] or [1, 1, 1, 2, 3]
    np.testing.assert_array_equal(x.pad((-4, 2), mode=mode).numpy(), [1.0 if mode == "reflect" else 3.0])
    np.testing.assert_array_equal(x.pad((2, -4), mode=mode).numpy(), [3.0 if mode == "reflect" else 1.0])
    with pytest.raises(ShapeError, match="crops 6"):
        x.pad((-6, 2), mode=mode)
    with pytest.raises(ShapeError, match="crops 4"):
        x.pad((-4, 2), mode="constant")


def test_pad_forms():
    np.testing.assert_array_equal(Tensor([1.0, 2.0]).pad(()).numpy(), [1.0, 2.0])
    with pytest.raises(ArgumentError, match="sequence of amounts"):
        Tensor([1.0]).pad(None)


def test_running_sums_have_one_dtype_whatever_the_shape():
    for data in (np.array([True, False]), np.array(True), np.zeros((0,), bool)):
        assert Tensor(data).cumsum().dtype == dtypes.int32
    for shape in ((2,), (), (0, 3)):
        assert Tensor(np.zeros(shape, np.uint8)).cumsum(-1 if shape else 0).dtype == dtypes.uint32
    assert Tensor([1, 2]).logcumsumexp().dtype == Tensor(1).logcumsumexp().dtype == dtypes.float32


@pytest.mark.parametrize("op", ["prod", "cumsum", "cummax", "logcumsumexp"])
def test_zero_d_scans_check_their_axis(op):
    x = Tensor(3.0)
    out = getattr(x, op)(-1)
    value = out[0] if isinstance(out, tuple) else out
    assert value.numpy() == 3.0
    with pytest.raises(IndexError, match="axis 5 is out of range"):
        getattr(x, op)(5)


def test_cat_of_a_list():
    np.testing.assert_array_equal(Tensor.cat([Tensor([1.0]), Tensor([2.0])]).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(Tensor.cat((Tensor([[1.0]]), Tensor([[2]])), dim=1).numpy(), [[1.0, 2.0]])
    with pytest.raises(ArgumentError, match="no tensors"):
        Tensor.cat([])
    with pytest.raises(ArgumentError, match="not both"):
        Tensor.cat([Tensor([1.0])], Tensor([2.0]))


def test_empty_arange_fits_any_dtype():
    out = Tensor.arange(-1, -1, dtype=dtypes.uint8)
    assert out.shape == (0,) and out.dtype == dtypes.uint8
    assert Tensor.arange(300, 5, dtype=dtypes.int8).numpy().size == 0


def test_zero_d_transpose_and_roll_arguments():
    assert Tensor(1.0).transpose(0, -1).numpy() == 1.0
    np.testing.assert_array_equal(Tensor([1.0, 2.0, 3.0]).roll(np.int64(1), 0).numpy(), [3.0, 1.0, 2.0])
    with pytest.raises(ArgumentError, match="whole numbers"):
        Tensor([1.0, 2.0]).roll(1.5, 0)


def test_unflatten_works_out_its_minus_one_from_the_axis():
    assert Tensor.zeros(0, 6).unflatten(1, (-1, 3)).shape == (0, 2, 3)
    assert Tensor.zeros(2, 6).unflatten(-1, (2, -1)).shape == (2, 2, 3)
    with pytest.raises(ShapeError):
        Tensor.zeros(2, 6).unflatten(1, (-1, 4))

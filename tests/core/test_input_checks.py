"""Creation functions and arguments: sizes, dtypes and operands a user gets wrong are refused with a message naming
the argument and what is valid; values that need a wider dtype get one. PYTHON device."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes
from lazy.dtype import to_dtype
from lazy.helpers import ShapeError


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


# -- arange, eye and the index ramp ------------------------------------------------------------------------------------


def test_arange_picks_a_dtype_that_holds_its_values():
    t = Tensor.arange(2**40, 2**40 + 3)
    assert t.dtype == dtypes.int64
    np.testing.assert_array_equal(t.numpy(), np.arange(2**40, 2**40 + 3))
    assert Tensor.arange(-(2**31), -(2**31) + 2).dtype == dtypes.int32  # still fits the default int
    assert Tensor.arange(2**31 - 1, 2**31 + 1).dtype == dtypes.int64


def test_arange_refuses_a_dtype_too_small_for_its_values():
    with pytest.raises(ValueError, match="does not fit in dtypes.char"):
        Tensor.arange(100, 200, dtype=dtypes.int8)


def test_index_ramp_past_two_to_the_31():
    """Counts past 2**31 count in int64 (an int32 ramp wrapped); only the last elements are computed."""
    t = Tensor.arange(2**31 + 5, dtype=dtypes.int64)
    assert Tensor._index_ramp(2**31 + 5, None).dtype == dtypes.int64
    np.testing.assert_array_equal(t[-3:].numpy(), [2**31 + 2, 2**31 + 3, 2**31 + 4])


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((0, 10, 0), ValueError, "step must not be 0"),
        ((0, float("inf")), TypeError, "stop=inf is not a finite int or float"),
        (("a",), TypeError, "stop='a' is not a finite int or float"),
    ],
)
def test_arange_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        Tensor.arange(*args)


def test_eye_and_ones_refuse_negative_sizes():
    with pytest.raises(ShapeError, match="eye.*size -1.*negative"):
        Tensor.eye(-1)
    with pytest.raises(ShapeError, match="eye.*size -2.*negative"):
        Tensor.eye(2, -2)
    with pytest.raises(ShapeError, match=re.escape("ones: size -1 (position 1 of (0, -1)) is negative")):
        Tensor.ones(0, -1)
    assert Tensor.eye(0).shape == (0, 0) and Tensor.ones(0, 3).shape == (0, 3)


# -- sizes -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Tensor.ones(6).reshape(3.0, 2), "reshape: size 3.0 .* is a float; sizes are ints"),
        (lambda: Tensor.zeros("a"), "zeros: size 'a' .* is a str; sizes are ints"),
        (lambda: Tensor.empty(2, None), "empty: size None .* is a NoneType"),
        (lambda: Tensor.rand(2.5), "rand: size 2.5 .* is a float"),
        (lambda: Tensor.linspace(0, 1, 2.5), "linspace: size 2.5"),  # type: ignore[arg-type]
        (lambda: Tensor.full((2, "x"), 1.0), "full: size .x."),  # type: ignore[arg-type]
        (lambda: Tensor.ones(1, 3).expand(2.0, 3), "expand: size 2.0"),
        (lambda: Tensor.ones(4).split(2.0), "split: size 2.0"),  # type: ignore[arg-type]
    ],
)
def test_sizes_that_are_not_ints(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_sizes_that_are_numpy_ints_or_markers_are_accepted():
    assert Tensor.ones(np.int64(2), np.int32(3)).shape == (2, 3)
    assert Tensor.ones(6).reshape(np.int64(3), -1).shape == (3, 2)
    assert Tensor.ones(2, 3).reshape(None, 3).shape == (2, 3)
    assert Tensor.ones(1, 3).expand(4, -1).shape == (4, 3)
    with pytest.raises(ShapeError, match="reshape: size -2"):
        Tensor.ones(6).reshape(-2, 3)


def test_split_and_chunk_refuse_zero():
    with pytest.raises(ValueError, match="split: split_size must be a positive int, got 0"):
        Tensor.ones(3).split(0)
    with pytest.raises(ValueError, match="chunk: chunks must be a positive int, got 0"):
        Tensor.ones(3).chunk(0)
    with pytest.raises(ShapeError, match="split: size -1"):
        Tensor.ones(3).split([4, -1])


def test_split_and_chunk_of_an_empty_axis():
    """An empty axis splits into one empty piece (it raised IndexError) and chunks into `chunks` empty ones, as
    PyTorch does."""
    assert [p.shape for p in Tensor.ones(0, 2).split(2)] == [(0, 2)]
    assert [p.shape for p in Tensor.ones(0, 2).split(0)] == [(0, 2)]
    assert [p.shape for p in Tensor.ones(0).chunk(3)] == [(0,)] * 3
    assert [p.shape for p in Tensor.ones(5).split(2)] == [(2,), (2,), (1,)]


# -- dtypes ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.float32, dtypes.float32),
        (np.float64, dtypes.float64),
        (np.dtype("int16"), dtypes.int16),
        (np.uint8, dtypes.uint8),
        (float, dtypes.float64),  # as numpy and PyTorch read the Python types
        (int, dtypes.int64),
        (bool, dtypes.bool),
        ("half", dtypes.float16),
        (dtypes.bfloat16, dtypes.bfloat16),
    ],
)
def test_numpy_and_python_types_as_dtype(dtype, expected):
    assert to_dtype(dtype) == expected
    t = Tensor([0, 1], dtype=dtype)
    assert t.dtype == expected
    np.testing.assert_array_equal(t.numpy().astype(np.float64), [0, 1])
    assert Tensor.zeros(2, dtype=dtype).dtype == expected


@pytest.mark.parametrize("dtype", [np.complex64, complex, object, 3, "is_float", "floaty"])
def test_dtypes_that_are_not_dtypes(dtype):
    with pytest.raises((TypeError, ValueError), match="dtype"):
        Tensor([1, 2], dtype=dtype)


# -- operands and abs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, name",
    [
        (lambda t: t + "a", "add"),
        (lambda t: "a" * t, "mul"),
        (lambda t: t == "a", "=="),
        (lambda t: t < None, "<"),
        (lambda t: t.where("x", 1), "where"),
    ],
)
def test_operands_that_are_not_numbers(op, name):
    with pytest.raises(TypeError, match=f"{name}: cannot combine a Tensor with"):
        op(Tensor([1, 2]))


def test_abs_of_the_smallest_int():
    """-(-128) wraps to -128 in int8, which numpy and PyTorch return; relu(x) + relu(-x) gave 0."""
    for dtype, np_dtype in ((dtypes.int8, np.int8), (dtypes.int32, np.int32)):
        values = np.array([np.iinfo(np_dtype).min, -3, 0, 5], dtype=np_dtype)
        np.testing.assert_array_equal(Tensor(values, dtype=dtype).abs().numpy(), np.abs(values))


# -- clone -------------------------------------------------------------------------------------------------------------


def test_clone_has_memory_of_its_own():
    """A clone of a realized tensor shared its buffer (x + 0 folds to x), so writing the original changed it."""
    t = Tensor([1.0, 2.0]).realize()
    a, b = t.clone().realize(), t.clone().realize()
    t.assign(Tensor([5.0, 6.0])).realize()
    a.assign(Tensor([7.0, 8.0])).realize()
    np.testing.assert_array_equal(a.numpy(), [7.0, 8.0])
    np.testing.assert_array_equal(b.numpy(), [1.0, 2.0])


def test_clone_passes_gradients():
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    y[0] = 5.0  # what the error for writing into a leaf suggests
    (y * 3).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 3.0])

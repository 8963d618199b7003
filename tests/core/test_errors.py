"""Errors a user can cause: each is a ValueError (or DeviceError) whose message names the op and the shapes involved,
and the device keeps working afterwards."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lazy import Context, Tensor
from lazy.device import DeviceError
from lazy.plugins import Device


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def still_works() -> None:
    """A correct op on the same device after a failure gives the right value."""
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    out = (Tensor(a, device="PYTHON") @ Tensor(a, device="PYTHON") + 1).sum(0)
    np.testing.assert_allclose(out.numpy(), (a @ a + 1).sum(0))


def assert_names(message: str, op: str, *shapes: tuple[int, ...]) -> None:
    assert re.search(rf"(?<!\w){re.escape(op)}(?!\w)", message), f"{op!r} not named in: {message}"
    for shape in shapes:
        assert str(shape) in message, f"shape {shape} not named in: {message}"


ELEMENTWISE = [
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("div", lambda x, y: x / y),
    ("maximum", lambda x, y: x.maximum(y)),
    ("pow", lambda x, y: x**y),
    ("<", lambda x, y: x < y),
]


@pytest.mark.parametrize("op,fn", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
@pytest.mark.parametrize("shapes", [((2, 3), (4,)), ((3, 2), (2, 3)), ((2, 3, 4), (3, 3, 1))], ids=str)
def test_elementwise_broadcast_mismatch(op, fn, shapes):
    x, y = Tensor.ones(*shapes[0]), Tensor.ones(*shapes[1])
    with pytest.raises(ValueError) as info:
        fn(x, y)
    assert_names(str(info.value), op, *shapes)
    still_works()


def test_where_broadcast_mismatch():
    with pytest.raises(ValueError) as info:
        Tensor.ones(2, 3).gt(0).where(Tensor.ones(2, 3), Tensor.ones(4))
    assert_names(str(info.value), "where", (2, 3), (4,))
    still_works()


MATMUL_MISMATCHES = [((2, 3), (4, 5)), ((3,), (4,)), ((3,), (4, 2)), ((2, 3), (2,)), ((2, 2, 3), (2, 4, 2)),
                     ((2, 2, 3), (5, 3, 2)), ((2, 3, 4), (3, 4, 5))]  # fmt: skip


@pytest.mark.parametrize("shapes", MATMUL_MISMATCHES, ids=str)
def test_matmul_mismatch(shapes):
    with pytest.raises(ValueError) as info:
        Tensor.ones(*shapes[0]) @ Tensor.ones(*shapes[1])
    assert_names(str(info.value), "matmul", *shapes)
    still_works()


def test_matmul_of_a_0d_tensor():
    with pytest.raises(ValueError) as info:
        Tensor(2.0) @ Tensor.ones(2)
    assert_names(str(info.value), "matmul", (), (2,))
    still_works()


@pytest.mark.parametrize("src,dst", [((2, 3), (4,)), ((2, 3), (4, 2)), ((6,), (-1, 4)), ((2, 3), (7, -1))], ids=str)
def test_reshape_to_a_wrong_size(src, dst):
    with pytest.raises(ValueError) as info:
        Tensor.ones(*src).reshape(dst)
    assert_names(str(info.value), "reshape", src, dst)
    still_works()


def test_reshape_with_two_minus_ones():
    with pytest.raises(ValueError, match="reshape"):
        Tensor.ones(2, 3).reshape(-1, -1)
    still_works()


@pytest.mark.parametrize("shapes,dim", [(((2, 3), (2, 4)), 0), (((2, 3), (3, 3)), 1), (((2, 3), (2, 3, 1)), 0),
                                        (((2, 3, 4), (2, 5, 4)), 2)], ids=str)  # fmt: skip
def test_cat_mismatch(shapes, dim):
    with pytest.raises(ValueError) as info:
        Tensor.ones(*shapes[0]).cat(Tensor.ones(*shapes[1]), dim=dim)
    assert_names(str(info.value), "cat", *shapes)
    still_works()


def test_stack_mismatch():
    with pytest.raises(ValueError) as info:
        Tensor.stack(Tensor.ones(2, 3), Tensor.ones(3, 2))
    assert_names(str(info.value), "stack", (2, 3), (3, 2))
    still_works()


def test_expand_mismatch():
    with pytest.raises(ValueError) as info:
        Tensor.ones(2, 3).expand(4, 3)
    assert_names(str(info.value), "expand", (2, 3), (4, 3))
    still_works()


def test_backward_gradient_shape_mismatch():
    x = Tensor.ones(2, 3, requires_grad=True)
    with pytest.raises(ValueError) as info:
        (x * 2).backward(Tensor.ones(3, 2))
    assert_names(str(info.value), "backward", (2, 3), (3, 2))
    still_works()


@pytest.mark.parametrize("make", [lambda: Tensor([1.0], device="NOPE"), lambda: Tensor.zeros(2, device="nope"),
                                  lambda: Tensor([1.0]).to("NOPE")], ids=["Tensor", "zeros", "to"])  # fmt: skip
def test_unknown_device(make):
    # Tensor(list) fails at once; a constant or a copy is lazy (like tinygrad) and fails when realized at the latest
    with pytest.raises(DeviceError) as info:
        make().realize()
    message = str(info.value)
    assert "NOPE" in message
    for name in Device.specs():
        assert name in message, f"existing device {name} not listed in: {message}"
    assert "PYTHON" in message
    still_works()


def test_unknown_device_item():
    with pytest.raises(DeviceError) as info:
        Device["NOPE"]
    assert "PYTHON" in str(info.value)
    still_works()


def test_bad_device_name():
    with pytest.raises(DeviceError):
        Tensor([1.0], device="not a device!")
    still_works()


def test_index_out_of_range():
    with pytest.raises(IndexError):
        Tensor.ones(2, 3)[2]
    with pytest.raises(IndexError):
        Tensor.ones(2, 3)[0, 0, 0]
    with pytest.raises(IndexError):
        Tensor.ones(2, 3).sum(2)
    still_works()


def test_item_of_many_elements():
    with pytest.raises(ValueError, match="item"):
        Tensor.ones(2).item()
    still_works()


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_buffer_larger_than_any_memory_is_refused_before_the_plugin_sees_it(device):
    """2**62 float32 elements are 2**64 bytes: passed on, a plugin's C size_t wrapped that to a few bytes and the
    next kernel wrote past them (a segfault). The refusal is a MemoryError naming the size, the allocator keeps the
    buffers it caches (freeing them cannot help), and the device works afterwards."""
    allocator = Device[device].allocator
    kept = Tensor.ones(1000, device=device).contiguous().realize()
    del kept  # its buffer goes to the allocator's cache
    cached = sum(len(v) for v in getattr(allocator, "cache", {}).values())
    with pytest.raises(MemoryError, match=r"18446744073709551616 bytes.*make the tensor smaller"):
        (Tensor.empty(2**62, device=device) + 1).realize()
    assert sum(len(v) for v in getattr(allocator, "cache", {}).values()) == cached
    a = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose((Tensor(a, device=device) * 2 + 1).numpy(), a * 2 + 1)


def test_a_bitcast_that_cannot_hold_whole_elements_says_to_reshape():
    """float32 (3,) as float64: 12 bytes hold no whole number of 8-byte elements; `.contiguous()` cannot help, and
    the message said to call it. A transposed view (whole elements, but not consecutive) is told to."""
    from lazy import dtypes

    with pytest.raises(ValueError, match=r"12 bytes do not hold whole .*reshape"):
        Tensor(np.ones(3, np.float32)).bitcast(dtypes.float64)
    with pytest.raises(ValueError, match=r"contiguous\(\) first"):
        Tensor(np.ones((4, 4), np.float32)).T.bitcast(dtypes.float64)
    still_works()


MOVEMENT_MISTAKES = [
    ("pad by a fraction", lambda x: x.pad(((1.5, 1), (0, 0))), "whole numbers of elements"),
    ("pad that crops more than the axis", lambda x: x.pad(((-5, 0), (0, 0))), "crops 5 elements from axis 0"),
    ("negative repeat", lambda x: x.repeat(-1, 1), "repeats must be whole numbers >= 0"),
    ("negative repeat_interleave", lambda x: x.repeat_interleave(-1), "repeats must be a whole number >= 0"),
    ("flatten backwards", lambda x: x.flatten(1, 0), "start_dim 1 comes after end_dim 0"),
    ("expand -1 in a new axis", lambda x: x.expand(-1, 3, 4), "-1 .keep the size. in a new leading axis"),
    ("cat of 0-d", lambda x: x[0, 0].cat(x[0, 1]), "0-d tensor has no axis to join"),
    ("tril of a vector", lambda x: x[0].tril(), "needs a matrix"),
    ("triu of a scalar", lambda x: x[0, 0].triu(), "needs a matrix"),
    ("unfold of a scalar", lambda x: x[0, 0].unfold(0, 1, 1), "0-d tensor has no dimension"),
]


@pytest.mark.parametrize("name,fn,message", MOVEMENT_MISTAKES, ids=[m[0] for m in MOVEMENT_MISTAKES])
def test_movement_mistakes_are_named(name, fn, message):
    """Each raised an internal error (AttributeError, IndexError) or one about a shrink or reshape the user never
    called, or (flatten, expand) silently made a shape PyTorch refuses."""
    with pytest.raises((ValueError, IndexError, TypeError), match=message):
        fn(Tensor.zeros(3, 4))


def test_setitem_on_an_expanded_view_says_what_to_write_instead():
    b = Tensor.zeros(4).contiguous().realize()
    with pytest.raises(ValueError, match="__setitem__: this tensor is a view that pads or repeats"):
        b.reshape(1, 4).expand(3, 4)[0] = 5.0
    np.testing.assert_array_equal(b.numpy(), [0, 0, 0, 0])


def test_axis_nn_and_einsum_mistakes_are_named():
    """Axis mistakes raised "'float' object is not iterable" or a comparison error; a numpy integer axis (which
    PyTorch accepts) failed in every reduction but cumsum. BatchNorm of a 1-D input, nll_loss with targets or class
    weights of the wrong size, and einsum output letters that no input has (or has twice) were silent or internal."""
    from lazy import nn

    x = Tensor.arange(6).reshape(2, 3).float()
    np.testing.assert_array_equal(x.sum(np.int64(1)).numpy(), [3, 12])
    np.testing.assert_array_equal(x.softmax(np.int32(0)).shape, (2, 3))
    for call in (lambda: x.sum(1.0), lambda: x.argmax((0, 1)), lambda: x.cumsum(None)):
        with pytest.raises(TypeError, match="an axis must be an integer"):
            call()
    with pytest.raises(ValueError, match=re.escape("BatchNorm: expects (N, 4, ...)")):
        nn.BatchNorm2d(4)(Tensor.ones(4))
    logp = Tensor.zeros(4, 3)
    with pytest.raises(ValueError, match="targets of shape .3,. do not fit"):
        logp.nll_loss(Tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="expected one per class"):
        logp.nll_loss(Tensor([0, 1, 2, 0]), weight=Tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="output letter 'l' of 'ij,jk->il' appears in no input"):
        Tensor.einsum("ij,jk->il", x, x.T)
    with pytest.raises(ValueError, match="output letter 'i' appears more than once"):
        Tensor.einsum("ij->ii", x)
    assert Tensor(5.0).gather(0, Tensor(0)).item() == 5.0  # a 0-d tensor is its only element (IndexError before)


def test_sizes_and_fill_values_that_cannot_apply_are_refused():
    """A negative result size gave an empty tensor, a fill value with a mirroring pad was ignored, and resampling an
    empty axis gave zeros; PyTorch refuses each."""
    x = Tensor.ones(2, 3)
    with pytest.raises(ValueError, match="masked_select: size must be >= 0"):
        x.masked_select(x > 0, size=-1)
    with pytest.raises(ValueError, match="nonzero: size must be >= 0"):
        x.nonzero(size=-1)
    with pytest.raises(ValueError, match="fill value .3. goes only with mode='constant'"):
        x.reshape(1, 2, 3).pad((1, 1), mode="reflect", value=3)
    with pytest.raises(ValueError, match="cannot resample an axis of size 0"):
        Tensor.ones(1, 1, 0).interpolate((4,))

"""Eager cost of composite ops: every recorded op costs an eager step's Python (a node, a Function, a Tensor), so the
softmax family and the cross entropy are built from as few as they need. The counts are upper bounds (fewer is
fine); the values are checked against PyTorch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from lazy import Tensor
from lazy import function as F


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Every Function applied meanwhile, by name."""
    seen: Counter[str] = Counter()
    original = F.Function.apply.__func__  # type: ignore[attr-defined]

    def apply(cls: type[F.Function], *args: Any, **kwargs: Any) -> Tensor:
        seen[cls.__name__] += 1
        return original(cls, *args, **kwargs)

    F.Function.apply = classmethod(apply)  # type: ignore[method-assign, assignment]
    try:
        yield seen
    finally:
        F.Function.apply = classmethod(original)  # type: ignore[method-assign, assignment]


def ops_of(build: Callable[[], Tensor]) -> Counter[str]:
    with counted() as seen:
        build()
    return seen


def test_an_identity_permute_is_the_tensor_itself():
    x = Tensor(np.ones((2, 3), np.float32))
    assert x.permute(0, 1) is x and x.permute((-2, -1)) is x
    assert x.permute(1, 0).shape == (3, 2)


def test_subtraction_is_one_op_with_both_gradients():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    seen = ops_of(lambda: x - y)
    assert seen["Sub"] == 1 and "Neg" not in seen and "Add" not in seen, seen
    ((x - y) * (x - y)).sum().backward()
    assert x.grad is not None and y.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 2 * (a - b), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), (-2 * (a - b)).sum(0, keepdims=True), rtol=1e-5)
    z = Tensor(a, requires_grad=True)  # a gradient of the gradient goes through Sub's backward too
    (g,) = (2.0 - z * z).sum().gradient(z)
    (gg,) = g.sum().gradient(z)
    np.testing.assert_allclose(gg.numpy(), np.full_like(a, -2.0))


def test_softmax_family_and_cross_entropy_record_few_ops():
    x = Tensor(np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32)).realize()
    labels = Tensor(np.random.default_rng(2).integers(0, 10, 64).astype(np.int32)).realize()
    assert sum(ops_of(lambda: x.log_softmax(-1)).values()) <= 37
    assert sum(ops_of(lambda: x.softmax(-1)).values()) <= 37
    first = sum(ops_of(lambda: x.sparse_categorical_crossentropy(labels)).values())
    again = sum(ops_of(lambda: x.sparse_categorical_crossentropy(labels)).values())
    assert first <= 76 and again <= 55, (first, again)  # the classes' index ramp is built once per count and device


def test_an_index_ramp_is_built_once_and_never_written_through():
    assert Tensor.arange(10).tolist() == list(range(10))
    assert sum(ops_of(lambda: Tensor.arange(10)).values()) == 0
    np.testing.assert_array_equal(Tensor.arange(1, 10, 3).numpy(), [1, 4, 7])
    a, b = Tensor.arange(10), Tensor.arange(10)
    a.realize()  # realized: the next one is built again, not handed this memory
    c = Tensor.arange(10)
    assert c.lazydata.base.realized is None
    a.assign(Tensor.zeros(10, dtype=a.dtype)).realize()
    np.testing.assert_array_equal(c.numpy(), np.arange(10))
    np.testing.assert_array_equal(a.numpy(), np.zeros(10))
    assert b.shape == (10,)


def test_cross_entropy_without_smoothing_ignores_a_minus_inf_logit():
    """0 * the mean of log-probabilities was NaN when a logit was -inf, even with no label smoothing; PyTorch's loss
    is finite there."""
    a = np.array([[0.0, -np.inf, 1.0], [2.0, 0.5, -1.0]], np.float32)
    y = np.array([2, 0], np.int32)
    want = torch.nn.functional.cross_entropy(torch.tensor(a), torch.tensor(y).long()).item()
    got = Tensor(a).sparse_categorical_crossentropy(Tensor(y)).item()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    smoothed = Tensor(a[1:]).sparse_categorical_crossentropy(Tensor(y[1:]), label_smoothing=0.1).item()
    ref = torch.nn.functional.cross_entropy(torch.tensor(a[1:]), torch.tensor(y[1:]).long(), label_smoothing=0.1)
    np.testing.assert_allclose(smoothed, ref.item(), rtol=1e-6)

"""Tensors of 2**31 elements and more on CL (issue 8): their kernels index in int64, so sums, masks and offsets past
2**31 - 1 come out right, and every int parameter is passed as a 64-bit integer. Constants and ramps fuse into their
reduction, so no large buffer is needed (PoCL allocates at most 2 GiB in one buffer anyway)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lazy import Context, Tensor, Variable, dtypes

N = 2**31 + 5  # past what an int32 index can count to


@pytest.fixture(autouse=True)
def cl_default(dev: object) -> Iterator[None]:  # `dev` skips, with its reason, where no OpenCL device is usable
    with Context(DEVICE="CL"):
        yield


def test_sum_of_ones_counts_past_2_31():
    assert Tensor.ones(N, dtype=dtypes.int64).sum().item() == N


def test_sum_of_an_elementwise_expression():
    assert (Tensor.full((N,), 3, dtype=dtypes.int64) * 2 - 1).sum().item() == 5 * N


def test_a_padded_view_masks_by_indices_past_2_31():
    padded = Tensor.ones(N, dtype=dtypes.int64).pad(((3, 5),))  # valid where 3 <= i < N + 3; N + 8 is odd: one loop
    assert padded.sum().item() == N
    assert padded[N - 2 :].numpy().tolist() == [1] * 5 + [0] * 5


def test_the_tail_of_an_arange_past_2_31():
    tail = Tensor.arange(N, dtype=dtypes.int64)[N - 4 :]
    assert tail.numpy().tolist() == [N - 4, N - 3, N - 2, N - 1]
    assert tail.max().item() == N - 1


@pytest.mark.parametrize("bound", [100, 2**40], ids=["int32 kernel", "int64 kernel"])
def test_a_symbolic_size_is_passed_as_a_64_bit_parameter(bound):
    for n in (3, 7):
        v = Variable("n", 1, bound).bind(n)
        assert Tensor.ones(bound, dtype=dtypes.int64).shrink(((0, v),)).sum().item() == n

"""Tensors of 2**31 elements and more on CPU and LLVM (issue 8): their kernels index in int64, so sums, masks, offsets
and strides past 2**31 - 1 come out right. Constants and ramps fuse into their reduction (no large buffer); one test
per device reads a real int8 buffer of just over 2 GB (mostly never touched, so it costs little memory)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lazy import Context, Tensor, dtypes
from lazy.device import Buffer
from lazy.plugins import Device

N = 2**31 + 5  # past what an int32 index can count to

DEVICES = ["CPU", "LLVM"]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> Iterator[str]:
    with Context(DEVICE=request.param):
        yield request.param


def test_sum_of_ones_counts_past_2_31(device):
    assert Tensor.ones(N, dtype=dtypes.int64).sum().item() == N


def test_sum_of_int8_ones_with_an_int64_result(device):
    assert Tensor.ones(N, dtype=dtypes.int8).sum(dtype=dtypes.int64).item() == N


def test_sum_of_an_elementwise_expression(device):
    assert (Tensor.full((N,), 3, dtype=dtypes.int64) * 2 - 1).sum().item() == 5 * N


def test_a_padded_view_masks_by_indices_past_2_31(device):
    padded = Tensor.ones(N, dtype=dtypes.int64).pad(((3, 5),))  # valid where 3 <= i < N + 3; N + 8 is odd: one loop
    assert padded.sum().item() == N
    assert padded[N - 2 :].numpy().tolist() == [1] * 5 + [0] * 5


def test_the_tail_of_an_arange_past_2_31(device):
    tail = Tensor.arange(N, dtype=dtypes.int64)[N - 4 :]
    assert tail.numpy().tolist() == [N - 4, N - 3, N - 2, N - 1]
    assert tail.max().item() == N - 1


def test_offsets_and_strides_into_a_buffer_of_more_than_2_31_elements(device):
    """A real int8 buffer of 2**31 + 8 elements, left uninitialised (its pages are never touched) but for its last
    eight, written through a sub-buffer; kernels read them at offsets and strides that only int64 can index."""
    size = 2**31 + 8
    big = Tensor.empty(size, dtype=dtypes.int8).realize()
    tail = Buffer(device, 8, dtypes.int8, base=big.lazydata.base.realized, offset=size - 8).allocate()
    tail.copyin(memoryview(bytearray(range(1, 9))))
    try:
        assert big[2**31 :: 2].numpy().tolist() == [1, 3, 5, 7]  # offset 2**31, stride 2
        assert big.flip(0)[:8].numpy().tolist() == [8, 7, 6, 5, 4, 3, 2, 1]  # offset size - 1, stride -1
        assert big.reshape(2**28 + 1, 8)[-1].cast(dtypes.int64).sum().item() == 36  # the last row, fused in a sum
        assert (big.reshape(2**28 + 1, 8)[-1:, ::3] * 2).numpy().tolist() == [[2, 8, 14]]
    finally:
        del big, tail
        gc.collect()
        Device[device].allocator.free_cache()  # do not keep 2 GB cached for the next test

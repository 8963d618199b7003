"""Layer allocator: round trips for every dtype, sizes 0/1/odd/large, sub-buffers, transfers, `Buffer.numpy()`, and
live buffers that never share memory, also after frees."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lazy.conformance.support import buffer_from, raw_bytes
from lazy.device import Buffer
from lazy.dtype import ALL_DTYPES, DType, dtypes, to_np_dtype

SIZES = (0, 1, 7, 4097)


def random_array(size: int, dtype: DType, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, size * dtype.itemsize, dtype=np.uint8)
    if dtype == dtypes.bool:
        raw &= 1
    return raw.view(to_np_dtype(dtype))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip(device_name, caps, dtype, size):
    if not caps.supports(dtype):
        pytest.skip(f"device does not support {dtype} (caps.dtypes)")
    data = random_array(size, dtype)
    buf = buffer_from(device_name, data, dtype)
    assert raw_bytes(buf) == data.tobytes()
    # again with every byte different, into the same memory: a copy that skips bytes cannot pass by finding the right
    # values left there (the allocator's cache hands out memory that held this very data in an earlier test)
    flipped = ~np.frombuffer(data.tobytes(), dtype=np.uint8)
    buf.copyin(flipped.data)
    assert raw_bytes(buf) == flipped.tobytes()
    buf.deallocate()


def test_large_round_trip(device_name):
    data = random_array(1 << 20, dtypes.float32, seed=1)
    buf = buffer_from(device_name, data, dtypes.float32)
    np.testing.assert_array_equal(buf.numpy().view(np.uint32), data.view(np.uint32))


def test_numpy_of_bfloat16_is_float32(device_name, caps):
    if not caps.supports(dtypes.bfloat16):
        pytest.skip("device does not support bfloat16 (caps.dtypes)")
    bits = np.array([0x3F80, 0xC000, 0x0000], np.uint16)  # 1.0, -2.0, 0.0
    np.testing.assert_array_equal(buffer_from(device_name, bits, dtypes.bfloat16).numpy(), [1.0, -2.0, 0.0])


def test_copyout_after_copyin_is_a_copy(device_name):
    data = np.arange(16, dtype=np.int32)
    buf = buffer_from(device_name, data, dtypes.int32)
    out = buf.numpy().copy()
    data[:] = -1  # the device holds its own copy
    np.testing.assert_array_equal(out, np.arange(16))
    np.testing.assert_array_equal(buf.numpy(), np.arange(16))


def test_sub_buffer_offsets(device, device_name):
    if not device.allocator.supports("offset"):
        pytest.skip("allocator declares no sub-buffers (Allocator._offset)")
    base = buffer_from(device_name, np.arange(64, dtype=np.int32), dtypes.int32)
    view = base.view(8, dtypes.int32, offset=16 * 4)
    np.testing.assert_array_equal(view.ensure_allocated().numpy(), np.arange(16, 24))
    view.copyin(np.full(8, -5, np.int32).tobytes())
    expected = np.arange(64)
    expected[16:24] = -5
    np.testing.assert_array_equal(base.numpy(), expected)


def test_transfer_between_buffers(device, device_name):
    if not device.allocator.supports("transfer"):
        pytest.skip("allocator declares no device-to-device transfer (Allocator._transfer)")
    src = buffer_from(device_name, np.arange(100, dtype=np.float32), dtypes.float32)
    dest = Buffer(device_name, 100, dtypes.float32).allocate()
    device.allocator._transfer(dest.opaque, src.opaque, src.nbytes, device, device)
    device.synchronize()
    np.testing.assert_array_equal(dest.numpy(), np.arange(100))


def test_zero_copy_view(device, device_name):
    if not device.allocator.supports("as_buffer"):
        pytest.skip("allocator declares no zero-copy host view (Allocator._as_buffer)")
    buf = buffer_from(device_name, np.arange(10, dtype=np.uint8), dtypes.uint8)
    assert bytes(buf.as_buffer()) == bytes(range(10))


def test_alloc_free_many(device_name: str) -> None:
    """Live buffers never share memory, and memory that is freed and handed out again never lands on a live buffer.
    Each round frees every other buffer and allocates more buffers of the same sizes than it freed (an LRU cache that
    hands one freed buffer out twice is caught), then every live buffer must still hold its own byte pattern."""
    sizes = (1, 1000, 1 << 16)
    live: list[tuple[Buffer, bytes]] = []
    tags = itertools.count()
    for round_ in range(5):
        for buf, _ in live[round_ % 2 :: 2]:
            buf.deallocate()
        live = live[1 - round_ % 2 :: 2]
        for size in sizes * 2:
            pattern = distinct_pattern(size, next(tags))
            live.append((buffer_from(device_name, np.frombuffer(pattern, np.uint8), dtypes.uint8), pattern))
        for i, (buf, pattern) in enumerate(live):
            got = raw_bytes(buf)
            assert got == pattern, (
                f"round {round_}: live buffer {i} ({buf.nbytes} bytes) no longer holds what was written to it: "
                f"{_first_difference(got, pattern)}; another allocation shares its memory"
            )
    for buf, _ in live:
        buf.deallocate()


def distinct_pattern(size: int, tag: int) -> bytes:
    """Random bytes whose first byte is `tag % 256` (tags below 256 differ even in one-byte buffers)."""
    pattern = np.random.default_rng(tag).integers(0, 256, size, dtype=np.uint8)
    pattern[0] = tag % 256
    return pattern.tobytes()


def _first_difference(got: bytes, want: bytes) -> str:
    at = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    return f"byte {at} is {got[at]}, written {want[at]}"

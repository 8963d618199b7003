"""Layer tensor: `Tensor` operations on the device against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from lazy.dtype import dtypes
from lazy.tensor import Tensor

pytestmark = pytest.mark.requires("kernels")  # a copy-only device skips this layer, with its reason

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
ROW = RNG.standard_normal((1, 4)).astype(np.float32)


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_elementwise(device_name, op):
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[
        op
    ]
    close(fn(Tensor(A, device=device_name), Tensor(B, device=device_name)).numpy(), fn(A, B))


def test_broadcasting(device_name):
    close((Tensor(A, device=device_name) + Tensor(ROW, device=device_name)).numpy(), A + ROW)
    close((Tensor(A, device=device_name) * 2.5).numpy(), A * 2.5)


def test_unary(device_name):
    t = Tensor(A, device=device_name)
    close(t.exp().numpy(), np.exp(A), rtol=1e-5)
    np.testing.assert_array_equal(t.relu().numpy(), np.maximum(A, 0))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(device_name, axis):
    t = Tensor(A, device=device_name)
    close(t.sum(axis).numpy(), A.sum(axis), rtol=1e-5)
    np.testing.assert_array_equal(t.max(axis).numpy(), A.max(axis))  # a max picks an element: exact


def test_matmul(device_name):
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    y = RNG.standard_normal((7, 3)).astype(np.float32)
    close(Tensor(x, device=device_name).matmul(Tensor(y, device=device_name)).numpy(), x @ y, rtol=1e-4, atol=1e-5)


def test_movement_ops(device_name):
    t, same = Tensor(A, device=device_name), np.testing.assert_array_equal  # elements are moved, not computed: exact
    same(t.reshape(4, 3).numpy(), A.reshape(4, 3))
    same(t.permute(1, 0).numpy(), A.T)
    same(t.pad(((1, 0), (0, 2))).numpy(), np.pad(A, ((1, 0), (0, 2))))
    same(t.shrink(((1, 3), (0, 2))).numpy(), A[1:3, 0:2])
    same(Tensor(ROW, device=device_name).expand(3, 4).numpy(), np.broadcast_to(ROW, (3, 4)))


def test_cast(device_name, caps):
    t = Tensor([1.7, -2.2, 3.9], device=device_name)
    np.testing.assert_array_equal(t.cast(dtypes.int32).numpy(), [1, -2, 3])
    if caps.supports(dtypes.float16):
        close(t.cast(dtypes.float16).numpy(), np.array([1.7, -2.2, 3.9], np.float16), rtol=1e-3)


def test_bfloat16_casts_round_to_nearest_even_and_keep_nan(device_name, caps):
    """float32 -> bfloat16 rounds ties to even, saturates nothing (a large value stays finite until it rounds to
    inf), and keeps every NaN a NaN, also one whose payload is only in the low 16 bits (truncating it gives inf)."""
    if not caps.supports(dtypes.bfloat16):
        pytest.skip(f"{device_name} declares no bfloat16")
    bits = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x7F7FFFFF, 0x7F800001, 0xFF801234, 0x7F800000],
                    dtype=np.uint32)  # fmt: skip
    got = Tensor(bits, device=device_name).bitcast(dtypes.float32).cast(dtypes.bfloat16).bitcast(dtypes.uint16)
    top = got.numpy().astype(np.uint32)
    np.testing.assert_array_equal(top[:4], [0x3F80, 0x3F82, 0x3F81, 0x7F80], err_msg=f"rounding on {device_name}")
    assert all((v & 0x7F80) == 0x7F80 and (v & 0x7F) != 0 for v in top[4:6]), f"NaN lost on {device_name}: {top}"
    assert top[4] >> 15 == 0 and top[5] >> 15 == 1 and top[6] == 0x7F80, f"signs or inf on {device_name}: {top}"


def test_comparisons_and_where(device_name):
    x, y = Tensor(A, device=device_name), Tensor(B, device=device_name)
    np.testing.assert_array_equal((x < y).numpy(), A < B)
    np.testing.assert_array_equal((x == y).numpy(), A == B)
    np.testing.assert_array_equal((x < y).where(x, y).numpy(), np.where(A < B, A, B))


def test_softmax(device_name):
    want = np.exp(A - A.max(axis=-1, keepdims=True))
    want /= want.sum(axis=-1, keepdims=True)
    close(Tensor(A, device=device_name).softmax().numpy(), want, rtol=1e-5)


def test_integer_tensor(device_name):
    t = Tensor([1, 2, 3], device=device_name, dtype=dtypes.int32)
    np.testing.assert_array_equal((t * 3 + 1).numpy(), [4, 7, 10])


def test_threads_share_the_device(device_name):
    """Four threads, each realizing its own small graphs (and one graph they all share) on the device, with results
    checked. Guards the queue's timeline (values claimed by several threads must never move a signal back), the
    engine's one-realize-at-a-time lock, and waits that must neither hang nor return early. A hang fails the test
    after 120 s instead of blocking the suite (the threads are daemons)."""
    import sys
    import threading

    shared = Tensor(np.arange(8, dtype=np.float32), device=device_name)
    errors: list[str] = []

    def work(k: int) -> None:
        try:
            for i in range(40):
                a = Tensor(np.full(8, float(k), np.float32), device=device_name)
                close(((a + i) * 2).numpy(), np.full(8, (k + i) * 2.0))  # one kernel, its own inputs
                close((shared * 2 + (i % 3)).sum().numpy(), 56.0 + 8 * (i % 3))  # graphs the threads share
        except Exception as e:  # reported by the main thread
            errors.append(f"thread {k}: {e!r}")

    work(-1)  # compile once, so the threads race on the queues rather than the compiler
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch often: the races need interleavings
    try:
        threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "threads using the device hung (a wait that never returns)"
    assert not errors, errors

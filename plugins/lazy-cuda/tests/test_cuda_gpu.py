"""The CUDA device on a real GPU: host copies larger than the staging buffers, matmuls in float32 and on tensor cores,
a jit replayed as one CUDA graph with new inputs, an allocation the GPU cannot hold, DLPack with PyTorch. Skipped,
saying why, where no GPU is usable (the conformance suite, emulated and compile-only, covers the rest there)."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, TinyJit
from lazy.dtype import dtypes
from lazy_cuda import probe_cuda

usable, reason = probe_cuda()
pytestmark = pytest.mark.skipif(not usable, reason=f"needs an NVIDIA GPU: {reason}")
RNG = np.random.default_rng(0)


def test_host_copies_larger_than_the_staging_buffers_round_trip():
    data = RNG.random(11 << 20, dtype=np.float32)  # 44 MB: three 16 MB staging chunks, the last one partial
    t = Tensor(data, device="CUDA")
    np.testing.assert_array_equal(t.numpy(), data)
    np.testing.assert_array_equal(t[3::5].numpy(), data[3::5])  # a strided view, copied out after a kernel


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 17, 33), (257, 129, 300), (1024, 1024, 1024)])
def test_float32_matmul_matches_numpy(shape):
    m, k, n = shape
    a, b = RNG.standard_normal((m, k), dtype=np.float32), RNG.standard_normal((k, n), dtype=np.float32)
    got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_tensor_core_matmul_matches_numpy(dtype):
    a, b = RNG.standard_normal((256, 320), dtype=np.float32), RNG.standard_normal((320, 192), dtype=np.float32)
    ta, tb = Tensor(a, device="CUDA").cast(dtype), Tensor(b, device="CUDA").cast(dtype)
    exact = ta.float().numpy().astype(np.float64) @ tb.float().numpy()  # the rounded inputs, multiplied exactly
    got = (ta @ tb).float().numpy()
    np.testing.assert_allclose(got, exact, rtol=2e-2, atol=0.1 if dtype == dtypes.bfloat16 else 2e-2)


def test_a_jit_replays_with_new_inputs():
    @TinyJit
    def step(x: Tensor, w: Tensor) -> Tensor:
        return ((x * 2 + 1).relu() @ w.T).sum(1).realize()

    for i in range(5):
        x, w = RNG.standard_normal((64, 32), dtype=np.float32), RNG.standard_normal((48, 32), dtype=np.float32)
        got = step(Tensor(x, device="CUDA"), Tensor(w, device="CUDA")).numpy()
        want = (np.maximum(x.astype(np.float64) * 2 + 1, 0) @ w.T).sum(1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=f"call {i}")


def test_an_allocation_the_gpu_cannot_hold_says_so_and_leaves_it_usable():
    with pytest.raises(MemoryError, match="out of device memory"):
        Tensor.empty(1 << 38, dtype=dtypes.float32, device="CUDA").realize()  # 1 TiB
    np.testing.assert_array_equal((Tensor([1.0, 2.0], device="CUDA") + 1).numpy(), [2.0, 3.0])


def test_dlpack_exchanges_gpu_memory_with_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: nothing to exchange with")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA: nothing to exchange GPU memory with")
    source = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4) * 0.5
    lazy_view = Tensor.from_dlpack(source)
    assert lazy_view.device == "CUDA"
    np.testing.assert_array_equal((lazy_view + 1).numpy(), source.cpu().numpy() + 1)
    back = torch.from_dlpack((Tensor(np.ones((2, 3), np.float32), device="CUDA") * 3).realize())
    assert back.device.type == "cuda" and back.sum().item() == 18.0

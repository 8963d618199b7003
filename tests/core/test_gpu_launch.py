"""How a GPU kernel is launched (found on an H200, checked here without one): every output axis becomes a thread
or group id however many there are (merged into three launch dimensions within the device's limits), work groups are
large enough to fill a GPU's lanes and lie along the axis the buffers are contiguous in, and a reduction reading along
contiguous rows spreads each row over a group. The kernels run on the PYTHON device's thread mode against numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lazy import Tensor
from lazy.codegen.kernel import Axis, Kernel
from lazy.codegen.lowerer import lower_kernel
from lazy.codegen.opt_gpu import GPU_GROUP, GPU_MIN_GROUP, gpu_optimizations
from lazy.codegen.uops import UOps
from lazy.ops import LazyOp, Ops
from lazy.pydevice import THREAD_CAPS

CUDA_LIKE = dataclasses.replace(THREAD_CAPS, global_max=(2**31 - 1, 65535, 65535))  # CUDA's grid limits


def asts(*outs: Tensor) -> list[LazyOp]:
    return [si.ast for si in Tensor.schedule(*outs) if si.ast.op is Ops.SINK]


def launched(ast: LazyOp) -> tuple[Kernel, list, list[int], list[int]]:
    k = gpu_optimizations(Kernel(ast, CUDA_LIKE))
    uops, lowerer = lower_kernel(k)
    return k, uops, lowerer.global_size, lowerer.local_size


def output_loops(uops: list) -> list:
    return [u for u in uops if u.op is UOps.RANGE and not u.arg[1]]  # RANGE arg: (axis, is a reduce loop)


def weight_gradient() -> Tensor:
    x = Tensor.empty(16, 64, 56, 56, device="PYTHON", requires_grad=True)
    w = Tensor.empty(64, 64, 3, 3, device="PYTHON", requires_grad=True)
    x.conv2d(w, padding=1).backward(Tensor.empty(16, 64, 56, 56, device="PYTHON"))
    assert w.grad is not None
    return w.grad


def test_a_kernel_of_five_output_axes_launches_every_output():
    # the convolution's weight gradient per image: (16, 64, 64, 3, 3) outputs, each a sum over 56x56
    (ast,) = [a for a in asts(weight_gradient()) if len(Kernel(a, CUDA_LIKE).axes(Axis.GLOBAL)) == 5]
    k, uops, global_size, local_size = launched(ast)
    assert output_loops(uops) == []  # before: three launch dimensions, each thread looping over the other 1024
    assert global_size[2] <= 65535 and global_size[1] <= 65535
    upcast = np.prod([k.full_shape[a] for a in k.axes(Axis.UPCAST)], dtype=int)
    assert np.prod(global_size) * np.prod(local_size) * upcast == 16 * 64 * 64 * 9
    assert np.prod(local_size) >= GPU_MIN_GROUP  # a group along the 64 channels, not the 3 taps


def test_an_axis_past_the_y_limit_merges_into_x():
    out = (Tensor.empty(3, 1 << 24, device="PYTHON").T + 1).contiguous()  # (16M, 3): its groups are over 65535
    k, uops, global_size, local_size = launched(asts(out)[-1])
    assert output_loops(uops) == [] and global_size[1] == global_size[2] == 1
    assert np.prod(global_size) * np.prod(local_size) == 3 << 24


def test_elementwise_groups_fill_a_gpu_and_follow_the_contiguous_axis():
    k, _, _, local_size = launched(asts(Tensor.empty(1 << 20, device="PYTHON") * 2)[-1])
    assert local_size[0] == GPU_GROUP
    # the padding before a 3x3 convolution: rows of 58, whose only power-of-two divisor is 2
    pad = Tensor.empty(16, 64, 56, 56, device="PYTHON").pad((1, 1, 1, 1)).contiguous()
    k, _, _, local_size = launched(asts(pad)[-1])
    assert local_size == [58, 1, 1] and k.output_stride(k.axes(Axis.LOCAL)[0]) == 1


def test_row_reductions_read_their_rows_with_a_whole_group():
    k, _, _, local_size = launched(asts(Tensor.empty(4096, 4096, device="PYTHON").max(-1))[-1])
    assert k.axes(Axis.GROUP) and local_size[0] >= GPU_MIN_GROUP
    # many columns: neighbouring outputs' items read neighbouring addresses in their loops: no group
    k, _, _, _ = launched(asts(Tensor.empty(256, 1 << 16, device="PYTHON").max(0))[-1])
    assert not k.axes(Axis.GROUP)


@pytest.mark.parametrize("case", ["weight_grad", "transposed", "rows", "long_sum"])
def test_the_launches_compute_what_numpy_does(case):
    rng = np.random.default_rng(0)
    if case == "weight_grad":  # five output axes, merged
        x, w = rng.standard_normal((2, 3, 6, 6), dtype=np.float32), rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
        g = rng.standard_normal((2, 4, 6, 6), dtype=np.float32)
        tx, tw = Tensor(x, device="PYTHON", requires_grad=True), Tensor(w, device="PYTHON", requires_grad=True)
        tx.conv2d(tw, padding=1).backward(Tensor(g, device="PYTHON"))
        assert tw.grad is not None
        got = tw.grad.numpy()
        pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        want = np.einsum("bohw,bcijhw->ocij", g, np.lib.stride_tricks.sliding_window_view(pad, (6, 6), axis=(2, 3)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    elif case == "transposed":
        a = rng.standard_normal((5, 300), dtype=np.float32)
        np.testing.assert_array_equal((Tensor(a, device="PYTHON").T * 2).contiguous().numpy(), a.T * 2)
    elif case == "rows":
        a = rng.standard_normal((40, 512), dtype=np.float32)
        np.testing.assert_allclose(Tensor(a, device="PYTHON").softmax(-1).numpy(),
                                   np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(
                                       1, keepdims=True), rtol=1e-5)  # fmt: skip
    else:
        a = rng.standard_normal(1 << 16, dtype=np.float32)
        np.testing.assert_allclose(Tensor(a, device="PYTHON").sum().item(), a.astype(np.float64).sum(), rtol=1e-5)

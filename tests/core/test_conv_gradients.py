"""Convolution gradients written as convolutions (`lazy.tensor_conv._Conv`): the input gradient as a transposed
convolution, the weight gradient in blocks of images, both against PyTorch in float64 over strides, dilations,
groups, paddings (negative too), 1-3 spatial axes, batches no block divides, and a gradient of the gradient. The
kernels they schedule are checked to be vectorized convolutions, not the window view's gather and fold."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lazy import Device, Tensor
from lazy.codegen.program import build_kernel
from lazy.engine.schedule import create_schedule

CASES = [
    # (batch, c_in, c_out, spatial, kernel, stride, dilation, padding, groups)
    (2, 3, 4, (9, 8), (3, 3), 1, 1, 1, 1),
    (2, 4, 6, (11, 10), (3, 3), 2, 1, 1, 2),
    (1, 2, 2, (13, 12), (3, 3), 3, 2, 2, 1),
    (2, 6, 3, (7, 7), (2, 3), (1, 2), 1, (1, 0), 3),
    (7, 5, 16, (6, 6), (3, 3), 1, 1, 0, 1),  # 7 images: no block of images divides the batch evenly but 1 and 7
    (3, 2, 2, (7, 6), (1, 1), 1, 1, 0, 1),
    (2, 3, 4, (10,), (4,), 2, 1, 2, 1),
    (1, 2, 3, (5, 6, 4), (3, 2, 2), (1, 2, 1), 1, 1, 1),
    (2, 4, 4, (8, 8), (3, 3), 1, 1, (-1, 1, 2, 0), 1),  # torch-style flat padding, one side cropped
    (2, 4, 4, (8, 9), (3, 3), 1, 2, "same", 2),
    # outputs that see only padding: the input's gradient on that axis is all zeros (the crop exceeded it)
    (1, 1, 1, (1, 1), (1, 1), 6, 1, 2, 1),
    (1, 1, 2, (5, 2), (1, 1), (1, 3), 1, (2, -1, 0, 0), 1),
]


def torch_conv(x: torch.Tensor, w: torch.Tensor, stride, dilation, padding, groups) -> torch.Tensor:
    nd = w.ndim - 2
    conv = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[nd - 1]
    if isinstance(padding, tuple) and len(padding) == 2 * nd:  # flat and possibly negative: pad first
        return conv(torch.nn.functional.pad(x, padding), w, stride=stride, dilation=dilation, groups=groups)
    return conv(x, w, stride=stride, dilation=dilation, padding=padding, groups=groups)


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_conv_and_both_gradients_match_pytorch(case) -> None:
    n, cin, cout, spatial, kernel, stride, dilation, padding, groups = case
    rng = np.random.default_rng(len(spatial) * 100 + cin * 10 + cout)
    x = rng.standard_normal((n, cin, *spatial)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = tx.conv2d(tw, stride=stride, dilation=dilation, padding=padding, groups=groups)
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    px, pw = (
        torch.tensor(x, dtype=torch.float64, requires_grad=True),
        torch.tensor(w, dtype=torch.float64, requires_grad=True),
    )
    ref = torch_conv(px, pw, stride, dilation, padding, groups)
    (ref * torch.tensor(g, dtype=torch.float64)).sum().backward()
    assert px.grad is not None and pw.grad is not None and tx.grad is not None and tw.grad is not None
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_gradient_of_the_gradient_matches_pytorch() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    (gx,) = tx.conv2d(tw, stride=2, padding=1).square().sum().gradient(tx)  # recorded: differentiable again
    px, pw = (
        torch.tensor(x, dtype=torch.float64, requires_grad=True),
        torch.tensor(w, dtype=torch.float64, requires_grad=True),
    )
    pout = torch.nn.functional.conv2d(px, pw, stride=2, padding=1)
    (pgx,) = torch.autograd.grad(pout.square().sum(), px, create_graph=True)
    (gx.square().sum()).backward()
    pgx.square().sum().backward()
    assert tw.grad is not None and pw.grad is not None
    np.testing.assert_allclose(gx.numpy(), pgx.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_relu_gradient_is_zero_where_the_input_is_not_positive_even_for_nan_and_inf() -> None:
    x = Tensor([-1.0, 0.0, 2.0, 3.0], requires_grad=True)
    (x.relu() * Tensor([float("nan"), float("inf"), 5.0, float("-inf")])).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 5.0, -np.inf])  # PyTorch's threshold_backward


def test_conv_backward_kernels_are_vectorized_convolutions() -> None:
    """The backward of a padded 3x3 convolution schedules convolutions with vector lanes, and no kernel reads the
    input gradient's windows back (the window view's backward: a gather of 9x the input, then a fold)."""
    if not Device["CPU"].renderer.caps.vector_widths:
        pytest.skip("the CPU renderer declares no vector widths on this machine")
    x, w = Tensor.empty(4, 32, 16, 16, requires_grad=True), Tensor.empty(32, 32, 3, 3, requires_grad=True)
    g = Tensor.empty(4, 32, 16, 16)
    (x.conv2d(w, padding=1) * g).sum().backward()
    assert x.grad is not None and w.grad is not None
    kernels = [si for si in create_schedule([x.grad.lazydata, w.grad.lazydata]) if si.kind == "kernel"]
    convs = [si for si in kernels if build_kernel(si.ast, Device["CPU"].renderer).reduceops]
    big = [si for si in convs if si.ast.src[0].arg.st.size >= 32 * 9]  # the two convolutions, not the batch sum
    assert len(kernels) <= 8, [si.ast.src[0].arg.st.shape for si in kernels]
    assert len(big) == 2
    for si in big:
        assert build_kernel(si.ast, Device["CPU"].renderer).vector_axis() is not None

"""Mistakes a user makes with the API get an error that names the op and the fix (they were internal errors, or
silently gave a result), and inputs PyTorch takes as they are (lists for tensor operands, an int gradient) work."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, dtypes, nn
from lazy.device import DeviceError
from lazy.helpers import ArgumentError, ShapeError
from lazy.nn import optim


def test_shapes_and_axes_that_cannot_mean_what_was_asked_are_refused():
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ShapeError, match=r"pad_to: \(2, 2\) is smaller than \(3, 4\)"):
        a.pad_to(2, 2)  # (it cropped)
    assert a.pad_to(4, None).shape == (4, 4)
    for reduce in ("sum", "max", "mean", "std"):
        with pytest.raises(ArgumentError, match=r"axis \(0, -2\) names a dimension twice"):
            getattr(a, reduce)((0, -2))  # (it reduced axis 0 once)
    with pytest.raises(DeviceError, match="unknown device 'FOO'"):
        Tensor([1.0, 2.0], device=("CPU", "FOO"))  # (it read the CPU copy and never checked FOO)


def test_gradients_given_as_ints_or_lists_and_targets_that_are_not_tensors():
    x = Tensor.ones(3, requires_grad=True)
    (x * 2).backward(Tensor([1, 1, 1]))  # an int gradient of a float output is cast, as in PyTorch
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0, 2.0]
    y = Tensor.ones(3, requires_grad=True)
    (y * 2).backward([1.0, 2.0, 3.0])
    assert y.grad is not None and y.grad.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(TypeError, match=r"gradient: the targets must be Tensors, got list"):
        (x * 2).sum().gradient(x, [1.0])


def test_operands_given_as_lists_or_arrays_are_tensors_and_others_are_named():
    a = Tensor.ones(2, 2)
    assert (a @ [[1.0, 2.0], [3.0, 4.0]]).tolist() == [[4.0, 6.0], [4.0, 6.0]]
    assert (a @ np.eye(2, dtype=np.float32)).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert a.cat([[5.0, 6.0]]).shape == (3, 2)
    assert a.gather(0, [[1, 0]]).shape == (1, 2)
    assert a.masked_fill([[True, False], [False, True]], 5).tolist() == [[5.0, 1.0], [1.0, 5.0]]
    assert nn.Embedding(10, 4)([1, 2]).shape == (2, 4)
    for call, op in ((lambda: a @ "x", "matmul"), (lambda: a.cat("x"), "cat"),
                     (lambda: Tensor.ones(1, 1, 3, 3).conv2d({}), "conv2d")):  # fmt: skip
        with pytest.raises(TypeError, match=rf"{op}: .* cannot combine a Tensor with"):
            call()


def test_layer_and_optimizer_arguments_are_checked_when_made():
    for make, message in (
        (lambda: nn.Linear(0, 2), "Linear: in_features must be an int >= 1, got 0"),
        (lambda: nn.Conv2d(3, -1, 3), "Conv2d: out_channels must be an int >= 1, got -1"),
    ):
        with pytest.raises(ShapeError, match=message):
            make()
    for layer, x, message in (
        (nn.GroupNorm(2, 4), Tensor.ones(2, 6, 3), r"GroupNorm: expects \(N, 4, ...\)"),
        (nn.InstanceNorm(3, affine=False), Tensor.ones(1, 6, 4), r"InstanceNorm: expects \(N, 3, ...\)"),
        (nn.RMSNorm(4), Tensor.ones(2, 5), "RMSNorm: expects a last axis of 4"),
    ):
        with pytest.raises(ShapeError, match=message):  # (without affine parameters, they grouped wrongly, silently)
            layer(x)
    w = Tensor.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match=r"SGD: got a dict \(a state dict\?\)"):
        optim.SGD({"w": w})
    with pytest.raises(TypeError, match="SGD: parameters must be Tensors, got float"):
        optim.SGD([1.0])
    with pytest.raises(ValueError, match="the learning rate must be a number >= 0, got -1"):
        optim.SGD([w], lr=-1)
    assert Tensor.ones(2, 3, dtype=dtypes.int32).sum((0, 1)).item() == 6


def test_batchnorm_with_momentum_none_keeps_a_cumulative_average_and_sgd_checks_nesterov():
    """momentum=None is PyTorch's cumulative average of the batches' statistics (it failed at the first call)."""
    torch = pytest.importorskip("torch", reason="the reference for BatchNorm's running statistics")
    batches = [np.random.default_rng(i).standard_normal((4, 3, 2, 2)).astype(np.float32) for i in range(3)]
    bn, want = nn.BatchNorm(3, momentum=None), torch.nn.BatchNorm2d(3, momentum=None)
    with Tensor.train():
        for batch in batches:
            bn(Tensor(batch)).realize()
            want(torch.from_numpy(batch))
    np.testing.assert_allclose(bn.running_mean.numpy(), want.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), want.running_var.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="nesterov=True needs a momentum above 0"):
        optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.1, nesterov=True)
    with pytest.raises(ArgumentError, match="unfold: step must be at least 1, got 0"):
        Tensor.ones(5).unfold(0, 2, 0)


def test_a_transposed_convolution_padded_past_its_output_names_the_output_size():
    with pytest.raises(ShapeError, match=r"conv_transpose2d: the output would be \(-3, 4\)"):
        Tensor.ones(1, 1, 1, 4).conv_transpose2d(Tensor.ones(1, 1, 3, 3), padding=(3, 1))


def test_integer_arguments_of_other_types_are_named_and_einsum_names_its_ellipsis():
    a = Tensor.ones(5)
    for call, message in (
        (lambda: a.topk(1.5), "topk: k must be an int, got float 1.5"),
        (lambda: Tensor.randperm(()), r"randperm: n must be an int, got tuple \(\)"),
        (lambda: Tensor.ones(2, 2).diagonal("x"), "diagonal: offset must be an int, got str 'x'"),
        (lambda: a.multinomial("x"), "multinomial: num_samples must be an int"),
    ):
        with pytest.raises(ArgumentError, match=message):
            call()
    assert a.topk(np.int64(2))[0].shape == (2,)  # numpy's ints are ints
    with pytest.raises(ShapeError, match=r"einsum: an axis of '\.\.\.' \(1 from the end\) has sizes 3 and 2"):
        Tensor.einsum("...i,...i->...", Tensor.ones(3, 4), Tensor.ones(2, 4))


def test_lists_of_numpy_arrays_make_tensors_and_ragged_lists_are_named():
    t = Tensor([np.ones(2, np.float32), np.zeros(2, np.float32)])  # (a list of arrays, as PyTorch takes)
    assert t.shape == (2, 2) and t.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="the nested lists are not rectangular"):
        Tensor([[1.0, 2.0], [3.0]])

"""Issue 9, items 2 and 4: `backward()` fills `.grad` of every float tensor of the graph whose `requires_grad` is not
False (tinygrad 0.14), `Tensor.is_param` and optimizers over such tensors, and comparisons inside a differentiated
function giving zero gradients (tensors, not None)."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor, nn

RNG = np.random.default_rng(0)


def data(*shape: int) -> Tensor:
    return Tensor(RNG.standard_normal(shape).astype(np.float32))


def test_backward_fills_default_tensors():
    x = Tensor([[1.0, 2.0]])  # requires_grad None: the default
    w = Tensor([[1.0, -1.0], [2.0, 3.0]])
    (x.dot(w).relu().sum()).backward()
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 5.0]])  # relu passes both columns (x @ w = [5, 5])
    np.testing.assert_allclose(w.grad.numpy(), [[1.0, 1.0], [2.0, 2.0]])


def test_backward_fills_intermediates_and_not_false_or_int_tensors():
    x = Tensor([1.0, 2.0, 3.0])
    y = x * 2  # an intermediate float tensor gets its .grad too, as in tinygrad
    c = Tensor([3.0, 4.0, 5.0], requires_grad=False)
    i = Tensor([1, 2, 3])  # an int tensor: no gradient (tinygrad fills float tensors only)
    (y * c * i.float()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 16.0, 30.0])
    np.testing.assert_allclose(y.grad.numpy(), [3.0, 8.0, 15.0])
    assert c.grad is None and i.grad is None


@pytest.mark.parametrize(
    "make,shape",
    [
        (lambda: nn.LayerNorm(6), (2, 3, 6)),
        (lambda: nn.GroupNorm(2, 4), (2, 4, 3, 3)),
        (lambda: nn.InstanceNorm(4), (2, 4, 3, 3)),
        (lambda: nn.RMSNorm(6), (2, 3, 6)),
    ],
    ids=["layernorm", "groupnorm", "instancenorm", "rmsnorm"],
)
def test_norm_layers_fill_input_and_weight_grads(make, shape):
    layer, x = make(), data(*shape)
    (layer(x) * data(*shape)).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert np.isfinite(x.grad.numpy()).all() and np.abs(x.grad.numpy()).sum() > 0
    assert layer.weight.grad is not None and layer.weight.grad.shape == layer.weight.shape
    if getattr(layer, "bias", None) is not None:
        assert layer.bias.grad is not None


def test_is_param_follows_tinygrad():
    assert Tensor([1.0, 2.0]).is_param and Tensor([1.0, 2.0]).clone().is_param  # a clone of a constant is one
    buf = Tensor.zeros(2).is_param_(False)
    assert not buf.is_param and buf.requires_grad is False
    assert not buf.clone().is_param and not buf.to(buf.device).is_param  # clone() and to() keep it
    assert buf.is_param_(True).is_param and buf.requires_grad is None
    w = Tensor([1.0], requires_grad=True).is_param_(True)
    assert w.requires_grad is True  # marking a parameter again leaves an explicit requires_grad alone


def test_optimizer_takes_default_and_cloned_tensors():
    w = Tensor([1.0, 2.0]).clone()
    buf = Tensor.zeros(2).is_param_(False)
    opt = nn.optim.SGD([w, buf], lr=0.5)
    assert opt.params == [w] and opt.buffers == [buf]
    with Tensor.train():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])  # w - 0.5 * 2w
    assert buf.grad is None


def test_comparisons_in_gradient_give_zero_tensors():
    a, b = Tensor([1.0, 2.0, 3.0]), Tensor([2.0, 2.0, 2.0])
    ga, gb = ((a < b).sum() + (a * (a != b)).sum()).gradient(a, b)
    np.testing.assert_allclose(ga.numpy(), [1.0, 0.0, 1.0])
    np.testing.assert_allclose(gb.numpy(), [0.0, 0.0, 0.0])
    ga, gb = ((a != b).where(a, b * 2) + (a < b).sum()).sum().gradient(a, b)
    np.testing.assert_allclose(ga.numpy(), [1.0, 0.0, 1.0])
    np.testing.assert_allclose(gb.numpy(), [0.0, 2.0, 0.0])


def test_comparisons_in_backward_give_zero_grads():
    a, b = Tensor([1.0, 2.0, 3.0]), Tensor([2.0, 2.0, 2.0])
    ((a != b).float() * 3 + a + (a < b).sum()).sum().backward()
    assert a.grad is not None and b.grad is not None  # b is used only through comparisons: zeros, not None
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(b.grad.numpy(), [0.0, 0.0, 0.0])


def test_backward_of_a_comparison_alone_raises():
    a, b = Tensor([1.0, 2.0]), Tensor([2.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        (a < b).sum().backward()

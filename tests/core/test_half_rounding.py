"""Half and bfloat16 results rounded once, from float32 work, as PyTorch computes them: gradients of broadcast
tensors, einsum, linear with a bias, the activations and inverse functions, the functional batchnorm, and floor
division by Python numbers a half tensor cannot hold. Found by fuzzing against PyTorch."""

import numpy as np
import pytest

from lazy import Tensor, dtypes

torch = pytest.importorskip("torch", reason="compares with PyTorch's half results")


def test_broadcast_gradient_sums_in_float32():
    # a bias's gradient over 512 rows was summed in half: 37 ulp off
    g = np.random.default_rng(0).standard_normal((512, 8)).astype(np.float16)
    b = Tensor(np.zeros(8, np.float16), requires_grad=True)
    ((Tensor(np.zeros((512, 8), np.float16)) + b) * Tensor(g)).sum().backward()
    assert b.grad.dtype == dtypes.float16
    np.testing.assert_array_equal(b.grad.numpy(), g.astype(np.float64).sum(0).astype(np.float32).astype(np.float16))


def test_einsum_rounds_once():
    rng = np.random.default_rng(0)
    a, c = rng.standard_normal((4, 64)).astype(np.float16), rng.standard_normal((64, 4)).astype(np.float16)
    product = Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(c)).numpy()
    np.testing.assert_array_equal(product, (Tensor(a) @ Tensor(c)).numpy())
    big = Tensor.einsum("i,i->", Tensor(np.float16([300, -300])), Tensor(np.float16([300, 300])))
    assert big.dtype == dtypes.float16 and big.item() == 0.0  # (300 * 300 overflows half: it was NaN)


def test_linear_adds_its_bias_before_rounding():
    out = Tensor(np.float16([[2, 1]])).linear(Tensor(np.float16([[32768, 16]])).T, Tensor(np.float16([-100])))
    assert out.dtype == dtypes.float16 and out.item() == 65440.0  # (the product alone, 65552, is inf in half)


@pytest.mark.parametrize("name", ["elu", "silu", "mish", "asinh", "logsigmoid", "log1p", "atan"])
def test_half_activations_round_once(name):
    x = np.float16([-0.0017128, -0.01, -1.28, -17.4, -0.03653, 0.5, 3.0])
    got = getattr(Tensor(x), name)().numpy()
    torch_name = {"elu": "elu", "silu": "silu", "mish": "mish", "logsigmoid": "logsigmoid"}.get(name)
    fn = getattr(torch.nn.functional, torch_name) if torch_name else getattr(torch, name)
    want = fn(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, want)


def test_functional_batchnorm_in_float32():
    x = Tensor(np.float16([[[[30000.0]]]]))
    out = x.batchnorm(Tensor(np.float16([4.0])), None, Tensor(np.float16([-30000.0])), Tensor(np.float16([0.25])))
    assert out.dtype == dtypes.float16 and out.item() == 60000.0  # ((x - mean) * weight overflowed half: inf)


def test_half_floor_division_by_python_numbers():
    # in float32 with the scalar as float32 (PyTorch's), not rounded to half first: h // 0.1 was 9 for 0.9, not 8.
    # (numpy's float32 floor division is the reference: PyTorch's own vectorized half path gives 5 // 0.1 = 50, its
    # one-element path 49, Python 49)
    h = np.float16([0.9, 0.7622, 5.0, -3.3])
    for s in (0.1, 0.001, 1 / 3):
        wide, scalar = h.astype(np.float32), np.float32(s)
        np.testing.assert_array_equal((Tensor(h) // s).numpy(), np.floor_divide(wide, scalar).astype(np.float16))
        got = Tensor(h).div(s, rounding_mode="trunc").numpy()
        np.testing.assert_array_equal(got, np.trunc(wide / scalar).astype(np.float16))


def test_half_convolution_weight_gradient_rounds_once():
    rng = np.random.default_rng(3)
    xh, wh = (
        rng.standard_normal((4, 8, 10, 10)).astype(np.float16),
        (rng.standard_normal((6, 8, 3, 3)) / 8).astype(np.float16),
    )
    x, w = Tensor(xh, requires_grad=True), Tensor(wh, requires_grad=True)
    x.conv2d(w, padding=1).square().sum().backward()
    exact_x, exact_w = torch.from_numpy(xh).double().requires_grad_(), torch.from_numpy(wh).double().requires_grad_()
    torch.nn.functional.conv2d(exact_x, exact_w, padding=1).square().sum().backward()
    half_x, half_w = torch.from_numpy(xh).requires_grad_(), torch.from_numpy(wh).requires_grad_()
    torch.nn.functional.conv2d(half_x, half_w, padding=1).square().sum().backward()
    ours = np.abs(w.grad.numpy().astype(np.float64) - exact_w.grad.numpy()).max()
    theirs = np.abs(half_w.grad.double().numpy() - exact_w.grad.numpy()).max()
    assert w.grad.dtype == dtypes.float16 and ours <= theirs * 1.01


def test_half_attention_rounds_once():
    rng = np.random.default_rng(0)
    q, k, v = [rng.standard_normal((2, 4, 16, 32)).astype(np.float16) for _ in range(3)]
    exact = torch.nn.functional.scaled_dot_product_attention(*[torch.from_numpy(a).double() for a in (q, k, v)],
                                                            is_causal=True).numpy()  # fmt: skip
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)
    # (the scores were rounded to half before the softmax: 10x PyTorch's error)
    assert out.dtype == dtypes.float16 and np.abs(out.numpy().astype(np.float64) - exact).max() < 1.5e-3
    with pytest.raises(Exception, match="multiple of the 2 key/value heads"):
        Tensor(q[:, :3]).scaled_dot_product_attention(Tensor(k[:, :2]), Tensor(v[:, :2]), enable_gqa=True)

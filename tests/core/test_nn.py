"""nn layers and optimisers against numpy re-implementations, on the PYTHON reference device."""

import numpy as np
import pytest

from lazy import Context, Tensor, nn
from lazy.nn.optim import LARS
from lazy.nn.state import get_parameters


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


rng = np.random.default_rng(0)
X = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)


def test_batchnorm_train_updates_running_stats_and_eval_uses_them():
    bn = nn.BatchNorm2d(3)
    with Tensor.train():
        out = bn(Tensor(X)).numpy()
    mean, var = X.mean((0, 2, 3)), X.var((0, 2, 3))
    expected = (X - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    n = X.size // 3
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1
    with Tensor.train(False):
        ev = bn(Tensor(X)).numpy()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    np.testing.assert_allclose(ev, (X - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5), rtol=1e-4)


def test_layernorm_rmsnorm_groupnorm_instancenorm():
    x = X.reshape(4, 3, 4)
    ln = nn.LayerNorm(4)
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln(Tensor(x)).numpy(), (x - m) / np.sqrt(v + 1e-5), rtol=1e-4, atol=1e-5)
    rms = nn.RMSNorm(4)
    np.testing.assert_allclose(rms(Tensor(x)).numpy(), x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6), rtol=1e-4)
    gn = nn.GroupNorm(1, 3)
    flat = X.reshape(4, -1)
    expected = ((flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)).reshape(X.shape)
    np.testing.assert_allclose(gn(Tensor(X)).numpy(), expected, rtol=1e-4, atol=1e-5)
    inorm = nn.InstanceNorm(3)
    per = X.reshape(4, 3, -1)
    expected = ((per - per.mean(-1, keepdims=True)) / np.sqrt(per.var(-1, keepdims=True) + 1e-5)).reshape(X.shape)
    np.testing.assert_allclose(inorm(Tensor(X)).numpy(), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="LayerNorm"):
        ln(Tensor(X))
    with pytest.raises(ValueError, match="groups"):
        nn.GroupNorm(2, 3)


def test_embedding_picks_rows_and_its_gradient_hits_only_used_rows():
    emb = nn.Embedding(5, 3)
    emb.weight.requires_grad = True
    idx = np.array([[0, 3], [3, 4]], dtype=np.int32)
    out = emb(Tensor(idx))
    np.testing.assert_allclose(out.numpy(), emb.weight.numpy()[idx], rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy().sum(1), np.array([1, 0, 0, 2, 1]) * 3.0)


def test_dropout_only_in_training():
    d = nn.Dropout(0.5)
    x = Tensor.ones(64)
    np.testing.assert_array_equal(d(x).numpy(), np.ones(64))
    with Tensor.train():
        kept = d(x).numpy()
    assert set(np.unique(kept)) <= {0.0, 2.0} and 0 < (kept == 0).sum() < 64
    with pytest.raises(ValueError):
        nn.Dropout(1.0)


def test_lars_step_matches_numpy():
    w0 = rng.standard_normal(6).astype(np.float32)
    w = Tensor(w0, requires_grad=True)
    opt = LARS([w], lr=0.1, momentum=0.9, weight_decay=1e-4)
    with Tensor.train():
        (w * w).sum().backward()
        opt.step()
    g = 2 * w0
    ratio = 0.001 * np.linalg.norm(w0) / (np.linalg.norm(g) + 1e-4 * np.linalg.norm(w0))
    expected = w0 - 0.1 * (g + 1e-4 * w0) * ratio
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5)


def test_layers_train_end_to_end():
    Tensor.manual_seed(0)
    layers = [nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2)]
    params = get_parameters(layers)
    from lazy.nn.optim import Adam

    opt = Adam(params, lr=0.05)
    x = Tensor(rng.standard_normal((16, 4)).astype(np.float32))
    y = Tensor((rng.standard_normal(16) > 0).astype(np.int32))
    losses = []
    with Tensor.train():
        for _ in range(15):
            opt.zero_grad()
            loss = x.sequential([layers[0], Tensor.relu, layers[1], layers[2]]).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.7


def test_random_creators_make_leaves_so_backward_stops_at_the_parameters():
    """rand, randn, uniform, normal, randint, scaled/glorot/kaiming initializers (and so every layer's parameters)
    return tensors without a recorded graph: backward fills the parameter's gradient and stops there. With the
    graph of their making kept, each training step also differentiated the initializer (an Embedding table's
    gradient scaled into a fresh 147 MB buffer per step, and every layer's weight gradient copied once more)."""
    makers = [lambda: Tensor.rand(3, 4), lambda: Tensor.randn(3, 4), lambda: Tensor.uniform(3, 4, low=-2, high=2),
              lambda: Tensor.normal(3, 4, std=0.1), lambda: Tensor.scaled_uniform(3, 4),
              lambda: Tensor.glorot_uniform(3, 4), lambda: Tensor.kaiming_uniform(3, 4),
              lambda: Tensor.kaiming_normal(3, 4), lambda: nn.Linear(4, 3).weight,
              lambda: nn.Embedding(3, 4).weight]  # fmt: skip
    for make in makers:
        w = make()
        assert w._ctx is None and w.requires_grad is not False
        (w * Tensor.ones(3, 4)).sum().backward()
        assert w.grad is not None
        np.testing.assert_array_equal(w.grad.numpy(), np.ones((3, 4), np.float32))
    assert Tensor.rand(2, requires_grad=True).requires_grad is True
    assert Tensor.randint(3, 4, high=5)._ctx is None


def test_repr_of_a_tensor_with_a_gradient():
    w = Tensor.ones(3, 4, requires_grad=True)
    (w * 2).sum().backward()
    assert "with grad <LB" in repr(w)  # (it raised: a Tensor's truth value is ambiguous)

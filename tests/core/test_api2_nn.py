"""nn and nn-ops behaviour of tinygrad 0.14 and PyTorch (issue 9, items 3, 6, 7 and 9): convolutions with
padding="same"/"valid", load_state_dict's casts and messages, training mode from `Context(TRAINING=1)`, one_hot's
checks, uint8 bilinear resampling and float16 matmul as PyTorch rounds them, and the exception types tinygrad raises.
PYTHON device; the comparisons with PyTorch run where it is installed (CI installs it)."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Context, Tensor, dtypes, nn
from lazy.nn.state import get_state_dict, load_state_dict

RNG = np.random.default_rng(9)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here; CI installs it")


# -- convolution padding ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spatial, kernel, dilation",
    [
        ((7,), (3,), 1),  # odd input
        ((8,), (4,), 2),  # even kernel, dilated: the extra padding goes after
        ((5, 6), (3, 4), (1, 2)),
        ((3, 3), (7, 7), 1),  # a kernel larger than the input
        ((5,), (6,), 3),
    ],
)
@pytest.mark.parametrize("padding", ["same", "valid", "SAME"])
@pytest.mark.filterwarnings("ignore:Using padding='same'")  # (PyTorch's note that it pads a copy)
def test_conv_string_padding_matches_pytorch(spatial, kernel, dilation, padding):
    torch = _torch()
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    w = RNG.standard_normal((4, 3, *kernel)).astype(np.float32)
    conv = torch.nn.functional.conv1d if len(spatial) == 1 else torch.nn.functional.conv2d
    try:
        want = conv(torch.tensor(x), torch.tensor(w), padding=padding.lower(), dilation=dilation).numpy()
    except RuntimeError:  # "valid" with a kernel larger than the input
        with pytest.raises(ValueError, match="does not fit"):
            Tensor(x).conv2d(Tensor(w), padding=padding, dilation=dilation)
        return
    got = Tensor(x).conv2d(Tensor(w), padding=padding, dilation=dilation).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_layers_take_string_padding():
    layer = nn.Conv1d(2, 3, 5, padding="same", dilation=2)
    assert layer(Tensor.ones(1, 2, 9)).shape == (1, 3, 9)
    layer2 = nn.Conv2d(2, 3, (3, 2), padding="valid")
    assert layer2(Tensor.ones(1, 2, 6, 5)).shape == (1, 3, 4, 4)
    assert nn.Conv2d(1, 1, 3, padding="same")(Tensor.ones(1, 1, 4, 7)).shape == (1, 1, 4, 7)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: nn.Conv2d(1, 1, 3, stride=2, padding="same"), "needs stride 1"),
        (lambda: nn.Conv2d(1, 1, 3, padding="full"), "'full' is not valid"),
        (lambda: nn.Conv1d(1, 1, 3, stride=(2,), padding="same"), "needs stride 1"),
        (lambda: Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(1, 1, 3, 3), stride=2, padding="same"), "needs stride 1"),
        (lambda: Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(1, 1, 3, 3), padding="circular"), "not valid"),
        (lambda: nn.ConvTranspose2d(1, 1, 3, padding="same"), "an int or a sequence"),
    ],
)
def test_bad_string_padding_is_a_value_error_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# -- load_state_dict ---------------------------------------------------------------------------------------------------


def test_load_state_dict_casts_to_the_models_dtype():
    bn = nn.BatchNorm(3)
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.dtype == dtypes.int64  # PyTorch's buffer
    state = dict(get_state_dict(nn.BatchNorm(3)))
    state["num_batches_tracked"] = Tensor([5.0])  # saved as float, and as (1,) rather than ()
    loaded = load_state_dict(bn, state)
    assert len(loaded) == 5
    assert bn.num_batches_tracked.dtype == dtypes.int64 and bn.num_batches_tracked.shape == ()
    assert bn.num_batches_tracked.item() == 5
    lin = nn.Linear(2, 3)
    load_state_dict(lin, {"weight": Tensor.ones(3, 2, dtype=dtypes.float16), "bias": Tensor.zeros(3)})
    assert lin.weight.dtype == dtypes.float32
    np.testing.assert_array_equal(lin.weight.numpy(), np.ones((3, 2)))


def test_load_state_dict_keys_and_shapes_as_tinygrad():
    with pytest.raises(
        ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(3, 2\), but found \(2, 3\)"
    ):
        load_state_dict(nn.Linear(2, 3), {"weight": Tensor.ones(2, 3), "bias": Tensor.ones(3)})
    with pytest.raises(KeyError, match="'bias'"):
        load_state_dict(nn.Linear(2, 3), {"weight": Tensor.ones(3, 2)})
    lin = nn.Linear(2, 3)
    bias = lin.bias
    load_state_dict(lin, {"weight": Tensor.ones(3, 2)}, strict=False)  # missing: left as it is
    assert lin.bias is bias
    state = {"weight": Tensor.ones(3, 2), "bias": Tensor.ones(3), "extra": Tensor.ones(1)}
    load_state_dict(lin, state, consume=True)  # an entry the model lacks is ignored, as tinygrad does
    assert list(state) == ["extra"]


# -- training mode -----------------------------------------------------------------------------------------------------


def test_batchnorm_trains_under_the_training_setting():
    x = Tensor(RNG.standard_normal((4, 2, 3, 3)).astype(np.float32) * 3 + 1)
    for switch in (Tensor.train, lambda: Context(TRAINING=1)):
        bn = nn.BatchNorm2d(2)
        with switch():
            out = bn(x).numpy()
        np.testing.assert_allclose(out.mean((0, 2, 3)), 0, atol=1e-5)  # batch statistics
        assert bn.num_batches_tracked.item() == 1
        assert not np.allclose(bn.running_mean.numpy(), 0)
    eval_out = nn.BatchNorm2d(2)(x).numpy()  # outside: the running statistics (0 and 1) leave x as it is
    np.testing.assert_allclose(eval_out, x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-5)


def test_an_optimizer_steps_under_the_training_setting():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    with Context(TRAINING=1):
        opt.step()
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])


# -- one_hot, embedding ------------------------------------------------------------------------------------------------


def test_one_hot_checks_its_classes():
    with Context(CHECK_INDEX=0):  # (the test suite runs with the check on)
        np.testing.assert_array_equal(Tensor([0, 5, -1]).one_hot(3).numpy(), [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(RuntimeError, match="integer class indices"):  # tinygrad and PyTorch: RuntimeError
        Tensor([0.0, 1.0]).one_hot(3)
    with pytest.raises(RuntimeError, match="integer class indices"):
        Tensor([True, False]).one_hot(2)
    with pytest.raises(ValueError, match="num_classes must be an int >= 0"):
        Tensor([0, 1]).one_hot(-2)  # (-1 is the default: the largest index + 1)
    with pytest.raises(RuntimeError, match="num_classes must be an int >= 0"):
        Tensor([0, 1]).one_hot(2.0)
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match="one_hot: index 5"):
        Tensor([0, 5]).one_hot(3)


def test_embedding_refuses_float_indices():
    with pytest.raises(TypeError, match="integer dtype"):  # (tinygrad: TypeError)
        nn.Embedding(4, 2)(Tensor([0.0, 1.0]))


# -- rounding as PyTorch -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, out, align_corners",
    [((4, 5), (7, 9), False), ((8, 8), (3, 5), False), ((5, 6), (10, 12), True), ((16, 12), (7, 30), False)],
)
def test_bilinear_uint8_rounds_as_pytorch(size, out, align_corners):
    """PyTorch resamples uint8 images with 14- or 15-bit integer weights, the last axis first, rounding to nearest
    after each axis; resampling in float and truncating was off by one in about a third of the pixels."""
    torch = _torch()
    img = RNG.integers(0, 256, (2, 3, *size), dtype=np.uint8)
    want = torch.nn.functional.interpolate(torch.tensor(img), size=out, mode="bilinear", align_corners=align_corners)
    got = Tensor(img).interpolate(out, mode="linear", align_corners=align_corners)
    assert got.dtype == dtypes.uint8
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_float16_matmul_accumulates_in_float32():
    torch = _torch()
    a, b = (RNG.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    got = Tensor(a) @ Tensor(b)
    assert got.dtype == dtypes.float16
    want = (torch.tensor(a) @ torch.tensor(b)).float().numpy()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)  # one float16 step at each result
    # accumulated in float32 and rounded once: within one step of the exact product, and of PyTorch's (a half
    # accumulator would be many steps off); a fixed atol failed at results of 8-16, where one step is 0.0078
    assert np.all(np.abs(got.numpy().astype(np.float64) - exact) <= ulp), "more than one float16 step off"
    assert np.all(np.abs(got.numpy().astype(np.float64) - want) <= ulp), "more than one float16 step from PyTorch"


# -- exception types ---------------------------------------------------------------------------------------------------

X = np.array([[1.0, 2.0, 3.0], [0.5, 0.1, -1.0]], np.float32)
IDX = np.array([[0, 1, 1], [1, 0, 0]], np.int32)  # valid along dim 0 (the suite runs with LAZY_CHECK_INDEX=1)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, i: x.scatter_reduce(0, i, x, reduce="bad"), RuntimeError, "reduce must be"),
        (lambda x, i: x.scatter(0, i, x, reduce="bad"), TypeError, "reduce must be"),
        (lambda x, i: x.scatter(0, i, Tensor([[1.0, 2.0]])), RuntimeError, "no larger than src"),
        (lambda x, i: x.scatter(0, i.float(), x), RuntimeError, "integer dtype"),
        (lambda x, i: x.gather(0, i.float()), RuntimeError, "integer dtype"),
        (lambda x, i: x.gather(0, Tensor([[0, 1, 1, 0]])), AssertionError, "larger than"),
        (lambda x, i: x.reshape(1, 1, 2, 3).interpolate((4, 4), mode="cubic"), AssertionError, "mode must be"),
        (lambda x, i: x.reshape(1, 1, 2, 3).interpolate((4, -1)), AssertionError, "invalid size"),
        (lambda x, i: x.reshape(1, 1, 2, 3).max_pool2d(kernel_size=5), AssertionError, "does not fit"),
        (lambda x, i: x.cross_entropy(Tensor([2, 0]), label_smoothing=2.0), AssertionError, "label_smoothing"),
        (lambda x, i: x.cross_entropy(Tensor([2, 0, 1])), RuntimeError, "cross_entropy"),
        (
            lambda x, i: x.reshape(1, 2, 3).scaled_dot_product_attention(
                x.reshape(1, 2, 3), x.reshape(1, 2, 3), attn_mask=Tensor.ones(2, 2), is_causal=True
            ),
            RuntimeError,
            "is_causal",
        ),  # fmt: skip
        (lambda x, i: x.reshape(1, 2, 1, 3).conv2d(Tensor.ones(1, 2, 1, 1), groups=0), AssertionError, "groups"),
        (lambda x, i: nn.LayerNorm(4)(x), AssertionError, "normalized shape"),
    ],
)
def test_errors_are_the_types_tinygrad_raises(call, error, message):
    with pytest.raises(error, match=message):
        call(Tensor(X), Tensor(IDX))


def test_cross_entropy_ignores_class_indices_out_of_range_as_tinygrad():
    """tinygrad one-hots the labels, so a label outside the classes counts for nothing (LAZY_CHECK_INDEX=1 refuses
    it with an IndexError instead)."""
    x = Tensor(X)
    with Context(CHECK_INDEX=0):
        np.testing.assert_allclose(x.cross_entropy(Tensor([5, 0])).numpy(), 0.3192003667354584, rtol=1e-6)
    with Context(CHECK_INDEX=1), pytest.raises(IndexError, match="index 5"):
        x.cross_entropy(Tensor([5, 0]))


def test_found_running_tinygrads_own_tests():
    """Differences that tinygrad 0.14's test_ops.py found: one_hot's default class count, initialisers with a negative
    size, an unknown dtype name (tinygrad: AttributeError), scatter's src rules."""
    np.testing.assert_array_equal(Tensor([0, 2, 1]).one_hot().numpy(), np.eye(3, dtype=np.int32)[[0, 2, 1]])
    for init in (Tensor.glorot_uniform, Tensor.kaiming_uniform, Tensor.kaiming_normal):
        with pytest.raises(ValueError, match="negative"):
            init(-3, 2)
    with pytest.raises(AttributeError, match="unknown dtype"):
        Tensor([1, 2]).sum(dtype="")
    x, index = Tensor.zeros(2, 3), Tensor([[0, 1, 2], [2, 1, 0]])
    with pytest.raises(TypeError, match="scalar src"):
        x.scatter(1, index, Tensor.ones(2, 3), reduce="add")
    with pytest.raises(RuntimeError, match="cast src"):
        x.half().scatter(1, index, Tensor.ones(2, 3))
    with pytest.raises(RuntimeError, match="cast src"):
        x.half().scatter_reduce(1, index, Tensor.ones(2, 3), "sum")
    np.testing.assert_array_equal(x.scatter(1, index, 2.0, reduce="add").numpy(), np.full((2, 3), 2.0))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_statistics_are_taken_in_float32(dtype):
    """Squared deviations of half values of a few hundred overflow half (300^2 > 65504): var, std, layernorm and
    the norm layers took them in half and gave inf or NaN. They compute in float32 and round once, as PyTorch."""
    torch = _torch()
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((2, 4, 3, 5)) * 300).astype(np.float32)
    x, t = Tensor(a).cast(getattr(dtypes, dtype)), torch.tensor(a).to(getattr(torch, dtype))

    def close(got, want):
        assert got.dtype == x.dtype
        np.testing.assert_allclose(got.float().numpy(), want.detach().float().numpy(), rtol=1e-2, atol=1e-2)

    close(x.var(), t.var())
    close(x.std(axis=(1, 3)), t.std(dim=(1, 3)))
    close(x.norm(axis=-1), torch.linalg.vector_norm(t, dim=-1))
    close(x.layernorm(), torch.nn.functional.layer_norm(t.float(), (5,)).to(t.dtype))
    layers = [(nn.LayerNorm((3, 5)), torch.nn.LayerNorm((3, 5))), (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
              (nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)), (nn.RMSNorm(5), torch.nn.RMSNorm(5))]  # fmt: skip
    for ours, theirs in layers:
        with Tensor.train():
            got = ours(x)
        close(got, theirs(t.float()).to(t.dtype))


def test_cross_entropy_with_a_masked_class_is_finite():
    """A logit of -inf (a masked class) with class-index targets: the loss is the target's log-probability, finite
    unless the target is the masked class (inf) or label smoothing spreads onto it (inf), as PyTorch's; it was NaN,
    from 0 * -inf in the one-hot product. Gradients match too."""
    torch = _torch()
    x = np.array([[0.0, -np.inf, 1.0], [2.0, 1.0, -np.inf], [0.5, 0.25, 0.0]], dtype=np.float32)
    for y, smoothing in [([0, 1, 2], 0.0), ([0, 1, 2], 0.1), ([1, 0, 2], 0.0)]:
        tx, lx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(y), label_smoothing=smoothing, reduction="none")
        got = lx.cross_entropy(Tensor(y), label_smoothing=smoothing, reduction="none")
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6)  # (inf where PyTorch has inf)
    tx, lx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    torch.nn.functional.cross_entropy(tx, torch.tensor([0, 1, 2])).backward()
    lx.cross_entropy(Tensor([0, 1, 2])).backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_losses_at_their_edges_have_pytorchs_finite_gradients():
    """BCE of a saturated sigmoid (probabilities exactly 0 and 1) and smooth L1 with beta 0 (l1): PyTorch's values
    and gradients, where the untaken branches' infinite slopes made them NaN."""
    import torch

    logits = np.array([20.0, -20.0, 0.5, -0.3], np.float32)
    target = np.array([1.0, 0.0, 1.0, 0.0], np.float32)
    x = Tensor(logits, requires_grad=True)
    loss = x.sigmoid().binary_crossentropy(Tensor(target))
    loss.backward()
    tx = torch.tensor(logits, requires_grad=True)
    want = torch.nn.functional.binary_cross_entropy(tx.sigmoid(), torch.tensor(target))
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-6)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-12)
    p = Tensor([0.0, 1.0, 0.3])  # probabilities at the clamp: PyTorch's 100 per saturated wrong term
    np.testing.assert_allclose(p.binary_crossentropy(Tensor([1.0, 0.0, 1.0]), "none").numpy(), [100, 100, 1.2039728])
    d = np.array([0.5, -2.0, 3.0], np.float32)
    y = Tensor(d, requires_grad=True)
    y.smooth_l1_loss(Tensor.zeros(3), beta=0.0, reduction="sum").backward()
    assert y.grad is not None
    np.testing.assert_array_equal(y.grad.numpy(), np.sign(d))


def test_an_optimizer_takes_its_parameters_from_a_generator():
    w, b = Tensor.ones(3, requires_grad=True), Tensor.zeros(2, requires_grad=True)
    for make in (nn.optim.SGD, nn.optim.Adam, nn.optim.LAMB):
        assert len(make((p for p in (w, b)), lr=0.1).params) == 2

"""tinygrad 0.14's random numbers (issue 9, item 8): after `manual_seed(s)`, rand, randn, randint, randperm, dropout
and multinomial give tinygrad's numbers (its counter-based Threefry generator: per-device key and 64-bit counter);
creation functions refuse unknown keyword arguments; `from_blob` copies host memory; `arange` picks int or long as
tinygrad does. The reference numbers were printed by tinygrad 0.14 (and JAX, for the raw Threefry words). PYTHON
device, plus each compiled device that is installed."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from lazy import Context, Device, Tensor, dtypes, jit
from lazy.tensor_create import ArgumentError

COMPILED = [d for d in ("CPU", "LLVM") if d in Device.specs() and Device.probe(d)[0]]


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield
    Tensor.manual_seed(0)  # tests reseed: leave the usual start behind, so test order does not matter


# -- the generator ----------------------------------------------------------------------------------------------------


def test_threefry_words_match_jax():
    """JAX's threefry_2x32 under key (0, 1337) of the counters 0..19, split in halves (from tinygrad's own test)."""
    counts0, counts1 = Tensor.arange(20, dtype=dtypes.uint32).chunk(2)
    words = Tensor._threefry_random_bits(Tensor([0, 1337], dtype=dtypes.uint32), counts0, counts1)
    jax = [2221762175, 1752107825, 653745012, 1967534793, 1395205442, 3840423848, 2159346757, 603508235, 3319473678,
           3363866483, 3544324138, 1436466838, 2169858556, 2570072943, 2387150698, 3678370550, 2911697663, 403244401,
           2560861638, 1692360114]  # fmt: skip
    np.testing.assert_array_equal(words.numpy(), jax)


def test_a_random_draw_is_a_few_nodes_and_computes_the_rounds_once():
    """Each Threefry word is one THREEFRY node of the lazy graph (not the ~120 nodes of its rounds: model
    initialisation schedules one draw per parameter), and a kernel that takes both words of one counter computes the
    rounds once: the code generator's cache shares all but the last op."""
    from lazy.codegen.kernel import Kernel
    from lazy.codegen.lowerer import lower_kernel
    from lazy.engine.schedule import create_schedule
    from lazy.ops import THREEFRY_ALU_OPS, Ops

    (item,) = create_schedule([Tensor.rand(1000, device="CPU" if COMPILED else "PYTHON").lazydata])
    nodes = item.ast.toposort()
    assert sum(1 for n in nodes if n.op is Ops.THREEFRY) == 2 and len(nodes) < 60, [n.op for n in nodes]
    uops, _ = lower_kernel(Kernel(item.ast, Device[item.bufs[0].device].renderer.caps))
    shifts = sum(1 for u in uops if u.arg in (Ops.SHL, Ops.SHR))
    assert 40 <= shifts <= 44, f"{shifts} shifts: the 20 rotations (two shifts each) should be lowered once"
    assert THREEFRY_ALU_OPS == 2 + 2 + 5 * (4 * 5 + 3)  # what the kernel heuristics count a THREEFRY as


def test_an_index_ramp_is_one_node_that_kernels_compute_from_their_index():
    """`arange` is an `Ops.RAMP` node (identical ones shared), not a graph of masked constants: a kernel reading it
    loads nothing, and a slice of a huge one computes only the slice."""
    from lazy.engine.schedule import create_schedule
    from lazy.ops import Ops

    ramp = Tensor._index_ramp(1000, "PYTHON")
    assert ramp.lazydata.op is Ops.RAMP and ramp.lazydata is Tensor._index_ramp(1000, "PYTHON").lazydata
    (item,) = create_schedule([(Tensor.arange(12).reshape(3, 4).T * 2).lazydata])
    assert [n.op for n in item.ast.toposort() if n.op is Ops.LOAD] == [] and len(item.bufs) == 1
    np.testing.assert_array_equal(Tensor.arange(2**40, dtype=dtypes.int64)[-2:].numpy(), [2**40 - 2, 2**40 - 1])


def test_rand_matches_tinygrad_after_manual_seed():
    Tensor.manual_seed(42)
    first = [0.38104248046875, 0.009775400161743164, 0.1128007173538208, 0.1176995038986206, 0.505361795425415]
    second = [0.8983525037765503, 0.9685907363891602, 0.5968725681304932, 0.9116909503936768, 0.9868890047073364]
    np.testing.assert_array_equal(Tensor.rand(5).numpy(), first)
    np.testing.assert_array_equal(Tensor.rand(5).numpy(), second)
    # the key is (sha256 of the device's position, seed), the counter counts words: 10 drawn so far
    np.testing.assert_array_equal(Tensor._device_seeds["PYTHON"].numpy(), [347607321, 42])
    np.testing.assert_array_equal(Tensor._device_rng_counters["PYTHON"].numpy(), [10, 0])


def test_every_generator_matches_tinygrad():
    Tensor.manual_seed(1337)
    np.testing.assert_array_equal(Tensor.randint(8, low=-3, high=9).numpy(), [2, 1, 4, 4, 2, -2, 0, -3])
    np.testing.assert_array_equal(Tensor.randperm(10).numpy(), [2, 7, 9, 3, 0, 5, 8, 4, 6, 1])
    half = Tensor.rand(5, dtype=dtypes.float16)  # two halves per word
    np.testing.assert_array_equal(half.numpy(), [0.08203125, 0.5712890625, 0.7841796875, 0.09765625, 0.0537109375])
    double = Tensor.rand(3, dtype=dtypes.float64)  # two words per double
    np.testing.assert_array_equal(double.numpy(), [0.5468137943377331, 0.4587060262368996, 0.29419693206051756])
    np.testing.assert_array_equal(Tensor.rand(3, dtype=dtypes.bfloat16).float().numpy(), [0.15625, 0.7109375, 0.171875])
    with Context(TRAINING=1):
        kept = Tensor.ones(12).dropout(0.3).numpy() != 0
    np.testing.assert_array_equal(kept, [0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 0])
    # Box-Muller: tinygrad's PYTHON device rounds cos and log differently in the last bit
    randn = [-1.841928243637085, -0.42014968395233154, 1.8498839139938354, -0.6674684882164001, 0.5300856828689575,
             0.2692013382911682]  # fmt: skip
    np.testing.assert_allclose(Tensor.randn(6).numpy(), randn, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(Tensor([0.1, 0.5, 0.4]).multinomial(8, replacement=True).numpy(),
                                  [1, 1, 1, 2, 1, 2, 2, 1])  # fmt: skip
    np.testing.assert_array_equal(Tensor([0.1, 0.5, 0.4, 0.3, 0.2]).multinomial(3).numpy(), [2, 1, 3])
    np.testing.assert_array_equal(Tensor.rand(3).numpy(), [0.09524762630462646, 0.6955225467681885, 0.1352248191833496])


def test_seeds_wrap_to_32_bits():
    Tensor.manual_seed(2**40 + 3)
    wide = Tensor.rand(3).numpy()
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(wide, Tensor.rand(3).numpy())
    Tensor.manual_seed(-1)
    np.testing.assert_array_equal(Tensor.rand(3).numpy(), [0.25323426723480225, 0.4000053405761719, 0.8883266448974609])


def test_the_counter_carries_into_its_high_word():
    Tensor.manual_seed(1337)
    Tensor.rand(1).realize()
    counter = Tensor._device_rng_counters["PYTHON"]
    counter.assign(Tensor([2**32 - 1 - 5, 0], dtype=dtypes.uint32)).realize()
    Tensor.rand(10).realize()
    np.testing.assert_array_equal(counter.numpy(), [4, 1])
    Tensor.rand(10).realize()
    np.testing.assert_array_equal(counter.numpy(), [14, 1])


def test_devices_take_their_key_from_the_order_they_first_draw_in():
    """As tinygrad: the first device to draw after a seed gets key index 0, whichever it is."""
    Tensor.manual_seed(7)
    Tensor.rand(2).realize()  # PYTHON first
    second = Tensor.rand(4, device="PYTHON:1").numpy()
    Tensor.manual_seed(7)
    first = Tensor.rand(4, device="PYTHON:1").numpy()  # PYTHON:1 first this time
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(first, Tensor.rand(4).numpy())
    assert not np.array_equal(first, second)


def test_a_jit_replay_after_a_reseed_draws_the_new_stream():
    jitted = jit(lambda: Tensor.rand(3).realize())
    Tensor.manual_seed(9)
    eager = [Tensor.rand(3).numpy() for _ in range(3)]
    Tensor.manual_seed(9)
    np.testing.assert_array_equal(np.stack([jitted().numpy() for _ in range(3)]), np.stack(eager))


@pytest.mark.parametrize("device", COMPILED)
def test_wide_and_narrow_floats_on_a_compiled_device(device):
    Tensor.manual_seed(5)
    here = [Tensor.rand(5, dtype=dt, device=device).numpy() for dt in (dtypes.float64, dtypes.float16, dtypes.float32)]
    Tensor.manual_seed(5)
    for got, dt in zip(here, (dtypes.float64, dtypes.float16, dtypes.float32)):
        np.testing.assert_array_equal(got, Tensor.rand(5, dtype=dt).numpy())


# -- arguments ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tensor.rand(3, bogus=1),
        lambda: Tensor.randn(3, bogus=1),
        lambda: Tensor.randint(3, bogus=1),
        lambda: Tensor.uniform(3, bogus=1),
        lambda: Tensor.normal(3, bogus=1),
        lambda: Tensor.randperm(3, bogus=1),
        lambda: Tensor.kaiming_uniform(3, 3, bogus=1),
        lambda: Tensor.kaiming_normal(3, 3, bogus=1),
        lambda: Tensor.glorot_uniform(3, 3, bogus=1),
        lambda: Tensor.scaled_uniform(3, bogus=1),
        lambda: Tensor.zeros(3).rand_like(bogus=1),
        lambda: Tensor.zeros(3).randn_like(bogus=1),
        lambda: Tensor.arange(3, bogus=1),
        lambda: Tensor.eye(3, bogus=1),
        lambda: Tensor.linspace(0, 1, 3, bogus=1),
        lambda: Tensor.zeros(3, bogus=1),
        lambda: Tensor.full((3,), 1.0, bogus=1),
    ],
)
def test_unknown_keyword_arguments_are_refused(make):
    with pytest.raises(TypeError, match="bogus"):
        make()


def test_argument_checks_raise_what_tinygrad_raises():
    with pytest.raises(ValueError, match="not dtypes.int"):
        Tensor.rand(3, dtype=dtypes.int32)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.uniform(3, low=2.0, high=1.0)
    with pytest.raises(ValueError, match="size 2.0"):  # (tinygrad: ValueError from rand, RuntimeError from zeros)
        Tensor.rand(2.0)
    with pytest.raises(RuntimeError, match="size 2.0"):
        Tensor.zeros(2.0)
    with pytest.raises(AssertionError, match="num_samples >= 1"):  # (tinygrad asserts)
        Tensor([1.0, 9.0]).multinomial(0)
    with pytest.raises(AssertionError, match="cannot draw 100 of 2"):
        Tensor([1.0, 9.0]).multinomial(100, replacement=False)
    with pytest.raises(ValueError, match="not a probability"):
        Tensor.ones(3).dropout(1.5)
    assert issubclass(ArgumentError, (ValueError, TypeError, RuntimeError, AssertionError))


def test_rand_keeps_requires_grad_and_contiguous():
    assert Tensor.rand(3, requires_grad=True).requires_grad is True
    assert Tensor.randn(3, requires_grad=True).requires_grad is True
    Tensor.manual_seed(2)
    fused = Tensor.rand(4).numpy()
    Tensor.manual_seed(2)
    np.testing.assert_array_equal(Tensor.rand(4, contiguous=True).numpy(), fused)


# -- dropout in training mode -----------------------------------------------------------------------------------------


def test_dropout_is_on_with_tensor_train_or_the_training_setting():
    x = Tensor.ones(64)
    assert (x.dropout(0.5).numpy() == 1).all()  # not training: the identity
    with Tensor.train():
        assert (x.dropout(0.5).numpy() == 0).any()
    with Context(TRAINING=1):
        out = x.dropout(0.5).numpy()
    assert (out == 0).any() and set(np.unique(out)) <= {0.0, 2.0}
    with Context(TRAINING=1):
        np.testing.assert_array_equal(x.dropout(1.0).numpy(), np.zeros(64))  # (not 0 / 0)


# -- from_blob ---------------------------------------------------------------------------------------------------------


def test_from_blob_copies_host_memory():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_blob(arr.ctypes.data, (3, 4), dtype=dtypes.float32)
    arr[0, 0] = 99.0  # a copy: later writes do not reach the tensor
    np.testing.assert_array_equal(t.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    assert t.device == "PYTHON" and t.dtype == dtypes.float32
    words = (ctypes.c_int32 * 3)(7, -8, 9)
    np.testing.assert_array_equal(Tensor.from_blob(ctypes.addressof(words), (3,), dtype="int32").numpy(), [7, -8, 9])
    bf16 = np.array([0x3F80, 0xC040], dtype=np.uint16)  # 1.0, -3.0 as bfloat16 bits (numpy has no bfloat16)
    np.testing.assert_array_equal(Tensor.from_blob(bf16.ctypes.data, 2, dtype=dtypes.bfloat16).numpy(), [1.0, -3.0])
    assert Tensor.from_blob(0, (0, 3)).shape == (0, 3)


def test_from_blob_refuses_what_is_not_an_address():
    for ptr in (0, -1, "x", True):
        with pytest.raises(ValueError, match="address of host memory"):
            Tensor.from_blob(ptr, (2,))


# -- arange's dtype ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, dtype",
    [
        ((5,), dtypes.int32),
        ((-3, 3), dtypes.int32),
        ((2**31 - 1,), dtypes.int32),
        ((0, 2**31), dtypes.int32),  # the last value is 2**31 - 1
        ((0, 2**31 + 1), dtypes.int64),
        ((-(2**31), -(2**31) + 3), dtypes.int32),
        ((-(2**31) - 1, -(2**31) + 3), dtypes.int64),
        ((2**31 - 3, 2**31 + 2), dtypes.int64),
        ((2**31 + 5, 2**31, -1), dtypes.int64),
        ((10, 0, -1), dtypes.int32),
        ((5, 0), dtypes.int32),
        ((0, 5.0), dtypes.float32),
        ((0, 3, 0.5), dtypes.float32),
        ((True, 3), dtypes.int32),
    ],
)
def test_arange_picks_int_or_long_as_tinygrad(args, dtype):
    """Each row as tinygrad 0.14 picks it (checked on the shapes only: 2**31 elements are not made)."""
    assert Tensor.arange(*args).dtype == dtype


def test_arange_values_that_overflow_the_asked_dtype():
    with pytest.raises(OverflowError, match="does not fit in dtypes.uchar"):
        Tensor.arange(300, dtype=dtypes.uint8)
    with pytest.raises(ValueError, match="does not fit"):  # (and a ValueError, as lazy raised before)
        Tensor.arange(-1, 3, dtype=dtypes.uint8)

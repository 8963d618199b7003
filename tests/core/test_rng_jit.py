"""Random numbers with the generator's (seed, counter) as a kernel input: one kernel per shape of random call, new
numbers on every `jit` replay (the same stream as eager calls), and the same numbers on every device. PYTHON device,
plus each compiled device that is installed."""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest

from lazy import Context, Device, Tensor, jit
from lazy.engine.realize import method_cache
from lazy.lazy import LazyBuffer

COMPILED = [d for d in ("CPU", "LLVM", "CL") if d in Device.specs() and Device.probe(d)[0]]


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield
    Tensor.manual_seed(0)  # tests reseed: leave the usual start behind, so test order does not matter


def _dropout() -> Tensor:
    with Tensor.train():
        return Tensor.ones(8).dropout(0.5)


# every user of the generator, with small shapes (the PYTHON device interprets each element)
DRAWS: dict[str, Callable[[], Tensor]] = {
    "rand": lambda: Tensor.rand(5),
    "randn": lambda: Tensor.randn(2, 3),
    "randint": lambda: Tensor.randint(6, low=-3, high=9),
    "rand_like": lambda: Tensor.zeros(4).rand_like(),
    "randn_like": lambda: Tensor.zeros(4).randn_like(),
    "normal": lambda: Tensor.normal(4, mean=2.0, std=3.0),
    "uniform": lambda: Tensor.uniform(4, low=-1.0, high=4.0),
    "kaiming_uniform": lambda: Tensor.kaiming_uniform(2, 3),
    "multinomial": lambda: Tensor([0.1, 0.5, 0.4]).multinomial(6, replacement=True),
    "multinomial_no_replacement": lambda: Tensor([0.1, 0.5, 0.4, 0.3]).multinomial(2),
    "randperm": lambda: Tensor.randperm(5),
    "dropout": _dropout,
}


def _draws(fn: Callable[[], Tensor], calls: int) -> list[np.ndarray]:
    return [fn().numpy() for _ in range(calls)]


def test_one_shape_of_random_call_compiles_once():
    method_cache.clear()  # (it is bounded: full after other tests, a new kernel would push an old one out)
    Tensor.rand(7).realize()
    before = len(method_cache)
    draws = [Tensor.rand(7).numpy() for _ in range(12)]
    assert len(method_cache) == before, "a random call compiled a new kernel: the counter is baked into it"
    assert len({d.tobytes() for d in draws}) == 12


@pytest.mark.parametrize("device", COMPILED)
def test_one_shape_of_random_call_compiles_once_on_a_compiled_device(device):
    Tensor.rand(1000, device=device).realize()
    before = len(method_cache)
    for _ in range(10):
        Tensor.rand(1000, device=device).realize()
    assert len(method_cache) == before


def test_a_draw_of_a_new_size_compiles_only_its_own_kernel():
    """The counter's advance by a draw's size is a kernel parameter: a new size compiles the kernel of its numbers
    (it has that shape), not another kernel for its key (a model's initialisation draws once per parameter)."""
    method_cache.clear()  # (it is bounded: full after other tests, a new kernel would push an old one out)
    Tensor.rand(7).realize()
    before = len(method_cache)
    for size in (3, 11, 40):
        Tensor.rand(size).realize()
    assert len(method_cache) == before + 3, f"{len(method_cache) - before} kernels for 3 draws of new sizes"
    # the same numbers as constants in the kernel gave: the stream after a seed does not change
    Tensor.manual_seed(42)
    first = [0.38104248046875, 0.009775400161743164, 0.1128007173538208, 0.1176995038986206, 0.505361795425415]
    np.testing.assert_array_equal(Tensor.rand(5).numpy(), first)


def test_random_calls_leave_nothing_behind():
    def live_lazybuffers() -> int:
        gc.collect()
        return sum(isinstance(o, LazyBuffer) for o in gc.get_objects())

    for _ in range(3):
        Tensor.randn(4).realize()
    before = live_lazybuffers()
    for _ in range(10):
        Tensor.randn(4).realize()
    assert live_lazybuffers() <= before


@pytest.mark.parametrize("name", list(DRAWS))
def test_jit_replays_draw_the_eager_stream(name):
    draw = DRAWS[name]
    jitted = jit(lambda: draw().realize())
    Tensor.manual_seed(11)
    got = _draws(jitted, 4)
    assert jitted.jit_cache, "the later calls replayed captured kernels"
    Tensor.manual_seed(11)
    np.testing.assert_array_equal(np.stack(got), np.stack(_draws(draw, 4)))
    if name != "randperm":  # (5! orders: two replays may pick the same one)
        assert not np.array_equal(got[2], got[3]), "a replay repeated the previous numbers"


def test_jit_and_eager_calls_share_one_stream():
    jitted = jit(lambda: Tensor.rand(3).realize())
    Tensor.manual_seed(5)
    mixed = [x for _ in range(4) for x in (jitted().numpy(), Tensor.rand(3).numpy())]
    Tensor.manual_seed(5)
    np.testing.assert_array_equal(np.stack(mixed), np.stack(_draws(lambda: Tensor.rand(3), 8)))


def test_manual_seed_restarts_a_jitted_function():
    jitted = jit(lambda: Tensor.rand(3).realize())
    Tensor.manual_seed(9)
    first = _draws(jitted, 3)  # eager call, capture, replay
    Tensor.manual_seed(9)
    np.testing.assert_array_equal(jitted().numpy(), first[0])  # a replay: the seed reached the captured state


def test_jit_memory_planner_keeps_the_generator_state():
    """Temporaries that die inside the function may share memory, but never with the generator's state buffer, which
    is written by assigns whose LazyBuffers die too (it once took a dead temporary's memory: replays repeated)."""

    def fn(x: Tensor) -> Tensor:
        tmp = (x * 2).realize()
        tmp = (tmp + 1).realize()
        tmp = (tmp + 1).realize()
        return (tmp + Tensor.rand(2).realize() + Tensor.rand(2).realize()).realize()

    jitted = jit(fn)
    x = Tensor.zeros(2, requires_grad=False).contiguous().realize()
    Tensor.manual_seed(1)
    got = [(jitted(x).numpy(), Tensor.rand(2).numpy()) for _ in range(5)]
    Tensor.manual_seed(1)
    np.testing.assert_array_equal(np.array(got), np.array([(fn(x).numpy(), Tensor.rand(2).numpy()) for _ in range(5)]))


def test_two_random_tensors_in_one_realize():
    Tensor.manual_seed(4)
    a, b = Tensor.rand(3), Tensor.rand(3)
    together = (a + b * 10).numpy()
    Tensor.manual_seed(4)
    first, second = Tensor.rand(3).numpy(), Tensor.rand(3).numpy()
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(together, first + second * 10)


def test_a_random_tensor_realized_late_keeps_its_numbers():
    Tensor.manual_seed(6)
    a = Tensor.rand(4)
    b = Tensor.rand(4)
    b_values = b.numpy()
    a_values = a.numpy()  # realized after a tensor created later
    Tensor.manual_seed(6)
    np.testing.assert_array_equal(a_values, Tensor.rand(4).numpy())
    np.testing.assert_array_equal(b_values, Tensor.rand(4).numpy())


@pytest.mark.parametrize("device", COMPILED)
def test_the_same_numbers_on_every_device(device):
    Tensor.rand(2, device=device).realize()  # the generator has state on both devices before the reseed
    Tensor.manual_seed(21)
    here = [Tensor.rand(6, device=device).numpy(), Tensor.rand(6, device=device).numpy()]
    Tensor.manual_seed(21)
    np.testing.assert_array_equal(np.stack(here), np.stack(_draws(lambda: Tensor.rand(6), 2)))


@pytest.mark.parametrize("device", COMPILED)
def test_jit_replays_draw_new_numbers_on_a_compiled_device(device):
    jitted = jit(lambda x: (x + Tensor.rand(16, device=device)).realize())
    x = Tensor.zeros(16, device=device).contiguous().realize()
    Tensor.manual_seed(2)
    got = _draws(lambda: jitted(x), 4)
    Tensor.manual_seed(2)
    np.testing.assert_array_equal(np.stack(got), np.stack(_draws(lambda: Tensor.rand(16, device=device), 4)))


def test_a_device_used_for_the_first_time():
    Tensor.manual_seed(8)
    fresh = Tensor.rand(5, device="PYTHON:7").numpy()  # no generator state yet on this device
    Tensor.manual_seed(8)
    np.testing.assert_array_equal(fresh, Tensor.rand(5).numpy())


def test_repeated_draws_reuse_the_generators_schedule(monkeypatch: pytest.MonkeyPatch):
    """A draw of a shape seen before schedules only the counter's update: the Threefry graph's schedule is cached
    (it has no assign), so model initialisation does not schedule the generator again for every parameter."""
    import lazy.engine.realize as engine

    made: list[int] = []
    schedule = engine.create_schedule

    def counting(outs: list[LazyBuffer]) -> list:
        items = schedule(outs)
        made.append(len(items))
        return items

    for shape in ((3, 5), (7,)):
        Tensor.rand(*shape).realize()  # the first draw of each shape schedules everything
    monkeypatch.setattr(engine, "create_schedule", counting)
    draws = [Tensor.rand(*shape).realize() for shape in ((3, 5), (7,), (3, 5))]
    assert sum(made) <= 2 * len(draws), f"schedule items made per draw: {made}"
    assert not np.array_equal(draws[0].numpy(), draws[2].numpy())  # the counter still advanced

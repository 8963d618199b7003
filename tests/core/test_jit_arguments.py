"""What a `TinyJit` makes of its arguments: tensors at any depth of lists, tuples and dicts are inputs; every other
value, at any depth, is checked against the captured one on each replay (a captured kernel holds it); calls from
several threads run one at a time; `prune=True` still reruns what updates state, as `Tensor.rand`'s counter. Default
device (CPU)."""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazy import Tensor, TinyJit
from lazy.engine.jit import JitError


def scaled(x: Tensor, c: Any) -> Tensor:
    """`x` times the first number in `c` (a number, a numpy value, or a list, tuple or dict holding one)."""
    while isinstance(c, (list, tuple, dict)) or (isinstance(c, np.ndarray) and c.ndim > 0):
        c = c["a"] if isinstance(c, dict) else c[0]
    return (x * float(c)).realize()


# -- other arguments: checked against the captured values -------------------------------------------------------------


@pytest.mark.parametrize(
    "old,new,match",
    [
        (2.0, 5.0, "argument 1 is 5.0, captured with 2.0"),  # a plain float, as before
        ([2.0], [5.0], r"argument 1\[0\] is 5.0, captured with 2.0"),
        ((([2.0],),), (([5.0],),), r"argument 1\[0\]\[0\]\[0\] is 5.0, captured with 2.0"),
        ({"a": 2.0}, {"a": 5.0}, r"argument 1\['a'\] is 5.0, captured with 2.0"),
        (OrderedDict(a=2.0), OrderedDict(a=5.0), r"argument 1\['a'\] is 5.0, captured with 2.0"),
        (np.float32(2), np.float32(5), r"argument 1 is .*5.*, captured with .*2"),
        (np.array(2.0), np.array(5.0), r"argument 1 is array\(5\.\), captured with array\(2\.\)"),
        ([2.0], [2.0, 5.0], r"argument 1 is \[2.0, 5.0\], captured with \[2.0\]"),
        ({"a": 2.0}, {"a": 2.0, "b": 1.0}, r"argument 1 is \{'a': 2.0, 'b': 1.0\}, captured with \{'a': 2.0\}"),
        ([2.0], (2.0,), r"argument 1 is \(2.0,\), captured with \[2.0\]"),
    ],
)
def test_a_changed_value_is_refused_at_any_depth(old, new, match):
    jf = TinyJit(scaled)
    for _ in range(3):  # a new but equal value every call replays
        np.testing.assert_allclose(jf(Tensor.ones(3), pickle.loads(pickle.dumps(old))).numpy(), [2.0] * 3)
    with pytest.raises(JitError, match=match + ".*pass what changes as a tensor.*reset"):
        jf(Tensor.ones(3), new)  # the kernel holds 2.0: a replay would silently return x * 2


def test_a_numpy_array_changed_in_place_is_refused():
    c = np.array([2.0, 3.0])
    jf = TinyJit(scaled)
    for _ in range(3):
        np.testing.assert_allclose(jf(Tensor.ones(3), c).numpy(), [2.0] * 3)
    c[0] = 5.0  # the capture kept a copy
    with pytest.raises(JitError, match=r"argument 1 is array\(\[5., 3.\]\), captured with array\(\[2., 3.\]\)"):
        jf(Tensor.ones(3), c)


def test_a_changed_keyword_value_is_refused():
    jf = TinyJit(lambda x, *, scale: scaled(x, scale))
    for _ in range(3):
        np.testing.assert_allclose(jf(Tensor.ones(3), scale=[2.0]).numpy(), [2.0] * 3)
    with pytest.raises(JitError, match=r"argument scale\[0\] is 5.0, captured with 2.0"):
        jf(Tensor.ones(3), scale=[5.0])


class Scale:
    """An object without equality: the jit tells two apart by identity."""

    def __init__(self, value: float):
        self.value = value


def test_other_objects_by_equality_where_defined_else_by_identity():
    jf = TinyJit(lambda x, s: scaled(x, s.value))
    same = Scale(2.0)
    for _ in range(4):
        np.testing.assert_allclose(jf(Tensor.ones(3), same).numpy(), [2.0] * 3)
    with pytest.raises(JitError, match="argument 1 is .*Scale object.*, captured with .*Scale object"):
        jf(Tensor.ones(3), Scale(2.0))
    jf = TinyJit(lambda x, s: scaled(x, s.stop))
    for _ in range(4):
        np.testing.assert_allclose(jf(Tensor.ones(3), slice(0, 2)).numpy(), [2.0] * 3)  # slices compare by value
    with pytest.raises(JitError, match=r"argument 1 is slice\(0, 5, None\), captured with slice\(0, 2, None\)"):
        jf(Tensor.ones(3), slice(0, 5))


class Weighted:
    """A jitted method: its object is an argument like the others, and its tensors are baked into the capture."""

    def __init__(self, value: float):
        self.weight = Tensor.full((3,), value).contiguous().realize()

    @TinyJit
    def __call__(self, x: Tensor) -> Tensor:
        return (x * self.weight).realize()


def test_a_jitted_method_refuses_a_second_object():
    first, second = Weighted(2.0), Weighted(3.0)
    for _ in range(4):
        np.testing.assert_allclose(first(Tensor.ones(3)).numpy(), [2.0] * 3)
    with pytest.raises(JitError, match="argument 0 is .*Weighted object"):
        second(Tensor.ones(3))  # would return the first object's weight times x


def test_a_loaded_jit_checks_the_captured_values():
    jf = TinyJit(scaled)
    for _ in range(3):
        jf(Tensor.ones(3), [2.0])
    loaded = pickle.loads(pickle.dumps(jf))
    np.testing.assert_allclose(loaded(Tensor.ones(3), [2.0]).numpy(), [2.0] * 3)
    with pytest.raises(JitError, match=r"argument 1\[0\] is 5.0, captured with 2.0"):
        loaded(Tensor.ones(3), [5.0])


# -- tensors at any depth are inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap,name",
    [
        (lambda t: [[t]], "0[0][0]"),
        (lambda t: {"w": [t]}, "0['w'][0]"),
        (lambda t: ({"w": (t,)},), "0[0]['w'][0]"),
    ],
)
def test_tensors_inside_nested_arguments_are_inputs(wrap: Callable[[Tensor], Any], name: str):
    def first(xs: Any) -> Tensor:
        while not isinstance(xs, Tensor):
            xs = next(iter(xs.values())) if isinstance(xs, dict) else xs[0]
        return (xs + 1).realize()

    jf = TinyJit(first)
    for v in range(1, 6):
        np.testing.assert_allclose(jf(wrap(Tensor.full((3,), float(v)))).numpy(), [v + 1.0] * 3)
    assert jf.captured is not None and [info.name for info in jf.captured.inputs] == [name]


def test_tensors_in_dicts_and_keywords_replay():
    jf = TinyJit(lambda params, x, *, bias: (params["w"] * x + bias["b"]).realize())
    for v in range(1, 5):
        w, x, b = np.full(3, v, np.float32), np.arange(3, dtype=np.float32), np.full(3, -v, np.float32)
        params = {"w": Tensor(w), "unused": 1.0}
        np.testing.assert_allclose(jf(params, Tensor(x), bias={"b": Tensor(b)}).numpy(), w * x + b)


# -- calls from several threads --------------------------------------------------------------------------------------


def test_calls_from_two_threads_run_one_at_a_time(run_interleaved):
    jf = TinyJit(lambda counter: counter.assign(counter + 1).realize())  # each thread updates its own tensor
    counters = [Tensor.zeros(4).contiguous().realize() for _ in range(2)]
    start, errors, calls = threading.Barrier(2), [], 20

    def work(counter: Tensor) -> None:
        start.wait()  # both threads make the first calls of the fresh jit together
        try:
            for _ in range(calls):
                jf(counter)
        except Exception as e:  # reported below: an exception in a thread does not fail the test by itself
            errors.append(e)

    run_interleaved([threading.Thread(target=work, args=(counter,)) for counter in counters])
    assert not errors, errors
    for counter in counters:  # a replay whose kernels ran on the other thread's tensor would count wrong
        np.testing.assert_array_equal(counter.numpy(), [calls] * 4)
    assert jf.cnt == 2 * calls


# -- prune keeps what updates state -----------------------------------------------------------------------------------


def test_prune_keeps_the_random_generator_moving():
    def draws(jf: TinyJit) -> list[np.ndarray]:
        Tensor.manual_seed(0)
        return [jf(Tensor.zeros(3)).numpy().copy() for _ in range(4)]

    def noisy(x: Tensor) -> Tensor:
        return (x + Tensor.rand(3)).realize()

    plain, pruned = draws(TinyJit(noisy)), draws(TinyJit(noisy, prune=True))
    assert len({d.tobytes() for d in pruned}) == 4  # new numbers on every replay
    np.testing.assert_array_equal(np.stack(pruned), np.stack(plain))  # the stream eager calls and a plain jit draw
    Tensor.manual_seed(0)


def test_prune_keeps_a_counter_that_reads_only_itself():
    steps = Tensor.zeros(1).contiguous().realize()
    jf = TinyJit(lambda x: (x + steps.assign(steps + 1)).realize(), prune=True)  # the update reads no input
    for i in range(1, 5):
        np.testing.assert_allclose(jf(Tensor.zeros(1)).numpy(), [i])


def test_a_capture_records_only_its_own_threads_work(run_interleaved):
    """While one thread captures, another thread's eager work and jit replays run as usual: they are not recorded
    into the capture (its replays would run them), and a replay there is not refused as a jit inside a jit."""
    other = TinyJit(lambda t: (t * 3).realize())
    for _ in range(3):
        other(Tensor.ones(4))
    inside, go, capturing_now = threading.Event(), threading.Event(), threading.Event()

    def captured_fn(x: Tensor) -> Tensor:
        y = (x + 1).realize()
        if capturing_now.is_set():
            inside.set()
            go.wait(10)  # the other thread runs its work now, during the capture
        return (y * 2).realize()

    jf = TinyJit(captured_fn)
    jf(Tensor.ones(4))  # the eager call
    capturing_now.set()
    results, errors = [], []

    def capture() -> None:
        try:
            results.append(jf(Tensor.full((4,), 2.0)).numpy())
        except Exception as e:  # reported below
            errors.append(e)

    def meanwhile() -> None:
        try:
            inside.wait(10)
            results.append(((Tensor.full((4,), 5.0) - 1).numpy(), other(Tensor.full((4,), 7.0)).numpy()))
        except Exception as e:  # reported below
            errors.append(e)
        finally:
            go.set()

    run_interleaved([threading.Thread(target=capture), threading.Thread(target=meanwhile)])
    assert not errors, errors
    assert jf.captured is not None and len(jf.jit_cache) == 2, [ei.prg for ei in jf.jit_cache]
    for v in (3.0, 4.0):
        np.testing.assert_array_equal(jf(Tensor.full((4,), v)).numpy(), [(v + 1) * 2] * 4)

"""The TinyJit API as tinygrad 0.14 has it: `TinyJit(fxn, captured=None, prune=False)`, `jf.captured` (a picklable
program: kernels, buffers, replay count, graph batches), `jf.reset()`, `JitError` naming what changed, symbolic
shapes captured once, `GlobalCounters` on every replay. PYTHON device unless a case names another."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from lazy import Context, GlobalCounters, Tensor, TinyJit, Variable, dtypes
from lazy.engine.captured import CapturedJit, GraphBatch
from lazy.engine.jit import JitError
from lazy.engine.realize import CompiledRunner


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def first(out: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """The leading elements of a symbolic-shaped result (its buffer is allocated for the variable's maximum)."""
    buf = out.contiguous().realize().lazydata.base.realized
    assert buf is not None
    return buf.numpy()[: int(np.prod(shape))].reshape(shape)


def called(jf: TinyJit, n: int = 3, shape: tuple[int, ...] = (2, 3)) -> TinyJit:
    for i in range(n):
        jf(Tensor(rand(*shape, seed=i)), Tensor(rand(*shape, seed=i + 10)))
    return jf


def add(a: Tensor, b: Tensor) -> Tensor:
    return (a + b).realize()


# -- mismatches are named --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: (Tensor(rand(3, 3)), Tensor(rand(3, 3))), r"input 0 has shape \(3, 3\), captured with \(2, 3\)"),
        (lambda: (Tensor(rand(2, 3)).cast(dtypes.int32), Tensor(rand(2, 3))), "input 0 has dtype .*int.*float"),
        (
            lambda: (Tensor(rand(2, 3), device="CPU"), Tensor(rand(2, 3))),
            "input 0 has device CPU, captured with PYTHON",
        ),
        (lambda: (Tensor(rand(3, 2)).T, Tensor(rand(2, 3))), "input 0 has a view of its memory"),
    ],
)
def test_a_changed_input_is_named(make, match):
    jf = called(TinyJit(add))
    with pytest.raises(JitError, match=match):
        jf(*make())


def test_changed_arguments_are_named():
    jf = called(TinyJit(lambda a, b=None: (a + (b if b is not None else 1)).realize()))
    with pytest.raises(JitError, match=r"called with arguments \['0'\], captured with \['0', '1'\]"):
        jf(Tensor(rand(2, 3)))


def test_a_changed_plain_argument_is_named():
    jf = TinyJit(lambda a, scale, mode="add": ((a * scale) if mode == "mul" else (a + scale)).realize())
    for _ in range(3):
        np.testing.assert_allclose(jf(Tensor([1.0, 2.0]), 0.5, mode="mul").numpy(), [0.5, 1.0])
    with pytest.raises(JitError, match="argument 1 is 0.25, captured with 0.5"):
        jf(Tensor([1.0, 2.0]), 0.25, mode="mul")  # the kernel holds 0.5: a replay would silently use it
    with pytest.raises(JitError, match="argument mode is 'add', captured with 'mul'"):
        jf(Tensor([1.0, 2.0]), 0.5, mode="add")


def test_a_variable_outside_the_captured_range_is_named():
    jf = TinyJit(lambda a: (a * 2).realize())
    data = Tensor(rand(10, 3)).realize()
    for n in (2, 3, 4):
        jf(data.shrink(((0, Variable("i", 1, 10).bind(n)), (0, 3))))
    wider = Variable("i", 1, 20).bind(5)
    with pytest.raises(JitError, match=r"variable i has range \[1, 20\], captured with \[1, 10\]"):
        jf(Tensor(rand(20, 3)).realize().shrink(((0, wider), (0, 3))))
    with pytest.raises(ValueError, match=r"cannot bind i to 11: outside its range \[1, 10\]"):
        Variable("i", 1, 10).bind(11)


# -- symbolic shapes: captured once, replayed for every value --------------------------------------------------------

SYMBOLIC = {  # name: (function, numpy reference, argument shapes with "n" the symbolic axis)
    "elementwise": (lambda a, b: (a * b + 1).realize(), lambda a, b: a * b + 1, [(3, "n"), (3, "n")]),
    "matmul along it": (lambda a, b: (a @ b).realize(), lambda a, b: a @ b, [(3, "n"), ("n", 5)]),
    "sum over it": (lambda a: a.sum(1).realize(), lambda a: a.sum(1), [(3, "n")]),
    "mean over it": (lambda a: a.mean(1).realize(), lambda a: a.mean(1), [(3, "n")]),
    "softmax over it": (
        lambda a: a.softmax(1).realize(),
        lambda a: np.exp(a) / np.exp(a).sum(1, keepdims=True),
        [(3, "n")],
    ),  # fmt: skip
    "cat along it": (
        lambda a, b: a.cat(b, dim=1).realize(),
        lambda a, b: np.concatenate([a, b], 1),
        [(3, "n"), (3, 2)],
    ),
    "pad back": (
        lambda a: a.pad(((0, 0), (0, 2))).contiguous().realize(),
        lambda a: np.pad(a, ((0, 0), (0, 2))),
        [(3, "n")],
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(SYMBOLIC))
def test_symbolic_shapes_are_captured_once(name):
    fn, ref, axes = SYMBOLIC[name]
    jf = TinyJit(fn)
    for call, n in enumerate((2, 5, 1, 7, 3)):
        arrays = [rand(*(10 if d == "n" else d for d in ax), seed=call * 10 + k) for k, ax in enumerate(axes)]
        v = Variable("n", 1, 10).bind(n)
        args = [Tensor(a).realize().shrink(tuple((0, v if d == "n" else d) for d in ax)) for a, ax in zip(arrays, axes)]
        want = ref(*(a[tuple(slice(0, n) if d == "n" else slice(None) for d in ax)] for a, ax in zip(arrays, axes)))
        np.testing.assert_allclose(first(jf(*args), want.shape), want, rtol=1e-5, atol=1e-6)
        if call == 1:
            captured = list(jf.jit_cache)
    assert jf.captured is not None and jf.captured.replays == 3
    assert [ei.runner for ei in jf.jit_cache] == [ei.runner for ei in captured]  # one capture for every value


def test_a_kv_cache_decoder_step():
    """The language-model pattern: each step writes its key and value at `start_pos` and attends over
    `cache[:, :start_pos+1]`; jitted, every step is a replay of one capture, checked against an eager run."""
    size, dim = 6, 4
    wk, wv = (Tensor(rand(dim, dim, seed=s)).realize() for s in (1, 2))

    def make_step():
        keys, values = (Tensor.zeros(1, size, dim).contiguous().realize() for _ in range(2))

        def step(x: Tensor, start_pos: Variable) -> Tensor:
            here = Tensor.arange(size).reshape(1, size, 1) == Tensor(start_pos)
            keys.assign(here.where(x @ wk, keys))
            values.assign(here.where(x @ wv, values))
            seen_k = keys.shrink(((0, 1), (0, start_pos + 1), (0, dim)))  # (1, start_pos+1, dim)
            seen_v = values.shrink(((0, 1), (0, start_pos + 1), (0, dim)))
            att = (x * seen_k).sum(-1).softmax(-1)  # (1, start_pos+1)
            return (att.unsqueeze(-1) * seen_v).sum(1).realize()  # (1, dim)

        return step

    eager, jitted = make_step(), TinyJit(make_step())
    ks, vs = [], []
    for pos in range(size):
        x = rand(1, 1, dim, seed=100 + pos)
        v = Variable("start_pos", 0, size - 1).bind(pos)
        got, want = jitted(Tensor(x), v).numpy(), eager(Tensor(x), v).numpy()
        ks.append(x[0] @ wk.numpy())
        vs.append(x[0] @ wv.numpy())
        scores = np.concatenate(ks) @ x[0, 0]
        att = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[0], att @ np.concatenate(vs), rtol=1e-4, atol=1e-5)
    assert jitted.captured is not None and jitted.captured.replays == size - 2


# -- the API ---------------------------------------------------------------------------------------------------------


def test_captured_lists_kernels_buffers_and_replays():
    jf = called(TinyJit(lambda a, b: ((a + b).contiguous() * 2).realize()), n=5)
    captured = jf.captured
    assert isinstance(captured, CapturedJit) and captured.replays == 3 and jf.cnt == 5
    assert jf.jit_cache is captured.jit_cache and len(jf.jit_cache) == 2
    assert all(isinstance(ei.prg, CompiledRunner) and len(ei.bufs) >= 2 for ei in jf.jit_cache)
    assert [(info.name, info.st.shape) for info in captured.inputs] == [("0", (2, 3)), ("1", (2, 3))]


def test_reset_captures_again():
    jf = called(TinyJit(add))
    jf.reset()
    assert jf.captured is None and jf.jit_cache == [] and jf.cnt == 0
    for i in range(3):  # another shape is fine after a reset
        a, b = rand(4, 4, seed=i), rand(4, 4, seed=i + 1)
        np.testing.assert_allclose(jf(Tensor(a), Tensor(b)).numpy(), a + b)
    assert jf.captured is not None and jf.captured.inputs[0].st.shape == (4, 4)


def test_save_and_load_a_captured_jit():
    weights = Tensor(rand(3, 3, seed=5)).realize()
    state = Tensor.zeros(3).contiguous().realize()

    def step(x: Tensor) -> Tensor:
        state.assign(state + x.sum(0))  # state that lives on between calls travels too
        return (x @ weights + state).realize()

    jf = TinyJit(step)
    for i in range(3):
        jf(Tensor(rand(2, 3, seed=i)))
    saved = pickle.dumps(jf)
    loaded = pickle.loads(saved)
    assert loaded.fxn is None and loaded.cnt == 2 and len(loaded.jit_cache) == len(jf.jit_cache)
    again = TinyJit(None, captured=pickle.loads(pickle.dumps(jf.captured)))
    for jitted in (jf, loaded, again):
        x = rand(2, 3, seed=9)
        before = state.numpy() if jitted is jf else np.sum([rand(2, 3, seed=i).sum(0) for i in range(3)], 0)
        np.testing.assert_allclose(jitted(Tensor(x)).numpy(), x @ weights.numpy() + before + x.sum(0), rtol=1e-5)
    with pytest.raises(JitError, match="no function to capture again"):
        loaded.reset()
    with pytest.raises(JitError, match="only a captured jit pickles"):
        pickle.dumps(TinyJit(add))


def test_prune_runs_what_does_not_depend_on_the_inputs_once():
    weights = Tensor(rand(16)).realize()

    def w2(x: Tensor) -> Tensor:
        return ((weights * 2).contiguous() + x).realize()

    plain, pruned = TinyJit(w2), TinyJit(w2, prune=True)
    launches = {}
    for jf in (plain, pruned):
        for i in range(4):
            x = rand(16, seed=i)
            GlobalCounters.reset()
            np.testing.assert_allclose(jf(Tensor(x).realize()).numpy(), weights.numpy() * 2 + x, rtol=1e-6)
            launches[jf] = GlobalCounters.kernel_count
    assert (launches[plain], launches[pruned]) == (2, 1)  # the weights kernel ran once, at capture
    decorated = TinyJit(prune=True)(w2)
    assert isinstance(decorated, TinyJit) and decorated.prune


def test_prune_reruns_what_reads_state_a_replay_changes():
    weights = Tensor.ones(4).contiguous().realize()

    def step(x: Tensor) -> Tensor:
        doubled = (weights * 2).contiguous()  # reads the weights the next line updates: not a one-time kernel
        weights.assign(weights + x).realize()  # `doubled` keeps the old value (a snapshot)
        return (doubled + 0.5).realize()

    jf = TinyJit(step, prune=True)
    expected = np.ones(4, np.float32)
    for i in range(5):
        x = rand(4, seed=i)
        np.testing.assert_allclose(jf(Tensor(x).realize()).numpy(), expected * 2 + 0.5, rtol=1e-6)
        expected = expected + x


def test_global_counters_count_every_replay():
    jf = TinyJit(lambda a, b: ((a + b).contiguous() * a).sum().realize())
    counts = []
    for i in range(5):
        a, b = Tensor(rand(4, 4, seed=i)).realize(), Tensor(rand(4, 4, seed=i + 1)).realize()
        GlobalCounters.reset()
        jf(a, b)
        counts.append((GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem))
    assert counts[0] == counts[1] == counts[2] == counts[4] and counts[0][0] == 2 and counts[0][1] > 0


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_graph_batches_are_visible(device):
    """Consecutive kernels of one device replay as one recorded queue; a copy to another device ends a batch."""

    def fn(a: Tensor) -> tuple[Tensor, Tensor]:
        x = (a + 1).contiguous().realize()
        y = (x * 2).contiguous().realize()
        moved = y.to("PYTHON" if device == "CPU" else "CPU").realize()
        return (y - a).realize(), (moved + 1).realize()

    jf = TinyJit(fn)
    for i in range(4):
        a = rand(3, seed=i)
        got = jf(Tensor(a, device=device).realize())
        np.testing.assert_allclose(got[0].numpy(), (a + 1) * 2 - a, rtol=1e-6)
        np.testing.assert_allclose(got[1].numpy(), (a + 1) * 2 + 1, rtol=1e-6)
    kinds = [type(ei.prg).__name__ for ei in jf.jit_cache]
    assert kinds == ["CompiledRunner", "CompiledRunner", "BufferCopy", "CompiledRunner", "CompiledRunner"]
    assert [(b.device, b.start, b.end) for b in jf.graph_batches] == [(device, 0, 2)]
    assert all(isinstance(b, GraphBatch) and b.graph is not None for b in jf.graph_batches)


def test_a_jitted_method():
    class Scale:
        def __init__(self) -> None:
            self.w = Tensor(rand(3)).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return (x * self.w).realize()

    model = Scale()
    for i in range(4):
        x = rand(3, seed=i)
        np.testing.assert_allclose(model(Tensor(x)).numpy(), x * model.w.numpy(), rtol=1e-6)


def test_a_jit_inside_a_capture_is_refused():
    inner = TinyJit(lambda t: (t + 1).realize())
    outer = TinyJit(lambda t: (inner(t) * 3).realize())
    outer(Tensor([1.0]))  # eager: the inner jit runs eagerly too
    with pytest.raises(JitError, match="TinyJit inside another TinyJit is not supported"):
        outer(Tensor([1.0]))


def test_jit_off_runs_eagerly():
    jf = TinyJit(add)
    with Context(JIT=0):
        for i in range(4):
            np.testing.assert_allclose(jf(Tensor([float(i)]), Tensor([1.0])).numpy(), [i + 1.0])
    assert jf.captured is None

"""The quick replay path (`TinyJit._replay_inputs`: positional arguments, no variables) and graph batches patched by
buffer position: what the quick path accepts replays as the function computes eagerly, and whatever it does not
accept goes through the full checks, which realize inputs or name what changed."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Context, Tensor
from lazy.engine import jit as jit_module
from lazy.engine.jit import JitError, TinyJit
from lazy.hcq import Exec


@pytest.fixture(autouse=True)
def on_python():
    with Context(DEVICE="PYTHON"):
        yield


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def scaled_sum(a: Tensor, b: Tensor, scale: float) -> Tensor:
    return ((a + b) * scale).contiguous().exp2().realize()


def test_new_inputs_replay_on_the_quick_path(monkeypatch):
    jf = TinyJit(scaled_sum)
    for seed in range(2):  # run, capture
        jf(Tensor(rand(2, 3, seed=seed)), Tensor(rand(2, 3, seed=seed + 9)), 0.5)
    full = []
    monkeypatch.setattr(jit_module, "_prepare", lambda *args: full.append(args))  # the full path would fail now
    for seed in range(2, 5):
        a, b = rand(2, 3, seed=seed), rand(2, 3, seed=seed + 9)
        np.testing.assert_allclose(jf(Tensor(a), Tensor(b), 0.5).numpy(), np.exp2((a + b) * 0.5), rtol=1e-6)
    assert not full
    graph = jf.graph_batches[0].graph
    assert graph is not None
    reading = [cmd for cmd in graph.queue.cmds if isinstance(cmd, Exec)][0]
    assert reading.bufs[1:] == (jf.jit_cache[0].bufs[1].opaque, jf.jit_cache[0].bufs[2].opaque)  # the last inputs


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda a, b: (a, b, 0.25), "argument 2 is 0.25, captured with 0.5"),
        (lambda a, b: (a, b, True), "argument 2 is True, captured with 0.5"),
        (lambda a, b: (a, a, 0.5), "inputs 0 and 1 share memory"),
        (lambda a, b: (a.reshape(3, 2), b, 0.5), r"input 0 has shape \(3, 2\), captured with \(2, 3\)"),
        (lambda a, b: (a, b.cast("int32"), 0.5), "input 1 has dtype"),
        (lambda a, b: (a, b[:, :2].pad(((0, 0), (0, 1))), 0.5), "input 1 has a view of its memory"),
        (lambda a, b: (a, b), r"called with arguments \['0', '1'\], captured with \['0', '1', '2'\]"),
    ],
)
def test_what_the_quick_path_refuses_is_named(make, match):
    jf = TinyJit(scaled_sum)
    a, b = Tensor(rand(2, 3)), Tensor(rand(2, 3, seed=1))
    for _ in range(3):
        jf(a, b, 0.5)
    with pytest.raises(JitError, match=match):
        jf(*make(a, b))


def test_an_unrealized_input_is_realized_before_a_replay():
    jf = TinyJit(scaled_sum)
    a, b = rand(2, 3), rand(2, 3, seed=1)
    for _ in range(4):
        out = jf(Tensor(a) + 1, Tensor(b), 0.5)  # a sum nothing has computed yet
    np.testing.assert_allclose(out.numpy(), np.exp2((a + 1 + b) * 0.5), rtol=1e-6)


def test_a_returned_list_is_a_new_list_every_replay():
    jf = TinyJit(lambda a: [(a + 1).realize(), (a * 2).realize()])
    outs = [jf(Tensor(rand(4))) for _ in range(4)]
    outs[2].append("mine")
    assert len(outs[3]) == 2 and outs[2] is not outs[3]


def test_a_reset_jit_replays_its_new_arguments():
    jf = TinyJit(lambda a, *rest: (a + sum(rest, Tensor(0.0))).realize() if rest else (a * 3).realize())
    a, b = rand(3), rand(3, seed=1)
    for _ in range(3):
        jf(Tensor(a), Tensor(b))
    jf.reset()
    for _ in range(3):
        out = jf(Tensor(a))
    np.testing.assert_allclose(out.numpy(), a * 3, rtol=1e-6)


def test_a_new_input_equal_to_the_last_one_is_still_a_new_buffer():
    """A replay moves the graph onto each call's own memory, found by identity: the PYTHON device's buffers are
    memoryviews, which compare equal by contents, so an input holding what the last one holds must not be taken for
    it (its in-place update would land in the last input instead)."""

    def double_plus_one(a: Tensor) -> Tensor:
        return a.assign((a + 1).contiguous() * 2).realize()  # two kernels: one graph batch

    jf = TinyJit(double_plus_one)
    last = Tensor(np.zeros(4, np.float32)).realize()
    for _ in range(4):
        now = Tensor(last.numpy()).realize()  # the same contents as the last input now has, in memory of its own
        before = now.numpy()
        jf(now)
        np.testing.assert_array_equal(now.numpy(), (before + 1) * 2)
        np.testing.assert_array_equal(last.numpy(), before)  # the last input is left alone
        last = now

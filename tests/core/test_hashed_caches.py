"""The eager path's caches are keyed by the hash of a structure, not the structure itself (`lazy.lazy._cache`, the
identical-node cache; `lazy.engine.realize.schedule_cache`): a key is hashed once, not at every lookup. Two different
structures with one hash must never share an entry: a node of another structure is not returned, a schedule made for
another structure is not run. The tests force such a collision by putting another structure's entry at the slot."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Tensor
from lazy import lazy as lazy_graph
from lazy.engine import realize as engine
from lazy.engine.schedule import graph_structure
from lazy.lazy import LazyBuffer
from lazy.ops import Ops

X = np.arange(16, dtype=np.float32)


def test_identical_nodes_are_shared_and_a_colliding_entry_is_not() -> None:
    x = Tensor(X).realize().lazydata
    one, same = x.e(Ops.ADD, x.const(1.0)), x.e(Ops.ADD, x.const(1.0))
    assert one is same  # an identical live node is shared
    two = x.e(Ops.MUL, x.const(3.0))
    # another structure's node sits at the slot `x + 2` will look up: it must not be returned
    key = lazy_graph._key(x.device, x.st, x.dtype, Ops.ADD, None, (x, x.const(2.0)), None)
    lazy_graph._cache[hash(key)] = lazy_graph._cache[two._cache_slot]
    added = x.e(Ops.ADD, x.const(2.0))
    assert added is not two and added.op is Ops.ADD
    assert x.e(Ops.ADD, x.const(2.0)) is added  # the new node took the slot
    np.testing.assert_equal(_value(added), X + 2)


def _value(lb: LazyBuffer) -> np.ndarray:
    from lazy.function import _constant

    return _constant(lb).numpy()


def test_a_schedule_at_a_colliding_slot_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "schedule_cache", {})
    x = Tensor(X).realize()
    np.testing.assert_equal((x * 3).numpy(), X * 3)
    times_three = list(engine.schedule_cache.values())[-1]  # (the most recent: realizing x may have made one)
    # the entry of `x * 3` moved to the slot where `x - 5` will be looked up
    plus = x - 5
    slot = hash((graph_structure([plus.lazydata]).key, engine.BEAM.value, engine.NOOPT.value))
    engine.schedule_cache.clear()
    engine.schedule_cache[slot] = times_three
    plus.realize()
    assert engine.schedule_cache[slot] is not times_three  # replaced by the schedule made for `x - 5`
    np.testing.assert_equal(plus.numpy(), X - 5)
    again = x - 5
    again.realize()
    assert engine.schedule_cache[slot] is not times_three
    np.testing.assert_equal(again.numpy(), X - 5)


def test_a_constant_no_rule_names_is_not_folded() -> None:
    """The rules skip an op none of whose constants a rule of it looks for (`lazy.rewrite._RULE_CONSTS`); those a
    rule names still fold in every dtype (tests/core/test_rewrite_rules.py)."""
    ints = Tensor(np.array([1, 2, 3], dtype=np.int32)).realize().lazydata
    floats = Tensor(np.array([1, 2, 3], dtype=np.float32)).realize().lazydata
    for x, op, value in ((ints, Ops.ADD, 1), (ints, Ops.MUL, 2), (ints, Ops.IDIV, 3), (floats, Ops.ADD, -0.5),
                         (floats, Ops.MUL, 0.0), (floats, Ops.MUL, -1.0)):  # fmt: skip
        const = x.const(value)
        out = x.e(op, const)
        assert out.op is op and out.srcs == (x, const)


def test_dead_nodes_entries_are_swept_so_the_cache_stays_bounded() -> None:
    """A node's entry outlives it (no callback as each node dies) until the dead entries are swept, which happens
    whenever the cache has doubled: 20000 nodes made and dropped leave it within twice the sweep threshold."""
    x = Tensor(X).realize().lazydata
    before = len(lazy_graph._cache)
    for i in range(20000):
        x.reshape((4, 4)).permute((1, 0)).reshape((2, 8)).shrink(((0, 1), (i % 8, 8)))  # views, none kept
        x.e(Ops.ADD, x.const(float(i)))
    assert len(lazy_graph._cache) <= max(2 * lazy_graph.SWEEP_MIN, 2 * before) + 16
    assert sum(ref() is None for ref in lazy_graph._cache.values()) < len(lazy_graph._cache)
    kept = x.e(Ops.MUL, x.const(7.0))
    assert x.e(Ops.MUL, x.const(7.0)) is kept  # live nodes are still shared after sweeps

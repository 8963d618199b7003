"""Sharded tensors (`Tensor.shard`) on CPU:0..3 against the same ops unsharded: values and gradients for each op
class, uneven splits, an optimizer step on a sharded MLP, and the refused inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from lazy.helpers import ArgumentError, ShapeError
from lazy.multi import MultiLazyBuffer, split_bounds
from lazy.nn import optim
from lazy.tensor import Tensor

DEVICES = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
TWO = DEVICES[:2]


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check(
    fn: Callable[..., Tensor],
    arrays: list[np.ndarray],
    layouts: Sequence[tuple[tuple[str, ...], int | None]],
    atol: float = 1e-4,
) -> None:
    """fn on the sharded inputs against fn on plain ones: the value, and each input's gradient of sum(out * r)."""
    plain = [Tensor(a, requires_grad=True) for a in arrays]
    sharded = [Tensor(a).shard(devs, axis).requires_grad_(True) for a, (devs, axis) in zip(arrays, layouts)]
    out_plain, out_sharded = fn(*plain), fn(*sharded)
    np.testing.assert_allclose(out_sharded.numpy(), out_plain.numpy(), atol=atol, rtol=1e-4)
    weight = _data(*(int(d) for d in out_plain.shape), seed=9)
    (out_plain * Tensor(weight)).sum().backward()
    (out_sharded * Tensor(weight, device=out_sharded.device)).sum().backward()
    for p, s in zip(plain, sharded):
        assert p.grad is not None and s.grad is not None
        assert isinstance(s.grad.lazydata, MultiLazyBuffer) and s.grad.lazydata.axis == s.lazydata.axis
        np.testing.assert_allclose(s.grad.numpy(), p.grad.numpy(), atol=atol, rtol=1e-4)


def test_split_bounds_are_ceil_chunks_with_a_smaller_last() -> None:
    assert split_bounds(8, 4) == ((0, 2), (2, 4), (4, 6), (6, 8))
    assert split_bounds(7, 2) == ((0, 4), (4, 7))
    assert split_bounds(5, 4) == ((0, 2), (2, 3), (3, 4), (4, 5))  # ceil would leave the last device nothing


def test_shard_places_each_slice_on_its_device() -> None:
    x = Tensor(np.arange(10, dtype=np.float32)).shard(DEVICES, axis=0)
    assert x.device == ("CPU", "CPU:1", "CPU:2", "CPU:3") and x.shape == (10,)
    multi = x.lazydata
    assert isinstance(multi, MultiLazyBuffer)
    assert [lb.shape for lb in multi.lbs] == [(3,), (3,), (3,), (1,)]
    np.testing.assert_equal(x.numpy(), np.arange(10))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_elementwise_with_constants_and_broadcast(axis: int | None) -> None:
    row = _data(5, seed=1)
    _check(lambda x: (x * 2 + 1).relu() * Tensor(row, device=x.device) - x.exp(), [_data(6, 5)], [(DEVICES, axis)])


def test_replicated_operand_is_sliced_to_the_sharded_layout() -> None:
    _check(lambda x, y: x * y + y, [_data(8, 3), _data(8, 3, seed=1)], [(DEVICES, 0), (DEVICES, None)])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reduce_axis", [0, 1, None])
def test_sum_and_max_over_split_and_other_axes(axis: int, reduce_axis: int | None) -> None:
    _check(lambda x: x.sum(reduce_axis) + x.max(reduce_axis), [_data(6, 7)], [(DEVICES, axis)])


def test_allreduce_of_fewer_elements_than_devices_and_uneven_shards() -> None:
    _check(lambda x: x.sum(0), [_data(7, 3)], [(DEVICES, 0)])  # (3 elements, 4 devices; shards 2,2,2,1)
    _check(lambda x: x.mean(), [_data(9)], [(DEVICES, 0)])


@pytest.mark.parametrize("w_axis", [0, 1])
def test_matmul_with_weight_sharded_on_either_axis(w_axis: int) -> None:
    _check(lambda x, w: x @ w, [_data(5, 8), _data(8, 6, seed=1)], [(DEVICES, None), (DEVICES, w_axis)])


def test_matmul_data_parallel_batch_sharded_input() -> None:
    _check(lambda x, w: (x @ w).relu(), [_data(8, 5), _data(5, 3, seed=1)], [(TWO, 0), (TWO, None)])


def test_movement_ops_follow_the_split_axis() -> None:
    layout: list[tuple[tuple[str, ...], int | None]] = [(TWO, 1)]
    _check(lambda x: x.permute(1, 0, 2) * 3, [_data(2, 6, 4)], layout)
    _check(lambda x: x.reshape(2, 24), [_data(2, 6, 4)], layout)  # merged with the axis after it
    _check(lambda x: x.reshape(2, 4, 2, 4), [_data(2, 8, 4)], layout)  # split: the shards hold the outer part
    _check(lambda x: x.reshape(2, 1, 6, 4).expand(2, 3, 6, 4), [_data(2, 6, 4)], layout)
    _check(lambda x: x[:, 1:5].pad(((1, 0), (2, 3), (0, 1))), [_data(2, 6, 4)], layout)
    _check(lambda x: x.flip(1) + x, [_data(2, 6, 4)], layout)
    _check(lambda x: x[:, 1:4, ::2].sum(1), [_data(2, 7, 4)], [(DEVICES, 1)])  # a slice leaving uneven shards


def test_reshape_that_cuts_across_shards_is_refused() -> None:
    x = Tensor(_data(4, 6)).shard(TWO, axis=1)
    with pytest.raises(ShapeError, match="cut across the shards"):
        x.reshape(24)


def test_differently_sharded_operands_are_refused_naming_both() -> None:
    x, y = Tensor(_data(4, 4)).shard(TWO, axis=0), Tensor(_data(4, 4)).shard(TWO, axis=1)
    with pytest.raises(ArgumentError, match=r"sharded on axis 1 .*sharded on axis 0 "):
        x + y


def test_bad_shard_arguments() -> None:
    x = Tensor(_data(4, 4))
    with pytest.raises(IndexError, match="out of range"):
        x.shard(TWO, axis=2)
    with pytest.raises(ArgumentError, match="empty"):
        x.shard((), axis=0)
    with pytest.raises(ArgumentError, match="more than once"):
        x.shard(("CPU", "CPU:0"), axis=0)
    with pytest.raises(ShapeError, match="fewer than"):
        Tensor(_data(2)).shard(DEVICES, axis=0)


def test_shard_in_place_to_tuple_and_resharding() -> None:
    a = _data(4, 6)
    x = Tensor(a)
    assert x.shard_(TWO, axis=1) is x and isinstance(x.lazydata, MultiLazyBuffer)
    np.testing.assert_allclose(x.shard(TWO, axis=0).numpy(), a)
    np.testing.assert_allclose(x.to("CPU:2").numpy(), a)
    replicated = Tensor(a).to(list(TWO))
    assert replicated.device == ("CPU", "CPU:1") and replicated.lazydata.axis is None
    np.testing.assert_allclose(replicated.shard(DEVICES[2:], axis=0).numpy(), a)


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_optimizer_step_on_a_sharded_mlp_matches_unsharded(opt: str) -> None:
    def train(shard: bool) -> list[np.ndarray]:
        w1, w2, x = Tensor(_data(6, 8, seed=1)), Tensor(_data(8, 3, seed=2)), Tensor(_data(4, 6, seed=3))
        if shard:  # a tensor-parallel MLP: hidden units split, the second matmul's partial products allreduced
            w1, w2, x = w1.shard(TWO, axis=1), w2.shard(TWO, axis=0), x.to(TWO)
        params = [w1.requires_grad_(True), w2.requires_grad_(True)]
        optimizer = optim.SGD(params, lr=0.1, momentum=0.9) if opt == "sgd" else optim.Adam(params, lr=0.01)
        with Tensor.train():
            for _ in range(2):
                optimizer.zero_grad()
                loss = ((x @ w1).relu() @ w2).square().mean()
                loss.backward()
                optimizer.step()
        return [p.numpy() for p in params]

    for got, want in zip(train(True), train(False)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_like_constructors_and_optimizer_state_keep_the_sharding() -> None:
    # an optimizer's moments for a sharded weight hold one slice per device, in the weight's (uneven) layout
    w = Tensor(_data(9, 4)).shard(TWO, axis=0)[1:]  # 8 rows split 4/4 from 5/4: bounds that shard() would not pick
    assert isinstance(w.lazydata, MultiLazyBuffer)
    for like in (w.zeros_like(), w.ones_like(dtype="int32"), w.full_like(2.5)):
        assert isinstance(like.lazydata, MultiLazyBuffer), like
        assert like.lazydata.axis == 0 and like.lazydata.bounds == w.lazydata.bounds
        assert [lb.shape for lb in like.lazydata.lbs] == [lb.shape for lb in w.lazydata.lbs]
    np.testing.assert_array_equal(w.ones_like(dtype="int32").numpy(), np.ones((8, 4), np.int32))
    assert w.zeros_like(device="CPU:2").device == "CPU:2"  # another device: a plain tensor there
    params = [w.contiguous().requires_grad_(True)]
    adam = optim.Adam(params)
    for state in adam.m + adam.v:
        assert isinstance(state.lazydata, MultiLazyBuffer) and state.lazydata.bounds == w.lazydata.bounds
        assert sum(int(lb.shape[0]) for lb in state.lazydata.lbs) == 8  # slices, not a whole copy on each device


@pytest.mark.parametrize("axis", [0, 1])
def test_a_long_running_sum_along_or_across_the_sharded_axis(axis):
    """cumsum of an axis longer than `CUMULATIVE_BLOCK` scans it in blocks, except along the axis split over the
    devices, whose blocks would cut across the shards (it masks the whole axis there, as short axes do)."""
    a = _data(4, 200)
    got = Tensor(a).shard(TWO, axis=axis).cumsum(1).numpy()
    np.testing.assert_allclose(got, np.cumsum(a.astype(np.float64), 1), rtol=1e-5, atol=1e-4)


def test_a_split_axis_of_one_element_is_replicated_to_expand_reshape_or_drop() -> None:
    """A split axis sliced or indexed down to one element: expanding it kept one element's shape ((1, 4), no error),
    dropping it (`x[4]` of a split vector, prod and cumprod along it) raised "would cut across the shards", and a
    reshape round trip guessed the wrong axis for it (operands "sharded differently")."""
    d = DEVICES[:2]
    a = np.arange(36, dtype=np.float32).reshape(9, 4)
    assert Tensor(a).shard(d, axis=0)[1:2].expand(4, 4).tolist() == np.broadcast_to(a[1:2], (4, 4)).tolist()
    summed = Tensor(a).shard(d, axis=0)[6:7] + Tensor(np.zeros((4, 4), np.float32)).shard(d)
    np.testing.assert_array_equal(summed.numpy(), np.broadcast_to(a[6:7], (4, 4)))
    assert Tensor(np.arange(9.0, dtype=np.float32)).shard(d, axis=0)[4].item() == 4.0
    np.testing.assert_array_equal(Tensor(a.T.copy()).shard(d, axis=1)[:, 4].numpy(), a[4])
    np.testing.assert_allclose(Tensor(a).shard(d, axis=0).prod(0).numpy(), a.prod(0), rtol=1e-6)
    np.testing.assert_allclose(Tensor(a).shard(d, axis=0).cumprod(0).numpy(), a.cumprod(0), rtol=1e-6)
    s = Tensor(a).shard(d, axis=1)[0:1, 1:2]
    assert (s + s.reshape(1).reshape(1, 1)).item() == 2.0
    x = Tensor(a).shard(d, axis=0).requires_grad_()
    (x[6:7].expand(4, 4) * 2).sum().backward()
    assert x.grad is not None
    want = np.zeros_like(a)
    want[6] = 8
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_the_gradient_of_a_reshape_that_left_uneven_shards() -> None:
    """reshape (2, 7, 6) -> (2, 42) split on axis 1 gives shards of 24 and 18; a gradient split evenly (21 and 21,
    from the other operand) could not be reshaped back: ShapeError in backward."""
    d = DEVICES[:2]
    x = Tensor(np.arange(84.0, dtype=np.float32).reshape(2, 7, 6)).shard(d, axis=1).requires_grad_()
    y = Tensor(np.arange(84.0, dtype=np.float32).reshape(2, 42) * 0.5).shard(d, axis=1)
    (x.reshape(2, 42) * y).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), (np.arange(84.0) * 0.5).reshape(2, 7, 6))


def test_setitem_of_a_sharded_tensor_says_what_to_do() -> None:
    x = Tensor(np.zeros((4, 4), np.float32)).shard(DEVICES[:2], axis=0)
    with pytest.raises(ArgumentError, match="where"):
        x[2] = 5.0


@pytest.mark.parametrize("axis", [0, 1, None])
def test_safe_save_of_a_sharded_tensor_writes_its_whole_value(tmp_path, axis: int | None) -> None:
    from lazy.nn.state import safe_load, safe_save

    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    path = tmp_path / "sharded.safetensors"
    safe_save({"t": Tensor(a).shard(TWO, axis).realize()}, path)
    np.testing.assert_array_equal(safe_load(path)["t"].to("CPU").numpy(), a)


def test_sharding_fixes_from_fuzzing():
    """Found by fuzzing sharded programs against the same program on one device: random numbers (and so dropout in
    training) on sharded tensors failed; `load_state_dict` dropped a sharded model's split; a split axis of size 0
    (or a 0-size axis after it) crashed in gathers and reshapes; a 0-d tensor split on an axis, and a cat across
    devices, gave messages naming other things."""
    from lazy.helpers import ArgumentError
    from lazy.nn import Linear
    from lazy.nn.state import load_state_dict

    d = ("CPU", "CPU:1")  # (as the device tuple reads back: CPU:0 is CPU)
    x = Tensor(np.ones((5, 6), np.float32)).shard(d, axis=0)
    for made in (x.rand_like(), x.randn_like()):
        assert made.device == d and made.lazydata.axis == 0 and made.shape == (5, 6)
    r = x.rand_like().numpy()
    assert ((r >= 0) & (r < 1)).all() and len(np.unique(r)) == r.size
    assert Tensor.rand(3, 4, device=d).device == d and Tensor.randn(3, device=d).lazydata.axis is None
    with Tensor.train():
        dropped = x.dropout(0.5)
    kept = dropped.numpy()
    assert dropped.lazydata.axis == 0 and set(np.unique(kept)) <= {0.0, 2.0} and 0 < (kept > 0).sum() < kept.size
    m = Linear(5, 4)
    m.weight.shard_(d, axis=0)
    m.bias.shard_(d, axis=0)
    load_state_dict(m, {"weight": Tensor(np.ones((4, 5), np.float32)), "bias": Tensor(np.zeros(4, np.float32))},
                    verbose=False)  # fmt: skip
    assert m.weight.lazydata.axis == 0 and m.bias.lazydata.axis == 0 and m.weight.numpy().sum() == 20
    empty = Tensor(np.ones((4, 6), np.float32)).shard(d, axis=1)[:, 3:3]
    assert empty.to("CPU:1").shape == (4, 0) and empty.shard(d, axis=0).shape == (4, 0)
    z = Tensor(np.ones((4, 0), np.float32)).shard(d, axis=0)
    assert z.reshape(4, 0, 1).shape == (4, 0, 1) and z.unsqueeze(-1).shape == (4, 0, 1)
    assert (z @ Tensor(np.ones((0, 3), np.float32)).to(d)).numpy().tolist() == [[0.0] * 3] * 4
    with pytest.raises(ArgumentError, match="a 0-d tensor has no axis 0 to split"):
        Tensor(3.0).shard(d, axis=0)
    with pytest.raises(ValueError, match=r"cat: tensors are on different devices"):
        x.cat(Tensor.ones(5, 6))


def test_to_another_device_passes_the_gradient_back():
    """`.to` of a tensor that requires a gradient is part of the graph (PyTorch's): the gradient was None."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.to("CPU:1")
    (y * y).sum().backward()
    assert x.grad.device == "CPU" and x.grad.numpy().tolist() == [2, 4, 6] and y.grad.numpy().tolist() == [2, 4, 6]
    x = Tensor([1.0, 2.0], requires_grad=True)
    (g,) = (x.to("PYTHON") ** 3).sum().gradient(x)
    (g2,) = g.sum().gradient(x)  # through the copy twice
    assert g.device == "CPU" and g2.numpy().tolist() == [6, 12]
    w = Tensor([1.0, 2.0], requires_grad=True)
    w.to_("CPU:1")  # moved in place: still a leaf
    assert w.device == "CPU:1" and w._ctx is None and w.requires_grad


def test_a_resharded_tensor_has_memory_of_its_own():
    """Resharded shards were views of the gathered value (a write through them was refused: an optimizer's step on a
    resharded parameter failed), or, for the same layout, the very shards (a write changed the tensor they came
    from). They are copies now, as a first split's."""
    d = ("CPU", "CPU:1")
    w = Tensor(np.ones((4, 6), np.float32)).shard(d, axis=0).realize().shard(d, axis=1).realize()
    w += 1
    assert w.numpy().tolist() == [[2.0] * 6] * 4 and w.lazydata.axis == 1
    w = Tensor(np.ones((4, 6), np.float32)).to(d).realize().shard(d, axis=0).realize().requires_grad_()
    opt = optim.SGD([w], lr=0.1)
    with Tensor.train():
        (w * w).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), np.full((4, 6), 0.8, np.float32))
    s = Tensor(np.zeros(4, np.float32)).shard(d, axis=0).realize()
    t = s.shard(d, axis=0)
    t += 1
    assert s.numpy().tolist() == [0, 0, 0, 0] and t.numpy().tolist() == [1, 1, 1, 1]


def test_backward_where_a_gradient_meets_another_layout():
    """A gradient summed from operands split differently took their layout, and the op's backward then refused it
    (the forward had run): a row-parallel matmul times a column-split tensor, a reshape of a replicated value times a
    split one, a max or std over the split axis times a tensor split on another. Against one device."""
    d = ("CPU", "CPU:1")
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 9), (9, 8), (5, 8)))
    x9 = np.arange(54, dtype=np.float32).reshape(9, 6) * 0.37 % 5

    def cases(split: bool):
        def place(v, axis):
            t = Tensor(v)
            return (t.shard(d, axis) if axis is not None else t.to(d)) if split else t

        x, w = place(a, None).requires_grad_(), place(b, 0).requires_grad_()
        ((x @ w) * place(c, 1)).sum().backward()
        yield from (x.grad, w.grad)
        x = place(a[:, :3].copy(), None).requires_grad_()
        (x.reshape(15) * place(np.arange(15, dtype=np.float32), 0)).sum().backward()
        yield x.grad
        for reduce in ("max", "std"):
            x = place(x9, 0).requires_grad_()
            (getattr(x, reduce)(0, keepdim=True) * place(np.ones((1, 6), np.float32) * 3, 1)).sum().backward()
            yield x.grad

    for got, want in zip(cases(True), cases(False)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)

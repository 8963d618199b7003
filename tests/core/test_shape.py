"""lazy.shape: View canonical forms, merges to one view, argument errors, and random movement-op sequences checked
element by element against numpy (an `arange` buffer, padding marked -1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazy.shape import ShapeTracker, View, strides_for_shape
from lazy.symbolic import NumNode, Variable, sym_infer

# ---------------------------------------------------------------------------------------------------------------------
# reference: evaluate a tracker at every element and compare with numpy


def mapping(tracker: ShapeTracker) -> np.ndarray:
    """The buffer index of every element, -1 where it is padding."""
    idxs = tracker.default_idxs()
    idx, valid = tracker.expr_idxs(idxs)
    args = ",".join(v.expr for v in idxs)
    fidx, fvalid = eval(f"lambda {args}: {idx.render()}"), eval(f"lambda {args}: {valid.render()}")
    out = np.empty(tracker.shape, dtype=np.int64)
    for pos in np.ndindex(*tracker.shape):
        out[pos] = fidx(*pos) if fvalid(*pos) else -1
    return out


def apply_numpy(arr: np.ndarray, op: str, arg) -> np.ndarray:
    if op == "reshape":
        return arr.reshape(arg)
    if arr.ndim == 0:  # every other op of a 0-d array is the identity (np.pad refuses its empty widths)
        return arr
    if op == "permute":
        return arr.transpose(arg)
    if op == "expand":
        return np.broadcast_to(arr, arg)
    if op == "pad":
        return np.pad(arr, arg, constant_values=-1)
    if op == "shrink":
        return arr[tuple(slice(b, e) for b, e in arg)]
    if op == "flip":
        return np.flip(arr, tuple(i for i, f in enumerate(arg) if f)) if any(arg) else arr
    assert op == "stride"
    return arr[tuple(slice(None, None, m) for m in arg)]


def random_factorization(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    if size == 1 and draw(st.booleans()):
        return ()  # 0-d: no axis left to hold a mask (an all-padding element once read the buffer)
    ndim = draw(st.integers(1, 4))
    dims = [1] * ndim
    if size == 0:
        dims[draw(st.integers(0, ndim - 1))] = 0
    rest, factor = size, 2
    while rest > 1:
        while rest % factor:
            factor += 1
        dims[draw(st.integers(0, ndim - 1))] *= factor
        rest //= factor
    return tuple(dims)


@st.composite
def op_sequences(draw: st.DrawFn):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    ops, cur = [], shape
    for _ in range(draw(st.integers(1, 8))):
        size = int(np.prod(cur))
        op = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip", "stride"]))
        if op == "reshape":
            arg = random_factorization(draw, size)
        elif op == "permute":
            arg = tuple(draw(st.permutations(range(len(cur)))))
        elif op == "expand":
            if size > 400:
                continue
            arg = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in cur)
        elif op == "pad":
            if size > 400:
                continue
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)
        elif op == "shrink":
            arg = []
            for s in cur:
                begin = draw(st.integers(0, s))
                arg.append((begin, draw(st.integers(begin, s))))
            arg = tuple(arg)
        elif op == "flip":
            arg = tuple(draw(st.booleans()) for _ in cur)
        else:
            arg = tuple(draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in cur)
        ops.append((op, arg))
        cur = apply_numpy(np.empty(cur), op, arg).shape
    return shape, ops


def run(shape: tuple[int, ...], ops: list) -> tuple[ShapeTracker, np.ndarray]:
    tracker, arr = ShapeTracker.from_shape(shape), np.arange(int(np.prod(shape))).reshape(shape)
    for op, arg in ops:
        tracker, arr = getattr(tracker, op)(arg), apply_numpy(arr, op, arg)
        assert tracker.shape == arr.shape, f"{op}{arg}: shape {tracker.shape} != numpy {arr.shape}"
    return tracker, arr


@settings(max_examples=300, deadline=None)
@given(op_sequences())
def test_movement_ops_match_numpy(case):
    shape, ops = case
    tracker, arr = run(shape, ops)
    np.testing.assert_array_equal(mapping(tracker), arr, err_msg=f"{shape} {ops}\n{tracker.views}")
    simplified = tracker.simplify()
    assert len(simplified.views) <= len(tracker.views)
    np.testing.assert_array_equal(mapping(simplified), arr, err_msg=f"simplify: {shape} {ops}\n{simplified.views}")


@settings(max_examples=200, deadline=None)
@given(op_sequences(), st.data())
def test_composition_matches_numpy(case, data):
    shape, ops = case
    cut = data.draw(st.integers(0, len(ops)))
    first, arr = run(shape, ops[:cut])
    second, arr = run(arr.shape, ops[cut:])
    expected = apply_all(np.arange(int(np.prod(shape))).reshape(shape), ops)
    np.testing.assert_array_equal(mapping(first + second), expected, err_msg=f"{shape} {ops} cut at {cut}")


def apply_all(arr: np.ndarray, ops: list) -> np.ndarray:
    for op, arg in ops:
        arr = apply_numpy(arr, op, arg)
    return arr


@settings(max_examples=200, deadline=None)
@given(op_sequences())
def test_flat_index_real_size_and_real_strides(case):
    shape, ops = case
    tracker, arr = run(shape, ops)
    flat = arr.reshape(-1)
    idx, valid = tracker.expr_node()
    var = Variable("idx", 0, max(flat.size - 1, 0))
    for i in range(0, flat.size, max(1, flat.size // 50)):
        expected = flat[i]
        assert sym_infer(valid, {var: i}) == int(expected != -1)
        if expected != -1:
            assert sym_infer(idx, {var: i}) == expected
    reachable = arr.max() + 1 if arr.size and arr.max() >= 0 else 0
    assert reachable <= tracker.real_size() <= int(np.prod(shape))
    if len(tracker.views) == 1:
        assert tracker.real_size() == reachable
    for axis, stride in enumerate(tracker.real_strides()):
        if stride is None or arr.shape[axis] < 2:
            continue
        ahead = np.take(arr, range(1, arr.shape[axis]), axis=axis)
        behind = np.take(arr, range(arr.shape[axis] - 1), axis=axis)
        both = (ahead != -1) & (behind != -1)
        np.testing.assert_array_equal((ahead - behind)[both], stride)


# ---------------------------------------------------------------------------------------------------------------------
# canonical views


def test_create_canonical():
    view = View.create((3, 1, 4))
    assert view.strides == (4, 0, 1) and view.contiguous and view.mask is None and view.offset == 0
    assert strides_for_shape((2, 1, 3)) == (3, 0, 1)
    assert View.create((3, 4), mask=((0, 3), (0, 4))).mask is None  # full mask dropped
    empty = View.create((3, 4), (4, 1), 5, mask=((1, 1), (0, 4)))
    assert empty.mask == ((0, 0), (0, 0)) and empty.strides == (0, 0) and empty.offset == 0
    folded = View.create((3, 4), (4, 1), 0, mask=((1, 2), (0, 4)))  # one valid row: its address goes to offset
    assert folded.strides == (0, 1) and folded.offset == 4
    assert View.create((2, 0, 3)).strides == (0, 0, 0)
    assert View.create((3, 4)) == View.create((3, 4), (4, 1))


# ---------------------------------------------------------------------------------------------------------------------
# merges to one view


def test_reshape_of_contiguous_is_one_view():
    tracker = ShapeTracker.from_shape((4, 6)).reshape((2, 12)).reshape((24,)).reshape((2, 3, 4))
    assert len(tracker.views) == 1 and tracker.contiguous


def test_permute_then_reshape_split_and_merge():
    tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((3, 2, 2, 2))  # split both axes
    assert len(tracker.views) == 1 and tracker.views[0].strides == (2, 1, 12, 6)
    merged = ShapeTracker.from_shape((2, 3, 4)).permute((2, 0, 1)).reshape((4, 6))  # (2,3) stay adjacent: merge
    assert len(merged.views) == 1 and merged.views[0].strides == (1, 4)
    unmergeable = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
    assert len(unmergeable.views) == 2 and len(unmergeable.simplify().views) == 2


def test_expand_then_reshape_of_other_axes():
    tracker = ShapeTracker.from_shape((1, 6)).expand((4, 6)).reshape((4, 2, 3))
    assert len(tracker.views) == 1 and tracker.views[0].strides == (0, 3, 1)
    split_expanded = ShapeTracker.from_shape((1, 6)).expand((4, 6)).reshape((2, 2, 6))
    assert len(split_expanded.views) == 1 and split_expanded.views[0].strides == (0, 0, 1)


def test_masked_reshapes_stay_one_view():
    padded = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0)))
    assert len(padded.reshape((1, 5, 4, 1)).views) == 1  # insert size-1 axes
    assert len(padded.reshape((5, 2, 2)).views) == 1  # split an unmasked axis
    assert len(padded.reshape((20,)).views) == 1  # padding only on the outer axis: still one interval
    assert len(ShapeTracker.from_shape((3, 4)).pad(((0, 0), (1, 1))).reshape((18,)).views) == 2


def test_simplify_merges_views():
    tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,)).shrink(((0, 4),))
    assert len(tracker.views) == 2
    simplified = tracker.simplify()
    assert len(simplified.views) == 1 and simplified.views[0].strides == (6,)
    back = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,)).reshape((6, 4)).simplify()
    assert back.views == ShapeTracker.from_shape((4, 6)).permute((1, 0)).views


def test_view_add():
    base = View.create((4, 6)).permute((1, 0))
    assert base + View.create((6, 4)) == base  # identity on top
    assert View.create((24,)) + base == base  # contiguous below
    assert base + View.create((24,)) is None


def test_minify():
    view = View.create((2, 3, 4), (12, 4, 1), 0)
    assert view.minify().shape == (24,)
    permuted = View.create((2, 3, 4)).permute((0, 2, 1))
    assert permuted.minify().shape == (2, 4, 3)


def test_an_all_padding_element_reshaped_to_0d_stays_padding():
    padding = ShapeTracker.from_shape((3,)).pad(((0, 2),)).shrink(((3, 4),))
    assert mapping(padding.reshape(())).item() == -1
    single = ShapeTracker.from_shape((2,)).shrink(((1, 2),)).reshape(())
    assert mapping(ShapeTracker.from_shape((1,)).pad(((0, 1),)) + single).item() == -1
    assert mapping(ShapeTracker.from_shape((1,)).pad(((1, 0),)) + single).item() == 0


def test_expand_keeps_empty_mask():
    empty = ShapeTracker.from_shape((1, 1)).pad(((0, 0), (0, 1))).stride((-3, -3)).reshape((1,)).expand((2,))
    assert mapping(empty).tolist() == [-1, -1]


def split_axes(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A new shape that splits every axis into a random factorization (with random size-1 axes)."""
    return tuple(d for size in shape for d in random_factorization(draw, size))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data())
def test_permute_then_split_is_one_view(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    tracker = ShapeTracker.from_shape(shape).permute(perm)
    new_shape = split_axes(data.draw, tracker.shape)
    tracker = tracker.reshape(new_shape)
    assert len(tracker.views) == 1
    np.testing.assert_array_equal(
        mapping(tracker), np.arange(int(np.prod(shape))).reshape(shape).transpose(perm).reshape(new_shape)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=2, max_size=5), st.data())
def test_permute_then_merge_adjacent_is_one_view(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    merged = [[perm[0]]]
    for axis in perm[1:]:  # axes that stay neighbours, in order, may merge
        if axis == merged[-1][-1] + 1 and data.draw(st.booleans()):
            merged[-1].append(axis)
        else:
            merged.append([axis])
    new_shape = tuple(int(np.prod([shape[axis] for axis in group])) for group in merged)
    tracker = ShapeTracker.from_shape(shape).permute(perm).reshape(new_shape)
    assert len(tracker.views) == 1
    np.testing.assert_array_equal(
        mapping(tracker), np.arange(int(np.prod(shape))).reshape(shape).transpose(perm).reshape(new_shape)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data())
def test_expand_then_split_other_axes_is_one_view(shape, data):
    ones = [data.draw(st.booleans()) for _ in shape]
    base = tuple(1 if one else size for one, size in zip(ones, shape))
    expanded = tuple(data.draw(st.integers(1, 4)) if one else size for one, size in zip(ones, shape))
    new_shape = tuple(
        d for one, size in zip(ones, expanded) for d in ((size,) if one else random_factorization(data.draw, size))
    )
    tracker = ShapeTracker.from_shape(base).expand(expanded).reshape(new_shape)
    assert len(tracker.views) == 1
    expected = np.broadcast_to(np.arange(int(np.prod(base))).reshape(base), expanded).reshape(new_shape)
    np.testing.assert_array_equal(mapping(tracker), expected)


# ---------------------------------------------------------------------------------------------------------------------
# queries


def test_properties():
    tracker = ShapeTracker.from_shape((3, 4))
    assert tracker.shape == (3, 4) and tracker.size == 12 and tracker.contiguous and tracker.consecutive
    shrunk = tracker.shrink(((1, 3), (0, 4)))
    assert not shrunk.contiguous and shrunk.consecutive and shrunk.real_size() == 12
    assert tracker.shrink(((0, 1), (0, 4))).real_size() == 4
    assert tracker.pad(((0, 0), (2, 2))).real_size() == 12
    assert tracker.pad(((0, 0), (2, 2))).shrink(((0, 3), (0, 1))).real_size() == 0


def test_real_strides_and_masks():
    tracker = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    assert tracker.real_strides() == (1, 4) and tracker.unit_stride_axes() == [0]
    padded = ShapeTracker.from_shape((3, 4)).pad(((0, 0), (1, 1)))
    assert padded.real_strides() == (4, None) and padded.real_strides(ignore_valid=True) == (4, 1)
    assert padded.axis_is_masked(1) and not padded.axis_is_masked(0)
    assert ShapeTracker.from_shape((1, 4)).expand((3, 4)).real_strides() == (0, 1)
    two_views = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
    assert two_views.real_strides() == (None,)


def test_expr_idxs():
    tracker = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    idx, valid = tracker.expr_idxs([NumNode(2), NumNode(1)])
    assert idx == 6 and valid == 1
    padded = ShapeTracker.from_shape((3,)).pad(((1, 0),))
    assert padded.expr_idxs([NumNode(0)])[1] == 0 and padded.expr_idxs([NumNode(1)]) == (NumNode(0), NumNode(1))


# ---------------------------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "op, arg",
    [
        ("reshape", (5, 3)),
        ("reshape", (-1, 12)),
        ("permute", (0, 0)),
        ("permute", (1,)),
        ("expand", (6, 4)),
        ("expand", (3,)),
        ("pad", ((1, 1),)),
        ("pad", ((0, -1), (0, 0))),
        ("shrink", ((0, 4), (0, 4))),
        ("shrink", ((2, 1), (0, 4))),
        ("shrink", ((0, 1),)),
        ("stride", (0, 1)),
        ("stride", (1,)),
    ],
)
def test_invalid_arguments(op, arg):
    tracker = ShapeTracker.from_shape((3, 4))
    with pytest.raises(ValueError, match=op):
        getattr(tracker, op)(arg)


# ---------------------------------------------------------------------------------------------------------------------
# symbolic shapes


def test_symbolic_shape():
    n = Variable("n", 1, 10)
    tracker = ShapeTracker.from_shape((n, 4))
    assert tracker.views[0].strides == (4, 1) and tracker.size == n * 4
    reshaped = tracker.reshape((n, 2, 2))
    assert len(reshaped.views) == 1 and reshaped.views[0].strides == (4, 2, 1)
    flipped = tracker.permute((1, 0)).shrink(((0, 2), (0, n)))
    idx, valid = flipped.expr_idxs()
    assert valid == 1 and flipped.vars() == {n}
    for i, j in itertools.product(range(2), range(3)):
        assert sym_infer(idx, {flipped.default_idxs()[0]: i, flipped.default_idxs()[1]: j, n: 3}) == j * 4 + i
    inner = ShapeTracker.from_shape((4, n))
    assert inner.views[0].strides == (n, 1)
    assert sym_infer(inner.expr_idxs([NumNode(2), NumNode(1)])[0], {n: 5}) == 11


def test_symbolic_pad_and_shrink():
    n = Variable("n", 1, 8)
    padded = ShapeTracker.from_shape((n, 4)).pad(((0, 0), (1, 1)))
    idx, valid = padded.expr_idxs()
    i, j = padded.default_idxs()
    for row, col in itertools.product(range(3), range(6)):
        assert sym_infer(valid, {i: row, j: col, n: 3}) == int(1 <= col <= 4)
        if 1 <= col <= 4:
            assert sym_infer(idx, {i: row, j: col, n: 3}) == row * 4 + col - 1
    shrunk = ShapeTracker.from_shape((8, 4)).shrink(((0, n), (0, 4)))
    assert shrunk.shape == (n, 4) and shrunk.contiguous and shrunk.real_size() == 32
    with pytest.raises(ValueError, match="shrink"):
        ShapeTracker.from_shape((8, 4)).shrink(((0, Variable("m", 1, 16)), (0, 4)))


def test_bound_variables_unbind():
    n = Variable("n", 1, 10)
    tracker = ShapeTracker.from_shape((n.bind(3), 4)).shrink(((0, n.bind(3)), (1, 3)))
    assert tracker.var_vals == {n: 3}
    unbound, var_vals = tracker.unbind()
    assert var_vals == {n: 3} and all(v._val is None for v in unbound.vars())
    assert unbound.shape == (n, 2)

"""ONNX operators on shapes, views and indexing: casts, constants, Shape/Reshape/Slice/Gather/Concat and the like,
Pad, OneHot. Most are written once against `xp` and run on the host when their inputs are there: the shape arithmetic
of exported models (`Shape -> Gather -> Concat -> Reshape`) never becomes a kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lazy.dtype import DType, dtypes
from lazy.helpers import prod
from lazy.onnx.backends import ArrayOps
from lazy.onnx.elem_types import lazy_dtype
from lazy.onnx.registry import Node, OpSpec, axes_input, axis_of, ints
from lazy.tensor import Tensor


def value_dtype(x: Any) -> DType:
    """The lazy dtype of a host array or a Tensor."""
    return x.dtype if isinstance(x, Tensor) else dtypes.from_np(x.dtype)


def _cast(node: Node, xp: ArrayOps, x: Any) -> Any:
    target = lazy_dtype(int(node.attr("to")))
    assert target is not None, "checked at load"
    return _to_fp8(xp, x, target) if target in dtypes.fp8s else xp.cast(x, target)


def _to_fp8(xp: ArrayOps, x: Any, target: Any) -> Any:
    """ONNX's saturating cast to float8: +-inf too become the largest finite value (lazy's own cast, tinygrad's,
    turns inf into NaN for E4M3 and keeps it for E5M2); NaN stays NaN."""
    if not isinstance(x, Tensor):
        x = Tensor(x)
    if dtypes.is_float(x.dtype):
        top = {dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0}[target]  # the largest finite values
        x = x.isinf().where(x.sign() * top, x)
    return xp.cast(x, target)


def _check_cast(node: Node) -> str | None:
    target = lazy_dtype(int(node.attr("to", 0)))
    if target in dtypes.fp8s and not node.attr("saturate", 1):
        return "saturate=0 to a float8 type (lazy's float8 casts saturate: out-of-range values become the largest)"
    return None


def _cast_like(node: Node, xp: ArrayOps, x: Any, like: Any) -> Any:
    target = value_dtype(like)
    if target in dtypes.fp8s and not node.attr("saturate", 1):  # (as Cast's check; the dtype is known only here)
        raise node.invalid("saturate=0 to a float8 type is not supported (lazy's float8 casts saturate: "
                           "out-of-range values become the largest)")  # fmt: skip
    return _to_fp8(xp, x, target) if target in dtypes.fp8s else xp.cast(x, target)


def _identity(node: Node, xp: ArrayOps, x: Any) -> Any:
    return x


def _constant(node: Node, xp: ArrayOps) -> Any:
    import numpy as np

    if "value" in node.attrs:
        return node.attrs["value"]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):  # fmt: skip
        if key in node.attrs:
            return np.array(node.attrs[key], dtype=dtype)
    raise node.refuse(f"only tensor, float and int values are supported, not {sorted(node.attrs)}")


def _check_constant(node: Node) -> str | None:
    known = {"value", "value_float", "value_floats", "value_int", "value_ints"}
    return None if known & set(node.attrs) else f"a {', '.join(sorted(node.attrs))} value (strings and sparse tensors)"


def _constant_of_shape(node: Node, xp: ArrayOps, shape: Any) -> Any:
    import numpy as np

    value = node.attr("value")
    fill = value.reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full(tuple(int(d) for d in shape.reshape(-1)), fill[0], dtype=fill.dtype)


def _range(node: Node, xp: ArrayOps, start: Any, limit: Any, delta: Any) -> Any:
    import numpy as np

    first, stop, step = (v.reshape(()).item() for v in (start, limit, delta))
    if step == 0:
        raise node.invalid("delta is 0")
    count = max(math.ceil((stop - first) / step), 0)
    return (first + step * np.arange(count)).astype(start.dtype)


def _shape(node: Node, xp: ArrayOps, x: Any) -> Any:
    import numpy as np

    dims = tuple(int(d) for d in x.shape)
    start, end = int(node.attr("start", 0)), node.attr("end")
    return np.array(dims[start : None if end is None else int(end)], dtype=np.int64)


def _size(node: Node, xp: ArrayOps, x: Any) -> Any:
    import numpy as np

    return np.array(int(prod(x.shape)), dtype=np.int64)


def _reshape(node: Node, xp: ArrayOps, x: Any, shape: Any) -> Any:
    target = ints(shape)
    if not node.attr("allowzero", 0):  # 0 copies the input's size at that position
        if any(d == 0 and i >= x.ndim for i, d in enumerate(target)):
            raise node.invalid(f"shape {target} copies (0) a dimension at a position {tuple(x.shape)} does not have")
        target = [int(x.shape[i]) if d == 0 else d for i, d in enumerate(target)]
    if target.count(-1) > 1:
        raise node.invalid(f"shape {target} has more than one -1")
    if -1 in target:
        known = prod(d for d in target if d != -1)
        total = int(prod(x.shape))
        if known == 0 or total % known:
            raise node.invalid(f"cannot reshape {tuple(x.shape)} to {target}")
        target[target.index(-1)] = total // known
    return x.reshape(tuple(target))


def _flatten(node: Node, xp: ArrayOps, x: Any) -> Any:
    axis = int(node.attr("axis", 1))
    if not -x.ndim <= axis <= x.ndim:  # (x.ndim itself is allowed: everything in the first dimension)
        raise node.invalid(f"axis {axis} is out of range for a {x.ndim}-d input (Flatten takes [-{x.ndim}, {x.ndim}])")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape((int(prod(x.shape[:axis])), int(prod(x.shape[axis:]))))


def _squeeze(node: Node, xp: ArrayOps, x: Any, axes: Any = None) -> Any:
    chosen = axes_input(node, axes)
    drop = {axis_of(node, a, x.ndim) for a in chosen} if chosen else {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise node.invalid(f"axes {sorted(drop)} of shape {tuple(x.shape)} are not all of size 1")
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in drop))


def _unsqueeze(node: Node, xp: ArrayOps, x: Any, axes: Any = None) -> Any:
    chosen = axes_input(node, axes) or []
    ndim = x.ndim + len(chosen)
    new = {axis_of(node, a, ndim) for a in chosen}
    if len(new) != len(chosen):
        raise node.invalid(f"axes {list(chosen)} name an output axis more than once")
    dims = iter(x.shape)
    return x.reshape(tuple(1 if i in new else next(dims) for i in range(ndim)))


def _transpose(node: Node, xp: ArrayOps, x: Any) -> Any:
    perm = node.ints("perm") or list(reversed(range(x.ndim)))
    return xp.permute(x, perm)


def _concat(node: Node, xp: ArrayOps, *xs: Any) -> Any:
    axis = axis_of(node, int(node.attr("axis")), xs[0].ndim)
    kept = [x for x in xs if x.shape[axis] != 0] or [xs[0]]  # (an empty piece adds nothing)
    return kept[0] if len(kept) == 1 else xp.concat(kept, axis)


def _gather(node: Node, xp: ArrayOps, x: Any, indices: Any) -> Any:
    return xp.take(x, indices, axis_of(node, int(node.attr("axis", 0)), x.ndim))


def _gather_elements(node: Node, xp: ArrayOps, x: Tensor, indices: Any) -> Tensor:
    axis = axis_of(node, int(node.attr("axis", 0)), x.ndim)
    n = int(x.shape[axis])
    if not isinstance(indices, Tensor):  # known on the host: checked there, as Gather's (and onnxruntime's)
        import numpy as np

        if indices.size and not (-n <= indices.min() and indices.max() < n):
            bad = indices[(indices < -n) | (indices >= n)].flat[0]
            raise IndexError(f"GatherElements: index {bad} is out of range for axis {axis} of size {n}")
        return x.gather(axis, Tensor(np.where(indices < 0, indices + n, indices), device=x.device))
    return x.gather(axis, (indices < 0).where(indices + n, indices))


def slice_key(node: Node, shape: Sequence[int], starts: list[int], ends: list[int], axes: list[int] | None,
              steps: list[int] | None) -> tuple[slice, ...]:  # fmt: skip
    """ONNX Slice as Python slices: starts and ends count from the end when negative and are clamped to the axis
    (to [-1, n-1] for negative steps, where -1 means "through index 0")."""
    key = [slice(None)] * len(shape)
    for i, (start, end) in enumerate(zip(starts, ends)):
        axis = axis_of(node, axes[i], len(shape)) if axes is not None else i
        step, n = (steps[i] if steps is not None else 1), int(shape[axis])
        if step == 0:
            raise node.invalid("a step of 0")
        start, end = start + n if start < 0 else start, end + n if end < 0 else end
        low, high = (0, n) if step > 0 else (-1, n - 1)
        start, end = min(max(start, 0), high), min(max(end, low), high)
        key[axis] = slice(start, end if end >= 0 else None, step)
    return tuple(key)


def _slice(node: Node, xp: ArrayOps, x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    lists = {"starts": ints(starts), "ends": ints(ends)}
    lists |= {name: ints(v) for name, v in (("axes", axes), ("steps", steps)) if v is not None}
    if len({len(v) for v in lists.values()}) > 1:
        raise node.invalid("starts, ends, axes and steps of different lengths: "
                           + ", ".join(f"{len(v)} {k}" for k, v in lists.items()))  # fmt: skip
    if "axes" in lists and len({axis_of(node, a, x.ndim) for a in lists["axes"]}) < len(lists["axes"]):
        raise node.invalid(f"axes {lists['axes']} name an axis more than once")
    key = slice_key(node, x.shape, lists["starts"], lists["ends"], lists.get("axes"), lists.get("steps"))
    return x[key]


def _split(node: Node, xp: ArrayOps, x: Any, split: Any = None) -> tuple[Any, ...]:
    axis = axis_of(node, int(node.attr("axis", 0)), x.ndim)
    n = int(x.shape[axis])
    if split is not None or "split" in node.attrs:
        sizes = ints(split) if split is not None else node.ints("split")
    elif "num_outputs" in node.attrs:  # opset 18: the last piece is smaller when n does not divide
        count = int(node.attrs["num_outputs"])
        chunk = -(-n // count)
        sizes = [min(chunk, max(n - chunk * i, 0)) for i in range(count)]
    else:
        if n % node.n_outputs:
            raise node.invalid(f"an axis of {n} does not split into {node.n_outputs} equal outputs")
        sizes = [n // node.n_outputs] * node.n_outputs
    if sum(sizes) != n:
        raise node.invalid(f"split sizes {sizes} do not add up to the axis size {n}")
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    lead = (slice(None),) * axis
    return tuple(x[lead + (slice(o, o + s),)] for o, s in zip(offsets, sizes))


def _expand(node: Node, xp: ArrayOps, x: Any, shape: Any) -> Any:
    target = ints(shape)
    ndim = max(len(target), x.ndim)
    a = [1] * (ndim - x.ndim) + [int(d) for d in x.shape]
    b = [1] * (ndim - len(target)) + target
    if any(p != q and 1 not in (p, q) for p, q in zip(a, b)):
        raise node.invalid(f"shape {tuple(x.shape)} does not broadcast to {target}")
    return xp.expand(x, tuple(max(p, q) if 0 not in (p, q) else 0 for p, q in zip(a, b)))


def _tile(node: Node, xp: ArrayOps, x: Any, repeats: Any) -> Any:
    return xp.tile(x, ints(repeats))


def _trilu(node: Node, xp: ArrayOps, x: Any, k: Any = None) -> Any:
    diagonal = 0 if k is None else int(k.reshape(()))
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    diagonal = max(-rows, min(cols, diagonal))  # (an int64 k past the matrix keeps all or nothing)
    return xp.triangle(x, diagonal, bool(node.attr("upper", 1)))


def _pad(node: Node, xp: ArrayOps, x: Tensor, pads: Any, value: Any = None, axes: Any = None) -> Tensor:
    mode = node.attr("mode", "constant")
    chosen = [axis_of(node, a, x.ndim) for a in ints(axes)] if axes is not None else list(range(x.ndim))
    amounts = ints(pads)
    if len(amounts) != 2 * len(chosen):
        raise node.invalid(f"{len(amounts)} pads for {len(chosen)} axes (ONNX wants 2 per axis: all begins, all ends)")
    pairs = [(0, 0)] * x.ndim
    for i, axis in enumerate(chosen):
        pairs[axis] = (amounts[i], amounts[i + len(chosen)])
    if mode == "wrap":  # pads wider than the axis wrap around more than once: tile the input first
        if any(min(p) < 0 for p in pairs):  # a negative side crops first; the other side wraps the axis that is left
            x = x.shrink(tuple((-min(b, 0), int(n) + min(a, 0)) for (b, a), n in zip(pairs, x.shape)))
            pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
        for axis, (before, after) in enumerate(pairs):
            n = int(x.shape[axis])
            if n and min(before, after) >= 0 and max(before, after) > n:
                k = -(-max(before, after) // n)  # whole periods on each side
                x = x.repeat(tuple(2 * k + 1 if i == axis else 1 for i in range(x.ndim)))
                x = x.shrink(tuple((k * n - before, k * n + n + after) if i == axis else None for i in range(x.ndim)))
                pairs[axis] = (0, 0)
    # (ONNX ignores constant_value for the other modes; Tensor.pad refuses a fill value there)
    fill = 0 if value is None or value.size == 0 or mode != "constant" else value.reshape(-1)[0].item()
    return x.pad(pairs, mode=PAD_MODES[mode], value=fill)


PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def _check_pad(node: Node) -> str | None:
    mode = node.attr("mode", "constant")
    return None if mode in PAD_MODES else f"mode={mode!r} (supported: {', '.join(PAD_MODES)})"


def _depth_to_space(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    b, (n, c, h, w) = int(node.attr("blocksize")), x.shape
    if node.attr("mode", "DCR") == "DCR":  # depth, column, row
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    b, (n, c, h, w) = int(node.attr("blocksize")), x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _one_hot(node: Node, xp: ArrayOps, indices: Tensor, depth: Any, values: Any) -> Tensor:
    n = int(depth.reshape(-1)[0])
    axis = axis_of(node, int(node.attr("axis", -1)), indices.ndim + 1)
    indices = (indices < 0).where(indices + n, indices)
    classes = Tensor.arange(n, device=indices.device).reshape((n,) + (1,) * (indices.ndim - axis))
    if values.size != 2:
        raise node.invalid(f"values has {values.size} elements (OneHot takes 2: [off_value, on_value])")
    off, on = (v.item() for v in values.reshape(-1))
    hot = indices.unsqueeze(axis) == classes
    return hot.where(on, off).cast(dtypes.from_np(values.dtype))


def _dropout(node: Node, xp: ArrayOps, x: Tensor, ratio: Any = None, training: Any = None) -> Any:
    if training is not None and bool(training.reshape(-1)[0]):
        raise node.refuse("training_mode=True (only inference, where Dropout passes its input through)")
    if node.n_outputs < 2:
        return x
    return x, Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device)


OPS: dict[str, OpSpec] = {
    "Cast": OpSpec(_cast, host=True, check=_check_cast),
    "CastLike": OpSpec(_cast_like, meta=(1,), host=True),
    "Identity": OpSpec(_identity, host=True),
    "Constant": OpSpec(_constant, host=True, check=_check_constant),
    "ConstantOfShape": OpSpec(_constant_of_shape, static=(0,), host=True),
    "Range": OpSpec(_range, static=(0, 1, 2), host=True),
    "Shape": OpSpec(_shape, meta=(0,), host=True),
    "Size": OpSpec(_size, meta=(0,), host=True),
    "Reshape": OpSpec(_reshape, static=(1,), host=True),
    "Flatten": OpSpec(_flatten, host=True),
    "Squeeze": OpSpec(_squeeze, static=(1,), host=True),
    "Unsqueeze": OpSpec(_unsqueeze, static=(1,), host=True),
    "Transpose": OpSpec(_transpose, host=True),
    "Concat": OpSpec(_concat, host=True),
    "Gather": OpSpec(_gather, either=(1,), host=True),
    "GatherElements": OpSpec(_gather_elements, either=(1,)),
    "Slice": OpSpec(_slice, static=(1, 2, 3, 4), host=True),
    "Split": OpSpec(_split, static=(1,), host=True),
    "Expand": OpSpec(_expand, static=(1,), host=True),
    "Tile": OpSpec(_tile, static=(1,), host=True),
    "Trilu": OpSpec(_trilu, static=(1,), host=True),
    "Pad": OpSpec(_pad, static=(1, 2, 3), check=_check_pad),
    "DepthToSpace": OpSpec(_depth_to_space),
    "SpaceToDepth": OpSpec(_space_to_depth),
    "OneHot": OpSpec(_one_hot, static=(1, 2)),
    "Dropout": OpSpec(_dropout, static=(1, 2)),
}

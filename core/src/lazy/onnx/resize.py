"""ONNX Resize (opsets 11-19): nearest, linear and cubic sampling under every coordinate transformation but
tf_crop_and_resize. The sampling positions and weights of each axis are computed on the host; the device gathers
along the axis (an exact integer upsampling by nearest is a broadcast view)."""

from __future__ import annotations

import math
from collections.abc import Callable

from lazy.dtype import dtypes
from lazy.onnx.backends import ArrayOps
from lazy.onnx.registry import Node, OpSpec, axis_of
from lazy.tensor import Tensor

# the position in the input of output position `o` along an axis: (o, scale, n_in, n_out) -> float
COORDINATES: dict[str, Callable[[int, float, int, int], float]] = {
    "half_pixel": lambda o, scale, n_in, n_out: (o + 0.5) / scale - 0.5,
    "half_pixel_symmetric": lambda o, scale, n_in, n_out: (
        n_in / 2 * (1 - n_out / (scale * n_in)) + (o + 0.5) / scale - 0.5
    ),
    "pytorch_half_pixel": lambda o, scale, n_in, n_out: (o + 0.5) / scale - 0.5 if n_out > 1 else 0.0,
    "align_corners": lambda o, scale, n_in, n_out: 0.0 if n_out == 1 else o * (n_in - 1) / (n_out - 1),
    "asymmetric": lambda o, scale, n_in, n_out: o / scale,
}

NEAREST: dict[str, Callable[[float], int]] = {
    "round_prefer_floor": lambda x: math.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: math.floor(x + 0.5),
    "floor": math.floor,
    "ceil": math.ceil,
}
MODES = ("nearest", "linear", "cubic")


def _check_resize(node: Node) -> str | None:
    mode, coordinates = node.attr("mode", "nearest"), node.attr("coordinate_transformation_mode", "half_pixel")
    if mode not in MODES:
        return f"mode={mode!r} (supported: {', '.join(MODES)})"
    if coordinates not in COORDINATES:
        return f"coordinate_transformation_mode={coordinates!r} (supported: {', '.join(COORDINATES)})"
    if node.attr("nearest_mode", "round_prefer_floor") not in NEAREST:
        return f"nearest_mode={node.attr('nearest_mode')!r} (supported: {', '.join(NEAREST)})"
    if node.attr("antialias", 0):
        return "antialias=1 (only antialias=0 is supported)"
    return None


def _cubic_weights(t: float, a: float) -> list[float]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 from the position floor(x), for t = x - floor(x)."""

    def far(d: float) -> float:  # 1 <= |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    def near(d: float) -> float:  # |d| < 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def axis_taps(node: Node, n_in: int, n_out: int, scale: float) -> list[tuple[list[int], list[float]]]:
    """For each tap of the sampling kernel: the input index and the weight of every output position."""
    position = COORDINATES[node.attr("coordinate_transformation_mode", "half_pixel")]
    xs = [position(o, scale, n_in, n_out) for o in range(n_out)]
    mode = node.attr("mode", "nearest")
    if mode == "nearest":
        pick = NEAREST[node.attr("nearest_mode", "round_prefer_floor")]
        return [([min(max(pick(x), 0), n_in - 1) for x in xs], [1.0] * n_out)]
    offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
    taps: list[tuple[list[int], list[float]]] = [([], []) for _ in offsets]
    for x in xs:
        if mode == "linear":
            x = min(max(x, 0.0), n_in - 1.0)
        base = math.floor(x)
        t = x - base
        weights = [1 - t, t] if mode == "linear" else _cubic_weights(t, float(node.attr("cubic_coeff_a", -0.75)))
        indices = [base + d for d in offsets]
        if mode == "cubic" and node.attr("exclude_outside", 0):  # taps outside the input get no weight
            weights = [w if 0 <= i < n_in else 0.0 for i, w in zip(indices, weights)]
            total = sum(weights)
            weights = [w / total for w in weights]
        for (tap_indices, tap_weights), i, w in zip(taps, indices, weights):
            tap_indices.append(min(max(i, 0), n_in - 1))  # (outside: the edge value)
            tap_weights.append(w)
    return taps


def _resample_axis(x: Tensor, axis: int, taps: list[tuple[list[int], list[float]]]) -> Tensor:
    n_in, n_out = int(x.shape[axis]), len(taps[0][0])
    if len(taps) == 1:
        indices = taps[0][0]
        if indices == list(range(n_in)):
            return x
        factor = n_out // n_in if n_in else 0
        if factor and n_out == n_in * factor and indices == [o // factor for o in range(n_out)]:
            repeated = x.unsqueeze(axis + 1).expand(x.shape[: axis + 1] + (factor,) + x.shape[axis + 1 :])
            return repeated.reshape(x.shape[:axis] + (n_out,) + x.shape[axis + 1 :])  # each element `factor` times
    view = tuple(n_out if i == axis else 1 for i in range(x.ndim))
    shape = tuple(n_out if i == axis else int(d) for i, d in enumerate(x.shape))
    out: Tensor | None = None
    for indices, weights in taps:
        index = Tensor(indices, dtype=dtypes.int32, device=x.device).reshape(view).expand(shape)
        sampled = x.gather(axis, index)
        if any(w != 1.0 for w in weights):
            sampled = sampled * Tensor(weights, dtype=x.dtype, device=x.device).reshape(view)
        out = sampled if out is None else out + sampled
    assert out is not None
    return out


def _resize(node: Node, xp: ArrayOps, x: Tensor, roi: object = None, scales: object = None,
            sizes: object = None) -> Tensor:  # fmt: skip
    axes = [axis_of(node, a, x.ndim) for a in node.ints("axes")] or list(range(x.ndim))
    n_in = [int(x.shape[a]) for a in axes]
    given_sizes = [int(v) for v in sizes.reshape(-1)] if sizes is not None and sizes.size else None  # type: ignore[attr-defined]
    if given_sizes is not None:
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            factors = [o / i for o, i in zip(given_sizes, n_in)]
            n_out = given_sizes
        else:  # one scale for every axis: the largest that fits (not_larger) or the smallest that covers
            pick = min if policy == "not_larger" else max
            scale = pick(o / i for o, i in zip(given_sizes, n_in))
            factors, n_out = [scale] * len(axes), [math.floor(i * scale + 0.5) for i in n_in]
    elif scales is not None and scales.size:  # type: ignore[attr-defined]
        factors = [float(v) for v in scales.reshape(-1)]  # type: ignore[attr-defined]
        n_out = [math.floor(i * f) for i, f in zip(n_in, factors)]
    else:
        raise node.invalid("neither scales nor sizes is given")
    mode = node.attr("mode", "nearest")
    y = x if mode == "nearest" or dtypes.is_float(x.dtype) else x.float()
    for axis, i, o, f in zip(axes, n_in, n_out, factors):
        if i != o or f != 1.0:
            y = _resample_axis(y, axis, axis_taps(node, i, o, f))
    return y.cast(x.dtype) if y.dtype != x.dtype else y


OPS: dict[str, OpSpec] = {"Resize": OpSpec(_resize, static=(1, 2, 3), check=_check_resize)}

"""ONNX operators of neural networks: convolutions, pooling, normalizations, local response normalization. All run
on the device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazy.dtype import NARROW_FLOATS, dtypes
from lazy.helpers import prod
from lazy.onnx.backends import ArrayOps
from lazy.onnx.registry import Node, OpSpec, axis_of
from lazy.tensor import Tensor

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _check_auto_pad(node: Node) -> str | None:
    mode = node.attr("auto_pad", "NOTSET")
    return None if mode in AUTO_PADS else f"auto_pad={mode!r} (ONNX allows {', '.join(AUTO_PADS)})"


def spatial_pads(node: Node, sizes: list[int], kernel: list[int], strides: list[int],
                 dilations: list[int]) -> list[tuple[int, int]]:  # fmt: skip
    """(before, after) padding per spatial axis from `pads` or `auto_pad`: SAME_* makes the output ceil(size /
    stride) long, the odd element of padding after (UPPER) or before (LOWER) the input."""
    nd = len(kernel)
    mode = node.attr("auto_pad", "NOTSET")
    if mode == "VALID":
        return [(0, 0)] * nd
    if mode == "NOTSET":
        pads = node.ints("pads", [0] * 2 * nd)
        return [(pads[i], pads[i + nd]) for i in range(nd)]
    pairs = []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        pairs.append((small, big) if mode == "SAME_UPPER" else (big, small))
    return pairs


def torch_padding(pairs: list[tuple[int, int]]) -> list[int]:
    """Per-axis (before, after) pairs as the flat tuple lazy's conv and pooling take (last axis first)."""
    return [v for before, after in reversed(pairs) for v in (before, after)]


def _geometry(node: Node, x: Tensor, kernel: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """(strides, dilations, pads) of a convolution or pooling node over x's spatial axes."""
    nd = len(kernel)
    strides, dilations = node.ints("strides", [1] * nd), node.ints("dilations", [1] * nd)
    sizes = [int(d) for d in x.shape[2:]]
    return strides, dilations, spatial_pads(node, sizes, kernel, strides, dilations)


def _conv(node: Node, xp: ArrayOps, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    kernel = [int(k) for k in w.shape[2:]]
    strides, dilations, pads = _geometry(node, x, kernel)
    return x.conv2d(w, b, groups=int(node.attr("group", 1)), stride=strides, dilation=dilations,
                    padding=torch_padding(pads))  # fmt: skip


def _conv_transpose(node: Node, xp: ArrayOps, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    kernel = [int(k) for k in w.shape[2:]]
    nd = len(kernel)
    strides, dilations = node.ints("strides", [1] * nd), node.ints("dilations", [1] * nd)
    out_pad = node.ints("output_padding", [0] * nd)
    sizes = [int(d) for d in x.shape[2:]]
    mode = node.attr("auto_pad", "NOTSET")
    if "output_shape" in node.attrs or mode in ("SAME_UPPER", "SAME_LOWER"):
        # the padding that gives the asked output (SAME: size * stride), its odd element placed as the spec says
        same = [n * s for n, s in zip(sizes, strides)]
        wanted = node.ints("output_shape")[-nd:] if "output_shape" in node.attrs else same
        pads = []
        for n, k, s, d, p, o in zip(sizes, kernel, strides, dilations, out_pad, wanted):
            total = s * (n - 1) + p + (k - 1) * d + 1 - o
            small, big = total // 2, total - total // 2
            pads.append((small, big) if mode == "SAME_UPPER" else (big, small))
    elif mode == "VALID":
        pads = [(0, 0)] * nd
    else:
        flat = node.ints("pads", [0] * 2 * nd)
        pads = [(flat[i], flat[i + nd]) for i in range(nd)]
    return x.conv_transpose2d(w, b, groups=int(node.attr("group", 1)), stride=strides, dilation=dilations,
                              padding=torch_padding(pads), output_padding=out_pad)  # fmt: skip


def _max_pool(node: Node, xp: ArrayOps, x: Tensor) -> Any:
    kernel = node.ints("kernel_shape")
    strides, dilations, pads = _geometry(node, x, kernel)
    ceil_mode, want_indices = bool(node.attr("ceil_mode", 0)), node.n_outputs > 1
    out = x.max_pool2d(kernel, strides, dilations, torch_padding(pads), ceil_mode, return_indices=want_indices)
    if not want_indices:
        return out
    assert isinstance(out, tuple)
    values, spatial_index = out
    return values, _flat_indices(node, x, spatial_index)


def _flat_indices(node: Node, x: Tensor, spatial_index: Tensor) -> Tensor:
    """MaxPool's Indices: the index into the whole input (N, C included), the spatial part in row-major order or,
    with storage_order=1, column-major."""
    spatial = [int(d) for d in x.shape[2:]]
    index = spatial_index.cast(dtypes.int64)
    if node.attr("storage_order", 0):
        coords, rest = [], index  # the row-major coordinates, last axis first
        for size in reversed(spatial):
            coords.append(rest - rest.idiv(size) * size)
            rest = rest.idiv(size)
        index, weight = index.zeros_like(), 1
        for coord, size in zip(reversed(coords), spatial):  # first axis fastest
            index, weight = index + coord * weight, weight * size
    n, c = int(x.shape[0]), int(x.shape[1])
    planes = Tensor.arange(n * c, device=x.device, dtype=dtypes.int64).reshape((n, c) + (1,) * len(spatial))
    return index + planes * prod(spatial)


def _in_float32(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`fn` on a half or bfloat16 input computed in float32 and rounded once, as onnxruntime accumulates: sums of
    squares, window sums and variances of halves overflow half (an average pool of 1600 values of 100 was inf)."""

    def run(node: Node, xp: ArrayOps, x: Tensor, *rest: Any) -> Tensor:
        if isinstance(x, Tensor) and x.dtype in NARROW_FLOATS:
            return fn(node, xp, x.cast(dtypes.float32), *rest).cast(x.dtype)
        return fn(node, xp, x, *rest)

    return run


def _average_pool(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    kernel = node.ints("kernel_shape")
    strides, dilations, pads = _geometry(node, x, kernel)
    return x.avg_pool2d(kernel, strides, dilations, torch_padding(pads), bool(node.attr("ceil_mode", 0)),
                        bool(node.attr("count_include_pad", 0)))  # fmt: skip


def _lp_pool(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    kernel = node.ints("kernel_shape")
    strides, dilations, pads = _geometry(node, x, kernel)
    p = float(node.attr("p", 2))
    # the sum of |x|^p over each window, the padding (and ceil_mode's extra) counted as zeros: the average times the
    # window size overcounted windows that ceil_mode cuts short
    g = x._pool_windows("LpPool", kernel, strides, dilations, torch_padding(pads), bool(node.attr("ceil_mode", 0)))
    nd = len(kernel)
    return x.abs().pow(p)._pool(g, 0.0).sum(tuple(range(-nd, 0))).pow(1 / p)


def _global_pool(kind: str) -> Callable[..., Tensor]:
    def run(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
        axes = tuple(range(2, x.ndim))
        if kind == "avg":
            return x.mean(axes, keepdim=True)
        if kind == "max":
            return x.max(axes, keepdim=True)
        p = float(node.attr("p", 2))
        return x.abs().pow(p).sum(axes, keepdim=True).pow(1 / p)

    return run


# -- normalizations --------------------------------------------------------------------------------------------------


def _channel_view(t: Tensor, ndim: int) -> Tensor:
    """A per-channel (C,) tensor shaped to broadcast over (N, C, *spatial)."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def _batch_norm(node: Node, xp: ArrayOps, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor,
                var: Tensor) -> Tensor:  # fmt: skip
    eps = float(node.attr("epsilon", 1e-5))
    return x.batchnorm(scale, bias, mean, (var + eps).rsqrt())


def _check_batch_norm(node: Node) -> str | None:
    return "training_mode=1 (only inference is supported)" if node.attr("training_mode", 0) else None


def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) over `axes` (the biased variance), with the mean and 1 / sqrt(var + eps)."""
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    inv_std = (centered * centered).mean(axes, keepdim=True).add(eps).rsqrt()
    return centered * inv_std, mean, inv_std


def _instance_norm(node: Node, xp: ArrayOps, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), float(node.attr("epsilon", 1e-5)))
    return y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)


def _layer_norm(node: Node, xp: ArrayOps, x: Tensor, scale: Tensor, bias: Tensor | None = None) -> Any:
    axis = axis_of(node, int(node.attr("axis", -1)), x.ndim)
    # stash_type 1 (the default): statistics in float32 for narrower inputs
    stash = dtypes.float32 if node.attr("stash_type", 1) == 1 and x.dtype in (dtypes.float16, dtypes.bfloat16) else None
    y, mean, inv_std = _normalize(x.cast(stash) if stash else x, tuple(range(axis, x.ndim)),
                                  float(node.attr("epsilon", 1e-5)))  # fmt: skip
    y = y.cast(x.dtype) * scale
    y = y + bias if bias is not None else y
    return (y, mean, inv_std)[: max(node.n_outputs, 1)] if node.n_outputs > 1 else y


def _group_norm(node: Node, xp: ArrayOps, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    groups, (n, c) = int(node.attr("num_groups")), (int(x.shape[0]), int(x.shape[1]))
    if c % groups:
        raise node.invalid(f"{c} channels do not split into {groups} groups")
    grouped = x.reshape((n, groups, c // groups) + tuple(x.shape[2:]))
    y, _, _ = _normalize(grouped, tuple(range(2, grouped.ndim)), float(node.attr("epsilon", 1e-5)))
    y = y.reshape(x.shape)
    if scale.shape[0] != c:  # opset 18: one scale and bias per group
        scale, bias = scale.repeat_interleave(c // groups), bias.repeat_interleave(c // groups)
    return y * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim)


def _lrn(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    c = int(x.shape[1])
    before = (size - 1) // 2
    padded = (x * x).pad(((0, 0), (before, size - 1 - before)) + ((0, 0),) * (x.ndim - 2))
    # the sum of squares over the channel window [c - before, c + size - 1 - before]
    window = sum((padded[:, i : i + c] for i in range(1, size)), padded[:, 0:c])
    return x / (window * (alpha / size) + bias).pow(beta)


def _lp_norm(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    axis = axis_of(node, int(node.attr("axis", -1)), x.ndim)
    norm = x.norm(float(node.attr("p", 2)), axis, keepdim=True)
    return (norm == 0).where(0, x / norm)  # an all-zero slice stays 0 (the ONNX reference's), not 0/0


def _mean_variance_norm(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
    axes = tuple(axis_of(node, a, x.ndim) for a in node.ints("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    return centered / ((centered * centered).mean(axes, keepdim=True).sqrt() + 1e-9)


def _check_lp(node: Node) -> str | None:
    p = node.attr("p", 2)
    return None if p in (1, 2) or node.op != "LpNormalization" else f"p={p} (LpNormalization allows 1 and 2)"


OPS: dict[str, OpSpec] = {
    "Conv": OpSpec(_conv, check=_check_auto_pad),
    "ConvTranspose": OpSpec(_conv_transpose, check=_check_auto_pad),
    "MaxPool": OpSpec(_max_pool, check=_check_auto_pad),
    "AveragePool": OpSpec(_in_float32(_average_pool), check=_check_auto_pad),
    "LpPool": OpSpec(_in_float32(_lp_pool), check=_check_auto_pad),
    "GlobalAveragePool": OpSpec(_in_float32(_global_pool("avg"))),
    "GlobalMaxPool": OpSpec(_global_pool("max")),
    "GlobalLpPool": OpSpec(_in_float32(_global_pool("lp"))),
    "BatchNormalization": OpSpec(_batch_norm, check=_check_batch_norm),
    "InstanceNormalization": OpSpec(_in_float32(_instance_norm)),
    "LayerNormalization": OpSpec(_layer_norm),
    "GroupNormalization": OpSpec(_in_float32(_group_norm)),
    "LRN": OpSpec(_in_float32(_lrn)),
    "LpNormalization": OpSpec(_lp_norm, check=_check_lp),
    "MeanVarianceNormalization": OpSpec(_mean_variance_norm),
}

"""ONNX operators of math: elementwise functions and comparisons, reductions, softmax, cumulative sums, top-k and
matrix products. Handlers that take `xp` are written once for the host and the device (see `backends`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from lazy.dtype import dtypes
from lazy.onnx.backends import ArrayOps
from lazy.onnx.registry import Node, OpSpec, axes_input, axis_of
from lazy.tensor import Tensor

# -- elementwise ---------------------------------------------------------------------------------------------------

BINARY: dict[str, Callable[[ArrayOps, Any, Any], Any]] = {
    "Add": lambda xp, a, b: a + b,
    "Sub": lambda xp, a, b: a - b,
    "Mul": lambda xp, a, b: a * b,
    "Div": lambda xp, a, b: xp.div(a, b),  # integers truncate toward zero
    "Equal": lambda xp, a, b: a == b,
    "Less": lambda xp, a, b: a < b,
    "Greater": lambda xp, a, b: a > b,
    "LessOrEqual": lambda xp, a, b: a <= b,
    "GreaterOrEqual": lambda xp, a, b: a >= b,
    "And": lambda xp, a, b: xp.logical("and", a, b),
    "Or": lambda xp, a, b: xp.logical("or", a, b),
    "Xor": lambda xp, a, b: xp.logical("xor", a, b),
}

# variadic: folded left to right, every input broadcast
VARIADIC: dict[str, Callable[[ArrayOps, Any, Any], Any]] = {
    "Sum": lambda xp, a, b: a + b,
    "Max": lambda xp, a, b: xp.maximum(a, b),
    "Min": lambda xp, a, b: xp.minimum(a, b),
}

HOST_UNARY = {"Neg": "neg", "Abs": "abs", "Sign": "sign", "Floor": "floor", "Ceil": "ceil", "Sqrt": "sqrt",
              "Not": "not"}  # fmt: skip


def _alpha(node: Node, default: float) -> float:
    return float(node.attr("alpha", default))


def _selu(node: Node, x: Tensor) -> Tensor:
    alpha, gamma = _alpha(node, 1.67326319217681884765625), float(node.attr("gamma", 1.05070102214813232421875))
    return gamma * (x > 0).where(x, alpha * (x.exp() - 1))


def _shrink(node: Node, x: Tensor) -> Tensor:
    bias, lambd = float(node.attr("bias", 0.0)), float(node.attr("lambd", 0.5))
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0))


def _celu(node: Node, x: Tensor) -> Tensor:
    alpha = _alpha(node, 1.0)
    return x.relu() + (alpha * ((x / alpha).exp() - 1)).minimum(0)


# device-only unary operators: (node, x) -> y
UNARY: dict[str, Callable[[Node, Tensor], Tensor]] = {
    "Relu": lambda node, x: x.relu(),
    "Sigmoid": lambda node, x: x.sigmoid(),
    "Tanh": lambda node, x: x.tanh(),
    "Erf": lambda node, x: x.erf(),
    "Exp": lambda node, x: x.exp(),
    "Log": lambda node, x: x.log(),
    "Reciprocal": lambda node, x: x.reciprocal(),
    "Sin": lambda node, x: x.sin(),
    "Cos": lambda node, x: x.cos(),
    "Tan": lambda node, x: x.tan(),
    "Asin": lambda node, x: x.asin(),
    "Acos": lambda node, x: x.acos(),
    "Atan": lambda node, x: x.atan(),
    "Sinh": lambda node, x: x.sinh(),
    "Cosh": lambda node, x: x.cosh(),
    "Asinh": lambda node, x: x.asinh(),
    "Acosh": lambda node, x: x.acosh(),
    "Atanh": lambda node, x: x.atanh(),
    "Round": lambda node, x: x.round(),  # half to even, as ONNX
    "IsNaN": lambda node, x: x.isnan(),
    "IsInf": lambda node, x: x.isinf(bool(node.attr("detect_positive", 1)), bool(node.attr("detect_negative", 1))),
    "Softplus": lambda node, x: x.softplus(),
    "Softsign": lambda node, x: x / (1 + x.abs()),
    "Elu": lambda node, x: x.elu(_alpha(node, 1.0)),
    "Selu": _selu,
    "Celu": _celu,
    "LeakyRelu": lambda node, x: (x < 0).where(x * _alpha(node, 0.01), x),
    "ThresholdedRelu": lambda node, x: (x > _alpha(node, 1.0)).where(x, 0),
    "HardSigmoid": lambda node, x: (x * _alpha(node, 0.2) + float(node.attr("beta", 0.5))).clip(0, 1),
    "HardSwish": lambda node, x: x * (x * (1 / 6) + 0.5).clip(0, 1),
    "Mish": lambda node, x: x * x.softplus().tanh(),
    "Gelu": lambda node, x: x.gelu(node.attr("approximate", "none")),
    "Shrink": _shrink,
    "BitwiseNot": lambda node, x: x.bitwise_not(),
}


def _check_gelu(node: Node) -> str | None:
    approximate = node.attr("approximate", "none")
    return None if approximate in ("none", "tanh") else f'approximate={approximate!r} (ONNX allows "none" and "tanh")'


def _mod(node: Node, xp: ArrayOps, a: Any, b: Any) -> Any:
    fmod = bool(node.attr("fmod", 0))
    if not fmod and not dtypes.is_int(xp.dtype_of(a)):
        raise node.invalid("a floating point Mod needs fmod=1 (the ONNX rule)")
    return xp.mod(a, b, fmod)


def _bitshift(node: Node, xp: ArrayOps, a: Tensor, b: Tensor) -> Tensor:
    return a.lshift(b) if node.attr("direction") == "LEFT" else a.rshift(b)


def _prelu(node: Node, xp: ArrayOps, x: Tensor, slope: Tensor) -> Tensor:
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # one slope per channel (models from opset 6 and older)
    return (x < 0).where(x * slope, x)


def _clip(node: Node, xp: ArrayOps, x: Tensor, low: Any = None, high: Any = None) -> Tensor:
    bounds = [b if b is None or isinstance(b, Tensor) else b.reshape(()).item() for b in (low, high)]
    return x if all(b is None for b in bounds) else x.clip(*bounds)


def _where(node: Node, xp: ArrayOps, cond: Any, a: Any, b: Any) -> Any:
    return xp.where(cond, a, b)


def _mean(node: Node, xp: ArrayOps, *xs: Tensor) -> Tensor:
    return functools.reduce(lambda a, b: a + b, xs) / len(xs)


# -- reductions ----------------------------------------------------------------------------------------------------


def _reduce_axes(node: Node, x: Any, axes: Any) -> tuple[int, ...] | None:
    """The reduced axes, sorted; None for noop_with_empty_axes with no axes (the input passes through)."""
    chosen = axes_input(node, axes)
    if not chosen:
        return None if node.attr("noop_with_empty_axes", 0) else tuple(range(x.ndim))
    return tuple(sorted({axis_of(node, a, x.ndim) for a in chosen}))


def _logsumexp(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    top = x.max(axes, keepdim=True)
    top = top.isinf().where(0, top)  # (all -inf: log(0) + 0, not NaN)
    out = (x - top).exp().sum(axes, keepdim=True).log() + top
    return out if keep else out.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


# name -> (node, xp, x, axes, keepdims) -> y; sum/prod/max/min also run on the host
REDUCTIONS: dict[str, Callable[[ArrayOps, Any, tuple[int, ...], bool], Any]] = {
    "ReduceSum": lambda xp, x, axes, keep: xp.reduce("sum", x, axes, keep),
    "ReduceProd": lambda xp, x, axes, keep: xp.reduce("prod", x, axes, keep),
    "ReduceMax": lambda xp, x, axes, keep: xp.reduce("max", x, axes, keep),
    "ReduceMin": lambda xp, x, axes, keep: xp.reduce("min", x, axes, keep),
    "ReduceMean": lambda xp, x, axes, keep: x.mean(axes, keepdim=keep),
    # (half inputs in float32, rounded once, as onnxruntime: squares and sums of halves overflow)
    "ReduceL1": lambda xp, x, axes, keep: x._in_float32(lambda y: y.abs().sum(axes, keepdim=keep)),
    "ReduceL2": lambda xp, x, axes, keep: x._in_float32(lambda y: (y * y).sum(axes, keepdim=keep).sqrt()),
    "ReduceSumSquare": lambda xp, x, axes, keep: x._in_float32(lambda y: (y * y).sum(axes, keepdim=keep)),
    "ReduceLogSum": lambda xp, x, axes, keep: x._in_float32(lambda y: y.sum(axes, keepdim=keep).log()),
    "ReduceLogSumExp": lambda xp, x, axes, keep: x._in_float32(lambda y: _logsumexp(y, axes, keep)),
}
HOST_REDUCTIONS = ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin")


def _reduction(name: str) -> Callable[..., Any]:
    def run(node: Node, xp: ArrayOps, x: Any, axes: Any = None) -> Any:
        chosen = _reduce_axes(node, x, axes)
        if chosen is None:  # noop_with_empty_axes: no axis reduced, but the elementwise part still applies (x^2)
            return x if name in HOST_REDUCTIONS or name in ("ReduceMean", "ReduceLogSumExp") else REDUCTIONS[name](
                xp, x, (), True)  # fmt: skip
        keep = bool(node.attr("keepdims", 1))
        if name in EMPTY_IDENTITY and any(int(x.shape[a]) == 0 for a in chosen):  # (opset 18 defines these)
            shape = tuple(1 if a in chosen else int(d) for a, d in enumerate(x.shape) if keep or a not in chosen)
            dtype = xp.dtype_of(x)
            identity = EMPTY_IDENTITY[name] if dtypes.is_float(dtype) else (
                dtypes.min(dtype) if EMPTY_IDENTITY[name] < 0 else dtypes.max(dtype))  # fmt: skip
            return Tensor.full(shape, identity, dtype=dtype, device=x.device if isinstance(x, Tensor) else None)
        return REDUCTIONS[name](xp, x, chosen, keep)

    return run


# reductions without elements: ONNX's results (opset 18+), where lazy's max and min raise EmptyReductionError
EMPTY_IDENTITY = {"ReduceMax": -math.inf, "ReduceMin": math.inf, "ReduceLogSumExp": -math.inf}


def _arg_extreme(smallest: bool) -> Callable[..., Tensor]:
    def run(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
        axis, keep = axis_of(node, int(node.attr("axis", 0)), x.ndim), bool(node.attr("keepdims", 1))
        pick = (lambda t: t.argmin(axis, keepdim=keep)) if smallest else (lambda t: t.argmax(axis, keepdim=keep))
        if node.attr("select_last_index", 0):  # the first one of the flipped axis is the last one
            found = (x.shape[axis] - 1) - pick(x.flip(axis)).cast(dtypes.int64)
        else:
            found = pick(x)
        return found.cast(dtypes.int64)

    return run


def _softmax(kind: str) -> Callable[..., Tensor]:
    def run(node: Node, xp: ArrayOps, x: Tensor) -> Tensor:
        axis = axis_of(node, int(node.attr("axis", -1)), x.ndim)
        if kind == "softmax":
            return x.softmax(axis)
        if kind == "log_softmax":
            return x.log_softmax(axis)
        n = int(x.shape[axis])  # hardmax: 1 at the first maximum
        if n == 0:  # (nothing to mark; argmax of no element has no answer)
            return x
        classes = Tensor.arange(n, device=x.device).reshape((n,) + (1,) * (x.ndim - axis - 1))
        return (x.argmax(axis, keepdim=True) == classes).cast(x.dtype)

    return run


def _cumsum(node: Node, xp: ArrayOps, x: Tensor, axis_value: Any) -> Tensor:
    axis = axis_of(node, int(axis_value.reshape(())), x.ndim)
    reverse = bool(node.attr("reverse", 0))
    y = x.flip(axis) if reverse else x
    if node.attr("exclusive", 0):  # shift by one: each sum leaves its own element out
        n = y.shape[axis]
        y = y.pad(tuple((1, 0) if i == axis else (0, 0) for i in range(y.ndim)))
        y = y.shrink(tuple((0, n) if i == axis else None for i in range(y.ndim)))
    y = y.cumsum(axis)
    return y.flip(axis) if reverse else y


def _topk(node: Node, xp: ArrayOps, x: Tensor, k: Any) -> tuple[Tensor, Tensor]:
    axis = axis_of(node, int(node.attr("axis", -1)), x.ndim)
    values, indices = x.topk(int(k.reshape(-1)[0]), axis, largest=bool(node.attr("largest", 1)))
    return values, indices.cast(dtypes.int64)


# -- matrix products -----------------------------------------------------------------------------------------------


def _matmul(node: Node, xp: ArrayOps, a: Tensor, b: Tensor) -> Tensor:
    return a.matmul(b)


def _gemm(node: Node, xp: ArrayOps, a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
    a = a.transpose(0, 1) if node.attr("transA", 0) else a
    b = b.transpose(0, 1) if node.attr("transB", 0) else b
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = a.matmul(b)
    y = y * alpha if alpha != 1.0 else y
    if c is None or beta == 0.0:
        return y
    return y + (c * beta if beta != 1.0 else c)


def _einsum(node: Node, xp: ArrayOps, *xs: Tensor) -> Tensor:
    return Tensor.einsum(node.attr("equation"), *xs)


def _device_unary(name: str) -> Callable[..., Tensor]:
    return lambda node, xp, x: UNARY[name](node, x)


def _generic_binary(name: str) -> Callable[..., Any]:
    return lambda node, xp, a, b: BINARY[name](xp, a, b)


def _generic_unary(name: str) -> Callable[..., Any]:
    return lambda node, xp, x: xp.unary(HOST_UNARY[name], x)


def _variadic(name: str) -> Callable[..., Any]:
    return lambda node, xp, *xs: functools.reduce(lambda a, b: VARIADIC[name](xp, a, b), xs)


OPS: dict[str, OpSpec] = {
    **{name: OpSpec(_generic_binary(name), host=True) for name in BINARY},
    **{name: OpSpec(_variadic(name), host=True) for name in VARIADIC},
    **{name: OpSpec(_generic_unary(name), host=True) for name in HOST_UNARY},
    **{name: OpSpec(_device_unary(name), check=_check_gelu if name == "Gelu" else None) for name in UNARY},
    **{name: OpSpec(_reduction(name), static=(1,), host=name in HOST_REDUCTIONS) for name in REDUCTIONS},
    "Mod": OpSpec(_mod, host=True),
    "Pow": OpSpec(lambda node, xp, a, b: a.pow(b)),
    "BitShift": OpSpec(_bitshift),
    "BitwiseAnd": OpSpec(lambda node, xp, a, b: a & b),
    "BitwiseOr": OpSpec(lambda node, xp, a, b: a | b),
    "BitwiseXor": OpSpec(lambda node, xp, a, b: a ^ b),
    "PRelu": OpSpec(_prelu),
    "Clip": OpSpec(_clip, either=(1, 2)),
    "Where": OpSpec(_where, host=True),
    "Mean": OpSpec(_mean),
    "ArgMax": OpSpec(_arg_extreme(smallest=False)),
    "ArgMin": OpSpec(_arg_extreme(smallest=True)),
    "Softmax": OpSpec(_softmax("softmax")),
    "LogSoftmax": OpSpec(_softmax("log_softmax")),
    "Hardmax": OpSpec(_softmax("hardmax")),
    "CumSum": OpSpec(_cumsum, static=(1,)),
    "TopK": OpSpec(_topk, static=(1,)),
    "MatMul": OpSpec(_matmul),
    "Gemm": OpSpec(_gemm),
    "Einsum": OpSpec(_einsum),
}

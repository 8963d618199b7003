"""`Tensor` methods for convolution and pooling: windows over the spatial axes. conv2d (any number of spatial axes,
groups, strides, dilations, paddings) and its gradients written as convolutions again (`_Conv`), conv_transpose2d,
average and max pooling and max_unpool2d share the parsing of their spatial arguments and paddings and the window
view (`_windows`). A mixin of `Tensor`, kept apart from the other nn ops (tensor_nn.py had grown two concepts)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lazy import function as F
from lazy.dtype import NARROW_FLOATS, ConstType, dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from lazy.helpers import ArgumentError, ShapeError, all_int, prod
from lazy.record import record
from lazy.symbolic import concrete
from lazy.tensor_base import PyBool, PyInt, TensorBase

if TYPE_CHECKING:
    from typing_extensions import Self

    from lazy.lazy import LazyBuffer
    from lazy.tensor import Tensor

Pads = tuple[tuple[int, int], ...]  # (before, after) per spatial axis

# the most output positions (images x positions per image) the weight gradient of a convolution sums per partial
# result: a register tile's 32 output channels of the gradient over them fill about a quarter of a 1 MiB cache
WGRAD_BLOCK = 2048


@record(frozen=True)
class PoolWindows:
    """A pooling's windows per spatial axis: kernel, stride and dilation, the (before, after) padding asked for, the
    extra padding after it that ceil_mode needs, and the output size."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: list[tuple[int, int]]
    extra: list[int]
    outs: list[int]


class _Conv(F.Function):
    """A convolution of an input padded by `padding` (one (before, after) per spatial axis; negative crops), with
    its gradients written as convolutions again, so that every pass runs a well-tiled convolution kernel.
    Differentiating the window view instead gives the input gradient as a gather of kernel-size times the input's
    elements followed by a fold: an order of magnitude slower.

    The input gradient is the "full" transposed convolution: the output gradient spread out by the stride (zeros
    between), padded by dilation * (kernel - 1) less the input's padding before and up to the input's size after,
    convolved with the weight's channels swapped within each group and its taps flipped. The weight gradient
    correlates the windows of the input with the output gradient, summed over the output positions and the batch.

    forward and backward compute with Tensors: constants over the LazyBuffers for a plain gradient, the traced
    Tensors themselves for a gradient that is differentiated again (its ops are then recorded like any others)."""

    def forward(self, x: LazyBuffer, w: LazyBuffer, groups: PyInt = 1, stride: tuple[PyInt, ...] = (),
                dilation: tuple[PyInt, ...] = (), padding: Pads = ()) -> LazyBuffer:  # fmt: skip
        self.geometry: dict[str, Any] = {"groups": groups, "stride": stride, "dilation": dilation, "padding": padding}
        xp = F._constant(x).pad(((0, 0), (0, 0), *padding))
        if any(p != (0, 0) for p in padding):  # materialized: whole vector loads instead of lanes gated on the padding
            xp = xp.contiguous()
        return xp._conv_windows(F._constant(w), groups=groups, stride=stride, dilation=dilation).lazydata

    def backward(self, grad_output: Any, ret: Any, x: Any, w: Any) -> tuple[Any, Any]:
        traced = isinstance(grad_output, F.TracedBuffer)
        g, xt, wt = (b.tensor if traced else F._constant(b) for b in (grad_output, x, w))
        grads = (
            grad(g, xt, wt, **self.geometry) if needed else None
            for grad, needed in zip((_conv_input_grad, _conv_weight_grad), self.needs_input_grad)
        )
        return tuple(None if t is None else F.TracedBuffer(t) if traced else t.lazydata for t in grads)  # type: ignore[return-value]


def _conv_input_grad(g: Tensor, x: Tensor, w: Tensor, groups: PyInt, stride: tuple[PyInt, ...],
                     dilation: tuple[PyInt, ...], padding: Pads) -> Tensor:  # fmt: skip
    """The gradient of the input `x` of a convolution with `w`, given the output's gradient `g`."""
    nd, kernel = len(stride), w.shape[2:]
    lead = g.ndim - nd
    for axis, s in enumerate(stride):  # spread the gradient out by the stride: s - 1 zeros after each value
        if s > 1:
            o = g.shape[lead + axis]
            g = g.unsqueeze(lead + axis + 1).pad(tuple((0, s - 1) if a == lead + axis + 1 else (0, 0)
                                                       for a in range(g.ndim + 1)))  # fmt: skip
            g = g.reshape(*g.shape[: lead + axis], o * s, *g.shape[lead + axis + 2 :])
            g = g.shrink(tuple((0, (o - 1) * s + 1) if a == lead + axis else None for a in range(g.ndim)))
    # the padded input's gradient needs (before, after) = (dilation * (kernel - 1), the rest up to its size); the
    # input's own is that less its padding (negative: cropped)
    full = tuple((d * (k - 1) - pb, xs + pb - gs) for d, k, xs, gs, (pb, pa) in
                 zip(dilation, kernel, x.shape[lead:], g.shape[lead:], padding))  # fmt: skip
    # a crop deeper than the gradient (an output that saw only padding: stride 6 over a padding of 2) leaves none of
    # it on that axis: the input's gradient there is zeros
    if any(-min(b, 0) - min(a, 0) >= size for (b, a), size in zip(full, g.shape[lead:])):
        return x.zeros_like(requires_grad=False)
    # materialized: the convolution then loads whole vectors rather than gating each lane on the padding
    g = g.pad(((0, 0), (0, 0)) + full).contiguous()
    cout, cin_g = w.shape[:2]
    wt = w.reshape(groups, cout // groups, cin_g, *kernel).transpose(1, 2).flip(tuple(range(3, 3 + nd)))
    wt = wt.reshape(groups * cin_g, cout // groups, *kernel).contiguous()
    return g.conv2d(wt, groups=groups, dilation=dilation)


def _conv_weight_grad(g: Tensor, x: Tensor, w: Tensor, groups: PyInt, stride: tuple[PyInt, ...],
                      dilation: tuple[PyInt, ...], padding: Pads) -> Tensor:  # fmt: skip
    """The gradient of the weight `w` of a convolution of the input `x`, given the output's gradient `g`."""
    nd, kernel = len(stride), tuple(int(k) for k in w.shape[2:])
    n, (cout, cin_g), outs = int(x.shape[0]), w.shape[:2], g.shape[2:]
    # the batch in blocks of `b` images, each block's sum a partial result, then the partials summed: the rows of
    # both operands a register tile reads stay in cache while every channel pair and tap is accumulated over the
    # block (summed over the whole batch at once, each tile would stream the batch from memory). A block is the most
    # images whose output positions together stay within WGRAD_BLOCK.
    positions = prod(outs)
    b = max([d for d in range(1, n + 1) if n % d == 0 and d * positions <= WGRAD_BLOCK], default=1)
    xp = x.pad(((0, 0), (0, 0), *padding)).contiguous()  # (materialized: whole vector loads, as above)
    win = xp._windows(kernel, stride, dilation).reshape(n // b, b, groups, 1, cin_g, *outs, *kernel)
    # the output channels innermost (a copy of the gradient's size): the register tile's vector lanes run along them
    gt = g.permute(0, *range(2, 2 + nd), 1).contiguous().permute(0, 1 + nd, *range(1, 1 + nd))
    gg = gt.reshape(n // b, b, groups, cout // groups, 1, *outs, *([1] * nd))
    if w.dtype in NARROW_FLOATS:  # products and partial sums in float32, rounded once (as the forward's)
        acc = sum_acc_dtype(w.dtype)
        return (win.cast(acc) * gg.cast(acc)).sum((1, *range(5, 5 + nd))).sum(0).reshape(w.shape).cast(w.dtype)
    return (win * gg).sum((1, *range(5, 5 + nd))).sum(0).reshape(w.shape)


# (spatial axes, kernel sizes, strides, dilations) of a convolution
_Geometry = tuple[PyInt, tuple[PyInt, ...], tuple[PyInt, ...], tuple[PyInt, ...]]


class ConvMixin(TensorBase):
    """Convolution and pooling of `Tensor`."""

    __slots__ = ()  # Tensor keeps its slots: no per-instance __dict__

    # -- convolution ---------------------------------------------------------------------------------------------------

    def conv2d(
        self,
        weight: Self,
        bias: Self | None = None,
        groups: PyInt = 1,
        stride: Any = 1,
        dilation: Any = 1,
        padding: Any = 0,
        dtype: Any = None,
    ) -> Self:
        """Convolution of (N, C_in, *spatial) with weight (C_out, C_in/groups, *kernel); 1-d, 2-d and 3-d alike
        (the kernel's rank decides). stride/dilation/padding: an int or one value per spatial axis."""
        weight = self._operand(weight, "conv2d", "the weight")
        nd, kernel, stride_, dilation_ = self._conv_geometry("conv2d", weight, groups, stride, dilation)
        cout, cin_g = weight.shape[:2]
        if self.ndim != nd + 2 or self.shape[1] != cin_g * groups:
            raise ShapeError(
                f"conv2d: input {self.shape} does not match weight {weight.shape} with groups={groups} "
                f"(expects {cin_g * groups} channels and {nd} spatial axes)"
            )
        if cout % groups:
            raise ShapeError(f"conv2d: the {cout} output channels of weight {weight.shape} do not split into {groups} "
                             "groups; C_out must be a multiple of groups")  # fmt: skip
        pads = self._conv_pads(padding, nd, kernel, stride_, dilation_)
        geometry: dict[str, Any] = {"groups": groups, "stride": stride_, "dilation": dilation_}
        same = dtype is None or to_dtype(dtype) == self.dtype
        if same and self.dtype == weight.dtype and dtypes.is_float(self.dtype) and all_int(self.shape):
            out = self._apply(_Conv, weight, padding=pads, **geometry)  # the gradients as convolutions (see _Conv)
        else:
            out = self.pad(((0, 0), (0, 0), *pads))._conv_windows(weight, dtype=dtype, **geometry)
        return out if bias is None else out + bias.reshape(1, -1, *([1] * nd))

    def _conv_windows(
        self,
        weight: Self,
        groups: PyInt,
        stride: tuple[PyInt, ...],
        dilation: tuple[PyInt, ...],
        dtype: Any = None,
    ) -> Self:
        """The convolution of an already padded input: every window times the weight, summed."""
        nd, kernel = len(stride), tuple(int(k) for k in weight.shape[2:])
        n, (cout, cin_g) = self.shape[0], weight.shape[:2]
        win = self._windows(kernel, stride, dilation)  # (N, C_in, *out, *kernel)
        outs = win.shape[2 : 2 + nd]
        # (N, G, 1, C_in/G, *out, *k) * (1, G, C_out/G, C_in/G, 1.., *k), summed over C_in/G and the kernel
        win = win.reshape(n, groups, 1, cin_g, *outs, *kernel)
        w = weight.reshape(1, groups, cout // groups, cin_g, *([1] * nd), *kernel)
        reduce_axes = (3, *range(4 + nd, 4 + 2 * nd))
        out = least_upper_dtype(win.dtype, w.dtype) if dtype is None else to_dtype(dtype)
        acc = sum_acc_dtype(out)
        if dtypes.is_float(acc) and (win.dtype != acc or w.dtype != acc):
            # half types: the products in float32, rounded once at the end (as dot's and PyTorch's); half products
            # summed in float32 were 1.5x PyTorch's error, and dtype=float32 did not help
            win, w = win.cast(acc), w.cast(acc)
            return (win * w).sum(reduce_axes, acc_dtype=acc).cast(out).reshape(n, cout, *outs)
        return (win * w).sum(reduce_axes, dtype=dtype).reshape(n, cout, *outs)

    @staticmethod
    def _spatial_arg(op: str, name: str, value: Any, nd: PyInt, minimum: PyInt = 1) -> tuple[PyInt, ...]:
        """`value` (an int, or one per spatial axis) as `nd` ints, each at least `minimum`: a ValueError naming the op,
        the argument and what is valid otherwise (a stride of 0 used to surface as a bare ZeroDivisionError)."""
        values = tuple(value) if isinstance(value, Sequence) else (value,) * nd
        try:
            ints = tuple(operator.index(v) for v in values)
        except TypeError:
            ints = ()
        if len(ints) != nd or any(isinstance(v, bool) or v < minimum for v in ints):
            raise ArgumentError(
                f"{op}: {name} must be an int >= {minimum} or a sequence of {nd} of them (one per spatial axis), "
                f"got {value!r}"
            )
        return ints

    def _conv_geometry(self, op: str, weight: TensorBase, groups: Any, stride: Any, dilation: Any) -> _Geometry:
        """(spatial axes, kernel sizes, strides, dilations) of a convolution or its transpose, every argument
        checked (`_conv_kernel`, `_spatial_arg`) and named after `op` in an error."""
        nd, kernel = self._conv_kernel(op, weight, groups)
        return nd, kernel, self._spatial_arg(op, "stride", stride, nd), self._spatial_arg(op, "dilation", dilation, nd)

    @staticmethod
    def _conv_kernel(op: str, weight: TensorBase, groups: Any) -> tuple[PyInt, tuple[PyInt, ...]]:
        """(number of spatial axes, kernel sizes) of a convolution weight (C, C', *kernel), checking the weight and
        `groups`."""
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ArgumentError(f"{op}: groups must be an int >= 1, got {groups!r}")
        kernel = weight.shape[2:]
        if weight.ndim < 3 or not all_int(kernel) or any(k < 1 for k in kernel):
            raise ShapeError(
                f"{op}: weight {weight.shape} must have two channel axes and at least one kernel axis, each kernel "
                "size an int >= 1"
            )
        return len(kernel), tuple(int(k) for k in kernel)

    @staticmethod
    def _conv_pads(
        padding: Any,
        nd: PyInt,
        kernel: tuple[PyInt, ...] | None = None,
        stride: tuple[PyInt, ...] | None = None,
        dilation: tuple[PyInt, ...] | None = None,
    ) -> tuple[tuple[PyInt, PyInt], ...]:
        """Per spatial axis (before, after) from an int, one value per axis, a flat torch-style tuple of 2 * nd
        values (last axis first, as `pad` takes them), or (given the kernel, stride and dilation) "valid" (none) or
        "same" (the output as large as the input: dilation * (kernel - 1) in all, the odd one after, as PyTorch).
        Negative values crop."""
        if isinstance(padding, str):
            mode = padding.lower()  # any case, as tinygrad ("SAME")
            if kernel is None or mode not in ("same", "valid"):
                allowed = '"same" or "valid"' if kernel is not None else "an int or a sequence of ints here"
                raise ValueError(f"conv: padding={padding!r} is not valid; padding is {allowed}")
            if mode == "valid":
                return ((0, 0),) * nd
            if stride is not None and any(s != 1 for s in stride):
                raise ValueError(f'conv: padding="same" needs stride 1 (the output is as large as the input), got '
                                 f"stride {stride}; pad with ints for a strided convolution")  # fmt: skip
            totals = [d * (k - 1) for k, d in zip(kernel, dilation or (1,) * nd)]
            return tuple((t // 2, t - t // 2) for t in totals)
        if isinstance(padding, int):
            return ((padding, padding),) * nd
        if not isinstance(padding, (tuple, list)) or not all(hasattr(p, "__index__") for p in padding):
            raise ValueError(f"conv: padding={padding!r} is not valid; padding is an int, a sequence of ints (one per "
                             'spatial axis, or a (before, after) pair each), "same" or "valid"')  # fmt: skip
        padding = tuple(padding)
        if len(padding) == nd:
            return tuple((int(p), int(p)) for p in padding)
        if len(padding) == 2 * nd:
            return tuple((int(padding[i]), int(padding[i + 1])) for i in range(0, 2 * nd, 2))[::-1]
        raise ValueError(f"conv: padding must be an int or a sequence of {nd} or {2 * nd} values, got {padding}")

    def conv_transpose2d(
        self,
        weight: Self,
        bias: Self | None = None,
        groups: PyInt = 1,
        stride: Any = 1,
        dilation: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
    ) -> Self:
        """The gradient of conv2d with respect to its input: (N, C_in, *spatial) with weight (C_in, C_out/groups,
        *kernel). Built as a conv2d over the input spread out by `stride` with the flipped, transposed kernel."""
        nd, kernel, stride_, dilation_ = self._conv_geometry("conv_transpose2d", weight, groups, stride, dilation)
        out_pad = self._spatial_arg("conv_transpose2d", "output_padding", output_padding, nd, minimum=0)
        if any(p >= max(s, d) for p, s, d in zip(out_pad, stride_, dilation_)):
            raise ValueError(
                f"conv_transpose2d: output_padding {output_padding} must be smaller than the stride ({stride}) or "
                f"the dilation ({dilation}) on each axis"
            )
        pads = self._conv_pads(padding, nd)
        cin, cout_g = weight.shape[:2]
        if self.ndim != nd + 2 or self.shape[1] != cin or cin % groups:
            raise ShapeError(
                f"conv_transpose2d: input {self.shape} does not match weight {weight.shape} with groups={groups} "
                f"(expects {cin} channels, a multiple of groups, and {nd} spatial axes)"
            )
        sizes = [(n - 1) * s - b - a + d * (k - 1) + op + 1 for n, s, (b, a), k, d, op
                 in zip(self.shape[2:], stride_, pads, kernel, dilation_, out_pad)]  # fmt: skip
        if any(isinstance(size, int) and size < 1 for size in sizes):
            raise ShapeError(f"conv_transpose2d: the output would be {tuple(sizes)} for input {self.shape} with "
                             f"padding {padding}: padding removes more than the transposed convolution makes; pad "
                             "less")  # fmt: skip
        # weight (G, C_in/G, C_out/G, *k) -> (C_out, C_in/G, *k), taps reversed
        w = weight.reshape(groups, cin // groups, cout_g, *kernel).transpose(1, 2)
        w = w.reshape(groups * cout_g, cin // groups, *kernel).flip(tuple(range(2, 2 + nd)))
        x = self
        for i, s in enumerate(stride_):  # spread out: s - 1 zeros between neighbours
            if s == 1:
                continue
            axis = 2 + i
            n = x.shape[axis]
            n = concrete(n, "conv_transpose2d")
            pre, post = x.shape[:axis], x.shape[axis + 1 :]
            # (each index tuple is built from the x it applies to: a shrink names every axis, no more)
            x = x.reshape(*pre, n, 1, *post)
            x = x.pad(tuple((0, s - 1) if a == axis + 1 else (0, 0) for a in range(x.ndim)))
            x = x.reshape(*pre, n * s, *post)
            x = x.shrink(tuple((0, (n - 1) * s + 1) if a == axis else None for a in range(x.ndim)))
        full = tuple(
            (d * (k - 1) - b, d * (k - 1) - a + op) for (b, a), k, d, op in zip(pads, kernel, dilation_, out_pad)
        )
        x = x.pad(((0, 0), (0, 0)) + full)
        return x.conv2d(w, bias, groups=groups, dilation=dilation_)

    # -- pooling -------------------------------------------------------------------------------------------------------

    def _pool_windows(self, op: str, kernel_size: Any, stride: Any, dilation: Any, padding: Any,
                      ceil_mode: PyBool) -> PoolWindows:  # fmt: skip
        """A pooling's windows over the last axes, from its arguments (checked, naming `op`)."""
        kernel, stride_, dilation_ = self._pool_args(op, kernel_size, stride, dilation)
        pads, extra, outs = self._pool_pads(kernel, stride_, dilation_, padding, ceil_mode)
        return PoolWindows(kernel, stride_, dilation_, pads, extra, outs)

    def _blocks(self, g: PoolWindows) -> Self | None:
        """Windows that tile the input exactly (stride = kernel, no dilation or padding, sizes divisible) as a plain
        reshape (..., o1, k1, o2, k2, ...), reduced over the k axes in place: its gradient is a reshape back too. The
        general window view moves the taps last, and the gradient's views then do not merge (a div and a mod per
        element in the pooling backward kernel). None where the windows do not tile."""
        nd = len(g.kernel)
        spatial = self.shape[-nd:]
        if g.stride != g.kernel or any(d != 1 for d in g.dilation) or any(p != (0, 0) for p in g.pads) or any(g.extra):
            return None
        if not all(isinstance(s, int) and s % k == 0 for s, k in zip(spatial, g.kernel)):
            return None
        blocks = (v for s, k in zip(spatial, g.kernel) for v in (s // k, k))
        return self.reshape(*self.shape[:-nd], *blocks)

    def _pool_pads(
        self,
        kernel: tuple[PyInt, ...],
        stride: tuple[PyInt, ...],
        dilation: tuple[PyInt, ...],
        padding: Any,
        ceil_mode: PyBool,
    ) -> tuple[list[tuple[PyInt, PyInt]], list[PyInt], list[PyInt]]:
        """Per spatial axis: the (before, after) padding asked for, the extra padding after it that ceil_mode needs,
        and the output size. `padding`: an int, one value per axis, or a flat torch-style tuple (last axis first)."""
        nd = len(kernel)
        if isinstance(padding, int):
            pads = [(padding, padding)] * nd
        elif len(padding) == nd:
            pads = [(int(p), int(p)) for p in padding]
        elif len(padding) == 2 * nd:
            pads = [(int(padding[i]), int(padding[i + 1])) for i in range(0, 2 * nd, 2)][::-1]
        else:
            raise ValueError(f"pool: padding must be an int or a sequence of {nd} or {2 * nd} values, got {padding}")
        extra, outs = [], []
        for size, k, s, d, (before, after) in zip(self.shape[-nd:], kernel, stride, dilation, pads):
            assert isinstance(size, int), "pooling needs concrete sizes"
            span, total = d * (k - 1) + 1, size + before + after
            if ceil_mode:  # (a window may reach past the padded input, if it starts inside it: PyTorch's rule)
                out = -(-(total - span) // s) + 1
                if s * (out - 1) >= size + before:  # the last window would start in the padding after the input
                    out -= 1
            else:
                out = (total - span) // s + 1
            if total < span and (not ceil_mode or out < 1):
                raise ShapeError(
                    f"pool: kernel {kernel} (dilation {dilation}) does not fit the padded input {self.shape}"
                    + ("" if ceil_mode else " (ceil_mode=True takes a window that starts inside it)")
                )
            extra.append(max(0, s * (out - 1) + span - total))
            outs.append(out)
        return pads, extra, outs

    def _pool(self, g: PoolWindows, value: ConstType) -> Self:
        """(..., *spatial) -> (..., *outs, *kernel): the windows over the last len(kernel) axes, padded with `value`."""
        nd = len(g.kernel)
        lead = self.shape[:-nd]
        full = tuple((b, a + e) for (b, a), e in zip(g.pads, g.extra))
        x = self.reshape(prod(lead), 1, *self.shape[-nd:]).pad(((0, 0), (0, 0)) + full, value=value)
        win = x._windows(g.kernel, g.stride, g.dilation)
        shown = enumerate((0, 0, *g.outs, *g.kernel))
        win = win.shrink(tuple((0, o) if 2 <= i < 2 + nd else None for i, o in shown))
        return win.reshape(*lead, *g.outs, *g.kernel)

    def _pool_args(
        self, op: str, kernel_size: Any, stride: Any, dilation: Any
    ) -> tuple[tuple[PyInt, ...], tuple[PyInt, ...], tuple[PyInt, ...]]:
        """(kernel, stride, dilation) per spatial axis: an int kernel_size means two axes, stride defaults to the
        kernel; ValueError naming the argument for sizes below 1."""
        nd = 2 if isinstance(kernel_size, int) else len(kernel_size) if isinstance(kernel_size, Sequence) else 0
        kernel = self._spatial_arg(op, "kernel_size", kernel_size, max(nd, 1))
        if self.ndim < nd:
            raise ValueError(f"{op}: kernel {kernel} has more axes than the input {self.shape}")
        stride_ = kernel if stride is None else self._spatial_arg(op, "stride", stride, nd)
        return kernel, stride_, self._spatial_arg(op, "dilation", dilation, nd)

    def avg_pool2d(
        self,
        kernel_size: Any = (2, 2),
        stride: Any = None,
        dilation: Any = 1,
        padding: Any = 0,
        ceil_mode: PyBool = False,
        count_include_pad: PyBool = True,
    ) -> Self:
        """Average pooling over the last len(kernel_size) axes (any number of them). With count_include_pad the
        zero padding asked for counts in the average, the extra padding of ceil_mode never does. Half and bfloat16
        average in float32, rounded once (a window's sum overflows half)."""
        if self.dtype in NARROW_FLOATS:
            args = (kernel_size, stride, dilation, padding, ceil_mode, count_include_pad)
            return self._in_float32(lambda y: y.avg_pool2d(*args))
        g = self._pool_windows("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
        nd = len(g.kernel)
        axes = tuple(range(-nd, 0))
        x = self._float()
        if (blocks := x._blocks(g)) is not None:
            return blocks.mean(tuple(range(-2 * nd + 1, 0, 2)))
        windows = x._pool(g, 0.0)
        if count_include_pad and not any(g.extra):
            return windows.mean(axes)
        # the divisor of each window: the taps inside the input (and inside the padding asked for, with
        # count_include_pad), counted in Python per axis; the region is a box, so the counts multiply
        count = type(self).ones((), dtype=x.dtype, device=self.device)
        for axis, (size, k, s, d, (before, after), out) in enumerate(
            zip(self.shape[-nd:], g.kernel, g.stride, g.dilation, g.pads, g.outs)
        ):
            size = concrete(size, "avg_pool2d")
            lo, hi = (0, size + before + after) if count_include_pad else (before, before + size)
            taps = [sum(lo <= s * o + d * t < hi for t in range(k)) for o in range(out)]
            view = tuple(out if i == axis else 1 for i in range(nd))
            count = count * type(self)(taps, dtype=x.dtype, device=self.device).reshape(view)
        return windows.sum(axes) / count

    def max_pool2d(
        self,
        kernel_size: Any = (2, 2),
        stride: Any = None,
        dilation: Any = 1,
        padding: Any = 0,
        ceil_mode: PyBool = False,
        return_indices: PyBool = False,
    ) -> Self | tuple[Self, Self]:
        """Max pooling over the last len(kernel_size) axes; padding never wins. return_indices adds the (int32) index
        of the first maximum of each window within the flattened spatial axes."""
        g = self._pool_windows("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
        nd = len(g.kernel)
        if not return_indices and (blocks := self._blocks(g)) is not None:
            return blocks.max(tuple(range(-2 * nd + 1, 0, 2)))
        axes = tuple(range(-nd, 0))
        windows = self._pool(g, dtypes.min(self.dtype))
        values = windows.max(axes)
        if not return_indices:
            return values
        spatial = self.shape[-nd:]
        size = prod(spatial)
        size = concrete(size, "max_pool2d")
        # score size - i for flat index i (0 in the padding), the largest score among the maxima is the first maximum
        score = type(self).arange(size, 0, -1, device=self.device).reshape(spatial)
        score_windows = score._pool(g, 0)
        taps, best_value = windows.detach(), values.detach().reshape(*values.shape, *([1] * nd))
        hit = taps == best_value
        if dtypes.is_float(self.dtype):  # a NaN is the maximum (max propagates it) but equals nothing: pick the first
            hit = hit | taps.isnan()
        best = hit.where(score_windows, 0).max(axes)
        return values, (size - best).cast(dtypes.int32)

    def max_unpool2d(self, indices: Self, kernel_size: Any = (2, 2), stride: Any = None,
                     dilation: Any = 1, padding: Any = 0, output_size: Any = None) -> Self:  # fmt: skip
        """Puts each pooled value back at its index (from max_pool2d(return_indices=True)) in a zero tensor of the
        unpooled size; any number of spatial axes."""
        n, c, *spatial = self.shape
        nd = len(spatial)
        if output_size is None:
            kernel = self._spatial_arg("max_unpool2d", "kernel_size", kernel_size, nd)
            stride_ = kernel if stride is None else self._spatial_arg("max_unpool2d", "stride", stride, nd)
            dil, pads = self._spatial_arg("max_unpool2d", "dilation", dilation, nd), self._conv_pads(padding, nd)
            output_size = tuple((i - 1) * s - (b + a) + d * (k - 1) + 1
                                for i, k, d, s, (b, a) in zip(spatial, kernel, dil, stride_, pads))  # fmt: skip
        else:
            output_size = tuple(output_size)[-nd:]
        total = concrete(prod(output_size), "max_unpool2d")
        indices._check_index("max_unpool2d", 0, total, f"an unpooled size of {tuple(output_size)}")
        pooled_size = prod(indices.shape[2:])  # (written out: -1 cannot be worked out of an empty batch)
        # (n, c, pooled, total)
        hit = indices.reshape(n, c, pooled_size, 1) == type(self).arange(total, device=self.device)
        # overlapping windows (stride < kernel) can pick one element twice: it is written once, by the last of them
        # (as PyTorch's), not summed
        pooled = concrete(hit.shape[2], "max_unpool2d")
        order = (type(self).arange(pooled, device=self.device) + 1).reshape(1, 1, pooled, 1)
        chosen = hit & (order == hit.where(order, 0).max(2, keepdim=True))
        out = chosen.where(self.reshape(n, c, pooled_size, 1), 0).sum(2, dtype=self.dtype)
        return out.reshape(n, c, *output_size)

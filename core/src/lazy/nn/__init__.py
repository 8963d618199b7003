"""Neural-network layers built from Tensor ops. `lazy.nn.state` (model state, safetensors and PyTorch files) is
imported on first use: `import lazy` does not pay for its file-format modules."""

from __future__ import annotations

import math
from typing import Any

from lazy.dtype import dtypes
from lazy.helpers import ArgumentError, ShapeError, prod
from lazy.nn import optim  # noqa: F401
from lazy.tensor import Tensor


class Linear:
    """y = x @ W.T + b, initialised like PyTorch (uniform in +-1/sqrt(in_features))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        _check_sizes("Linear", in_features=in_features, out_features=out_features)
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight.transpose(), self.bias)


def _check_sizes(layer: str, **sizes: Any) -> None:
    """A layer's feature or channel counts: ints of at least 1 (a 0 divided its initialisation bound by zero)."""
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ShapeError(f"{layer}: {name} must be an int >= 1, got {size!r}")


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """x * weight + bias, with weight/bias broadcast along `shape` (1 except the channel axis)."""
    if weight is not None:
        x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x


class BatchNorm:
    """Batch normalisation over the channel axis 1 of (N, C, ...): batch statistics in training (updating the
    running ones with `momentum`), running statistics in evaluation. `BatchNorm2d`/`BatchNorm1d` are aliases."""

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float | None = 0.1):  # fmt: skip
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.num_features = sz
        self.weight: Tensor | None = Tensor.ones(sz) if affine else None
        self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
        # (as PyTorch and tinygrad; a clone: a node of its own, which a jit captures the count's update into, where a
        # constant's `+ 1` folds to another constant that no replay would write)
        self.num_batches_tracked = Tensor.zeros((), dtype=dtypes.int64, requires_grad=False).clone()
        if track_running_stats:
            self.running_mean = Tensor.zeros(sz, requires_grad=False)
            self.running_var = Tensor.ones(sz, requires_grad=False)

    def __call__(self, x: Tensor) -> Tensor:  # (N, C, *spatial) -> same
        return x._in_float32(self._normalize)  # half: statistics in float32, as PyTorch (squares overflow half)

    def _normalize(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm: expects (N, {self.num_features}, ...) with the channels on axis 1, got "
                             f"shape {x.shape}")  # fmt: skip
        shape = (1, -1) + (1,) * (x.ndim - 2)
        axes = tuple(i for i in range(x.ndim) if i != 1)
        training = Tensor._training_mode()
        if training or not self.track_running_stats:
            mean = x.mean(axes)
            var = (x - mean.reshape(shape)).square().mean(axes)
            if training and self.track_running_stats:
                n = int(x.numel()) // int(x.shape[1])
                unbiased = var.detach() * (n / max(n - 1, 1))
                # momentum None: the cumulative average over the batches so far (PyTorch's), 1 / (batches incl. this)
                factor: Tensor | float = self.momentum if self.momentum is not None else \
                    1 / (self.num_batches_tracked + 1).cast(self.running_mean.dtype)  # fmt: skip
                self.running_mean.assign((1 - factor) * self.running_mean + factor * mean.detach())
                self.running_var.assign((1 - factor) * self.running_var + factor * unbiased)
                self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        else:
            mean, var = self.running_mean, self.running_var
        normed = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
        return _affine(normed, self.weight, self.bias, shape)


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the last len(normalized_shape) axes, then scale and shift elementwise."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight: Tensor | None = Tensor.ones(*self.shape) if elementwise_affine else None
        self.bias: Tensor | None = Tensor.zeros(*self.shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if tuple(x.shape[-len(self.shape) :]) != self.shape:
            raise ShapeError(f"LayerNorm: input shape {x.shape} does not end in the normalized shape {self.shape}")
        axes = tuple(range(-len(self.shape), 0))

        def normalize(x: Tensor) -> Tensor:
            y = x - x.mean(axes, keepdim=True)
            y = y * (y.square().mean(axes, keepdim=True) + self.eps).rsqrt()
            return _affine(y, self.weight, self.bias, self.shape)

        return x._in_float32(normalize)


class RMSNorm:
    """x / sqrt(mean(x^2) + eps) over the last axis, times a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        self.eps, self.dim = eps, dim
        self.weight: Tensor | None = Tensor.ones(dim) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ShapeError(f"RMSNorm: expects a last axis of {self.dim}, got shape {x.shape}")

        def normalize(x: Tensor) -> Tensor:
            y = x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
            return y * self.weight if self.weight is not None else y

        return x._in_float32(normalize)


class GroupNorm:
    """Normalise each of `num_groups` channel groups of (N, C, ...) over the group's channels and spatial axes."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: {num_channels} channels do not split into {num_groups} groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = Tensor.ones(num_channels) if affine else None
        self.bias: Tensor | None = Tensor.zeros(num_channels) if affine else None

    def __call__(self, x: Tensor) -> Tensor:  # (N, C, *spatial) -> same
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"{type(self).__name__}: expects (N, {self.num_channels}, ...) with the channels on axis "
                             f"1, got shape {x.shape}")  # fmt: skip
        return x._in_float32(self._normalize)

    def _normalize(self, x: Tensor) -> Tensor:
        # (each group's size written out: -1 cannot be worked out of an empty batch)
        grouped = x.reshape(x.shape[0], self.num_groups, prod(x.shape[1:]) // self.num_groups)
        y = grouped - grouped.mean(-1, keepdim=True)
        y = (y * (y.square().mean(-1, keepdim=True) + self.eps).rsqrt()).reshape(x.shape)
        return _affine(y, self.weight, self.bias, (1, -1) + (1,) * (x.ndim - 2))


class InstanceNorm(GroupNorm):
    """GroupNorm with one group per channel."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        super().__init__(num_features, num_features, eps, affine)


class Embedding:
    """Rows of a (vocab_size, embed_size) table picked by integer indices: (..., ) -> (..., embed_size)."""

    def __init__(self, vocab_size: int, embed_size: int):
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        """A row of zeros for an index outside [0, vocab_size) (an IndexError with LAZY_CHECK_INDEX=1)."""
        idx = self.weight._operand(idx, "Embedding", "the indices")
        if not dtypes.is_int(idx.dtype):
            raise ArgumentError(f"Embedding: indices must have an integer dtype, not {idx.dtype}")
        idx._check_index("Embedding", 0, self.vocab_size, f"a vocabulary of {self.vocab_size}")
        # the rows gathered (a load per element: a one-hot matmul was O(tokens x vocabulary x width)); the gradient
        # adds into exactly the rows that were used
        rows = idx.reshape(-1, 1).expand(idx.numel(), self.embed_size)
        return self.weight._gather(0, rows).reshape(*idx.shape, self.embed_size)


class Dropout:
    def __init__(self, p: float = 0.5):
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p

    def __call__(self, x: Tensor) -> Tensor:
        return x.dropout(self.p)


class Conv2d:
    """2-d convolution over (N, C_in, H, W) -> (N, C_out, H', W'), initialised like PyTorch. padding: an int, one
    per spatial axis, a flat (left, right, top, bottom) tuple, "valid" (none) or "same" (stride 1 only)."""

    dims = 2
    string_padding = True  # "same" and "valid" (a transposed convolution has no such padding)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, ...] = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        name = type(self).__name__
        _check_sizes(name, in_channels=in_channels, out_channels=out_channels)
        self.kernel_size = Tensor._spatial_arg(name, "kernel_size", kernel_size, self.dims)
        # bad padding (an unknown string, "same" with a stride) is refused here, not at the first call
        strides = Tensor._spatial_arg(name, "stride", stride, self.dims)
        dilations = Tensor._spatial_arg(name, "dilation", dilation, self.dims)
        Tensor._conv_pads(padding, self.dims, self.kernel_size if self.string_padding else None, strides, dilations)
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ArgumentError(f"{name}: groups must be an int >= 1, got {groups!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                f"multiples of groups ({groups})"
            )
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = self._weight_shape(in_channels, out_channels, groups)
        bound = 1 / math.sqrt(shape[1] * math.prod(self.kernel_size))  # PyTorch's fan-in: weight.size(1) * taps
        self.weight = Tensor.uniform(*shape, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

    def _weight_shape(self, in_channels: int, out_channels: int, groups: int) -> tuple[int, ...]:
        return (out_channels, in_channels // groups, *self.kernel_size)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


class Conv1d(Conv2d):
    dims = 1


class ConvTranspose2d(Conv2d):
    """Transposed 2-d convolution (the gradient of Conv2d with respect to its input), initialised like PyTorch:
    weight (C_in, C_out/groups, *kernel)."""

    string_padding = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, ...],
        stride: int = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        self.output_padding = output_padding

    def _weight_shape(self, in_channels: int, out_channels: int, groups: int) -> tuple[int, ...]:
        return (in_channels, out_channels // groups, *self.kernel_size)

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                                  self.output_padding)  # fmt: skip


class ConvTranspose1d(ConvTranspose2d):
    dims = 1


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of (N, C, H, W)."""

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LSTMCell:
    """One LSTM step: (x, (h, c)) -> (h', c'), gates in PyTorch's order (input, forget, cell, output)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound)
        self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound)
        self.bias_ih = Tensor.uniform(hidden_size * 4, low=-bound, high=bound) if bias else None
        self.bias_hh = Tensor.uniform(hidden_size * 4, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], self.weight_hh.shape[1], device=x.device, dtype=x.dtype)
            hc = (zeros, zeros)
        gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
        i, f, g, o = gates.chunk(4, 1)
        c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c


def __getattr__(name: str) -> Any:
    """`lazy.nn.state`, imported when first asked for (`from lazy.nn import state`, `nn.state.get_parameters`)."""
    if name == "state":
        import importlib

        return importlib.import_module("lazy.nn.state")
    raise AttributeError(f"module 'lazy.nn' has no attribute {name!r}")

"""`Tensor`: the user-facing array with autograd. Every method decomposes into `lazy.function` Functions, which use
only the primitive ops; nothing runs until `.realize()` (or `.numpy()`, `.item()`, `.tolist()`)."""

from __future__ import annotations

import math
import sys
from contextlib import ContextDecorator
from typing import TYPE_CHECKING, Any, ClassVar, Union

from lazy import function as F
from lazy.device import Buffer
from lazy.dtype import (
    HOST_FLOAT32,
    NARROW_FLOATS,
    ConstType,
    DType,
    dtypes,
    is_numpy,
    least_upper_dtype,
    least_upper_float,
    loaded_numpy,
    to_dtype,
)
from lazy.dtype import _to_np_dtype as _dtype_to_np
from lazy.engine.realize import realize
from lazy.engine.schedule import ScheduleItem, create_schedule
from lazy.helpers import ArgumentError, ShapeError, broadcast_shape, prod
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.symbolic import Node, sint
from lazy.tensor_assign import AssignMixin
from lazy.tensor_base import Axis, PyBool, PyInt
from lazy.tensor_conv import ConvMixin
from lazy.tensor_create import CreationMixin
from lazy.tensor_devices import PlacementMixin, check_devices
from lazy.tensor_division import DivisionMixin
from lazy.tensor_host import HostDataMixin, _from_np, _list_to_np
from lazy.tensor_index import IndexingMixin
from lazy.tensor_math import MathMixin
from lazy.tensor_movement import ModeError as ModeError  # (re-exported: raised by pad, imported from here)
from lazy.tensor_movement import MovementMixin
from lazy.tensor_nn import NNOpsMixin
from lazy.tensor_operators import OperatorsMixin
from lazy.tensor_reduce import ReduceMixin

if TYPE_CHECKING:
    pass

TensorLike = Union["Tensor", ConstType]

# tinygrad's name, imported by code written for it (float32 for bfloat16 and fp8, which numpy lacks)
_to_np_dtype = _dtype_to_np


def _is_path(x: Any) -> bool:
    """A `pathlib.Path` (asked without importing pathlib: if it was never imported, nothing is a Path)."""
    return (pathlib := sys.modules.get("pathlib")) is not None and isinstance(x, pathlib.Path)


def _check_operand(y: Any, op: str) -> None:
    if not isinstance(y, (Tensor, list, tuple, bool, int, float, Node)) and not is_numpy(y, "ndarray", "generic"):
        raise TypeError(f"{op}: cannot combine a Tensor with {type(y).__name__} {y!r}; use a Tensor, a number, a list "
                        "or a numpy array")  # fmt: skip


def _shards_of(tensors: tuple[Tensor, ...]) -> list[LazyBuffer]:
    """The LazyBuffers to realize: a tensor's own, or each shard of a sharded one."""
    out: list[LazyBuffer] = []
    for t in tensors:
        lb = t.lazydata
        if isinstance(lb, MultiLazyBuffer):
            out.extend(lb.lbs)
        else:
            out.append(lb)
    return out


class Tensor(
    AssignMixin,
    MovementMixin,
    CreationMixin,
    HostDataMixin,
    IndexingMixin,
    ReduceMixin,
    MathMixin,
    DivisionMixin,
    NNOpsMixin,
    ConvMixin,
    OperatorsMixin,
    PlacementMixin,
):
    """A lazily evaluated n-dimensional array on a device, with reverse-mode autograd."""

    __slots__ = ()  # (the data's slots are TensorBase's)
    training: ClassVar[bool] = False
    no_grad: ClassVar[bool] = False

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):  # fmt: skip
        dtype = to_dtype(dtype) if dtype is not None else None
        if isinstance(device, (tuple, list)) or isinstance(data, MultiLazyBuffer):
            self._init_multi(data, device, dtype, requires_grad)
            return
        requested = device
        device = Device.canonicalize(device) if device is not None else Device.DEFAULT
        self.grad: Tensor | None = None
        self.requires_grad: bool | None = requires_grad
        self._ctx: F.Function | None = None
        if isinstance(data, LazyBuffer):
            lb = data if dtype is None or dtype == data.dtype else data.cast(dtype)
        elif isinstance(data, (bool, int, float)) and not is_numpy(
            data, "ndarray", "generic"
        ):  # (np.float64 is a float)
            lb = LazyBuffer.const_like(data, dtype or dtypes.from_py(data), device, ())
        elif isinstance(data, Node):
            lb = LazyBuffer.const_like(data, dtype or dtypes.int32, device, ())
        elif isinstance(data, bytes):
            import numpy as np

            lb = _from_np(np.frombuffer(data, dtype=np.uint8), device)
        elif _is_path(data):  # the file's bytes, on the DISK device: nothing is read until used
            disk = f"DISK:{data}"
            lb = LazyBuffer.metaop(Ops.EMPTY, (data.stat().st_size,), dtype or dtypes.uint8, Device.canonicalize(disk))
            device = lb.device if requested is None else device
        elif isinstance(data, (list, tuple)):
            target = dtype or dtypes.from_py(data)
            arr = _list_to_np(data, target if target not in HOST_FLOAT32 else dtypes.float32)
            lb = _from_np(arr, device) if target not in HOST_FLOAT32 else _from_np(arr, device).cast(target)
        elif is_numpy(data, "ndarray", "generic"):
            lb = _from_np(loaded_numpy().asarray(data), device)
            if dtype is not None and dtype != lb.dtype:
                lb = lb.cast(dtype)
        elif data is None:
            lb = LazyBuffer.metaop(Ops.EMPTY, (0,), dtype or dtypes.default_float, device)
        else:
            raise TypeError(
                f"cannot make a Tensor from {type(data).__name__}; pass a list, number, numpy array or bytes"
            )
        self.lazydata: LazyBuffer = lb if lb.device == device else lb.copy_to_device(device)

    def _init_multi(self, data: Any, devices: Any, dtype: DType | None, requires_grad: bool | None) -> None:
        """`Tensor(data, device=(d0, d1, ...))`: the data replicated on those devices; or a MultiLazyBuffer kept."""
        if isinstance(data, MultiLazyBuffer):
            one = Tensor.__new__(Tensor)
            one.lazydata = data if dtype is None or dtype == data.dtype else data.cast(dtype)  # type: ignore[assignment]
            one.requires_grad, one.grad, one._ctx = requires_grad, None, None
            if devices is not None and not isinstance(devices, str) and tuple(devices) != data.device:
                one = one.to(tuple(devices))
        else:
            one = Tensor(data, device=check_devices(devices)[0], dtype=dtype).shard(devices)
        self.lazydata, self.requires_grad, self.grad, self._ctx = one.lazydata, requires_grad, None, None

    # -- basics --------------------------------------------------------------------------------------------------------

    @property
    def device(self) -> str:
        """The canonical name of the device that holds the data ("CPU", "PYTHON", "DISK:/path/to/file", ...)."""
        return self.lazydata.device

    @property
    def shape(self) -> tuple[sint, ...]:
        """The size of each axis: ints, or symbolic `Node`s for sizes given by a bound `Variable`."""
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        """The element type, a `DType` (`dtypes.float32`, ...)."""
        return self.lazydata.dtype

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    def numel(self) -> sint:
        """The number of elements (symbolic when the shape is)."""
        return prod(self.shape)

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape, or the size of axis `dim` (negative counts from the end) when given, as PyTorch's."""
        return self.shape if dim is None else self.shape[self._resolve_axis(dim)]

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float type (half, bfloat16, fp8 included)."""
        return dtypes.is_float(self.dtype)

    def element_size(self) -> int:
        """The size of one element in bytes."""
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """The size of the data in bytes: numel() * element_size() (needs a concrete shape)."""
        return int(self.numel()) * self.element_size()

    def __repr__(self) -> str:
        grad = self.grad.lazydata if self.grad is not None else None  # (a Tensor has no truth value)
        return f"<Tensor {self.lazydata!r} on {self.device} with grad {grad!r}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() for one element, or .any()/.all()")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])

    class train(ContextDecorator):
        """Context manager and decorator: `Tensor.training` is `mode` inside (dropout drops, batchnorm uses batch
        statistics) and restored after."""

        def __init__(self, mode: bool = True):
            self.mode = mode

        def __enter__(self) -> None:
            self.prev, Tensor.training = Tensor.training, self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.training = self.prev

    class test(train):
        """`train(False)`: evaluation mode inside (`Tensor.training` False)."""

        def __init__(self, mode: bool = False):
            super().__init__(mode)

    class inference_mode(ContextDecorator):
        """No gradients are recorded inside (`Tensor.no_grad` is set)."""

        def __init__(self, mode: bool = True):
            self.mode = mode

        def __enter__(self) -> None:
            self.prev, Tensor.no_grad = Tensor.no_grad, self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.no_grad = self.prev

    # -- realization ---------------------------------------------------------------------------------------------------

    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels and copies that realizing these tensors would run (nothing runs)."""
        return create_schedule(_shards_of((self,) + others))

    def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
        """Run what computes self and `others` (one schedule for all of them, every shard of a sharded tensor) and
        return self. `do_update_stats` is tinygrad's argument, accepted and unused."""
        realize(_shards_of((self,) + others))
        return self

    def _operand(self, y: Any, op: str, name: str) -> Tensor:
        """`y` as a tensor operand of `op` (named `name` in messages): a Tensor as it is; a list, tuple, numpy array
        or number made a tensor on this tensor's device (as the binary ops take them); anything else refused."""
        if isinstance(y, Tensor):
            return y
        _check_operand(y, f"{op}: {name}")
        if isinstance(y, Node):
            raise TypeError(f"{op}: {name} must be a Tensor, not the symbolic {y}")
        return Tensor(y, device=self.device if isinstance(self.device, str) else None)

    def detach(self) -> Tensor:
        """The same data with no gradient history and requires_grad=False (nothing is copied)."""
        return Tensor(self.lazydata, device=self.device, requires_grad=False)

    def _buffer(self) -> Buffer:
        t = self.cast(self.dtype.scalar()).contiguous().realize()
        buf = t.lazydata.base.realized
        assert buf is not None
        return buf if t.lazydata.st.contiguous else buf

    def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
        """Set `requires_grad` (True, False, or None: undecided, the default) and return self."""
        self.requires_grad = requires_grad
        return self

    @property
    def is_param(self) -> PyBool:
        """Whether optimizers train this tensor (tinygrad's name): every tensor is a parameter unless marked as not
        one, by `is_param_(False)` or `requires_grad=False` (the same flag). `clone()` and `to()` keep it."""
        return self.requires_grad is not False

    @is_param.setter
    def is_param(self, value: PyBool) -> None:
        if not value:
            self.requires_grad = False
        elif self.requires_grad is False:
            self.requires_grad = None  # a parameter again, gradient undecided (the default)

    def is_param_(self, is_param: PyBool = True) -> Tensor:
        """Set `is_param` and return self: False makes optimizers skip the tensor (it sets requires_grad=False)."""
        self.is_param = is_param
        return self

    # -- autograd ------------------------------------------------------------------------------------------------------

    def _deepwalk(self) -> list[Tensor]:
        order: list[Tensor] = []
        visited: set[int] = set()
        stack: list[tuple[Tensor, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in visited or node._ctx is None:
                continue
            if node.requires_grad is True and node._ctx.requires_grad is not True and node is not self:
                continue  # marked as needing a gradient on top of an unrecorded history (a weight from rand): a leaf
            visited.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node._ctx.parents if id(p) not in visited)
        return order

    def _backprop(self, gradient: Tensor | None, create_graph: PyBool) -> dict[int, tuple[Tensor, Tensor]]:
        """d(self)/d(t) for every tensor t in the recorded graph that requires a gradient: {id(t): (t, grad)}. With
        `create_graph` the gradients are built from recorded ops, so they can be differentiated in turn."""
        if gradient is None:
            if self.shape != () and prod(self.shape) != 1:
                raise ValueError(f"backward() without a gradient needs a scalar output, not shape {self.shape}")
            gradient = Tensor(1.0, device=self.device, dtype=self.dtype, requires_grad=False).reshape(self.shape)
        if not isinstance(gradient, Tensor):  # a list, an array, a number: as a tensor of the output's dtype
            gradient = Tensor(gradient, device=self.device, dtype=self.dtype, requires_grad=False)
        if gradient.dtype != self.dtype:  # (an int gradient of a float output, as PyTorch's casts it)
            gradient = gradient.cast(self.dtype)
        if gradient.shape != self.shape:
            raise ShapeError(f"backward: gradient shape {gradient.shape} does not match output shape {self.shape}")
        record = create_graph and not Tensor.no_grad
        grads: dict[int, tuple[Tensor, Tensor]] = {id(self): (self, gradient)}
        for t0 in reversed(self._deepwalk()):
            if id(t0) not in grads:
                continue
            assert t0._ctx is not None
            grad = grads[id(t0)][1]
            if isinstance(t0.lazydata, MultiLazyBuffer) and isinstance(grad.lazydata, MultiLazyBuffer):
                # in the layout of the value it is the gradient of: a sum of gradients takes its operands' (a
                # replicated value's gradient split as a sharded operand it met was), which the op's backward refused
                grad = grad._laid_out_like(t0.lazydata)
            out = t0._ctx.input_gradients(grad, t0, record)
            for parent, g in zip(t0._ctx.parents, out):
                if g is None or (parent.requires_grad is False and parent._ctx is None):
                    continue  # (a recorded op that is not differentiable still passes its zeros on)
                assert g.shape == parent.shape, f"grad shape {g.shape} != {parent.shape} in {type(t0._ctx).__name__}"
                grads[id(parent)] = (parent, g if id(parent) not in grads else grads[id(parent)][1] + g)
        return grads

    def backward(self, gradient: Tensor | None = None, create_graph: PyBool = False) -> Tensor:
        """Accumulate d(self)/d(t) into `.grad` of every tensor t of the graph whose `requires_grad` is not False:
        True, or None (the default) for a float tensor, as tinygrad fills every float tensor's. The graph is kept,
        so calling it twice accumulates twice (as tinygrad does). `create_graph=True` records the gradients' own
        ops, so a `.grad` can be differentiated again (each `.grad` then refers back to its tensor: a reference
        cycle, as in PyTorch, freed by the garbage collector rather than at once)."""
        if self.requires_grad is False or (self._ctx is None and self.requires_grad is not True):
            raise RuntimeError(
                "backward: this tensor does not require a gradient: no tensor with requires_grad=True reaches it "
                "through differentiable ops (comparisons, bitwise ops and detach() cut the graph)"
            )
        for t, g in self._backprop(gradient, create_graph).values():
            if isinstance(t.lazydata, MultiLazyBuffer) and isinstance(g.lazydata, MultiLazyBuffer):
                g = g._laid_out_like(t.lazydata)  # a sharded parameter's gradient is sharded the same way
            if t.requires_grad or (t.requires_grad is None and dtypes.is_float(t.dtype)):
                t.grad = g if t.grad is None else t.grad + g
        return self

    def _laid_out_like(self, like: MultiLazyBuffer) -> Tensor:
        multi = self.lazydata
        assert isinstance(multi, MultiLazyBuffer)
        if (multi.axis, multi.bounds) == (like.axis, like.bounds):
            return self
        ret = Tensor.__new__(Tensor)
        ret.lazydata = like._new(multi.to_layout(like))
        ret.requires_grad, ret.grad, ret._ctx = self.requires_grad, None, self._ctx
        return ret

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None, create_graph: PyBool = True) -> list[Tensor]:
        """d(self)/d(target) for each target (zeros for a target self does not depend on), without touching any
        `.grad`. The gradients are recorded ops themselves (unless `create_graph=False`), so a gradient of a gradient,
        a Jacobian row or a Hessian-vector product is again `gradient` (as in tinygrad). Targets must have had
        `requires_grad` True or None when the graph was built (ops on tensors with requires_grad=False are not
        recorded)."""
        if bad := [t for t in targets if not isinstance(t, Tensor)]:
            raise TypeError(f"gradient: the targets must be Tensors, got {type(bad[0]).__name__} {bad[0]!r:.40}; pass "
                            "the output's gradient by keyword (gradient=...)")  # fmt: skip
        grads = self._backprop(gradient, create_graph)
        return [grads[id(t)][1] if id(t) in grads else t.zeros_like() for t in targets]

    # -- Functions applied for the mixins (which build on `TensorBase`, where these are declared) --------------------

    def _apply(self, fxn: type[F.Function], *others: Tensor, **kwargs: Any) -> Tensor:
        """`fxn` applied to self and `others` (a mixin's way to apply a Function it defines, such as `_Conv`)."""
        return fxn.apply(self, *others, **kwargs)

    def _reduce(self, fxn: type[F.Function], axis: Axis, keepdim: PyBool) -> Tensor:
        """`fxn` (Sum or Max) over `axis`; the reduced axes kept as size 1 with `keepdim`, else dropped."""
        shape = self.lazydata.shape
        if axis is None and shape:  # every axis (the common `x.sum()`)
            return fxn.apply(self, axis=tuple(range(len(shape))), **({} if keepdim else {"shape": ()}))
        axes = self._reduce_axes(axis)
        if not shape:
            return self
        if keepdim:
            return fxn.apply(self, axis=axes)
        return fxn.apply(self, axis=axes, shape=tuple([s for i, s in enumerate(shape) if i not in axes]))

    # -- elementwise ---------------------------------------------------------------------------------------------------

    def _broadcasted(self, y: TensorLike, reverse: bool = False, op: str = "op") -> tuple[Tensor, Tensor]:
        x: Tensor = self
        kind = type(y)
        lb = x.lazydata
        if kind is int and not -(2**63) <= y < 2**64 and not dtypes.is_float(lb.dtype):
            raise OverflowError(f"{op}: the Python int {y} does not fit in 64 bits, the widest integer a tensor holds "
                                "(PyTorch refuses it too); use a float, or reduce it first")  # fmt: skip
        if (kind is float and dtypes.is_float(lb.dtype)) or (kind is int and lb.dtype.name != "bool"):
            # the common case, `x + 1` or `1 - x`: a number of x's dtype, made in x's shape directly (no reshape or
            # expand ops; constants of recent ops are kept, see `LazyBuffer.const_like`)
            const = Tensor.__new__(Tensor)
            const.lazydata = lb.const(y)  # type: ignore[arg-type]
            const.requires_grad, const.grad, const._ctx = False, None, None
            return (const, x) if reverse else (x, const)
        if is_numpy(y, "generic"):
            y = y.item()  # a numpy scalar acts like the Python scalar it holds
        _check_operand(y, op)
        if not isinstance(y, Tensor):
            if isinstance(y, (list, tuple)) or is_numpy(y, "ndarray"):
                y = Tensor(y, device=self.device)
            else:
                y_dtype = x.dtype
                if isinstance(y, float) and not dtypes.is_float(x.dtype):
                    y_dtype = dtypes.default_float
                elif isinstance(y, bool) or (isinstance(y, int) and not isinstance(y, bool) and x.dtype == dtypes.bool):
                    y_dtype = x.dtype if isinstance(y, bool) else dtypes.default_int
                if isinstance(y, Node):
                    y_dtype = dtypes.int32
                y = Tensor(y, device=self.device, dtype=y_dtype, requires_grad=False)
        if x.device != y.device:
            raise ValueError(f"{op}: tensors are on different devices ({x.device} and {y.device}); use .to() first")
        if reverse:
            x, y = y, x
        out_dtype = least_upper_dtype(x.dtype, y.dtype)
        shape = broadcast_shape(op, x.shape, y.shape)
        x, y = x.cast(out_dtype), y.cast(out_dtype)
        return x._broadcast_to(shape), y._broadcast_to(shape)

    def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
        """Self repeated along its axes of size 1 (and new leading axes) to `shape`. Internal: the ops are applied
        directly, without the argument handling of the public `reshape` and `expand` (each eager binary op of
        tensors of two shapes comes here: the softmax family a dozen times)."""
        have = self.shape
        if have == shape:
            return self
        if len(have) > len(shape):
            raise ShapeError(f"expand: cannot expand {have} to fewer dimensions {shape}")
        padded = (1,) * (len(shape) - len(have)) + have
        for p, s in zip(padded, shape):
            if p != s and not (isinstance(p, int) and p == 1):
                raise ShapeError(f"expand: cannot expand {have} to {shape}")
        x = F.Reshape.apply(self, shape=padded) if padded != have else self
        return x if padded == shape else F.Expand.apply(x, shape=shape)

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (a DType or its name, such as "float16"); self when it already has that
        dtype."""
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bytes as another dtype. A different element size changes the last dimension and needs a plain
        (consecutive) tensor, which then shares memory (e.g. the bytes of a file read as float32)."""
        dtype = to_dtype(dtype)
        if self.requires_grad:
            raise RuntimeError("bitcast is not differentiable; call .detach() first")
        if self.dtype == dtype:
            return self
        base = self.lazydata.base
        in_memory = base.realized is not None or base.op is Ops.EMPTY  # nothing to compute: reinterpret the bytes
        if dtype.itemsize != self.dtype.itemsize or in_memory:
            view = self.lazydata.buffer_view(dtype)
            if view is not None:
                return Tensor(view, device=self.device, requires_grad=False)
            if dtype.itemsize != self.dtype.itemsize:
                last = self.shape[-1] if self.shape else 1
                if isinstance(last, int) and (last * self.dtype.itemsize) % dtype.itemsize:
                    raise ValueError(f"bitcast from {self.dtype} to {dtype} of shape {self.shape}: the last "
                                     f"dimension's {last * self.dtype.itemsize} bytes do not hold whole {dtype} "
                                     f"elements ({dtype.itemsize} bytes each); reshape so that they do")  # fmt: skip
                raise ValueError(f"bitcast from {self.dtype} to {dtype} of shape {self.shape}: a different element "
                                 "size needs a tensor laid out consecutively in memory; call .contiguous() "
                                 "first")  # fmt: skip
        return F.Cast.apply(self, dtype=dtype, bitcast=True)

    def float(self) -> Tensor:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """Cast to float16."""
        return self.cast(dtypes.float16)

    def bfloat16(self) -> Tensor:
        """Cast to bfloat16."""
        return self.cast(dtypes.bfloat16)

    def short(self) -> Tensor:
        """Cast to int16."""
        return self.cast(dtypes.int16)

    def int(self) -> Tensor:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool (nonzero is True)."""
        return self.cast(dtypes.bool)

    def long(self) -> Tensor:
        """Cast to int64."""
        return self.cast(dtypes.int64)

    def double(self) -> Tensor:
        """Cast to float64."""
        return self.cast(dtypes.float64)

    def contiguous(self, **kwargs: Any) -> Tensor:
        """The values in memory of their own, in row-major order, once realized (a view or an unrealized computation is
        materialized there; fusion stops here). Keyword arguments are accepted and unused (tinygrad's signature)."""
        return F.Contiguous.apply(self)

    def contiguous_backward(self) -> Tensor:
        """self unchanged in the forward pass; in the backward pass its gradient is made contiguous (tinygrad's)."""
        return F.ContiguousBackward.apply(self)

    def _float(self) -> Tensor:
        return self.cast(least_upper_float(self.dtype))

    def _in_float32(self, fn: Any) -> Tensor:
        """fn on the float form of self; half, bfloat16 and fp8 compute in float32 and round once at the end, as
        PyTorch does: exp(x) = exp2(x * log2(e)) in half precision would be a few ulp off, and a variance's squared
        deviations of half values of a few hundred overflow half (the transcendentals, var, the norms)."""
        x = self._float()
        if x.dtype in NARROW_FLOATS:
            return fn(x.cast(dtypes.float32)).cast(x.dtype)
        return fn(x)

    def neg(self) -> Tensor:
        """-x (logical not for bool)."""
        return self.logical_not() if self.dtype == dtypes.bool else F.Neg.apply(self)

    def logical_not(self) -> Tensor:
        """not x as a bool tensor (nonzero is True)."""
        return F.Neq.apply(*self.cast(dtypes.bool)._broadcasted(True, op="logical_not"))

    def reciprocal(self) -> Tensor:
        """1 / x in a float dtype (integers compute in the default float; half and bfloat16 in float32, rounded
        once)."""
        return self._in_float32(F.Reciprocal.apply)

    def sqrt(self) -> Tensor:
        """The square root in a float dtype (NaN below 0; integers compute in the default float; half and bfloat16 in
        float32, rounded once)."""
        return self._in_float32(F.Sqrt.apply)

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x) (half types in float32, rounded once)."""
        return self._in_float32(lambda x: x.sqrt().reciprocal())

    def exp(self) -> Tensor:
        """e**x in a float dtype (integers compute in the default float; half and bfloat16 in float32, rounded once)."""
        return self._in_float32(F.Exp.apply)

    def exp2(self) -> Tensor:
        """2**x in a float dtype (integers compute in the default float; half and bfloat16 in float32, rounded once)."""
        return self._in_float32(F.Exp2.apply)

    def log(self) -> Tensor:
        """The natural logarithm in a float dtype (-inf at 0, NaN below; half and bfloat16 compute in float32, rounded
        once)."""
        return self._in_float32(F.Log.apply)

    def log2(self) -> Tensor:
        """The base-2 logarithm in a float dtype (-inf at 0, NaN below; half and bfloat16 compute in float32, rounded
        once)."""
        return self._in_float32(F.Log2.apply)

    def sin(self) -> Tensor:
        """sin(x) in a float dtype (integers compute in the default float; half and bfloat16 in float32, rounded
        once)."""
        return self._in_float32(F.Sin.apply)

    def cos(self) -> Tensor:
        """cos(x), as 1 - 2 sin(x/2)^2: halving is exact, so the absolute error stays about ulp(1) for any x (1.9e-7
        in float32; sin(pi/2 - x) would round pi/2 - x). Near cos's zeros the relative error is large and the sign may
        be wrong (cos(float32(pi/2)) gives 6e-8, not -4.4e-8); tan = sin / cos inherits that there. Half and
        bfloat16 compute in float32, rounded once (in half, cos(1.5703125) would round to 0 and tan to inf)."""
        return self._in_float32(lambda x: 1 - 2 * (x * 0.5).sin().square())

    def tan(self) -> Tensor:
        """sin(x) / cos(x) (half and bfloat16 in float32, rounded once)."""
        return self._in_float32(lambda x: x.sin() / x.cos())

    def relu(self) -> Tensor:
        """max(x, 0); its gradient is 0 where x <= 0 (PyTorch's)."""
        return F.Relu.apply(self)

    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x)) in a float dtype (half and bfloat16 compute in float32, rounded once); below 0 it is
        exp(x) / (1 + exp(x)), which underflows gradually (1 / (1 + exp(-x)) is 0 once exp(-x) overflows). Its
        gradient is s (1 - s) from the output (`F.Sigmoid`)."""
        return self._in_float32(F.Sigmoid.apply)

    def abs(self) -> Tensor:
        """|x|. Unsigned and bool tensors are returned as they are; the lowest signed integer stays itself (abs(-128) is
        -128 in int8, as numpy)."""
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return self  # (relu(x) + relu(-x) wraps around for unsigned types: x + (2^n - x) = 0)
        if dtypes.is_int(self.dtype):  # the smallest int is its own negation (abs(-128) is -128 in int8, as numpy)
            return (self < 0).where(-self, self)
        return self.relu() + (-self).relu()

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of each element, in self's dtype (bool unchanged); its gradient is 0."""
        if self.dtype == dtypes.bool:
            return self
        return F.Sign.apply(self)

    def clip(self, min_: TensorLike | None = None, max_: TensorLike | None = None) -> Tensor:
        """min(max(self, min_), max_) as PyTorch's clamp: a NaN in self or a bound gives NaN; the gradient goes to
        self where it is within the bounds (at them too), to the bound it is clipped to, and nowhere for NaN."""
        if min_ is None and max_ is None:
            raise RuntimeError("clip needs at least one of min_ or max_")  # (tinygrad's and PyTorch's type)
        x = self._clip_side(min_, lower=True) if min_ is not None else self
        return x._clip_side(max_, lower=False) if max_ is not None else x

    def _clip_side(self, bound: TensorLike, lower: PyBool) -> Tensor:
        if type(bound) is int and dtypes.is_int(self.dtype):  # a bound outside the dtype's range would wrap into it
            bound = min(max(bound, dtypes.min(self.dtype)), dtypes.max(self.dtype))  # (uint8 clip(0, 300): 255 -> 44)
        x, b = self._broadcasted(bound, op="clip")
        inside, outside = (x >= b, x < b) if lower else (x <= b, x > b)
        out = inside.where(x, outside.where(b, x.detach()))  # (neither: x is NaN, which passes no gradient)
        return b.isnan().where(b.detach(), out) if dtypes.is_float(b.dtype) else out

    clamp = clip

    def _inexact_scalar(self, y: TensorLike) -> PyBool:
        """Whether `y` is a Python number that a half-type `self` cannot hold exactly. A product or quotient with it
        then runs in float32, rounded once to self's dtype, as PyTorch's (`h * 1e-8` and `h / 1e5` were 0: the
        scalar was rounded to half first); sums keep the rounded scalar, as PyTorch's do."""
        if not isinstance(y, (float, int)) or type(y) is bool or self.dtype not in NARROW_FLOATS:
            return False
        if not math.isfinite(y):
            return False
        return dtypes.as_const(y, self.dtype) != y

    def add(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self + y, broadcast, in the promoted dtype; `reverse=True` gives y + self."""
        return F.Add.apply(*self._broadcasted(y, reverse, "add"))

    def sub(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self - y, broadcast, in the promoted dtype (bool tensors raise: use logical_xor); `reverse=True` gives y -
        self."""
        x, y2 = self._broadcasted(y, reverse, "sub")
        if x.dtype == dtypes.bool:
            raise TypeError("subtraction of bool tensors is not supported; use logical_xor or cast first")
        return F.Sub.apply(x, y2)

    def mul(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self * y, broadcast, in the promoted dtype; `reverse=True` gives y * self."""
        if self._inexact_scalar(y):
            return self.float().mul(y, reverse).cast(self.dtype)
        return F.Mul.apply(*self._broadcasted(y, reverse, "mul"))

    def pow(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self ** y. Float powers follow C's pow (and PyTorch) at every edge, values and gradients: 0**0 = 1,
        0**-1 = inf, (-8)**(1/3) is NaN, (-2)**3.0 = -8, (-inf)**1.5 = inf. Integers stay integers (exact, wrapping
        like C); an integer tensor to a negative integer constant raises, as in tinygrad and PyTorch."""
        if not reverse and isinstance(y, int) and not isinstance(y, bool) and not dtypes.is_float(self.dtype):
            if y < 0:
                raise RuntimeError(f"pow: an integer tensor ({self.dtype}) to the negative power {y} is not an "
                                   "integer; cast the tensor to a float dtype first")  # fmt: skip
            if y <= 64:
                return self._int_power(y)  # exact, and keeps the dtype
        base, exponent = self._broadcasted(y, reverse, "pow")
        if not dtypes.is_float(base.dtype):
            return base._int_tensor_power(exponent)
        if base.dtype in NARROW_FLOATS:  # computed in float32, rounded once (as PyTorch)
            return F.Pow.apply(base.float(), exponent.float()).cast(base.dtype)
        return F.Pow.apply(base, exponent)

    def _int_tensor_power(self, exponent: Tensor) -> Tensor:
        """Integer base ** integer exponent, exact (wrapping like C on overflow) by squaring once per exponent bit.
        A negative exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise (PyTorch's integer results)."""
        result, square = self.ones_like(), self
        e = exponent.maximum(0)
        for bit in range(8 * exponent.dtype.itemsize - (0 if dtypes.is_unsigned(exponent.dtype) else 1)):
            result = ((e >> bit) & 1).cast(dtypes.bool).where(result * square, result)
            square = square * square
        odd = (exponent & 1).cast(dtypes.bool)
        negative = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0)).cast(self.dtype)
        return (exponent < 0).where(negative, result) if not dtypes.is_unsigned(exponent.dtype) else result

    def _int_power(self, n: PyInt) -> Tensor:
        """self**n for an int n >= 0 by repeated squaring: log2(n) multiplies."""
        result: Tensor | None = None
        square = self
        while n:
            if n & 1:
                result = square if result is None else result * square
            n >>= 1
            if n:
                square = square * square
        # x**0 is 1 (NaN and inf too); the zero gradient of sign keeps x in the graph, as PyTorch's pow does
        return result if result is not None else self.sign() * 0 + 1

    def maximum(self, y: TensorLike) -> Tensor:
        """The larger of self and y per element (broadcast, promoted)."""
        return F.Maximum.apply(*self._broadcasted(y, False, "maximum"))

    def minimum(self, y: TensorLike) -> Tensor:
        """The smaller of self and y per element (broadcast, promoted)."""
        x, y2 = self._broadcasted(y, False, "minimum")
        return x._order_flip().maximum(y2._order_flip())._order_flip()

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        """Per element `x` where self (the condition, cast to bool) is True, else `y`; all three broadcast."""
        if isinstance(x, Tensor):
            x_t, y_t = x._broadcasted(y, op="where")
        elif isinstance(y, Tensor):
            y_t, x_t = y._broadcasted(x, op="where")
        else:
            _check_operand(x, "where")
            x_t, y_t = Tensor(x, device=self.device)._broadcasted(y, op="where")
        shape = broadcast_shape("where", self.shape, x_t.shape)
        cond = self.cast(dtypes.bool)._broadcast_to(shape)
        return F.Where.apply(cond, x_t._broadcast_to(shape), y_t._broadcast_to(shape))

    # comparisons
    def lt(self, y: TensorLike) -> Tensor:
        """self < y per element, a bool tensor (broadcast)."""
        return F.Less.apply(*self._broadcasted(y, False, "<"))

    def gt(self, y: TensorLike) -> Tensor:
        """self > y per element, a bool tensor (broadcast)."""
        return F.Less.apply(*self._broadcasted(y, True, ">"))

    def ne(self, y: TensorLike) -> Tensor:
        """self != y per element, a bool tensor (broadcast; NaN differs from everything)."""
        return F.Neq.apply(*self._broadcasted(y, False, "!="))

    def eq(self, y: TensorLike) -> Tensor:
        """self == y per element, a bool tensor (broadcast; NaN equals nothing)."""
        return F.Neq.apply(*self._broadcasted(y, False, "==")).logical_not()

    # bitwise / logical
    def _bitwise(self, y: TensorLike, op: Ops, reverse: PyBool = False) -> Tensor:
        x, y2 = self._broadcasted(y, reverse, op.name.lower())
        if dtypes.is_float(x.dtype):
            other = f"a {y.dtype} tensor" if isinstance(y, Tensor) else f"{type(y).__name__} {y!r}"
            raise ArgumentError(f"{op.name.lower()} needs integer or bool operands, got a {self.dtype} tensor and "
                                f"{other}; cast them to an integer dtype")  # fmt: skip
        return F.BitwiseBinary.apply(x, y2, op=op)

    def bitwise_and(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self & y for integer or bool tensors (a float operand raises ArgumentError); `reverse=True` gives y &
        self."""
        return self._bitwise(y, Ops.AND, reverse)

    def bitwise_or(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self | y for integer or bool tensors (a float operand raises ArgumentError); `reverse=True` gives y |
        self."""
        return self._bitwise(y, Ops.OR, reverse)

    def bitwise_xor(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self ^ y for integer or bool tensors (a float operand raises ArgumentError); `reverse=True` gives y ^
        self."""
        return self._bitwise(y, Ops.XOR, reverse)

    def xor(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self ^ y for integer or bool tensors, as `bitwise_xor`."""
        return self._bitwise(y, Ops.XOR, reverse)

    def lshift(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self << y for integer tensors; `reverse=True` gives y << self. A constant count of at least the bit width
        shifts every bit out (0), as PyTorch's; a negative constant count is refused. (A tensor of counts shifts as
        the device's shift instruction does: a count outside [0, width) is undefined, as in C.)"""
        if (out := self._constant_shift(y, reverse, left=True)) is not None:
            return out
        return self._bitwise(y, Ops.SHL, reverse)

    def rshift(self, y: TensorLike, reverse: PyBool = False) -> Tensor:
        """self >> y for integer tensors; `reverse=True` gives y >> self. A constant count of at least the bit width
        leaves the sign (-1 for a negative signed value, else 0), as PyTorch's; a negative constant count is refused
        (see `lshift` for a tensor of counts)."""
        if (out := self._constant_shift(y, reverse, left=False)) is not None:
            return out
        return self._bitwise(y, Ops.SHR, reverse)

    def _constant_shift(self, y: TensorLike, reverse: PyBool, left: PyBool) -> Tensor | None:
        """The shift of this integer tensor by a Python int count that no shift instruction defines (the whole width
        or more), or None for the ordinary shift; a negative count raises."""
        if reverse or isinstance(y, bool) or not isinstance(y, int) or not dtypes.is_int(self.dtype):
            return None
        name = "lshift" if left else "rshift"
        if y < 0:
            raise ArgumentError(f"{name}: a negative shift count ({y}) is undefined; shift the other way by {-y}")
        if y < 8 * self.dtype.itemsize:
            return None
        if left or dtypes.is_unsigned(self.dtype):
            return self.zeros_like()
        return (self < 0).where(-1, 0).cast(self.dtype)

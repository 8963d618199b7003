"""Host data in and out of a tensor: building a LazyBuffer from numpy arrays and Python lists (`Tensor.__init__`),
`numpy()` (with numpy 2's `copy`), `item`, `tolist`, `data`, and DLPack (`__dlpack__`, `__dlpack_device__`,
`from_dlpack`), as `HostDataMixin`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazy.dtype import HOST_FLOAT32, ConstType, DType, dtypes, to_np_dtype
from lazy.helpers import all_int, prod
from lazy.lazy import LazyBuffer
from lazy.multi import MultiLazyBuffer
from lazy.ops import GroupOp, Ops
from lazy.symbolic import ConcreteValueError, Node, bound_value, describe
from lazy.tensor_base import PyBool, TensorBase

if TYPE_CHECKING:
    import numpy as np
    from typing_extensions import Self


def _from_np(data: np.ndarray, device: str) -> LazyBuffer:
    import numpy as np

    dtype = dtypes.from_np(data.dtype)
    lb = LazyBuffer.metaop(Ops.EMPTY, data.shape, dtype, device)
    if data.size:
        lb.buffer.allocate().copyin(np.ascontiguousarray(data).data)
    else:
        lb.buffer.allocate()
    lb.done = True
    return lb


def _list_to_np(data: list | tuple, dtype: DType) -> np.ndarray:
    """Python values as `dtype`, converted the way tinygrad converts them: bools are 0 and 1, floats truncate toward
    zero for integer dtypes, and integers wrap modulo 2^bits into integer dtypes (-1 as uint8 is 255, 2^40 as int32
    is 0) rather than being refused."""
    import numpy as np

    target = to_np_dtype(dtype)
    try:
        if not dtypes.is_int(dtype):
            return np.array(data, dtype=target)
        natural = np.array(data)
    except ValueError as e:
        if "inhomogeneous" not in str(e) and "sequence" not in str(e):
            raise
        raise ValueError(
            "Tensor: the nested lists are not rectangular (some rows are longer than others); pad them "
            f"to one length first ({e})"
        ) from None
    if natural.dtype.kind == "f" and np.isfinite(natural).all() and (np.abs(natural) < 2.0**63).all():
        natural = np.trunc(natural).astype(np.int64)
    if natural.dtype.kind in "biu":
        return natural.astype(target)  # (numpy's integer casts wrap)
    if natural.dtype.kind == "f" and not np.isfinite(natural).all():
        bad = natural[~np.isfinite(natural)].flat[0]  # (the type Python's int() raises: ValueError, OverflowError)
        raise (ValueError if np.isnan(bad) else OverflowError)(
            f"Tensor: {bad} has no {dtype} value; replace NaN and inf first (numpy's nan_to_num), or make a float "
            "tensor")  # fmt: skip
    # beyond int64 and uint64: Python's int() and exact wrapping
    bits = 8 * dtype.itemsize
    half = 1 << (bits - 1) if not dtypes.is_unsigned(dtype) else 0
    values = [(int(v) + half) % (1 << bits) - half for v in np.asarray(data, dtype=object).flat]
    return np.array(values, dtype=target).reshape(natural.shape)


class HostDataMixin(TensorBase):
    """How a tensor's values reach the host and other libraries (see the module's docstring)."""

    def numpy(self, copy: PyBool | None = True) -> np.ndarray:
        """The values as a numpy array. `copy` as numpy 2's: True (the default), a new array (a sharded tensor's shards
        put together); None, an array over the tensor's own memory where that is host memory (CPU, LLVM: a realized
        tensor, or one viewed by plain strides), else a copy; False, an array over its own memory or ValueError
        saying why that takes a copy. An array over the memory shares it both ways and keeps it alive."""
        if copy is not True:
            from lazy import dlpack

            shared, why = dlpack.host_array(self.lazydata)
            if shared is not None:
                return shared
            if copy is False:
                raise ValueError(f"numpy(copy=False): {why}, so this takes a copy; call numpy() or numpy(copy=None)")
        if isinstance(self.lazydata, MultiLazyBuffer):
            return self._gather_numpy(self.lazydata)
        if not all_int(self.shape):
            shape = tuple(bound_value(d) for d in self.shape)
            if None in shape:
                symbolic = "; ".join(describe(d) for d in self.shape if isinstance(d, Node) and bound_value(d) is None)
                raise ConcreteValueError(f"numpy() needs a concrete shape, not {self.shape}: {symbolic}; bind the "
                                         "variable (Variable(...).bind(value)) to read the values")  # fmt: skip
            # a symbolic tensor is computed for its bound values into a buffer sized for the variables' maximum;
            # the values are its first elements, in order
            src = self if self.dtype not in HOST_FLOAT32 else self.cast(dtypes.float32)
            buf = src.contiguous().realize().lazydata.base.realized
            assert buf is not None
            return buf.numpy()[: prod(shape)].reshape(shape).copy()
        if prod(self.shape) == 0:
            import numpy as np

            return np.zeros(self.shape, dtype=to_np_dtype(self.dtype) if self.dtype not in HOST_FLOAT32 else np.float32)
        t = self if self.dtype not in HOST_FLOAT32 else self.cast(dtypes.float32)
        # a plain slice is read straight out of memory (copy-only devices need it), unless its elements are still to
        # be computed: then only they are (a few elements of a huge arange must not compute all of it)
        computed = t.lazydata.base.realized is None and t.lazydata.base.op in GroupOp.Elementwise
        view = None if computed else t.lazydata.buffer_view()
        t = type(self)(view, device=t.device) if view is not None else t.contiguous()
        t.realize()
        buf = t.lazydata.base.realized
        assert buf is not None
        return buf.numpy()[: prod(self.shape)].reshape(self.shape).copy()

    def _gather_numpy(self, multi: MultiLazyBuffer) -> np.ndarray:
        if multi.axis is None:
            return type(self)(multi.lbs[0], device=multi.lbs[0].device).numpy()
        import numpy as np

        pieces = sorted(zip(multi.bounds, multi.lbs), key=lambda piece: piece[0])
        return np.concatenate([type(self)(lb, device=lb.device).numpy() for _, lb in pieces], axis=multi.axis)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: PyBool | None = None) -> Any:  # fmt: skip
        """A DLPack capsule of the values (the Python array API protocol; `np.from_dlpack(t)`, `torch.from_dlpack(t)`).

        A realized tensor on a device that declares its DLPack memory (CPU, LLVM: host memory) is shared, not copied:
        its memory (a view of it by plain strides too) stays alive until the consumer lets it go, and writes on
        either side are seen by the other. An unrealized tensor is computed first, into its own memory; a view that
        strides cannot describe (padding, negative steps) is laid out in order (a copy). Other devices' memory is
        copied to host memory. `max_version` >= (1, 0): a versioned capsule ("dltensor_versioned"), else the legacy
        "dltensor". `dl_device` (1, 0) asks for host memory; `copy` True/False forces or forbids a copy (BufferError
        when one is needed); `stream` must be None for host memory (other memory is ready on every stream: the device
        is synchronized). A sharded tensor raises BufferError."""
        from lazy import dlpack

        return dlpack.export_capsule(self.lazydata, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id) of what `__dlpack__` exports: (1, 0), host memory, unless the device's
        plugin declares another memory kind (CUDA: (2, ordinal))."""
        from lazy import dlpack

        return dlpack.dlpack_device(self.lazydata)

    @classmethod
    def from_dlpack(cls, x: Any, device: str | None = None, copy: PyBool | None = None) -> Self:
        """A tensor of `x`'s data: anything with `__dlpack__` (numpy arrays, PyTorch tensors, lazy tensors) or a DLPack
        capsule (consumed: a capsule is imported once).

        Without a copy where `device` uses the producer's memory in place (host memory on CPU or LLVM): the tensor
        reads and writes it, keeps the producer's data alive, and a view by strides (a transposed torch tensor)
        stays a view. Otherwise one copy, made now. `device` None: the producer's device (array API), i.e. for host
        memory the default device when it uses host memory in place, else a device that does, else the default
        device (a copy). `copy` True/False forces or forbids a copy (BufferError when one is needed, as for memory
        the producer marked read-only). Unsupported dtypes (complex, ...) and device types raise BufferError naming
        them. Lazy reads shared memory when a kernel runs, so a write on the other side shows in what is computed
        after it."""
        from lazy import dlpack

        lb = dlpack.import_dlpack(x, device, copy)
        return cls(lb, device=lb.device)

    def data(self) -> memoryview:
        """The values as a memoryview of a host copy (`memoryview(self.numpy())`)."""
        return memoryview(self.numpy())  # type: ignore[arg-type]

    def item(self) -> ConstType:
        """The value of a one-element tensor as a Python number; ValueError for any other number of elements."""
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, not shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The values as nested Python lists (a plain number for a 0-d tensor), copied to the host."""
        return self.numpy().tolist()

"""The array operations that the ONNX handlers written once for both places call: `HOST` on numpy arrays (shape
arithmetic: `Shape -> Gather -> Concat -> Reshape` chains run here, never as kernels) and `DEVICE` on lazy Tensors.
Operators (`+ - * < == ...`), `.shape`, `.reshape` and basic slicing are the same on both and are used directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from lazy.dtype import DType, dtypes
from lazy.onnx.elem_types import host_dtype
from lazy.tensor import Tensor


class ArrayOps(Protocol):
    """What differs between numpy arrays and Tensors, under one name per operation."""

    is_host: bool

    def dtype_of(self, x: Any) -> DType: ...
    def cast(self, x: Any, dtype: DType) -> Any: ...
    def permute(self, x: Any, perm: Sequence[int]) -> Any: ...
    def expand(self, x: Any, shape: tuple[int, ...]) -> Any: ...
    def concat(self, xs: Sequence[Any], axis: int) -> Any: ...
    def take(self, x: Any, indices: Any, axis: int) -> Any: ...
    def where(self, cond: Any, a: Any, b: Any) -> Any: ...
    def div(self, a: Any, b: Any) -> Any: ...
    def mod(self, a: Any, b: Any, fmod: bool) -> Any: ...
    def maximum(self, a: Any, b: Any) -> Any: ...
    def minimum(self, a: Any, b: Any) -> Any: ...
    def unary(self, name: str, x: Any) -> Any: ...
    def logical(self, name: str, a: Any, b: Any) -> Any: ...
    def reduce(self, name: str, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any: ...
    def tile(self, x: Any, repeats: Sequence[int]) -> Any: ...
    def triangle(self, x: Any, k: int, upper: bool) -> Any: ...


class HostOps:
    """numpy, with ONNX's integer rules where numpy's differ (Div truncates toward zero)."""

    is_host = True

    def dtype_of(self, x: Any) -> DType:
        return dtypes.from_np(x.dtype)

    def cast(self, x: Any, dtype: DType) -> Any:
        target = host_dtype(dtype)
        if target is None:  # bfloat16 and fp8 exist only on the device (`_to_fp8` hands over a Tensor already)
            return (x if isinstance(x, Tensor) else Tensor(x)).cast(dtype)
        return x.astype(target)

    def permute(self, x: Any, perm: Sequence[int]) -> Any:
        import numpy as np

        return np.transpose(x, perm)

    def expand(self, x: Any, shape: tuple[int, ...]) -> Any:
        import numpy as np

        return np.broadcast_to(x, shape)

    def concat(self, xs: Sequence[Any], axis: int) -> Any:
        import numpy as np

        return np.concatenate(xs, axis=axis)

    def take(self, x: Any, indices: Any, axis: int) -> Any:
        import numpy as np

        return np.take(x, indices, axis=axis)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        import numpy as np

        return np.where(cond, a, b)

    def div(self, a: Any, b: Any) -> Any:
        import numpy as np

        if a.dtype.kind not in "iu":
            return a / b
        quotient = np.floor_divide(a, b)
        return quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))  # floor -> toward zero

    def mod(self, a: Any, b: Any, fmod: bool) -> Any:
        import numpy as np

        return np.fmod(a, b) if fmod else np.mod(a, b)

    def maximum(self, a: Any, b: Any) -> Any:
        import numpy as np

        return np.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        import numpy as np

        return np.minimum(a, b)

    def unary(self, name: str, x: Any) -> Any:
        import numpy as np

        functions: dict[str, Any] = {"neg": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor,
                                     "ceil": np.ceil, "sqrt": np.sqrt, "not": np.logical_not}  # fmt: skip
        return functions[name](x)

    def logical(self, name: str, a: Any, b: Any) -> Any:
        import numpy as np

        functions: dict[str, Any] = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}
        return functions[name](a, b)

    def reduce(self, name: str, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
        import numpy as np

        functions: dict[str, Any] = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
        return functions[name](x, axis=axes, keepdims=keepdims).astype(x.dtype)

    def tile(self, x: Any, repeats: Sequence[int]) -> Any:
        import numpy as np

        return np.tile(x, tuple(repeats))

    def triangle(self, x: Any, k: int, upper: bool) -> Any:
        import numpy as np

        return np.triu(x, k) if upper else np.tril(x, k)


class DeviceOps:
    """lazy Tensors."""

    is_host = False

    def dtype_of(self, x: Any) -> DType:
        return x.dtype

    def cast(self, x: Any, dtype: DType) -> Any:
        return x.cast(dtype)

    def permute(self, x: Any, perm: Sequence[int]) -> Any:
        return x.permute(tuple(perm))

    def expand(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape((1,) * (len(shape) - x.ndim) + x.shape).expand(shape)

    def concat(self, xs: Sequence[Any], axis: int) -> Any:
        return xs[0].cat(*xs[1:], dim=axis)

    def take(self, x: Any, indices: Any, axis: int) -> Any:
        """ONNX Gather: x.shape[:axis] + indices.shape + x.shape[axis+1:]. Indices known on the host and forming a
        single index or a step-1 run are a view (no kernel); others index as Tensor indexing does (negative ones
        count from the end, host ones are checked on the host)."""
        lead = (slice(None),) * axis
        if not isinstance(indices, Tensor):
            import numpy as np

            n = int(x.shape[axis])
            if indices.size and not (-n <= indices.min() and indices.max() < n):  # (as onnxruntime refuses them)
                bad = indices[(indices < -n) | (indices >= n)].flat[0]
                raise IndexError(f"Gather: index {bad} is out of range for axis {axis} of size {n}")
            flat = np.where(indices < 0, indices + n, indices).reshape(-1)
            if indices.ndim == 0:
                return x[lead + (int(flat[0]),)]
            if flat.size and (np.diff(flat) == 1).all():
                view = x[lead + (slice(int(flat[0]), int(flat[-1]) + 1),)]
                return view.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1 :])
        return x[lead + (indices,)]

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return cond.where(a, b)

    def div(self, a: Any, b: Any) -> Any:
        return a.idiv(b) if dtypes.is_int(a.dtype) else a / b

    def mod(self, a: Any, b: Any, fmod: bool) -> Any:
        return a.fmod(b) if fmod else a.mod(b)

    def maximum(self, a: Any, b: Any) -> Any:
        return a.maximum(b)

    def minimum(self, a: Any, b: Any) -> Any:
        return a.minimum(b)

    def unary(self, name: str, x: Any) -> Any:
        methods = {"neg": "neg", "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil", "sqrt": "sqrt",
                   "not": "logical_not"}  # fmt: skip
        out = getattr(x, methods[name])()
        if name == "sign" and dtypes.is_float(x.dtype):  # ONNX's (and numpy's) Sign(NaN) is NaN; PyTorch's is 0
            out = x.isnan().where(x, out)
        return out

    def logical(self, name: str, a: Any, b: Any) -> Any:
        a, b = a.cast(dtypes.bool), b.cast(dtypes.bool)
        return a & b if name == "and" else a | b if name == "or" else a ^ b

    def reduce(self, name: str, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
        if not axes:
            return x
        return getattr(x, name)(axes, keepdim=keepdims)

    def tile(self, x: Any, repeats: Sequence[int]) -> Any:
        return x.repeat(tuple(repeats))

    def triangle(self, x: Any, k: int, upper: bool) -> Any:
        return x.triu(k) if upper else x.tril(k)


HOST: ArrayOps = HostOps()
DEVICE: ArrayOps = DeviceOps()

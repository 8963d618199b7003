"""ONNX element types as lazy dtypes, and ONNX tensors (initializers, constants) as numpy arrays or lazy Tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazy.dtype import HOST_FLOAT32, DType, dtypes, to_np_dtype
from lazy.tensor import Tensor

if TYPE_CHECKING:
    import numpy as np

# TensorProto.DataType names -> lazy dtypes; every other element type (STRING, complex, the FNUZ float8 variants,
# 4-bit and 2-bit types, FLOAT8E8M0) has no lazy dtype and is refused by name at load
ELEM_TYPES: dict[str, DType] = {
    "FLOAT": dtypes.float32,
    "DOUBLE": dtypes.float64,
    "FLOAT16": dtypes.float16,
    "BFLOAT16": dtypes.bfloat16,
    "FLOAT8E4M3FN": dtypes.fp8e4m3,
    "FLOAT8E5M2": dtypes.fp8e5m2,
    "INT8": dtypes.int8,
    "INT16": dtypes.int16,
    "INT32": dtypes.int32,
    "INT64": dtypes.int64,
    "UINT8": dtypes.uint8,
    "UINT16": dtypes.uint16,
    "UINT32": dtypes.uint32,
    "UINT64": dtypes.uint64,
    "BOOL": dtypes.bool,
}


def elem_type_name(elem_type: int) -> str:
    """The TensorProto.DataType name of an element type number ("FLOAT", "STRING", ...)."""
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"element type {elem_type}"


def lazy_dtype(elem_type: int) -> DType | None:
    """The lazy dtype of an ONNX element type, None when lazy has none."""
    return ELEM_TYPES.get(elem_type_name(elem_type))


def host_dtype(dtype: DType) -> np.dtype | None:
    """The numpy dtype that holds `dtype`'s values on the host, None for bfloat16 and fp8 (numpy has neither: such
    values stay on the device)."""
    return None if dtype in HOST_FLOAT32 else to_np_dtype(dtype)


def to_device(array: np.ndarray, dtype: DType, device: str) -> Tensor:
    """A numpy array as a realized Tensor of `dtype` on `device`. bfloat16 and fp8 arrays (ml_dtypes, as
    `onnx.numpy_helper` gives them) move as their bits and are bitcast, so no value is rounded on the way."""
    import numpy as np

    if dtype in HOST_FLOAT32:
        bits = np.ascontiguousarray(array).view(to_np_dtype(dtype)).reshape(array.shape)
        return Tensor(bits, device=device).bitcast(dtype)
    # (ascontiguousarray makes a 0-d array 1-d: the shape is put back)
    return Tensor(np.ascontiguousarray(array, dtype=to_np_dtype(dtype)).reshape(array.shape), device=device)


def tensor_proto_array(proto: Any) -> np.ndarray:
    """The values of a TensorProto (its data stored in the proto) as a numpy array."""
    from onnx import numpy_helper

    return numpy_helper.to_array(proto)

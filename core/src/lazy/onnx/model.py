"""`OnnxModel`: a checked ONNX model (see `loader`) with its initializers made device Tensors once and its constant
shape arithmetic folded; calling it runs the graph on lazy Tensors. `OPS`: every operator's handler by name."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from lazy.dtype import DType, dtypes, is_numpy, to_np_dtype
from lazy.helpers import ShapeError, prod
from lazy.onnx.backends import DEVICE, HOST
from lazy.onnx.elem_types import host_dtype, lazy_dtype, tensor_proto_array, to_device
from lazy.onnx.ops_math import OPS as MATH_OPS
from lazy.onnx.ops_nn import OPS as NN_OPS
from lazy.onnx.ops_shape import OPS as SHAPE_OPS
from lazy.onnx.registry import InvalidModelError, Node, OpSpec, UnsupportedModelError
from lazy.onnx.resize import OPS as RESIZE_OPS
from lazy.plugins import Device
from lazy.record import record
from lazy.tensor import Tensor

if TYPE_CHECKING:
    import numpy as np

OPS: dict[str, OpSpec] = {**MATH_OPS, **SHAPE_OPS, **NN_OPS, **RESIZE_OPS}
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(OPS))
# default-domain opsets run as they are; older models are first lifted to MIN_OPSET by onnx.version_converter.
# Every operator change up to MAX_OPSET is handled (or refused by name); the versions after 21 only add dtypes.
MIN_OPSET, MAX_OPSET = 13, 25
# initializers and integer inputs up to this many elements also keep a host copy, so shape arithmetic on them stays
# on the host (a Reshape's target, Slice bounds, scalars)
HOST_COPY_LIMIT = 1024
DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxRunError(RuntimeError):
    """A node failed while the model ran; the message names it, the original error is the cause."""


@record(frozen=True)
class IOSpec:
    """A graph input or output: its name, its shape (ints, names of symbolic sizes, None for unknown sizes; None
    for an unknown rank) and its dtype."""

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: DType


@record(frozen=True)
class Step:
    """One node, ready to run: its handler, what the handler sees, and the value names it reads and writes."""

    spec: OpSpec
    node: Node
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _attribute(onnx: Any, attr: Any) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.STRING:
        return value.decode()
    if attr.type == onnx.AttributeProto.STRINGS:
        return [v.decode() for v in value]
    if attr.type == onnx.AttributeProto.TENSOR:
        return tensor_proto_array(value)
    if attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    return value


def node_context(onnx: Any, node: Any, index: int, opset: int, device: str) -> Node:
    """What a handler sees of a NodeProto: decoded attributes and the count of outputs asked for."""
    outputs = list(node.output)
    while outputs and not outputs[-1]:
        outputs.pop()
    attrs = {a.name: _attribute(onnx, a) for a in node.attribute}
    return Node(node.op_type, node.name or f"#{index}", attrs, opset, len(outputs), device)


def _external_array(init: Any, base_dir: str | None, dtype: DType) -> np.ndarray:
    """An initializer kept in a file next to the model: read (checked) straight from the file."""
    import numpy as np

    info = {e.key: e.value for e in init.external_data}
    location, name = info.get("location", ""), init.name
    if base_dir is None:
        raise ValueError(
            f"lazy.onnx: initializer {name!r} keeps its data in the file {location!r} next to the model; load the "
            "model from its path (lazy.onnx.load('model.onnx')) so the file can be found"
        )
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, location))
    if not location or os.path.commonpath([path, base]) != base:
        raise ValueError(f"lazy.onnx: initializer {name!r}: external data location {location!r} is not a file inside "
                         f"the model's directory {base}; refusing to read it")  # fmt: skip
    if not os.path.isfile(path):
        raise FileNotFoundError(f"lazy.onnx: initializer {name!r}: its data file {path} does not exist")
    storage = to_np_dtype(dtype)
    shape = tuple(int(d) for d in init.dims)
    offset, nbytes = int(info.get("offset", 0)), int(prod(shape)) * storage.itemsize
    if "length" in info and int(info["length"]) != nbytes:
        raise ValueError(f"lazy.onnx: initializer {name!r}: {info['length']} bytes in {location!r}, but {shape} of "
                         f"{dtype} needs {nbytes}")  # fmt: skip
    size = os.path.getsize(path)
    if offset < 0 or offset + nbytes > size:
        raise ValueError(f"lazy.onnx: initializer {name!r}: bytes {offset}..{offset + nbytes} are past the end of "
                         f"{path} ({size} bytes)")  # fmt: skip
    return np.fromfile(path, dtype=storage, count=int(prod(shape)), offset=offset).reshape(shape)


def default_opset(proto: Any) -> int | None:
    """The model's default-domain (ai.onnx) opset, None when it imports none."""
    return next((int(o.version) for o in proto.opset_import if o.domain in DEFAULT_DOMAINS), None)


def _io_spec(value: Any) -> IOSpec:
    tensor_type = value.type.tensor_type
    dtype = lazy_dtype(tensor_type.elem_type)
    assert dtype is not None, "checked at load"
    shape = None
    if tensor_type.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in tensor_type.shape.dim)
    return IOSpec(value.name, shape, dtype)


class Values:
    """The graph's values while it runs, each on the host (numpy), on the device (Tensor) or both; a conversion is
    kept. A run's values sit in front of the model's constants (initializers, folded values), whose conversions
    are kept for every later run."""

    def __init__(self, device: str, parent: Values | None = None):
        self.device, self.parent = device, parent
        self.host: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}

    def owner(self, name: str) -> Values:
        if name in self.host or name in self.tensors:
            return self
        if self.parent is not None:
            return self.parent.owner(name)
        raise KeyError(name)

    def has(self, name: str) -> bool:
        try:
            self.owner(name)
        except KeyError:
            return False
        return True

    def on_host(self, name: str) -> bool:
        return name in self.owner(name).host

    def array(self, name: str) -> np.ndarray:
        """The value on the host: a device value is copied out (a sync; shapes that depend on computed data)."""
        owner = self.owner(name)
        if name not in owner.host:
            owner.host[name] = owner.tensors[name].numpy()
        return owner.host[name]

    def tensor(self, name: str) -> Tensor:
        owner = self.owner(name)
        if name not in owner.tensors:
            array = owner.host[name]
            owner.tensors[name] = to_device(array, dtypes.from_np(array.dtype), self.device)
        return owner.tensors[name]

    def any(self, name: str) -> Any:
        owner = self.owner(name)
        return owner.host[name] if name in owner.host else owner.tensors[name]

    def set(self, name: str, value: Any) -> None:
        if isinstance(value, Tensor):
            # (a host value cast to a dtype numpy lacks, bfloat16 or fp8, becomes a Tensor on the default device)
            self.tensors[name] = value if value.device == self.device else value.to(self.device)
        else:
            import numpy as np

            self.host[name] = np.asarray(value)


class OnnxModel:
    """A loaded ONNX model (see `lazy.onnx.load`). Call it with the graph inputs, positionally in graph order or by
    name (numpy arrays, lazy Tensors, numbers or lists), for its outputs by name as lazy Tensors on `device` (not yet
    realized: `Tensor.realize(*out.values())` computes them in one schedule). `inputs` and `outputs` describe them."""

    def __init__(self, proto: Any, base_dir: str | None, device: str | None = None):
        import onnx

        self.device = Device.canonicalize(device) if device is not None else Device.DEFAULT
        self.opset = default_opset(proto) or MAX_OPSET
        graph = proto.graph
        self._types: dict[str, DType] = {}  # every value's dtype the model declares or shape inference found
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.HasField("tensor_type") and (dtype := lazy_dtype(value.type.tensor_type.elem_type)):
                self._types[value.name] = dtype
        self.constants = Values(self.device)
        for init in graph.initializer:
            dtype = lazy_dtype(init.data_type)
            assert dtype is not None, "checked at load"
            external = init.data_location == onnx.TensorProto.EXTERNAL
            array = _external_array(init, base_dir, dtype) if external else tensor_proto_array(init)
            self.constants.tensors[init.name] = to_device(array, dtype, self.device)
            if array.size <= HOST_COPY_LIMIT and host_dtype(dtype) is not None:
                self.constants.host[init.name] = array
            self._types[init.name] = dtype
        # inputs named like an initializer (IR version < 4) have it as their default value
        defaults = {init.name for init in graph.initializer}
        self.inputs: tuple[IOSpec, ...] = tuple(_io_spec(v) for v in graph.input if v.name not in defaults)
        self.outputs: tuple[IOSpec, ...] = tuple(_io_spec(v) for v in graph.output)
        self._overridable = {v.name: _io_spec(v) for v in graph.input if v.name in defaults}
        steps = [
            Step(
                OPS[node.op_type],
                node_context(onnx, node, i, self.opset, self.device),
                tuple(node.input),
                tuple(node.output),
            )  # fmt: skip
            for i, node in enumerate(graph.node)
        ]
        self._steps = self._fold_constants(steps)

    def __repr__(self) -> str:
        def shown(specs: tuple[IOSpec, ...]) -> str:
            return ", ".join(
                f"{s.name}: {s.dtype.name}{list(s.shape) if s.shape is not None else '[?]'}" for s in specs
            )

        return (f"<OnnxModel opset {self.opset} on {self.device}, {len(self._steps)} nodes to run; inputs "
                f"{shown(self.inputs)}; outputs {shown(self.outputs)}>")  # fmt: skip

    def _fold_constants(self, steps: list[Step]) -> list[Step]:
        """Runs, once, the host-capable nodes whose inputs are all constants (shape arithmetic on initializers and
        Constant nodes); returns the steps left for every call."""
        left = []
        for step in steps:
            constant = all(
                not name or (name not in self._overridable and self.constants.has(name)
                             and (i in step.spec.static or i in step.spec.meta or self.constants.on_host(name)))
                for i, name in enumerate(step.inputs)
            )  # fmt: skip
            if step.spec.host and constant:
                self._run(step, self.constants)
            else:
                left.append(step)
        return left

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        values = Values(self.device, parent=self.constants)
        for name, (tensor, array) in self._feeds(args, kwargs).items():
            values.tensors[name] = tensor
            if array is not None:
                values.host[name] = array
        for step in self._steps:
            self._run(step, values)
        return {spec.name: values.tensor(spec.name) for spec in self.outputs}

    def _run(self, step: Step, values: Values) -> None:
        spec = step.spec
        try:
            on_host = spec.host and all(not name or i in spec.static or i in spec.meta or values.on_host(name)
                                        for i, name in enumerate(step.inputs))  # fmt: skip
            args = [self._argument(spec, i, name, values, on_host) for i, name in enumerate(step.inputs)]
        except KeyError as e:
            raise OnnxRunError(
                f"lazy.onnx: {step.node.label} reads the value {e.args[0]!r}, which no earlier node, input or "
                "initializer gives (the graph is not in topological order)"
            ) from None
        try:
            if on_host:
                import numpy as np

                with np.errstate(all="ignore"):  # (ONNX's float rules: NaN and inf, no warnings)
                    result = spec.run(step.node, HOST, *args)
            else:
                result = spec.run(step.node, DEVICE, *args)
        except (UnsupportedModelError, InvalidModelError, OnnxRunError):  # (these name the node already)
            raise
        except Exception as e:
            shapes = ", ".join("None" if a is None else str(tuple(a.shape)) for a in args)
            raise OnnxRunError(f"lazy.onnx: {step.node.label} failed on inputs of shapes ({shapes}): "
                               f"{type(e).__name__}: {e}") from e  # fmt: skip
        results = result if isinstance(result, tuple) else (result,)
        for name, value in zip(step.outputs, results):
            if name:
                values.set(name, self._typed(name, value))

    @staticmethod
    def _argument(spec: OpSpec, i: int, name: str, values: Values, on_host: bool) -> Any:
        if not name:
            return None
        if i in spec.static:
            return values.array(name)
        if i in spec.meta or i in spec.either:
            return values.any(name)
        return values.array(name) if on_host else values.tensor(name)

    def _typed(self, name: str, value: Any) -> Any:
        """`value` in the dtype the model declares for `name` (lazy's results differ in places: argmax gives int32,
        sums of small integers widen), when it declares one."""
        import numpy as np

        expected = self._types.get(name)
        if expected is None:
            return value
        if isinstance(value, Tensor):
            return value if value.dtype == expected else value.cast(expected)
        array, target = np.asarray(value), host_dtype(expected)
        if target is None:
            return Tensor(array, device=self.device).cast(expected)
        return array if array.dtype == target else array.astype(target)

    def _feeds(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, tuple[Tensor, np.ndarray | None]]:
        names = [spec.name for spec in self.inputs]
        if len(args) > len(names):
            raise TypeError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(args)} positional")
        given = dict(zip(names, args))
        specs = {**{spec.name: spec for spec in self.inputs}, **self._overridable}
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"input {name!r} is given twice, by position and by name")
            if name not in specs:
                raise TypeError(f"{name!r} is not an input of the model; its inputs are {', '.join(names)}")
            given[name] = value
        missing = [name for name in names if name not in given]
        if missing:
            raise TypeError(f"missing model input{'s' * (len(missing) > 1)} {', '.join(missing)} (the model's inputs "
                            f"are {', '.join(names)})")  # fmt: skip
        sizes: dict[str, tuple[int, str]] = {}
        return {name: self._feed(specs[name], value, sizes) for name, value in given.items()}

    def _feed(self, spec: IOSpec, value: Any, sizes: dict[str, tuple[int, str]]) -> tuple[Tensor, np.ndarray | None]:
        """One input as a device Tensor (and its host copy when it came from the host and is small), its dtype and
        shape checked against the model's declaration; `sizes` holds what each named size was bound to."""
        import numpy as np

        array = None
        if isinstance(value, Tensor):
            tensor = value if value.device == self.device else value.to(self.device)
        else:
            if not is_numpy(value, "ndarray", "generic"):  # numbers and lists take the declared dtype
                value = np.asarray(value, dtype=host_dtype(spec.dtype) or np.float32)
            array = np.asarray(value)
            if host_dtype(spec.dtype) is None and array.dtype.kind == "f":  # bfloat16 and fp8 arrive as floats
                tensor, array = Tensor(array, device=self.device).cast(spec.dtype), None
            else:
                try:
                    tensor = Tensor(array, device=self.device)
                except TypeError as e:
                    raise TypeError(f"input {spec.name!r}: {e}") from None
        if tensor.dtype != spec.dtype:
            raise TypeError(f"input {spec.name!r} is {tensor.dtype.name}, but the model declares {spec.dtype.name}; "
                            f"convert it first (numpy: x.astype(...), lazy: x.cast('{spec.dtype.name}'))")  # fmt: skip
        self._check_shape(spec, tuple(int(d) for d in tensor.shape), sizes)
        shape_like = array is not None and array.dtype.kind in "biu" and array.size <= HOST_COPY_LIMIT
        return tensor, array if shape_like else None

    @staticmethod
    def _check_shape(spec: IOSpec, shape: tuple[int, ...], sizes: dict[str, tuple[int, str]]) -> None:
        if spec.shape is None:
            return
        declared = "(" + ", ".join("?" if d is None else str(d) for d in spec.shape) + ")"
        if len(shape) != len(spec.shape):
            raise ShapeError(f"input {spec.name!r} has shape {shape}, but the model declares {declared}")
        for got, want in zip(shape, spec.shape):
            if isinstance(want, int) and got != want:
                raise ShapeError(f"input {spec.name!r} has shape {shape}, but the model declares {declared}")
            if isinstance(want, str):
                bound, where = sizes.setdefault(want, (got, spec.name))
                if bound != got:
                    raise ShapeError(f"input {spec.name!r} has shape {shape}: its size {want!r} is {got}, but it is "
                                     f"{bound} in input {where!r}")  # fmt: skip

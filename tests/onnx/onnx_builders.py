"""Small ONNX models built with `onnx.helper` for the lazy.onnx tests, and the comparison with onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import lazy.onnx

FLOAT = TensorProto.FLOAT


def value(name: str, elem_type: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def graph_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
                initializers: dict[str, np.ndarray] | None = None, opset: int = 18) -> onnx.ModelProto:  # fmt: skip
    """A checked model of `nodes` at default-domain `opset` (IR version 8, which every opset here and onnxruntime
    accept)."""
    inits = [numpy_helper.from_array(a, name) for name, a in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "test", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def node_model(op: str, feeds: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 18,
               constants: dict[str, np.ndarray] | None = None, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """One `op` node reading the graph inputs named in `feeds` (in order; an empty name is an omitted optional
    input) and the initializers in `constants`, writing outputs y0, y1, ... of types found by shape inference."""
    names = list(feeds) if constants is None else [*feeds, *constants]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_outputs)], **attrs)
    inputs = [value(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items() if n]
    outputs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_outputs)]
    graph = helper.make_graph([node], "test", inputs, outputs,
                              [numpy_helper.from_array(a, n) for n, a in (constants or {}).items()])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info}
    del model.graph.output[:]
    first = helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    # (an output shape inference does not type, as for GroupNormalization-21: the first input's type, any shape)
    model.graph.output.extend(
        inferred.get(f"y{i}", value(f"y{i}", first, [None] * next(iter(feeds.values())).ndim)) for i in range(n_outputs)
    )
    onnx.checker.check_model(model)
    return model


def onnxruntime_outputs(model: onnx.ModelProto | bytes | str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def assert_matches_onnxruntime(model: onnx.ModelProto | bytes | str, feeds: dict[str, np.ndarray],
                               rtol: float = 1e-5, atol: float = 1e-5,
                               device: str | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """lazy.onnx's outputs on `device` (default: the default device) equal onnxruntime's (dtype, shape, values within
    float32 tolerance); returns lazy's."""
    expected = onnxruntime_outputs(model, feeds)
    got = {name: t.numpy() for name, t in lazy.onnx.load(model, device=device)(**feeds).items()}
    assert list(got) == list(expected)
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, f"{name}: dtype {got[name].dtype}, onnxruntime {want.dtype}"
        assert got[name].shape == want.shape, f"{name}: shape {got[name].shape}, onnxruntime {want.shape}"
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)
    return got


def random(*shape: int, dtype: Any = np.float32, seed: int = 0, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high), size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.uniform(low, high, size=shape).astype(dtype)

"""`load`: an ONNX model read (from a path, bytes or a ModelProto), lifted to a supported opset and checked whole:
every unsupported operator, opset, dtype and attribute value is reported at once, before anything runs."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from lazy.onnx.elem_types import elem_type_name, lazy_dtype
from lazy.onnx.model import (
    DEFAULT_DOMAINS,
    MAX_OPSET,
    MIN_OPSET,
    OPS,
    SUPPORTED_OPS,
    OnnxModel,
    default_opset,
    node_context,
)
from lazy.onnx.registry import UnsupportedModelError


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "lazy.onnx needs the onnx package: pip install 'lazy-core[onnx]' (or pip install onnx)"
        ) from None
    return onnx


def load(model: Any, device: str | None = None) -> OnnxModel:
    """An ONNX model (a path, the file's bytes or an `onnx.ModelProto`) as a callable on lazy Tensors on `device`
    (default: `Device.DEFAULT`). Everything the model uses that lazy.onnx cannot run (operators, an opset, dtypes,
    attribute values) is reported at once, before anything runs, as an `UnsupportedModelError`."""
    onnx = _import_onnx()
    proto, base_dir, origin = _read(onnx, model)
    problems: list[str] = []
    proto = _lift_opset(onnx, proto, problems)
    if proto.functions:  # model-local functions (what newer exporters emit) become plain nodes
        import onnx.inliner

        proto = onnx.inliner.inline_local_functions(proto)
    try:
        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # (inference is only a help: dtypes of intermediate values; running does not need it)
        pass
    malformed = _malformed(proto)
    problems += malformed + _unsupported_ops(onnx, proto) + _unsupported_dtypes(onnx, proto)
    if problems:
        listed = f"lazy.onnx cannot run {origin}:\n" + "\n".join(f"  - {p}" for p in problems)
        if len(problems) > len(malformed):  # (what it supports, where something was not)
            supported = ", ".join(SUPPORTED_OPS)
            listed += (
                f"\nlazy.onnx runs default-domain (ai.onnx) opsets {MIN_OPSET}-{MAX_OPSET} (older ones "
                f"lifted by onnx.version_converter) and these operators (lazy.onnx.SUPPORTED_OPS): {supported}"
            )
        raise UnsupportedModelError(listed)
    return OnnxModel(proto, base_dir, device)


def _read(onnx: Any, model: Any) -> tuple[Any, str | None, str]:
    """(ModelProto, the directory external data is relative to, how to name the model in messages)."""
    if isinstance(model, onnx.ModelProto):
        return model, None, "the model"
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(model)), None, "the model"
        except Exception as e:
            raise ValueError(f"lazy.onnx: the bytes given are not an ONNX model ({e})") from e
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"lazy.onnx: no model file at {path}")
        try:  # external data is read later, checked, straight into device Tensors
            proto = onnx.load(path, load_external_data=False)
        except Exception as e:
            raise ValueError(f"lazy.onnx: {path} is not an ONNX model ({e})") from e
        return proto, os.path.dirname(os.path.abspath(path)), path
    raise TypeError(f"lazy.onnx.load takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def _lift_opset(onnx: Any, proto: Any, problems: list[str]) -> Any:
    """The model at an opset lazy.onnx runs: newer than MAX_OPSET is refused, older than MIN_OPSET converted."""
    opset = default_opset(proto)
    if opset is None or MIN_OPSET <= opset <= MAX_OPSET:
        return proto
    if opset > MAX_OPSET:
        problems.append(f"opset {opset} is newer than lazy.onnx supports ({MIN_OPSET}-{MAX_OPSET}); export the model "
                        f"at opset {MAX_OPSET} or lower")  # fmt: skip
        return proto
    import onnx.version_converter

    declared = {v.name for v in proto.graph.input}
    if proto.ir_version < 4 and any(init.name not in declared for init in proto.graph.initializer):
        # before IR version 4 every initializer had to be a graph input too; the converter insists on it
        proto = type(proto).FromString(proto.SerializeToString())
        for init in proto.graph.initializer:
            if init.name not in declared:
                proto.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    if opset >= 5 and any(node.op_type == "Hardmax" for node in proto.graph.node):
        proto = _hardmax_as_2d(onnx, proto)
    try:
        lifted = onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as e:
        problems.append(f"opset {opset} is older than {MIN_OPSET} and onnx.version_converter could not lift it: {e}")
        return proto
    if opset == 10:  # Resize-10 interpolates "asymmetric" (x_in = x_out / scale); the converter leaves the attribute
        # out, and opset 13's default is half_pixel. (Its nearest rounding, onnxruntime's "simple", is not set here)
        for node in lifted.graph.node:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            if node.op_type == "Resize" and attrs.get("mode", b"nearest") == b"linear" and \
                    "coordinate_transformation_mode" not in attrs:  # fmt: skip
                node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
    return lifted


def _hardmax_as_2d(onnx: Any, proto: Any) -> Any:
    """Before opset 13, Hardmax(axis=a) flattens the input to 2-D at a and picks the largest of each row; the version
    converter keeps the node and so gives it opset 13's meaning (along axis a alone). Each one becomes Flatten(a),
    Hardmax(axis=1) and a Reshape back to the input's shape, which the converter lifts as they are."""
    proto = type(proto).FromString(proto.SerializeToString())
    nodes = []
    for i, node in enumerate(proto.graph.node):
        if node.op_type != "Hardmax":
            nodes.append(node)
            continue
        axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
        x, y, tag = node.input[0], node.output[0], f"_lazy_hardmax{i}"
        nodes += [
            onnx.helper.make_node("Shape", [x], [f"{tag}_shape"]),
            onnx.helper.make_node("Flatten", [x], [f"{tag}_flat"], axis=axis),
            onnx.helper.make_node("Hardmax", [f"{tag}_flat"], [f"{tag}_max"], axis=1),
            onnx.helper.make_node("Reshape", [f"{tag}_max", f"{tag}_shape"], [y], name=node.name),
        ]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return proto


def _op_key(node: Any) -> str:
    return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"


def _names(names: list[str], limit: int = 5, quote: bool = True) -> str:
    shown = ", ".join(repr(n) if quote else n for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _malformed(proto: Any) -> list[str]:
    """What breaks the graph's own rules (onnxruntime refuses these too): a value made twice (by two nodes, or by a
    node and as an input or initializer), a graph output nothing makes, an input of undefined element type."""
    graph, problems = proto.graph, []
    made: dict[str, str] = {}
    for v in graph.input:
        made.setdefault(v.name, f"graph input {v.name!r}")
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == 0:
            problems.append(f"graph input {v.name!r} has no element type (UNDEFINED)")
    for init in graph.initializer:
        made.setdefault(init.name, f"initializer {init.name!r}")
    for i, node in enumerate(graph.node):
        for out in node.output:
            label = f"{node.op_type} node {node.name or f'#{i}'!r}"
            if out and out in made and not made[out].startswith(("graph input", "initializer")):
                problems.append(f"{label} makes {out!r}, which {made[out]} makes too (each value is made once)")
            elif out and out in made and made[out].startswith("graph input"):
                problems.append(f"{label} makes {out!r}, which is also a graph input")
            elif out:
                made[out] = label
    for v in graph.output:
        if v.name not in made:
            problems.append(f"graph output {v.name!r} is made by no node, input or initializer")
    return problems


def _unsupported_ops(onnx: Any, proto: Any) -> list[str]:
    """Every operator without a handler (with its count and node names), every node whose attribute values a
    handler refuses, and operators that do not exist at the model's opset."""
    opset = default_opset(proto) or MAX_OPSET
    missing: dict[str, list[str]] = defaultdict(list)
    problems: list[str] = []
    for i, node in enumerate(proto.graph.node):
        key, name = _op_key(node), node.name or f"#{i}"
        spec = OPS.get(key)
        if spec is None:
            missing[key].append(name)
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:
            problems.append(f"{key} node {name!r}: {key} does not exist at opset {opset}")
            continue
        given = {a.name for a in node.attribute}
        if absent := [a for a, spec_attr in schema.attributes.items() if spec_attr.required and a not in given]:
            problems.append(f"{key} node {name!r}: the required attribute{'s' * (len(absent) > 1)} "
                            f"{', '.join(absent)} {'are' if len(absent) > 1 else 'is'} missing")  # fmt: skip
            continue
        try:
            reason = spec.check(node_context(onnx, node, i, opset, "")) if spec.check else None
        except Exception as e:  # (an attribute onnx cannot decode)
            reason = f"its attributes cannot be read ({type(e).__name__}: {e})"
        if reason:
            problems.append(f"{key} node {name!r}: {reason}")
    if missing:
        listed = "; ".join(f"{op} ({len(ns)} node{'s' * (len(ns) > 1)}: {_names(ns)})" for op, ns in missing.items())
        problems.insert(0, f"unsupported operators: {listed}")
    return problems


def _unsupported_dtypes(onnx: Any, proto: Any) -> list[str]:
    """Every element type without a lazy dtype, with the values, initializers and attributes that have it."""
    graph = proto.graph
    found: dict[str, list[str]] = defaultdict(list)

    def note(elem_type: int, what: str) -> None:
        if elem_type and lazy_dtype(elem_type) is None:
            found[elem_type_name(elem_type)].append(what)

    for kind, values in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for v in values:
            if v.type.HasField("tensor_type"):
                note(v.type.tensor_type.elem_type, f"{kind} {v.name!r}")
            else:
                found[f"{v.type.WhichOneof('value')} (only tensors)"].append(f"{kind} {v.name!r}")
    for init in graph.initializer:
        note(init.data_type, f"initializer {init.name!r}")
    for node in graph.node:
        for attr in node.attribute:
            what = f"{node.op_type} node {node.name!r} attribute {attr.name!r}"
            if attr.type == onnx.AttributeProto.TENSOR:
                note(attr.t.data_type, what)
            elif attr.name == "to" and attr.type == onnx.AttributeProto.INT:
                note(attr.i, what)
    return [f"unsupported dtype {t}: {_names(whats, quote=False)}" for t, whats in found.items()]

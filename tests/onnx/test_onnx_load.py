"""lazy.onnx.load and calling a model: what it accepts (paths, bytes, ModelProto, external data, local functions),
what it refuses and how (every unsupported operator, opset, dtype and attribute value at once, before anything
runs), and the checks on a call's inputs."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx.helper", reason="the onnx package is not installed: pip install 'lazy-core[onnx]'")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install 'lazy-core[onnx-test]'")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_builders import FLOAT, assert_matches_onnxruntime, graph_model, value  # noqa: E402

import lazy.onnx  # noqa: E402
from lazy import Tensor, dtypes  # noqa: E402
from lazy.helpers import ShapeError  # noqa: E402

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10


def linear_model(opset: int = 18) -> onnx.ModelProto:
    """y = x @ W + 1 with a batch size named "n"."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "one"], ["y"])]
    return graph_model(nodes, [value("x", FLOAT, ["n", 3])], [value("y", FLOAT, ["n", 4])],
                       {"W": W, "one": np.ones(1, np.float32)}, opset)  # fmt: skip


def test_load_from_path_bytes_and_model_proto(tmp_path: pathlib.Path) -> None:
    model = linear_model()
    path = tmp_path / "linear.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    for source in (model, model.SerializeToString(), str(path), path):
        loaded = lazy.onnx.load(source)
        np.testing.assert_allclose(loaded(x)["y"].numpy(), x @ W + 1, rtol=1e-6)
        np.testing.assert_allclose(loaded(x=Tensor(x))["y"].numpy(), x @ W + 1, rtol=1e-6)
    assert loaded.inputs == (lazy.onnx.IOSpec("x", ("n", 3), dtypes.float32),)
    assert loaded.outputs == (lazy.onnx.IOSpec("y", ("n", 4), dtypes.float32),)
    assert "x: float['n', 3]" in repr(loaded)


def test_initializers_are_device_tensors_made_once() -> None:
    model = lazy.onnx.load(linear_model(), device="PYTHON")
    weight = model.constants.tensors["W"]
    assert weight.device == "PYTHON" and weight.lazydata.realized is not None
    x = np.ones((1, 3), np.float32)
    first, second = model(x)["y"], model(x)["y"]
    assert first.device == "PYTHON"
    np.testing.assert_allclose(second.numpy(), first.numpy())
    assert model.constants.tensors["W"] is weight


def test_constant_shape_arithmetic_is_folded_at_load() -> None:
    """Reshape(x, Concat(Constant, Unsqueeze(Constant))) has a constant target: only the Reshape is left to run."""
    nodes = [
        helper.make_node("Constant", [], ["a"], value_ints=[2]),
        helper.make_node("Constant", [], ["b"], value_int=-1),
        helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
        helper.make_node("Concat", ["a", "b1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    proto = graph_model(nodes, [value("x", FLOAT, [2, 3, 2])], [value("y", FLOAT, [2, 6])],
                        {"zero": np.array([0], np.int64)})  # fmt: skip
    model = lazy.onnx.load(proto)
    assert "1 nodes to run" in repr(model)
    assert_matches_onnxruntime(proto, {"x": np.arange(12, dtype=np.float32).reshape(2, 3, 2)})


def test_shape_computed_on_the_device_is_read_back() -> None:
    """A Reshape whose target comes from device data (not shape arithmetic): read back once, then used."""
    nodes = [helper.make_node("Cast", ["s"], ["si"], to=TensorProto.INT64), helper.make_node("Reshape", ["x", "si"],
                                                                                             ["y"])]  # fmt: skip
    proto = graph_model(nodes, [value("x", FLOAT, [6]), value("s", FLOAT, [2])], [value("y", FLOAT, ["a", "b"])])
    feeds = {"x": np.arange(6, dtype=np.float32), "s": np.array([3, -1], np.float32)}
    assert_matches_onnxruntime(proto, feeds)


def test_model_local_functions_are_inlined() -> None:
    double = helper.make_function("local", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                  [helper.make_opsetid("", 18)])  # fmt: skip
    graph = helper.make_graph([helper.make_node("Double", ["x"], ["y"], domain="local")], "g",
                              [value("x", FLOAT, [3])], [value("y", FLOAT, [3])])  # fmt: skip
    proto = helper.make_model(graph, functions=[double], ir_version=8,
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)])  # fmt: skip
    assert_matches_onnxruntime(proto, {"x": np.array([1.0, -2.0, 3.5], np.float32)})


def test_external_data_next_to_the_model(tmp_path: pathlib.Path) -> None:
    proto = linear_model()
    path = tmp_path / "model.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)  # fmt: skip
    assert (tmp_path / "weights.bin").is_file()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(lazy.onnx.load(path)(x)["y"].numpy(), x @ W + 1, rtol=1e-6)

    stored = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ValueError, match="keeps its data in the file 'weights.bin'.*load the model from its path"):
        lazy.onnx.load(stored.SerializeToString())
    (tmp_path / "weights.bin").write_bytes((tmp_path / "weights.bin").read_bytes()[:20])
    with pytest.raises(ValueError, match="past the end of"):
        lazy.onnx.load(path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(FileNotFoundError, match="its data file .*weights.bin does not exist"):
        lazy.onnx.load(path)


def test_external_data_outside_the_model_directory_is_refused(tmp_path: pathlib.Path) -> None:
    proto = linear_model()
    tensor = next(t for t in proto.graph.initializer if t.name == "W")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    onnx.external_data_helper.set_external_data(tensor, location="../secret.bin")
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match="'../secret.bin' is not a file inside the model's directory"):
        lazy.onnx.load(path)


def test_unsupported_operators_are_all_listed_before_anything_runs() -> None:
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz1"], name="first_nonzero"),
        helper.make_node("NonZero", ["x"], ["nz2"], name="second_nonzero"),
        helper.make_node("FusedMatMul", ["x", "x"], ["f"], name="fused", domain="com.microsoft"),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [value("x", FLOAT, [2, 2])], [value("y", FLOAT, [2, 2])])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    proto = helper.make_model(graph, ir_version=8, opset_imports=opsets)
    with pytest.raises(lazy.onnx.UnsupportedModelError) as info:
        lazy.onnx.load(proto)
    message = str(info.value)
    assert "NonZero (2 nodes: 'first_nonzero', 'second_nonzero')" in message
    assert "com.microsoft.FusedMatMul (1 node: 'fused')" in message
    assert "lazy.onnx.SUPPORTED_OPS" in message and "Relu" in message


def test_unsupported_opset_dtypes_and_attributes_are_named() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [value("x", FLOAT, [2])],
                              [value("y", FLOAT, [2])])  # fmt: skip
    newer = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", lazy.onnx.MAX_OPSET + 1)])
    with pytest.raises(lazy.onnx.UnsupportedModelError, match=f"opset {lazy.onnx.MAX_OPSET + 1} is newer"):
        lazy.onnx.load(newer)

    nodes = [
        helper.make_node("Identity", ["text"], ["text_out"]),
        helper.make_node("Cast", ["x"], ["odd"], to=TensorProto.FLOAT8E4M3FNUZ, name="to_fnuz"),
        helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["bn"], training_mode=1, name="bn"),
        helper.make_node("Gelu", ["x"], ["g"], name="gelu"),  # (Gelu exists from opset 20 on)
    ]
    graph = helper.make_graph(nodes, "g", [value("text", TensorProto.STRING, [1]), value("x", FLOAT, [1, 1])],
                              [value("text_out", TensorProto.STRING, [1]), value("bn", FLOAT, [1, 1])],
                              [numpy_helper.from_array(np.ones(1, np.complex64), "c"),
                               numpy_helper.from_array(np.ones(1, np.float32), "s")])  # fmt: skip
    mixed = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(lazy.onnx.UnsupportedModelError) as info:
        lazy.onnx.load(mixed)
    message = str(info.value)
    assert "unsupported dtype STRING: input 'text', output 'text_out'" in message
    assert "unsupported dtype COMPLEX64: initializer 'c'" in message
    assert "unsupported dtype FLOAT8E4M3FNUZ: value 'odd', Cast node 'to_fnuz' attribute 'to'" in message
    assert "BatchNormalization node 'bn': training_mode=1 (only inference is supported)" in message
    assert "Gelu node 'gelu': Gelu does not exist at opset 18" in message


def test_bad_model_sources() -> None:
    with pytest.raises(ValueError, match="not an ONNX model"):
        lazy.onnx.load(b"\x00not a model\xff" * 3)
    with pytest.raises(FileNotFoundError, match="no model file at"):
        lazy.onnx.load("/nonexistent/model.onnx")
    with pytest.raises(TypeError, match="takes a path, bytes or an onnx.ModelProto"):
        lazy.onnx.load(42)


def test_missing_onnx_package_says_what_to_install() -> None:
    code = "import sys; sys.modules['onnx'] = None\nimport lazy.onnx\nlazy.onnx.load(b'')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode != 0 and "pip install 'lazy-core[onnx]'" in run.stderr, run.stderr


def test_call_input_checks() -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = lazy.onnx.load(graph_model(nodes, [value("a", FLOAT, ["n", 2]), value("b", FLOAT, ["n", 2])],
                                       [value("y", FLOAT, ["n", 2])]))  # fmt: skip
    a, b = np.ones((3, 2), np.float32), np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(model(a, b=b)["y"].numpy(), a + b)
    np.testing.assert_array_equal(model(a, [[1, 2]] * 3)["y"].numpy(), a + [[1, 2]] * 3)  # lists take the dtype
    with pytest.raises(TypeError, match="missing model input b"):
        model(a)
    with pytest.raises(TypeError, match="'c' is not an input of the model; its inputs are a, b"):
        model(a, b, c=b)
    with pytest.raises(TypeError, match="input 'a' is given twice"):
        model(a, b, a=a)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        model(a, b, a)
    with pytest.raises(TypeError, match="input 'a' is double, but the model declares float"):
        model(a.astype(np.float64), b)
    with pytest.raises(ShapeError, match=r"input 'a' has shape \(3,\), but the model declares \(n, 2\)"):
        model(np.ones(3, np.float32), b)
    with pytest.raises(ShapeError, match="its size 'n' is 4, but it is 3 in input 'a'"):
        model(a, np.ones((4, 2), np.float32))


def test_failing_node_is_named() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")]
    proto = graph_model(nodes, [value("x", FLOAT, [6]), value("s", TensorProto.INT64, [2])],
                        [value("y", FLOAT, ["a", "b"])])  # fmt: skip
    model = lazy.onnx.load(proto)
    with pytest.raises(lazy.onnx.InvalidModelError, match=r"Reshape node 'bad_reshape': cannot reshape \(6,\) to"):
        model(np.ones(6, np.float32), np.array([4, -1]))
    with pytest.raises(lazy.onnx.OnnxRunError, match=r"Reshape node 'bad_reshape' failed on inputs of shapes "
                       r"\(\(6,\), \(2,\)\): ShapeError"):  # fmt: skip
        model(np.ones(6, np.float32), np.array([4, 2]))


def test_bfloat16_and_float8_initializers_keep_their_bits() -> None:
    """Initializers numpy has no type for move to the device as their bits (no value is rounded on the way)."""
    values = np.array([0.1, -2.5, 3.0, 448.0], np.float32)
    inits = [helper.make_tensor(name, elem_type, [4], values.tolist())
             for name, elem_type in (("bf", TensorProto.BFLOAT16), ("f8", TensorProto.FLOAT8E4M3FN))]  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["bf"], ["bf32"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["f8"], ["f832"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["bf32", "f832"], ["y0"]),
        helper.make_node("Add", ["y0", "x"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [value("x", FLOAT, [4])], [value("y", FLOAT, [4])], inits)
    proto = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 19)])
    assert_matches_onnxruntime(proto, {"x": np.zeros(4, np.float32)}, rtol=0, atol=0)


def _pipeline(nodes: list[onnx.NodeProto], x: np.ndarray, opset: int = 19) -> onnx.ModelProto:
    elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.INT64
    graph = helper.make_graph(nodes, "g", [value("x", elem, list(x.shape))], [value("y", FLOAT, None)])
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", opset)])


def test_fourth_round_of_importer_fixes() -> None:
    """Found by fuzzing against onnxruntime: float8 casts saturate infinities too (inf became NaN or stayed inf);
    Trilu's int64 k past the matrix keeps all or nothing (it wrapped to 32 bits); a bfloat16 cast of a host value
    stays on the model's device (it went to the default device, and the next Add failed)."""
    x = np.array([np.inf, -np.inf, 1e6, 1.0, np.nan], np.float32)
    for fp8 in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2):
        nodes = [helper.make_node("Cast", ["x"], ["f8"], to=fp8), helper.make_node("Cast", ["f8"], ["y"], to=FLOAT)]
        assert_matches_onnxruntime(_pipeline(nodes, x), {"x": x}, rtol=0, atol=0)
    m = np.arange(9, dtype=np.float32).reshape(3, 3)
    for k, upper in ((2**32 + 1, 1), (2**31, 1), (2**32, 0), (-(2**33), 0)):
        k_init = helper.make_tensor("k", TensorProto.INT64, [], [k])
        graph = helper.make_graph([helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)], "g",
                                  [value("x", FLOAT, [3, 3])], [value("y", FLOAT, [3, 3])], [k_init])  # fmt: skip
        proto = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 19)])
        assert_matches_onnxruntime(proto, {"x": m}, rtol=0, atol=0)
    ints = np.array([2, 256, -3], np.int64)
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=FLOAT)]  # fmt: skip
    model = lazy.onnx.load(_pipeline(nodes, ints), device="PYTHON")
    out = model(ints)["y"]
    assert out.device == "PYTHON" and out.numpy().tolist() == [2.0, 256.0, -3.0]


def test_invalid_reshapes_unsqueezes_gathers_and_castlikes_are_named() -> None:
    cases = [
        ([helper.make_node("Reshape", ["x", "s"], ["y"])], {"s": [3, 0]}, "copies .0. a dimension at a position"),
        ([helper.make_node("Unsqueeze", ["x", "s"], ["y"])], {"s": [0, 0]}, "name an output axis more than once"),
        ([helper.make_node("Gather", ["x", "s"], ["y"])], {"s": [-13]}, "index -13 is out of range"),
    ]
    for nodes, consts, message in cases:
        inits = [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in consts.items()]
        graph = helper.make_graph(nodes, "g", [value("x", FLOAT, [12])], [value("y", FLOAT, None)], inits)
        proto = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 19)])
        with pytest.raises((lazy.onnx.InvalidModelError, lazy.onnx.OnnxRunError), match=message):
            lazy.onnx.load(proto)(np.ones(12, np.float32))
    like = helper.make_tensor("like", TensorProto.FLOAT8E4M3FN, [1], [1.0])
    node = helper.make_node("CastLike", ["x", "like"], ["y"], saturate=0)
    out = value("y", TensorProto.FLOAT8E4M3FN, None)
    graph = helper.make_graph([node], "g", [value("x", FLOAT, [12])], [out], [like])
    proto = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises((lazy.onnx.InvalidModelError, lazy.onnx.OnnxRunError), match="saturate=0 to a float8"):
        lazy.onnx.load(proto)(np.ones(12, np.float32))


def test_fifth_round_of_importer_fixes() -> None:
    """Found by fuzzing against onnxruntime: a float8 cast of an integer input or initializer (known on the host)
    failed; Pad 'wrap' with one side cropping wrapped the uncropped axis; ReduceLogSumExp of halves overflowed (summed
    in half); LpNormalization of an all-zero slice was NaN (0/0); Hardmax over an empty axis raised."""
    ints = np.array([1, 3, -2], np.int64)
    for fp8 in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2):
        nodes = [helper.make_node("Cast", ["x"], ["f8"], to=fp8), helper.make_node("Cast", ["f8"], ["y"], to=FLOAT)]
        assert_matches_onnxruntime(_pipeline(nodes, ints), {"x": ints}, rtol=0, atol=0)
    x = np.arange(4, dtype=np.float32)
    for pads in ([3, -2], [-1, 4], [-1, -1], [5, 0]):
        pad, out = helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap"), value("y", FLOAT, [4 + sum(pads)])
        model = graph_model([pad], [value("x", FLOAT, [4])], [out], {"p": np.array(pads, np.int64)}, opset=19)
        assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)
    halves = np.random.default_rng(0).standard_normal(70000).astype(np.float16)
    node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], keepdims=0)
    model = graph_model([node], [value("x", TensorProto.FLOAT16, [70000])], [value("y", TensorProto.FLOAT16, [])])
    assert_matches_onnxruntime(model, {"x": halves}, rtol=1e-3, atol=1e-3)
    rows = np.array([[0, 0, 0], [3, 0, 4], [-1, 0, 0]], np.float32)
    for p in (1, 2):
        node = helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=p)
        model = graph_model([node], [value("x", FLOAT, [3, 3])], [value("y", FLOAT, [3, 3])], opset=13)
        assert_matches_onnxruntime(model, {"x": rows}, rtol=1e-6, atol=1e-6)
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    model = graph_model([node], [value("x", FLOAT, [2, 0])], [value("y", FLOAT, [2, 0])], opset=13)
    assert lazy.onnx.load(model)(np.zeros((2, 0), np.float32))["y"].shape == (2, 0)


def test_malformed_models_are_named_at_load() -> None:
    """What onnxruntime refuses as malformed is refused at load, naming it: a graph output nothing makes, a value made
    twice, a missing required attribute, an input of undefined element type."""

    def model(nodes, inputs, outputs):
        graph = helper.make_graph(nodes, "g", inputs, outputs)
        return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 18)])

    x, y = value("x", FLOAT, [2]), value("y", FLOAT, None)
    relu = helper.make_node("Relu", ["x"], ["t"])
    cases = [
        (model([relu], [x], [y]), "graph output 'y' is made by no node"),
        (model([relu, helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], [x], [y]),
         "Neg node '#1' makes 't', which Relu node '#0' makes too"),
        (model([helper.make_node("Relu", ["x"], ["x"])], [x], [value("x", FLOAT, [2])]), "also a graph input"),
        (model([helper.make_node("Cast", ["x"], ["y"])], [x], [y]), "Cast node '#0': the required attribute to is"),
        (model([helper.make_node("Einsum", ["x"], ["y"])], [x], [y]), "required attribute equation is missing"),
        (model([helper.make_node("Relu", ["x"], ["y"])], [value("x", TensorProto.UNDEFINED, [2])], [y]),
         "graph input 'x' has no element type"),
    ]  # fmt: skip
    for proto, message in cases:
        with pytest.raises(lazy.onnx.UnsupportedModelError, match=message):
            lazy.onnx.load(proto)


def test_invalid_flattens_slices_one_hots_and_gather_elements_are_named() -> None:
    def run(nodes, consts, shape=(2, 3)):
        inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
        graph = helper.make_graph(nodes, "g", [value("x", FLOAT, list(shape))], [value("y", FLOAT, None)], inits)
        proto = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 18)])
        return lazy.onnx.load(proto)(np.ones(shape, np.float32))

    cases = [
        ([helper.make_node("Flatten", ["x"], ["y"], axis=5)], {}, r"axis 5 is out of range .*Flatten takes \[-2, 2\]"),
        ([helper.make_node("Flatten", ["x"], ["y"], axis=-4)], {}, "axis -4 is out of range"),
        ([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
         {"s": np.array([0, 0]), "e": np.array([1, 1]), "a": np.array([1, -1])}, r"axes \[1, -1\] name an axis more"),
        ([helper.make_node("Slice", ["x", "s", "e"], ["y"])], {"s": np.array([0, 0]), "e": np.array([1])},
         "2 starts, 1 ends"),
        ([helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
         {"i": np.array([0, 1]), "d": np.array(3), "v": np.array([0.0, 1.0, 2.0], np.float32)}, "values has 3"),
        ([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)], {"i": np.array([[5], [-4]])},
         "index 5 is out of range for axis 1 of size 3"),
    ]  # fmt: skip
    for nodes, consts, message in cases:
        with pytest.raises((lazy.onnx.InvalidModelError, lazy.onnx.OnnxRunError), match=message):
            run(nodes, consts)
    gathered = run([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)], {"i": np.array([[2], [-3]])})
    assert gathered["y"].numpy().tolist() == [[1.0], [1.0]]

"""Whole models through lazy.onnx against onnxruntime: a small CNN and a small causal transformer language model
exported from PyTorch (committed in data/, exported again at other opsets when torch is installed), and models that
installed packages ship: onnx's backend test data (models with their input and output .pb files) and onnxruntime's
example models."""

from __future__ import annotations

import glob
import os
import pathlib

import numpy as np
import pytest

pytest.importorskip("onnx.helper", reason="the onnx package is not installed: pip install 'lazy-core[onnx]'")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install 'lazy-core[onnx-test]'")

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx_builders import assert_matches_onnxruntime  # noqa: E402

import lazy.onnx  # noqa: E402
from lazy import Tensor, dtypes  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parent / "data"
BACKEND_DATA = pathlib.Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


def test_cnn_exported_from_pytorch() -> None:
    image = np.random.default_rng(0).normal(size=(3, 3, 16, 16)).astype(np.float32)  # (a batch of 3; exported with 2)
    assert_matches_onnxruntime(str(DATA / "cnn_opset13.onnx"), {"image": image})


def test_transformer_exported_from_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(DATA / "tiny_lm_opset17.onnx")
    model = lazy.onnx.load(path)
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("ids", ("batch", "sequence"), dtypes.int64)]
    ids = np.random.default_rng(1).integers(0, 50, size=(3, 7))  # exported with (2, 8): the shapes are computed

    def no_sync(self: Tensor) -> None:
        raise AssertionError("the model read a device value back while building its graph")

    with monkeypatch.context() as patch:  # the shape arithmetic (Shape, Gather, Range, Concat) never syncs
        patch.setattr(Tensor, "numpy", no_sync)
        logits = model(ids)["out"]
    # and makes no kernel: no int64 shape or position and no (7, 7) causal mask is computed on the device (the only
    # non-float kernels are the embedding lookup's, which depends on the ids)
    outputs = [item.outputs[0] for item in logits.schedule() if item.kind == "kernel"]
    assert not [
        lb for lb in outputs if lb.dtype == dtypes.int64 or (lb.dtype == dtypes.bool and lb.shape[-2:] == (7, 7))
    ]
    assert_matches_onnxruntime(path, {"ids": ids}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("which", ["cnn_opset18", "tiny_lm_opset14"])
def test_fresh_pytorch_export_matches_torch(which: str) -> None:
    """The models exported again (opset 14: LayerNorm decomposed into ReduceMean/Pow/Sqrt; 18: axes as inputs) and
    compared with PyTorch itself, not only with onnxruntime."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the fresh-export checks are skipped")
    import export_torch_models as exports

    if which.startswith("cnn"):
        data, module, example = exports.export_cnn(18), exports.cnn(), torch.randn(1, 3, 16, 16)
    else:
        data, module, example = exports.export_tiny_lm(14), exports.tiny_lm(), torch.randint(0, 50, (2, 11))
    with torch.no_grad():
        expected = module(example).numpy()
    got = lazy.onnx.load(data)(example.numpy())["out"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# onnx's backend test data: models from PyTorch's old exporter (opset 6 to 9: lifted by the version converter) with
# their inputs and expected outputs; a handful of different kinds (the whole set runs in a few seconds more)
BACKEND_CASES = [
    "pytorch-converted/test_Conv2d_depthwise_padded",
    "pytorch-converted/test_ConvTranspose2d",
    "pytorch-converted/test_MaxPool3d_stride_padding",
    "pytorch-converted/test_AvgPool1d_stride",
    "pytorch-converted/test_BatchNorm3d_momentum_eval",
    "pytorch-converted/test_PReLU_2d_multiparam",
    "pytorch-converted/test_PixelShuffle",
    "pytorch-converted/test_GLU_dim",
    "pytorch-converted/test_ReflectionPad2d",
    "pytorch-converted/test_log_softmax_dim3",
    "pytorch-operator/test_operator_add_size1_singleton_broadcast",
    "pytorch-operator/test_operator_repeat_dim_overflow",
    "pytorch-operator/test_operator_symbolic_override",
    "simple/test_expand_shape_model3",
]


@pytest.mark.parametrize("case", BACKEND_CASES)
def test_onnx_backend_data(case: str) -> None:
    folder = BACKEND_DATA / case
    if not folder.is_dir():
        pytest.skip(f"this onnx version ships no {case} (onnx {onnx.__version__})")
    data = folder / "test_data_set_0"
    inputs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("input_*.pb"))]
    expected = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(data.glob("output_*.pb"))]
    got = list(lazy.onnx.load(str(folder / "model.onnx"))(*inputs).values())
    assert len(got) == len(expected)
    for out, want in zip(got, expected):
        assert out.shape == want.shape
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def _onnxruntime_dataset(name: str) -> str:
    import onnxruntime

    path = os.path.join(os.path.dirname(onnxruntime.__file__), "datasets", name)
    if not os.path.isfile(path):
        pytest.skip(f"this onnxruntime ships no datasets/{name}")
    return path


@pytest.mark.parametrize("name", ["mul_1.onnx", "sigmoid.onnx"])
def test_onnxruntime_example_models(name: str) -> None:
    path = _onnxruntime_dataset(name)
    model = lazy.onnx.load(path)  # opsets 7 and 9: lifted to 13 first
    shapes = {spec.name: tuple(d if isinstance(d, int) else 1 for d in spec.shape or ()) for spec in model.inputs}
    feeds = {name: np.random.default_rng(2).normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    assert_matches_onnxruntime(path, feeds)


def test_onnxruntime_example_with_ml_operators_is_refused_whole() -> None:
    with pytest.raises(lazy.onnx.UnsupportedModelError) as info:
        lazy.onnx.load(_onnxruntime_dataset("logreg_iris.onnx"))
    message = str(info.value)
    for op in ("ai.onnx.ml.LinearClassifier", "ai.onnx.ml.Normalizer", "ai.onnx.ml.ZipMap"):
        assert op in message
    assert "Conv" in message  # (what is supported is listed too)


def test_every_backend_test_model_runs_or_is_refused_by_name() -> None:
    """Across all of onnx's bundled backend models: each runs, or load names what it cannot run (no other
    failure). Loading alone is cheap; only the refusals are checked here, the runs above."""
    folders = sorted(glob.glob(str(BACKEND_DATA / "*" / "*" / "model.onnx")))
    refused = []
    for path in folders:
        try:
            lazy.onnx.load(path)
        except lazy.onnx.UnsupportedModelError as e:
            refused.append(str(e).splitlines()[1])
    assert all("unsupported operators" in line or "unsupported dtype" in line for line in refused), refused

"""lazy.onnx operator by operator against onnxruntime: one small model per case, built with `onnx.helper`, covering
each family's attributes and the forms that changed between opsets (axes as attribute or input, Split's
num_outputs, Pad's axes, Resize's sizes and policies, Softmax before opset 13 through the version converter).
They run on the PYTHON reference device, which compiles nothing (what lazy's ops compute is the same on every device:
the conformance suite checks that); the whole models in test_onnx_models.py run on the default device."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

pytest.importorskip("onnx.helper", reason="the onnx package is not installed: pip install 'lazy-core[onnx]'")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install 'lazy-core[onnx-test]'")

from onnx_builders import assert_matches_onnxruntime, node_model, random  # noqa: E402

I64 = np.int64


class Case(NamedTuple):
    op: str
    feeds: dict[str, np.ndarray]
    attrs: dict[str, Any] = {}
    constants: dict[str, np.ndarray] | None = None
    opset: int = 18
    n_outputs: int = 1
    tolerance: float = 1e-5


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


X = random(2, 3, 4)
X4 = random(2, 3, 6, 6, seed=1)
POSITIVE = random(2, 3, 4, low=0.1, high=3.0, seed=2)
INTS = random(2, 3, 4, dtype=np.int32, low=-9, high=9, seed=3)
NONZERO_INTS = np.where(INTS == 0, 3, INTS).astype(np.int32)
BOOLS_A, BOOLS_B = random(2, 3, dtype=bool, seed=4), random(2, 3, dtype=bool, seed=5)
W_CONV = random(4, 3, 3, 3, seed=6)
W_DEPTHWISE = random(3, 1, 3, 3, seed=7)
BIAS4 = random(4, seed=8)

CASES: dict[str, Case] = {
    # elementwise, with broadcasting and integer rules
    "add_broadcast": Case("Add", {"a": X, "b": random(3, 1, seed=9)}),
    "sub": Case("Sub", {"a": X, "b": random(4, seed=10)}),
    "mul": Case("Mul", {"a": X, "b": X[:1]}),
    "div": Case("Div", {"a": X, "b": POSITIVE}),
    "div_int_truncates": Case("Div", {"a": INTS, "b": NONZERO_INTS[::-1].copy()}),
    "mod_int": Case("Mod", {"a": INTS, "b": NONZERO_INTS[::-1].copy()}),
    "mod_fmod": Case("Mod", {"a": X, "b": POSITIVE}, {"fmod": 1}),
    "pow": Case("Pow", {"a": POSITIVE, "b": X}, tolerance=1e-4),
    "max_variadic": Case("Max", {"a": X, "b": X[:, :1], "c": random(4, seed=11)}),
    "min": Case("Min", {"a": X, "b": POSITIVE}),
    "sum": Case("Sum", {"a": X, "b": POSITIVE, "c": X[0]}),
    "mean": Case("Mean", {"a": X, "b": POSITIVE}),
    "equal": Case("Equal", {"a": INTS, "b": INTS[:, :1]}),
    "less": Case("Less", {"a": X, "b": POSITIVE}),
    "greater": Case("Greater", {"a": X, "b": X[:1]}),
    "less_or_equal": Case("LessOrEqual", {"a": INTS, "b": NONZERO_INTS}),
    "greater_or_equal": Case("GreaterOrEqual", {"a": INTS, "b": NONZERO_INTS}),
    "not": Case("Not", {"a": BOOLS_A}),
    "and": Case("And", {"a": BOOLS_A, "b": BOOLS_B}),
    "or": Case("Or", {"a": BOOLS_A, "b": BOOLS_B}),
    "xor": Case("Xor", {"a": BOOLS_A, "b": BOOLS_B}),
    "where": Case("Where", {"c": BOOLS_A, "a": random(2, 3, seed=12), "b": random(3, seed=13)}),
    "clip_inputs": Case("Clip", {"x": X}, constants={"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
    "clip_max_only": Case("Clip", {"x": X, "": np.zeros(0), "hi": np.array(0.3, np.float32)}),
    "sqrt": Case("Sqrt", {"x": POSITIVE}),
    "exp": Case("Exp", {"x": X}),
    "log": Case("Log", {"x": POSITIVE}),
    "abs": Case("Abs", {"x": X}),
    "neg": Case("Neg", {"x": INTS}),
    "reciprocal": Case("Reciprocal", {"x": POSITIVE}),
    "floor": Case("Floor", {"x": X}),
    "ceil": Case("Ceil", {"x": X}),
    "round_half_even": Case("Round", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, 2.6], np.float32)}),
    "sign": Case("Sign", {"x": np.array([-2.0, 0.0, 3.0], np.float32)}),
    "erf": Case("Erf", {"x": X}),
    "relu": Case("Relu", {"x": X}),
    "leaky_relu": Case("LeakyRelu", {"x": X}, {"alpha": 0.2}),
    "sigmoid": Case("Sigmoid", {"x": X}),
    "tanh": Case("Tanh", {"x": X}),
    "elu": Case("Elu", {"x": X}, {"alpha": 0.5}),
    "selu": Case("Selu", {"x": X}),
    "softplus": Case("Softplus", {"x": X}),
    "softsign": Case("Softsign", {"x": X}),
    "hard_sigmoid": Case("HardSigmoid", {"x": X}, {"alpha": 0.3, "beta": 0.4}),
    "hard_swish": Case("HardSwish", {"x": X * 3}),
    "mish": Case("Mish", {"x": X}),
    "prelu": Case("PRelu", {"x": X}, constants={"slope": random(4, seed=14)}),
    "gelu_exact": Case("Gelu", {"x": X}, opset=20),
    "gelu_tanh": Case("Gelu", {"x": X}, {"approximate": "tanh"}, opset=20),
    "isnan_isinf": Case("IsInf", {"x": np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)}, {"detect_negative": 0}),
    "cast_float_to_int": Case("Cast", {"x": X * 3}, {"to": 6}),
    "cast_to_half": Case("Cast", {"x": X}, {"to": 10}, tolerance=1e-3),
    "castlike": Case("CastLike", {"x": INTS, "like": np.zeros(1, np.float32)}),
    # matrix products
    "matmul_batched": Case("MatMul", {"a": random(2, 3, 4), "b": random(4, 5, seed=15)}),
    "matmul_vector": Case("MatMul", {"a": random(4), "b": random(2, 4, 3, seed=16)}),
    "gemm": Case(
        "Gemm",
        {"a": random(4, 3), "b": random(5, 4, seed=17), "c": random(5, seed=18)},
        {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
    ),  # fmt: skip
    "gemm_no_c": Case("Gemm", {"a": random(3, 4), "b": random(4, 5, seed=19)}),
    "einsum": Case("Einsum", {"a": random(2, 3, 4), "b": random(2, 4, 5, seed=20)}, {"equation": "bij,bjk->bik"}),
    # shapes, views and indexing
    "reshape_zero_and_minus_one": Case("Reshape", {"x": X}, constants={"shape": i64(0, -1)}),
    "reshape_allowzero": Case("Reshape", {"x": X}, {"allowzero": 1}, constants={"shape": i64(4, 6)}),
    "transpose": Case("Transpose", {"x": X}, {"perm": [2, 0, 1]}),
    "transpose_default": Case("Transpose", {"x": X}),
    "concat": Case("Concat", {"a": X, "b": random(2, 1, 4, seed=21)}, {"axis": -2}),
    "slice_negative_steps": Case(
        "Slice", {"x": X4}, constants={"s": i64(-1, 5), "e": i64(-100, 0), "a": i64(1, 3), "st": i64(-1, -2)}
    ),  # fmt: skip
    "slice_clamped": Case("Slice", {"x": X}, constants={"s": i64(1), "e": i64(2**62), "a": i64(-1)}),
    "gather_negative": Case("Gather", {"x": X}, {"axis": 1}, constants={"i": i64(-1, 0, 2, 2)}),
    "gather_2d_indices": Case("Gather", {"x": X, "i": np.array([[0, 1], [1, 0]], I64)}),
    "gather_scalar": Case("Gather", {"x": X}, {"axis": 2}, constants={"i": np.array(-2, I64)}),
    "gather_elements": Case("GatherElements", {"x": X, "i": random(2, 3, 2, dtype=I64, low=-4, high=4)}, {"axis": 2}),
    "split_sizes": Case("Split", {"x": X4}, {"axis": 2}, constants={"s": i64(1, 2, 3)}, n_outputs=3, opset=13),
    "split_num_outputs": Case("Split", {"x": X4}, {"axis": 3, "num_outputs": 4}, n_outputs=4),
    "split_equal": Case("Split", {"x": X4}, {"axis": 1}, n_outputs=3, opset=13),
    "squeeze": Case("Squeeze", {"x": X[:, :1]}, constants={"a": i64(1)}),
    "squeeze_all": Case("Squeeze", {"x": X[:1, :, :1]}),
    "unsqueeze": Case("Unsqueeze", {"x": X}, constants={"a": i64(-1, 0)}),
    "flatten": Case("Flatten", {"x": X4}, {"axis": -1}),
    "expand": Case("Expand", {"x": random(3, 1)}, constants={"s": i64(2, 1, 4)}),
    "tile": Case("Tile", {"x": X}, constants={"r": i64(1, 2, 3)}),
    "pad_reflect": Case("Pad", {"x": X4}, {"mode": "reflect"}, constants={"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}),
    "pad_constant_axes": Case(
        "Pad", {"x": X4}, constants={"p": i64(1, -1, 2, 0), "v": np.array(1.5, np.float32), "a": i64(2, -1)}
    ),  # fmt: skip
    "pad_edge_wrap": Case("Pad", {"x": X4}, {"mode": "wrap"}, constants={"p": i64(0, 0, 2, 1, 0, 0, 1, 3)}),
    "pad_edge": Case("Pad", {"x": X4}, {"mode": "edge"}, constants={"p": i64(0, 1, 2, 1, 0, 0, 1, 3)}),
    # a constant_value with another mode: ONNX ignores it (Tensor.pad refuses a fill value there)
    "pad_reflect_with_value": Case(
        "Pad",
        {"x": X4},
        {"mode": "reflect"},
        constants={"p": i64(0, 0, 1, 1, 0, 0, 1, 1), "v": np.array(2.5, np.float32)},
    ),  # fmt: skip
    "depth_to_space": Case("DepthToSpace", {"x": random(1, 8, 2, 3)}, {"blocksize": 2, "mode": "CRD"}),
    "space_to_depth": Case("SpaceToDepth", {"x": random(1, 2, 4, 6)}, {"blocksize": 2}),
    "trilu_lower": Case("Trilu", {"x": X4}, {"upper": 0}, constants={"k": np.array(1, I64)}),
    "one_hot": Case(
        "OneHot",
        {"i": np.array([[0, 3], [-1, 2]], I64)},
        {"axis": 1},
        constants={"d": np.array(4, I64), "v": np.array([0.5, 2.0], np.float32)},
    ),  # fmt: skip
    "cumsum_exclusive_reverse": Case(
        "CumSum", {"x": X}, {"exclusive": 1, "reverse": 1}, constants={"a": np.array(1, I64)}
    ),  # fmt: skip
    "topk": Case("TopK", {"x": random(3, 7)}, {"largest": 0}, constants={"k": i64(3)}, n_outputs=2),
    "shape_start_end": Case("Shape", {"x": X4}, {"start": 1, "end": -1}),
    "size": Case("Size", {"x": X4}),
    "constant_of_shape": Case("ConstantOfShape", {"s": i64(2, 3)}),
    "range": Case(
        "Range", {"a": np.array(1.5, np.float32), "b": np.array(-3, np.float32), "c": np.array(-0.7, np.float32)}
    ),  # fmt: skip
    "dropout_inference": Case("Dropout", {"x": X}, n_outputs=2),
    # reductions: axes as attribute (opset 13) and as input (18), keepdims, noop_with_empty_axes
    "reduce_mean_attribute": Case("ReduceMean", {"x": X}, {"axes": [0, -1], "keepdims": 0}, opset=13),
    "reduce_mean_input": Case("ReduceMean", {"x": X}, constants={"a": i64(1)}),
    "reduce_sum_13_input": Case("ReduceSum", {"x": INTS}, {"keepdims": 0}, constants={"a": i64(2)}, opset=13),
    "reduce_sum_all": Case("ReduceSum", {"x": X}),
    "reduce_sum_noop": Case("ReduceSum", {"x": X}, {"noop_with_empty_axes": 1}),
    # noop_with_empty_axes keeps the elementwise part (the square, the log, the absolute value)
    "reduce_sum_square_noop": Case("ReduceSumSquare", {"x": X}, {"noop_with_empty_axes": 1}),
    "reduce_log_sum_noop": Case("ReduceLogSum", {"x": POSITIVE}, {"noop_with_empty_axes": 1}),
    "reduce_l1_noop": Case("ReduceL1", {"x": X}, {"noop_with_empty_axes": 1}),
    # half inputs accumulate in float32, as onnxruntime (the sums of squares, window sums and softmax's sum of
    # 3000 terms overflow half)
    "reduce_l2_half": Case("ReduceL2", {"x": np.full((3000,), 10, np.float16)}, tolerance=1e-2),
    "average_pool_half": Case(
        "AveragePool", {"x": np.full((1, 1, 40, 40), 100, np.float16)}, {"kernel_shape": [40, 40]}, tolerance=1e-2
    ),
    "instance_norm_half": Case(
        "InstanceNormalization",
        {
            "x": (random(1, 2, 4, seed=30) * 3000).astype(np.float16),
            "s": np.ones(2, np.float16),
            "b": np.zeros(2, np.float16),
        },
        tolerance=1e-2,
    ),  # fmt: skip
    "softmax_half": Case("Softmax", {"x": np.ones((70000,), np.float16)}, tolerance=1e-2),
    # Resize-10 interpolates "asymmetric"; the version converter drops that, opset 13's default is half_pixel
    "resize_linear_opset10": Case(
        "Resize", {"x": X4}, {"mode": "linear"}, constants={"s": np.array([1, 1, 2, 1.5], np.float32)}, opset=10
    ),
    "pad_wrap_wider_than_the_axis": Case(
        "Pad", {"x": random(2, 3)}, {"mode": "wrap"}, constants={"p": i64(0, 4, 0, 5)}
    ),
    # over an empty axis: ONNX's identities (opset 18), where Tensor.max and min raise
    "reduce_max_empty": Case("ReduceMax", {"x": np.zeros((2, 0), np.float32)}, constants={"a": i64(1)}),
    "reduce_min_empty": Case(
        "ReduceMin", {"x": np.zeros((2, 0), np.float32)}, {"keepdims": 0}, constants={"a": i64(1)}
    ),
    "reduce_logsumexp_empty": Case("ReduceLogSumExp", {"x": np.zeros((0, 3), np.float32)}, constants={"a": i64(0)}),
    "lp_pool_ceil_mode": Case(
        "LpPool", {"x": random(1, 2, 5, 5, seed=31)}, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}
    ),
    # before opset 13, Hardmax flattens to 2-D at its axis (the version converter keeps the node as it is)
    "hardmax_opset11": Case("Hardmax", {"x": random(2, 3, 4, seed=32)}, {"axis": 1}, opset=11),
    "hardmax_opset12_axis0": Case("Hardmax", {"x": random(2, 3, 4, seed=33)}, {"axis": 0}, opset=12),
    "sign_nan": Case("Sign", {"x": np.array([np.nan, -2.0, 0.0, 3.0], np.float32)}),
    "reduce_max": Case("ReduceMax", {"x": X}, {"keepdims": 0}, constants={"a": i64(-1, 0)}),
    "reduce_min": Case("ReduceMin", {"x": INTS}, constants={"a": i64(1)}),
    "reduce_prod": Case("ReduceProd", {"x": POSITIVE}, constants={"a": i64(2)}),
    "reduce_l1": Case("ReduceL1", {"x": X}, constants={"a": i64(1)}),
    "reduce_l2": Case("ReduceL2", {"x": X}, constants={"a": i64(1, 2)}),
    "reduce_sum_square": Case("ReduceSumSquare", {"x": X}, constants={"a": i64(0)}),
    "reduce_log_sum_exp": Case("ReduceLogSumExp", {"x": X * 20}, constants={"a": i64(2)}, tolerance=1e-4),
    "argmax_last_index": Case(
        "ArgMax", {"x": np.array([[1, 3, 3], [2, 2, 0]], np.float32)}, {"axis": 1, "select_last_index": 1}
    ),  # fmt: skip
    "argmin": Case("ArgMin", {"x": X}, {"axis": -1, "keepdims": 0}),
    "softmax": Case("Softmax", {"x": X}, {"axis": 1}),
    "log_softmax": Case("LogSoftmax", {"x": X}),
    "hardmax": Case("Hardmax", {"x": X}, {"axis": 0}),
    "softmax_opset11_flattens": Case("Softmax", {"x": X}, {"axis": 1}, opset=11),
    # neural network layers
    "conv_groups_dilations_pads": Case(
        "Conv",
        {"x": random(1, 4, 7, 7)},
        {"group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1], "strides": [1, 2]},
        constants={"w": random(6, 2, 3, 2, seed=22), "b": random(6, seed=23)},
    ),
    "conv_same_lower": Case(
        "Conv", {"x": X4}, {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, constants={"w": random(4, 3, 2, 2, seed=24)}
    ),  # fmt: skip
    "conv_depthwise_1d": Case(
        "Conv", {"x": random(2, 3, 9)}, {"group": 3, "pads": [1, 1]}, constants={"w": random(3, 1, 3, seed=25)}
    ),  # fmt: skip
    "conv_transpose": Case(
        "ConvTranspose",
        {"x": random(1, 4, 3, 3)},
        {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0]},
        constants={"w": random(4, 2, 3, 3, seed=26), "b": random(2, seed=27)},
    ),
    "conv_transpose_output_shape": Case(
        "ConvTranspose",
        {"x": random(1, 2, 3, 3)},
        {"strides": [2, 2], "output_shape": [7, 8]},
        constants={"w": random(2, 3, 3, 3, seed=28)},
    ),  # fmt: skip
    "max_pool_ceil_dilations": Case(
        "MaxPool",
        {"x": random(1, 2, 7, 7)},
        {"kernel_shape": [3, 2], "strides": [2, 2], "dilations": [1, 2], "ceil_mode": 1, "pads": [1, 0, 1, 1]},
    ),  # fmt: skip
    "max_pool_indices": Case("MaxPool", {"x": X4}, {"kernel_shape": [2, 3], "strides": [2, 2]}, n_outputs=2),
    "max_pool_indices_column_major": Case(
        "MaxPool", {"x": X4}, {"kernel_shape": [3, 3], "storage_order": 1}, n_outputs=2
    ),  # fmt: skip
    "max_pool_same_upper": Case(
        "MaxPool", {"x": random(1, 1, 5, 5)}, {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}
    ),  # fmt: skip
    "average_pool_count_include_pad": Case(
        "AveragePool", {"x": X4}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    ),
    "average_pool_exclude_pad_ceil": Case(
        "AveragePool",
        {"x": random(1, 2, 7, 7)},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    ),  # fmt: skip
    "average_pool_1d": Case("AveragePool", {"x": random(2, 3, 9)}, {"kernel_shape": [4], "strides": [3]}),
    "lp_pool": Case("LpPool", {"x": X4}, {"kernel_shape": [2, 2], "p": 3}, tolerance=1e-4),
    "global_average_pool": Case("GlobalAveragePool", {"x": X4}),
    "global_max_pool": Case("GlobalMaxPool", {"x": X4}),
    "batch_norm": Case(
        "BatchNormalization",
        {"x": X4},
        {"epsilon": 1e-3},
        constants={
            "s": random(3, seed=29),
            "b": random(3, seed=30),
            "m": random(3, seed=31),
            "v": random(3, low=0.5, high=2, seed=32),
        },
    ),  # fmt: skip
    "instance_norm": Case(
        "InstanceNormalization", {"x": X4}, constants={"s": random(3, seed=33), "b": random(3, seed=34)}
    ),  # fmt: skip
    "layer_norm_axis": Case(
        "LayerNormalization",
        {"x": X4},
        {"axis": 2, "epsilon": 1e-3},
        constants={"s": random(6, 6, seed=35), "b": random(6, 6, seed=36)},
        opset=17,
    ),
    "layer_norm_stats": Case("LayerNormalization", {"x": X}, constants={"s": random(4, seed=37)}, n_outputs=3),
    "group_norm": Case(
        "GroupNormalization",
        {"x": random(2, 4, 3, 3)},
        {"num_groups": 2},
        constants={"s": random(4, seed=38), "b": random(4, seed=39)},
        opset=21,
    ),
    "lrn": Case("LRN", {"x": X4}, {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 2.0}),
    "lp_normalization": Case("LpNormalization", {"x": X}, {"axis": 1, "p": 1}),
    # Resize: scales (opset 13) and sizes with a policy and axes (18+)
    "resize_nearest_scales": Case(
        "Resize",
        {"x": random(1, 2, 3, 4)},
        {"mode": "nearest"},
        constants={"r": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 1.5], np.float32)},
        opset=13,
    ),  # fmt: skip
    "resize_linear_half_pixel": Case(
        "Resize",
        {"x": random(1, 2, 4, 5)},
        {"mode": "linear"},
        constants={"r": np.zeros(0, np.float32), "s": np.zeros(0, np.float32), "z": i64(1, 2, 7, 3)},
    ),  # fmt: skip
    "resize_cubic_align_corners": Case(
        "Resize",
        {"x": random(1, 1, 4, 4)},
        {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
        constants={"r": np.zeros(0, np.float32), "s": np.array([1, 1, 1.5, 2], np.float32)},
        tolerance=1e-4,
    ),
    "resize_nearest_policy_axes": Case(
        "Resize",
        {"x": random(1, 2, 4, 6)},
        {
            "mode": "nearest",
            "axes": [2, 3],
            "keep_aspect_ratio_policy": "not_larger",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
        constants={"r": np.zeros(0, np.float32), "s": np.zeros(0, np.float32), "z": i64(8, 20)},
        opset=19,
    ),  # fmt: skip
}


def _feeds_and_constants(case: Case) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    feeds = {name: np.asarray(a) for name, a in case.feeds.items()}
    constants = None if case.constants is None else {n: np.asarray(a) for n, a in case.constants.items()}
    return feeds, constants


@pytest.mark.parametrize("name", list(CASES))
def test_operator_matches_onnxruntime(name: str) -> None:
    case = CASES[name]
    feeds, constants = _feeds_and_constants(case)
    model = node_model(case.op, feeds, case.n_outputs, case.opset, constants, **case.attrs)
    feeds = {n: a for n, a in feeds.items() if n}
    assert_matches_onnxruntime(model, feeds, rtol=case.tolerance, atol=case.tolerance, device="PYTHON")

"""The fast paths of CL (issue 10, item 5): what a device's limits declare (vector widths, registers, native math),
the work-group heuristics `lazy.codegen.opt_gpu` picks for a CPU behind OpenCL (PoCL: wide vectors in each work-item)
and for a GPU (groups, float4), and that every kernel they produce computes what numpy does. Each kernel is rendered
for explicit `DeviceLimits`, so both kinds of device are checked on whatever OpenCL device runs the tests."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from lazy import Context, Device, Tensor
from lazy.codegen.kernel import Axis, Kernel, OptOps
from lazy.codegen.opt_gpu import gpu_optimizations, register_tile
from lazy.codegen.program import get_program
from lazy.engine.realize import CompiledRunner, ExecItem, lower_schedule_item
from lazy.engine.schedule import create_schedule
from lazy.helpers import prod
from lazy.ops import LazyOp, Ops
from lazy_opencl.device import float_vector_width
from lazy_opencl.renderer import DeviceLimits, OpenCLRenderer

AVX512 = DeviceLimits(float_vector_width=16, cpu=True)  # PoCL on an AVX-512 machine
AVX2 = DeviceLimits(float_vector_width=8, cpu=True)
GPU = DeviceLimits(float_vector_width=1, local_size_max=1024, shared_max=1 << 16)
LIMITS = {"avx512": AVX512, "avx2": AVX2, "gpu": GPU}
rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def cl_default(dev: object) -> Iterator[None]:  # `dev` skips, with its reason, where no OpenCL device is usable
    with Context(DEVICE="CL"):
        yield


def data(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def kernels(out: Tensor) -> list[LazyOp]:
    return [si.ast for si in create_schedule([out.lazydata]) if si.ast.op is Ops.SINK]


def optimized(ast: LazyOp, limits: DeviceLimits) -> Kernel:
    return gpu_optimizations(Kernel(ast, limits.capabilities()))


def run_with(limits: DeviceLimits, out: Tensor) -> np.ndarray:
    """`out` computed on CL by kernels rendered for a device of `limits` (copies and the rest as usual)."""
    renderer, dev = OpenCLRenderer(limits), Device["CL"]
    if limits.cpu and limits.float_vector_width > (own := dev.renderer.limits.float_vector_width):
        pytest.skip(f"this OpenCL device runs at most {own} float lanes correctly; kernels rendered for "
                    f"{limits.float_vector_width} (lazy_opencl.device.float_vector_width says why)")  # fmt: skip
    out = out.contiguous()
    items = create_schedule([out.lazydata])
    for si in items:
        if si.ast.op is Ops.SINK:
            ExecItem(CompiledRunner(get_program(si.ast, renderer), dev), list(si.bufs), dict(si.var_vals)).run()
        else:
            lower_schedule_item(si).run()
    return items[-1].bufs[0].numpy().reshape(out.shape)


# --- what the limits declare ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limits, widths, registers, native",
    [(AVX512, (4, 8, 16), 32, False), (AVX2, (4, 8), 16, False), (GPU, (4,), 16, True)],
    ids=LIMITS,
)
def test_limits_declare_the_devices_vectors_and_math(limits, widths, registers, native):
    caps = limits.capabilities()
    assert caps.vector_widths == widths  # before: (4,) everywhere, so PoCL never used AVX-512's 16 lanes
    assert caps.vector_registers == registers
    # PoCL's exp2/log2/sin are scalar library calls (10x slower than a copy): a CPU takes core's polynomial code
    assert (caps.native_math == {Ops.EXP2, Ops.LOG2, Ops.SIN}) is native


def test_the_device_reads_its_vector_width_and_type(dev):
    limits = dev.limits
    assert limits.float_vector_width == float_vector_width(dev.cl_device) <= dev.cl_device.preferred_vector_width_float
    assert limits.cpu == bool(dev.cl_device.type & cl.device_type.CPU)


def pocl_cpu(lanes: int, target: str) -> SimpleNamespace:
    version = f"OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-{target}"
    return SimpleNamespace(preferred_vector_width_float=lanes, type=cl.device_type.CPU, version=version, name="cpu")


@pytest.mark.parametrize("device, lanes", [
    (pocl_cpu(16, "skylake-avx512"), 16),
    (pocl_cpu(16, "znver4"), 16),
    (pocl_cpu(16, "znver3"), 8),  # PoCL 3.0's LLVM 14 on AMD Zen 4: the host's lanes, a target without AVX-512
    (pocl_cpu(8, "znver3"), 8),
    (SimpleNamespace(preferred_vector_width_float=1, type=cl.device_type.GPU, version="OpenCL 3.0", name="gpu"), 1),
], ids=["skylake-avx512", "znver4", "zen4-as-znver3", "avx2", "gpu"])  # fmt: skip
def test_float_lanes_are_what_the_kernel_compiler_targets(device, lanes):
    assert float_vector_width(device) == lanes


def test_a_vector_multiply_add_is_one_fma_and_a_broadcast_one_cast():
    a, b = Tensor(data(64, 64)), Tensor(data(64, 64))
    src = get_program(kernels(a @ b)[-1], OpenCLRenderer(AVX512)).src
    fma_lines = [line for line in src.splitlines() if "fma(" in line]
    assert "float16" in src and fma_lines
    assert not any(".s0" in line for line in fma_lines)  # before: sixteen scalar fma calls rebuilt into a float16
    assert "((float16)(val" in src  # a scalar broadcast is one cast, not sixteen copies of the scalar


def test_a_vector_max_is_one_select_that_keeps_nan():
    x = data(8, 64)
    x[2, 5] = np.nan
    out = Tensor(x).relu().sum(axis=1)  # the row as float16 lanes: relu is a MAX of vectors
    src = get_program(kernels(out)[-1], OpenCLRenderer(AVX512)).src
    selects = [line for line in src.splitlines() if "?" in line]
    assert "float16" in src and selects
    assert not any(".s0" in line for line in selects)  # before: sixteen scalar maxes rebuilt into a float16
    close(run_with(AVX512, out), np.maximum(x, 0).sum(axis=1))  # NaN propagates (the row with it sums to NaN)


def test_a_cpu_device_renders_exp2_as_polynomial_code():
    ast = kernels(Tensor(data(256)).exp2())[-1]
    assert "exp2(" not in get_program(ast, OpenCLRenderer(AVX512)).src
    assert "exp2(" in get_program(ast, OpenCLRenderer(GPU)).src


# --- the heuristics -------------------------------------------------------------------------------------------------


def upcasts(k: Kernel) -> list[int]:
    return [o.amount for o in k.applied_opts if o.op is OptOps.UPCAST]


def test_a_simd_matmul_tile_is_wide_vectors_by_rows_in_registers():
    k = optimized(kernels(Tensor(data(256, 128)) @ Tensor(data(128, 256)))[-1], AVX512)
    assert k.vector_axis() is not None and k.full_shape[k.vector_axis()] == 16 and not k.axes(Axis.GROUP)
    accumulators = k.output_upcast_size() // 16
    assert 8 <= accumulators <= 32 - 2  # a real tile, with room for an N vector and a broadcast in 32 registers
    assert any(o.op is OptOps.UNROLL for o in k.applied_opts)


@pytest.mark.parametrize("name", ["avx512", "avx2"])
def test_a_simd_matmul_tile_has_its_lanes_along_the_output_row(name):
    """On a SIMD device the tile's loops trade places (the larger panel stays in cache); the tile's vectors still run
    along the output's contiguous axis, so B is loaded a vector at a time and A broadcast. (The swap was once left
    out while the upcasts named the swapped places: the lanes ran along the output's columns and every vector of A
    was gathered a scalar at a time, 9-12 GFLOP/s on PoCL with 8 lanes.)"""
    k = optimized(kernels(Tensor(data(256, 128)) @ Tensor(data(128, 256)))[-1], LIMITS[name])
    assert any(o.op is OptOps.SWAP for o in k.applied_opts)
    assert k.vector_axis() is not None and k.output_stride(k.vector_axis()) == 1, k


def test_a_gpu_matmul_gets_float4_tiles_and_work_groups():
    k = optimized(kernels(Tensor(data(256, 128)) @ Tensor(data(128, 256)))[-1], GPU)
    assert max(upcasts(k)) == 4 and k.axes(Axis.LOCAL)
    assert not any(o.op is OptOps.SWAP for o in k.applied_opts)  # N stays innermost: coalesced loads


def test_a_convolution_tile_is_output_channels_by_an_output_row():
    ast = kernels(Tensor(data(2, 16, 8, 8)).conv2d(Tensor(data(32, 16, 3, 3)), padding=1))[-1]
    k = optimized(ast, AVX512)
    out = k.st_of(k.membufs[0]).real_strides()
    tiled = {out[a]: k.full_shape[a] for a in k.axes(Axis.UPCAST)}
    assert tiled.get(1) == 8 and 64 in tiled  # 8 output columns (stride 1) by output channels (stride 8*8)


@pytest.mark.parametrize("name", ["avx512", "avx2"])
def test_a_simd_weight_gradient_is_the_cpu_micro_kernel(name):
    """A convolution's weight gradient has reuse axes but no output axis of stride 1 that vectors fill (the 3x3 taps
    are innermost): the GPU's register tile does not fit, and vector lanes over its reduction gathered the input a
    channel at a time (12.6 GFLOP/s on PoCL). It gets the CPU's micro-kernel instead: output channels as lanes loaded
    whole from the gradient, a block of input channels broadcast, several accumulators (83.6 GFLOP/s)."""
    tx, tw = Tensor(data(2, 16, 10, 10), requires_grad=True), Tensor(data(32, 16, 3, 3), requires_grad=True)
    _, dw = (tx.conv2d(tw, padding=1) * Tensor(data(2, 32, 10, 10))).sum().gradient(tx, tw)
    (ast,) = [a for a in kernels(dw) if len(Kernel(a, AVX2.capabilities()).full_shape) == 7]  # (co, ci, 3, 3; b, h, w)
    assert register_tile(Kernel(ast, LIMITS[name].capabilities())) is None
    k = optimized(ast, LIMITS[name])
    lanes = k.vector_axis()
    assert lanes is not None and all(k.st_of(b).real_strides()[lanes] in (0, 1) for b in k.reduce_inputs())
    assert prod(upcasts(k)) >= 4 * k.full_shape[lanes]  # at least four vector accumulators


@pytest.mark.parametrize("size, group", [(56, 56), (58, 58), (57, 57), (64, 64)])
def test_simd_work_groups_take_a_short_innermost_axis_whole(size, group):
    """An innermost axis no longer than a group is one work group whole: a padded image's rows of 58 (57) were groups
    of 2 items (of 1) that PoCL launched by the million (a pad of 16x64x56x56: 11 ms, 24 ms at 57, against 2)."""
    k = optimized(kernels(Tensor(data(64, 8, size - 2, size - 2)).pad((1, 1, 1, 1)).contiguous())[-1], AVX512)
    assert [k.full_shape[a] for a in k.axes(Axis.LOCAL)] == [group]
    x = data(3, 4, 9, 9)
    close(run_with(AVX2, Tensor(x).pad((1, 1, 1, 1))), np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))))


@pytest.mark.parametrize("name", LIMITS)
def test_few_long_reductions_group_only_on_a_gpu(name):
    k = optimized(kernels(Tensor(data(16, 4096)).sum(axis=1))[-1], LIMITS[name])
    assert bool(k.axes(Axis.GROUP)) is (name == "gpu")  # on PoCL a group's items run in turn: lanes, not groups
    if name != "gpu":
        assert k.vector_axis() is not None  # the row's elements as vector lanes


def test_a_simd_reduction_the_lowerer_cannot_vectorize_gets_independent_output_lanes():
    ast = kernels(Tensor(data(64, 256)).floor().sum(axis=1))[-1]  # floor casts: no vector form
    k = optimized(ast, AVX512)
    assert k.vector_axis() is None and 16 in upcasts(k)  # 16 rows at once: code the compiler vectorizes across


@pytest.mark.parametrize("name, group", [("avx512", 256), ("gpu", 128)])
def test_elementwise_work_groups(name, group):
    k = optimized(kernels(Tensor(data(1 << 16)) * 2 + 1)[-1], LIMITS[name])
    assert [k.full_shape[a] for a in k.axes(Axis.LOCAL)] == [group] and not upcasts(k)


def test_small_launches_keep_enough_groups():
    k = optimized(kernels(Tensor(data(4096)) * 2)[-1], AVX512)
    launched = k.full_shape[k.axes(Axis.GLOBAL)[0]]
    assert launched >= 64  # groups for every core, however large a group PoCL would like


# --- the kernels compute what numpy does -----------------------------------------------------------------------------


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, float(np.abs(want).max(initial=0))))


MATMULS = {
    "tiled": ((48, 80), (80, 64)),
    "odd": ((7, 17), (17, 33)),
    "one row": ((1, 64), (64, 48)),
    "batched": ((3, 16, 24), (3, 24, 32)),
}


@pytest.mark.parametrize("name", LIMITS)
@pytest.mark.parametrize("shapes", MATMULS.values(), ids=MATMULS)
def test_matmul(name, shapes):
    a, b = data(*shapes[0]), data(*shapes[1])
    close(run_with(LIMITS[name], Tensor(a) @ Tensor(b)), a @ b)


@pytest.mark.parametrize("name", LIMITS)
def test_matmul_of_transposed_and_strided_inputs(name):
    a, b = data(64, 48), data(128, 32)
    close(run_with(LIMITS[name], Tensor(a).T @ Tensor(b)[::2, :]), a.T @ b[::2, :])


@pytest.mark.parametrize("name", LIMITS)
def test_convolution_forward_and_backward(name):
    x, w = data(2, 4, 6, 8), data(8, 4, 3, 3)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    close(run_with(LIMITS[name], Tensor(x).conv2d(Tensor(w), padding=1)), np.einsum("bchwij,ocij->bohw", windows, w))
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    grad = data(2, 8, 6, 8)
    dx, dw = (tx.conv2d(tw, padding=1) * Tensor(grad)).sum().gradient(tx, tw)
    close(run_with(LIMITS[name], dw), np.einsum("bchwij,bohw->ocij", windows, grad))
    grad_windows = np.lib.stride_tricks.sliding_window_view(np.pad(grad, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                            (2, 3))  # fmt: skip
    close(run_with(LIMITS[name], dx), np.einsum("bohwij,ocij->bchw", grad_windows, w[:, :, ::-1, ::-1]))


@pytest.mark.parametrize("name", ["avx512", "gpu"])
def test_reductions(name):
    x = data(32, 256)
    limits = LIMITS[name]
    shifted = x - x.max(axis=1, keepdims=True)
    softmax = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    close(run_with(limits, Tensor(x).softmax(-1)), softmax, rtol=1e-5)
    close(run_with(limits, Tensor(x).sum(axis=0)), x.sum(axis=0))
    close(run_with(limits, Tensor(x).reshape(-1).sum()), x.sum(dtype=np.float64).astype(np.float32))


@pytest.mark.parametrize("name", ["avx512", "gpu"])
def test_elementwise_with_transcendentals(name):
    a, b = data(1 << 14), data(1 << 14)
    got = run_with(LIMITS[name], (((Tensor(a) * Tensor(b)).relu() * 0.5).exp() + Tensor(a).abs().log2()).sin())
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    arg = np.exp(np.maximum(a64 * b64, 0) * 0.5) + np.log2(np.abs(a64))
    # float32 steps before the sin round its argument: a few ulps of the argument is what each result may carry
    bound = 1e-6 + 8 * np.spacing(np.abs(arg).astype(np.float32)).astype(np.float64)
    worst = np.abs(got - np.sin(arg)) - bound
    assert (worst <= 0).all(), f"{int((worst > 0).sum())} results off, worst by {worst.max()} over the bound"


@pytest.mark.parametrize("limits", ["avx2", "gpu"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64])
@pytest.mark.parametrize("n", [8, 16, 64])
def test_register_tiles_of_wide_lanes_keep_their_reduce_loop_when_unrolling_would_be_too_much_code(limits, dtype, n):
    """An int or double matmul's register tile left no room in the unroll budget: the tile's reduce unroll raised
    `KernelOptError` out of code generation (int32 8x8 @ 8x8 failed on CL). The loop now stays a loop."""
    if dtype is np.float64 and not Device["CL"].renderer.limits.fp64:
        pytest.skip("this OpenCL device has no float64")
    a = (np.arange(n * n).reshape(n, n) % 7).astype(dtype)
    ast = kernels(Tensor(a) @ Tensor(a))[-1]
    optimized(ast, LIMITS[limits])  # does not raise
    want = (a.astype(np.int64) @ a.astype(np.int64)).astype(dtype)
    np.testing.assert_array_equal((Tensor(a) @ Tensor(a)).numpy(), want)

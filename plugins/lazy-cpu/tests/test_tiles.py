"""The CPU micro-kernels (`lazy.codegen.heuristics.cpu_tiles`, `dot_tiles`, `OptOps.PACK`/`SWAP`, vector lanes along a
reduce axis) against numpy over shapes no tile divides, batched, strided and transposed operands, and convolutions
forward and backward. Timing lives in bench/run.py."""

from __future__ import annotations

import pathlib
import platform
import re
import subprocess

import numpy as np
import pytest
import torch

from lazy import Device, Tensor
from lazy.codegen.heuristics import cpu_tiles
from lazy.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import lower_kernel
from lazy.codegen.program import build_kernel, get_program
from lazy.codegen.uops import UOp, UOps
from lazy.engine.schedule import create_schedule
from lazy.ops import Ops
from lazy.record import replace
from lazy.renderer import Capabilities
from lazy_cpu.hostcpu import cpu_flags, describe

DEVICES = ["CPU", "LLVM"]
SIZES = [1, 7, 17, 33, 64, 1023, 1025]


def close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    # float32 sums of k products: error grows like sqrt(k) ulps of the sum of magnitudes
    np.testing.assert_allclose(got, want, rtol=1e-5 * max(1.0, k**0.5), atol=1e-5 * max(1.0, k**0.5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(m, k, n) for m in (1, 7, 64) for k in (1, 33, 1025) for n in (17, 64, 1023)])
def test_matmul_odd_shapes(device: str, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    close((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a.astype(np.float64) @ b, k)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_large_tiled_sizes(device: str) -> None:
    rng = np.random.default_rng(0)
    for m, k, n in [(128, 1024, 256), (96, 1023, 1025), (1024, 64, 64)]:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        close((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a.astype(np.float64) @ b, k)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_batched_strided_transposed_and_empty(device: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 64, 48), dtype=np.float32)
    b = rng.standard_normal((3, 48, 128), dtype=np.float32)
    close((Tensor(a, device=device) @ Tensor(b, device=device)).numpy(), a.astype(np.float64) @ b, 48)
    bt = rng.standard_normal((128, 48), dtype=np.float32)
    close((Tensor(a, device=device) @ Tensor(bt, device=device).T).numpy(), a.astype(np.float64) @ bt.T, 48)
    big = rng.standard_normal((96, 130), dtype=np.float32)  # strided views: every other row, a column window
    lhs, rhs = big[::2, 1:65], big[1:65, ::2]
    got = (Tensor(big, device=device)[::2, 1:65] @ Tensor(big, device=device)[1:65, ::2]).numpy()
    close(got, lhs.astype(np.float64) @ rhs, 64)
    assert (Tensor.empty(0, 5, device=device) @ Tensor.empty(5, 64, device=device)).numpy().shape == (0, 64)
    zero_k = (Tensor.empty(64, 0, device=device) @ Tensor.empty(0, 64, device=device)).numpy()
    assert zero_k.shape == (64, 64) and not zero_k.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape", [(2, 8, 12, 20, 16, 3, 5, 1), (3, 3, 17, 9, 32, 3, 3, 1), (2, 16, 14, 14, 64, 3, 3, 2)]
)
def test_conv2d_forward_and_both_gradients(device: str, shape: tuple[int, ...]) -> None:
    n, c, h, w, oc, kh, kw, pad = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((oc, c, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(oc, dtype=np.float32)
    tx, tw = Tensor(x, device=device, requires_grad=True), Tensor(wt, device=device, requires_grad=True)
    out = tx.conv2d(tw, Tensor(bias, device=device), padding=pad).relu()
    g = rng.standard_normal(out.shape, dtype=np.float32)
    (out * Tensor(g, device=device)).sum().backward()
    px = torch.tensor(x.astype(np.float64), requires_grad=True)
    pw = torch.tensor(wt.astype(np.float64), requires_grad=True)
    ref = torch.nn.functional.conv2d(px, pw, torch.tensor(bias.astype(np.float64)), padding=pad).relu()
    (ref * torch.tensor(g.astype(np.float64))).sum().backward()
    assert px.grad is not None and pw.grad is not None
    close(out.numpy(), ref.detach().numpy(), c * kh * kw)
    close(tx.grad.numpy(), px.grad.numpy(), oc * kh * kw)  # type: ignore[union-attr]
    close(tw.grad.numpy(), pw.grad.numpy(), n * out.shape[2] * out.shape[3])  # type: ignore[union-attr]


def matmul_kernel(m: int, k: int, n: int) -> Kernel:
    a, b = Tensor.empty(m, k), Tensor.empty(k, n)
    (si,) = [s for s in create_schedule([(a @ b).lazydata]) if s.kind == "kernel"]
    return Kernel(si.ast, Device["CPU"].renderer.caps)


def test_matmul_tile_is_vectors_of_the_widest_width_with_the_n_operand_packed() -> None:
    caps = Device["CPU"].renderer.caps
    k = cpu_tiles(matmul_kernel(256, 256, 256))
    assert k is not None and k.vector_axis() is not None
    assert k.full_shape[k.vector_axis()] == max(caps.vector_widths)  # type: ignore[index]
    assert k.packs == [2], k.applied_opts  # B, broadcast along M, is the operand reused by the M loop
    assert k.registers() <= caps.vector_registers
    uops, _ = lower_kernel(k)
    assert any(u.op is UOps.DEFINE_LOCAL for u in uops)
    assert any(u.op is UOps.LOAD and u.dtype is not None and u.dtype.count > 1 and u.src[0].op is UOps.DEFINE_LOCAL
               for u in uops)  # fmt: skip


def test_an_input_read_after_the_reduction_keeps_the_matmul_tile() -> None:
    """A residual added to a matmul, or the weight a fused SGD step updates with it, is read once per output after the
    reduction: it varies along both tile axes, but the kernel still gets the matmul's register tile (it fell back to
    a plain upcast at half the speed)."""
    a, b, c = Tensor.empty(256, 256), Tensor.empty(256, 256), Tensor.empty(256, 256)
    plain = cpu_tiles(matmul_kernel(256, 256, 256))
    assert plain is not None
    for out in (a @ b + c, c - 0.1 * (a.T @ b)):
        (si,) = [s for s in create_schedule([out.lazydata]) if s.kind == "kernel"]
        k = cpu_tiles(Kernel(si.ast, Device["CPU"].renderer.caps))
        assert k is not None and k.vector_axis() is not None, si.ast
        assert k.registers() == plain.registers() and len(k.packs) == 1, k.applied_opts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (33, 65, 17), (1, 7, 1023), (96, 1023, 40)])
def test_matmul_with_an_elementwise_epilogue(device: str, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)
    ta, tb, tc = (Tensor(v, device=device) for v in (a, b, c))
    ref = a.astype(np.float64) @ b
    close((ta @ tb + tc).numpy(), ref + c, k)
    close((tc - 0.5 * (ta @ tb)).relu().numpy(), np.maximum(c - 0.5 * ref, 0), k)
    close((ta @ tb + tc.T.contiguous().T).numpy(), ref + c, k)


def test_a_tile_that_does_not_divide_the_rows_pads_them() -> None:
    """A register tile need not divide the rows it tiles: over 1024 rows the best tile (6 rows of two 8-lane vectors
    with AVX2: 12 accumulators, where 4 rows gave 8) pads the rows to a multiple (`OptOps.PAD`), as big as the tile
    of 1020 rows, which 2 to 6 divide. The padded rows read nothing (masked loads) and store nothing."""
    k = cpu_tiles(matmul_kernel(1024, 64, 1024))
    exact = cpu_tiles(matmul_kernel(1020, 64, 1024))
    assert k is not None and exact is not None
    assert k.registers() == exact.registers(), (k.applied_opts, exact.applied_opts)
    pads = [o for o in k.applied_opts if o.op is OptOps.PAD]
    assert pads and 1024 % pads[0].amount and k.applied_opts.index(pads[0]) == 0, k.applied_opts
    assert not [o for o in exact.applied_opts if o.op is OptOps.PAD], exact.applied_opts
    uops, _ = lower_kernel(k)
    stores = [u for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL]
    assert any(len(u.src) == 4 for u in stores) and any(len(u.src) == 3 for u in stores)  # the padded rows' are gated
    # a renderer whose compiler does not keep the gated rows cheap (LLVM: `padded_tiles` off) gets tiles that divide
    assert not Device["LLVM"].renderer.caps.padded_tiles and Device["CPU"].renderer.caps.padded_tiles
    plain = matmul_kernel(1024, 64, 1024)
    unpadded = cpu_tiles(Kernel(plain.ast, replace(plain.caps, padded_tiles=False)))
    assert unpadded is not None and not [o for o in unpadded.applied_opts if o.op is OptOps.PAD]
    # nor a convolution whose taps unroll (each lane's masked index would be worked out symbolically: seconds of
    # code generation in a CNN step)
    conv = Tensor.empty(130, 8, 10, 10).conv2d(Tensor.empty(16, 8, 3, 3))
    for si in [s for s in create_schedule([conv.lazydata]) if s.kind == "kernel"]:
        tiled = cpu_tiles(Kernel(si.ast, Device["CPU"].renderer.caps))
        assert tiled is None or not [o for o in tiled.applied_opts if o.op is OptOps.PAD], tiled.applied_opts


def test_pad_applies_to_an_output_axis_first_and_only_where_it_is_needed() -> None:
    k = matmul_kernel(100, 64, 96)
    with pytest.raises(KernelOptError):
        k.copy().apply_opt(Opt(OptOps.PAD, 2, 6))  # axis 2 is the reduce
    with pytest.raises(KernelOptError):
        k.copy().apply_opt(Opt(OptOps.PAD, 1, 8))  # 96 rows are a multiple of 8 already
    with pytest.raises(KernelOptError):
        k.copy().apply_opt(Opt(OptOps.PAD, 0, 128))  # more than the axis holds
    upcast = k.copy()
    upcast.apply_opt(Opt(OptOps.UPCAST, 1, 8))
    with pytest.raises(KernelOptError):
        upcast.apply_opt(Opt(OptOps.PAD, 0, 6))  # after another optimisation
    padded = k.copy()
    padded.apply_opt(Opt(OptOps.PAD, 0, 6))
    assert padded.full_shape[:2] == (102, 96)


@pytest.mark.parametrize("device", DEVICES)
def test_padded_tiles_compute_the_same_values(device: str) -> None:
    """Row counts that no tile divides (a prime, one past a power of two, a few rows more than a tile), plain,
    batched, with an epilogue that reads along the padded rows, and assigned in place over an operand."""
    rng = np.random.default_rng(7)
    for m, k, n in [(1024, 64, 256), (1021, 33, 64), (97, 64, 128), (130, 17, 64), (257, 128, 32)]:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        c = rng.standard_normal((m, n), dtype=np.float32)
        ta, tb, tc = (Tensor(v, device=device) for v in (a, b, c))
        ref = a.astype(np.float64) @ b
        close((ta @ tb).numpy(), ref, k)
        close((ta @ tb + tc).numpy(), ref + c, k)
    a3, b3 = rng.standard_normal((3, 130, 64), dtype=np.float32), rng.standard_normal((3, 64, 64), dtype=np.float32)
    close((Tensor(a3, device=device) @ Tensor(b3, device=device)).numpy(), a3.astype(np.float64) @ b3, 64)
    x, w = rng.standard_normal((130, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    tx = Tensor(x, device=device).contiguous().realize()
    tx.assign(tx @ Tensor(w, device=device)).realize()
    close(tx.numpy(), x.astype(np.float64) @ w, 64)


def test_pack_is_refused_where_it_cannot_pay_or_fit() -> None:
    k = matmul_kernel(256, 256, 256)  # loops M, N: B depends on the innermost, so nothing inside reuses its tile
    with pytest.raises(KernelOptError):
        k.copy().apply_opt(Opt(OptOps.PACK, 2, 0))
    k.copy().apply_opt(Opt(OptOps.PACK, 1, 0))  # A's row tile is reused by the N loop: allowed
    with pytest.raises(KernelOptError):  # the output is not an input
        k.copy().apply_opt(Opt(OptOps.PACK, 0, 0))
    big = matmul_kernel(64, 1 << 18, 64)  # A's tile for one output row would be 1 MiB, over pack_max
    with pytest.raises(KernelOptError):
        big.apply_opt(Opt(OptOps.PACK, 1, 0))


def test_swap_exchanges_output_loops_only() -> None:
    k = matmul_kernel(64, 32, 128)
    swapped = k.copy()
    swapped.apply_opt(Opt(OptOps.SWAP, 0, 1))
    assert swapped.full_shape[:2] == (128, 64)
    with pytest.raises(KernelOptError):
        k.copy().apply_opt(Opt(OptOps.SWAP, 0, 2))  # axis 2 is the reduce


def test_row_sum_vectorizes_along_the_reduce_axis_and_combines_lanes() -> None:
    a = np.random.default_rng(2).standard_normal((9, 4096), dtype=np.float32)
    t = Tensor(a)
    close(t.sum(1).numpy(), a.astype(np.float64).sum(1), 4096)
    np.testing.assert_array_equal(t.max(1).numpy(), a.max(1))
    (si,) = [s for s in create_schedule([t.sum(1).lazydata]) if s.kind == "kernel"]
    from lazy.codegen.program import build_kernel

    k = build_kernel(si.ast, Device["CPU"].renderer)
    assert k.vector_axis() is not None, k


def conv_kernel(caps: Capabilities, shape: tuple[int, ...] = (2, 64, 56, 56, 64, 3, 1)) -> Kernel:
    """A convolution's forward kernel (batch, input channels, height, width, output channels, taps, padding; by
    default the bench's at batch 2), as the CPU renderer with `caps` builds it."""
    n, c, h, w, oc, taps, pad = shape
    x, wt = Tensor.empty(n, c, h, w), Tensor.empty(oc, c, taps, taps)
    kernels = [s for s in create_schedule([x.conv2d(wt, padding=pad).lazydata]) if s.kind == "kernel"]
    return Kernel(kernels[-1].ast, caps)  # (with padding, the first pads the input)


def loop_body(uops: list[UOp]) -> list[UOp]:
    """The uops of the innermost reduce loop (a RANGE's argument: (axis, is a reduce loop))."""
    start = max(i for i, u in enumerate(uops) if u.op is UOps.RANGE and u.arg[1])
    end = next(i for i, u in enumerate(uops) if u.op is UOps.ENDRANGE and u.src[0] is uops[start])
    return uops[start:end]


@pytest.mark.parametrize("widths,registers", [((4, 8), 16), ((4, 8, 16), 32), ((4,), 32)])
@pytest.mark.parametrize("shape", [(2, 64, 56, 56, 64, 3, 1), (512, 32, 24, 24, 32, 5, 0), (512, 64, 12, 12, 64, 3, 0)])
def test_convolution_tile_reuses_its_loads_on_every_vector_width(
    widths: tuple[int, ...], registers: int, shape: tuple[int, ...]
) -> None:
    """The register tile is an outer product: each vector it loads and each value it broadcasts feeds several
    multiply-adds. With 8 lanes the output width (56 = 7 x 8) is a reuse axis of whole vectors too, but paired with
    the output height (the input varies along both) every multiply-add loaded its own vector: 27 loads for 24 FMAs,
    0.29x PyTorch's speed on an AVX2 machine. The CNN step's convolutions at batch 512: with 16 lanes the most
    accumulators came from lanes along the batch, each vector gathered from 16 images (16 loads per multiply-add,
    5 GFLOP/s and a 4.7 s train step on an AVX-512 machine); lanes along the output channels load whole vectors."""
    caps = replace(Device["CPU"].renderer.caps, vector_widths=widths, vector_registers=registers)
    k = cpu_tiles(conv_kernel(caps, shape))
    assert k is not None and k.vector_axis() is not None, k
    body = loop_body(lower_kernel(k)[0])
    loads = sum(u.op is UOps.LOAD for u in body)
    fmas = sum(u.op is UOps.ALU and u.arg is Ops.MULACC for u in body)
    assert fmas >= 8 and 4 * loads <= 3 * fmas, (k.applied_opts, loads, fmas)


def test_packed_tiles_are_copied_a_vector_at_a_time() -> None:
    """A pack whose source is contiguous along the tile's innermost axis copies whole vectors, not a scalar loop that
    only an optimizing compiler would vectorize (a convolution's input-gradient kernel spent a third of its time in
    such a loop at -O1). (Masked sources copy element by element: the convolution tests above run those.)"""
    caps = Device["CPU"].renderer.caps
    uops, _ = lower_kernel(cpu_tiles(matmul_kernel(256, 256, 256)))  # type: ignore[arg-type]
    copies = [u for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_LOCAL]
    assert copies and all(u.src[2].dtype.count == max(caps.vector_widths) for u in copies), copies
    assert all(u.src[2].src[0].op is UOps.DEFINE_GLOBAL for u in copies)


def test_micro_kernel_operands_stay_in_registers(tmp_path: pathlib.Path) -> None:
    """The C renderer holds a micro-kernel's operand vectors in registers (`LAZY_HOLDn`): gcc otherwise folds each
    load into every FMA that uses it, one load per FMA, more than the load ports take (matmul on a Zen 3 core: 51
    GFLOP/s against 71 held). Read in the assembly: no FMA of the kernel takes a memory operand. And its indices are
    64-bit (`Capabilities.wide_index`): no sign extension of a 32-bit index anywhere (under -fwrapv gcc extended
    three of them in every step of the inner loop)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or "fma" not in cpu_flags():
        pytest.skip(f"reads x86 assembly with FMA instructions; this machine is {platform.machine()} {describe()}")
    compiler = Device["CPU"].compiler
    src = get_program(matmul_kernel(256, 256, 256).ast, Device["CPU"].renderer).src
    assert "LAZY_HOLD" in src
    out = tmp_path / "matmul.s"
    for flags in (compiler.flags, compiler.for_program(get_program(matmul_kernel(256, 256, 256).ast,
                                                                   Device["CPU"].renderer)).flags):  # fmt: skip
        cmd = [compiler.cc, *[f for f in flags if f != "-shared"], "-S", "-x", "c", "-", "-o", str(out)]
        subprocess.run(cmd, input=src, capture_output=True, text=True, check=True)
        asm = out.read_text().splitlines()
        # the instructions without their comments (clang spells each FMA out after a "#", in parentheses)
        fmas = [line.split("#")[0].strip() for line in asm if re.search(r"\bvfmadd\w*ps\b", line)]
        assert fmas and not [f for f in fmas if "(" in f], (flags, fmas)
        assert not [line for line in asm if re.search(r"\b(movslq|cltq|movsxd)\b", line)], (flags, src)


TRANSPOSES = {  # (shape, permutation, inputs): the inputs are contiguous along an axis the output is strided in
    "2-d, two inputs": ((64, 48), (1, 0), 2),
    "NCHW to NHWC, two inputs": ((3, 16, 5, 8), (0, 2, 3, 1), 2),
    "rows of 9: the output's lanes stay": ((40, 9), (1, 0), 2),
    "one input: the output's lanes stay": ((64, 48), (1, 0), 1),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSPOSES)
def test_a_transposing_elementwise_kernel_loads_its_inputs_as_vectors(device: str, case: str) -> None:
    """Lanes go where most buffers are contiguous (`elementwise_lanes`): a transpose of two inputs loads each as
    vectors along their rows and stores the output lane by lane, instead of gathering every input a value at a time
    (a 2048 x 2048 `a.T * 2 + b.T`: 44 -> 12 ms here); with one input the output keeps the lanes."""
    shape, perm, inputs = TRANSPOSES[case]
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    a, b = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    out = ((ta > 0).where(tb, 0) if inputs == 2 else ta * 2).permute(*perm).contiguous()
    (ast,) = [si.ast for si in create_schedule([out.lazydata]) if si.ast.op is Ops.SINK]
    k = build_kernel(ast, Device[device].renderer)
    lanes = k.vector_axis()
    assert lanes is not None, k.applied_opts
    strides = [k.st_of(buf).real_strides()[lanes] for buf in k.membufs]  # the output's first
    if inputs == 2 and shape[-1] % 4 == 0:  # rows holding whole vectors: lanes along them
        assert strides[0] != 1 and strides[1:] == [1, 1], (k.applied_opts, strides)
    else:  # one input, or rows of 9: the output keeps the lanes
        assert strides[0] == 1, (k.applied_opts, strides)
    want = (np.where(a > 0, b, 0) if inputs == 2 else a * 2).transpose(perm)
    np.testing.assert_array_equal(out.numpy(), want)

"""Tensor cores in core's code generator: `FragmentLayout`/`TensorCore` declarations, `OptOps.TC` (which kernels it
takes and refuses), the lowering to WMMA UOps, and the scheduling that keeps a half matmul's operands half."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lazy import Tensor, dtypes
from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import lower_kernel
from lazy.codegen.opt_gpu import gpu_optimizations
from lazy.codegen.uops import UOps
from lazy.ops import LazyOp, MemBuffer, Ops
from lazy.pydevice import THREAD_CAPS
from lazy.renderer import FragmentLayout, TensorCore
from lazy.shape import ShapeTracker, View

# PTX mma.m16n8k16 with half inputs and a float accumulator, as a plugin declares it
MMA = TensorCore(
    "mma.m16n8k16", (16, 8, 16), 32, dtypes.float16, dtypes.float32,
    a=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1", "e2")),
    b=FragmentLayout(("e0", "l0", "l1", "e1"), ("l2", "l3", "l4")),
    c=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1")),
)  # fmt: skip
CAPS = dataclasses.replace(THREAD_CAPS, tensor_cores=(MMA,))


def kernel_ast(out: Tensor):
    items = [si for si in out.schedule() if si.ast.op is Ops.SINK]
    assert len(items) == 1, f"expected one kernel, got {len(items)}"
    return items[0].ast


def matmul_ast(m: int, k: int, n: int, dtype_in=dtypes.float16, dtype_out=dtypes.float32):
    """The kernel `Tensor.dot` schedules on a device whose tensor cores take `dtype_in`: (m, k) @ (k, n) read in
    `dtype_in`, products and sum in float32, the result cast to `dtype_out`."""

    def factor(idx: int, strides: tuple[int, int, int]) -> LazyOp:
        load = LazyOp(Ops.LOAD, (), MemBuffer(idx, dtype_in, ShapeTracker((View.create((m, n, k), strides),))))
        return load if dtype_in == dtypes.float32 else LazyOp(Ops.CAST, (load,), dtypes.float32)

    total = LazyOp(Ops.SUM, (LazyOp(Ops.MUL, (factor(1, (k, 0, 1)), factor(2, (0, 1, n)))),), (2,))
    if dtype_out != dtypes.float32:
        total = LazyOp(Ops.CAST, (total,), dtype_out)
    out = MemBuffer(0, dtype_out, ShapeTracker.from_shape((m, n, 1)))
    return LazyOp(Ops.SINK, (LazyOp(Ops.STORE, (total,), out),))


def test_layout_coords_follow_the_bits() -> None:
    # PTX's formulas for operand A: row = lane/4 + 8*(e/2 % 2), col = 2*(lane % 4) + e % 2 + 8*(e/4)
    for lane in range(32):
        for e in range(8):
            assert MMA.a.coords(lane, e) == (lane // 4 + 8 * (e // 2 % 2), 2 * (lane % 4) + e % 2 + 8 * (e // 4))
    assert (MMA.a.elements, MMA.b.elements, MMA.c.elements) == (8, 4, 4)
    # every element of each operand tile is held by exactly one (lane, element)
    for layout in (MMA.a, MMA.b, MMA.c):
        cells = {layout.coords(lane, e) for lane in range(32) for e in range(layout.elements)}
        assert len(cells) == layout.shape[0] * layout.shape[1]


@pytest.mark.parametrize(
    "rows, cols, message",
    [(("l0", "l0"), ("e0",), "distinct"), (("l1",), ("e0",), "l0.."), (("x0",), ("e0",), "distinct")],
)
def test_layout_rejects_bad_bits(rows, cols, message) -> None:
    with pytest.raises(ValueError, match=message):
        FragmentLayout(rows, cols)


def test_tensor_core_checks_its_layouts_cover_the_tiles() -> None:
    with pytest.raises(ValueError, match="layout b covers"):
        dataclasses.replace(MMA, b=FragmentLayout(("e0", "l0", "l1"), ("l2", "l3", "l4")))  # an 8x8 B for 16x8x16


def test_a_half_matmul_converts_its_operands_first_without_tensor_cores() -> None:
    # PYTHON has no tensor cores: the casts to float32 are realized before the broadcast (float32 vector code reads
    # them); a device whose tensor cores take half keeps them in the kernel (tests/core/test_emulate.py)
    a = Tensor.empty(32, 32, dtype=dtypes.float16, device="PYTHON").realize()
    b = Tensor.empty(32, 16, dtype=dtypes.float16, device="PYTHON").realize()
    items = [si for si in a.matmul(b, dtype=dtypes.float32).schedule() if si.ast.op is Ops.SINK]
    assert len(items) == 3


def test_tc_splits_m_n_k_into_tc_axes_last() -> None:
    k = Kernel(matmul_ast(64, 32, 16), CAPS)
    k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))
    assert k.tensor_core is MMA
    assert k.kinds[-3:] == [Axis.TC] * 3 and k.full_shape[-3:] == (16, 8, 16)
    assert k.full_shape[:3] == (4, 2, 2)  # M/16, N/8, K/16
    uops, low = lower_kernel(k)
    wmma = [u for u in uops if u.op is UOps.WMMA]
    assert len(wmma) == 1 and wmma[0].arg is MMA
    a, b, c = wmma[0].src
    assert (a.dtype, b.dtype, c.dtype) == (dtypes.float16.vec(8), dtypes.float16.vec(4), dtypes.float32.vec(4))
    assert low.local_size == [32, 1, 1]  # one warp per work group: lanes are the innermost thread ids
    assert sum(u.op is UOps.STORE for u in uops) == 4  # each lane stores its 4 elements of the C fragment


@pytest.mark.parametrize(
    "build, why",
    [
        (lambda: matmul_ast(32, 24, 16), "multiple of K"),  # K = 24 is not a multiple of 16
        (lambda: matmul_ast(32, 32, 12), "multiple of 8"),  # N = 12
        (lambda: matmul_ast(32, 32, 16, dtype_in=dtypes.float32), "sum of products of dtypes.half"),  # float32 in
        (lambda: matmul_ast(32, 32, 16, dtype_out=dtypes.float16), None),
    ],
)  # fmt: skip
def test_tc_refuses_what_does_not_fit(build, why) -> None:
    k = Kernel(build(), CAPS)
    if why is None:  # a half result: the sum is still float32 (cast after), so the core takes it
        k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))
        return
    with pytest.raises(KernelOptError, match=why):
        k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))


def test_tc_comes_first_and_excludes_group_and_pack() -> None:
    ast = matmul_ast(64, 64, 32)
    k = Kernel(ast, CAPS)
    k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
    with pytest.raises(KernelOptError, match="first"):
        k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))
    k = Kernel(ast, CAPS)
    k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))
    with pytest.raises(KernelOptError, match="tensor core"):
        k.apply_opt(Opt(OptOps.GROUP, k.axes(Axis.REDUCE)[0], 2))
    with pytest.raises(KernelOptError, match="fragments"):
        k.apply_opt(Opt(OptOps.PACK, 1, 0))
    with pytest.raises(KernelOptError, match="no tensor core 3"):
        Kernel(ast, CAPS).apply_opt(Opt(OptOps.TC, 2, 3))
    with pytest.raises(KernelOptError, match="no tensor core"):
        Kernel(ast, THREAD_CAPS).apply_opt(Opt(OptOps.TC, 2, 0))


def test_hand_coded_optimizations_pick_the_tensor_core() -> None:
    k = gpu_optimizations(Kernel(matmul_ast(64, 64, 64), CAPS))
    assert k.applied_opts[0].op is OptOps.TC
    assert k.threads() <= CAPS.local_size_max and k.threads() % 32 == 0
    # float32 operands: no tensor core fits, the usual GPU tiles
    plain = matmul_ast(64, 64, 64, dtype_in=dtypes.float32)
    assert all(o.op is not OptOps.TC for o in gpu_optimizations(Kernel(plain, CAPS)).applied_opts)


def test_values_of_fragments_reference_on_host() -> None:
    """The lowering's index arithmetic, checked without any interpreter: the load indices each lane's A fragment
    reads, evaluated for every lane, cover the 16x16 tile of A exactly once per reduce step (a layout applied to the
    wrong axis, or a lane bit dropped, repeats or misses elements)."""
    k = Kernel(matmul_ast(16, 16, 8), CAPS)
    k.apply_opt(Opt(OptOps.TC, k.axes(Axis.REDUCE)[-1], 0))
    uops, _ = lower_kernel(k)
    (wmma,) = [u for u in uops if u.op is UOps.WMMA]
    seen = np.zeros(16 * 16, int)
    for lane in range(32):
        for load in wmma.src[0].src:
            seen[_evaluate(load.src[1], lane)] += 1
    assert (seen == 1).all()


def _evaluate(uop, lane: int) -> int:
    """An index UOp's value for one lane (SPECIAL lidx0 = lane, every other thread id 0)."""
    if uop.op is UOps.CONST:
        return uop.arg
    if uop.op is UOps.SPECIAL:
        return lane if uop.arg[0] == "lidx0" else 0
    a, b = (_evaluate(s, lane) for s in uop.src)
    return {Ops.ADD: a + b, Ops.MUL: a * b, Ops.IDIV: a // b if b else 0, Ops.MOD: a % b if b else 0}[uop.arg]

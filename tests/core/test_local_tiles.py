"""Local-memory tiles (`OptOps.PACK` on a device with work groups): the group's items share each copy, barriers around
it, a tile per reduce step. Against numpy on the PYTHON device's thread mode (it runs work groups in lockstep at each
barrier, with local memory per group) and on CL (PoCL), the tiles forced by explicit opts over odd shapes, batched and
transposed operands and a padded convolution; the heuristics use them on GPU-kind devices only."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from lazy import Device, Tensor
from lazy.codegen.heuristics import reuse_axes
from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import lower_kernel
from lazy.codegen.opt_gpu import gpu_optimizations
from lazy.codegen.program import get_program
from lazy.codegen.uops import UOps
from lazy.engine.realize import CompiledRunner, ExecItem
from lazy.ops import LazyOp, Ops
from lazy.pydevice import THREAD_CAPS
from lazy.renderer import Capabilities


def tiled_opts(ast: LazyOp, caps: Capabilities) -> list[Opt]:
    """A K-block (the last reduce axis unrolled: all of a short one, else by a small divisor), a work group over
    the two innermost reuse axes (a divisor up to 8, or the whole axis when none divides), every input packed that
    can be: what a GPU's tiles look like, on any shape."""
    k = Kernel(ast, caps)
    reduce = k.axes(Axis.REDUCE)
    if reduce:
        size = k.full_shape[reduce[-1]]
        assert isinstance(size, int)
        if size <= 4 or (block := next((b for b in (4, 3, 2) if size % b == 0), 0)):
            k.apply_opt(Opt(OptOps.UNROLL, reduce[-1], 0 if size <= 4 else block))
    for axis in sorted(reuse_axes(k)[-2:], reverse=True):  # the later axis first: the earlier keeps its index
        size = k.full_shape[axis]
        assert isinstance(size, int)
        amount = next((a for a in (8, 4, 2) if size % a == 0 and size > a), 0)
        if amount or size <= 64:
            k.apply_opt(Opt(OptOps.LOCAL, axis, amount))
    for buf in k.membufs[1:]:
        try:
            k.apply_opt(Opt(OptOps.PACK, buf.idx, 0))
        except KernelOptError:
            pass
    assert k.packs, f"no operand of {k} is shared by a group's items"
    assert all((plan := k.pack_plan(idx)) is not None and plan.shared for idx in k.packs)
    return k.applied_opts


def run_tiled(out: Tensor, device: str) -> np.ndarray:
    """Realize `out` (inputs realized) with its one reduce kernel forced to local tiles."""
    items = [si for si in out.schedule() if si.ast.op is Ops.SINK]
    for si in items:
        has_reduce = any(n.op in (Ops.SUM,) for n in si.ast.toposort())
        opts = tiled_opts(si.ast, Device[device].renderer.caps) if has_reduce else None
        spec = get_program(si.ast, Device[device].renderer, opts)
        ExecItem(CompiledRunner(spec, Device[device]), list(si.bufs), dict(si.var_vals)).run()
    return items[-1].bufs[0].numpy().reshape(out.shape)


def close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5 * max(1.0, k**0.5), atol=1e-5 * max(1.0, k**0.5))


Case = Callable[[str], tuple[Tensor, np.ndarray, int]]


def matmul(m: int, k: int, n: int, batch: int = 0, transposed: bool = False) -> Case:
    def case(device: str) -> tuple[Tensor, np.ndarray, int]:
        rng = np.random.default_rng(m * 1000 + k * 10 + n)
        lead = (batch,) if batch else ()
        a = rng.standard_normal((*lead, m, k), dtype=np.float32)
        b = rng.standard_normal((*lead, n, k) if transposed else (*lead, k, n), dtype=np.float32)
        tb = Tensor(b, device=device).realize()
        rhs = tb.transpose(-1, -2) if transposed else tb
        want = a.astype(np.float64) @ (np.swapaxes(b, -1, -2) if transposed else b)
        return Tensor(a, device=device).realize() @ rhs, want, k

    return case


def conv2d(device: str) -> tuple[Tensor, np.ndarray, int]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 6, 8), dtype=np.float32)
    w = rng.standard_normal((8, 3, 3, 3), dtype=np.float32)
    out = Tensor(x, device=device).realize().conv2d(Tensor(w, device=device).realize(), padding=1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    return out, np.einsum("nchwij,ocij->nohw", win, w), 27


PYTHON_CASES = {"7x17x33": matmul(7, 17, 33), "16x12x8": matmul(16, 12, 8), "1x33x17": matmul(1, 33, 17),
                "batched": matmul(5, 8, 6, batch=3), "transposed": matmul(8, 6, 12, transposed=True),
                "conv2d_pad1": conv2d}  # fmt: skip


@pytest.mark.parametrize("name", PYTHON_CASES)
def test_local_tiles_on_python_threads(name: str) -> None:
    out, want, k = PYTHON_CASES[name]("PYTHON")
    assert Device["PYTHON"].renderer.caps.has_local, "the PYTHON device runs in thread mode here"
    close(run_tiled(out, "PYTHON"), want, k)


CL_CASES = {"17x33x7": matmul(17, 33, 7), "64x64x64": matmul(64, 64, 64), "1x1023x64": matmul(1, 1023, 64),
            "batched_transposed": matmul(33, 16, 24, batch=2, transposed=True), "conv2d_pad1": conv2d}  # fmt: skip


@pytest.mark.devices("CL")
@pytest.mark.parametrize("name", CL_CASES)
def test_local_tiles_on_cl(name: str) -> None:
    out, want, k = CL_CASES[name]("CL")
    close(run_tiled(out, "CL"), want, k)


def matmul_ast(n: int, device: str = "PYTHON") -> LazyOp:
    a, b = Tensor.empty(n, n, device=device), Tensor.empty(n, n, device=device)
    (si,) = [si for si in (a @ b).schedule() if si.ast.op is Ops.SINK]
    return si.ast


@pytest.mark.devices("CL")
def test_cl_source_declares_local_tiles_and_barriers() -> None:
    ast = matmul_ast(64, "CL")
    renderer = Device["CL"].renderer
    src = get_program(ast, renderer, tiled_opts(ast, renderer.caps)).src
    assert "__local float pack1[" in src and "__local float pack2[" in src, src
    # refilled per reduce step: a barrier before the copy (the last block read) and one after (the block written)
    loop = src.index("for (int ridx")
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2 and src.index("barrier(") > loop, src
    assert src.index("__local float pack1[") < loop, "local memory is declared at the kernel's outermost scope"
    plain = get_program(ast, renderer, []).src
    assert "__local" not in plain and "barrier(" not in plain


def test_tile_covers_the_groups_reads_and_refills_per_reduce_step() -> None:
    k = Kernel(matmul_ast(16), THREAD_CAPS)
    for opt in tiled_opts(matmul_ast(16), THREAD_CAPS):
        k.apply_opt(opt)
    a_plan, b_plan = k.pack_plan(1), k.pack_plan(2)
    assert a_plan is not None and b_plan is not None
    # A (M x K): the group's M items times the K-block; B (K x N): the K-block times the group's N items
    assert {k.kinds[i] for i in a_plan.axes} == {Axis.LOCAL, Axis.UNROLL} and a_plan.count == 8 * 4
    assert {k.kinds[i] for i in b_plan.axes} == {Axis.LOCAL, Axis.UNROLL} and b_plan.count == 4 * 8
    assert a_plan.after == b_plan.after == 0, "after the reduce loop opens: a tile per K-block"
    uops, _ = lower_kernel(k)
    assert sum(u.op is UOps.BARRIER for u in uops) == 2
    assert sum(u.op is UOps.DEFINE_LOCAL for u in uops) == 2


def test_no_tile_where_no_two_items_share_an_element() -> None:
    k = Kernel(matmul_ast(16), THREAD_CAPS)
    k.apply_opt(Opt(OptOps.UNROLL, 2, 4))  # a K-block of 4
    k.apply_opt(Opt(OptOps.LOCAL, 1, 4))  # items along N only: B's elements are each read by one item of a group
    with pytest.raises(KernelOptError, match="not reused"):
        k.apply_opt(Opt(OptOps.PACK, 2, 0))
    k.apply_opt(Opt(OptOps.PACK, 1, 0))  # A is read by all of them
    assert k.packs == [1]


def test_heuristics_tile_gpu_kind_devices_only() -> None:
    gpu = gpu_optimizations(Kernel(matmul_ast(1024), THREAD_CAPS))
    assert gpu.packs and all((p := gpu.pack_plan(i)) is not None and p.shared for i in gpu.packs), gpu
    assert len(gpu.axes(Axis.LOCAL)) == 2, gpu
    # PoCL (serial work groups): measured slower with them, so not used there
    pocl = gpu_optimizations(Kernel(matmul_ast(1024), dataclasses.replace(THREAD_CAPS, serial_work_groups=True)))
    assert not pocl.packs, pocl


def test_search_offers_pack_on_work_group_devices() -> None:
    from lazy.codegen.search import candidate_opts

    packs = {c.axis for c in candidate_opts(Kernel(matmul_ast(16), THREAD_CAPS)) if c.op is OptOps.PACK}
    assert packs == {1, 2}

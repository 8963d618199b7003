"""From a kernel AST to a `ProgramSpec`: choose optimisations (heuristics, or BEAM search when `LAZY_BEAM`),
lower to UOps and render with the device's renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy.codegen.heuristics import cpu_tiles, reuse_axes, tile_optimizations
from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps
from lazy.codegen.lowerer import estimate_ops, lower_kernel
from lazy.codegen.opt_gpu import gpu_optimizations
from lazy.codegen.opt_reduce import reduce_optimizations
from lazy.codegen.uops import pretty
from lazy.device import ProgramSpec
from lazy.helpers import DEBUG, NOOPT, prod, to_function_name
from lazy.ops import LazyOp
from lazy.symbolic import Variable

if TYPE_CHECKING:
    from lazy.renderer import Renderer


def hand_coded_optimizations(k: Kernel) -> Kernel:
    """What a kernel gets without BEAM: work-group devices their own path; elsewhere matmul-like kernels (an input
    broadcast along an output axis) register and cache tiles, other reductions vector lanes and unrolling."""
    if k.caps.has_local:
        return gpu_optimizations(k)
    if not k.reduceops:
        return elementwise_lanes(k)
    if not reuse_axes(k):
        return reduce_optimizations(k)
    return cpu_tiles(k) or tile_optimizations(k)


def elementwise_lanes(k: Kernel) -> Kernel:
    """An elementwise kernel's innermost output axis as vector lanes of the widest width the kernel allows: explicit
    vector code where the compiler would not vectorize the loop itself (a polynomial exp2's selects and bit casts)."""
    globals_ = k.axes(Axis.GLOBAL)
    if not globals_:
        return k
    axis, size = globals_[-1], k.full_shape[globals_[-1]]
    for width in sorted(k.caps.vector_widths, reverse=True):
        trial = k.applied(Opt(OptOps.UPCAST, axis, width)) if isinstance(size, int) and size % width == 0 else None
        if trial is not None and trial.vector_axis() is not None:
            return trial
    return k


def build_kernel(ast: LazyOp, renderer: Renderer, opts: list[Opt] | None = None) -> Kernel:
    k = Kernel(ast, renderer.caps)
    if opts is not None:
        for opt in opts:
            k.apply_opt(opt)
        return k
    if NOOPT:
        return k
    return hand_coded_optimizations(k)


def kernel_name(k: Kernel) -> str:
    prefix = "r" if k.reduceops else "E"
    return to_function_name(f"{prefix}_" + "_".join(str(s) if isinstance(s, int) else "v" for s in k.full_shape))


def get_program(ast: LazyOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """Lower and render one kernel AST for `renderer`'s device."""
    k = build_kernel(ast, renderer, opts)
    uops, lowerer = lower_kernel(k)
    name = kernel_name(k)
    if DEBUG >= 5:
        print(pretty(uops))
    src = renderer.render(name, uops)
    if DEBUG >= 4:
        print(src)
    membufs = k.membufs
    mem = sum(prod(st.shape) * b.dtype.itemsize for b, st in zip(k.bufs, k.sts) if b in membufs)
    vars_: list[Variable] = lowerer.symbolic_vars
    return ProgramSpec(name=name, src=src, device=renderer.device, global_size=lowerer.global_size,
                       local_size=lowerer.local_size, vars=vars_, outs=[0],
                       ins=[b.idx for b in membufs if b.idx != 0], op_estimate=estimate_ops(ast, k.full_shape),
                       mem_estimate=mem, core_split=lowerer.core_split, uops=uops)  # fmt: skip

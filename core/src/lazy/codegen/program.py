"""From a kernel AST to a `ProgramSpec`: choose optimisations (heuristics, or BEAM search when `LAZY_BEAM`),
lower to UOps and render with the device's renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import estimate_ops, lower_kernel
from lazy.codegen.uops import pretty
from lazy.device import ProgramSpec
from lazy.helpers import DEBUG, NOOPT, prod, to_function_name
from lazy.ops import LazyOp
from lazy.symbolic import Variable

if TYPE_CHECKING:
    from lazy.renderer import Renderer


def _local_optimizations(k: Kernel) -> None:
    """Devices with work groups: few outputs and a long reduce -> a grouped reduce; otherwise group output threads."""
    out_size = prod(k.full_shape[i] for i in k.axes(Axis.GLOBAL))
    reduce_axes = k.axes(Axis.REDUCE)
    if not isinstance(out_size, int):
        return
    if k.reduceops and reduce_axes and out_size < 2048:
        size = k.full_shape[reduce_axes[-1]]
        for amount in (16, 8, 4):
            if isinstance(size, int) and size % amount == 0 and size >= 256:
                try:
                    k.apply_opt(Opt(OptOps.GROUP, reduce_axes[-1], amount))
                    return
                except KernelOptError:
                    pass
    globals_ = k.axes(Axis.GLOBAL)
    if globals_ and out_size >= 1024:  # small launches gain nothing from work groups
        size = k.full_shape[globals_[-1]]
        for amount in (32, 16, 8, 4, 2):
            if isinstance(size, int) and size % amount == 0 and size > amount:
                try:
                    k.apply_opt(Opt(OptOps.LOCAL, globals_[-1], amount))
                    return
                except KernelOptError:
                    pass


def hand_coded_optimizations(k: Kernel) -> Kernel:
    """Cheap heuristics: work groups where the device has them, register-tile matmul-like kernels, vector lanes for
    reductions with a contiguous output, unroll short inner reductions."""
    if k.caps.has_local:
        _local_optimizations(k)
    if not k.reduceops:
        return k
    full = k.full_shape
    # axes where some input is broadcast (stride 0): upcasting them reuses loaded values (matmul, conv)
    candidates = []
    for axis in k.axes(Axis.GLOBAL):
        if not isinstance(full[axis], int):
            continue
        if any(k.st_of(b).real_strides()[axis] == 0 for b in k.membufs[1:]):
            candidates.append(axis)
    out_strides = k.st_of(k.ast.src[0].arg).real_strides()
    for axis in reversed(candidates[-2:]):
        # the axis contiguous in the output becomes the vector lanes: upcast it by the widest vector the device has
        widths = sorted(k.caps.vector_widths, reverse=True) if out_strides[axis] == 1 else []
        for amount in (*widths, 4, 2):
            if full[axis] % amount == 0:
                try:
                    trial = k.copy()
                    trial.apply_opt(Opt(OptOps.UPCAST, axis, amount))
                    k = trial
                    break
                except KernelOptError:
                    pass
    if not candidates:
        _upcast_contiguous_output(k)
    reduce_axes = k.axes(Axis.REDUCE)
    if reduce_axes:
        axis = reduce_axes[-1]
        size = k.full_shape[axis]
        if isinstance(size, int) and size <= 8 and k.upcast_size() * size <= 64:
            k.apply_opt(Opt(OptOps.UNROLL, axis, 0))  # a short reduction: unroll it entirely
        elif isinstance(size, int) and size % 4 == 0 and k.upcast_size() <= 16:
            k.apply_opt(Opt(OptOps.UNROLL, axis, 4))
    return k


def _upcast_contiguous_output(k: Kernel) -> None:
    """A reduction whose output axis is contiguous in every buffer: make that axis vector lanes (column sums)."""
    globals_ = k.axes(Axis.GLOBAL)
    if not globals_ or not k.caps.vector_widths:
        return
    axis = globals_[-1]
    size = k.full_shape[axis]
    if not isinstance(size, int) or any(k.st_of(b).real_strides()[axis] not in (0, 1) for b in k.membufs):
        return
    if k.st_of(k.membufs[0]).real_strides()[axis] != 1:
        return
    for width in sorted(k.caps.vector_widths, reverse=True):
        if size % width == 0 and size // width >= 2:
            k.apply_opt(Opt(OptOps.UPCAST, axis, width))
            if size // width <= 4:  # a few vectors left: upcast them too, for independent accumulators
                k.apply_opt(Opt(OptOps.UPCAST, axis, 0))
            return


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

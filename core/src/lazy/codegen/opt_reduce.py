"""Hand-coded optimisations for reductions that reuse no operand (sums, norms, softmax passes)."""

from __future__ import annotations

from lazy.codegen.heuristics import unroll_reduce
from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps


def upcast_contiguous_output(k: Kernel) -> None:
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


def reduce_optimizations(k: Kernel) -> Kernel:
    """A reduction that reuses no operand: vector lanes along a contiguous output axis, then unroll."""
    upcast_contiguous_output(k)
    return unroll_reduce(k)

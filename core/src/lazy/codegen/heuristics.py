"""Hand-coded optimisations (what a kernel gets without `LAZY_BEAM`): which axes become register tiles, vector lanes,
unrolled reductions and work groups. `lazy.codegen.program.hand_coded_optimizations` dispatches: work-group devices to
`opt_gpu`, reductions without operand reuse to `opt_reduce`, matmul-like kernels (an input broadcast along an output
axis) to the register and cache tiling here."""

from __future__ import annotations

from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps


def reuse_axes(k: Kernel) -> list[int]:
    """Output axes along which some input is broadcast (stride 0): tiling them reuses loaded values (matmul, conv)."""
    full = k.full_shape
    return [axis for axis in k.axes(Axis.GLOBAL) if isinstance(full[axis], int)
            and any(k.st_of(b).real_strides()[axis] == 0 for b in k.membufs[1:])]  # fmt: skip


def tile_optimizations(k: Kernel) -> Kernel:
    """Register tiles for a kernel with reuse axes: the axis contiguous in the output becomes vector lanes."""
    full = k.full_shape
    candidates = reuse_axes(k)
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
    return unroll_reduce(k)


def unroll_reduce(k: Kernel) -> Kernel:
    """Unroll the innermost reduce loop: entirely when it is short, else by 4 while the tile stays small."""
    reduce_axes = k.axes(Axis.REDUCE)
    if reduce_axes:
        axis = reduce_axes[-1]
        size = k.full_shape[axis]
        if isinstance(size, int) and size <= 8 and k.upcast_size() * size <= 64:
            k.apply_opt(Opt(OptOps.UNROLL, axis, 0))  # a short reduction: unroll it entirely
        elif isinstance(size, int) and size % 4 == 0 and k.upcast_size() <= 16:
            k.apply_opt(Opt(OptOps.UNROLL, axis, 4))
    return k

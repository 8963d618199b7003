"""Hand-coded optimisations for devices with work groups and local memory (`caps.has_local`: OpenCL, CUDA, Metal,
the PYTHON device's thread mode)."""

from __future__ import annotations

from lazy.codegen.heuristics import reuse_axes, tile_optimizations
from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.opt_reduce import reduce_optimizations
from lazy.helpers import prod


def local_optimizations(k: Kernel) -> None:
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


def gpu_optimizations(k: Kernel) -> Kernel:
    """Work groups first, then the register tiling every device gets."""
    local_optimizations(k)
    if not k.reduceops:
        return k
    return tile_optimizations(k) if reuse_axes(k) else reduce_optimizations(k)

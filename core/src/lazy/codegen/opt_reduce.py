"""Hand-coded optimisations for the reduce loop: `reduce_optimizations` for reductions that reuse no operand (sums,
norms, softmax passes), and `unroll_reduce`, the reduce-loop unrolling every CPU kernel with a reduction ends with.

A reduction gets vector lanes along its output axis when that is contiguous (column sums), else along its reduce axis
when every input is contiguous or broadcast along it (row sums, the passes of softmax and layernorm): the lowerer then
keeps vector accumulators across the loop and combines their lanes after it."""

from __future__ import annotations

from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps
from lazy.codegen.lowerer import choose_vector_axis
from lazy.helpers import prod


def upcast_contiguous_output(k: Kernel) -> Kernel:
    """A reduction whose output axis is contiguous in every buffer: make that axis vector lanes (column sums)."""
    globals_ = k.axes(Axis.GLOBAL)
    if not globals_ or not k.caps.vector_widths:
        return k
    axis = globals_[-1]
    size = k.full_shape[axis]
    if not isinstance(size, int) or any(k.st_of(b).real_strides()[axis] not in (0, 1) for b in k.membufs):
        return k
    if k.st_of(k.membufs[0]).real_strides()[axis] != 1:
        return k
    for width in sorted(k.caps.vector_widths, reverse=True):
        if size % width == 0 and size // width >= 2:
            upcast = Opt(OptOps.UPCAST, axis, width)
            if size // width <= 4 and (whole := k.applied(upcast, Opt(OptOps.UPCAST, axis, 0))) is not None:
                return whole  # a few vectors left: upcast them too, for independent accumulators
            return k.applied(upcast) or k
    return k


def vector_unroll(k: Kernel, axis: int) -> Kernel | None:
    """`k` with reduce `axis` unrolled by the widest vector width that divides it, when the lowerer makes those lanes
    one vector (`choose_vector_axis` decides: contiguous loads, ops it can do on vectors); else None."""
    size = k.full_shape[axis]
    if not isinstance(size, int):
        return None
    for width in sorted(k.caps.vector_widths, reverse=True):
        if size % width != 0 or k.upcast_size() * width > k.caps.upcast_max:
            continue
        trial = k.applied(Opt(OptOps.UNROLL, axis, width))
        # the unrolled axis is the last one; the lowerer picks it only when it would be vector lanes
        if trial is not None and choose_vector_axis(trial)[0] == trial.shape_len - 1:
            return trial
    return None


def unroll_reduce(k: Kernel) -> Kernel:
    """Unroll the innermost reduce loop: into vector accumulators when the lowerer can (see `vector_unroll`), else
    entirely when it is short, else by 4 while the tile stays small (each only where the kernel allows it)."""
    reduce_axes = k.axes(Axis.REDUCE)
    if not reduce_axes:
        return k
    axis = reduce_axes[-1]
    if (vectorized := vector_unroll(k, axis)) is not None:
        return vectorized
    size = k.full_shape[axis]
    if isinstance(size, int) and size <= 8 and k.upcast_size() * size <= 64:
        return k.applied(Opt(OptOps.UNROLL, axis, 0)) or k  # a short reduction: unroll it entirely
    if isinstance(size, int) and size % 4 == 0 and k.upcast_size() <= 16:
        return k.applied(Opt(OptOps.UNROLL, axis, 4)) or k
    return k


# A reduction whose every output element streams at least this many elements of input through its loop: two of its
# outputs at a time (`paired_streams`)
STREAM_MIN = 1 << 16


def paired_streams(k: Kernel) -> Kernel:
    """A long streaming reduction on a CPU (its loop reads `STREAM_MIN` elements or more per output element, the partial
    sums of a long sum): two outputs of an outer output axis computed together, so that each thread reads two streams
    of memory at once instead of one. Two streams keep more of the memory system busy: a sum of 16M float32 on 2
    cores, 3.11 -> 2.68 ms (median of interleaved runs in a C harness), the same 4 accumulators per row (2026-11-29)."""
    streamed = prod(k.full_shape[i] for i in k.axes(Axis.REDUCE, Axis.UNROLL, Axis.UPCAST))
    if not isinstance(streamed, int) or streamed < STREAM_MIN or k.upcast_size() * 2 > k.caps.upcast_max:
        return k
    for axis in k.axes(Axis.GLOBAL):
        size = k.full_shape[axis]
        if not isinstance(size, int) or size % 2 or size < 32:  # (pairs stay many enough to split over the cores)
            continue
        if all(k.stride_of(b, axis) not in (0, None) for b in k.membufs[1:]):  # each output reads its own memory
            return k.applied(Opt(OptOps.UPCAST, axis, 2)) or k
    return k


# A reduction whose body computes at least this many operations per element (a polynomial exp2 is ~30) pays for
# gathering its inputs into vector lanes along a strided output axis (`gathered_output_lanes`)
GATHER_MIN_OPS = 24


def narrow_lanes(k: Kernel) -> int:
    """How many lanes `k` computes on when that is fewer than the device's widest vector (1 for none), else 0."""
    axis, width = choose_vector_axis(k)
    return width if k.caps.vector_widths and (axis is None or width < max(k.caps.vector_widths)) else 0


def gathered_output_lanes(k: Kernel, than: int = 1) -> Kernel | None:
    """A short reduction with a heavy body (a softmax's exp over a few classes, read along rows: the output axis is
    strided in the input) that gets fewer lanes otherwise (`than`, see `narrow_lanes`): the innermost output axis
    that whole vectors divide as wider vector lanes, each lane's input loaded on its own and the body computed on
    whole vectors. None when it does not apply; else the kernel with that upcast, its reduce loop not yet unrolled."""
    if k.body_ops() < GATHER_MIN_OPS:
        return None
    for width in sorted(k.caps.vector_widths, reverse=True):
        for axis in reversed(k.axes(Axis.GLOBAL)):  # the innermost output axis that whole vectors divide
            size = k.full_shape[axis]
            if width <= than or not isinstance(size, int) or size % width:
                continue
            trial = k.applied(Opt(OptOps.UPCAST, axis, width))
            if trial is not None and trial.vector_axis() == trial.shape_len - 1:  # (upcasts are placed last)
                return trial
    return None


def reduce_optimizations(k: Kernel) -> Kernel:
    """A reduction that reuses no operand: vector lanes along a contiguous output axis, then the reduce unroll; when
    neither gives full vector lanes, gathered lanes along the output axis for a heavy body (`gathered_output_lanes`)."""
    done = unroll_reduce(upcast_contiguous_output(k))
    if not (lanes := narrow_lanes(done)):
        return done
    gathered = gathered_output_lanes(k, lanes)
    return done if gathered is None else unroll_reduce(gathered)

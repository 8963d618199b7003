"""Hand-coded optimisations for devices with work groups (`caps.has_local`: OpenCL, CUDA, Metal, the PYTHON device's
thread mode): a register tile or vector lanes inside each work-item first, then work groups.

Two kinds of such devices want different things from a work group. A GPU runs a group's items in parallel lanes: it
needs groups of tens to hundreds of items, and a reduction with few outputs spreads its loop over a group (GROUP). A CPU
behind OpenCL (PoCL) runs a group's items one after another on one core, vectorizing across them only where the body is
straight-line code: its speed comes from each item's own vectors (float16 on AVX-512), a reduce loop runs scalar in a
group of items, and groups pay only for elementwise kernels (what PoCL vectorizes) and to make launches fewer. A device
declares which kind it is (`Capabilities.serial_work_groups`; `simd_items`). On a GPU a matmul-like kernel's group is a
block of items over N and M whose shared operands are staged per reduce step in local memory (`local_tiles`); on PoCL
that measured slower (see `SIMD_LOCAL_TILES`)."""

from __future__ import annotations

from lazy.codegen.heuristics import cpu_tiles, reuse_axes, tile_optimizations
from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import choose_vector_axis
from lazy.codegen.opt_reduce import reduce_optimizations, unroll_reduce
from lazy.helpers import prod
from lazy.ops import MemBuffer
from lazy.renderer import Capabilities
from lazy.symbolic import sint

SIMD_GROUP = 256  # items per group of an elementwise kernel on a SIMD device: PoCL vectorizes over them, and fewer
# larger groups cost less to launch (measured on PoCL 3, AVX-512: 256 beat 32 by about 15%)
GPU_GROUP = 128  # items of a GPU group: four warps, so a multiprocessor's block limit leaves it fully occupied
GPU_MIN_GROUP = 16  # a GPU group along an axis that splits into fewer items is taken only when no axis does better
GROUP_REDUCE = 64  # most items a GPU reduction's loop is spread over (their partials are then added in turn)
FEW_OUTPUTS = 16384  # a GPU reduction with fewer outputs spreads each one's loop over a group: one item per output
# leaves most of a GPU's thousands of lanes idle (a 16M-element sum's first stage has 2048 partial sums)
MIN_GROUPS = 64  # groups a launch keeps at least, for the cores (or a GPU's compute units) to share
TILE_UNROLL = 4  # reduce steps a register tile unrolls: loads of one step overlap the multiply-adds of the last
TILE_ITEMS = (16, 8)  # most items along N and along M of a GPU work group whose operands are staged in local memory
# local-memory tiles on a SIMD device (PoCL): off, they measured slower (docs/benchmarks.md); still 15% slower on the
# 1024 matmul (32.6 against 38.5 GFLOP/s) since PoCL's kernels inline their vector loads and multiply-adds
SIMD_LOCAL_TILES = False


def simd_items(caps: Capabilities) -> bool:
    """True for a device whose work groups run serially on a CPU core (see the module text)."""
    return caps.serial_work_groups


def _divides(size: object, amount: int) -> bool:
    return isinstance(size, int) and size % amount == 0


def output_stride(k: Kernel, axis: int) -> sint | None:
    return k.stride_of(k.membufs[0], axis)


def tile_axes(k: Kernel) -> tuple[int, int] | None:
    """(N, M) of a matmul-like kernel: N the reuse axis contiguous in the output (vector lanes, stored as vectors), M a
    reuse axis along which every operand read along N is broadcast, so one vector load of it serves each of M's rows
    (matmul: M rows of A times an N vector of B; convolution: output channels times an output row of the input)."""
    axes = reuse_axes(k)
    n_axes = [a for a in axes if output_stride(k, a) == 1]
    if not n_axes:
        return None
    n_axis = n_axes[-1]
    vector_operands = [b for b in k.membufs[1:] if k.stride_of(b, n_axis) != 0]
    m_axes = [a for a in axes if a != n_axis and all(k.stride_of(b, a) == 0 for b in vector_operands)]
    return (n_axis, m_axes[-1]) if m_axes else None


def tile_shape(k: Kernel, n_axis: int, m_axis: int) -> tuple[int, int, int] | None:
    """(width, nv, mr): nv vectors of the widest width dividing N by mr rows of M, the largest tile whose accumulators,
    N vectors and one broadcast fit the device's vector registers, preferring fewer loads per step among equals."""
    full = k.full_shape
    widths = [w for w in sorted(k.caps.vector_widths, reverse=True) if _divides(full[n_axis], w)]
    if not widths:
        return None
    width, regs = widths[0], k.caps.vector_registers
    best: tuple[int, int, int] | None = None
    choice = None
    for nv in (4, 2, 1):
        for mr in (16, 8, 4, 2, 1):
            if mr * nv + nv + 1 > regs or not _divides(full[n_axis], width * nv) or not _divides(full[m_axis], mr):
                continue
            score = (mr * nv, -(mr + nv), mr)
            if best is None or score > best:
                best, choice = score, (width, nv, mr)
    return choice


def item_reads(k: Kernel, buf: MemBuffer, tile: dict[int, int]) -> int:
    """Elements of `buf` one work-item reads: the reduce axes it varies along times its tile along `tile`'s axes."""
    reduce = [k.full_shape[a] for a in k.axes(Axis.REDUCE) if k.stride_of(buf, a) != 0]
    lanes = [size for axis, size in tile.items() if k.stride_of(buf, axis) != 0]
    # a symbolic size counts as its upper bound
    return prod(size if isinstance(size, int) else size.max for size in reduce + lanes)


def m_innermost(k: Kernel, n_axis: int, m_axis: int, tile: dict[int, int]) -> bool:
    """On a SIMD device groups run one after another on a core, so the innermost launch axis decides what stays in
    cache: it should be an axis along which the operand with the larger per-item panel is broadcast. M when that is
    the N operand (matmul: B's K x N panel), N when it is the other (convolution: the weights of M output channels)."""
    vector_operands = [b for b in k.membufs[1:] if k.stride_of(b, n_axis) != 0]
    others = [b for b in k.membufs[1:] if b not in vector_operands]
    n_panel = sum(item_reads(k, b, tile) for b in vector_operands)
    return n_panel > sum(item_reads(k, b, tile) for b in others)


def register_tile(k: Kernel) -> Kernel | None:
    """A matmul-like kernel's tile in each work-item: N lanes as `width`-float vectors times M rows (`tile_shape`), the
    reduce loop unrolled. On a SIMD device the launch order keeps the larger operand panel in cache (`m_innermost`);
    on a GPU, where groups run side by side, N stays innermost for coalesced loads. None when the kernel has no such
    axes or they do not divide."""
    axes = tile_axes(k)
    if axes is None or (shape := tile_shape(k, *axes)) is None:
        return None
    (n_axis, m_axis), (width, nv, mr) = axes, shape
    m_inner = simd_items(k.caps) and m_innermost(k, n_axis, m_axis, {n_axis: width * nv, m_axis: mr})
    opts = []
    if (n_axis > m_axis) == m_inner:  # trade places: later axes are inner launch dimensions
        opts.append(Opt(OptOps.SWAP, min(n_axis, m_axis), max(n_axis, m_axis)))
        n_axis, m_axis = m_axis, n_axis
    n_upcasts = [(n_axis, width), (n_axis, nv)]  # an upcast of a whole axis removes it: the later axis first
    upcasts = [*n_upcasts, (m_axis, mr)] if n_axis > m_axis else [(m_axis, mr), *n_upcasts]
    opts += [Opt(OptOps.UPCAST, axis, amount) for axis, amount in upcasts if amount > 1]
    if (trial := k.applied(*opts)) is None:  # (the swap first: the upcasts name the axes' places after it)
        return None
    reduce_axes = trial.axes(Axis.REDUCE)
    if reduce_axes:
        size = trial.full_shape[reduce_axes[-1]]
        unroll = None
        if isinstance(size, int) and size <= 2 * TILE_UNROLL and not _divides(size, TILE_UNROLL):
            unroll = Opt(OptOps.UNROLL, reduce_axes[-1], 0)  # a short loop (a 3x3 window's row): all of it
        elif _divides(size, TILE_UNROLL):
            unroll = Opt(OptOps.UNROLL, reduce_axes[-1], TILE_UNROLL)
        # (a tile of wide lanes, int or double, may leave no room in the unroll budget: the loop then stays a loop)
        trial = (trial.applied(unroll) if unroll is not None else None) or trial
    return trial


def local_tiles(k: Kernel) -> Kernel | None:
    """A matmul-like kernel's work group as a block of items over its N and M axes (at most `TILE_ITEMS`), each
    operand that items of the group share (A along N's items, B along M's) staged in local memory per reduce step
    (`OptOps.PACK`): a group reads each element of its panels from global memory once, not once per item. N and M
    are the two innermost reuse axes, N the one of smaller output stride (after a register tile N's stride is its
    tile's width). None when the kernel has no such axes, they do not split, or no operand packs."""

    def stride(axis: int) -> int:
        value = output_stride(k, axis)
        return value if isinstance(value, int) else 1 << 62

    axes = sorted(reuse_axes(k)[-2:], key=lambda a: (stride(a), -a))
    if not axes or len(k.reduceops) != 1:
        return None
    splits = []
    for axis, most in zip(axes, TILE_ITEMS):
        size = k.full_shape[axis]
        amount = next((a for a in (16, 8, 4, 2) if a <= most and _divides(size, a) and a < size), 0)
        if amount:
            splits.append((axis, amount))
    locals_ = [Opt(OptOps.LOCAL, axis, amount) for axis, amount in sorted(splits, reverse=True)]  # later axis first
    if (trial := k.applied(*locals_)) is None:
        return None
    if prod(trial.full_shape[i] for i in trial.axes(Axis.GLOBAL)) < MIN_GROUPS:
        return None  # too few groups for the compute units: a small kernel keeps its plain launch
    for buf in trial.membufs[1:]:
        trial = trial.applied(Opt(OptOps.PACK, buf.idx, 0)) or trial
    return trial if trial.packs else None


def group_reduce(k: Kernel) -> bool:
    """A GPU reduction whose loop is spread over a group's items (partials meet in local memory): when the outputs are
    few (a long sum: the items of one output are the parallelism), or when an input is contiguous along the reduce
    (a softmax's rows: the group's items read consecutive addresses, which one item per output looping along its own
    row does not). Not for a SIMD device, whose group items run in turn: there the loop gets vector lanes
    (`reduce_lanes`)."""
    out_size = prod(k.full_shape[i] for i in k.axes(Axis.GLOBAL))
    reduce_axes = k.axes(Axis.REDUCE)
    if not isinstance(out_size, int) or not reduce_axes:
        return False
    axis = reduce_axes[-1]
    size, total = k.full_shape[axis], prod(k.full_shape[i] for i in reduce_axes)
    if not isinstance(size, int) or not isinstance(total, int) or total < 256 or size < 16:
        return False
    few = out_size < FEW_OUTPUTS
    if not few and (reuse_axes(k) or not any(k.stride_of(b, axis) == 1 for b in k.membufs[1:])):
        return False  # (a matmul-like kernel's items share operands through local memory instead: `local_tiles`)
    for amount in (64, 32, 16, 8, 4):  # many outputs: only a group large enough to read whole segments of a row
        if amount <= min(GROUP_REDUCE, size) and size % amount == 0 and (few or amount >= GPU_MIN_GROUP):
            try:
                k.apply_opt(Opt(OptOps.GROUP, axis, amount))
                return True
            except KernelOptError:
                pass
    return False


def group_items(k: Kernel) -> None:
    """Work groups along an output axis, as large as the device likes while at least `MIN_GROUPS` groups remain to
    spread over the cores. On a SIMD device the innermost axis (contiguous in an elementwise kernel's buffers): PoCL
    vectorizes across a group's items where the body is straight-line code (elementwise kernels), and elsewhere a group
    saves launches (its items with a loop run in turn); an innermost axis no longer than a group is one group whole
    (a padded image's rows of 58: groups of 2 items had PoCL launch 1.7M groups, 11 ms against 2 for a
    copy of 14 MB; rows of 57, one item each, 24 ms). On a GPU the group's items are its parallel lanes: the axis
    most buffers are contiguous along (consecutive items read consecutive addresses), splitting into at least
    `GPU_MIN_GROUP` items (a whole axis of 58 is a group of 58), else the axis giving the largest group."""
    globals_ = k.axes(Axis.GLOBAL)
    items = prod(k.full_shape[i] for i in globals_)
    if not globals_ or not isinstance(items, int) or items < 1024 or k.axes(Axis.LOCAL, Axis.GROUP):
        return  # small launches gain nothing from work groups
    simd = simd_items(k.caps)
    most = min(SIMD_GROUP if simd else GPU_GROUP, items // MIN_GROUPS)
    if k.caps.local_size_max:
        most = min(most, k.caps.local_size_max)

    def amounts(axis: int) -> list[int]:
        size = k.full_shape[axis]
        found = [a for a in (256, 128, 64, 32, 16, 8, 4, 2) if a <= most and _divides(size, a)]
        if isinstance(size, int) and 2 < size <= most and size not in found:
            found = sorted([*found, size], reverse=True)  # the whole axis, of any size
        return found

    def coalesced(axis: int) -> int:
        return sum(1 for b in k.membufs if k.stride_of(b, axis) == 1)

    order = [globals_[-1]] if simd else sorted(globals_, key=lambda a: (coalesced(a), a), reverse=True)
    tried = [(axis, amount) for axis in order for amount in amounts(axis)]
    if not simd:  # the first axis in order that makes a group worth its name, else the largest group any axis makes
        good = [t for t in tried if t[1] >= GPU_MIN_GROUP]
        tried = good or sorted(tried, key=lambda t: -t[1])
    for axis, amount in tried:
        try:
            k.apply_opt(Opt(OptOps.LOCAL, axis, amount))
            return
        except KernelOptError:
            pass


def reduce_lanes(k: Kernel) -> Kernel:
    """A reduction on a SIMD device: vector lanes where the lowerer makes them (`reduce_optimizations`). When it cannot
    (an op without a vector form in the loop, such as floor's casts), a vector width of independent output lanes
    instead, along the innermost output axis that divides: straight-line code the compiler vectorizes across, where one
    chain of dependent accumulations would not (a softmax pass whose exponential was scalar ran 3x faster on PoCL)."""
    lanes = reduce_optimizations(k.copy())
    if choose_vector_axis(lanes)[0] is not None:
        return lanes
    for axis in reversed(k.axes(Axis.GLOBAL)):
        for width in sorted(k.caps.vector_widths, reverse=True):
            if _divides(k.full_shape[axis], width):
                try:
                    k.apply_opt(Opt(OptOps.UPCAST, axis, width))
                except KernelOptError:
                    return lanes
                return unroll_reduce(k)
    return lanes


TC_WARPS = (2, 2)  # warps of a tensor-core work group along the M and N tiles (each holds its own C fragment)


def tensor_core_tiles(k: Kernel) -> Kernel | None:
    """A matmul-like kernel whose sum of products the device's tensor core can take (`OptOps.TC`, the innermost fitting
    reduce axis, the first tensor core that fits), each warp then computing two N tiles from one A fragment, and a few
    warps per work group; None when no tensor core fits."""
    for axis in reversed(k.axes(Axis.REDUCE)):
        for index in range(len(k.caps.tensor_cores)):
            if (tc := k.applied(Opt(OptOps.TC, axis, index))) is None:
                continue
            if (n_out := _tc_output_axes(tc)[1]) is not None:
                tc = tc.applied(Opt(OptOps.UPCAST, n_out, 2)) or tc
            for role, warps in enumerate(TC_WARPS):  # axes move as opts apply: found again each time
                if (axis_out := _tc_output_axes(tc)[role]) is not None:
                    tc = tc.applied(Opt(OptOps.LOCAL, axis_out, warps)) or tc
            return tc
    return None


def _tc_output_axes(k: Kernel) -> tuple[int | None, int | None]:
    """The innermost output loops over the tensor core's M tiles and over its N tiles (the GLOBAL axes only the first,
    only the second factor reads), None where none is left."""
    assert k.tensor_core is not None and (operands := k.tc_operands(k.tensor_core)) is not None
    dep_a, dep_b = (k.depends(x) for x in operands)
    globals_ = k.axes(Axis.GLOBAL)
    m_out = [a for a in globals_ if a in dep_a and a not in dep_b]
    n_out = [a for a in globals_ if a in dep_b and a not in dep_a]
    return (m_out[-1] if m_out else None), (n_out[-1] if n_out else None)


def gpu_optimizations(k: Kernel) -> Kernel:
    """Registers first, then work groups. Registers: a matmul-like tile (`register_tile`), on a SIMD device else the
    CPU's micro-kernel (`heuristics.cpu_tiles`), else vector lanes (`reduce_lanes`); on a GPU a grouped reduce when
    the outputs are few, then the tiles and lanes every device gets. Work groups: on a GPU a matmul-like kernel's
    block of items sharing local-memory tiles (`local_tiles`), else groups along the innermost output axis
    (`group_items`). A sum of products the device's tensor core fits goes to it instead (`tensor_core_tiles`)."""
    if k.caps.tensor_cores and (tc := tensor_core_tiles(k)) is not None:
        return tc
    if k.reduceops and simd_items(k.caps):
        # a tile whose lanes are not the output's contiguous axis (a convolution's weight gradient: output channels as
        # lanes, the kernel's 3x3 taps innermost in the output) is the CPU's micro-kernel: each work-item is a CPU's
        # loop (the weight gradient on PoCL 294 -> 44 ms, 12.6 -> 83.6 GFLOP/s; lanes over input channels gathered)
        k = register_tile(k) or cpu_tiles(k) or reduce_lanes(k)
        if SIMD_LOCAL_TILES:
            k = local_tiles(k) or k
    elif k.reduceops:
        grouped = group_reduce(k)
        if not reuse_axes(k):
            k = reduce_optimizations(k)
        else:
            k = (None if grouped else register_tile(k)) or tile_optimizations(k)
            k = (None if grouped else local_tiles(k)) or k
    group_items(k)
    return k

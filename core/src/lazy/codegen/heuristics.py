"""Hand-coded optimisations (what a kernel gets without `LAZY_BEAM`): which axes become register tiles, vector lanes,
unrolled reductions and work groups. `lazy.codegen.program.hand_coded_optimizations` dispatches: work-group devices to
`opt_gpu`, reductions without operand reuse to `opt_reduce`, matmul-like kernels (an input broadcast along an output
axis) to the register and cache tiling here."""

from __future__ import annotations

from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps
from lazy.codegen.opt_reduce import unroll_reduce


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
            if full[axis] % amount == 0 and (upcast := k.applied(Opt(OptOps.UPCAST, axis, amount))) is not None:
                k = upcast
                break
    return unroll_reduce(k)


def _divides(size: object, amount: int) -> bool:
    return isinstance(size, int) and size % amount == 0


# a register tile's rows need not divide the output axis they tile (`OptOps.PAD`) when the padding wastes at most this
# fraction of the rows computed: 6-row tiles (12 accumulators) over 1024 rows, not only 4-row ones (8)
PAD_WASTE = 1 / 16


def _padded(size: object, rows: int, may_pad: bool) -> int | None:
    """How many rows a tile of `rows` computes over an axis of `size`: `size` when it divides it, else (`may_pad`:
    the renderer's `padded_tiles`) `size` padded up to a multiple (`OptOps.PAD`) when that wastes at most `PAD_WASTE`
    of them, else None."""
    if not isinstance(size, int) or size < rows:
        return None
    padded = -(-size // rows) * rows
    return padded if padded == size or (may_pad and padded - size <= PAD_WASTE * padded) else None


def cpu_tiles(k: Kernel) -> Kernel | None:
    """The matmul micro-kernel for a CPU (a device without work groups), or None when the kernel does not fit it.

    A reuse axis of whole vectors (N) becomes `nv` vectors of the widest width W, another reuse axis (M) `mr` rows
    (padded up to a multiple of `mr` where that does not divide it and wastes little, `_padded`, in kernels whose
    taps are not unrolled): mr * nv accumulator registers, each reduce step loads nv vectors of the N-operand and
    broadcasts mr values of the M-operand. The pair must be an outer product (`outer_product`): a convolution's
    output width and height are both reuse axes, but the input varies along both, so a tile over them reloads it for
    every accumulator. Among the pairs and tiles whose accumulators, operand vectors and broadcast fit the vector
    registers the device declares, the most accumulators computing real outputs win, then the fewest loads per step,
    then N contiguous in the output (plain vector stores), then N contiguous in an input (vector loads), then the
    innermost M. The N-tile loop is then moved outside the M-tile loop: one N panel of the reused operand stays in
    cache while the M rows stream past it (the other order would stream the whole N-operand once per M tile), and
    the N operand is packed per N tile. A tile whose N operand would still be gathered along the lanes (neither
    contiguous nor packed there: a batch axis as lanes, 16 images apart) loads each vector a scalar at a time, which
    costs more than any accumulators gain (a 5x5 convolution's forward with 16-lane batch vectors ran at 5 GFLOP/s,
    with output-channel vectors at 134): the best such tile goes to `dot_tiles` first, then to the best tile that
    loads whole vectors, and is taken only when there is neither."""
    axes = reuse_axes(k)
    if len(axes) < 2 or not k.caps.vector_widths:
        return None
    full, width, regs = k.full_shape, max(k.caps.vector_widths), k.caps.vector_registers
    # padded tiles are for reductions whose taps are not unrolled (matmuls): with a convolution's taps unrolled, each
    # of the tile's hundreds of lanes works out its masked index symbolically through two views (0.4-0.9 s of code
    # generation per kernel, the cold CNN step 3.4 -> 4.6 s), and a padded tile too big to unroll the taps was slower
    # (a 64-row conv gradient: 18 -> 31 ms)
    may_pad = k.caps.padded_tiles and _short_reduce(k) is None
    best: dict[tuple[int, int], tuple[tuple[object, ...], int, int]] = {}  # (n_axis, m_axis) -> (score, nv, mr)
    for n_axis in (a for a in axes if _divides(full[a], width)):
        for m_axis in (a for a in axes if a != n_axis and outer_product(k, n_axis, a)):
            for nv in (4, 3, 2, 1):
                # (mr == width would make M's upcast a vector as wide as N's lanes: the lowerer could take either
                # as the lanes, `Kernel.vector_lanes_axis`, and the tile would lose its shape)
                for mr in (m for m in (8, 7, 6, 5, 4, 3, 2) if m != width):
                    if mr * nv + nv + 1 > regs or not _divides(full[n_axis], width * nv):
                        continue
                    if (rows := _padded(full[m_axis], mr, may_pad)) is None:
                        continue
                    contiguous = any(k.stride_of(b, n_axis) == 1 for b in k.membufs[1:])  # (vector loads, no gather)
                    # accumulators that compute real outputs first (a padded tile's last rows are wasted)
                    useful = mr * nv * int(full[m_axis]) / rows
                    score = (useful, -(mr + nv), k.output_stride(n_axis) == 1, contiguous, mr, m_axis)
                    if (n_axis, m_axis) not in best or score > best[n_axis, m_axis][0]:
                        best[n_axis, m_axis] = (score, nv, mr)
    gathering: Kernel | None = None  # the best tile that gathers, kept for when nothing else fits
    for (n_axis, m_axis), (_, nv, mr) in sorted(best.items(), key=lambda item: item[1][0], reverse=True):
        if (trial := _micro_kernel(k, n_axis, m_axis, nv, mr)) is None:
            continue
        if not _gathers(trial):
            return unroll_short_reduce(trial)
        if gathering is None:
            if (dots := dot_tiles(k, axes)) is not None:
                return dots
            gathering = trial
    return unroll_short_reduce(gathering) if gathering is not None else dot_tiles(k, axes)


def _gathers(k: Kernel) -> bool:
    """Whether some input of the reduction varies along the vector lanes without being contiguous or packed there:
    each of its vectors is then gathered a scalar at a time."""
    vec = k.vector_axis()
    return vec is not None and any(k.st_of(b).real_strides()[vec] not in (0, 1) and b.idx not in k.packs
                                   for b in k.reduce_inputs())  # fmt: skip


def _micro_kernel(k: Kernel, n_axis: int, m_axis: int, nv: int, mr: int) -> Kernel | None:
    """`k` with a micro-kernel `cpu_tiles` weighs: M padded when `mr` does not divide it, N outermost, the tiles,
    the N operand packed (the taps are unrolled once it is chosen)."""
    width = max(k.caps.vector_widths)
    opts = [] if _divides(k.full_shape[m_axis], mr) else [Opt(OptOps.PAD, m_axis, mr)]  # (first: axes stay put)
    if n_axis > m_axis:  # N outermost first (the axes trade places), then the tiles, later axes first so that an
        opts.append(Opt(OptOps.SWAP, m_axis, n_axis))  # axis upcast whole (and so removed) shifts no other
        m_axis, n_axis = n_axis, m_axis
    opts += [Opt(OptOps.UPCAST, m_axis, mr), Opt(OptOps.UPCAST, n_axis, width)]
    if nv > 1:
        opts.append(Opt(OptOps.UPCAST, n_axis, nv))
    if (trial := k.applied(*opts)) is None:
        return None
    # an operand reused by an inner output loop (the N-operand, broadcast along M) packed per tile: its rows are far
    # apart in memory (a power-of-two row length maps them all to a few cache sets); contiguous, the tile streams from
    # L2 for every M tile. `pack_plan` refuses the others.
    for buf in trial.membufs[1:]:
        if trial.pack_plan(buf.idx) is not None:
            trial = trial.applied(Opt(OptOps.PACK, buf.idx, 0)) or trial
    return trial


def outer_product(k: Kernel, n_axis: int, m_axis: int) -> bool:
    """Whether a register tile over `m_axis` x `n_axis` reuses what it loads in the reduction: some input varies along
    N but not M (its vectors serve every row of the tile), another along M but not N (each of its values is broadcast
    across the lanes), and none along both (it would be loaded once per accumulator). Inputs read only after the
    reduction (a residual added to a matmul, the weights of a fused optimizer step) are read once per output
    element whatever the tile: they do not count."""
    varies = [(k.stride_of(b, n_axis) != 0, k.stride_of(b, m_axis) != 0) for b in k.reduce_inputs()]
    return (True, False) in varies and (False, True) in varies and (True, True) not in varies


def unroll_short_reduce(k: Kernel) -> Kernel:
    """The innermost reduce loop unrolled entirely when short (a convolution's kernel taps): its loop overhead and
    index arithmetic would otherwise come with every step of the micro-kernel (5x5 taps: 1.5x; 3x3: 1.25x). Longer
    loops are left rolled: unrolling a matmul's by 4 measured slower."""
    if (axis := _short_reduce(k)) is not None:
        return k.applied(Opt(OptOps.UNROLL, axis, 0)) or k
    return k


def _short_reduce(k: Kernel) -> int | None:
    """The innermost reduce axis when it is short enough to unroll entirely (`unroll_short_reduce`), else None."""
    reduce_axes = k.axes(Axis.REDUCE)
    if reduce_axes and isinstance(size := k.full_shape[reduce_axes[-1]], int) and 1 < size <= 8:
        return reduce_axes[-1]
    return None


def dot_tiles(k: Kernel, axes: list[int]) -> Kernel | None:
    """The micro-kernel as dot products, for a kernel whose inputs are contiguous along its innermost reduce axis but
    have no reuse axis of whole vectors (a convolution's weight gradient): vector lanes along that reduce axis, and
    an mr x nr register tile over two reuse axes, one along which each input is broadcast (mr + nr vector loads feed
    mr * nr vector multiply-adds); the lanes are combined once, after the loop."""
    reduce_axes = k.axes(Axis.REDUCE)
    if not reduce_axes or len(axes) < 2:
        return None
    red = reduce_axes[-1]
    if any(k.st_of(b).real_strides(ignore_valid=True)[red] not in (0, 1) for b in k.membufs[1:]):
        return None  # (padding may mask a contiguous run: its loads are gated lane by lane)
    widths = [w for w in sorted(k.caps.vector_widths, reverse=True) if _divides(k.full_shape[red], w)]
    if not widths:
        return None
    first = k.membufs[1]
    a_axes = [a for a in axes if k.st_of(first).real_strides()[a] == 0]  # the first input is broadcast along these
    b_axes = [a for a in axes if a not in a_axes]
    if not a_axes or not b_axes:
        return None
    regs = k.caps.vector_registers
    for mr, nr in ((4, 4), (4, 3), (3, 3), (4, 2), (2, 2), (2, 1)):
        if mr * nr + mr + nr > regs:
            continue
        a_fit = [a for a in a_axes if _divides(k.full_shape[a], mr)]
        b_fit = [a for a in b_axes if _divides(k.full_shape[a], nr)]
        if not a_fit or not b_fit:
            continue
        tiles = sorted(((a_fit[-1], mr), (b_fit[-1], nr)), reverse=True)  # later axes first
        trial = k.applied(Opt(OptOps.UNROLL, red, widths[0]),
                          *(Opt(OptOps.UPCAST, axis, amount) for axis, amount in tiles if amount > 1))  # fmt: skip
        if trial is not None and trial.vector_axis() is not None:
            return trial
    return None

"""`Kernel`: one kernel AST seen as a loop nest over a common shape, plus the optimisation choices (`Opt`s) that
reshape it: upcast (unroll an output axis into registers), unroll (a reduce axis), local (GPU work groups) and pack
(an operand staged in a tile: a per-thread scratch array on a CPU, a work group's local memory on a device with work
groups, refilled per step of the innermost reduce loop it depends on, so the unrolled reduce lanes are the K-block).

Axes are kept in this order: output axes that become loops or thread ids, then reduce axes, then the upcast and
unrolled axes (the `kinds` list says which is which). Every buffer's ShapeTracker is reshaped/permuted in lockstep.
"""

from __future__ import annotations

import functools
from enum import Enum, auto
from typing import Any

from lazy.dtype import DType, dtypes
from lazy.helpers import prod
from lazy.ops import THREEFRY_ALU_OPS, ConstBuffer, GroupOp, LazyOp, MemBuffer, Ops
from lazy.record import record
from lazy.renderer import Capabilities, TensorCore
from lazy.shape import ShapeTracker
from lazy.symbolic import sint


class Axis(Enum):
    GLOBAL = auto()  # an output axis: a loop (CPU) or a thread id (GPU)
    LOCAL = auto()  # an output axis inside a GPU work group
    GROUP = auto()  # a reduce axis spread over a work group's threads (partials meet in local memory)
    REDUCE = auto()  # a reduce loop
    UPCAST = auto()  # an output axis unrolled into registers
    UNROLL = auto()  # a reduce axis unrolled into registers
    TC = auto()  # a tensor core's M, N or K (kept last, in that order): no loop walks it; its fragment layout says
    # which of its elements each lane of the warp holds


class OptOps(Enum):
    UPCAST = auto()
    UNROLL = auto()
    LOCAL = auto()
    GROUP = auto()
    SWAP = auto()  # exchange two output loops (`axis` and `amount`): which one is outermost decides what stays cached
    PACK = auto()  # stage input buffer `axis` in a contiguous tile where loops or a group's items reuse it (amount 0)
    TC = auto()  # a warp's tensor core `caps.tensor_cores[amount]` takes reduce axis `axis` (first, before any other)
    # output axis `axis` padded up to a multiple of `amount`, for a register tile that does not divide it (`_pad`)
    PAD = auto()


@record(frozen=True)
class PackPlan:
    """Where and how an input buffer is staged: after the loop at `after` (an index into `Kernel.pack_loops`, -1:
    before them), its elements for every value of `axes` (the other axes it depends on) are copied into a tile laid
    out row-major over `axes` in that order, which the kernel then reads instead of the buffer. `shared`: the tile is
    in a work group's local memory, filled by all its items between barriers (else a thread's own scratch array)."""

    buf: int
    after: int
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    shared: bool = False

    @property
    def count(self) -> int:
        return prod(self.sizes)


@record(frozen=True, order=True)
class Opt:
    op: OptOps
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"Opt({self.op.name}, {self.axis}, {self.amount})"


# what a vectorized kernel may contain: every op here has a vector form in the IR (renderers without a native vector
# instruction for one compute it lane by lane). Not SIN: its exact range reduction (wide integer products) has no
# vector form in C, and sixteen lanes of it are megabytes of source; the compiler vectorizes its scalar loop itself
VECTOR_OPS = frozenset({Ops.LOAD, Ops.CONST, Ops.ADD, Ops.MUL, Ops.NEG, Ops.MULACC, Ops.SUM, Ops.RMAX, Ops.MAX,
                        Ops.STORE, Ops.SINK, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.RECIP, Ops.FDIV, Ops.SQRT, Ops.EXP2,
                        Ops.LOG2})  # fmt: skip
# what a vectorized kernel's inputs may hold, data or constants: float32 and int32 (labels, indices: compared, never
# converted, as CAST has no vector form) and bool (a mask: a bool vector is a compare's result, int lanes of 0 or 1,
# so bool data is loaded a byte per lane into one; a scalar select on a loaded bool was a branch on the data, 6x
# slower than a float multiply over random masks, and it kept a masked matmul or sum scalar)
VECTOR_INPUTS = frozenset({dtypes.float32, dtypes.int32, dtypes.bool})
TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})


@functools.lru_cache(maxsize=4096)
def _vector_ops_only(computed: LazyOp) -> bool:
    """Whether every op of a kernel's computed value has a vector form (`VECTOR_OPS`): asked for each optimisation
    the heuristics try (interned nodes: the answer is kept per node)."""
    return all(n.op in VECTOR_OPS for n in computed.toposort())


def alu_ops(nodes: list[LazyOp]) -> int:
    """The ALU operations (and reduce steps) an AST's nodes compute per element: a THREEFRY counts as the rounds it
    lowers to, once per counter and key (its two words share them)."""
    count = sum(1 for n in nodes if n.op in GroupOp.ALU or n.op in GroupOp.Reduce)
    return count + THREEFRY_ALU_OPS * len({n.src for n in nodes if n.op is Ops.THREEFRY})


BODY_BUDGET = 1024  # most (lanes x operations) an optimisation may unroll into straight-line code
# ... in a kernel of less work than SMALL_WORK (iterations x operations): such a kernel runs in microseconds whatever
# its tile, but compiling each lane's copy of a heavy body costs milliseconds (a cross entropy's gradient over 512 x 10
# logits: 16 copies of an exp, 52k characters of C, 0.3 s of gcc, against 10k with the budget below)
SMALL_WORK = 1 << 21
SMALL_BODY_BUDGET = 256
SHARED_TILES = 4  # a work group's local memory holds this many packed tiles at their largest (two operands, with room
# left for a grouped reduce's partials)


class KernelOptError(ValueError):
    """An optimisation that does not apply to this kernel (searches try the next one)."""


class Kernel:
    """A kernel's loop structure. `apply_opt` changes it; `lazy.codegen.lowerer` turns it into UOps."""

    def __init__(self, ast: LazyOp, caps: Capabilities):
        assert ast.op is Ops.SINK and len(ast.src) == 1 and ast.src[0].op is Ops.STORE, "one STORE per kernel"
        self.ast, self.caps = ast, caps
        nodes = ast.toposort()
        self.reduceops = [n for n in nodes if n.op in GroupOp.Reduce]
        self.bufs: list[Any] = [n.arg for n in nodes if n.op in GroupOp.Buffer]
        self.bufs.sort(key=lambda b: (not isinstance(b, MemBuffer), b.idx if isinstance(b, MemBuffer) else 0))
        self.bufs = list(dict.fromkeys(self.bufs))
        self.sts: list[ShapeTracker] = [b.st for b in self.bufs]
        self.buf_position = {id(b): i for i, b in enumerate(self.bufs)}  # (`st_of`: the AST's own args, by identity)
        self.output_shape: tuple[sint, ...] = ast.src[0].arg.st.shape
        reduce_shape = self._reduce_input_shape() if self.reduceops else self.output_shape
        self.kinds: list[Axis] = [
            Axis.REDUCE if o != f else Axis.GLOBAL for o, f in zip(self.output_shape, reduce_shape)
        ]
        self.applied_opts: list[Opt] = []
        self.packs: list[int] = []  # input buffers staged in scratch tiles (`pack_plan`)
        self.tensor_core: TensorCore | None = None  # set by `OptOps.TC`
        self._reorder_reduce_last()
        self._merge_adjacent()

    def _reduce_input_shape(self) -> tuple[sint, ...]:
        under = [n for n in self.reduceops[0].toposort() if n.op in (Ops.LOAD, Ops.CONST)]
        assert under, "a reduce reads at least one buffer or constant"
        return under[0].arg.st.shape

    # -- shape bookkeeping -------------------------------------------------------------------------------------------

    @property
    def full_shape(self) -> tuple[sint, ...]:
        # asked thousands of times while a kernel is optimised and lowered; every change of the trackers assigns a new
        # list (never one changed in place), so the cache holds the list it was computed from
        sts, cached = self.sts, self.__dict__.get("_full_shape")
        if cached is not None and cached[0] is sts and len(cached[1]) == len(self.kinds):
            return cached[1]
        shape = tuple(max(st.shape[i] for st in sts) if all(isinstance(st.shape[i], int) for st in sts)
                      else self._sym_dim(i) for i in range(len(self.kinds)))  # fmt: skip
        self._full_shape = (sts, shape)
        return shape

    def _sym_dim(self, i: int) -> sint:
        return next(st.shape[i] for st in self.sts if not (isinstance(st.shape[i], int) and st.shape[i] == 1))

    @property
    def shape_len(self) -> int:
        return len(self.kinds)

    def axes(self, *kinds: Axis) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k in kinds]

    def _permute(self, order: list[int]) -> None:
        self.sts = [st.permute(tuple(order)) for st in self.sts]
        self.kinds = [self.kinds[i] for i in order]

    def _reorder_reduce_last(self) -> None:
        order = self.axes(Axis.GLOBAL) + self.axes(Axis.REDUCE)
        if order != list(range(self.shape_len)):
            self._permute(order)

    def _merge_adjacent(self) -> None:
        """Drop size-1 axes and merge neighbours of one kind that every buffer can see as one axis."""
        keep = [i for i in range(self.shape_len) if self.full_shape[i] != 1]
        if len(keep) != self.shape_len:
            self.sts = [st.reshape(tuple(st.shape[i] for i in keep)) for st in self.sts]
            self.kinds = [self.kinds[i] for i in keep]
        i = 0
        while i < self.shape_len - 1:
            if self.kinds[i] == self.kinds[i + 1] and self._can_merge(i):
                self.sts = [self._merged(st, i) for st in self.sts]
                del self.kinds[i + 1]
            else:
                i += 1

    @staticmethod
    def _merged(st: ShapeTracker, i: int) -> ShapeTracker:
        return st.reshape(st.shape[:i] + (st.shape[i] * st.shape[i + 1],) + st.shape[i + 2 :])

    def _can_merge(self, i: int) -> bool:
        for st in self.sts:
            if not all(isinstance(s, int) for s in st.shape[i : i + 2]):
                return False
            if (st.shape[i] == 1) != (st.shape[i + 1] == 1) and self.kinds[i] is Axis.REDUCE:
                return False
            merged = self._merged(st, i)
            if len(merged.views) != len(st.views):
                return False
            if st.shape[i] != self.full_shape[i] or st.shape[i + 1] != self.full_shape[i + 1]:
                return False  # a buffer broadcast along only one of the two axes
        return True

    def _split(self, axis: int, amount: int) -> int:
        """Split `axis` into (size/amount, amount); returns the index of the new inner axis."""
        size = self.full_shape[axis]
        if not isinstance(size, int) or size % amount != 0 or amount <= 1:
            raise KernelOptError(f"cannot split axis {axis} of size {size} by {amount}")
        new_sts = []
        for st in self.sts:
            dim = st.shape[axis]
            parts = (dim // amount, amount) if dim != 1 else (1, 1)
            new_sts.append(st.reshape(st.shape[:axis] + parts + st.shape[axis + 1 :]))
        self.sts = new_sts
        self.kinds.insert(axis + 1, self.kinds[axis])
        return axis + 1

    def _move_to_end(self, axis: int, kind: Axis) -> None:
        order = [i for i in range(self.shape_len) if i != axis] + [axis]
        self._permute(order)
        self.kinds[-1] = kind

    # -- optimisations -----------------------------------------------------------------------------------------------

    def apply_opt(self, opt: Opt) -> None:
        """Apply `opt`, or raise `KernelOptError` and leave the kernel as it was (the heuristics try an optimisation
        on the kernel itself and go on without it when it does not apply)."""
        saved = (self.sts, list(self.kinds), list(self.applied_opts), list(self.packs), self.tensor_core)
        try:
            self._apply_opt(opt)
        except KernelOptError:
            self.sts, self.kinds, self.applied_opts, self.packs, self.tensor_core = saved
            raise

    def _apply_opt(self, opt: Opt) -> None:
        if opt.op is OptOps.SWAP:
            return self._swap(opt)
        if opt.op is OptOps.PACK:
            return self._pack(opt)
        if opt.op is OptOps.TC:
            return self._tensor_core(opt)
        if opt.op is OptOps.PAD:
            return self._pad(opt)
        if opt.op is OptOps.UPCAST:
            if self.kinds[opt.axis] is not Axis.GLOBAL:
                raise KernelOptError(f"{opt}: axis {opt.axis} is {self.kinds[opt.axis].name}, not an output axis")
            target = Axis.UPCAST
        elif opt.op is OptOps.UNROLL:
            if self.kinds[opt.axis] is not Axis.REDUCE:
                raise KernelOptError(f"{opt}: axis {opt.axis} is not a reduce axis")
            target = Axis.UNROLL
        elif opt.op is OptOps.GROUP:
            if not self.caps.has_local or self.kinds[opt.axis] is not Axis.REDUCE or len(self.reduceops) != 1:
                raise KernelOptError(f"{opt}: a grouped reduce needs local memory and one reduce axis to split")
            if self.axes(Axis.GROUP) or self.axes(Axis.UNROLL, Axis.UPCAST) or self.tensor_core is not None:
                raise KernelOptError(f"{opt}: group before upcasting/unrolling, once, and not with a tensor core")
            target = Axis.GROUP
        else:
            if not self.caps.has_local or self.kinds[opt.axis] is not Axis.GLOBAL:
                raise KernelOptError(f"{opt}: locals need a device with local memory and an output axis")
            target = Axis.LOCAL
        size = self.full_shape[opt.axis]
        amount = opt.amount if opt.amount != 0 else size
        if not isinstance(size, int):
            raise KernelOptError(f"{opt}: axis {opt.axis} has a symbolic size")
        if amount == size:  # the whole axis: no split needed
            self._move_to_end(opt.axis, target)
        else:
            inner = self._split(opt.axis, amount)  # type: ignore[arg-type]
            self._move_to_end(inner, target)
        if target in (Axis.LOCAL, Axis.GROUP):
            self._place_locals()
            threads = self.threads()
            if len(self.axes(Axis.LOCAL, Axis.GROUP)) > 3 - (self.tensor_core is not None) or (
                self.caps.local_size_max and threads > self.caps.local_size_max
            ):
                raise KernelOptError(f"{opt}: {threads} threads per group is over the device's limit")
        if self.registers() > self.caps.upcast_max * 4:
            raise KernelOptError(f"{opt}: {self.registers()} registers is too many")
        # each lane repeats the body: compile time, i-cache
        if (registers := self.registers()) * (body := self.body_ops()) > self.body_budget(body, registers):
            raise KernelOptError(f"{opt}: {registers} lanes of a {body}-op body is too much code")
        self.applied_opts.append(opt)

    def _pad(self, opt: Opt) -> None:
        """Pads output axis `opt.axis` up to a multiple of `opt.amount`, so that a register tile of that many rows
        splits it (a 6-row matmul tile over 1024 rows: 171 tiles, the last one 2 rows short). Each input varying along
        the axis reads zeros past its end (a masked load: no read out of bounds), an input broadcast along it stays
        unmasked (its vector loads stay plain), and the store skips the padded outputs. Only a padded output reads a
        padded input (the axis is an output axis), so nothing stored changes, and each output is still written once
        (an assign's output may also be its input). The waste is at most `opt.amount - 1` rows of work."""
        axis, amount = opt.axis, opt.amount
        if not 0 <= axis < self.shape_len or self.kinds[axis] is not Axis.GLOBAL or amount <= 1:
            raise KernelOptError(f"{opt}: only an output loop (GLOBAL axis) is padded, to a multiple of at least 2")
        if self.caps.has_threads or self.applied_opts:
            raise KernelOptError(f"{opt}: padding comes first, on a device without threads")
        size = self.full_shape[axis]
        if not isinstance(size, int) or size < amount or size % amount == 0:
            raise KernelOptError(f"{opt}: axis {axis} of size {size} is not padded to a multiple of {amount}")
        padded = -(-size // amount) * amount
        new_sts = []
        for st in self.sts:
            if st.shape[axis] == 1:
                new_sts.append(st)
            elif st.real_strides()[axis] == 0:  # broadcast along the axis: every padded row reads what row 0 does
                first = tuple((0, 1) if i == axis else (0, s) for i, s in enumerate(st.shape))
                new_sts.append(
                    st.shrink(first).expand(tuple(padded if i == axis else s for i, s in enumerate(st.shape)))
                )
            else:
                new_sts.append(
                    st.pad(tuple((0, padded - size) if i == axis else (0, 0) for i in range(self.shape_len)))
                )
        self.sts = new_sts
        self.applied_opts.append(opt)

    def _swap(self, opt: Opt) -> None:
        a, b = opt.axis, opt.amount
        if not (0 <= a < self.shape_len and 0 <= b < self.shape_len) or a == b:
            raise KernelOptError(f"{opt}: needs two different axes of the kernel's {self.shape_len}")
        if self.kinds[a] is not Axis.GLOBAL or self.kinds[b] is not Axis.GLOBAL:
            raise KernelOptError(f"{opt}: only output loops (GLOBAL axes) are swapped")
        order = list(range(self.shape_len))
        order[a], order[b] = b, a
        self._permute(order)
        self.applied_opts.append(opt)

    def threads(self) -> int:
        """Threads in one work group: its LOCAL and GROUP axes, times the warp of a tensor core."""
        warp = self.tensor_core.threads if self.tensor_core is not None else 1
        return warp * prod(int(self.full_shape[i]) for i in self.axes(Axis.LOCAL, Axis.GROUP))

    def tc_operands(self, tc: TensorCore) -> tuple[LazyOp, LazyOp] | None:
        """The two factors of the kernel's sum of products, as `tc.dtype_in` values, when its one reduce is a sum in
        `tc.dtype_out` of a product of two `dtype_in` values (each maybe cast up, or the product cast up), else None."""
        if len(self.reduceops) != 1 or (rop := self.reduceops[0]).op is not Ops.SUM or rop.dtype != tc.dtype_out:
            return None
        mul = rop.src[0]
        if mul.op is Ops.CAST and mul.src[0].op is Ops.MUL and mul.src[0].dtype == tc.dtype_in:
            mul = mul.src[0]
        if mul.op is not Ops.MUL:
            return None
        x, y = (s.src[0] if s.op is Ops.CAST and s.src[0].dtype == tc.dtype_in else s for s in mul.src)
        return (x, y) if x.dtype == tc.dtype_in and y.dtype == tc.dtype_in else None

    def depends(self, node: LazyOp) -> set[int]:
        """The axes some buffer read under `node` varies along (an unknown stride counts as varying)."""
        out: set[int] = set()
        for n in node.toposort():
            if n.op is Ops.LOAD:
                strides = self.st_of(n.arg).real_strides()
                out.update(i for i, s in enumerate(strides) if s != 0 and self.full_shape[i] != 1)
        return out

    def _tensor_core(self, opt: Opt) -> None:
        """Maps a tile of the matmul onto tensor core `caps.tensor_cores[opt.amount]`: reduce axis `opt.axis` is split
        by K, and the innermost output axes only the first factor (A) reads and only the second (B) reads by M and N;
        the three inner parts become TC axes (last, in the order M, N, K) which no loop or thread id walks: each lane
        of the warp (the work group's innermost thread id) holds the fragment elements its layouts say."""
        caps = self.caps
        if self.applied_opts or self.tensor_core is not None:
            raise KernelOptError(f"{opt}: a tensor core is the first optimisation, and only one")
        if not (caps.has_threads and caps.has_local) or not 0 <= opt.amount < len(caps.tensor_cores):
            raise KernelOptError(f"{opt}: the device declares no tensor core {opt.amount}")
        tc = caps.tensor_cores[opt.amount]
        if (operands := self.tc_operands(tc)) is None:
            raise KernelOptError(f"{opt}: not a sum of products of {tc.dtype_in} into {tc.dtype_out}")
        if not 0 <= opt.axis < self.shape_len or self.kinds[opt.axis] is not Axis.REDUCE:
            raise KernelOptError(f"{opt}: axis {opt.axis} is not a reduce axis")
        full, (m, n, k_size) = self.full_shape, tc.dims
        dep_a, dep_b = (self.depends(x) for x in operands)
        if any(not isinstance(s, int) for s in full) or opt.axis not in dep_a or opt.axis not in dep_b:
            raise KernelOptError(f"{opt}: needs static sizes and a reduce axis both factors read along")

        def inner_output(only: set[int], other: set[int], size: int) -> int:
            fits = [a for a in self.axes(Axis.GLOBAL) if a in only and a not in other and full[a] % size == 0]
            if not fits:
                raise KernelOptError(f"{opt}: no output axis of a multiple of {size} that only one factor reads")
            return fits[-1]

        if full[opt.axis] % k_size:
            raise KernelOptError(f"{opt}: reduce axis of {full[opt.axis]} is not a multiple of K={k_size}")
        if caps.local_size_max and tc.threads > caps.local_size_max:
            raise KernelOptError(f"{opt}: a warp of {tc.threads} is over the device's {caps.local_size_max} threads")
        roles = [(inner_output(dep_a, dep_b, m), m), (inner_output(dep_b, dep_a, n), n), (opt.axis, k_size)]
        inner: dict[int, int] = {}  # role -> the inner axis' index
        for role, (axis, amount) in sorted(enumerate(roles), key=lambda r: -r[1][0]):  # highest axis first
            inner = {r: i + (i > axis) for r, i in inner.items()}  # the split inserts an axis after `axis`
            inner[role] = self._split(axis, amount)
        tc_axes = [inner[0], inner[1], inner[2]]
        self._permute([i for i in range(self.shape_len) if i not in tc_axes] + tc_axes)
        for i in range(self.shape_len - 3, self.shape_len):
            self.kinds[i] = Axis.TC
        self.tensor_core = tc
        self.applied_opts.append(opt)

    def _pack(self, opt: Opt) -> None:
        if self.tensor_core is not None:
            raise KernelOptError(f"{opt}: operands of a tensor core are read straight into its fragments")
        if opt.axis in self.packs:
            raise KernelOptError(f"{opt}: buffer {opt.axis} is packed already")
        self.packs.append(opt.axis)
        if self.pack_plan(opt.axis) is None:
            self.packs.pop()
            limit = self.caps.shared_max // SHARED_TILES if self.caps.has_threads else self.caps.pack_max
            raise KernelOptError(f"{opt}: buffer {opt.axis} is not reused by a loop or a group's items inside its "
                                 f"tile, or the tile is over the device's {limit} bytes for one")  # fmt: skip
        self.applied_opts.append(opt)

    def loop_axes(self) -> list[int]:
        """The output axes that are loops of the kernel (on a device with threads: none are)."""
        return [] if self.caps.has_threads else self.axes(Axis.GLOBAL)

    def pack_loops(self) -> list[int]:
        """The loops a pack point is placed among, outermost first: a CPU's output loops; on a device with threads
        the output axes left over after three launch dimensions, then the reduce loops."""
        if not self.caps.has_threads:
            return self.axes(Axis.GLOBAL)
        return self.axes(Axis.GLOBAL)[:-3] + self.axes(Axis.REDUCE)

    def pack_plan(self, idx: int) -> PackPlan | None:
        """How input buffer `idx` is staged with the kernel's current axes, or None when staging it does not apply:
        a device without scratch memory or local memory, an unknown buffer, symbolic sizes, nothing that reuses the
        tile (packing would copy without saving a read), a tile over the device's limit, or a buffer read through
        more than one view (every load of a packed buffer reads its one tile: a gradient reading a mask at four
        offsets, each with its own padding, read the first offset's elements four times)."""
        buf = next((b for b in self.membufs if b.idx == idx and idx != 0), None)
        if buf is None or not all(isinstance(s, int) for s in self.full_shape):
            return None
        if any(b.idx == idx and (b.st != buf.st or b.gather is not None) for b in self.membufs):
            return None  # (a gathered load's addresses come from data: no tile holds them)
        strides = self.st_of(buf).real_strides()
        depends = [i for i in range(self.shape_len) if strides[i] != 0 and self.full_shape[i] != 1]
        if self.caps.has_threads:
            return self._group_pack_plan(buf, depends)
        if not self.caps.pack_max:
            return None
        loops = self.loop_axes()
        dep_loops = [i for i in loops if i in depends]
        after = loops.index(dep_loops[-1]) if dep_loops else -1
        if not any(i not in depends for i in loops[after + 1 :]):
            return None  # no loop inside the pack point reuses the tile
        axes = [i for i in depends if i not in loops]
        if not axes:
            return None
        return self._tile(buf, after, axes, self.caps.pack_max, shared=False)

    def _group_pack_plan(self, buf: MemBuffer, depends: list[int]) -> PackPlan | None:
        """A work group's tile of `buf` in local memory: refilled inside the innermost loop the buffer depends on (a
        K-block per reduce step: the unrolled reduce lanes), covering what the whole group reads there (its LOCAL and
        GROUP axes, the register tile's UPCAST and UNROLL axes). Only where some item of the group reads what another
        does (a thread axis the buffer is broadcast along), with one reduce, and for a tile refilled inside the reduce
        loop only when nothing reads the buffer after that loop."""
        if not self.caps.has_local or not self.caps.shared_max or len(self.reduceops) > 1:
            return None
        if all(i in depends for i in self.axes(Axis.LOCAL, Axis.GROUP)):
            return None  # no two items of a group read the same element
        loops = self.pack_loops()
        dep_loops = [i for i in loops if i in depends]
        after = loops.index(dep_loops[-1]) if dep_loops else -1
        if after >= 0 and self.kinds[loops[after]] is Axis.REDUCE and self._read_outside_reduce(buf):
            return None  # the tile holds one reduce step's block, not what a read after the loop needs
        axes = [i for i in depends if self.kinds[i] in (Axis.LOCAL, Axis.GROUP, Axis.UPCAST, Axis.UNROLL)]
        return self._tile(buf, after, axes, self.caps.shared_max // SHARED_TILES, shared=True)

    def _read_outside_reduce(self, buf: MemBuffer) -> bool:
        inside = {id(n) for r in self.reduceops for n in r.toposort()}
        return any(n.op is Ops.LOAD and n.arg == buf and id(n) not in inside for n in self.ast.toposort())

    def _tile(self, buf: MemBuffer, after: int, axes: list[int], limit: int, shared: bool) -> PackPlan | None:
        if not axes:
            return None
        # the vector lanes innermost, so vector loads of the tile are contiguous
        inner = [i for i in axes if i == self.vector_lanes_axis()]
        axes = [i for i in axes if i not in inner] + inner
        sizes = tuple(int(self.full_shape[i]) for i in axes)
        if prod(sizes) * buf.dtype.itemsize > limit:
            return None
        return PackPlan(buf.idx, after, tuple(axes), sizes, shared)

    def vector_lanes_axis(self) -> int | None:
        """The upcast axis that becomes vector lanes when the kernel's ops allow: the widest of a size the device has
        vectors of, among equals the one contiguous in the output (plain vector stores; other lanes are stored one by
        one, which pays when a long reduction comes before the store, as in a convolution over output channels)."""
        upcasts = [a for a in self.axes(Axis.UPCAST) if self.full_shape[a] in self.caps.vector_widths]
        if not upcasts:
            return None
        return max(upcasts, key=lambda a: (self.full_shape[a], self.output_stride(a) == 1, a))

    def vector_axis(self) -> int | None:
        """The axis whose lanes the lowerer makes one vector, or None. Every op needs a vector form (VECTOR_OPS), every
        buffer float32, no grouped reduce. An upcast axis (`vector_lanes_axis`; lanes not contiguous in the output only
        before a reduction's store) or else an unrolled reduce axis along which every input is contiguous or broadcast
        (a row sum, a dot product: the accumulators are vectors whose lanes are combined after the loop)."""
        if not self.caps.vector_widths or self.axes(Axis.GROUP) or self.tensor_core is not None:
            return None  # (a tensor core's fragments are its vectors)
        # float32 results of float32, int32 and bool inputs; a reduction's result cast to its buffer's dtype is stored
        # lane by lane (an elementwise kernel's cast is left to the C compiler's own vectorization, 1.5x faster)
        computed = self.stored_value() if self.reduceops else self.ast.src[0].src[0]
        if computed.dtype != dtypes.float32 or any(b.dtype not in VECTOR_INPUTS for b in self.bufs[1:]):
            return None
        if not _vector_ops_only(computed):
            return None
        # contiguous or broadcast along the axis, padding aside (masked loads are gated lane by lane)
        unrolls = [a for a in self.axes(Axis.UNROLL) if self.full_shape[a] in self.caps.vector_widths and all(
            self.st_of(b).real_strides(ignore_valid=True)[a] in (0, 1) for b in self.membufs[1:])]  # fmt: skip
        along_reduce = unrolls[-1] if unrolls and all(r.op in (Ops.SUM, Ops.RMAX) for r in self.reduceops) else None
        if (axis := self.vector_lanes_axis()) is not None:
            strides = [self.st_of(b).real_strides()[axis] for b in self.membufs[1:] if b.idx not in self.packs]
            # lanes along which every input is broadcast would load nothing as a vector; lanes along which an input
            # is strided would gather it a value at a time: contiguous lanes along the reduce axis do better
            if along_reduce is not None and (all(s == 0 for s in strides) or any(s not in (0, 1) for s in strides)):
                return along_reduce
            # lanes the output is strided along are stored one by one: worth it before a reduction's store, or where
            # they load two or more inputs as whole vectors (a transposing elementwise kernel, `elementwise_lanes`)
            whole = sum(1 for s in strides if s == 1)
            return axis if self.output_stride(axis) == 1 or self.reduceops or whole >= 2 else None
        return along_reduce

    def stored_value(self) -> LazyOp:
        """What a reduction kernel computes before the store: the stored value, or what it is cast from when the last
        step is a cast to the output buffer's dtype (a float32 matmul stored as half)."""
        value = self.ast.src[0].src[0]
        return value.src[0] if value.op is Ops.CAST and value.dtype == self.output_dtype() else value

    def output_stride(self, axis: int) -> sint | None:
        return self.st_of(self.ast.src[0].arg).real_strides()[axis]

    def body_ops(self) -> int:
        """The ALU operations the kernel computes per element, a transcendental the device lowers to a polynomial
        counted as the ~30 operations it becomes."""
        nodes = self.ast.toposort()
        heavy = sum(1 for n in nodes if n.op in TRANSCENDENTAL and n.op not in self.caps.native_math)
        return alu_ops(nodes) + 29 * heavy

    def body_budget(self, body: int, registers: int = 2) -> int:
        """The most lanes x operations the kernel's tile may unroll (`body`: its `body_ops`): `BODY_BUDGET`, or
        `SMALL_BODY_BUDGET` for a kernel of less than `SMALL_WORK` (a symbolic size counts as much work) with more
        than one register (`registers`: one is one copy of the body, whatever the work groups around it)."""
        size = prod(self.full_shape)
        if registers <= 1 or not isinstance(size, int) or size * body >= SMALL_WORK:
            return BODY_BUDGET
        return SMALL_BODY_BUDGET

    def registers(self) -> int:
        """Values the register tile holds: its lanes, a vector (`vector_axis`) counted as one."""
        axis = self.vector_axis()
        return self.upcast_size() // (int(self.full_shape[axis]) if axis is not None else 1)

    def _place_locals(self) -> None:
        order = (self.axes(Axis.GLOBAL) + self.axes(Axis.LOCAL) + self.axes(Axis.GROUP) + self.axes(Axis.REDUCE)
                 + self.axes(Axis.UNROLL, Axis.UPCAST) + self.axes(Axis.TC))  # fmt: skip
        self._permute(order)

    def upcast_size(self) -> int:
        return prod(self.full_shape[i] for i in self.axes(Axis.UPCAST, Axis.UNROLL))

    def output_upcast_size(self) -> int:
        return prod(self.full_shape[i] for i in self.axes(Axis.UPCAST))

    @property
    def membufs(self) -> list[MemBuffer]:
        return [b for b in self.bufs if isinstance(b, MemBuffer)]

    def reduce_inputs(self) -> list[MemBuffer]:
        """The input buffers read inside a reduction (a matmul's operands), not only after it (an epilogue's residual or
        the weight a fused optimizer step updates): what a register tile's reuse is about."""
        if (found := self.__dict__.get("_reduce_inputs")) is None:
            inside = {n.arg for r in self.reduceops for n in r.toposort() if n.op is Ops.LOAD}
            found = self.__dict__["_reduce_inputs"] = [b for b in self.membufs[1:] if b in inside]
        return found

    def st_of(self, buf: MemBuffer | ConstBuffer) -> ShapeTracker:
        at = self.buf_position.get(id(buf))
        return self.sts[at if at is not None else self.bufs.index(buf)]

    def stride_of(self, buf: MemBuffer | ConstBuffer, axis: int) -> sint | None:
        return self.st_of(buf).real_strides()[axis]

    def output_dtype(self) -> DType:
        return self.ast.src[0].arg.dtype

    def key(self) -> tuple[Any, ...]:
        return (self.ast, tuple(self.applied_opts))

    def applied(self, *opts: Opt) -> Kernel | None:
        """A copy with `opts` applied in order, or None when one does not apply (this kernel is left as it was): how
        the heuristics try a choice."""
        trial = self.copy()
        try:
            for opt in opts:
                trial.apply_opt(opt)
        except KernelOptError:
            return None
        return trial

    def copy(self) -> Kernel:
        new = Kernel.__new__(Kernel)
        new.__dict__.update(self.__dict__)
        new.sts, new.kinds, new.applied_opts = list(self.sts), list(self.kinds), list(self.applied_opts)
        new.packs = list(self.packs)
        return new

    def __repr__(self) -> str:
        dims = ", ".join(f"{s}{k.name[0].lower()}" for s, k in zip(self.full_shape, self.kinds))
        return f"<Kernel ({dims}) opts={self.applied_opts}>"

"""Lower a `Kernel` (AST + loop structure) to the linear `UOp` IR.

Loops and thread ids come from the kernel's axes; upcast and unrolled axes are expanded: every value is computed once
per combination of their indices ("lane"), which gives independent accumulators and straight-line code. The axis
`Kernel.vector_axis` picks becomes one vector value (vector loads, ALU and stores; lanes along a reduce axis are
vectors inside the reduce loop and combined after it). Packed inputs (`OptOps.PACK`) are copied into their scratch
tiles where `Kernel.pack_plan` says and read from there; a work group's tile in local memory is filled by all its items
(each a strided share of the elements) between barriers. Index arithmetic is int32 unless the symbolic
bounds of some index value need int64 (`lower_kernel`). EXP2, LOG2 and SIN a renderer does not declare in
`Capabilities.native_math` become polynomial code (`lazy.codegen.transcendental`), THREEFRY its rounds
(`lazy.codegen.threefry`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from lazy.codegen.kernel import Axis, Kernel, PackPlan, alu_ops
from lazy.codegen.threefry import lower_threefry
from lazy.codegen.transcendental import POLYNOMIAL_OPS, lower_transcendental
from lazy.codegen.transcendental import division as lower_division
from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.dtype import DType, dtypes
from lazy.helpers import all_int, prod
from lazy.ops import RAMP_VALUE, REDUCE_ALU, ConstBuffer, GroupOp, LazyOp, MemBuffer, Ops, identity_element
from lazy.shape import ShapeTracker
from lazy.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable, sint

# the index dtypes a kernel may compute its indices, loop counters and sizes in, narrowest (fastest) first: a kernel
# gets the first one that holds every index value it computes, as the symbolic bounds of the expressions say
INDEX_DTYPES = (dtypes.int32, dtypes.int64)
Lane = tuple[int, ...]


class IndexOverflow(ValueError):
    """An index value of the kernel may not fit the index dtype it is being lowered with."""


def _render_sum(node: SumNode, ops: Any, ctx: Lowerer) -> UOp:
    """A left fold of the terms: each partial sum is a value the kernel computes, so it must fit too, not only the
    total (`x*2**31 - 2**31` is small, its first term is not)."""
    out, lo, hi = ctx.node(node.nodes[0]), node.nodes[0].min, node.nodes[0].max
    for term in node.nodes[1:]:
        lo, hi = lo + term.min, hi + term.max
        ctx.check_index(lo, hi, node)
        out = ctx.b.alu(Ops.ADD, out, ctx.node(term))
    return out


def _render_and(node: AndNode, ops: Any, ctx: Lowerer) -> UOp:
    out = ctx.node(node.nodes[0])
    for part in node.nodes[1:]:
        out = ctx.b.alu(Ops.AND, out, ctx.node(part))
    return out


def _binary(op: Ops) -> Any:
    return lambda node, ops, ctx: ctx.b.alu(op, ctx.node(node.a), ctx.node(node.b))


# how each symbolic node becomes UOps; `Lowerer.node` checks the node's bounds before it renders it
RENDER_OPS: dict[type, Any] = {
    Variable: lambda node, ops, ctx: ctx.var_uops[node],
    NumNode: lambda node, ops, ctx: ctx.index_const(node.b),
    MulNode: _binary(Ops.MUL),
    DivNode: _binary(Ops.IDIV),
    ModNode: _binary(Ops.MOD),
    SumNode: _render_sum,
    AndNode: _render_and,
    LtNode: _binary(Ops.CMPLT),
}


def choose_vector_axis(k: Kernel) -> tuple[int | None, int]:
    """The upcast axis whose lanes become one vector (`Kernel.vector_axis`), and its width."""
    axis = k.vector_axis()
    return (None, 1) if axis is None else (axis, int(k.full_shape[axis]))


FRAGMENT_CODES = 64  # a lane's TC-axis entry is 1 + FRAGMENT_CODES * operand + element (fragments are shorter)


class Lowerer:
    """Lowers one kernel with `index` as the dtype of every index value (sizes, loop counters, thread ids, symbolic
    variables, buffer indices and masks); raises `IndexOverflow` when some value may not fit it."""

    def __init__(self, k: Kernel, index: DType = INDEX_DTYPES[0]):
        self.k, self.b, self.index = k, UOpBuilder(), index
        self.index_range = (dtypes.min(index), dtypes.max(index))
        self.var_uops: dict[Variable, UOp] = {}
        self.full_shape = k.full_shape
        # a lane fixes each upcast/unrolled axis; on a TC axis it holds which fragment element is meant (`tc_code`)
        self.lane_axes = k.axes(Axis.UPCAST, Axis.UNROLL, Axis.TC)
        self.tc_lane = Variable("lane", 0, k.tensor_core.threads - 1) if k.tensor_core is not None else None
        self.axis_vars: dict[int, Variable] = {}
        self.index_cache: dict[tuple[int, Lane], tuple[Node, Node]] = {}
        self.values: dict[tuple[int, Lane], UOp] = {}
        self.global_size: list[int] | None = None
        self.local_size: list[int] | None = None
        self.open_if: UOp | None = None
        self.core_split = 0
        self.outer_opened = False  # the first output loop is the one split over cores
        self.symbolic_vars: list[Variable] = []
        self.vec_axis, self.vec_width = choose_vector_axis(k)
        # vector lanes along a reduce axis exist only inside the reduce loop (`reduce` turns them on and combines them)
        self.vec_reduce = self.vec_axis is not None and k.kinds[self.vec_axis] is Axis.UNROLL
        self.vector_on = self.vec_axis is not None and not self.vec_reduce
        self.load_cache: dict[tuple[int, Node, Node, int], UOp] = {}
        self.index_consts: dict[int, UOp] = {}
        self.node_cache: dict[Node, tuple[int, UOp]] = {}  # index expressions lowered in the builder's current epoch

    # -- index values --------------------------------------------------------------------------------------------

    def check_index(self, lo: int, hi: int, what: sint) -> None:
        """Every index value the kernel computes must fit its index dtype (else a signed overflow: undefined in C, a
        wrap in LLVM and on the PYTHON device): `lower_kernel` lowers again with a wider one when one does not."""
        if lo < self.index_range[0] or hi > self.index_range[1]:
            shown = what.key if isinstance(what, Node) else what
            raise IndexOverflow(f"the index value {shown} in [{lo}, {hi}] does not fit int{8 * self.index.itemsize}")

    def index_const(self, value: int) -> UOp:
        if (known := self.index_consts.get(value)) is not None:  # (the builder keeps constants for the whole kernel)
            return known
        self.check_index(value, value, value)
        out = self.index_consts[value] = self.b.const(value, self.index)
        return out

    def node(self, x: sint) -> UOp:
        """An index expression as UOps of the index dtype, each value it computes checked against its bounds."""
        if not isinstance(x, Node):
            return self.index_const(x)
        if (known := self.node_cache.get(x)) is not None and known[0] == self.b.epoch:
            return known[1]  # (what the builder would share again, without walking the expression)
        self.check_index(x.min, x.max, x)
        out = x.render(RENDER_OPS, self)
        self.node_cache[x] = (self.b.epoch, out)
        return out

    # -- parameters and loops ----------------------------------------------------------------------------------------

    def define_params(self) -> None:
        for buf in sorted(self.k.membufs, key=lambda m: m.idx):
            self.bufs_uop[buf.idx] = self.b.add(
                UOps.DEFINE_GLOBAL, buf.dtype.ptr(), (), (buf.idx, f"data{buf.idx}", buf.idx == 0)
            )
        found: dict[Variable, None] = {}
        for st in self.k.sts:
            for v in sorted(st.vars(), key=lambda v: v.expr):
                found[v] = None  # variables compare by (name, min, max): bound or not, the same key
        consts = [b.val for b in self.k.bufs if isinstance(b, ConstBuffer)]
        for node in [*self.full_shape, *consts]:  # sizes, and constants whose value is a variable
            if isinstance(node, Node):
                for v in sorted(node.vars(), key=lambda v: v.expr):
                    found[v] = None
        self.symbolic_vars = sorted(found, key=lambda v: v.expr)
        for v in self.symbolic_vars:
            self.check_index(v.min, v.max, v)
            self.var_uops[v] = self.b.add(UOps.DEFINE_VAR, self.index, (), (v.expr, v.min, v.max))

    def open_loops(self, axes: list[int], prefix: str) -> list[UOp]:
        ranges: list[UOp] = []
        for i in axes:
            size = self.full_shape[i]
            var = self.axis_vars[i]
            if (
                prefix == "gidx"
                and self.core_split == 0
                and self.k.caps.core_split
                and isinstance(size, int)
                and size > 1  # 0: `core_split` would read as "not split" while the kernel takes lo and hi
                and not ranges
                and not self.outer_opened
            ):
                self.core_split = size
                self.check_index(0, size, size)
                lo = self.b.add(UOps.DEFINE_VAR, self.index, (), ("core_lo", 0, size))
                hi = self.b.add(UOps.DEFINE_VAR, self.index, (), ("core_hi", 0, size))
                start, end = lo, hi
            else:
                start, end = self.index_const(0), self.node(size)
            self.outer_opened |= prefix == "gidx"
            rng = self.b.add(UOps.RANGE, self.index, (start, end), (i, prefix == "ridx"))
            self.b.open_scope()
            self.var_uops[var] = rng
            ranges.append(rng)
        return ranges

    def close_loops(self, ranges: list[UOp]) -> None:
        for rng in reversed(ranges):
            self.b.add(UOps.ENDRANGE, None, (rng,))
            self.b.close_scope()
        if ranges:
            self.load_cache.clear()  # loads made inside a closed loop are out of scope

    def make_axis_vars(self) -> None:
        for i, (size, kind) in enumerate(zip(self.full_shape, self.k.kinds)):
            prefix = {Axis.GLOBAL: "gidx", Axis.LOCAL: "lidx", Axis.GROUP: "grp", Axis.REDUCE: "ridx"}.get(kind, "up")
            vmax = (size.max if isinstance(size, Node) else size) - 1
            self.axis_vars[i] = Variable(f"{prefix}{i}", 0, max(vmax, 0))

    def define_specials(self, axes: list[int]) -> list[int]:
        """GPU: the innermost (up to) three output axes become work-group ids and the local/group axes thread ids
        within a group; returns the output axes left to loop over."""
        self.local_size = [1, 1, 1]
        warp = 0
        if self.tc_lane is not None:  # a tensor core's warp is the innermost thread id: lanes are consecutive ids
            warp = self.local_size[0] = self.tc_lane.max + 1
            self.var_uops[self.tc_lane] = self.special("lidx0", warp)
        for dim, i in enumerate(reversed(self.k.axes(Axis.LOCAL, Axis.GROUP)), start=1 if warp else 0):
            size = self.full_shape[i]
            assert isinstance(size, int) and dim < 3, "at most three local dimensions of static size"
            self.local_size[dim] = size
            self.var_uops[self.axis_vars[i]] = self.special(f"lidx{dim}", size)
        self.global_size = [1, 1, 1]
        groups = self.launch_groups(axes)
        if groups is None:
            return axes  # symbolic launch sizes, or more groups than the device launches: keep loops (always correct)
        for dim, group in enumerate(groups):
            sizes = [self.full_shape[i] for i in group]
            self.global_size[dim] = total = prod(sizes)
            gid = self.special(f"gidx{dim}", total)
            inner = 1
            for i, size in zip(reversed(group), reversed(sizes)):  # merged axes: digits of the one id, innermost last
                assert isinstance(size, int)
                var = gid if inner == 1 else self.b.alu(Ops.IDIV, gid, self.index_const(inner))
                if inner * size < total:
                    var = self.b.alu(Ops.MOD, var, self.index_const(size))
                self.var_uops[self.axis_vars[i]] = var
                inner *= size
        return axes[: len(axes) - sum(len(g) for g in groups)]

    def launch_groups(self, axes: list[int]) -> list[list[int]] | None:
        """The output axes as (up to) three launch dimensions, innermost first: each of the two innermost axes its own
        dimension, the rest merged into the third (a kernel of five output axes still launches every work group, not
        three dimensions of them each looping over the other two), each within the device's launch limits (CUDA's
        65535 on y and z); where they do not fit, two axes or all of them merge into the roomier x. On a device whose
        work groups run serially (PoCL) only the three innermost axes launch, the rest loop. None: symbolic sizes, or
        no fit (the axes stay loops)."""
        ints = 0  # the innermost axes of static size are the candidates; symbolic ones outside them stay loops
        while ints < len(axes) and isinstance(self.full_shape[axes[len(axes) - 1 - ints]], int):
            ints += 1
        if ints == 0:
            return None if axes else []
        limits = self.k.caps.global_max
        inner = list(reversed(axes))[:ints]
        splits = [[inner[:1], inner[1:2], inner[2:]], [inner[:2], inner[2:3], inner[3:]], [inner[:1], inner[1:]],
                  [inner]]  # fmt: skip
        if self.k.caps.serial_work_groups:  # a CPU behind OpenCL: a work-item looping over outer axes costs nothing
            if ints < min(3, len(axes)):
                return None
            splits = [[inner[:1], inner[1:2], inner[2:3]]]
        for split in splits:
            groups = [list(reversed(g)) for g in split if g]
            sizes = [prod(self.full_shape[i] for i in g) for g in groups]
            if len(groups) <= 3 and (limits is None or all(size <= most for size, most in zip(sizes, limits))):
                return groups
        return None

    def special(self, name: str, size: int) -> UOp:
        self.check_index(0, size, size)  # a thread id, in [0, size)
        return self.b.add(UOps.SPECIAL, self.index, (), (name, size))

    # -- tensor cores ------------------------------------------------------------------------------------------------

    def tc_code(self, lane: Lane, operand: int, elem: int) -> Lane:
        """`lane` with its TC axes set to element `elem` of fragment `operand` (0: A, 1: B, 2: C/D)."""
        code = 1 + FRAGMENT_CODES * operand + elem  # 0 stays "no fragment element": outside WMMA code
        return tuple(code if self.k.kinds[a] is Axis.TC else v for a, v in zip(self.lane_axes, lane))

    def tc_coord(self, axis: int, code: int) -> Node:
        """The index along TC axis `axis` (M, N or K) of the fragment element `code` names, for this thread's lane: the
        element's row or column in its operand's layout, the lane bits read from the thread id."""
        tc, lane_var = self.k.tensor_core, self.tc_lane
        assert tc is not None and lane_var is not None and code > 0, "a TC axis is read only inside a fragment"
        operand, elem = divmod(code - 1, FRAGMENT_CODES)
        role = "MNK"[self.k.axes(Axis.TC).index(axis)]
        layout, (row_role, col_role) = ((tc.a, "MK"), (tc.b, "KN"), (tc.c, "MN"))[operand]
        bits = layout.rows if role == row_role else layout.cols if role == col_role else ()
        node: Node = NumNode(0)
        for i, bit in enumerate(bits):
            n = int(bit[1:])
            node = node + ((lane_var // (1 << n)) % 2 * (1 << i) if bit[0] == "l" else NumNode((elem >> n & 1) << i))
        return node

    def tc_reduce(self, rop: LazyOp) -> None:
        """The reduce as WMMAs: per reduce step and output lane, each thread gathers its fragments of A and B (the
        factors' values at the elements its layouts name) and accumulates into its fragment of C."""
        tc = self.k.tensor_core
        assert tc is not None
        operands = self.k.tc_operands(tc)
        assert operands is not None
        acc_dtype = tc.dtype_out.vec(tc.c.elements)
        accs = {lane: self.b.add(UOps.DEFINE_ACC, acc_dtype, (), 0.0) for lane in self.lanes((Axis.UPCAST,))}
        loops: list[UOp] = []
        for axis in self.k.axes(Axis.REDUCE):
            loops += self.open_loops([axis], "ridx")
        current = dict(accs)
        for lane in self.lanes((Axis.UPCAST, Axis.UNROLL)):
            out_lane = self.output_lane(lane)
            frags = []
            for operand, (factor, layout) in enumerate(zip(operands, (tc.a, tc.b))):
                elems = [self.value(factor, self.tc_code(lane, operand, e)) for e in range(layout.elements)]
                frags.append(self.b.add(UOps.VECTORIZE, tc.dtype_in.vec(layout.elements), tuple(elems)))
            new = self.b.add(UOps.WMMA, acc_dtype, (frags[0], frags[1], current[out_lane]), tc)
            current[out_lane] = self.b.add(UOps.ASSIGN, acc_dtype, (accs[out_lane], new))
        self.close_loops(loops)
        self.values.clear()
        self.reduce_results[id(rop)] = accs

    def linear_id(self, kind: Axis) -> tuple[Node, int]:
        """The flat index of this thread among the axes of `kind` in its work group, and their count."""
        axes = self.k.axes(kind)
        node: Node = NumNode(0)
        count = 1
        for i in reversed(axes):
            size = self.full_shape[i]
            assert isinstance(size, int)
            node = node + self.axis_vars[i] * count
            count *= size
        return node, count

    # -- values --------------------------------------------------------------------------------------------------------

    def index_of(self, buf: MemBuffer | ConstBuffer, lane: Lane) -> tuple[Node, Node]:
        key = (id(buf), lane)
        if isinstance(buf, MemBuffer) and buf.idx in self.packed and key not in self.index_cache:
            plan = self.packed[buf.idx][0]
            idx: Node = NumNode(0)
            for axis, stride in zip(plan.axes, strides_of(plan.sizes)):
                pos = NumNode(lane[self.lane_axes.index(axis)]) if axis in self.lane_axes else self.axis_vars[axis]
                idx = idx + pos * stride
            self.index_cache[key] = (idx, NumNode(1))
        if key not in self.index_cache:
            st: ShapeTracker = self.k.st_of(buf)
            view = st.views[0]
            plain = len(st.views) == 1 and view.mask is None and all_int(view.strides)
            if plain and self.lane_axes and self.tc_lane is None:
                # one plain view: the index is affine in the lane coordinates, so a lane's index is the first lane's
                # plus a constant (computing each of a tile's hundreds of lanes symbolically dominated codegen time)
                first = (id(buf), (0,) * len(lane))
                if first not in self.index_cache:
                    self.index_cache[first] = self._index_of(st, first[1])
                base, valid = self.index_cache[first]
                shift = sum(lane[n] * view.strides[axis] for n, axis in enumerate(self.lane_axes)
                            if st.shape[axis] != 1)  # fmt: skip
                self.index_cache[key] = (base + shift if shift else base, valid)
            else:
                self.index_cache[key] = self._index_of(st, lane)
        return self.index_cache[key]

    def _index_of(self, st: ShapeTracker, lane: Lane) -> tuple[Node, Node]:
        """(index, valid) of the element `st` reads at this lane, symbolically."""
        idxs: list[Node] = []
        for i, dim in enumerate(st.shape):
            if isinstance(dim, int) and dim == 1:
                idxs.append(NumNode(0))
            elif self.k.kinds[i] is Axis.TC:
                idxs.append(self.tc_coord(i, lane[self.lane_axes.index(i)]))
            elif i in self.lane_axes:
                idxs.append(NumNode(lane[self.lane_axes.index(i)]))
            else:
                idxs.append(self.axis_vars[i])
        return st.expr_idxs(idxs)

    def with_vec_lane(self, lane: Lane, i: int) -> Lane:
        pos = self.lane_axes.index(self.vec_axis)  # type: ignore[arg-type]
        return lane[:pos] + (i,) + lane[pos + 1 :]

    def load(self, buf: MemBuffer, lane: Lane) -> UOp:
        if not self.vector_on:
            return self.scalar_load(buf, *self.index_of(buf, lane))
        vec = buf.dtype.vec(self.vec_width)
        if buf.dtype == dtypes.bool and self.lane_stride(buf) != 0:
            # bool data is bytes, a bool vector a compare's int lanes: a byte per lane (no renderer loads one as such)
            lanes = [self.index_of(buf, self.with_vec_lane(lane, i)) for i in range(self.vec_width)]
            return self.b.add(UOps.VECTORIZE, vec, tuple(self.scalar_load(buf, i, v) for i, v in lanes))
        if (stride := self.lane_stride(buf)) in (0, 1):  # known from the view: no index per lane to compare
            idx0, valid0 = self.index_of(buf, self.with_vec_lane(lane, 0))
            if stride == 0:
                return self.b.add(UOps.VECTORIZE, vec, (self.scalar_load(buf, idx0, valid0),) * self.vec_width)
            assert isinstance(valid0, NumNode) and valid0.b == 1, "an unmasked view has no padding"
            key = (buf.idx, idx0, valid0, self.vec_width)
            if key not in self.load_cache:
                self.load_cache[key] = self.b.add(UOps.LOAD, vec, (self.source(buf), self.node(idx0)))
            return self.load_cache[key]
        lanes = [self.index_of(buf, self.with_vec_lane(lane, i)) for i in range(self.vec_width)]
        if all(x == lanes[0] for x in lanes):  # broadcast along the vector axis: one scalar load
            return self.b.add(UOps.VECTORIZE, vec, (self.scalar_load(buf, *lanes[0]),) * self.vec_width)
        idx0, valid0 = lanes[0]
        contiguous = all(v == valid0 and i == idx0 + n for n, (i, v) in enumerate(lanes))
        if contiguous and isinstance(valid0, NumNode) and valid0.b == 1:
            key = (buf.idx, idx0, valid0, self.vec_width)
            if key not in self.load_cache:
                self.load_cache[key] = self.b.add(UOps.LOAD, vec, (self.source(buf), self.node(idx0)))
            return self.load_cache[key]
        return self.b.add(UOps.VECTORIZE, vec, tuple(self.scalar_load(buf, i, v) for i, v in lanes))

    def gathered_load(self, buf: MemBuffer, index: UOp, lane: Lane) -> UOp:
        """A load of `buf` at the element its view gives plus index * stride along the gathered axis (`Ops.GATHER`),
        gated on the index being in [0, size) and on the view's own mask; lane by lane in vector code."""
        if not self.vector_on:
            return self._gathered_element(buf, index, lane)
        assert index.dtype is not None
        if index.op is UOps.VECTORIZE and all(s is index.src[0] for s in index.src) and self.lane_stride(buf) == 1:
            # one index for every lane (rows gathered: `x[idx]`, an Embedding, along a contiguous row): one vector
            # load at a row that exists (row 0 for an index outside the range), then zeros where the index is out
            found = self._gathered_address(buf, index.src[0], self.with_vec_lane(lane, 0), clamp=True)
            assert found is not None, "a view without a mask has no padding"
            address, inside = found
            vec = buf.dtype.vec(self.vec_width)
            loaded = self.b.add(UOps.LOAD, vec, (self.source(buf), address))
            gate = self.b.add(UOps.VECTORIZE, dtypes.bool.vec(self.vec_width), (inside,) * self.vec_width)
            zeros = self.b.add(UOps.VECTORIZE, vec, (self.b.const(0, buf.dtype),) * self.vec_width)
            return self.b.alu(Ops.WHERE, gate, loaded, zeros)
        at = [self.b.add(UOps.GEP, index.dtype.scalar(), (index,), i) for i in range(self.vec_width)]
        lanes = tuple(self._gathered_element(buf, at[i], self.with_vec_lane(lane, i)) for i in range(self.vec_width))
        return self.b.add(UOps.VECTORIZE, buf.dtype.vec(self.vec_width), lanes)

    def _gathered_element(self, buf: MemBuffer, index: UOp, lane: Lane) -> UOp:
        if (found := self._gathered_address(buf, index, lane)) is None:
            return self.b.const(0, buf.dtype)
        address, inside = found
        # (the address of an index outside the range is never read: the load is gated)
        return self.b.add(UOps.LOAD, buf.dtype, (self.source(buf), address, inside, self.b.const(0, buf.dtype)))

    def _gathered_address(self, buf: MemBuffer, index: UOp, lane: Lane, clamp: bool = False) -> tuple[UOp, UOp] | None:
        """(address, inside) of a gathered element: the view's element plus index * stride, and whether the index is
        in [0, size) and the view's element valid; None where the view never is (padding). `clamp`: the address of
        an index outside the range is row 0's (for a load that is not gated)."""
        assert buf.gather is not None
        stride, size = buf.gather
        idx, valid = self.index_of(buf, lane)
        # the range checked in the index's own dtype, before a cast to the kernel's index dtype could wrap it
        dtype = index.dtype
        assert dtype is not None
        # (an axis longer than the dtype's largest value has no upper check: `size` would wrap in it, and every
        # value is below it anyway; a uint8 index into 256 rows is always in range)
        checks = [] if size > dtypes.max(dtype) else [self.b.alu(Ops.CMPLT, index, self.b.const(size, dtype))]
        if not dtypes.is_unsigned(dtype):
            checks.append(self.b.alu(Ops.CMPLT, self.b.const(-1, dtype), index))
        inside = checks[0] if len(checks) == 1 else self.b.alu(Ops.AND, checks[1], checks[0]) if checks else \
            self.b.const(True, dtypes.bool)  # fmt: skip
        if clamp:
            index = self.b.alu(Ops.WHERE, inside, index, self.b.const(0, dtype))
        at = index if index.dtype == self.index else self.b.add(UOps.CAST, self.index, (index,))
        if not (isinstance(valid, NumNode) and valid.b == 1):
            if isinstance(valid, NumNode):  # never valid (padding)
                return None
            inside = self.b.alu(Ops.AND, self.node(valid), inside)
        return self.b.alu(Ops.ADD, self.node(idx), self.b.alu(Ops.MUL, at, self.index_const(stride))), inside

    def lane_stride(self, buf: MemBuffer) -> int | None:
        """How far apart in memory `buf`'s elements along the vector lanes are, where that is one number whatever
        the loop variables (a packed tile, or one view with no mask and integer strides); None otherwise."""
        assert self.vec_axis is not None
        if buf.idx in self.packed:
            plan = self.packed[buf.idx][0]
            if self.vec_axis not in plan.axes:
                return 0
            return strides_of(plan.sizes)[plan.axes.index(self.vec_axis)]
        st = self.k.st_of(buf)
        view = st.views[0]
        if len(st.views) != 1 or view.mask is not None or not all_int(view.strides) or self.tc_lane is not None:
            return None
        return 0 if st.shape[self.vec_axis] == 1 else int(view.strides[self.vec_axis])

    def source(self, buf: MemBuffer) -> UOp:
        """What a load of `buf` reads: its scratch tile once packed, else the buffer."""
        return self.packed[buf.idx][1] if buf.idx in self.packed else self.bufs_uop[buf.idx]

    def define_tile(self, plan: PackPlan) -> UOp:
        buf = next(b for b in self.k.membufs if b.idx == plan.buf)
        return self.b.add(UOps.DEFINE_LOCAL, buf.dtype.ptr(), (), (f"pack{plan.buf}", plan.count))

    def source_idxs(self, plan: PackPlan, coords: dict[int, Node]) -> list[Node]:
        """The buffer's index per axis for a copy into `plan`'s tile: `coords` on the tile's axes, the loop variable
        or thread id on the loop and launch axes outside the pack point, 0 where the buffer is broadcast."""
        st = self.k.st_of(next(b for b in self.k.membufs if b.idx == plan.buf))
        # a reduce loop outside the pack point only on a device with threads (a CPU's tiles span the reduce axes)
        outside = (Axis.GLOBAL, Axis.REDUCE) if self.k.caps.has_threads else (Axis.GLOBAL,)
        return [coords[i] if i in plan.axes else self.axis_vars[i] if self.k.kinds[i] in outside and dim != 1
                else NumNode(0) for i, dim in enumerate(st.shape)]  # fmt: skip

    def emit_pack(self, plan: PackPlan) -> None:
        """Copy the tile of input buffer `plan.buf` the loops inside this point read into a scratch array: one loop
        per tile axis, padding copied as zeros. Where the buffer is contiguous along the tile's innermost axis too,
        that axis is copied a whole vector at a time (`pack_width`): the copy is then vector code whatever the
        compiler vectorizes (a convolution's packed rows were a third of its time as a scalar loop)."""
        buf = next(b for b in self.k.membufs if b.idx == plan.buf)
        tile = self.define_tile(plan)
        st = self.k.st_of(buf)
        loop_vars = {i: Variable(f"pack{plan.buf}_{i}", 0, size - 1) for i, size in zip(plan.axes, plan.sizes)}
        width = self.pack_width(plan, buf, loop_vars)
        inner = plan.axes[-1]
        if width > 1:  # the innermost loop counts vectors
            loop_vars[inner] = Variable(f"pack{plan.buf}_{inner}", 0, plan.sizes[-1] // width - 1)
        coords: dict[int, Node] = {i: var * width if i == inner else var for i, var in loop_vars.items()}
        idxs = self.source_idxs(plan, coords)
        ranges = []
        for axis, size in zip(plan.axes, plan.sizes):
            if (count := size // width if axis == inner else size) == 1:  # (a tile row of one vector: no loop)
                self.var_uops[loop_vars[axis]] = self.index_const(0)
                continue
            rng = self.b.add(UOps.RANGE, self.index, (self.index_const(0), self.index_const(count)), (-1, False))
            self.b.open_scope()
            self.var_uops[loop_vars[axis]] = rng
            ranges.append(rng)
        src_idx, valid = st.expr_idxs(idxs)
        if width > 1:
            value = self.b.add(UOps.LOAD, buf.dtype.vec(width), (self.bufs_uop[buf.idx], self.node(src_idx)))
        else:
            value = self.scalar_load(buf, src_idx, valid)
        dst: Node = NumNode(0)
        for axis, stride in zip(plan.axes, strides_of(plan.sizes)):
            dst = dst + coords[axis] * stride
        self.b.add(UOps.STORE, None, (tile, self.node(dst), value))
        self.close_loops(ranges)
        self.packed[plan.buf] = (plan, tile)

    def pack_width(self, plan: PackPlan, buf: MemBuffer, loop_vars: dict[int, Variable]) -> int:
        """The vector width a pack copies its innermost tile axis with: the widest the device has that divides the
        axis, when the kernel computes in vectors (float32) and every lane of such a vector is the next element of
        the buffer, unmasked; else 1."""
        if self.vec_axis is None or buf.dtype != dtypes.float32:
            return 1
        inner, st = plan.axes[-1], self.k.st_of(buf)
        for width in sorted((w for w in self.k.caps.vector_widths if plan.sizes[-1] % w == 0), reverse=True):
            start = Variable(f"pack{plan.buf}_{inner}", 0, plan.sizes[-1] // width - 1) * width
            lanes = [st.expr_idxs(self.source_idxs(plan, {**loop_vars, inner: start + n})) for n in range(width)]
            first = lanes[0][0]
            if all(isinstance(v, NumNode) and v.b == 1 and i == first + n for n, (i, v) in enumerate(lanes)):
                return width
        return 1

    def emit_group_packs(self, plans: list[PackPlan], in_loop: bool) -> None:
        """Fill work-group tiles in local memory: the group's items share each copy, item t taking elements t,
        t + items, ... (neighbouring items read neighbouring elements), padding copied as zeros. A barrier first when
        the tiles are refilled inside a loop (every item is done reading the last block), one after (the tile is
        whole before anyone reads it)."""
        if in_loop:
            self.b.add(UOps.BARRIER, None, ())
        thread_axes = self.k.axes(Axis.LOCAL, Axis.GROUP)
        item: Node = NumNode(0)
        items = 1
        for i in reversed(thread_axes):
            item, items = item + self.axis_vars[i] * items, items * int(self.full_shape[i])
        for plan in plans:
            buf = next(b for b in self.k.membufs if b.idx == plan.buf)
            tile = self.tiles[plan.buf]
            rounds = -(-plan.count // items)
            ranges = []
            elem: Node = item
            if rounds > 1:
                step = Variable(f"pack{plan.buf}_step", 0, rounds - 1)
                rng = self.b.add(UOps.RANGE, self.index, (self.index_const(0), self.index_const(rounds)), (-1, False))
                self.b.open_scope()
                self.var_uops[step] = rng
                ranges.append(rng)
                elem = step * items + item
            coords = {axis: (elem // stride) % size for axis, stride, size in
                      zip(plan.axes, strides_of(plan.sizes), plan.sizes)}  # fmt: skip
            in_tile = elem.lt(plan.count) if rounds * items > plan.count else NumNode(1)
            src_idx, valid = self.k.st_of(buf).expr_idxs(self.source_idxs(plan, coords))
            # an item past the tile's end copies nothing: its load would read past the buffer
            value = self.scalar_load(buf, src_idx, Node.ands([valid, in_tile]))
            gate = () if isinstance(in_tile, NumNode) else (self.node(in_tile),)
            self.b.add(UOps.STORE, None, (tile, self.node(elem), value, *gate))
            self.close_loops(ranges)
            self.packed[plan.buf] = (plan, tile)
        self.b.add(UOps.BARRIER, None, ())
        self.b.invalidate()
        self.load_cache.clear()  # a load of the buffer now reads the tile, whatever the index

    def emit_packs_at(self, plans: list[PackPlan], pos: int, in_loop: bool) -> None:
        """The packs whose point is after loop `pos` of `Kernel.pack_loops` (-1: before them all)."""
        here = [plan for plan in plans if plan.after == pos]
        if not here:
            return
        shared = [plan for plan in here if plan.shared]
        for plan in here:
            if not plan.shared:
                self.emit_pack(plan)
        if shared:
            self.emit_group_packs(shared, in_loop)

    def scalar_load(self, buf: MemBuffer, idx: Node, valid: Node) -> UOp:
        zero = self.b.const(0, buf.dtype)
        if isinstance(valid, NumNode) and valid.b == 0:
            return zero
        key = (buf.idx, idx, valid, 1)
        if key in self.load_cache:
            return self.load_cache[key]
        src: tuple[UOp, ...] = (self.source(buf), self.node(idx))
        if not (isinstance(valid, NumNode) and valid.b == 1):
            src += (self.node(valid), zero)
        self.load_cache[key] = out = self.b.add(UOps.LOAD, buf.dtype, src)
        return out

    def const(self, buf: ConstBuffer, lane: Lane) -> UOp:
        if buf.val is RAMP_VALUE:
            return self.ramp(buf, lane)
        if isinstance(buf.val, Node):
            value = self.var_uops[buf.val] if buf.val in self.var_uops else self.node(buf.val)  # type: ignore[index]
            value = self.b.add(UOps.CAST, buf.dtype, (value,)) if buf.dtype != self.index else value
        else:
            value = self.b.const(buf.val, buf.dtype)
        if not self.vector_on:
            return self.masked(value, self.index_of(buf, lane)[1], buf.dtype)
        # a vector of the constant, each lane masked by its own valid expression (a padded constant differs by lane)
        lanes = [self.masked(value, self.index_of(buf, self.with_vec_lane(lane, i))[1], buf.dtype)
                 for i in range(self.vec_width)]  # fmt: skip
        return self.b.add(UOps.VECTORIZE, buf.dtype.vec(self.vec_width), tuple(lanes))

    def ramp(self, buf: ConstBuffer, lane: Lane) -> UOp:
        """An index ramp read through the leaf's view: each element its index into the ramp (0 in padding)."""

        def element(at: Lane) -> UOp:
            idx, valid = self.index_of(buf, at)
            value = self.node(idx)
            value = self.b.add(UOps.CAST, buf.dtype, (value,)) if buf.dtype != self.index else value
            return self.masked(value, valid, buf.dtype)

        if not self.vector_on:
            return element(lane)
        lanes = tuple(element(self.with_vec_lane(lane, i)) for i in range(self.vec_width))
        return self.b.add(UOps.VECTORIZE, buf.dtype.vec(self.vec_width), lanes)

    def masked(self, value: UOp, valid: Node, dtype: DType) -> UOp:
        """`value` where `valid`, else 0 (padding)."""
        if isinstance(valid, NumNode) and valid.b == 1:
            return value
        if isinstance(valid, NumNode) and valid.b == 0:
            return self.b.const(0, dtype)
        return self.b.alu(Ops.WHERE, self.node(valid), value, self.b.const(0, dtype))

    def value(self, node: LazyOp, lane: Lane) -> UOp:
        """The UOp computing `node` in `lane`, lowering what it needs first. Iterative post-order (sources left to
        right, as they are emitted): a fused chain of thousands of elementwise ops must not overflow the stack."""
        if (hit := self.values.get((id(node), lane))) is not None:
            return hit
        stack: list[tuple[LazyOp, bool]] = [(node, False)]
        while stack:
            cur, ready = stack.pop()
            if (id(cur), lane) in self.values:
                continue
            if ready or cur.op in GroupOp.Reduce or not cur.src:  # a reduce's result comes from its own loop
                self.values[(id(cur), lane)] = self.lower_node(cur, lane)
                continue
            stack.append((cur, True))
            stack.extend((s, False) for s in reversed(cur.src) if (id(s), lane) not in self.values)
        return self.values[(id(node), lane)]

    def lower_node(self, node: LazyOp, lane: Lane) -> UOp:
        """One node, its sources (if any) already lowered for this lane."""
        srcs = [self.values[(id(s), lane)] for s in node.src] if node.op not in GroupOp.Reduce else []
        if node.op is Ops.LOAD:
            return self.gathered_load(node.arg, srcs[0], lane) if node.src else self.load(node.arg, lane)
        if node.op is Ops.CONST:
            return self.const(node.arg, lane)
        if node.op in GroupOp.Reduce:
            result = self.reduce_results[id(node)][self.output_lane(lane)]
            if self.tc_lane is not None:  # this lane's element of the C fragment
                code = lane[self.lane_axes.index(self.k.axes(Axis.TC)[0])]
                return self.b.add(UOps.GEP, node.dtype, (result,), (code - 1) % FRAGMENT_CODES)
            if self.vector_on and self.vec_reduce:  # a combined (scalar) result used inside a later vector loop
                return self.b.add(UOps.VECTORIZE, result.dtype.vec(self.vec_width), (result,) * self.vec_width)  # type: ignore[union-attr]
            return result
        if node.op is Ops.CAST:
            return self.b.add(UOps.CAST, node.dtype, (srcs[0],))
        if node.op is Ops.BITCAST:
            return self.b.add(UOps.BITCAST, node.dtype, (srcs[0],))
        if node.op in POLYNOMIAL_OPS:
            native = node.op in self.k.caps.native_math
            natural = _natural_exponent(node)  # exp(y) reaches a kernel as EXP2(y * log2(e))
            y = self.values.get((id(natural), lane)) if natural is not None else None
            if not native or y is not None:  # (a native exp2 still takes exp's own reduction: `transcendental.exp`)
                return lower_transcendental(self.b, node.op, srcs[0], natural=y, native_exp2=native)
        if node.op is Ops.FDIV and not self.k.caps.exact_division:
            return lower_division(self.b, srcs[0], srcs[1])
        if node.op is Ops.THREEFRY:
            return lower_threefry(self.b, srcs, node.arg)
        if node.op in GroupOp.ALU:
            return self.b.alu(node.op, *srcs)
        raise NotImplementedError(f"cannot lower {node.op} inside a kernel")

    # -- lanes ---------------------------------------------------------------------------------------------------------

    def lanes(self, kinds: tuple[Axis, ...]) -> list[Lane]:
        """Every lane where only axes of `kinds` vary (the others fixed at 0)."""
        ranges = [
            range(self.full_shape[a]) if self.k.kinds[a] in kinds and a != self.vec_axis else range(1)
            for a in self.lane_axes
        ]
        return list(itertools.product(*ranges))

    def reduce_lanes(self) -> list[Lane]:
        """The lanes of a reduce step in the order their updates are emitted. With `Capabilities.interleave_reduce`
        the unrolled reduce steps are outermost, so consecutive updates go to different accumulators: each still
        takes its steps in order (the same sums, bit for bit), but a compiler that emits code in the order given
        (gcc at -O1 does not schedule) no longer waits out a multiply-add's latency between dependent updates of
        one accumulator."""
        lanes = self.lanes((Axis.UPCAST, Axis.UNROLL))
        if not self.k.caps.interleave_reduce:  # (each accumulator's steps together: see `Capabilities`)
            return lanes
        unrolled = [i for i, a in enumerate(self.lane_axes) if self.k.kinds[a] is Axis.UNROLL]
        return sorted(lanes, key=lambda lane: [lane[i] for i in unrolled]) if unrolled else lanes

    def output_lane(self, lane: Lane) -> Lane:
        return tuple(v if self.k.kinds[a] is Axis.UPCAST else 0 for a, v in zip(self.lane_axes, lane))

    # -- the kernel ----------------------------------------------------------------------------------------------------

    def reduce(self, rop: LazyOp) -> None:
        if self.tc_lane is not None:
            return self.tc_reduce(rop)
        dtype = rop.dtype.vec(self.vec_width) if self.vec_axis is not None else rop.dtype
        accs = {
            lane: self.b.add(UOps.DEFINE_ACC, dtype, (), identity_element(rop.op, rop.dtype))
            for lane in self.lanes((Axis.UPCAST,))
        }
        loops: list[UOp] = []
        for axis in self.k.axes(Axis.REDUCE):  # tiles refilled per reduce step go in after their loop opens
            loops += self.open_loops([axis], "ridx")
            if axis in self.pack_pos:  # a pack point only on a device with threads (`Kernel.pack_loops`)
                self.emit_packs_at(self.plans, self.pack_pos[axis], in_loop=True)
        self.vector_on = self.vec_axis is not None
        current = dict(accs)
        src = rop.src[0]
        fused_mul = rop.op is Ops.SUM and src.op is Ops.MUL  # sum of products: one multiply-add per step
        for lane in self.reduce_lanes():
            out_lane = self.output_lane(lane)
            if fused_mul:
                a, b = (self.value(s, lane) for s in src.src)
                new = self.b.alu(Ops.MULACC, a, b, current[out_lane])
            else:
                new = self.b.alu(REDUCE_ALU[rop.op], current[out_lane], self.value(src, lane))
            current[out_lane] = self.b.add(UOps.ASSIGN, dtype, (accs[out_lane], new))
        self.close_loops(loops)
        self.values.clear()  # values made inside the reduce loop are out of scope now
        if self.vec_reduce:  # lanes along the reduce axis: combine each vector accumulator into its result
            self.vector_on = False
            accs = {lane: self.combine_lanes(rop, acc) for lane, acc in accs.items()}
        self.reduce_results[id(rop)] = self.group_reduce(rop, accs) if self.k.axes(Axis.GROUP) else accs

    def combine_lanes(self, rop: LazyOp, acc: UOp) -> UOp:
        """The lanes of a vector accumulator combined pairwise (a tree: fewer dependent steps than a chain)."""
        parts = [self.b.add(UOps.GEP, rop.dtype, (acc,), i) for i in range(self.vec_width)]
        while len(parts) > 1:
            parts = [self.b.alu(REDUCE_ALU[rop.op], parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
        return parts[0]

    def group_reduce(self, rop: LazyOp, accs: dict[Lane, UOp]) -> dict[Lane, UOp]:
        """Each thread of a group holds a partial; they meet in local memory and the group's thread 0 combines them.
        Leaves an IF open (closed after the output store): only that thread writes the result."""
        lanes = list(accs)
        local_id, n_local = self.linear_id(Axis.LOCAL)
        group_id, n_group = self.linear_id(Axis.GROUP)
        dtype = rop.dtype
        temp = self.b.add(UOps.DEFINE_LOCAL, dtype.ptr(), (), ("temp", n_local * n_group * len(lanes)))
        for n, lane in enumerate(lanes):
            slot = (local_id * n_group + group_id) * len(lanes) + n
            self.b.add(UOps.STORE, None, (temp, self.node(slot), accs[lane]))
        self.b.add(UOps.BARRIER, None, ())
        self.b.invalidate()
        self.open_if = self.b.add(UOps.IF, None, (self.node(group_id.lt(1)),))
        self.b.open_scope()
        out = {}
        for n, lane in enumerate(lanes):
            acc = self.b.add(UOps.DEFINE_ACC, dtype, (), identity_element(rop.op, dtype))
            j = Variable(f"grpsum{n}", 0, n_group - 1)
            rng = self.b.add(UOps.RANGE, self.index, (self.index_const(0), self.index_const(n_group)), (-1, True))
            self.b.open_scope()
            self.var_uops[j] = rng
            partial = self.b.add(UOps.LOAD, dtype, (temp, self.node((local_id * n_group + j) * len(lanes) + n)))
            self.b.add(UOps.ASSIGN, dtype, (acc, self.b.alu(REDUCE_ALU[rop.op], acc, partial)))
            self.close_loops([rng])
            out[lane] = acc
        return out

    def store(self, out_buf: MemBuffer, lane: Lane, val: UOp) -> None:
        idx, valid = self.index_of(out_buf, lane)
        src: tuple[UOp, ...] = (self.bufs_uop[0], self.node(idx), val)
        if not (isinstance(valid, NumNode) and valid.b == 1):
            src += (self.node(valid),)
        self.b.add(UOps.STORE, None, src)

    def lower(self) -> list[UOp]:
        k = self.k
        self.bufs_uop: dict[int, UOp] = {}
        self.reduce_results: dict[int, dict[Lane, UOp]] = {}
        self.make_axis_vars()
        self.define_params()
        out_axes = k.axes(Axis.GLOBAL)
        if k.caps.has_threads:
            out_axes = self.define_specials(out_axes)
        self.packed: dict[int, tuple[PackPlan, UOp]] = {}
        self.plans = [p for idx in k.packs if (p := k.pack_plan(idx)) is not None]
        self.pack_pos = {axis: pos for pos, axis in enumerate(k.pack_loops())}
        # local memory is declared at the kernel's outermost scope (OpenCL requires it), however deep it is filled
        self.tiles = {plan.buf: self.define_tile(plan) for plan in self.plans if plan.shared}
        outer: list[UOp] = []
        self.emit_packs_at(self.plans, -1, in_loop=False)
        for axis in out_axes:
            outer += self.open_loops([axis], "gidx")
            if axis in self.pack_pos:  # (symbolic launch sizes keep every output loop: no pack plans then)
                self.emit_packs_at(self.plans, self.pack_pos[axis], in_loop=True)
        self.open_if = None
        for rop in k.reduceops:
            self.reduce(rop)
        store = k.ast.src[0]
        out_buf: MemBuffer = store.arg
        # vector lanes not contiguous in the output, or a float32 result cast to the output's dtype: one store per lane
        computed = self.k.stored_value() if self.vector_on and k.reduceops else store.src[0]
        scatter = self.vector_on and (computed is not store.src[0] or self.k.output_stride(self.vec_axis) != 1)  # type: ignore[arg-type]
        out_lanes = self.lanes((Axis.UPCAST,))
        if self.k.tensor_core is not None:  # each of the thread's elements of the C fragment
            out_lanes = [self.tc_code(lane, 2, e) for lane in out_lanes for e in range(self.k.tensor_core.c.elements)]
        for lane in out_lanes:
            val = self.value(computed, lane)
            if scatter:
                for i in range(self.vec_width):
                    lane_val = self.b.add(UOps.GEP, val.dtype.scalar(), (val,), i)  # type: ignore[union-attr]
                    if computed is not store.src[0]:
                        lane_val = self.b.add(UOps.CAST, out_buf.dtype, (lane_val,))
                    self.store(out_buf, self.with_vec_lane(lane, i), lane_val)
            else:
                self.store(out_buf, lane, val)  # with a vector axis: lane 0 of a contiguous run
        if self.open_if is not None:
            self.b.add(UOps.ENDIF, None, (self.open_if,))
            self.b.close_scope()
        self.close_loops(outer)
        return self.b.uops


def strides_of(sizes: tuple[int, ...]) -> list[int]:
    """Row-major strides of an array of `sizes`."""
    out, acc = [], 1
    for size in reversed(sizes):
        out.append(acc)
        acc *= size
    return out[::-1]


def lower_kernel(k: Kernel) -> tuple[list[UOp], Lowerer]:
    """The kernel's UOps with the narrowest index dtype that holds all its index values (int32 unless a size, offset
    or index can pass 2**31 - 1, or the renderer asks for `Capabilities.wide_index`), and the lowerer (launch sizes,
    parameters)."""
    for index in INDEX_DTYPES[1:] if k.caps.wide_index else INDEX_DTYPES:
        lowerer = Lowerer(k, index)
        try:
            return lowerer.lower(), lowerer
        except IndexOverflow as e:
            error = e
    raise IndexOverflow(f"a kernel of shape {k.full_shape} cannot be indexed: {error}; smaller sizes (or a smaller "
                        "upper bound of a symbolic Variable) make it fit") from error  # fmt: skip


def estimate_ops(ast: LazyOp, full_shape: tuple[sint, ...]) -> sint:
    return prod(full_shape) * max(alu_ops(ast.toposort()), 1)


def _natural_exponent(node: LazyOp) -> LazyOp | None:
    """y, when `node` is EXP2(y * log2(e)) (`Tensor.exp`): the polynomial then reduces y by ln 2 itself instead of
    rounding the product first (`transcendental.exp`)."""
    if node.op is not Ops.EXP2 or node.src[0].op is not Ops.MUL:
        return None
    for y, c in (node.src[0].src, node.src[0].src[::-1]):
        if c.op is Ops.CONST and isinstance(c.arg.val, float) and abs(c.arg.val * _LN2 - 1) < 1e-7:
            # (a padded constant is 0 in the padding: there the product is 0, whatever y is)
            return y if all(v.mask is None for v in c.arg.st.views) else None
    return None


_LN2 = math.log(2)

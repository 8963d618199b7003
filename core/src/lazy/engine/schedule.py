"""`create_schedule(outs)`: decide which LazyBuffers get their own memory (the fusion decisions) and build one
kernel AST per realized buffer, in program order (each after what it reads, the outputs in the order given).

Fusion rules: elementwise ops fuse into whatever consumes them; a reduction fuses with its elementwise producers
and with its elementwise consumers of its own output shape (seen through no movement op) when they all lead to one
realized buffer, however often they use it; a buffer is realized before it is expanded (recomputing it per broadcast
element would multiply the work) and before a pad when its ops are unsafe to pad (f(0) != 0 would leak into the
padding).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from lazy.device import Buffer, get_device
from lazy.helpers import DEBUG, VIZ, prod
from lazy.lazy import PEER_READ, LazyBuffer, same_memory, snapshots_for
from lazy.ops import RAMP_VALUE, ConstBuffer, GroupOp, LazyOp, MemBuffer, Ops
from lazy.record import field, record, replace
from lazy.shape import ShapeTracker, View, strides_for_shape
from lazy.symbolic import Node, Variable, merge_bindings

if TYPE_CHECKING:
    from lazy.viz.capture import ScheduleRecord


@record(frozen=True)
class ScheduleItem:
    """One thing to run: a kernel (`ast.op is SINK`), a copy between devices, or an allocation (EMPTY)."""

    ast: LazyOp
    bufs: tuple[Buffer, ...]  # outputs first, then inputs in MemBuffer index order
    outputs: tuple[LazyBuffer, ...] = ()
    var_vals: dict[Variable, int] = field(default_factory=dict)
    inputs: tuple[LazyBuffer, ...] = ()  # the bases whose memory `bufs[len(outputs):]` is, in order

    @property
    def kind(self) -> str:
        kinds = {Ops.SINK: "kernel", Ops.COPY: "copy", Ops.EMPTY: "empty", Ops.BUFFER_VIEW: "view"}
        return kinds.get(self.ast.op, self.ast.op.name.lower())

    def __repr__(self) -> str:
        return f"<ScheduleItem {self.kind} {[b for b in self.bufs]}>"


# the bases that get memory and why (the first reason found; LAZY_VIZ shows it), insertion-ordered: a set's order
# would follow object ids
Realizes = dict[LazyBuffer, str]


class _Graph:
    """The unrealized part of the lazy graph reachable from the outputs. `bases` is in program order: each base after
    its sources (in source order), the outputs in the order given. Every container here is insertion-ordered, so the
    fusion decisions and the schedule never depend on object ids or hash seeds."""

    def __init__(self, outs: list[LazyBuffer]):
        self.views_of: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]] = defaultdict(list)  # base -> (user, src)
        self.bases: dict[LazyBuffer, None] = {}
        entered: set[LazyBuffer] = set()  # membership only: never iterated
        for out in outs:
            self._visit(out.base, entered)

    def _visit(self, root: LazyBuffer, entered: set[LazyBuffer]) -> None:
        stack: list[tuple[LazyBuffer, bool]] = [(root, False)]
        while stack:  # iterative post-order: graphs can be deeper than Python's recursion limit
            node, sources_done = stack.pop()
            if sources_done:
                self.bases[node] = None
                continue
            if node in entered:
                continue
            entered.add(node)
            stack.append((node, True))
            if node.realized is not None:
                continue
            for src in node.srcs:
                self.views_of[src.base].append((node, src))
            stack.extend((src.base, False) for src in reversed(node.srcs))


def _has_unsafe_pad_op(base: LazyBuffer, realizes: Realizes) -> bool:
    """Does `base`'s kernel (down to realized buffers) contain an op with f(0) != 0?"""
    seen: set[LazyBuffer] = set()
    stack = [base]
    while stack:  # iterative: a fused elementwise chain can be thousands of ops deep
        node = stack.pop()
        if node in seen or node.realized is not None or node.op in GroupOp.Computed:
            continue
        seen.add(node)
        if node.op in GroupOp.UnsafePad:
            return True
        stack.extend(src.base for src in node.srcs if src.base not in realizes)
    return False


IN_PLACE_WALK = 1024  # most nodes `_computes_in_place` looks at before it gives up (and the value gets memory first)


def _computes_in_place(assign: LazyBuffer) -> bool:
    """Whether an assign of a whole buffer can compute its value in its own kernel, writing the target's memory as it
    goes: every read of that memory the kernel would make is of the element being written (the target through its
    own shape, by elementwise ops), none under a reduce and none through another view or a buffer view. Else the value
    gets memory of its own first and the assign copies it (an optimizer's update then cost a second kernel and twice
    the memory traffic). Nodes that get memory of their own anyway (forced, copies, other assigns, a reduce in a
    reduce's input) end the walk: they run before the assign."""
    value, target = assign.srcs
    target = target.base
    if assign.arg is not None:  # a write through a view (a KV-cache slice): its value always gets memory first
        return False
    whole = ShapeTracker.from_shape(target.shape)
    stack: list[tuple[LazyBuffer, ShapeTracker, bool]] = [(value, ShapeTracker.from_shape(value.shape), False)]
    seen: set[tuple[int, ShapeTracker, bool]] = set()
    while stack:
        lb, st, reduced = stack.pop()
        base, st = (lb, st) if lb.base is lb else (lb.base, lb.st + st)
        if (id(base), st, reduced) in seen:
            continue
        if len(seen) >= IN_PLACE_WALK:
            return False
        seen.add((id(base), st, reduced))
        if base is target or (base.op is Ops.BUFFER_VIEW and _aliases_memory(base, target)):
            if reduced or st != whole or base is not target:
                return False
            continue
        if base.realized is not None:
            if same_memory(base, target):
                return False
            continue
        if base.op is Ops.CONST or base.op is Ops.RAMP:
            continue
        if base.forced_realize or base.op in (Ops.EMPTY, Ops.COPY, Ops.ASSIGN, Ops.CUSTOM, Ops.CONTIGUOUS):
            continue  # its own kernel, run before this one
        if base.op in GroupOp.Reduce:
            if reduced:  # a reduce inside a reduce's input is a kernel of its own (a gradient's forward matmul)
                continue
            stack += [(src, ShapeTracker.from_shape(src.shape), True) for src in base.srcs]
        elif base.op in GroupOp.Elementwise:
            stack += [(src, st, reduced) for src in base.srcs]
        else:
            return False
    return True


def _aliases_memory(view: LazyBuffer, target: LazyBuffer) -> bool:
    """Whether a BUFFER_VIEW node (or one it is a view of) reads `target`'s memory."""
    while view.op is Ops.BUFFER_VIEW and view.srcs:
        view = view.srcs[0].base
        if view is target:
            return True
    return view.realized is not None and same_memory(view, target)


def _find_realizes(graph: _Graph, outs: list[LazyBuffer]) -> tuple[Realizes, dict[LazyBuffer, LazyBuffer]]:
    realizes: Realizes = {o.base: "output" for o in outs if o.base.realized is None}
    for base in graph.bases:
        if base.realized is not None or base.op is Ops.CONST:
            continue
        if base.forced_realize or base.op in (Ops.EMPTY, Ops.COPY, Ops.ASSIGN, Ops.CUSTOM, Ops.CONTIGUOUS):
            realizes.setdefault(base, _MEMORY_OPS.get(base.op, "forced to memory (.contiguous())"))
        if base.op in (Ops.COPY, Ops.ASSIGN, Ops.BUFFER_VIEW):
            why = f"source of {_MEMORY_OPS[base.op]}"
            for src in base.srcs:
                if src.base.realized is None and src.base.op is not Ops.CONST:
                    if base.op is Ops.ASSIGN and src is base.srcs[0] and _computes_in_place(base):
                        continue  # computed by the assign's own kernel, straight into the target's memory
                    realizes.setdefault(src.base, why)
        if base.op is Ops.BUFFER_VIEW:
            realizes.setdefault(base, _MEMORY_OPS[base.op])
        if base.op is Ops.GATHER and (src := base.srcs[0].base).realized is None:
            realizes.setdefault(src, "source of a gather (read at addresses the index gives)")
    # realize before an expand, and before a pad of ops that are unsafe to pad
    for base, uses in graph.views_of.items():
        if base.realized is not None or base.op in GroupOp.Computed:  # computed again wherever it is read
            continue
        for _, view in uses:
            if view is base:
                continue
            if _grows(view.st, base) and not _cast_of_memory(base, realizes):
                realizes.setdefault(base, "expanded: a view reads its elements more than once")
            elif any(v.mask is not None for v in view.st.views) and _has_unsafe_pad_op(base, realizes):
                realizes.setdefault(base, "padded: its ops are unsafe to pad (f(0) != 0 would leak into the padding)")
    fused = _decide_reduces(graph, realizes)
    return realizes, fused


# what each op that always gets memory is, for the reason LAZY_VIZ shows
_MEMORY_OPS: dict[Ops | None, str] = {
    Ops.EMPTY: "an allocation",
    Ops.COPY: "a copy",
    Ops.ASSIGN: "an assign",
    Ops.CUSTOM: "a custom op",
    Ops.CONTIGUOUS: "contiguous (.contiguous())",
    Ops.BUFFER_VIEW: "a buffer view",
}


def _cast_of_memory(base: LazyBuffer, realizes: Realizes) -> bool:
    """A cast from a dtype the device's tensor cores take stays in the consuming kernel, its narrow source realized
    instead (if not in memory already): a half matmul reads its half operands and the tensor core takes them. On
    other devices the converted copy is made first: one pass over the operand, and the kernel's vector code reads
    float32."""
    if base.op is not Ops.CAST or (src := base.srcs[0]).base.op in GroupOp.Computed:
        return False
    dev = get_device(base.device)
    if dev.kernel_refusal is not None or not any(tc.dtype_in == src.dtype for tc in dev.renderer.caps.tensor_cores):
        return False
    if src.base.realized is None:
        realizes.setdefault(src.base, "source of a cast the device's tensor cores take")
    return True


def _grows(st: ShapeTracker, base: LazyBuffer) -> bool:
    """Does this view read base elements more than once (an expand), so that recomputing them costs extra?
    A pad grows the shape but reads each element once: only the valid region counts."""
    try:
        if prod(st.shape) <= prod(base.shape):
            return False
        last = st.views[-1]
        return not (
            len(st.views) == 1 and last.mask is not None and prod(b - a for a, b in last.mask) <= prod(base.shape)
        )
    except TypeError:
        return True


def _decide_reduces(graph: _Graph, realizes: Realizes) -> dict[LazyBuffer, LazyBuffer]:
    """A reduce stays inside its consumer's kernel when its elementwise consumers, which see it through no movement
    op but a plain reshape, all lead to that one kernel (`_fusion_root`), and no other reduce is fused there first.
    Returns kernel root -> the reduce fused into it."""
    fused: dict[LazyBuffer, LazyBuffer] = {}
    for base in graph.bases:
        if base.op not in GroupOp.Reduce or base.realized is not None or base in realizes:
            continue
        root = _fusion_root(graph, base, realizes)
        if isinstance(root, str):
            realizes[base] = f"reduce not fused: {root}"
        elif root in fused:
            realizes[base] = "reduce not fused: its consumers' kernel holds another reduce (one per kernel)"
        else:
            fused[root] = base  # one reduce per kernel
    return fused


def _fusion_root(graph: _Graph, reduce: LazyBuffer, realizes: Realizes) -> LazyBuffer | str:
    """The one realized buffer that every use of `reduce` leads to through elementwise ops of its size, seen through
    no movement op but a plain reshape, or why there is no such single root. The ops on the way may use the reduce
    (and each other) more than once, as `m.isinf().where(0, m)` does: they all become part of one kernel."""
    roots: dict[LazyBuffer, None] = {}
    seen, stack = {reduce}, [reduce]
    while stack:
        node = stack.pop()
        uses = graph.views_of.get(node, [])
        if not uses:
            return "a node on the way to memory is read by nothing"
        for child, src in uses:
            if src is not node and not (src.st.contiguous and src.size == node.size):
                return "read through a movement op other than a reshape"
            if child.size != reduce.size:
                return f"a consumer has another size ({child.op.name if child.op else '?'} to {child.shape})"
            if child.op not in GroupOp.Elementwise and child.op not in (Ops.CONTIGUOUS, Ops.ASSIGN):
                return f"read by a {child.op.name if child.op else '?'}, not an elementwise op"
            if child in realizes:
                roots[child] = None
            elif child not in seen:
                seen.add(child)
                stack.append(child)
    return next(iter(roots)) if len(roots) == 1 else f"its uses lead to {len(roots)} buffers in memory, not one"


def _all_padding(st: ShapeTracker) -> bool:
    """True when a view stack has an empty mask range: every element is padding. (Such a mask cannot survive the
    kernel dropping size-1 axes, so it must become a constant before lowering.)"""
    return any(v.mask is not None and any(b - a == 0 for a, b in v.mask) for v in st.views)


Use = tuple[LazyBuffer, ShapeTracker]  # a base read through a view: one AST node per distinct use


class _KernelBuilder:
    def __init__(self, root: LazyBuffer, realizes: Realizes):
        self.root, self.realizes = root, realizes
        self.inputs: dict[LazyBuffer, int] = {}  # input -> its MemBuffer index, in order of first use
        self.cache: dict[Use, LazyOp] = {}
        self.var_vals: dict[Variable, int] = {}

    def unbind(self, st: ShapeTracker) -> ShapeTracker:
        st = st.simplify()
        unbound, var_vals = st.unbind()
        merge_bindings(self.var_vals, var_vals)  # one kernel, one value per variable
        return unbound

    def build(self, lb: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The AST of `lb` read through `st`. Iterative (sources before users, first source first, so inputs are
        numbered as a left-to-right walk meets them): a fused elementwise chain can be deeper than Python's
        recursion limit."""
        root = _use(lb, st)
        stack: list[tuple[Use, list[Use] | None]] = [(root, None)]  # (use, its sources once expanded)
        while stack:
            use, sources = stack.pop()
            if sources is not None:
                srcs = tuple(self.cache[src] for src in sources)
                self.cache[use] = self._gathered(use, srcs[0]) if use[0].op is Ops.GATHER else self._inner(use[0], srcs)
                continue
            if use in self.cache:
                continue
            if (leaf := self._leaf(use)) is not None:
                self.cache[use] = leaf
                continue
            sources = self._sources(use)
            stack.append((use, sources))
            stack.extend((src, None) for src in reversed(sources))
        return self.cache[root]

    def _leaf(self, use: Use) -> LazyOp | None:
        """A constant or a load of an input buffer; None for an op computed inside the kernel."""
        lb, st = use
        if _all_padding(st):  # no element is valid (an empty mask range): it reads as 0, whatever the source is
            return LazyOp(Ops.CONST, (), ConstBuffer(0, lb.dtype, ShapeTracker.from_shape(st.shape)))
        if lb.op is Ops.CONST and lb.realized is None:
            val = lb.arg
            if isinstance(val, Node):  # a bound variable (or an expression of them): its value is a kernel parameter
                bound = {var: var.unbind() for var in val.vars() if var._val is not None}
                merge_bindings(self.var_vals, dict(bound.values()))
                val = val.substitute({var: unbound for var, (unbound, _) in bound.items()})
            return LazyOp(Ops.CONST, (), ConstBuffer(val, lb.dtype, self.unbind(st)))
        if lb.op is Ops.RAMP and lb.realized is None:
            return LazyOp(Ops.CONST, (), ConstBuffer(RAMP_VALUE, lb.dtype, self.unbind(st)))
        if lb is not self.root and (lb.realized is not None or lb in self.realizes):
            idx = self.inputs.setdefault(lb, len(self.inputs) + 1)
            return LazyOp(Ops.LOAD, (), MemBuffer(idx, lb.dtype, self.unbind(st)))
        return None

    def _gathered(self, use: Use, index: LazyOp) -> LazyOp:
        """A gather read through `st`: a load of the source's buffer at the element the view gives with the gathered
        axis at 0 (that axis pinned to stride 0 in the source's row-major layout), plus the index (the load's
        source) times that axis's stride in memory."""
        lb, st = use
        x, axis = lb.srcs[0], lb.arg
        xst = x.st.simplify()  # one plain view of the base (`gatherable`)
        pinned = tuple(0 if i == axis else s for i, s in enumerate(strides_for_shape(x.shape)))
        full = xst + ShapeTracker((View.create(lb.shape, pinned),)) + st
        idx = self.inputs.setdefault(x.base, len(self.inputs) + 1)
        gather = (int(xst.views[0].strides[axis]), int(x.shape[axis]))
        return LazyOp(Ops.LOAD, (index,), MemBuffer(idx, lb.dtype, self.unbind(full), gather))

    @staticmethod
    def _sources(use: Use) -> list[Use]:
        lb, st = use
        if lb.op is Ops.GATHER:  # the index, read like the result; the source is a load (`_gathered`)
            return [_use(lb.srcs[1], st)]
        if lb.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            return [_use(lb.srcs[0], st)]
        if lb.op in GroupOp.Reduce:
            assert st.contiguous and st.shape == lb.shape, f"a fused reduce is read through its own shape, not {st}"
            src = lb.srcs[0]
            return [_use(src, ShapeTracker.from_shape(src.shape))]
        if lb.op in GroupOp.Elementwise:
            return [_use(src, st) for src in lb.srcs]
        raise RuntimeError(f"cannot put {lb.op} inside a kernel")

    @staticmethod
    def _inner(lb: LazyBuffer, srcs: tuple[LazyOp, ...]) -> LazyOp:
        if lb.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            return srcs[0]  # a kernel that computes into its output's memory: the op is the store itself
        assert lb.op is not None, "a base always has an op"
        return LazyOp(lb.op, srcs, lb.arg)


def _use(lb: LazyBuffer, st: ShapeTracker) -> Use:
    """`lb` read through `st`, as a base and the composed view."""
    return (lb, st) if lb.base is lb else (lb.base, lb.st + st)


def _schedule_one(
    base: LazyBuffer, realizes: Realizes, reduce: LazyBuffer | None, builders: dict[LazyBuffer, _KernelBuilder] | None
) -> tuple[ScheduleItem, list[LazyBuffer]]:
    if base.op is Ops.EMPTY:
        return ScheduleItem(LazyOp(Ops.EMPTY), (base.buffer,), (base,)), []
    if base.op is Ops.BUFFER_VIEW:  # nothing to run once the source is there: the view shares its memory
        src = base.srcs[0].base
        return ScheduleItem(LazyOp(Ops.BUFFER_VIEW, (), base.arg), (base.buffer, src.buffer), (base,), {},
                            (src,)), [src]  # fmt: skip
    if base.op is Ops.COPY:
        src = base.srcs[0].base
        arg = (base.buffer.nbytes, PEER_READ) if base.arg == PEER_READ else base.buffer.nbytes
        return ScheduleItem(LazyOp(Ops.COPY, (), arg), (base.buffer, src.buffer), (base,), {}, (src,)), [src]
    if isinstance(base.size, int) and base.size == 0:  # no element to write: the buffer only needs to exist
        return ScheduleItem(LazyOp(Ops.EMPTY), (base.buffer,), (base,)), []
    builder = _KernelBuilder(base, realizes)
    if builders is not None:  # LAZY_VIZ: the nodes it fuses are the ones it builds
        builders[base] = builder
    out_st = ShapeTracker.from_shape(base.shape)
    if reduce is not None and reduce.shape != base.shape:
        out_st = out_st.reshape(reduce.shape)  # the kernel works in the reduce's shape; the output is a reshape of it
    if base.op is Ops.ASSIGN and base.arg is not None:  # a write through a view: the kernel runs over the view only
        value = builder.build(base, ShapeTracker.from_shape(base.srcs[0].shape))
        store = LazyOp(Ops.STORE, (value,), MemBuffer(0, base.dtype, builder.unbind(base.arg)))
        return ScheduleItem(LazyOp(Ops.SINK, (store,)), (base.buffer,) + tuple(x.buffer for x in builder.inputs),
                            (base,), builder.var_vals, tuple(builder.inputs)), list(builder.inputs)  # fmt: skip
    value = builder.build(base, out_st)
    store = LazyOp(Ops.STORE, (value,), MemBuffer(0, base.dtype, builder.unbind(out_st)))
    ast = LazyOp(Ops.SINK, (store,))
    bufs = (base.buffer,) + tuple(x.buffer for x in builder.inputs)
    return ScheduleItem(ast, bufs, (base,), builder.var_vals, tuple(builder.inputs)), list(builder.inputs)


def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    """The kernels (and copies) that realizing `outs` runs, in program order: each after the items it reads, the
    outputs in the order given; the same order in every run (it never depends on object ids or hash seeds).

    An assign overwrites its target's memory: nodes that read the old value and may be realized after it (a tensor
    holds them, see `lazy.lazy.outliving_readers`) are re-pointed at a snapshot of that value, copied first."""
    record = _viz_record() if VIZ else None
    order, clobbered = _schedule(outs, record)
    targets = [out.srcs[1].base for si in order for out in si.outputs if out.op is Ops.ASSIGN]
    if targets:
        realized = {id(out) for si in order for out in si.outputs}
        if snapshots := snapshots_for(targets, realized, {id(target) for target in clobbered}):
            # a kernel that reads a target both before and after its assign reads the copy; the others read the
            # target itself (they run first) and the copy only afterwards, so a jit need not replay an unread copy
            first = [snap for snap in snapshots if snap.target in clobbered]
            for snap in first:
                snap.reroute()
            order, _ = _schedule([*outs, *(snap.copy for snap in snapshots)], record)
            for snap in snapshots:
                if snap not in first:
                    snap.reroute()
    if any(is_peer_read(si.ast) for si in order):
        order = _order_peer_reads(order)
    if DEBUG >= 3:
        for i, si in enumerate(order):
            print(f"schedule {i}: {si.kind} {si.ast.digest.hex()[:12]}")
            if si.kind == "kernel":
                print("  " + repr(si.ast).replace("\n", "\n  "))
    if record is not None:
        record.finish(outs, order)
    return order


def is_peer_read(ast: LazyOp) -> bool:
    """A copy its destination's kernels may read in place (see `LazyBuffer.copy_to_device`)."""
    return ast.op is Ops.COPY and isinstance(ast.arg, tuple) and ast.arg[1] == PEER_READ


def _order_peer_reads(order: list[ScheduleItem]) -> list[ScheduleItem]:
    """Place the peer reads of a schedule where reading in place is safe and the devices overlap.

    A peer read waits for its source's device to finish what it was given, then lends that memory to the other
    device (`lazy.engine.realize.PeerRead`). It stays an ordinary copy when a later item writes its source's memory
    (the reader could still be reading it then). The others move forward to just before the first item that reads
    any peer read, as far as no item in between writes their source: so they all wait before a kernel reading another
    device's memory is queued on a device whose work they wait for (an allreduce's devices then add at once)."""

    def root(buf: Buffer) -> int:
        return id(buf.base if buf.base is not None else buf)

    # what each item writes (a view writes nothing: it only places a buffer in its source's memory)
    writes = [set() if si.ast.op is Ops.BUFFER_VIEW else {root(b) for b in si.bufs[: len(si.outputs)]} for si in order]
    for i, si in enumerate(order):
        if is_peer_read(si.ast) and any(root(si.bufs[1]) in w for w in writes[i + 1 :]):
            order[i] = replace(si, ast=LazyOp(Ops.COPY, (), si.bufs[0].nbytes))
    peer = [is_peer_read(si.ast) for si in order]
    lent = {id(si.bufs[0]) for si, p in zip(order, peer) if p}
    # the items that move: the peer reads, and the views they read from
    sources = {id(si.bufs[1]) for si, p in zip(order, peer) if p}
    movable = [p or (si.ast.op is Ops.BUFFER_VIEW and id(si.bufs[0]) in sources) for si, p in zip(order, peer)]
    done = [False] * len(order)
    out: list[ScheduleItem] = []
    for i, si in enumerate(order):
        if done[i]:
            continue
        if not movable[i] and any(id(b) in lent for b in si.bufs[len(si.outputs) :]):
            blocked: set[int] = set()  # memory written by an item not yet run: what reads it stays behind that item
            for j in range(i, len(order)):
                if done[j]:
                    continue
                if movable[j] and root(order[j].bufs[1]) not in blocked:
                    out.append(order[j])
                    done[j] = True
                else:
                    blocked |= writes[j]
        out.append(si)
        done[i] = True
    return out


def _viz_record() -> ScheduleRecord:
    from lazy.viz.capture import ScheduleRecord  # only while LAZY_VIZ records

    return ScheduleRecord()


def _schedule(
    outs: list[LazyBuffer], record: ScheduleRecord | None = None
) -> tuple[list[ScheduleItem], list[LazyBuffer]]:
    """The schedule, and the assign targets some kernel reads both before and after the assign (see `_run_order`).
    `record` (LAZY_VIZ) gets the graph, the fusion decisions and each kernel's builder."""
    graph = _Graph(outs)
    realizes, fused = _find_realizes(graph, outs)
    items: dict[LazyBuffer, tuple[ScheduleItem, list[LazyBuffer]]] = {}
    builders: dict[LazyBuffer, _KernelBuilder] | None = {} if record is not None else None
    for base in graph.bases:
        if base in realizes and base.realized is None:
            items[base] = _schedule_one(base, realizes, fused.get(base), builders)
    if record is not None and builders is not None:
        record.scheduled(graph.bases, realizes, builders)
    return _run_order(items)


def _reaches(start: LazyBuffer, goal: LazyBuffer, deps: dict[LazyBuffer, list[LazyBuffer]]) -> bool:
    """Does `start` depend on `goal`, directly or through other items?"""
    seen: set[LazyBuffer] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        if node is goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(deps.get(node, ()))
    return False


def _run_order(
    items: dict[LazyBuffer, tuple[ScheduleItem, list[LazyBuffer]]],
) -> tuple[list[ScheduleItem], list[LazyBuffer]]:
    """`items` (in program order) moved only where a dependency demands it: after the items whose output they read,
    and an ASSIGN after its target's producer and after every other item that still reads the target's old value
    (it overwrites that memory). Also returns the targets that some item reads both before and after its assign: no
    order is right for those (`create_schedule` gives such readers a snapshot and schedules again)."""
    deps = {base: list(inputs) for base, (_, inputs) in items.items()}
    readers: dict[LazyBuffer, list[LazyBuffer]] = defaultdict(list)
    for base, (_, inputs) in items.items():
        for src in inputs:
            readers[src].append(base)
    clobbered: list[LazyBuffer] = []
    for base in items:
        if base.op is Ops.ASSIGN:
            target = base.srcs[1].base
            old_readers = [r for r in readers[target] if r is not base]
            before = [r for r in old_readers if not _reaches(r, base, deps)]  # the rest read the assign's result too
            deps[base] += [target, *before]
            if len(before) < len(old_readers):
                clobbered.append(target)
    order: list[ScheduleItem] = []
    state: dict[LazyBuffer, int] = {}  # 1: being visited, 2: placed
    for root in items:
        stack: list[tuple[LazyBuffer, bool]] = [(root, False)]
        while stack:  # depth-first, dependencies in order
            node, deps_done = stack.pop()
            if deps_done:
                state[node] = 2
                order.append(items[node][0])
                continue
            if state.get(node):
                continue
            state[node] = 1
            stack.append((node, True))
            stack.extend((d, False) for d in reversed(deps[node]) if d in items and not state.get(d))
    return order, clobbered


def schedule_key(si: ScheduleItem) -> Any:
    return si.ast


# -- the structure of a graph: what a schedule depends on ----------------------------------------------------------


class Structure:
    """The unrealized graph behind some outputs, with its buffers abstracted: `key` holds, for every node reached
    (in the order a walk from the outputs meets them), what decides its part of the schedule (op, argument, dtype,
    device, view, bound variable values, whether it is forced to memory, and its sources as indices into `nodes`);
    a realized node is only a buffer of some device, dtype and shape (with its variables' bound values), and which
    realized nodes share one buffer.
    Two graphs with equal keys get the same schedule, item for item, on their own buffers (`nodes`), except where an
    assign overwrites memory that a node outside the graph still reads (`create_schedule` snapshots it): a graph with
    assigns (`assigns`: their indices) may run a cached schedule only after `lazy.lazy.outliving_readers` finds no
    such node. None of `key` is an object identity. (A plain class: one is made per realize, and a frozen record's
    construction cost a microsecond of the eager op's path.)"""

    __slots__ = ("key", "nodes", "assigns")

    def __init__(self, key: tuple[Any, ...], nodes: list[LazyBuffer], assigns: tuple[int, ...] = ()):
        self.key, self.nodes, self.assigns = key, nodes, assigns


def graph_structure(outs: list[LazyBuffer]) -> Structure:
    """The structure of what realizing `outs` runs (see `Structure`)."""
    index: dict[int, int] = {}
    nodes: list[LazyBuffer] = []
    memory: dict[int, int] = {}  # id of a realized node's buffer -> the index of the first realized node using it
    assigns: list[int] = []
    for out in outs:
        if id(out) not in index:
            index[id(out)] = len(nodes)
            nodes.append(out)
    parts: list[Any] = []
    for i, lb in enumerate(nodes):  # nodes grows as the walk meets them: each is described once
        if (base := lb._base) is not None:  # a view: its tracker over its base
            if (at := index.get(id(base))) is None:
                at = index[id(base)] = len(nodes)
                nodes.append(base)
            parts.append((lb._structure or lb.structure, None, at))
            continue
        if lb.done:  # realized: any buffer of this kind will do, shared where these nodes share one
            shared = memory.setdefault(id(lb.buffer), i)
            # a symbolic shape's variables compare by name and range: their bound values go in the key too
            bound = None if lb.st.static else tuple(sorted((v.expr, val) for v, val in lb.st.var_vals.items()))
            parts.append((lb.device, lb.dtype, lb.shape, bound, shared))
            continue
        if lb.op is Ops.ASSIGN:
            assigns.append(i)
        srcs = []
        for src in lb.srcs:
            if (at := index.get(id(src))) is None:
                at = index[id(src)] = len(nodes)
                nodes.append(src)
            srcs.append(at)
        parts.append((lb._structure or lb.structure, lb.forced_realize, *srcs))
    return Structure((tuple(parts), tuple([index[id(out)] for out in outs])), nodes, tuple(assigns))

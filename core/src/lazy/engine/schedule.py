"""`create_schedule(outs)`: decide which LazyBuffers get their own memory (the fusion decisions) and build one
kernel AST per realized buffer, in dependency order.

Fusion rules: elementwise ops fuse into whatever consumes them; a reduction fuses with its elementwise producers
and with the chain of elementwise consumers of its own output shape (seen through no movement op); a buffer is
realized before it is expanded (recomputing it per broadcast element would multiply the work) and before a pad
when its ops are unsafe to pad (f(0) != 0 would leak into the padding).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from lazy.device import Buffer
from lazy.helpers import DEBUG, prod
from lazy.lazy import LazyBuffer
from lazy.ops import ConstBuffer, GroupOp, LazyOp, MemBuffer, Ops
from lazy.shape import ShapeTracker
from lazy.symbolic import Node, Variable


@dataclass(frozen=True)
class ScheduleItem:
    """One thing to run: a kernel (`ast.op is SINK`), a copy between devices, or an allocation (EMPTY)."""

    ast: LazyOp
    bufs: tuple[Buffer, ...]  # outputs first, then inputs in MemBuffer index order
    outputs: tuple[LazyBuffer, ...] = ()
    var_vals: dict[Variable, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return {Ops.SINK: "kernel", Ops.COPY: "copy", Ops.EMPTY: "empty"}.get(self.ast.op, self.ast.op.name.lower())

    def __repr__(self) -> str:
        return f"<ScheduleItem {self.kind} {[b for b in self.bufs]}>"


class _Graph:
    """The unrealized part of the lazy graph reachable from the outputs."""

    def __init__(self, outs: list[LazyBuffer]):
        self.children: dict[LazyBuffer, list[LazyBuffer]] = defaultdict(list)  # base -> consumer bases (with repeats)
        self.views_of: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]] = defaultdict(
            list
        )  # base -> (consumer, src)
        self.bases: dict[LazyBuffer, None] = {}
        for out in outs:
            self._visit(out.base)

    def _visit(self, base: LazyBuffer) -> None:
        stack = [base]
        while stack:
            node = stack.pop()
            if node in self.bases:
                continue
            self.bases[node] = None
            if node.realized is not None:
                continue
            for src in node.srcs:
                self.children[src.base].append(node)
                self.views_of[src.base].append((node, src))
                stack.append(src.base)


def _has_unsafe_pad_op(base: LazyBuffer, realizes: set[LazyBuffer], seen: set[LazyBuffer]) -> bool:
    if base in seen or base.realized is not None or base.op is Ops.CONST:
        return False
    seen.add(base)
    if base.op in GroupOp.UnsafePad:
        return True
    return any(src.base not in realizes and _has_unsafe_pad_op(src.base, realizes, seen) for src in base.srcs)


def _find_realizes(graph: _Graph, outs: list[LazyBuffer]) -> tuple[set[LazyBuffer], dict[LazyBuffer, LazyBuffer]]:
    realizes: set[LazyBuffer] = {o.base for o in outs if o.base.realized is None}
    for base in graph.bases:
        if base.realized is not None or base.op is Ops.CONST:
            continue
        if base.forced_realize or base.op in (Ops.EMPTY, Ops.COPY, Ops.ASSIGN, Ops.CUSTOM, Ops.CONTIGUOUS):
            realizes.add(base)
        if base.op in (Ops.COPY, Ops.ASSIGN, Ops.BUFFER_VIEW):
            realizes.update(s.base for s in base.srcs if s.base.realized is None and s.base.op is not Ops.CONST)
        if base.op is Ops.BUFFER_VIEW:
            realizes.add(base)
    # realize before an expand, and before a pad of ops that are unsafe to pad
    for base, uses in graph.views_of.items():
        if base.realized is not None or base.op is Ops.CONST:
            continue
        for _, view in uses:
            if view is base:
                continue
            if _grows(view.st, base):
                realizes.add(base)
            elif any(v.mask is not None for v in view.st.views) and _has_unsafe_pad_op(base, realizes, set()):
                realizes.add(base)
    fused = _decide_reduces(graph, realizes)
    return realizes, fused


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


def _decide_reduces(graph: _Graph, realizes: set[LazyBuffer]) -> dict[LazyBuffer, LazyBuffer]:
    """A reduce stays inside its consumer's kernel only along a single chain of elementwise ops that see it through
    no movement op but a plain reshape. Returns kernel root -> the reduce fused into it."""
    fused: dict[LazyBuffer, LazyBuffer] = {}
    for base in graph.bases:
        if base.op not in GroupOp.Reduce or base.realized is not None or base in realizes:
            continue
        root = _fusion_root(graph, base, realizes)
        if root is not None and root not in fused:
            fused[root] = base  # one reduce per kernel
        else:
            realizes.add(base)
    return fused


def _fusion_root(graph: _Graph, reduce: LazyBuffer, realizes: set[LazyBuffer]) -> LazyBuffer | None:
    node = reduce
    while True:
        uses = graph.views_of.get(node, [])
        if len(uses) != 1:
            return None
        child, src = uses[0]
        if src is not node and not (src.st.contiguous and src.size == node.size):
            return None  # read through a movement op other than a reshape
        if child.size != reduce.size:
            return None
        if child.op not in GroupOp.Elementwise and child.op not in (Ops.CONTIGUOUS, Ops.ASSIGN):
            return None
        if child in realizes:
            return child
        node = child


def _all_padding(st: ShapeTracker) -> bool:
    """True when a view stack has an empty mask range: every element is padding. (Such a mask cannot survive the
    kernel dropping size-1 axes, so it must become a constant before lowering.)"""
    return any(v.mask is not None and any(b - a == 0 for a, b in v.mask) for v in st.views)


class _KernelBuilder:
    def __init__(self, root: LazyBuffer, realizes: set[LazyBuffer]):
        self.root, self.realizes = root, realizes
        self.inputs: list[LazyBuffer] = []
        self.cache: dict[tuple[LazyBuffer, ShapeTracker], LazyOp] = {}
        self.var_vals: dict[Variable, int] = {}

    def unbind(self, st: ShapeTracker) -> ShapeTracker:
        st = st.simplify()
        unbound, var_vals = st.unbind()
        self.var_vals.update(var_vals)
        return unbound

    def build(self, lb: LazyBuffer, st: ShapeTracker) -> LazyOp:
        if lb.base is not lb:
            st = lb.st + st
            lb = lb.base
        key = (lb, st)
        if key in self.cache:
            return self.cache[key]
        if _all_padding(st):  # no element is valid (an empty mask range): it reads as 0, whatever the source is
            out = LazyOp(Ops.CONST, (), ConstBuffer(0, lb.dtype, ShapeTracker.from_shape(st.shape)))
        elif lb.op is Ops.CONST and lb.realized is None:
            val = lb.arg
            if isinstance(val, Node):
                unbound, bound_val = val.unbind()  # type: ignore[attr-defined]
                self.var_vals[unbound] = bound_val
                val = unbound
            out = LazyOp(Ops.CONST, (), ConstBuffer(val, lb.dtype, self.unbind(st)))
        elif lb is not self.root and (lb.realized is not None or lb in self.realizes):
            if lb not in self.inputs:
                self.inputs.append(lb)
            out = LazyOp(Ops.LOAD, (), MemBuffer(self.inputs.index(lb) + 1, lb.dtype, self.unbind(st)))
        elif lb.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            out = self.build(lb.srcs[0], st)
        elif lb.op in GroupOp.Reduce:
            assert st.contiguous and st.shape == lb.shape, f"a fused reduce is read through its own shape, not {st}"
            src = lb.srcs[0]
            out = LazyOp(lb.op, (self.build(src, ShapeTracker.from_shape(src.shape)),), lb.arg)
        elif lb.op in GroupOp.Elementwise:
            out = LazyOp(lb.op, tuple(self.build(s, st) for s in lb.srcs), lb.arg)
        else:
            raise RuntimeError(f"cannot put {lb.op} inside a kernel")
        self.cache[key] = out
        return out


def _schedule_one(
    base: LazyBuffer, realizes: set[LazyBuffer], reduce: LazyBuffer | None
) -> tuple[ScheduleItem, list[LazyBuffer]]:
    if base.op is Ops.EMPTY:
        return ScheduleItem(LazyOp(Ops.EMPTY), (base.buffer,), (base,)), []
    if base.op is Ops.BUFFER_VIEW:  # nothing to run once the source is there: the view shares its memory
        src = base.srcs[0].base
        return ScheduleItem(LazyOp(Ops.EMPTY), (base.buffer, src.buffer), (base,)), [src]
    if base.op is Ops.COPY:
        src = base.srcs[0].base
        return ScheduleItem(LazyOp(Ops.COPY, (), base.buffer.nbytes), (base.buffer, src.buffer), (base,)), [src]
    builder = _KernelBuilder(base, realizes)
    out_st = ShapeTracker.from_shape(base.shape)
    if reduce is not None and reduce.shape != base.shape:
        out_st = out_st.reshape(reduce.shape)  # the kernel works in the reduce's shape; the output is a reshape of it
    value = builder.build(base, out_st)
    store = LazyOp(Ops.STORE, (value,), MemBuffer(0, base.dtype, builder.unbind(out_st)))
    ast = LazyOp(Ops.SINK, (store,))
    bufs = (base.buffer,) + tuple(x.buffer for x in builder.inputs)
    return ScheduleItem(ast, bufs, (base,), builder.var_vals), builder.inputs


def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    """The kernels (and copies) that realizing `outs` runs, in an order that respects their dependencies."""
    graph = _Graph(outs)
    realizes, fused = _find_realizes(graph, outs)
    items: dict[LazyBuffer, tuple[ScheduleItem, list[LazyBuffer]]] = {}
    for base in realizes:
        if base.realized is None:
            items[base] = _schedule_one(base, realizes, fused.get(base))
    order: list[ScheduleItem] = []
    state: dict[LazyBuffer, int] = {}

    def visit(base: LazyBuffer) -> None:  # depth-first toposort over kernel inputs
        stack: list[tuple[LazyBuffer, bool]] = [(base, False)]
        while stack:
            node, done = stack.pop()
            if done:
                state[node] = 2
                order.append(items[node][0])
                continue
            if state.get(node):
                continue
            state[node] = 1
            stack.append((node, True))
            deps = list(items[node][1])
            if node.op is Ops.ASSIGN:  # the target's previous value must be complete first
                deps.append(node.srcs[1].base)
            stack.extend((d, False) for d in deps if d in items and not state.get(d))

    for base in items:
        visit(base)
    if DEBUG >= 3:
        for i, si in enumerate(order):
            print(f"schedule {i}: {si.kind} {si.ast if si.kind == 'kernel' else ''}")
    return order


def schedule_key(si: ScheduleItem) -> Any:
    return si.ast

"""`jit` (exported as `TinyJit` too): capture the kernels a function runs on its second call, replay them on later
calls with the new input buffers swapped in. On a device with queues the whole capture is one recorded queue."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from lazy.device import Buffer, get_device
from lazy.engine.realize import CompiledRunner, ExecItem, capturing, run_schedule
from lazy.engine.schedule import create_schedule
from lazy.hcq import HCQGraph
from lazy.helpers import JIT
from lazy.lazy import LazyBuffer
from lazy.ops import Ops
from lazy.symbolic import Node, Variable

R = TypeVar("R")


class JitError(RuntimeError):
    """A jitted function was called in a way its captured kernels cannot replay."""


def _tensors_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Tensors among the arguments (duck-typed on `lazydata`: this layer sits below `lazy.tensor`)."""
    return [v for v in (*args, *kwargs.values()) if isinstance(getattr(v, "lazydata", None), LazyBuffer)]


def _realize(lbs: list[LazyBuffer]) -> None:
    if lbs:
        run_schedule(create_schedule(lbs))


def _var_vals(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[Any]) -> dict[Variable, int]:
    found: dict[Variable, int] = {}
    for v in (*args, *kwargs.values()):
        if isinstance(v, Variable):
            unbound, val = v.unbind()
            found[unbound] = val
    for t in tensors:
        for dim in t.shape:
            if isinstance(dim, Node):
                for var in dim.vars():
                    unbound, val = var.unbind()
                    found[unbound] = val
    return found


class TinyJit(Generic[R]):
    """Decorate a function whose tensor inputs keep their shapes and dtypes from call to call."""

    def __init__(self, fxn: Callable[..., R]):
        self.fxn = fxn
        self.cnt = 0
        self.jit_cache: list[ExecItem] = []
        self.input_replace: dict[tuple[int, int], int] = {}
        self.signature: list[tuple[Any, Any, str]] = []
        self.graph: HCQGraph | None = None
        self.ret: Any = None
        functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

    def reset(self) -> None:
        self.cnt, self.jit_cache, self.input_replace, self.graph, self.ret = 0, [], {}, None, None

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Buffer], list[Any]]:
        tensors = _tensors_in(args, kwargs)
        for t in tensors:  # every input becomes a realized contiguous buffer the captured kernels can read
            lb: LazyBuffer = t.lazydata
            if not (lb.st.contiguous and lb.size == lb.base.size):
                t.lazydata = lb.contiguous()
        _realize([t.lazydata for t in tensors])
        buffers = []
        for t in tensors:
            buf = t.lazydata.base.realized
            assert buf is not None
            buffers.append(buf)
        return buffers, tensors

    def _check_signature(self, tensors: list[Any]) -> None:
        sig = [(tuple(d if isinstance(d, int) else "sym" for d in t.shape), t.dtype, t.device) for t in tensors]
        if self.cnt >= 2 and sig != self.signature:
            raise JitError(
                f"jit: inputs changed from {self.signature} to {sig}; a jitted function needs the same "
                "shapes (except symbolic dimensions), dtypes and devices on every call — call .reset()"
            )
        self.signature = sig

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        if not JIT:
            return self.fxn(*args, **kwargs)
        input_buffers, tensors = self._inputs(args, kwargs)
        self._check_signature(tensors)
        var_vals = _var_vals(args, kwargs, tensors)
        if self.cnt == 0:
            self.ret = self.fxn(*args, **kwargs)
        elif self.cnt == 1:
            self._capture(args, kwargs, input_buffers)
        else:
            self._replay(input_buffers, var_vals)
        self.cnt += 1
        return self.ret

    def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], input_buffers: list[Buffer]) -> None:
        captured: list[ExecItem] = []
        owners: list[tuple[Buffer, weakref.ref[Any]]] = []
        assigned: set[int] = set()  # buffers written in place: their memory belongs to a tensor outside the function

        def record(ei: ExecItem, outputs: tuple[Any, ...]) -> None:
            captured.append(ei)
            owners.extend((out.buffer, weakref.ref(out)) for out in outputs)
            assigned.update(id(out.buffer) for out in outputs if out.op is Ops.ASSIGN)

        capturing.append(record)
        try:
            self.ret = self.fxn(*args, **kwargs)
            rets = self.ret if isinstance(self.ret, (tuple, list)) else (self.ret,)
            _realize([r.lazydata for r in _tensors_in(tuple(rets), {})])
        finally:
            capturing.remove(record)
        self.jit_cache = [ExecItem(ei.runner, list(ei.bufs), dict(ei.var_vals)) for ei in captured]
        # buffers written here whose LazyBuffers are all gone: nothing outside the jit can see them, so they may share
        # memory. Not an assign's target (a parameter, the random generator's state), whatever became of the assign.
        keep = {id(b) for b in input_buffers} | assigned
        keep |= {id(t.lazydata.base.buffer) for t in _tensors_in(tuple(rets), {})}
        keep |= {id(buf) for buf, owner in owners if owner() is not None}
        views = [b for ei in captured for b in ei.bufs if b.base is not None]  # memory shared with another buffer
        keep |= {id(b) for b in views} | {id(b.base) for b in views}
        internal = {id(buf): buf for buf, owner in owners if id(buf) not in keep}
        plan_memory(self.jit_cache, internal)
        for i, ei in enumerate(self.jit_cache):
            for j, buf in enumerate(ei.bufs):
                for k, inp in enumerate(input_buffers):
                    if buf is inp:
                        self.input_replace[(i, j)] = k
        self._build_graph()

    def _build_graph(self) -> None:
        runners = [ei.runner for ei in self.jit_cache]
        if len(runners) < 2 or not all(isinstance(r, CompiledRunner) for r in runners):
            return
        devices = {r.device for r in runners}
        if len(devices) != 1:
            return
        launches = [ei.runner.launch_args(ei.bufs, ei.var_vals) for ei in self.jit_cache]  # type: ignore[attr-defined]
        self.graph = HCQGraph(get_device(devices.pop()), launches)

    def _replay(self, input_buffers: list[Buffer], var_vals: dict[Variable, int]) -> None:
        touched: set[int] = set()
        for (i, j), k in self.input_replace.items():
            self.jit_cache[i].bufs[j] = input_buffers[k]
            touched.add(i)
        if self.graph is not None:
            updates = {}
            for i, ei in enumerate(self.jit_cache):
                if i in touched or var_vals:
                    _, bufs, vals, _, _ = ei.runner.launch_args(ei.bufs, {**ei.var_vals, **var_vals})  # type: ignore[attr-defined]
                    updates[i] = (bufs, vals)
            for ei in self.jit_cache:
                for buf in ei.bufs:
                    buf.ensure_allocated()
            self.graph.replay(updates)
            return
        for ei in self.jit_cache:
            ei.run(var_vals)


def plan_memory(items: list[ExecItem], internal: dict[int, Buffer]) -> int:
    """Let internal buffers whose lifetimes (first to last use in `items`) do not overlap share one allocation.
    Rewrites `items` in place; returns how many buffers were folded into others."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, ei in enumerate(items):
        for buf in ei.bufs:
            if id(buf) in internal:
                first.setdefault(id(buf), i)
                last[id(buf)] = i
    slots: dict[tuple[str, int], list[list[Any]]] = {}  # (device, nbytes) -> [[busy until, buffer], ...]
    replace: dict[int, Buffer] = {}
    for key in sorted(first, key=first.__getitem__):
        buf = internal[key]
        pool = slots.setdefault((buf.device, buf.nbytes), [])
        free = next((slot for slot in pool if slot[0] < first[key]), None)  # strictly before: no in-place hazard
        if free is None:
            pool.append([last[key], buf])
        else:
            replace[key], free[0] = free[1], last[key]
    for ei in items:
        ei.bufs = [replace.get(id(b), b) for b in ei.bufs]
    return len(replace)


def jit(fxn: Callable[..., R]) -> TinyJit[R]:
    """Capture and replay the kernels of `fxn` (LAZY_JIT=0 turns it off)."""
    return TinyJit(fxn)

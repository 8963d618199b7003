"""BEAM search (`LAZY_BEAM=n`): try optimisation candidates on the device, keep the n fastest, extend them, stop
when nothing gets faster. Results are cached per (device, kernel) for the process and on disk."""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.program import get_program
from lazy.device import Buffer, CompileError
from lazy.helpers import DEBUG, cache_dir, prod
from lazy.ops import LazyOp, Ops

if TYPE_CHECKING:
    from lazy.device import Compiled

_results: dict[tuple[str, LazyOp, int], list[Opt]] = {}


def candidate_opts(k: Kernel) -> list[Opt]:
    """Every single optimisation step that could apply to `k` (tried one at a time on top of what it has)."""
    out: list[Opt] = []
    for axis in k.axes(Axis.GLOBAL):
        for amount in (2, 3, 4, 8, 16):
            out.append(Opt(OptOps.UPCAST, axis, amount))
        if k.caps.has_local:
            for amount in (2, 4, 8, 16, 32):
                out.append(Opt(OptOps.LOCAL, axis, amount))
    for axis in k.axes(Axis.REDUCE):
        for amount in (0, 2, 4, 8):
            out.append(Opt(OptOps.UNROLL, axis, amount))
        if k.caps.has_local:
            for amount in (4, 8, 16, 32):
                out.append(Opt(OptOps.GROUP, axis, amount))
    return out


def _apply(base: Kernel, opt: Opt) -> Kernel | None:
    k = base.copy()
    try:
        k.apply_opt(opt)
    except KernelOptError:
        return None
    return k


def _time_program(ast: LazyOp, dev: Compiled, opts: list[Opt], bufs: list[Buffer], repeats: int = 3) -> float:
    """Compile with `opts` and time the kernel on the device's queue (timestamps around the launch)."""
    spec = get_program(ast, dev.renderer, opts)
    program = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src), spec)
    gs, ls = spec.launch_dims({})
    opaques = tuple(b.opaque for b in bufs)
    times = []
    for _ in range(repeats):
        start, end = dev.signal_t(0), dev.signal_t(0)
        queue = dev.compute_queue_t().timestamp(start)
        queue.exec(program, opaques, (), tuple(gs) if gs else None, tuple(ls) if ls else None).timestamp(end)
        queue.signal(dev.timeline_signal, dev.next_value()).submit(dev)
        dev.synchronize()
        times.append(end.timestamp - start.timestamp)
    return min(times)


def _scratch_buffers(ast: LazyOp, device: str) -> list[Buffer]:
    """Buffers shaped like the kernel's, filled with nothing in particular: timing must not touch real data."""
    membufs = sorted({n.arg.idx: n.arg for n in ast.toposort() if n.op in (Ops.LOAD, Ops.STORE)}.items())
    return [Buffer(device, max(mb.st.real_size(), 1), mb.dtype).allocate() for _, mb in membufs]


def _disk_key(device: str, ast: LazyOp, width: int) -> str:
    return hashlib.sha256(f"{device}\0{width}\0{ast!r}".encode()).hexdigest()


def beam_search(ast: LazyOp, dev: Compiled, width: int) -> list[Opt]:
    """The optimisations that ran fastest for this kernel on `dev`."""
    key = (dev.device, ast, width)
    if key in _results:
        return _results[key]
    path = (root / "beam" / _disk_key(dev.device, ast, width)) if (root := cache_dir()) is not None else None
    if path is not None and path.exists():
        try:
            opts = [Opt(OptOps[o], a, n) for o, a, n in json.loads(path.read_text())]
            _results[key] = opts
            return opts
        except (ValueError, KeyError):
            pass
    if any(not isinstance(s, int) for s in Kernel(ast, dev.renderer.caps).full_shape):
        return []  # symbolic sizes: timing one value says little about the others
    bufs = _scratch_buffers(ast, dev.device)
    start = time.perf_counter()
    beam: list[tuple[float, list[Opt]]] = [(_time_program(ast, dev, [], bufs), [])]
    best = beam[0]
    while True:
        trials: list[tuple[float, list[Opt]]] = []
        for _, opts in beam:
            base = Kernel(ast, dev.renderer.caps)
            for o in opts:
                base.apply_opt(o)
            for cand in candidate_opts(base):
                if _apply(base, cand) is None or prod(base.full_shape) == 0:
                    continue
                try:
                    trials.append((_time_program(ast, dev, opts + [cand], bufs), opts + [cand]))
                except (CompileError, KernelOptError):
                    continue
        if not trials:
            break
        trials.sort(key=lambda t: t[0])
        beam = trials[:width]
        if beam[0][0] >= best[0]:
            break
        best = beam[0]
    if DEBUG >= 2:
        print(f"beam: {best[1]} in {best[0] * 1e6:.1f} us (search took {time.perf_counter() - start:.1f} s)")
    _results[key] = best[1]
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps([[o.op.name, o.axis, o.amount] for o in best[1]]))
        except OSError:
            pass
    return best[1]


def describe(opts: list[Opt]) -> Any:
    return [repr(o) for o in opts]

"""BEAM search (`LAZY_BEAM=n`): try optimisation candidates on the device, keep the n fastest, extend them, stop
when nothing gets faster. Results are cached for the process and on disk, keyed by what they were searched for (the
kernel's digest, device, renderer, compiler, width); a disk entry that fails its checksum or does not apply to the
kernel is searched again and replaced."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.program import get_program
from lazy.device import Buffer, CompileError
from lazy.helpers import DEBUG, cache_dir, prod
from lazy.ops import LazyOp, Ops

if TYPE_CHECKING:
    from lazy.device import Compiled

_results: dict[str, list[Opt]] = {}  # entry key -> the options found (this process)
_ENTRY_FORMAT = 1  # bump when the meaning of a stored entry changes


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


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _stable_text(value: Any) -> str:
    """A repr that is the same in every process: set elements sorted (their order follows string hashes)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_stable_text(v) for v in value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_stable_text(v) for v in value) + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (f"{f.name}={_stable_text(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({', '.join(fields)})"
    return repr(value)


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _search_identity(ast: LazyOp, dev: Compiled, width: int) -> dict[str, Any]:
    """What a search result depends on. A stored entry is used only for exactly this."""
    return {
        "format": _ENTRY_FORMAT,
        "kernel": ast.digest.hex(),
        "device": dev.device,
        "renderer": f"{_qualname(dev.renderer)} {_stable_text(dev.renderer.caps)}",
        "compiler": f"{_qualname(dev.compiler)} {dev.compiler.cachekey}",
        "width": width,
    }


class _BadEntry(Exception):
    """A stored search result that cannot be used (the message says why)."""


def _entry_checksum(identity: dict[str, Any], opts: Any) -> str:
    return hashlib.sha256(_canonical([identity, opts]).encode()).hexdigest()


def _parse_entry(text: bytes, identity: dict[str, Any], ast: LazyOp, dev: Compiled) -> list[Opt]:
    """The options stored in `text` if it is an intact entry for `identity` whose options apply to the kernel."""
    try:
        entry = json.loads(text)
    except ValueError as e:
        raise _BadEntry(f"not JSON, corrupt or truncated: {e}") from None
    if not isinstance(entry, dict) or set(entry) != {"identity", "opts", "checksum"}:
        raise _BadEntry("not a search entry")
    if entry["checksum"] != _entry_checksum(entry["identity"], entry["opts"]):
        raise _BadEntry("checksum mismatch")
    if entry["identity"] != identity:
        raise _BadEntry("made for another kernel, device or compiler")
    raw = entry["opts"]
    if not isinstance(raw, list) or not all(_is_opt(o) for o in raw):
        raise _BadEntry(f"options are not [name, axis, amount] lists: {raw!r:.200}")
    opts = [Opt(OptOps[name], axis, amount) for name, axis, amount in raw]
    k = Kernel(ast, dev.renderer.caps)
    for opt in opts:
        if not 0 <= opt.axis < k.shape_len:
            raise _BadEntry(f"{opt} names an axis the kernel does not have ({k.shape_len} axes)")
        try:
            k.apply_opt(opt)
        except (ValueError, IndexError) as e:  # KernelOptError, or anything else a stale entry trips over
            raise _BadEntry(f"the options do not apply to this kernel: {e}") from None
    return opts


def _is_opt(raw: Any) -> bool:
    if not (isinstance(raw, list) and len(raw) == 3):
        return False
    name, axis, amount = raw
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (axis, amount))
    return isinstance(name, str) and name in OptOps.__members__ and ints


def _load(path: Path, identity: dict[str, Any], ast: LazyOp, dev: Compiled) -> list[Opt] | None:
    """The stored options, or None (no entry, or a bad one: noted at `LAZY_DEBUG>=1`, then searched again)."""
    try:
        return _parse_entry(path.read_bytes(), identity, ast, dev)
    except FileNotFoundError:
        return None
    except (OSError, _BadEntry) as e:
        if DEBUG >= 1:
            print(f"beam cache: ignoring {path} ({e}); searching again and replacing it")
        return None


def _store(path: Path, identity: dict[str, Any], opts: list[Opt]) -> None:
    raw = [[o.op.name, o.axis, o.amount] for o in opts]
    text = _canonical({"identity": identity, "opts": raw, "checksum": _entry_checksum(identity, raw)})
    try:  # atomically: a crash or a concurrent search never leaves a half-written entry
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if DEBUG >= 1:
            print(f"beam cache not written ({e}); set LAZY_CACHE_DIR to a writable directory")


def beam_search(ast: LazyOp, dev: Compiled, width: int) -> list[Opt]:
    """The optimisations that ran fastest for this kernel on `dev`."""
    identity = _search_identity(ast, dev, width)
    key = hashlib.sha256(_canonical(identity).encode()).hexdigest()
    if key in _results:
        return _results[key]
    path = (root / "beam" / key) if (root := cache_dir()) is not None else None
    if path is not None and (opts := _load(path, identity, ast, dev)) is not None:
        _results[key] = opts
        return opts
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
        _store(path, identity, best[1])
    return best[1]


def describe(opts: list[Opt]) -> Any:
    return [repr(o) for o in opts]

"""BEAM search (`LAZY_BEAM=n`): try the optimisation steps `SEARCH_SPACE` offers (absurd tiles pruned), keep the n
fastest kernels, extend them, stop when nothing gets faster or `LAZY_BEAM_BUDGET` runs out. Candidates compile on a
thread pool, then run one at a time on the idle device, each checked against the unoptimised kernel on random inputs.
Results are cached for the process and on disk, keyed by what they were searched for; bad entries are replaced."""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lazy.codegen.kernel import Axis, Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.lowerer import choose_vector_axis
from lazy.codegen.program import get_program, hand_coded_optimizations, kernel_name, stable_text
from lazy.device import Buffer, CompileError, DeviceError, ProgramSpec
from lazy.dtype import DType, dtypes, values_to_storage
from lazy.helpers import BEAM_BUDGET, DEBUG, cache_dir, ceildiv, prod
from lazy.ops import LazyOp, Ops
from lazy.progress import Bar, progress, write
from lazy.record import record

if TYPE_CHECKING:
    from lazy.device import Compiled
    from lazy.renderer import Capabilities

_results: dict[str, list[Opt]] = {}  # entry key -> the options found (this process)
_ENTRY_FORMAT = 1  # bump when the meaning of a stored entry changes
_clock = time.perf_counter  # the search's wall clock (budget, progress); tests replace it with a fake one
COMPILE_WORKERS: int | None = None  # compile threads (None: one per core the process may use)
MAX_SOURCE_CHARS = 32_000  # a step that grows a kernel's source past this is not tried: seconds to compile
ENOUGH_TIMING_S = 0.1  # a candidate is run again (up to 3 times, fastest kept) until its runs add up to this


# ---------------------------------------------------------------------------------------------------------------------
# the search space: one row per kind of optimisation


@record(frozen=True)
class SearchRow:
    """How the search tries one `OptOps` kind: what its `axis` and `amount` range over."""

    axis_kinds: tuple[Axis, ...] = ()  # `axis` is a kernel axis of one of these kinds,
    on_inputs: bool = False  # or, when set, an input buffer's index (PACK)
    amounts: tuple[int, ...] = ()  # split sizes (0: the whole axis; only those dividing the axis); for an input: as is
    vector_multiples: tuple[int, ...] = ()  # more split sizes: the renderer's vector widths times these
    second_axis: bool = False  # the amount is another axis of `axis_kinds`, after `axis` (SWAP)
    tensor_core: bool = False  # the amount is an index into the device's tensor cores (TC)
    padding: bool = False  # the amounts are those that do not divide the axis (PAD pads it up to a multiple)
    needs: str | tuple[str, ...] = ""  # a `Capabilities` field that must be set for the op to be tried ("has_local"),
    # or a tuple of fields of which one must be


SEARCH_SPACE: dict[OptOps, SearchRow] = {
    OptOps.UPCAST: SearchRow((Axis.GLOBAL,), amounts=(2, 3, 4, 5, 6, 7, 8), vector_multiples=(1, 2, 4)),  # tiles
    OptOps.UNROLL: SearchRow((Axis.REDUCE,), amounts=(0, 2, 4, 8, 16)),
    OptOps.LOCAL: SearchRow((Axis.GLOBAL,), amounts=(2, 4, 8, 16, 32, 64, 128, 256), needs="has_local"),  # groups
    OptOps.GROUP: SearchRow((Axis.REDUCE,), amounts=(4, 8, 16, 32, 64, 128), needs="has_local"),
    OptOps.SWAP: SearchRow((Axis.GLOBAL,), second_axis=True),  # loop order: which operand panel stays in cache
    # an operand tile copied contiguous: a CPU thread's scratch array, or a work group's local memory
    OptOps.PACK: SearchRow(on_inputs=True, amounts=(0,), needs=("pack_max", "shared_max")),
    OptOps.TC: SearchRow((Axis.REDUCE,), tensor_core=True, needs="tensor_cores"),  # a warp's matrix unit (first only)
    # a register tile's rows that do not divide the output axis (first only; devices without threads: `Kernel._pad`)
    OptOps.PAD: SearchRow((Axis.GLOBAL,), amounts=(3, 5, 6, 7, 8), padding=True),
}


def _split_sizes(row: SearchRow, k: Kernel, axis: int) -> list[int]:
    size = k.full_shape[axis]
    if not isinstance(size, int):
        return []
    sizes = {*row.amounts, *(w * m for w in k.caps.vector_widths for m in row.vector_multiples)}
    whole = 0 in sizes
    # a split as large as the axis takes all of it, as 0 does: try it once
    return sorted({0 if a == size and whole else a for a in sizes if a == 0 or (1 < a <= size and size % a == 0)})


def _targets(row: SearchRow, k: Kernel) -> list[tuple[int, int]]:
    """The (axis, amount) pairs a row offers for `k`."""
    if row.on_inputs:
        return [(b.idx, amount) for b in k.membufs if b.idx != 0 for amount in row.amounts]
    axes = k.axes(*row.axis_kinds)
    if row.second_axis:
        return [(axis, other) for axis in axes for other in axes if other > axis]
    if row.tensor_core:
        return [(axis, index) for axis in axes for index in range(len(k.caps.tensor_cores))]
    if row.padding:  # (register tiles of devices without threads: `Kernel._pad`)
        if k.caps.has_threads:
            return []
        full = k.full_shape
        return [(axis, amount) for axis in axes for amount in row.amounts
                if isinstance(full[axis], int) and amount < full[axis] and full[axis] % amount]  # fmt: skip
    return [(axis, amount) for axis in axes for amount in _split_sizes(row, k, axis)]


def candidate_opts(k: Kernel) -> list[Opt]:
    """Every single optimisation step `SEARCH_SPACE` offers for `k` (tried one at a time on top of what it has). An
    `OptOps` kind without a row is not searched."""
    return [Opt(op, axis, amount) for op, row in SEARCH_SPACE.items()
            if _has(k.caps, row.needs) for axis, amount in _targets(row, k)]  # fmt: skip


def _has(caps: Capabilities, needs: str | tuple[str, ...]) -> bool:
    return not needs or any(getattr(caps, field) for field in ((needs,) if isinstance(needs, str) else needs))


def live_registers(k: Kernel) -> int:
    """Registers one step of the kernel's innermost loop keeps live: its output lanes (an accumulator set per reduce)
    plus the values each input loads for the tile. A vector (`choose_vector_axis`) is one register, and so is a value
    broadcast across it. Unrolled reduce steps reuse registers: they do not count."""
    full, upcast = k.full_shape, k.axes(Axis.UPCAST)
    vector_axis, width = choose_vector_axis(k)

    def registers(axes: list[int]) -> int:
        lanes = prod(full[a] for a in axes)
        return ceildiv(lanes, width) if vector_axis in axes else lanes

    accumulators = registers(upcast) * max(1, len(k.reduceops))
    return accumulators + sum(registers([a for a in upcast if k.stride_of(b, a) != 0]) for b in k.membufs[1:])


def too_many_registers(k: Kernel) -> bool:
    """A tile that would spill most of itself: over twice the registers the device has (its vector registers for a
    vectorized tile, `upcast_max` scalars otherwise)."""
    registers = k.caps.vector_registers if choose_vector_axis(k)[0] is not None else k.caps.upcast_max
    return live_registers(k) > 2 * registers


def _apply(base: Kernel, opt: Opt) -> Kernel | None:
    k = base.copy()
    try:
        k.apply_opt(opt)
    except KernelOptError:
        return None
    return k


# ---------------------------------------------------------------------------------------------------------------------
# running candidates


@record()
class Candidate:
    """A compiled candidate kernel: the options that made it, its program spec and binary."""

    opts: list[Opt]
    spec: ProgramSpec
    lib: bytes


def _run(dev: Compiled, program: Any, spec: ProgramSpec, bufs: list[Buffer]) -> float:
    """Run the kernel once on the device's queue; its time by the queue's timestamps around the launch."""
    gs, ls = spec.launch_dims({})
    start, end = dev.signal_t(0), dev.signal_t(0)
    queue = dev.compute_queue_t().timestamp(start)
    opaques = tuple(b.opaque for b in bufs)
    queue.exec(program, opaques, (), tuple(gs) if gs else None, tuple(ls) if ls else None).timestamp(end)
    queue.signal(dev.timeline_signal, dev.next_value()).submit(dev)
    dev.synchronize()
    return float(end.timestamp - start.timestamp)


def _time_program(dev: Compiled, cand: Candidate, program: Any, bufs: list[Buffer], first: float) -> float:
    """The candidate's time: the fastest of its checking run (`first`) and up to two more, until they add up to
    `ENOUGH_TIMING_S` (a long kernel times itself well enough in one run)."""
    times = [first]
    while len(times) < 3 and sum(times) < ENOUGH_TIMING_S:
        times.append(_run(dev, program, cand.spec, bufs))
    return min(times)


def _random_storage(rng: np.random.Generator, size: int, dtype: DType) -> memoryview:
    """Random values of `dtype` as its bytes: floats in [-1, 1], integers in [1, 8) (never a zero divisor)."""
    if dtypes.is_float(dtype):
        values: np.ndarray = rng.uniform(-1.0, 1.0, size)
    elif dtypes.is_bool(dtype):
        values = rng.integers(0, 2, size).astype(bool)
    else:
        values = rng.integers(1, 8, size)
    return np.ascontiguousarray(values_to_storage(values, dtype)).data.cast("B")


def _scratch_buffers(ast: LazyOp, device: str) -> tuple[list[Buffer], memoryview]:
    """Buffers shaped like the kernel's, filled with random values (the same in every search), so candidates can be
    compared; real data is never touched. Also the output buffer's initial bytes, restored before each checked run
    (a kernel may read the buffer it writes)."""
    rng = np.random.default_rng(0)
    membufs = sorted({n.arg.idx: n.arg for n in ast.toposort() if n.op in (Ops.LOAD, Ops.STORE)}.items())
    needed: dict[int, int] = {}  # elements each buffer's loads and stores reach (a gathered load: the whole axis)
    for n in ast.toposort():
        if n.op in (Ops.LOAD, Ops.STORE):
            reach = n.arg.st.real_size() + (max(0, (n.arg.gather[1] - 1) * n.arg.gather[0]) if n.arg.gather else 0)
            needed[n.arg.idx] = max(needed.get(n.arg.idx, 1), reach)
    bufs, initial = [], []
    for idx, mb in membufs:
        buf = Buffer(device, needed[idx], mb.dtype).allocate()
        initial.append(_random_storage(rng, buf.size, mb.dtype))
        bufs.append(buf.copyin(initial[-1]))
    return bufs, initial[0]


def outputs_match(got: np.ndarray, want: np.ndarray, dtype: DType) -> bool:
    """Whether a candidate's output is the unoptimised kernel's, up to the rounding a different summation order
    causes: half the float's mantissa bits, relative and scaled by the output's mean magnitude. Exact otherwise."""
    if not dtypes.is_float(dtype):
        return bool(np.array_equal(got, want))
    tol = 2.0 ** -(dtypes.finfo(dtype)[1] / 2)
    finite = np.abs(want[np.isfinite(want)])
    scale = float(finite.mean()) if finite.size else 1.0
    return bool(np.allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------------------------------
# progress on the terminal

_searched = 0  # kernels searched in this process


class SearchProgress:
    """One search's counts, and its line on stderr (`lazy.progress`): kernels searched so far, candidates tried, the
    best time yet. Drawn once the search has run for `lazy.progress.DELAY_S`, where `LAZY_PROGRESS` allows."""

    def __init__(self, name: str):
        self.name = name
        self.tried = self.pruned = self.wrong = 0
        self.best: float | None = None
        self.bar: Bar | None = None  # while the search runs

    def status(self) -> str:
        best = f"best {self.best * 1e6:.1f} us" if self.best is not None else "no result yet"
        return best + (f", {self.wrong} wrong" if self.wrong else "")

    def open(self) -> Bar:
        # (the clock is looked up at each reading: tests replace `_clock`)
        self.bar = progress(f"BEAM kernel {_searched} ({self.name})", unit="candidates", clock=lambda: _clock())
        return self.bar

    def update(self, tried: int = 0) -> None:
        """Count `tried` more candidates measured; redraw the line if due (also keeps its time moving)."""
        self.tried += tried
        if self.bar is not None:
            self.bar.update(tried, self.status())

    def close(self, why: str) -> None:
        """End the line with why the search ended ("done", the budget)."""
        if self.bar is not None:
            self.bar.close(f"{self.status()}, {why}")


# ---------------------------------------------------------------------------------------------------------------------
# the search


class Search:
    """One kernel's search: its scratch buffers, the reference output, the budget and the progress line."""

    def __init__(self, ast: LazyOp, dev: Compiled, width: int):
        self.ast, self.dev, self.width = ast, dev, width
        self.start = _clock()
        self.budget = int(BEAM_BUDGET.value)
        self.stopped = False  # the budget ran out
        self.bufs, self.initial_output = _scratch_buffers(ast, dev.device)
        self.output_dtype: DType = ast.src[0].arg.dtype
        self.reference: np.ndarray | None = None  # the unoptimised kernel's output
        self.sources: set[str] = set()  # rendered kernels already compiled: two option lists can give one kernel
        self.seen: set[tuple[Opt, ...]] = set()
        self.source_size: dict[tuple[Opt, ...], int] = {}  # rendered source lengths, by option list
        self.workers = COMPILE_WORKERS or _cores()
        self.progress = SearchProgress(kernel_name(Kernel(ast, dev.renderer.caps)))

    def over_budget(self) -> bool:
        if self.budget > 0 and _clock() - self.start >= self.budget:
            self.stopped = True
        return self.stopped

    def compile_all(self, opt_lists: list[list[Opt]], budgeted: bool = True) -> list[Candidate]:
        """Render each option list here and compile the new sources on a thread pool (the CPU compiler is a
        subprocess, OpenCL releases the GIL while compiling, LLVM sends the pool's compiles to worker processes:
        `Compiler.compile_pooled`). In the order given, whichever finishes
        first; lists that do not apply or fail to compile are dropped. When the budget runs out, compiles not yet
        started are cancelled (running ones finish: a compiler cannot be stopped halfway)."""
        jobs: list[tuple[list[Opt], ProgramSpec, concurrent.futures.Future[bytes]]] = []
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            for opts in opt_lists:
                if budgeted and self.over_budget():
                    break
                try:
                    spec = get_program(self.ast, self.dev.renderer, opts)
                except KernelOptError:
                    continue
                self.source_size[tuple(opts)] = len(spec.src)
                if spec.src not in self.sources:
                    self.sources.add(spec.src)
                    # each candidate built as it would run (`for_program`: the flags depend on the code)
                    compiler = self.dev.compiler.for_program(spec)
                    jobs.append((opts, spec, pool.submit(compiler.compile_pooled, spec.src)))
            pending = {future for _, _, future in jobs}
            while pending and not (budgeted and self.over_budget()):
                _, pending = concurrent.futures.wait(pending, 0.1, concurrent.futures.FIRST_COMPLETED)
                self.progress.update()
            for future in pending:
                future.cancel()
        return [Candidate(opts, spec, lib) for opts, spec, future in jobs if (lib := _compiled(future)) is not None]

    def measure(self, cands: list[Candidate], budgeted: bool = True) -> list[tuple[float, list[Opt]]]:
        """Run each candidate on the idle device, one at a time: its output is checked against the reference (the
        first candidate measured is the unoptimised kernel, which is the reference), then it is timed. A candidate
        the device refuses to launch (a work group too large for it, say) is dropped."""
        timed: list[tuple[float, list[Opt]]] = []
        for cand in cands:
            if budgeted and self.over_budget():
                break
            program = self.dev.runtime(cand.spec.name, cand.lib, cand.spec)
            self.bufs[0].copyin(self.initial_output)
            try:
                first = _run(self.dev, program, cand.spec, self.bufs)
            except DeviceError:
                if not cand.opts:
                    raise  # the kernel itself cannot run: that is no search's to hide
                continue
            output = self.bufs[0].numpy()
            self.progress.update(tried=1)
            if self.reference is None:
                assert not cand.opts, "the unoptimised kernel is measured first"
                self.reference = output
            elif not outputs_match(output, self.reference, self.output_dtype):
                self.progress.wrong += 1
                if DEBUG >= 1:
                    write(f"BEAM: {cand.opts} gives other results than the unoptimised kernel {cand.spec.name}; "
                          "not used")  # fmt: skip
                continue
            elapsed = _time_program(self.dev, cand, program, self.bufs, first)
            timed.append((elapsed, cand.opts))
            self.progress.best = min(elapsed, self.progress.best if self.progress.best is not None else math.inf)
            self.progress.update()
        return timed

    def source_chars(self, opts: list[Opt]) -> int:
        key = tuple(opts)
        if key not in self.source_size:  # (every option list measured was rendered already)
            self.source_size[key] = len(get_program(self.ast, self.dev.renderer, opts).src)
        return self.source_size[key]

    def absurd(self, parent: Kernel, parent_opts: list[Opt], k: Kernel) -> bool:
        """A candidate not worth compiling: its tile needs far too many registers, or the step multiplies the lanes
        of a kernel whose source would then pass `MAX_SOURCE_CHARS` (lanes times ops: with polynomial exponentials
        a tile of 256 scalar lanes rendered for 5 s and compiled for 9)."""
        growth = k.upcast_size() / parent.upcast_size()
        too_long = growth > 1 and self.source_chars(parent_opts) * growth > MAX_SOURCE_CHARS
        return too_long or too_many_registers(k)

    def extensions(self, beam: list[tuple[float, list[Opt]]]) -> list[list[Opt]]:
        """Each beam entry with one more step, unless already tried or absurd (`absurd`)."""
        out: list[list[Opt]] = []
        for _, opts in beam:
            base = Kernel(self.ast, self.dev.renderer.caps)
            for opt in opts:
                base.apply_opt(opt)
            for opt in candidate_opts(base):
                key = (*opts, opt)
                if key in self.seen or (k := _apply(base, opt)) is None:
                    continue
                self.seen.add(key)
                if self.absurd(base, opts, k):
                    self.progress.pruned += 1
                    continue
                out.append([*opts, opt])
        return out

    def run(self) -> tuple[float, list[Opt]]:
        """The fastest correct options found, with the search's progress line open meanwhile."""
        with self.progress.open():
            best = self.grow_beam()
            self.progress.close(f"stopped: LAZY_BEAM_BUDGET={self.budget} s spent" if self.stopped else "done")
        return best

    def grow_beam(self) -> tuple[float, list[Opt]]:
        """The unoptimised kernel and the heuristics' choice are always measured, whatever the budget (so the search
        never ends worse than no search); then the beam grows one step a round, while its best gets faster. A round
        is compiled and measured in batches, so a budget running out wastes at most one batch."""
        reference = get_program(self.ast, self.dev.renderer, [])
        self.sources.add(reference.src)
        self.source_size[()] = len(reference.src)
        # compiled here, not on the pool: if the kernel without options fails, the kernel itself is broken
        first = [Candidate([], reference, self.dev.compiler.for_program(reference).compile_cached(reference.src))]
        heuristic = hand_coded_optimizations(Kernel(self.ast, self.dev.renderer.caps)).applied_opts
        seeds = first + self.compile_all([list(heuristic)] if heuristic else [], budgeted=False)
        beam = sorted(self.measure(seeds, budgeted=False), key=lambda t: t[0])[: self.width]
        best = beam[0]
        batch = max(16, 2 * self.workers)  # (which candidates a round measures does not depend on it)
        while not self.over_budget():
            extensions = self.extensions(beam)
            timed: list[tuple[float, list[Opt]]] = []
            for start in range(0, len(extensions), batch):
                if self.over_budget():
                    break
                timed += self.measure(self.compile_all(extensions[start : start + batch]))
            if not timed:
                break
            beam = sorted(timed, key=lambda t: t[0])[: self.width]
            if beam[0][0] >= best[0]:
                break
            best = beam[0]
        return best


def _compiled(future: concurrent.futures.Future[bytes]) -> bytes | None:
    if future.cancelled():
        return None
    try:
        return future.result()
    except CompileError:
        return None


# ---------------------------------------------------------------------------------------------------------------------
# the cache of results


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


@functools.cache
def _lazy_version() -> str:
    try:
        return importlib.metadata.version("lazy-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _search_identity(ast: LazyOp, dev: Compiled, width: int) -> dict[str, Any]:
    """What a search result depends on. A stored entry is used only for exactly this."""
    return {
        "format": _ENTRY_FORMAT,
        "lazy": _lazy_version(),
        "kernel": ast.digest.hex(),
        "device": dev.device,
        "renderer": f"{_qualname(dev.renderer)} {stable_text(dev.renderer.caps)}",
        "compiler": f"{_qualname(dev.compiler)} {dev.compiler.cachekey}",
        "width": width,
        "budget": int(BEAM_BUDGET.value),
        "space": hashlib.sha256(stable_text(SEARCH_SPACE).encode()).hexdigest()[:16],
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
        if opt.axis < 0 or opt.amount < 0:  # Python would index from the end
            raise _BadEntry(f"{opt} has a negative axis or amount")
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
    """The optimisations that ran fastest for this kernel on `dev` (and gave the unoptimised kernel's results)."""
    global _searched
    identity = _search_identity(ast, dev, width)
    key = hashlib.sha256(_canonical(identity).encode()).hexdigest()
    if key in _results:
        return _results[key]
    path = (root / "beam" / key) if (root := cache_dir()) is not None else None
    if path is not None and (opts := _load(path, identity, ast, dev)) is not None:
        _results[key] = opts
        return opts
    k = Kernel(ast, dev.renderer.caps)
    if not all(isinstance(s, int) for s in k.full_shape) or prod(k.full_shape) == 0:
        # symbolic sizes (timing one value says little about the others) or nothing to compute: what BEAM=0 does
        return hand_coded_optimizations(k).applied_opts
    _searched += 1
    search = Search(ast, dev, width)
    elapsed, opts = search.run()
    if DEBUG >= 2:
        print(f"BEAM: {opts} in {elapsed * 1e6:.1f} us ({search.progress.tried} tried, {search.progress.pruned} "
              f"pruned, search took {_clock() - search.start:.1f} s)")  # fmt: skip
    _results[key] = opts
    if path is not None:
        _store(path, identity, opts)
    return opts


def describe(opts: list[Opt]) -> Any:
    return [repr(o) for o in opts]

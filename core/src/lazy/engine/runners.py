"""Runners and lowering: what runs on buffers (a compiled kernel, a copy between devices, a peer read, a view, an
allocation), the method cache of compiled kernels keyed by device and kernel AST (the second time a kernel shape is
seen costs a dict lookup), building kernels (code generation, tiered compiles and their background upgrades, a
schedule's kernels built in parallel before anything runs: `precompile`), and `ExecItem`/`run_runner`, which launch a
runner through its device's queue. While profiling is on (`lazy.profile.active`), runners time their work where it
runs and report it as profile events. `lazy.engine.realize` drives these from a schedule."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, TypeVar, cast

import lazy.profile as profile
from lazy.device import (
    THROUGH_BASE,
    Buffer,
    Compiled,
    Compiler,
    DeviceError,
    ProgramSpec,
    close_callbacks,
    get_device,
    peers,
)
from lazy.helpers import BEAM, DEBUG, NOOPT, GlobalCounters, colored
from lazy.ops import LazyOp, Ops
from lazy.progress import progress
from lazy.record import field, record, replace
from lazy.symbolic import Variable, sym_infer

from .schedule import ScheduleItem, is_peer_read

if TYPE_CHECKING:
    from lazy.codegen.kernel import Opt
    from lazy.hcq import Exec


class Runner:
    """Something that runs on buffers: a compiled kernel, a copy, an allocation. `borrows_output`: its output buffer
    takes memory from elsewhere (a peer read), so it is not allocated before the run."""

    name: str = ""
    device: str = ""
    op_estimate: Any = 0
    mem_estimate: Any = 0
    borrows_output = False

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        raise NotImplementedError

    def run_profiled(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool,
                 counts: tuple[int, int]) -> float | None:  # fmt: skip
        """Run as `__call__` does while profiling is on, and report the work as a `lazy.profile.Event` (`counts`: this
        run's operations and bytes). Here: nothing to report (an allocation, a view moved onto other memory)."""
        return self(bufs, var_vals, wait=wait)


_REBUILT = threading.Lock()  # held while a full build replaces a quick one (`CompiledRunner.rebuild`)
_exec_class: type[Exec] | None = None  # `lazy.hcq.Exec`, found on the first launch (see `_load_exec_class`)


def _load_exec_class() -> type[Exec]:
    """`lazy.hcq.Exec`, imported once: an import statement in `launch` cost every queued kernel ~1 us."""
    global _exec_class
    from lazy.hcq import Exec

    _exec_class = Exec
    return Exec


class CompiledRunner(Runner):
    """A kernel compiled for one device, launched through the device's compute queue.

    A kernel built with its compiler's quick tier (`Compiler.tiers`) keeps the compiler of its full build in
    `upgrade`: once it has run again and done `UPGRADE_WORK` in all, it asks for that build in the background
    (`_Upgrades`), and the full binary replaces the quick one when it is ready; `upgrade_kernels` builds it at once
    (a jit capturing the kernel)."""

    def __init__(self, spec: ProgramSpec, dev: Compiled, lib: bytes | None = None, upgrade: Compiler | None = None):
        # the device is the instance it runs on: a spec names the renderer's device, shared by instances (CPU:1's
        # kernels render as CPU's), so graph batches and a pickled jit would put CPU:1's kernels on CPU
        self.spec, self.dev, self.name, self.device = spec, dev, spec.name, dev.device
        self.op_estimate, self.mem_estimate = spec.op_estimate, spec.mem_estimate
        if lib is None:
            compiler, upgrade = dev.compiler.tiers(spec)
            lib = compiler.compile_cached(spec.src)
        self.lib = lib
        self.program = dev.runtime(spec.name, self.lib, spec)
        self.upgrade = upgrade  # the compiler of the full build while this is the quick one, else None
        self.runs, self.work, self.work_done = 0, spec.estimated_work() if upgrade is not None else 0.0, 0.0
        self.upgrading: threading.Event | None = None  # set once the full build replaced this one (or failed)
        self.static_dims = spec.launch_dims({}) if not spec.vars else None
        self.vars = spec.vars
        self.ast: LazyOp | None = None  # set by `get_runner`: the kernel's AST, for its digest
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        """Hex of the kernel AST's `LazyOp.digest` (what links profile events to kernels), "" when not known."""
        if self._digest is None:
            self._digest = self.ast.digest.hex() if self.ast is not None else ""
        return self._digest

    def __reduce__(self) -> tuple[Any, ...]:
        # a pickled jit keeps the compiled binary (no compiler needed to load it); the lowered UOps are not needed
        return _load_compiled_runner, (replace(self.spec, uops=None), self.lib, self.device, self.digest)

    def launch(self, bufs: list[Buffer], var_vals: dict[Variable, int]) -> Exec:
        """The queue command that runs this kernel on `bufs` with the variables' values."""
        exec_t = _exec_class or _load_exec_class()  # (`import lazy` does not load HCQ: the device's queues do)
        vals = tuple(var_vals[v] for v in self.spec.vars)
        gs, ls = self.static_dims if self.static_dims is not None else self.spec.launch_dims(var_vals)
        return exec_t(self.program, tuple(b.opaque for b in bufs), vals, tuple(gs) if gs else None,
                      tuple(ls) if ls else None)  # fmt: skip

    def rebuild(self) -> None:
        """Build the kernel in full (`upgrade`) and run that binary from now on; a failure keeps the quick one (with a
        note at LAZY_DEBUG=1): it computes the same, only slower. Two builds may run at once (the background thread's
        and a jit capture's, `upgrade_kernels`): the first to finish is kept and the other dropped, so the program
        never changes once a capture has built its graph around it."""
        compiler = self.upgrade
        if compiler is None:
            return
        try:
            lib = compiler.compile_cached(self.spec.src)
            program = self.dev.runtime(self.spec.name, lib, self.spec)
        except Exception as e:  # noqa: BLE001 (the kernel it replaces still works)
            with _REBUILT:
                if self.upgrade is compiler:
                    self.upgrade = None
                    if DEBUG >= 1:
                        print(f"lazy: {self.name}: the full build failed, the quick one stays: {e}", file=sys.stderr)
            return
        with _REBUILT:
            if self.upgrade is compiler:  # not built by another thread meanwhile
                self.lib, self.program = lib, program  # one launch reads `program` once: either binary is whole
                self.upgrade = None

    def count_run(self) -> None:
        """One more run of a quick build: once it has run again and done `UPGRADE_WORK`, its full build is asked for."""
        if self.upgrade is not None and self.upgrading is None:
            self.runs += 1
            self.work_done += self.work
            if self.runs >= 2 and self.work_done >= UPGRADE_WORK:
                _UPGRADES.request(self)

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        dev = self.dev
        if self.upgrade is not None:
            self.count_run()
        if not wait:
            opaques = tuple([b._opaque for b in bufs])  # (each buffer's handle read directly: `opaque` costs a call)
            for opaque in opaques:  # (identity only: a plugin's handle may compare oddly with None)
                if opaque is None or opaque is THROUGH_BASE:  # not allocated yet, or a view with no handle (raises)
                    opaques = tuple([b.opaque for b in bufs])
                    break
            if dev.launch_now(self.program, opaques, tuple([var_vals[v] for v in self.vars]) if self.vars else ()):
                return None
        queue = dev.compute_queue_t()
        if wait:
            start, end = dev.signal_t(0), dev.signal_t(0)
            queue.timestamp(start)
        queue.record(self.launch(bufs, var_vals))
        if wait:
            queue.timestamp(end)
        queue.signal(dev.timeline_signal, dev.next_value()).submit(dev)
        if wait:
            dev.synchronize()
            return end.timestamp - start.timestamp
        return None

    def run_profiled(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool,
                 counts: tuple[int, int]) -> float | None:  # fmt: skip
        from lazy.hcq import submit_timed

        dev = self.dev
        self.count_run()
        queue = dev.compute_queue_t().record(self.launch(bufs, var_vals)).signal(dev.timeline_signal, dev.next_value())
        until, stamps = submit_timed(dev, queue)
        profile.submitted(dev, until, stamps, [self.event(var_vals, counts)])
        if not wait:
            return None
        dev.synchronize()
        return stamps[0][1].timestamp - stamps[0][0].timestamp

    def event(self, var_vals: dict[Variable, int], counts: tuple[int, int]) -> profile.Event:
        """The profile event of one run (its times are filled in when they are read)."""
        gs, ls = self.static_dims if self.static_dims is not None else self.spec.launch_dims(var_vals)
        where = profile.origin()
        args = {"digest": self.digest, "global_size": gs, "local_size": ls, "flops": counts[0], "bytes": counts[1],
                "realize": where.realize, "callsite": where.callsite}  # fmt: skip
        return profile.Event("kernel", self.name, self.device, "compute", 0.0, 0.0, args)


class BufferCopy(Runner):
    """A copy between two devices through the best path their allocators offer."""

    def __init__(self, nbytes: int, dest_device: str, src_device: str):
        self.name, self.device, self.mem_estimate = (
            f"copy {nbytes:8d} {src_device} -> {dest_device}",
            dest_device,
            nbytes,
        )

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        dest, src = bufs[0], bufs[1]
        start = time.perf_counter()
        dest_dev, src_dev = get_device(dest.device), get_device(src.device)
        same_family = type(dest_dev.allocator) is type(src_dev.allocator) and dest.allocator.supports("transfer")
        if same_family and not (dest.through_base or src.through_base):
            src_dev.synchronize()
            dest_dev.synchronize()
            dest.allocator._transfer(dest.opaque, src.opaque, dest.nbytes, src_dev, dest_dev)
        elif dest.allocator.supports("as_buffer") and not src.allocator.supports("as_buffer"):
            src.copyout(dest.as_buffer())
        else:
            dest.copyin(src.as_buffer())
        return time.perf_counter() - start if wait else None

    def run_profiled(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool,
                 counts: tuple[int, int]) -> float | None:  # fmt: skip
        # a copy runs on this thread once both devices are idle: timed on the host, without the wait for earlier work,
        # and until the destination has it (a device may finish a write after the call returns)
        dest, src = get_device(bufs[0].device), get_device(bufs[1].device)
        src.synchronize()
        dest.synchronize()
        timing = profile.on_host("copy", f"copy {src.device} -> {dest.device}", dest.device, "copy",
                                 {"bytes": bufs[0].nbytes, "src": src.device, "dest": dest.device})  # fmt: skip
        with timing:
            self(bufs, var_vals)
            dest.synchronize()
        return timing.elapsed if wait else None


class PeerRead(Runner):
    """A copy whose destination reads the source's memory in place instead (`LazyBuffer.copy_to_device(peer=True)`,
    between `peers`): the source's device finishes what it was given, then the destination buffer points at the
    source's memory (holding the source buffer), and the kernels that read it read the other device's memory. Each
    realize (and jit replay) that ran one waits at its end for the readers' devices (`settle_peer_reads`), so no
    write after it can reach the memory while a reader is still at work; the schedule keeps a peer read an ordinary
    copy when a later item of it writes the source (`schedule._order_peer_reads`)."""

    borrows_output = True

    def __init__(self, nbytes: int, dest_device: str, src_device: str):
        self.name, self.device = f"peer read {nbytes:8d} {src_device} -> {dest_device}", dest_device

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        dest, src = bufs[0], bufs[1]
        get_device(src.device).synchronize_if_pending()
        dest.read_in_place(src)
        lent.to.add(dest.device)
        return 0.0 if wait else None


def written_by(ei: ExecItem) -> list[Buffer]:
    """The buffers an item writes: a kernel's outputs, a copy's destination (views and allocations write none)."""
    runner = ei.runner
    if isinstance(runner, CompiledRunner):
        return [ei.bufs[i] for i in runner.spec.outs] if runner.spec.outs else ei.bufs[:1]
    return ei.bufs[:1] if isinstance(runner, (BufferCopy, PeerRead)) else []


def keep_peer_reads_safe(items: list[ExecItem]) -> list[ExecItem]:
    """`items` (a jit's capture, which may span several realizes) with each peer read whose source a later item
    writes made an ordinary copy again: a replay runs them without the waits between realizes (see `PeerRead`)."""

    def root(buf: Buffer) -> int:
        return id(buf.base if buf.base is not None else buf)

    later: set[int] = set()
    out: list[ExecItem] = []
    for ei in reversed(items):
        if isinstance(ei.runner, PeerRead) and root(ei.bufs[1]) in later:
            ei.bufs[0].deallocate()  # lets go of the source once its device's queued work is done
            ei = ExecItem(BufferCopy(ei.bufs[0].nbytes, ei.bufs[0].device, ei.bufs[1].device), ei.bufs, ei.var_vals)
        later |= {root(b) for b in written_by(ei)}
        out.append(ei)
    return out[::-1]


class _Lent(threading.local):
    """Per thread (each settles what its own realizes and replays lent): the devices whose kernels were given another
    device's memory to read since the last `settle_peer_reads`."""

    def __init__(self) -> None:
        self.to: set[str] = set()


lent = _Lent()


def settle_peer_reads() -> None:
    """Wait for the devices this thread lent another device's memory to (see `PeerRead`) to finish."""
    while lent.to:
        device = lent.to.pop()
        get_device(device).synchronize_if_pending()


# The estimated work (`ProgramSpec.estimated_work`) a quick kernel runs, in all, before its full build is worth it: a
# full build costs ~0.1-0.3 s more than the quick one and saves about half of each run (the CNN step's threefry kernel
# of 25600 words runs 0.92 ms quick, 0.23 ms full; -O2 takes 0.29 s to build it, -O1 0.08 s), so it pays after work
# of the order of 2**30 operations. A script that runs a kernel a few times (a test) never builds it twice.
UPGRADE_WORK = 2.0**30


class _Upgrades:
    """The full builds of quick kernels that ran again: one background thread builds them in the order they were
    asked for (it compiles while the kernels keep running, as a JIT does; one at a time leaves the cores to them). It
    is a daemon: a process that ends does not wait for builds it no longer needs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.todo: SimpleQueue[CompiledRunner] = SimpleQueue()
        self.thread: threading.Thread | None = None

    def request(self, runner: CompiledRunner) -> None:
        with self.lock:
            if runner.upgrading is not None or runner.upgrade is None:
                return
            runner.upgrading = threading.Event()
            if self.thread is None or not self.thread.is_alive():  # (a forked child has none)
                self.thread = threading.Thread(target=self._work, name="lazy-upgrade", daemon=True)
                self.thread.start()
        self.todo.put(runner)

    def _work(self) -> None:
        while True:
            runner = self.todo.get()
            try:
                runner.rebuild()
            finally:
                cast(threading.Event, runner.upgrading).set()


_UPGRADES = _Upgrades()


def upgrade_kernels(runners: list[Runner]) -> None:
    """Give these kernels their full builds now (what a jit replays should run at full speed), on a pool of one
    thread per core; the background thread skips the ones it was asked for and finds done."""
    pending = list({id(r): r for r in runners if isinstance(r, CompiledRunner) and r.upgrade is not None}.values())
    if not pending:
        return
    with _UPGRADES.lock:
        for r in pending:
            r.upgrading = r.upgrading or threading.Event()
    from concurrent.futures import ThreadPoolExecutor  # on first use: it pulls in logging

    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(CompiledRunner.rebuild, pending))
    finally:
        for r in pending:
            cast(threading.Event, r.upgrading).set()


def _load_compiled_runner(spec: ProgramSpec, lib: bytes, device: str | None = None, digest: str = "") -> CompiledRunner:
    runner = CompiledRunner(spec, get_device(spec.device if device is None else device), lib)
    runner._digest = digest
    return runner


class EmptyRunner(Runner):
    name = "empty"

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        return None


class ViewRunner(Runner):
    """A BUFFER_VIEW: nothing to compute, but its buffer (`bufs[0]`) must point `offset` bytes into its source's
    memory (`bufs[1]`). Eagerly it already does; a jit replay swaps a new input in as the source, and this moves the
    view (and so every kernel and tensor that reads it) onto the new memory."""

    def __init__(self, offset: int, device: str):
        self.offset, self.device, self.name = offset, device, f"view at byte {offset}"

    def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
        view, src = bufs[0], bufs[1]
        root, offset = (src.base or src), src.offset + self.offset
        if view.base is not root or view.offset != offset:
            view.deallocate()  # a view only forgets its pointer into the base
            view.base, view.offset = root, offset
        return None


def check_dtypes(ast: LazyOp, dev: Compiled) -> None:
    """Refuse, by name, a kernel that computes in a dtype the device cannot (before anything is compiled)."""
    if dev.kernel_refusal is not None:
        raise DeviceError(dev.kernel_refusal)
    caps = dev.renderer.caps
    bad = sorted({n.dtype for n in ast.toposort() if n.op is not Ops.SINK and not caps.supports(n.dtype)}, key=str)
    if bad:
        names = ", ".join(d.name for d in bad)
        supported = ", ".join(sorted(d.name for d in caps.dtypes))
        raise DeviceError(f"{dev.device} does not support {names}; cast to one it supports ({supported}) or use "
                          "another device")  # fmt: skip


# kernels are cached by (device, ast, optimisation settings): the AST is compared by structure, not object identity
method_cache: dict[tuple[Any, ...], CompiledRunner] = {}


def _forget_device(device: str) -> None:
    """The device is closing: its compiled kernels are bound to it (a reopened device compiles, or loads, anew)."""
    for key in [key for key, runner in method_cache.items() if runner.dev.device == device]:
        del method_cache[key]


close_callbacks.append(_forget_device)


def get_runner(device: str, ast: LazyOp, opts: list[Opt] | None = None) -> CompiledRunner:
    key = (device, ast, BEAM.value, NOOPT.value, tuple(opts) if opts is not None else None)
    if (hit := method_cache.get(key)) is not None:
        return hit
    runner = _timed_build(device, ast, lambda device, ast: _build_runner(device, ast, opts))
    method_cache[key] = runner
    return runner


T = TypeVar("T")


def _timed_build(device: str, ast: LazyOp, build: Callable[[str, LazyOp], T]) -> T:
    """`build(device, ast)`, reported as a "compile" profile event while profiling."""
    if not profile.active():
        return build(device, ast)
    # the event is made when the block ends, by when the kernel has its name
    timing = profile.on_host("compile", "", device, "compiler", {"digest": ast.digest.hex()})
    with timing:
        out = build(device, ast)
        timing.name = out.name if isinstance(out, Runner) else out.spec.name if isinstance(out, _Held) else ""
    return out


def _build_runner(device: str, ast: LazyOp, opts: list[Opt] | None) -> CompiledRunner:
    """The kernel for `ast` on `device`: searched (BEAM), generated and compiled, or loaded from the on-disk caches."""
    dev = get_device(device)
    check_dtypes(ast, dev)
    if opts is None and BEAM >= 1:
        from lazy.codegen.search import beam_search

        opts = beam_search(ast, dev, BEAM.value)
    from lazy.codegen.program import compiled_program  # the code generator loads with the first kernel

    spec, lib, upgrade = compiled_program(ast, dev, opts, tiered=opts is None)
    runner = CompiledRunner(spec, dev, lib, upgrade)
    runner.ast = ast
    return runner


def estimate(runner: Runner, var_vals: dict[Variable, int]) -> tuple[int, int]:
    """One run's (operations, bytes moved) of `runner` with these variable values."""
    ops, mem = runner.op_estimate, runner.mem_estimate
    if type(ops) is not int:
        ops = sym_infer(ops, var_vals) if ops is not None else 0
    if type(mem) is not int:
        mem = sym_infer(mem, var_vals) if mem is not None else 0
    return ops, mem


def count_run(runner: Runner, var_vals: dict[Variable, int]) -> tuple[int, int]:
    """Add one run of `runner` to `GlobalCounters` (a kernel launch, its operations and memory traffic); returns
    (ops, bytes). Eager runs and jit replays (graph batches too) count alike."""
    ops, mem = runner.op_estimate, runner.mem_estimate
    if type(ops) is not int or type(mem) is not int:
        ops, mem = estimate(runner, var_vals)
    if isinstance(runner, CompiledRunner):
        GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    return ops, mem


@record()
class ExecItem:
    runner: Runner
    bufs: list[Buffer]
    var_vals: dict[Variable, int] = field(default_factory=dict)

    @property
    def prg(self) -> Runner:
        """The runner, under tinygrad's name."""
        return self.runner

    def run(self, var_vals: dict[Variable, int] | None = None, wait: bool = False) -> float | None:
        return run_runner(self.runner, self.bufs, self.var_vals if var_vals is None else {**self.var_vals, **var_vals},
                          wait)  # fmt: skip

    def _run_profiled(self, vals: dict[Variable, int], wait: bool) -> float | None:
        debug = DEBUG >= 2  # waits for each run, to print its time
        counts = count_run(self.runner, vals)
        elapsed = self.runner.run_profiled(self.bufs, vals, wait or debug, counts)
        if elapsed is not None:
            GlobalCounters.time_sum_s += elapsed
        if debug:
            ms = (elapsed or 0) * 1e3
            gflops = counts[0] / (elapsed * 1e9) if elapsed else 0
            print(
                f"{colored(self.runner.device, 'cyan'):>16s} {self.runner.name:40s} {ms:9.3f} ms {gflops:9.2f} GFLOP/s"
            )
        return elapsed


def run_runner(runner: Runner, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    """One run of `runner` on `bufs` (what `ExecItem.run` does; a cached schedule's steps call it without making
    ExecItems): buffers allocated, the work counted in `GlobalCounters` (and timed and reported while profiling), and
    finished before returning where code outside lazy shares the memory."""
    shared = False
    for buf in bufs[1:] if runner.borrows_output else bufs:  # (every eager op comes here: plain reads)
        if buf._opaque is None:
            buf.allocate()
        if (buf if buf.base is None else buf.base)._shared:
            shared = True
    if profile.active():  # LAZY_DEBUG>=2 too: it times every run
        elapsed = ExecItem(runner, bufs, var_vals)._run_profiled(var_vals, wait)
    else:
        elapsed = runner(bufs, var_vals, wait=wait)
        count_run(runner, var_vals)
        if elapsed is not None:
            GlobalCounters.time_sum_s += elapsed
    if shared:  # code outside lazy sees this memory (DLPack): the work on it is done when realize() returns
        for device in {buf.device for buf in bufs if buf.shared}:
            get_device(device).synchronize()
    return elapsed


def lower_schedule_item(si: ScheduleItem) -> ExecItem:
    if si.ast.op is Ops.SINK:
        return ExecItem(get_runner(si.bufs[0].device, si.ast), list(si.bufs), dict(si.var_vals))
    if si.ast.op is Ops.COPY:
        dest, src = si.bufs[0], si.bufs[1]
        if is_peer_read(si.ast) and not (dest.through_base or src.through_base) and peers(dest.device, src.device):
            return ExecItem(PeerRead(dest.nbytes, dest.device, src.device), list(si.bufs))
        return ExecItem(BufferCopy(dest.nbytes, dest.device, src.device), list(si.bufs))
    if si.ast.op is Ops.BUFFER_VIEW:
        return ExecItem(ViewRunner(si.ast.arg, si.bufs[0].device), list(si.bufs))
    if si.ast.op is Ops.EMPTY:
        return ExecItem(EmptyRunner(), list(si.bufs))
    raise RuntimeError(f"don't know how to run a {si.ast.op} schedule item")


# the jit listens here while capturing: each ExecItem that runs is passed to these callbacks, with the LazyBuffers
# whose memory it writes (so the jit can tell which buffers die with the function and may share memory)
capturing: list[Callable[[ExecItem, tuple[Any, ...]], None]] = []


def precompile(schedule: list[ScheduleItem]) -> None:
    """Build the kernels of a schedule that are not cached yet before anything runs, so errors surface here: this
    thread generates the programs (Python: it holds the GIL) while a pool of one thread per core compiles them
    (compilers run as subprocesses or release the GIL). Sources a compiler batches (`Compiler.batch_src_max`) go in
    batches of about `Compiler.batch_chars` characters: a C compiler's start and link were most of what each of a
    CNN step's ~100 small kernels cost to build. With BEAM or `LAZY_DEBUG>=4` kernels build one by one as the schedule
    runs instead."""
    todo = {(si.bufs[0].device, si.ast): si for si in schedule if si.ast.op is Ops.SINK}
    todo = {k: si for k, si in todo.items() if (k[0], k[1], BEAM.value, NOOPT.value, None) not in method_cache}
    if len(todo) < 2 or BEAM >= 1:  # BEAM times candidates on the device: one kernel at a time
        return
    if DEBUG >= 4:  # kernels print their source as they compile: one at a time keeps the listing in schedule order
        return
    from concurrent.futures import Future, ThreadPoolExecutor  # on first use: it pulls in logging

    where = profile.origin() if profile.active() else None  # the pool's compile events belong to this realize

    with progress("compiling", total=len(todo), unit="kernels", leave=False) as bar:

        def build(batch: list[_Held]) -> None:
            with profile.adopt(where) if where is not None else contextlib.nullcontext():
                libs = batch[0].compiler.compile_cached_batch([h.spec.src for h in batch])
            for h, lib in zip(batch, libs):
                _install(h, lib)
                bar.update()  # from the pool's threads: a bar is thread-safe

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            built: list[Future[None]] = []
            batches: dict[int, list[_Held]] = {}  # id(compiler) -> sources waiting for a batch
            for device, ast in todo:
                held = _timed_build(device, ast, _generate)
                limit = held.compiler.batch_src_max
                if not 0 < len(held.spec.src) <= limit:
                    built.append(pool.submit(build, [held]))
                    continue
                batch = batches.setdefault(id(held.compiler), [])
                batch.append(held)
                if sum(len(h.spec.src) for h in batch) >= (held.compiler.batch_chars or 4 * limit):
                    built.append(pool.submit(build, batches.pop(id(held.compiler))))
            built += [pool.submit(build, batch) for batch in batches.values()]
            for future in built:
                future.result()  # the first error raises here, before anything runs


@record(frozen=True)
class _Held:
    """A kernel generated but not compiled yet, waiting for its compiler (alone, or in a batch)."""

    device: str
    ast: LazyOp
    spec: ProgramSpec
    compiler: Any
    upgrade: Any  # the compiler of the kernel's full build when `compiler` is its quick tier (`Compiler.tiers`)
    program_key: bytes | None  # where to remember the generated program once it compiled (None: it was cached)


def _generate(device: str, ast: LazyOp) -> _Held:
    """The kernel's program (from the program cache, or generated) and the compiler for it."""
    dev = get_device(device)
    check_dtypes(ast, dev)
    from lazy.codegen.program import program_source  # the code generator loads with the first kernel

    spec, program_key = program_source(ast, dev)
    return _Held(device, ast, spec, *dev.compiler.tiers(spec), program_key)


def _install(held: _Held, lib: bytes) -> CompiledRunner:
    """The runner of a compiled kernel, in the method cache (and its program in the program cache, when new)."""
    from lazy.codegen.program import remember_program

    if held.program_key is not None:
        remember_program(held.program_key, held.spec)
    runner = CompiledRunner(held.spec, get_device(held.device), lib, held.upgrade)
    runner.ast = held.ast
    method_cache[(held.device, held.ast, BEAM.value, NOOPT.value, None)] = runner
    return runner


def copy_now(dest: Buffer, src: Buffer) -> None:
    """Copy `src` into `dest` (same size) now, as a schedule's copy would: a jit capturing at the time records it
    (call `BufferCopy` directly and a replay would skip the copy)."""
    ei = ExecItem(BufferCopy(dest.nbytes, dest.device, src.device), [dest, src])
    ei.run()
    for cb in capturing:
        cb(ei, ())


# a closing device's timed work is read while it still works
close_callbacks.append(lambda device: profile.flush(device) if profile.pending else None)

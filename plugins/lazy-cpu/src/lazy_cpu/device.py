"""The CPU and LLVM devices: host memory, the two compilers (system C compiler; llvmlite in-process), loaded programs
that split a kernel's outermost loop over the device's share of the cores (`CPU:0`, `CPU:1`, ... split them), and the
`open_cpu` / `open_llvm` factories. Jit graphs replay through the native launcher of `lazy_cpu.graph`."""

from __future__ import annotations

import atexit
import copy
import ctypes
import functools
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, cast

import numpy as np

from lazy.device import BufferSpec, Compiled, CompileError, Compiler, DeviceError, LRUAllocator, ProgramSpec
from lazy.helpers import DEBUG, THREADS
from lazy_cpu import find_c_compiler
from lazy_cpu.graph import LAUNCHER_SRC, HostGraph, NativeKernel, NativeLibrary, NativePool
from lazy_cpu.hostcpu import vector_widths, x86_fma
from lazy_cpu.llvmworker import CODE_MODEL, RELOC, CompileWorker, IRCompiler, target_machine
from lazy_cpu.queues import CPUComputeQueue, CPUCopyQueue, CPUSignal, QueueWorker
from lazy_cpu.renderer import ClangRenderer, LLVMRenderer

ALIGNMENT = 64
# Every buffer lazy allocates has READ_SLACK spare bytes before and after it. gcc 12 on AVX-512 turns a vectorized
# gated load whose mask is known when compiling (a short loop with a pad's bounds, fully unrolled) into one whole
# vector load and a blend: it reads up to a vector's width beyond the gate, past the end (or before the start) of the
# buffer, and faults where that crosses into an unmapped page. One 512-bit vector of slack keeps such reads in memory
# the buffer owns (tested in test_cpu_device.py with pages that fault on either side).
READ_SLACK = 64
# Buffers of at least HUGE_PAGE_MIN bytes start on a 2 MiB boundary and ask the kernel for transparent huge pages
# (numpy does the same from 4 MiB): a stream over 64 MiB then walks 32 page-table entries, not 16384, which measured
# 6-10% faster on the sum of 16M float32 (3.72 -> 3.50 ms) where THP is in "madvise" mode.
HUGE_PAGE = 2 << 20
HUGE_PAGE_MIN = 4 << 20
MADV_HUGEPAGE = 14  # Linux; elsewhere madvise refuses the advice and the buffer keeps normal pages
KERNEL_NAME = re.compile(r"^void (\w+)\(", re.MULTILINE)  # a rendered kernel's function (its helpers are static)
SPLIT_MIN_WORK = 1 << 17  # `estimated_work` below which a kernel runs on the calling thread alone (~0.5 MB moved)
OPS_PER_WORD = 16  # arithmetic operations a core does (vector lanes counted) in the time it moves a 4-byte element
# Kernel chunks never block, so threads beyond the cores only add switching; a few per core still lets one measure
# oversubscription (and covers an affinity mask narrower than the machine), while e.g. 1000 would start 1000 threads
# and reserve 8 GB of address space for their stacks.
THREADS_PER_CORE = 4
SMALL_KERNEL_WORK = 1 << 16  # ops (or 4-byte elements moved) below which a C kernel compiles with cheaper flags

# --------------------------------------------------------------------------------------------------------------------
# memory

_libc = ctypes.CDLL(None, use_errno=True)
_posix_memalign = _libc.posix_memalign
_posix_memalign.argtypes, _posix_memalign.restype = (
    [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t],
    ctypes.c_int,
)
_free = _libc.free
_free.argtypes, _free.restype = [ctypes.c_void_p], None
_madvise = getattr(_libc, "madvise", None)
if _madvise is not None:
    _madvise.argtypes, _madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int


class HostMemory(ctypes.c_void_p):
    """An allocator opaque: the address itself (ctypes passes it to a kernel as is), its size, and for a sub-buffer
    the buffer it lives in (kept alive with it)."""

    nbytes: int = 0
    base: HostMemory | None = None


class HostAllocator(LRUAllocator):
    """64-byte aligned host memory (posix_memalign). CPU and LLVM kernels read it through plain pointers, so the
    devices' buffers are interchangeable, numpy can view them without a copy, and any host memory (another library's
    DLPack tensor) can be handed to a kernel as it is: kernels assume only element alignment."""

    features = frozenset({"as_buffer", "offset", "transfer", "address", "wrap"})

    def _alloc(self, size: int, spec: BufferSpec) -> HostMemory:
        ptr = ctypes.c_void_p()
        huge = size >= HUGE_PAGE_MIN and _madvise is not None and sys.platform.startswith("linux")
        if _posix_memalign(ctypes.byref(ptr), HUGE_PAGE if huge else ALIGNMENT, size + 2 * READ_SLACK) != 0:
            raise MemoryError(f"out of host memory allocating {size} bytes; free some buffers or use smaller tensors")
        if huge and _madvise is not None:
            _madvise(ptr, size // HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE)  # only advice: a refusal changes nothing
        mem = HostMemory((ptr.value or 0) + READ_SLACK)
        mem.nbytes = size
        return mem

    def _free(self, opaque: HostMemory, size: int, spec: BufferSpec) -> None:
        if opaque.base is None:
            _free((opaque.value or 0) - READ_SLACK)

    def _as_buffer(self, src: HostMemory) -> memoryview:
        return memoryview((ctypes.c_ubyte * src.nbytes).from_address(src.value or 0)).cast("B")

    def _address(self, opaque: HostMemory) -> int:
        return opaque.value or 0

    def _wrap(self, address: int, size: int) -> HostMemory:
        mem = HostMemory(address)  # not lazy's: `_free` is never called for it (the Buffer holds its owner)
        mem.nbytes = size
        return mem

    def _offset(self, buf: HostMemory, size: int, offset: int) -> HostMemory:
        mem = HostMemory((buf.value or 0) + offset)
        mem.nbytes, mem.base = size, buf
        return mem

    def _copyin(self, dest: HostMemory, src: memoryview) -> None:
        if src.nbytes:
            ctypes.memmove(dest, np.frombuffer(src, dtype=np.uint8).ctypes.data, src.nbytes)

    def _copyout(self, dest: memoryview, src: HostMemory) -> None:
        if dest.nbytes:
            ctypes.memmove(np.frombuffer(dest, dtype=np.uint8).ctypes.data, src, dest.nbytes)

    def _transfer(self, dest: HostMemory, src: HostMemory, size: int, src_dev: Any, dest_dev: Any) -> None:
        ctypes.memmove(dest, src, size)


# --------------------------------------------------------------------------------------------------------------------
# running on all cores


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CorePool:
    """Persistent daemon threads that each run one chunk of a kernel's outermost loop; the calling thread runs the
    first chunk itself. ctypes releases the GIL for the call, so the chunks run in parallel. Native graphs split
    their kernels with a pthread pool instead (`native_pool`), which runs chunks without the GIL."""

    def __init__(self, name: str):
        self.name = name
        self.workers: list[tuple[threading.Thread, SimpleQueue[Any]]] = []
        self.lock = threading.Lock()  # one split kernel at a time: each one uses every core already
        self.native: NativePool | None = None

    def native_pool(self, library: NativeLibrary) -> NativePool:
        """The pthread pool of this process (a forked child makes its own: the parent's threads stayed behind)."""
        if self.native is None or self.native.pid != os.getpid():
            self.native = NativePool(library, THREADS_PER_CORE * cpu_count())
        return self.native

    def run(self, fxn: Callable[..., Any], args: tuple[Any, ...], total: int, parts: int) -> None:
        """Call `fxn(*args, lo, hi)` for `parts` contiguous chunks [lo, hi) of [0, total) and wait for all."""
        bounds = [total * k // parts for k in range(parts + 1)]
        error: BaseException | None = None
        # Each run counts its chunks on a queue of its own: when a wait here is interrupted (Ctrl-C), the chunks still
        # running report to that queue, not to the next run's, which would otherwise return before its own chunks.
        done: SimpleQueue[BaseException | None] = SimpleQueue()
        with self.lock:
            if self.workers and not self.workers[0][0].is_alive():  # a forked child: the threads stayed behind
                self.workers = []
            while len(self.workers) < parts - 1:
                self._spawn()
            for k in range(1, parts):
                self.workers[k - 1][1].put((fxn, args, bounds[k], bounds[k + 1], done))
            try:
                fxn(*args, bounds[0], bounds[1])
            except BaseException as e:
                error = e
            for _ in range(parts - 1):
                error = done.get() or error
        if error is not None:
            raise error

    def _spawn(self) -> None:
        tasks: SimpleQueue[Any] = SimpleQueue()
        name = f"lazy-{self.name}-core{len(self.workers) + 1}"
        thread = threading.Thread(target=self._work, args=(tasks,), name=name, daemon=True)
        thread.start()
        self.workers.append((thread, tasks))

    def _work(self, tasks: SimpleQueue[Any]) -> None:
        while (task := tasks.get()) is not None:
            fxn, args, lo, hi, done = task
            try:
                fxn(*args, lo, hi)
                done.put(None)
            except BaseException as e:
                done.put(e)

    def close(self) -> None:
        for _, tasks in self.workers:
            tasks.put(None)
        for thread, _ in self.workers:
            thread.join(5.0)
        self.workers.clear()
        if self.native is not None:
            self.native.close()
            self.native = None


_ALL_SHARES: weakref.WeakSet[CoreShares] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for shares in list(_ALL_SHARES):
        shares.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CoreShares:
    """The open instances of each host device kind (`CPU`, `LLVM`), which split the cores between them: `CPU:0` and
    `CPU:1` on 2 cores run one thread each. A share is recomputed at every launch, so it grows again when a sibling
    closes. Kinds are counted apart: a process normally computes on one kind, and opening `LLVM` next to `CPU` (to
    compare them, as tests do) should not halve `CPU`'s threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, list[str]] = {}  # kind -> its open instances' names, by ordinal
        # bumped whenever an instance opens or closes: a replayed graph compares it (one attribute read) to know
        # whether its split still holds, instead of counting its siblings at every replay
        self.generation = 0
        _ALL_SHARES.add(self)

    def forked(self) -> None:
        """In a forked child: the pools are the child's own now (a replayed graph looks its pool up again)."""
        self.lock = threading.Lock()  # (another thread may have held it at the fork)
        self.generation += 1

    def add(self, device: str) -> None:
        with self.lock:
            names = self.open.setdefault(_kind(device), [])
            names.append(device)
            names.sort(key=_ordinal)
            self.generation += 1

    def remove(self, device: str) -> None:
        with self.lock:
            names = self.open.get(_kind(device), [])
            if device in names:
                names.remove(device)
            self.generation += 1

    def share(self, device: str, cores: int) -> int:
        """`device`'s threads: the cores split evenly between the open instances of its kind, the lowest ordinals
        taking the remainder (3 cores, CPU:0 and CPU:1: 2 and 1); at least one."""
        with self.lock:
            names = self.open.get(_kind(device), [])
            count, rank = max(1, len(names)), names.index(device) if device in names else 0
        return max(1, cores // count + (1 if rank < cores % count else 0))

    def siblings(self, device: str) -> int:
        """How many instances of `device`'s kind are open (a replayed graph splits again when it changes)."""
        with self.lock:
            return len(self.open.get(_kind(device), []))


def _kind(device: str) -> str:
    return device.partition(":")[0]


def _ordinal(device: str) -> int:
    return int(device.partition(":")[2] or 0)


CORE_SHARES = CoreShares()


def estimated_work(spec: ProgramSpec | None) -> float:
    """How long a launch runs, to decide whether splitting it over cores pays, in 4-byte elements moved from memory
    with its arithmetic counted at `OPS_PER_WORD` operations each (unknown or symbolic: a lot). Counting operations
    like elements split a small layer's backward (64x10 @ 10x64 with a ReLU's mask: 160k operations, ~10 us on one
    core), where waking and joining a second thread cost more than it saved: the jitted MLP step's median 140-155 ->
    111-124 us on CPU (docs/benchmarks.md)."""
    if spec is None:
        return float("inf")
    ops, mem = spec.op_estimate, spec.mem_estimate
    if not isinstance(ops, int) or not isinstance(mem, int) or ops == mem == 0:
        return float("inf")
    return max(ops / OPS_PER_WORD, mem / 4)


# --------------------------------------------------------------------------------------------------------------------
# programs


class HostProgram(NativeKernel):
    """A loaded kernel `void name(buffers..., int64 vars..., [int64 lo, int64 hi])`. Called as core's `Program`: `bufs`
    are allocator opaques, `vals` the symbolic var values (without lo/hi, which this object supplies). A native graph
    (`lazy_cpu.graph.HostGraph`) calls it at `address` instead."""

    def __init__(self, dev: HostDevice, name: str, spec: ProgramSpec | None):
        self.dev, self.name = dev, name
        self.core_split = spec.core_split if spec is not None else 0
        self.work = estimated_work(spec)
        self.fxn: Callable[..., Any] | None = None

    def bind(self, argtypes: list[type]) -> Callable[..., Any]:
        raise NotImplementedError

    def _bound(self, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> Callable[..., Any]:
        fxn = self.fxn
        if fxn is None:
            ints = len(vals) + (2 if self.core_split else 0)
            fxn = self.fxn = self.bind([ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * ints)
        return fxn

    def run_whole(self, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        """All of the kernel on the calling thread (`HostDevice.launch_now`: one too small to split)."""
        fxn = self.fxn or self._bound(bufs, vals)
        if self.core_split:
            fxn(*bufs, *vals, 0, self.core_split)
        else:
            fxn(*bufs, *vals)

    def __call__(self, *bufs: Any, global_size: Any = None, local_size: Any = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        fxn = self._bound(bufs, vals)
        start = time.perf_counter() if wait else 0.0
        if not self.core_split:
            fxn(*bufs, *vals)
        elif self.work >= self.dev.split_min_work and (parts := min(self.dev.threads(), self.core_split)) > 1:
            self.dev.cores.run(fxn, (*bufs, *vals), self.core_split, parts)
        else:
            fxn(*bufs, *vals, 0, self.core_split)
        return time.perf_counter() - start if wait else None


class CPUProgram(HostProgram):
    """A shared object built by the C compiler, loaded with ctypes: the kernel's own, or a batch's
    (`ClangCompiler.compile_batch`), where the kernel is a symbol the binary names and the batch is loaded once."""

    def __init__(self, dev: HostDevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        super().__init__(dev, name, spec)
        symbol, so = unpack_batch(lib) or (name, lib)
        self.lib = load_shared_object(name, so)
        self.cfunc = getattr(self.lib, symbol)
        self.address = ctypes.cast(self.cfunc, ctypes.c_void_p).value or 0

    def bind(self, argtypes: list[type]) -> Callable[..., Any]:
        # a function object of its own: two kernels that compile to the same bytes share the loaded library and so
        # ctypes' one object per symbol, whose argtypes the second kernel's binding would set for the first (whose
        # calls then failed on the wrong argument count). `self.lib` keeps the code loaded.
        return ctypes.CFUNCTYPE(None, *argtypes)(self.address)


@functools.cache
def _load_host_libraries() -> None:
    """Kernels linked without libraries (`ClangCompiler.link`) call libm's functions (fmod) from the process: CPython
    links libm, but a program embedding Python may not, or only privately; this makes libm's symbols visible."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libm.so.6", mode=ctypes.RTLD_GLOBAL)
        except OSError:  # a C library without a separate libm (musl): its functions are in libc
            pass


def load_shared_object(name: str, lib: bytes) -> ctypes.CDLL:
    """Load the bytes of a shared object (through a temporary file, removed once loaded); the same bytes twice (the
    kernels of one batch) load once."""
    _load_host_libraries()
    digest = hashlib.sha256(lib).digest()
    with _LOADED_LOCK:
        if (loaded := _LOADED.get(digest)) is not None:
            return loaded
        fd, path = tempfile.mkstemp(prefix=f"lazy_{name}_", suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lib)
            loaded = _LOADED[digest] = ctypes.CDLL(path)
            return loaded
        finally:
            os.unlink(path)


_LOADED: dict[bytes, ctypes.CDLL] = {}  # shared objects loaded in this process, by the SHA-256 of their bytes
_LOADED_LOCK = threading.Lock()

# a binary of `ClangCompiler.compile_batch`: this, the kernel's symbol, a NUL, then the batch's shared object
BATCH_MAGIC = b"lazy-cpu batch 1\0"


def unpack_batch(lib: bytes) -> tuple[str, bytes] | None:
    """(symbol, shared object) of a batch's binary, or None for a kernel's own shared object."""
    if not lib.startswith(BATCH_MAGIC):
        return None
    symbol, _, so = lib[len(BATCH_MAGIC) :].partition(b"\0")
    return symbol.decode(), so


class LLVMProgram(HostProgram):
    """An object file from `LLVMCompiler`, loaded into the device's MCJIT engine."""

    def __init__(self, dev: HostDevice, name: str, lib: bytes, spec: ProgramSpec | None = None):
        super().__init__(dev, name, spec)
        assert isinstance(dev, LLVMDevice)
        self.address = dev.jit.load(name, lib)

    def bind(self, argtypes: list[type]) -> Callable[..., Any]:
        return ctypes.CFUNCTYPE(None, *argtypes)(self.address)


# --------------------------------------------------------------------------------------------------------------------
# compilers


class TieredCompiler(Compiler):
    """A compiler with a cheaper configuration, `small`, for kernels whose speed does not need the full one: small
    kernels (compiling is most of what they cost), and kernels the code generator wrote in vector types (the full
    configuration's extra is mostly the auto-vectorizers, which find nothing left to do there)."""

    small: Compiler
    vectors_cheap = True  # False where vector code still needs the full configuration (see ClangCompiler)

    def for_work(self, work: float) -> Compiler:
        return self.small if work < SMALL_KERNEL_WORK else self

    def for_program(self, spec: ProgramSpec) -> Compiler:
        return self.small if spec.vector_width > 1 and self.vectors_cheap else self.for_work(spec.estimated_work())

    def quick_for(self, spec: ProgramSpec) -> Compiler | None:
        # the cheaper configuration compiles 3-4x faster (a scalar kernel of the CNN step's 0.3 -> 0.08 s) and runs
        # such a kernel 2-4x slower: worth it for a kernel that runs once, not for one that runs on
        return self.small if self.for_program(spec) is not self.small else None


class ClangCompiler(TieredCompiler):
    """C source -> the bytes of a shared object, with the system C compiler (gcc preferred, clang otherwise).

    No -ffast-math: NaN, inf and signed zeros must behave as in `lazy.ops`. -ffp-contract=off keeps a*b+c two
    roundings unless the kernel asked for MULACC; -fwrapv makes signed overflow wrap as the reference does. Kernels
    of less than `SMALL_KERNEL_WORK`, and kernels the code generator vectorized itself, compile at -O1
    (`for_program`), under a cache key of their own."""

    # kernels compile in batches of about 32k characters (`compile_batch`; a convolution's is 8-17k): each compiler
    # run costs ~50 ms of CPU before any kernel (process start, link); batching kernels up to 24k characters long too
    # (8k before) cut the cold CNN step's gcc CPU time (see docs/benchmarks.md)
    batch_src_max = 24576
    batch_chars = 32768
    FLAGS = ["-O2", "-march=native", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
             "-fwrapv"]  # fmt: skip
    # gcc's -O2 otherwise vectorizes only loops that need no epilogue, and if-converts (so vectorizes) no select of
    # more than 4 values meeting (the polynomial transcendentals' special cases have more)
    GCC_FLAGS = ["-fvect-cost-model=dynamic", "--param=max-tree-if-conversion-phi-args=8"]

    def __init__(self, device: str = "CPU", cc: str | None = None):
        self.device = device
        found, missing = (cc, "") if cc else find_c_compiler()
        if found is None:
            raise DeviceError(f"{device}: {missing}")
        self.cc: str = found
        version = subprocess.run([self.cc, "--version"], capture_output=True, text=True, check=False).stdout
        self.version = (version.splitlines() or ["unknown"])[0]
        self.flags = self.FLAGS + ([] if "clang" in version else self.GCC_FLAGS)
        if max(vector_widths()) == 16:  # both compilers default to 256-bit vectors; kernels ask for 16 lanes on purpose
            self.flags.append("-mprefer-vector-width=512")
        # On Linux a kernel's shared object links no C library and no start files: the C compiler's link of them was
        # a third of a small kernel's compile (55 -> 36 ms here). What a kernel calls (memcpy, libm's fmod) is
        # resolved when it loads, from the process: CPython links libc and libm (`_load_host_libraries` makes sure),
        # and the compiler's own helpers (half conversions) come from the static libgcc.
        self.link = ["-nostdlib", "-lgcc"] if sys.platform.startswith("linux") else ["-lm"]
        super().__init__(self.identity(self.flags))
        # -O1 compiles in 30-60% less time. Small kernels run as fast with it (the CNN train step's 18: 240 us in all,
        # 270 at -O2), and so do kernels written in vector types (matmul, convolutions, reductions, transcendentals):
        # -O2 adds gcc's auto-vectorizers, which find nothing left to do there. Scalar kernels the code generator could
        # not vectorize (int division, casts, argmax) need them: 2-4x slower at -O1.
        # Without x86 FMA (ARM with gcc, old x86) the prelude's vector FMA is a loop only -O2 vectorizes: -O2 then.
        self.vectors_cheap = x86_fma()
        self.small = copy.copy(self)
        self.small.flags = ["-O1" if flag == "-O2" else flag for flag in self.flags]
        self.small.cachekey = self.identity(self.small.flags)
        self.small.small = self.small

    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """Several kernels as one translation unit, compiled and linked once (the C compiler's start and link were
        ~80% of a small kernel's compile time). Each kernel's function is renamed in the batch (`#define`: two kernels
        may share a name) and its binary is the batch's shared object naming that symbol (`unpack_batch`); the
        renderer guards its preludes' helpers, so they are defined once."""
        parts, symbols = [], []
        for i, src in enumerate(srcs):
            if (found := KERNEL_NAME.search(src)) is None:
                raise CompileError(self.device, src, "no kernel function found to batch")
            name = found.group(1)
            symbols.append(f"lazy_batch{i}_{name}")
            parts += [f"#define {name} {symbols[-1]}", src, f"#undef {name}"]
        so = self.compile("\n".join(parts))
        return [BATCH_MAGIC + symbol.encode() + b"\0" + so for symbol in symbols]

    def identity(self, flags: list[str]) -> str:
        """The compile cache key of this compiler with `flags`."""
        return f"cc {self.cc} {self.version} {' '.join(flags + self.link)} {os.uname().machine}"

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="lazy_cc_") as tmp:
            out = os.path.join(tmp, "kernel.so")
            cmd = [self.cc, *self.flags, "-x", "c", "-", "-x", "none", "-o", out, *self.link]
            proc = subprocess.run(cmd, input=src.encode(), capture_output=True, check=False)
            if proc.returncode != 0:
                raise CompileError(self.device, src, f"{' '.join(cmd)}\n{proc.stderr.decode(errors='replace')}")
            with open(out, "rb") as f:
                return f.read()


class LLVMJit:
    """The host's LLVM target (one per device, made when the device opens): compiles IR to object files and loads
    them into MCJIT engines. A kernel name already loaded with different code gets an engine of its own.

    llvmlite serializes all calls into LLVM behind one process-wide lock, so compiling threads would take turns:
    the kernels a schedule builds on the compile pool (`compile_parallel`) go to worker processes instead
    (`lazy_cpu.llvmworker`, one per compiling thread, started on first use and kept until the device closes); a
    single kernel compiles in this process. Where a worker cannot start, everything compiles here."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.llvm = llvm
        self.triple = llvm.get_process_triple()
        self.cpu, self.features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        self.machine = self.target_machine()  # the data layout; each engine and compiling thread owns another one
        self.lock = threading.Lock()  # LLVM objects are not safe to share between threads: engines are loaded under it
        # each compiling thread has a context and target machine of its own (`IRCompiler`)
        self.compilers = threading.local()
        self.engines: list[tuple[Any, set[str]]] = []  # (MCJIT engine, the kernel names loaded into it)
        self.loaded: dict[str, tuple[Any, bytes]] = {}  # kernel name -> (its engine, its object), latest load
        self.idle_workers: list[CompileWorker] = []
        self.workers = 0  # started and not closed
        self.workers_failed: str | None = None  # why a worker could not start: compile here from then on
        self.workers_pid = os.getpid()  # the process the workers serve (a forked child starts its own)

    def target_machine(self) -> Any:
        return target_machine(self.llvm, self.triple, self.cpu, self.features)

    def compile(self, src: str, cheap: bool = False) -> bytes:
        """IR -> an object file in this process: the O3 pipeline with LLVM's vectorizers, or (`cheap`) O1 without."""
        mine = self.compilers
        if not hasattr(mine, "compiler"):
            with self.lock:
                mine.compiler = IRCompiler(self.llvm, self.triple, self.cpu, self.features)
        return cast(bytes, mine.compiler.compile(src, cheap))

    def compile_parallel(self, src: str, cheap: bool = False) -> bytes:
        """`compile(src, cheap)` in a worker process of the calling thread's own (one of the compile pool's)."""
        worker = self._take_worker()
        if worker is None:
            return self.compile(src, cheap)
        try:
            return worker.compile(src, cheap)
        finally:
            with self.lock:
                if worker.alive:  # (also after LLVM's message about the IR: the worker itself is fine)
                    self.idle_workers.append(worker)
                else:  # it died on this IR (the compile raised, saying so)
                    self.workers -= 1

    def _forked(self) -> bool:
        """True (once, then forgetting the parent's workers) in a child forked after workers started: their pipes
        are the parent's, and a request from here would mix with the parent's replies."""
        if self.workers_pid == os.getpid():
            return False
        self.idle_workers, self.workers, self.workers_pid = [], 0, os.getpid()
        return True

    def _take_worker(self) -> CompileWorker | None:
        with self.lock:
            self._forked()
            if self.idle_workers:
                return self.idle_workers.pop()
            if self.workers_failed is not None or self.workers >= (os.cpu_count() or 1):
                return None
            if self.workers == 0:  # the first of this device's workers: stop them at exit, not at teardown
                atexit.register(_close_jit, weakref.ref(self))
            self.workers += 1
        try:
            return CompileWorker(self.triple, self.cpu, self.features)
        except OSError as e:
            with self.lock:
                self.workers -= 1
                self.workers_failed = str(e)
            if DEBUG >= 1:
                print(f"LLVM: {e}; compiling in this process (one kernel at a time)")
            return None

    def close(self) -> None:
        """Stop the compile workers (they also exit by themselves when this process does)."""
        with self.lock:
            if self._forked():  # the parent's workers are the parent's to stop
                return
            workers, self.idle_workers = self.idle_workers, []
            self.workers -= len(workers)
        for worker in workers:
            worker.close()

    def load(self, name: str, obj: bytes) -> int:
        with self.lock:
            if name in self.loaded and self.loaded[name][1] == obj:
                return self.loaded[name][0].get_function_address(name)
            engine, names = next(((e, n) for e, n in self.engines if name not in n), (None, set()))
            if engine is None:
                engine = self.llvm.create_mcjit_compiler(self.llvm.parse_assembly(""), self.target_machine())
                self.engines.append((engine, names))
            engine.add_object_file(self.llvm.ObjectFileRef.from_data(obj))
            engine.finalize_object()
            names.add(name)
            self.loaded[name] = (engine, obj)
            return engine.get_function_address(name)


def _close_jit(jit: weakref.ref[LLVMJit]) -> None:
    if (found := jit()) is not None:
        found.close()


class LLVMCompiler(TieredCompiler):
    """LLVM IR -> an object file for the host CPU with llvmlite (in process, or for the compile pool in worker
    processes: `compile_batch`, `LLVMJit.compile_parallel`). As with C (`ClangCompiler`), small
    kernels and kernels written in vector types take a cheaper pipeline (O1, no auto-vectorizers: the CNN step's
    steady time unchanged, its cold first step 15.3 -> 11.6 s here), under a cache key of its own."""

    pool_batches = True  # the compile pool's kernels, even one at a time, build in worker processes

    def __init__(self, jit: LLVMJit, device: str = "LLVM", cheap: bool = False):
        self.jit, self.device, self.cheap = jit, device, cheap
        version = ".".join(map(str, jit.llvm.llvm_version_info))
        super().__init__(f"llvm {version} {jit.triple} {jit.cpu} {jit.features} {RELOC}-{CODE_MODEL} "
                         f"{'O1' if cheap else 'O3'}")  # fmt: skip
        self.small = self if cheap else LLVMCompiler(jit, device, cheap=True)

    def compile(self, src: str) -> bytes:
        try:
            return self.jit.compile(src, self.cheap)
        except RuntimeError as e:  # llvmlite reports parse and verify errors as RuntimeError
            raise CompileError(self.device, src, str(e)) from None

    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """The compile pool's kernels (`lazy.engine.runners.precompile`), each in a worker process (see `LLVMJit`)."""
        objs = []
        for src in srcs:
            try:
                objs.append(self.jit.compile_parallel(src, self.cheap))
            except RuntimeError as e:
                raise CompileError(self.device, src, str(e)) from None
        return objs


# --------------------------------------------------------------------------------------------------------------------
# devices

ProgramFactory = Callable[["HostDevice", str, bytes, "ProgramSpec | None"], HostProgram]


@functools.cache
def native_library() -> NativeLibrary | None:
    """The native graph launcher, built once per process with the system C compiler (through the compile cache);
    None where there is no C compiler (an LLVM device's graphs then replay one command per kernel)."""
    try:
        lib = ClangCompiler("CPU").compile_cached(LAUNCHER_SRC)
        return NativeLibrary(load_shared_object("graph", lib))
    except (DeviceError, CompileError, OSError) as e:
        if DEBUG >= 1:
            print(f"host devices: no native jit graphs ({e}); replays submit one command per kernel")
        return None


class HostDevice(Compiled):
    """A device whose kernels run on this machine's cores, driven through HCQ queues by one worker thread. A jit
    replays its kernels as one native graph (`graph_t`)."""

    graph_t = HostGraph
    eager_graphs = True  # (a graph is an argument array: cheap to record)

    def __init__(self, device: str, renderer: Any, compiler: Compiler, program_t: ProgramFactory):
        self.program_t = program_t
        self.split_min_work: float = SPLIT_MIN_WORK
        self.cores = CorePool(device)
        self.capped_notes: set[int] = set()  # LAZY_THREADS values already reported as capped
        super().__init__(device, HostAllocator(), renderer, compiler, self.load_program, signal_t=CPUSignal,
                         compute_queue_t=CPUComputeQueue, copy_queue_t=CPUCopyQueue)  # fmt: skip
        self.queue_worker = QueueWorker(self)
        CORE_SHARES.add(device)
        self.shares = CORE_SHARES

    def load_program(self, name: str, lib: bytes, spec: ProgramSpec | None = None) -> HostProgram:
        """`Compiled.runtime`: a compiled kernel as a callable program."""
        return self.program_t(self, name, lib, spec)

    def native_library(self) -> NativeLibrary | None:
        return native_library()

    def native_pool(self) -> NativePool:
        """The pthread pool native graphs split kernels with (only asked for once `native_library` gave one)."""
        library = native_library()
        assert library is not None, "a native graph exists only with the native library"
        return self.cores.native_pool(library)

    def threads(self) -> int:
        """How many threads split one kernel: LAZY_THREADS, or this instance's share of the cores (all of them when it
        is the only open instance of its kind, see `CoreShares`); at most THREADS_PER_CORE per core."""
        cores, wanted = cpu_count(), int(THREADS.value)
        if wanted < 0:
            raise ValueError(f"LAZY_THREADS={wanted}: set it to a number of threads, or 0 for one per core")
        if wanted > (most := THREADS_PER_CORE * cores):
            if DEBUG >= 1 and wanted not in self.capped_notes:
                self.capped_notes.add(wanted)
                print(f"{self.device}: LAZY_THREADS={wanted} is more than {THREADS_PER_CORE} per core ({cores} cores "
                      f"here); using {most}")  # fmt: skip
            return most
        return wanted or CORE_SHARES.share(self.device, cores)

    def launch_now(self, program: Any, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> bool:
        """A kernel too small to split over the cores runs on the calling thread when the queue worker is idle: as
        the queue would run it (`CPUComputeQueue` runs such submissions inline too), without building one."""
        worker = self.queue_worker
        if getattr(program, "work", float("inf")) >= self.split_min_work or worker.closed:
            return False
        with self.submit_lock:
            if not worker.idle():
                return False
            try:
                program.run_whole(bufs, vals)
            except Exception as e:  # kept for `synchronize`, as a queued command's failure is
                worker.error = worker.error or e
        return True

    def siblings(self) -> int:
        """How many instances of this device's kind are open, itself included."""
        return CORE_SHARES.siblings(self.device)

    def synchronize(self) -> None:
        super().synchronize()
        if (error := self.queue_worker.error) is not None:
            self.queue_worker.error = None
            raise DeviceError(f"{self.device}: a queued command failed: {error!r}") from error

    def close(self) -> None:
        try:
            super().close()
        finally:
            CORE_SHARES.remove(self.device)
            self.queue_worker.close()
            self.cores.close()


def open_cpu(name: str = "CPU") -> HostDevice:
    """The `CPU` device: C from `ClangRenderer`, compiled by the system C compiler."""
    return HostDevice(name, ClangRenderer(), ClangCompiler(name), CPUProgram)


class LLVMDevice(HostDevice):
    """`HostDevice` plus the LLVM target and JIT engines its compiler and programs share."""

    def __init__(self, device: str):
        self.jit = LLVMJit()
        super().__init__(device, LLVMRenderer(), LLVMCompiler(self.jit, device), LLVMProgram)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.jit.close()


def open_llvm(name: str = "LLVM") -> LLVMDevice:
    """The `LLVM` device: LLVM IR from `LLVMRenderer`, compiled by llvmlite (a schedule's new kernels in worker
    processes, see `LLVMJit`) and loaded in process."""
    return LLVMDevice(name)

"""Native jit graphs for the host devices: a captured jit's kernels replayed by one call into a small C launcher that
walks an array of launch records and calls each kernel (splitting large ones over the cores with a pthread pool), so
a replay costs the kernels plus a constant, with no Python work per kernel."""

from __future__ import annotations

import ctypes
import math
import os
from typing import TYPE_CHECKING, Any

from lazy import profile
from lazy.hcq import Exec, HCQGraph
from lazy.helpers import DEBUG, THREADS

if TYPE_CHECKING:
    from lazy_cpu.device import HostDevice

# Kernel parameters are pointers and int64 values only (symbolic variables and core_split's lo/hi are int64): on the
# 64-bit ABIs we run on (x86-64 System V and Windows, AArch64) both go in the same integer registers and stack slots,
# so the launcher calls a kernel of n parameters through a function pointer type of n int64 parameters.
# A graph with a kernel taking more (its lo/hi included) replays through core's HCQGraph: each count is a case of the
# launcher's switch, and 32 cases keep its one-time compile (cached on disk) to a few tenths of a second.
MAX_ARGS = 32
# A replay whose kernels' estimated work (`lazy_cpu.device.estimated_work`) adds up to less than this (a few
# milliseconds) runs on the submitting thread when the queue worker is idle, its large kernels still split over the
# pool. Handing it to the worker costs two thread hand-offs (~35 us to start, ~50 to wake the waiter after a 16M sum,
# whose Python meanwhile is cold) and buys little: a kernel split over every core would lose one to the caller's
# Python anyway (a jitted MLP step of 19 kernels: median 143-171 -> 112-140 us; an eager 16M sum: 2-5% of its time,
# docs/benchmarks.md). Larger ones stay on the worker, so the caller is free while they run and Ctrl-C is not held
# back for long.
INLINE_GRAPH_WORK = 1 << 26
RECORD = ("fn", "nargs", "first", "total", "parts", "grain")  # one launch record: int64 fields, in this order


def _call_cases() -> str:
    cases = []
    for n in range(MAX_ARGS + 1):
        params = ", ".join(["A"] * n) or "void"
        args = ", ".join(f"a[{i}]" for i in range(n))
        cases.append(f"  case {n}: ((void (*)({params}))fn)({args}); break;")
    return "\n".join(cases)


LAUNCHER_SRC = f"""
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
typedef int64_t A;
typedef struct {{ A fn, nargs, first, total, parts, grain; }} launch_t;  /* RECORD in graph.py */

/* Waking a sleeping thread costs 15-45 us (a futex; on a VM, the halted virtual core's wake-up too), so threads spin
   a while before they sleep: a pool thread that finished its ranges spins POOL_SPIN_NS for the next job (a graph's
   split kernels come microseconds apart, eager ops' a few hundred), and the launching thread spins for the job's
   other ranges as long as its own took (guided ranges end about together). The spin gives the core away every few
   microseconds (sched_yield), so a thread waiting for it (the Python thread, a compiler) is not held back. */
#define POOL_SPIN_NS 1000000
#if defined(__x86_64__) || defined(__i386__)
#define PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define PAUSE() __asm__ volatile("yield")
#else
#define PAUSE() ((void)0)
#endif

static A now_ns(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (A)t.tv_sec * 1000000000 + t.tv_nsec;
}}

/* spin while *x == v, for at most `ns` nanoseconds; returns as soon as it changes */
static void spin_while(const A *x, A v, A ns) {{
  A end = 0;
  for (unsigned i = 1; __atomic_load_n(x, __ATOMIC_ACQUIRE) == v; i++) {{
    PAUSE();
    if (i % 128 == 0) {{
      A t = now_ns();
      if (end == 0) end = t + ns;
      else if (t >= end) return;
      sched_yield();
    }}
  }}
}}

static void call(A fn, A n, const A *a) {{
  switch (n) {{
{_call_cases()}
  }}
}}

/* iterations [lo, hi) of a kernel's outermost loop (total iterations): its lo/hi follow the arguments */
static void run_range(const launch_t *l, const A *args, A lo, A hi) {{
  A a[{MAX_ARGS}];
  memcpy(a, args + l->first, (size_t)l->nargs * sizeof(A));
  a[l->nargs] = lo;
  a[l->nargs + 1] = hi;
  call(l->fn, l->nargs + 2, a);
}}

/* Threads that run ranges of one split kernel's loop at a time; the launching thread runs ranges too. A job is
   published under the mutex with a new generation; ranges are taken with an atomic cursor (`take`), so any number
   of threads (even none) finishes it, and at most `parts` of them (the launching one included) join it. The record
   and arguments belong to the caller and are freed once it returns: a thread copies the record while the job is on
   (`job` is cleared when it ends, so a thread waking late reads nothing of it) and reads the arguments only for a
   range it took (the caller waits for every iteration). A new job waits until no thread is still inside the
   previous one (`active`), so a late thread never takes a range of the next job. */
typedef struct {{
  pthread_mutex_t mu;
  pthread_cond_t wake, idle;
  A generation, active, stop, nthreads, capacity;
  const launch_t *job;
  const A *args;
  A next, left, joined;
  pthread_t threads[];
}} pool_t;

/* The calling thread's next range [*lo, *hi) of the job's loop; 0 when none is left. Guided self-scheduling: each
   range is 1/(2 parts) of what is left, and at least `grain` iterations (the record's: enough work to be worth the
   shared cursor's traffic), so the first ranges are long and contiguous and the last ones short. Threads do not run
   equally fast (one woke later, or its core is shared or slower for a while: two halves of a 16M sum ended 75-320 us
   apart), and a fixed split in `parts` waits for the slowest. */
static int take(pool_t *p, const launch_t *l, A *lo, A *hi) {{
  A start = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
  for (;;) {{
    if (start >= l->total) return 0;
    A size = (l->total - start) / (2 * l->parts);
    if (size < l->grain) size = l->grain;
    if (l->total - start - size < l->grain) size = l->total - start; /* no range under the grain left behind */
    if (__atomic_compare_exchange_n(&p->next, &start, start + size, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {{
      *lo = start;
      *hi = start + size;
      return 1;
    }}
  }}
}}

static void run_ranges(pool_t *p, const launch_t *l, const A *args) {{
  A lo, hi;
  while (take(p, l, &lo, &hi)) {{
    run_range(l, args, lo, hi);
    __atomic_fetch_sub(&p->left, hi - lo, __ATOMIC_ACQ_REL);
  }}
}}

static void *pool_worker(void *arg) {{
  pool_t *p = arg;
  A seen = 0;
  pthread_mutex_lock(&p->mu);
  seen = p->generation;
  for (;;) {{
    pthread_mutex_unlock(&p->mu);
    spin_while(&p->generation, seen, POOL_SPIN_NS);
    pthread_mutex_lock(&p->mu);
    while (p->generation == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    if (!p->job) continue; /* it ended before this thread woke */
    const launch_t job = *p->job;
    const A *args = p->args;
    p->active++;
    pthread_mutex_unlock(&p->mu);
    if (__atomic_fetch_add(&p->joined, 1, __ATOMIC_ACQ_REL) < job.parts) run_ranges(p, &job, args);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_broadcast(&p->idle);
  }}
  pthread_mutex_unlock(&p->mu);
  return NULL;
}}

void *lazy_pool_new(A capacity) {{
  pool_t *p = calloc(1, sizeof(pool_t) + (size_t)capacity * sizeof(pthread_t));
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->idle, NULL);
  p->capacity = capacity;
  return p;
}}

/* start threads until there are n (at most the capacity); returns how many there are */
A lazy_pool_reserve(pool_t *p, A n) {{
  pthread_mutex_lock(&p->mu);
  while (p->nthreads < n && p->nthreads < p->capacity) {{
    if (pthread_create(&p->threads[p->nthreads], NULL, pool_worker, p) != 0) break;
    p->nthreads++;
  }}
  A have = p->nthreads;
  pthread_mutex_unlock(&p->mu);
  return have;
}}

void lazy_pool_free(pool_t *p) {{
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  A n = p->nthreads;
  pthread_mutex_unlock(&p->mu);
  for (A i = 0; i < n; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->mu);
  free(p);
}}

static void run_split(pool_t *p, const launch_t *l, const A *args) {{
  pthread_mutex_lock(&p->mu);
  while (p->active) pthread_cond_wait(&p->idle, &p->mu);
  p->job = l;
  p->args = args;
  __atomic_store_n(&p->next, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&p->left, l->total, __ATOMIC_RELEASE);
  __atomic_store_n(&p->joined, 1, __ATOMIC_RELEASE); /* this thread */
  __atomic_store_n(&p->generation, p->generation + 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  A start = now_ns();
  run_ranges(p, l, args);
  A left, ran = now_ns() - start;
  while ((left = __atomic_load_n(&p->left, __ATOMIC_ACQUIRE)) > 0 && now_ns() - start < 2 * ran + 50000)
    spin_while(&p->left, left, ran + 50000);
  pthread_mutex_lock(&p->mu);
  while (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&p->idle, &p->mu);
  p->job = NULL;
  p->args = NULL;
  pthread_mutex_unlock(&p->mu);
}}

/* run n launches in order; `args` holds every launch's arguments, launch i's from args[first] */
void lazy_graph_run(const launch_t *launches, A n, const A *args, pool_t *pool) {{
  for (A i = 0; i < n; i++) {{
    const launch_t *l = &launches[i];
    if (l->total == 0) call(l->fn, l->nargs, args + l->first);
    else if (l->parts > 1 && pool) run_split(pool, l, args);
    else run_range(l, args, 0, l->total);
  }}
}}
"""


class NativeKernel:
    """What the launcher needs of a loaded host kernel (`lazy_cpu.device.HostProgram` derives from it): its entry
    point's address, its core split (0: none, else the outermost loop's size, passed as lo/hi after the arguments) and
    its estimated work (whether splitting it pays)."""

    address: int
    core_split: int
    work: float


class NativeLibrary:
    """The compiled launcher: `lazy_graph_run` and the pool functions, with their C signatures."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.graph_run = lib.lazy_graph_run
        self.graph_run.argtypes, self.graph_run.restype = [ptr, i64, ptr, ptr], None
        self.pool_new = lib.lazy_pool_new
        self.pool_new.argtypes, self.pool_new.restype = [i64], ptr
        self.pool_reserve = lib.lazy_pool_reserve
        self.pool_reserve.argtypes, self.pool_reserve.restype = [ptr, i64], i64
        self.pool_free = lib.lazy_pool_free
        self.pool_free.argtypes, self.pool_free.restype = [ptr], None


class NativePool:
    """One device's pthread pool for split kernels in native graphs, made on first use. A forked child gets a pool of
    its own (the parent's threads did not come along, and its mutex may have been held at the fork)."""

    def __init__(self, native: NativeLibrary, capacity: int):
        self.native, self.capacity, self.threads = native, capacity, 0
        self.pid, self.handle = os.getpid(), native.pool_new(capacity)
        if not self.handle:
            raise MemoryError("out of host memory allocating the CPU thread pool")

    def reserve(self, threads: int) -> None:
        """Have at least `threads` threads (beyond the launching one) ready, or as many as the system gives (a
        split kernel's chunks are shared by whichever threads there are, so fewer only slows it)."""
        if threads > self.threads:
            self.threads = max(self.threads, self.native.pool_reserve(self.handle, min(threads, self.capacity)))

    def close(self) -> None:
        if self.handle and self.pid == os.getpid():
            self.native.pool_free(self.handle)
        self.handle = None


class NativeLaunch:
    """The `Exec` program of a native graph: runs `count` launch records over an argument array in one C call (the
    queue worker calls it; ctypes releases the GIL for the whole graph)."""

    def __init__(self, native: NativeLibrary, kernels: list[NativeKernel]):
        self.native, self.count = native, len(kernels)
        # what the CPU queue reads to decide whether a submission may run on the submitting thread: the graph as a
        # whole, since it runs as one command, against its own bound (`INLINE_GRAPH_WORK`)
        self.work = sum(kernel.work for kernel in kernels)
        self.inline_limit = INLINE_GRAPH_WORK

    def __call__(self, *bufs: Any, global_size: tuple[int, ...] | None = None,
                 local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
                 wait: bool = False) -> float | None:  # fmt: skip
        records, args, pool = bufs
        self.native.graph_run(records, self.count, args, pool)
        return None


class HostGraph(HCQGraph):
    """A jit graph batch on a host device: one `Exec` of the native launcher (`NativeLaunch`) over all the kernels,
    then the timeline signal. The kernels' arguments live in one int64 array; a replay writes the arguments of the
    updated launches into it and submits a copy of it (the worker may still run the previous replay), so the
    submission is one command however many kernels the graph has.

    Falls back to core's `HCQGraph` (one `Exec` per kernel) when the launcher cannot be built (no C compiler), a
    program is not a plain host kernel (a wrapped or foreign one), or a kernel takes more than `MAX_ARGS` arguments."""

    def __init__(self, dev: HostDevice, launches: list[Exec]):
        self.native = native = dev.native_library() if launches else None
        reason = _unsupported(launches) if native is not None else "no native launcher"
        if native is None or reason is not None:
            if DEBUG >= 3:
                print(f"{dev.device}: graph of {len(launches)} kernels replays through HCQGraph: {reason}")
            self.native = None
            super().__init__(dev, launches)
            return
        self.host = dev
        self.kernels: list[NativeKernel] = [launch.program for launch in launches]  # type: ignore[misc]
        self.first: list[int] = []  # where each launch's arguments start in `args`
        values: list[int] = []
        for launch in launches:
            self.first.append(len(values))
            values += [_address(buf) for buf in launch.bufs] + list(launch.vals)
        self.widths = [len(launch.bufs) + len(launch.vals) for launch in launches]
        self.args: Any = (ctypes.c_int64 * max(len(values), 1))(*values)  # patched in place by replays
        # (LAZY_THREADS, split_min_work, open instances of the kind) the records were made for
        self.split_key: tuple[Any, float, int] | None = None
        self.threads = 1
        self.records: Any = None
        self.pool: NativePool | None = None
        self.launcher = NativeLaunch(native, self.kernels)
        # small enough to run on the submitting thread when the worker is idle (`INLINE_GRAPH_WORK`)
        self.inline = self.launcher.work < self.launcher.inline_limit
        super().__init__(dev, [Exec(self.launcher, (None, None, None))])

    def replay(self, updates: dict[int, Exec] | None = None, buffers: dict[tuple[int, int], Any] | None = None) -> None:
        if self.native is None:
            super().replay(updates, buffers)
            return
        with self.dev.submit_lock:  # two threads replaying one graph must not patch each other's arguments
            args, first = self.args, self.first
            for idx, launch in (updates or {}).items():
                values = [_address(buf) for buf in launch.bufs] + list(launch.vals)
                assert launch.program is self.kernels[idx] and len(values) == self.widths[idx], f"launch {idx}"
                args[first[idx] : first[idx] + len(values)] = values
            for (idx, pos), opaque in (buffers or {}).items():
                assert pos < self.widths[idx], f"launch {idx} has no argument {pos}"
                args[first[idx] + pos] = _address(opaque)
            # the split follows LAZY_THREADS, split_min_work and the open instances of the kind (which share the cores)
            # as they are now: the core count is read, and the pool looked up, when one changes (asking the OS on
            # every replay costs a syscall); the instances' generation also moves when one closes and in a forked
            # child, whose pool is its own
            host = self.host
            if (key := (THREADS.value, host.split_min_work, host.shares.generation)) != self.split_key:
                self.threads = host.threads()
                self.records, self.split_key = self._records(self.threads, host.split_min_work), key
                self.pool = host.native_pool()
                self.pool.reserve(self.threads - 1)
            pool, worker = self.pool, host.queue_worker
            assert pool is not None
            if self.inline and worker.finished == worker.submitted and not worker.closed and not self.timed and \
                    not profile.pending:  # fmt: skip
                # as the queue would run it (`CPUComputeQueue` runs a submission this small to an idle worker on the
                # submitting thread), without building one: no command, promise or signal; the launcher returns when
                # every kernel has run (an eager 16M sum: ~34 us less around its kernel on cold caches)
                self.native.graph_run(self.records, self.launcher.count, args, pool.handle)
                return
            # the worker may still be running the previous replay with the previous copy, which its Exec keeps alive
            snapshot = type(args).from_buffer_copy(args)
            super().replay({0: Exec(self.launcher, (self.records, snapshot, pool.handle))})

    def _records(self, threads: int, split_min_work: float) -> Any:
        """The launch records for this thread count: a kernel is split between min(threads, its loop's size) threads
        when its work is worth it, as `HostProgram` does for an eager launch, in ranges of at least the iterations
        that hold `split_min_work` (`_grain`)."""
        fields: list[int] = []
        for kernel, launch_first, width in zip(self.kernels, self.first, self.widths):
            total = kernel.core_split
            parts = max(min(threads, total) if total and kernel.work >= split_min_work else 1, 1)
            fields += [kernel.address, width, launch_first, total, parts, _grain(kernel, parts, split_min_work)]
        return (ctypes.c_int64 * len(fields))(*fields)


def _grain(kernel: NativeKernel, parts: int, split_min_work: float) -> int:
    """The fewest iterations of `kernel`'s loop a thread takes at once: those holding `split_min_work` (below which
    splitting does not pay), at most an equal share (fixed halves for a kernel just worth splitting: the jitted MLP
    step's two split kernels of 11 iterations each went from 2 to 9 ranges, 36 -> 44 us a step)."""
    total = kernel.core_split
    if not total or parts <= 1:
        return max(total, 1)
    share = -(-total // parts)
    if kernel.work == float("inf") or kernel.work <= 0:
        return 1
    return max(1, min(share, math.ceil(total * split_min_work / kernel.work)))


def _unsupported(launches: list[Exec]) -> str | None:
    for launch in launches:
        if not isinstance(launch.program, NativeKernel):
            return f"program {launch.program!r} is not a host kernel"
        extra = 2 if launch.program.core_split else 0
        if len(launch.bufs) + len(launch.vals) + extra > MAX_ARGS:
            return f"a kernel takes more than {MAX_ARGS} arguments"
    return None


def _address(opaque: Any) -> int:
    """A host buffer's address (a `HostMemory`, a c_void_p)."""
    return opaque.value or 0

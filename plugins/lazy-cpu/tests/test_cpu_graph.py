"""Native jit graphs (`lazy_cpu.graph.HostGraph`): a replay is one command running every kernel through the C
launcher, with the arguments a replay changes patched in, large kernels split over the pthread pool, and core's
HCQGraph as the fallback for programs the launcher cannot call."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import replace

import numpy as np
import pytest
from cpu_testing import buffers, end, from_device, load_program, loop, to_device

from lazy import Context, Tensor, TinyJit
from lazy.codegen.uops import UOpBuilder, UOps
from lazy.dtype import dtypes
from lazy.hcq import Exec, HCQGraph, SetSignal
from lazy.ops import Ops
from lazy_cpu.graph import MAX_ARGS, RECORD, HostGraph


def add_one_uops(n: int, core_split: bool = False):
    """out[i] = a[i] + 1; with `core_split`, the loop runs over [lo, hi), two int64 parameters after the buffers."""
    b, f32 = UOpBuilder(), dtypes.float32
    out, a = buffers(b, (f32, True), (f32, False))
    if core_split:
        lo = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_lo", 0, n))
        hi = b.add(UOps.DEFINE_VAR, dtypes.int32, (), ("core_hi", 0, n))
        i = loop(b, hi, lo)
    else:
        i = loop(b, n)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, f32, (a, i)), b.const(1.0, f32))))
    end(b, i)
    return b.uops


def chain(x: Tensor) -> Tensor:
    for _ in range(5):
        x = (x * 2 + 1).contiguous()
    return x.realize()


def test_a_jit_replays_as_one_native_command(dev):
    jf = TinyJit(chain)
    for seed in range(6):  # new input tensors every call: the launch reading the input is patched each replay
        a = np.random.default_rng(seed).standard_normal(100).astype(np.float32)
        out = jf(Tensor(a, device=dev.device))
        expected = a
        for _ in range(5):
            expected = expected * 2 + 1
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    graph = jf.graph_batches[0].graph
    assert isinstance(graph, HostGraph) and graph.native is not None
    launches = [cmd for cmd in graph.queue.cmds if isinstance(cmd, Exec)]
    assert len(jf.jit_cache) == 5 and len(launches) == 1  # one command for five kernels


def test_large_kernels_split_over_the_pool_and_follow_the_thread_count(dev):
    n = 1 << 12
    prg = load_program(dev, add_one_uops(n, core_split=True), core_split=n)
    src = to_device(dev, np.arange(n, dtype=np.float32))
    mid, out = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
    saved, dev.split_min_work = dev.split_min_work, 0  # split however small
    try:
        graph = HostGraph(dev, [Exec(prg, (mid, src)), Exec(prg, (out, mid))])
        for threads in (3, 1, 2):
            with Context(THREADS=threads):
                graph.replay()
                dev.synchronize()
            parts = list(graph.records)[4 :: len(RECORD)]
            assert parts == [threads, threads]
            np.testing.assert_array_equal(from_device(dev, out, np.zeros(n, np.float32)), np.arange(n) + 2.0)
            dev.allocator._copyin(out, np.zeros(n, np.float32).data.cast("B"))
    finally:
        dev.split_min_work = saved


def test_a_replayed_graph_splits_again_when_an_instance_of_its_kind_opens_or_closes(monkeypatch):
    """The cores are shared between the open instances of a kind (`CoreShares`): a graph replayed on `CPU:5` takes
    all 4 of them, half once `CPU:6` opens, all again once it closes, with no LAZY_THREADS change in between (a
    replay notices through the instances' generation, without counting them each time)."""
    from lazy_cpu import device as cpu_device
    from lazy_cpu.device import CoreShares, open_cpu

    monkeypatch.setattr(cpu_device, "cpu_count", lambda: 4)
    monkeypatch.setattr(cpu_device, "CORE_SHARES", CoreShares())  # only the instances this test opens
    first = open_cpu("CPU:5")
    try:
        n = 1 << 10
        prg = load_program(first, add_one_uops(n, core_split=True), core_split=n)
        src, out = to_device(first, np.zeros(n, np.float32)), first.allocator.alloc(4 * n)
        first.split_min_work = 0
        graph = HostGraph(first, [Exec(prg, (out, src))])

        def parts_after_replay() -> int:
            graph.replay()
            first.synchronize()
            np.testing.assert_array_equal(from_device(first, out, np.zeros(n, np.float32)), 1.0)
            return dict(zip(RECORD, list(graph.records)))["parts"]

        assert parts_after_replay() == 4
        second = open_cpu("CPU:6")
        try:
            assert parts_after_replay() == 2
        finally:
            second.close()
        assert parts_after_replay() == 4
    finally:
        first.close()


@pytest.mark.parametrize("grain", [1, 0.3])
@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("n", [2, 3, 7, 33, 1025])
def test_a_split_kernel_runs_every_iteration_of_its_loop_exactly_once(dev, n, threads, grain):
    """Threads take ranges of a split kernel's loop as they come free (guided: long ranges first, then shorter, none
    under the record's grain): in place, `a[i] += 1` shows an iteration run twice (+2) or never (+0), whatever the
    loop's length, thread count and grain (1 iteration, or 30% of the loop: the work splitting starts to pay at)."""
    prg = load_program(dev, add_one_uops(n, core_split=True), core_split=n)
    prg.work = 2.0 * n  # (a program loaded without its spec has no estimate of its own)
    buf = to_device(dev, np.arange(n, dtype=np.float32))
    saved, dev.split_min_work = dev.split_min_work, 0 if grain == 1 else prg.work * grain
    try:
        graph = HostGraph(dev, [Exec(prg, (buf, buf))])
        with Context(THREADS=threads):
            for _ in range(10):
                graph.replay()
            dev.synchronize()
        record = dict(zip(RECORD, list(graph.records)))
        assert record["parts"] == min(threads, n)
        assert record["grain"] == (1 if grain == 1 else min(math.ceil(n * grain), -(-n // record["parts"])))
        np.testing.assert_array_equal(from_device(dev, buf, np.zeros(n, np.float32)), np.arange(n) + 10.0)
    finally:
        dev.split_min_work = saved


def test_pool_threads_spin_for_the_next_job_only_briefly_then_sleep(dev):
    """The pool's threads spin a while after a split kernel (waking a sleeping one costs tens of microseconds), but
    never for long: a spin without its time bound would burn a core for as long as the process idles."""
    n = 1 << 12
    prg = load_program(dev, add_one_uops(n, core_split=True), core_split=n)
    src, out = to_device(dev, np.zeros(n, np.float32)), dev.allocator.alloc(4 * n)
    saved, dev.split_min_work = dev.split_min_work, 0
    try:
        graph = HostGraph(dev, [Exec(prg, (out, src))])
        with Context(THREADS=2):
            for _ in range(20):
                graph.replay()
                dev.synchronize()
        np.testing.assert_array_equal(from_device(dev, out, np.zeros(n, np.float32)), 1.0)
        time.sleep(0.05)  # past every spin's bound
        before, wall = _thread_cpu_times(), time.perf_counter()
        time.sleep(0.3)
        after, wall = _thread_cpu_times(), time.perf_counter() - wall
        busiest = max((after[t] - before.get(t, 0.0) for t in after), default=0.0) / wall
        assert busiest < 0.5, f"a thread used {busiest:.0%} of a core while idle: a pool thread is still spinning"
    finally:
        dev.split_min_work = saved


def _thread_cpu_times() -> dict[str, float]:
    """CPU seconds of each thread of this process (Linux: /proc), or of the whole process elsewhere (no other
    thread of the test process is meant to be busy then either)."""
    tasks = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(tasks):
        return {"process": time.process_time()}
    times = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # the thread ended meanwhile
            continue
        times[tid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
    return times


def test_each_replay_keeps_its_own_arguments_while_an_earlier_one_waits(dev):
    prg = load_program(dev, add_one_uops(64))
    srcs = [to_device(dev, np.full(64, float(v), np.float32)) for v in range(3)]
    outs = [dev.allocator.alloc(256) for _ in range(3)]
    first = Exec(prg, (outs[0], srcs[0]))
    graph = HostGraph(dev, [first, replace(first, bufs=(outs[0], outs[0]))])
    gate = dev.signal_t(0)
    dev.compute_queue_t().wait(gate, 1).submit(dev)  # hold the worker back: every replay below is still queued
    for k in range(3):
        graph.replay(buffers={(0, 0): outs[k], (0, 1): srcs[k], (1, 0): outs[k], (1, 1): outs[k]})
    gate.value = 1
    dev.synchronize()
    for k in range(3):
        np.testing.assert_array_equal(from_device(dev, outs[k], np.zeros(64, np.float32)), k + 2.0)


def test_a_program_the_launcher_cannot_call_replays_through_hcq_graph(dev):
    prg = load_program(dev, add_one_uops(16))
    calls = []

    def wrapped(*bufs, **launch):  # e.g. a tracing wrapper: not a host kernel with an address
        calls.append(bufs)
        return prg(*bufs, **launch)

    a, out = to_device(dev, np.ones(16, np.float32)), dev.allocator.alloc(64)
    graph = HostGraph(dev, [Exec(wrapped, (out, a))])
    graph.replay()
    dev.synchronize()
    assert graph.native is None and len(calls) == 1 and isinstance(graph, HCQGraph)
    np.testing.assert_array_equal(from_device(dev, out, np.zeros(16, np.float32)), 2.0)


def test_a_kernel_with_more_arguments_than_the_launcher_takes_replays_through_hcq_graph(dev):
    prg = load_program(dev, add_one_uops(16))
    a = to_device(dev, np.ones(16, np.float32))
    graph = HostGraph(dev, [Exec(prg, (a,) * (MAX_ARGS + 1))])  # recorded only: the launcher has no case for it
    assert graph.native is None and [type(cmd) for cmd in graph.queue.cmds] == [Exec, SetSignal]


# Split launches whose record array is freed after each call, as a replaced graph's records are: a pool thread that
# wakes after the launching thread has run every chunk itself must not read the record (it used to, and crashed).
LATE_WAKER_SCRIPT = """
import sys
import numpy as np
from lazy import Context
from lazy.hcq import Exec
from lazy_cpu.device import open_cpu
from lazy_cpu.graph import HostGraph
from cpu_testing import load_program, to_device
from test_cpu_graph import add_one_uops
dev = open_cpu("CPU:5")
n = 64
prg = load_program(dev, add_one_uops(n, core_split=True), core_split=n)
out, src = dev.allocator.alloc(4 * n), to_device(dev, np.zeros(n, np.float32))
dev.split_min_work = 0
with Context(THREADS=2):
    graph = HostGraph(dev, [Exec(prg, (out, src))])
    pool = dev.native_pool()
    pool.reserve(1)
    for _ in range(3000):
        records = graph._records(2, 0)
        graph.launcher(records, graph.args, pool.handle)
        del records
        reuse = [bytearray(40) for _ in range(4)]  # hand the freed memory out again
dev.close()
print("done")
"""


def test_a_pool_thread_waking_late_reads_nothing_of_a_finished_job():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, *sys.path])}
    result = subprocess.run([sys.executable, "-c", LATE_WAKER_SCRIPT], capture_output=True, text=True, env=env,
                            timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0 and "done" in result.stdout, (result.returncode, result.stderr[-2000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_replays_with_a_pool_of_its_own(dev):
    n = 1 << 10
    prg = load_program(dev, add_one_uops(n, core_split=True), core_split=n)
    src, out = to_device(dev, np.zeros(n, np.float32)), dev.allocator.alloc(4 * n)
    saved, dev.split_min_work = dev.split_min_work, 0
    try:
        with Context(THREADS=2):
            graph = HostGraph(dev, [Exec(prg, (out, src))])
            graph.replay()  # the parent's pool has a thread now
            dev.synchronize()
            pid = os.fork()
            if pid == 0:  # the child: that thread did not come along; the replay must not wait for it
                try:
                    dev.allocator._copyin(out, np.zeros(n, np.float32).data.cast("B"))
                    graph.replay()
                    dev.synchronize()
                    if graph.pool is None or graph.pool.pid != os.getpid():  # the parent's pool, kept from before
                        os._exit(3)
                    os._exit(0 if (from_device(dev, out, np.zeros(n, np.float32)) == 1.0).all() else 1)
                except BaseException:
                    traceback.print_exc()
                    os._exit(2)
            assert os.waitpid(pid, 0)[1] == 0
    finally:
        dev.split_min_work = saved


def test_a_symbolic_jit_patches_variable_values_into_the_native_graph(dev):
    from lazy.symbolic import Variable

    jf = TinyJit(lambda a: a.softmax(1).realize())  # three kernels taking the variable
    for call, n in enumerate((2, 5, 1, 7, 3)):
        full = np.random.default_rng(call).standard_normal((3, 10)).astype(np.float32)
        out = jf(Tensor(full, device=dev.device).realize().shrink(((0, 3), (0, Variable("n", 1, 10).bind(n)))))
        want = np.exp(full[:, :n]) / np.exp(full[:, :n]).sum(1, keepdims=True)
        got = out.contiguous().realize().lazydata.base.realized.numpy()[: 3 * n].reshape(3, n)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    graph = jf.graph_batches[0].graph
    assert isinstance(graph, HostGraph) and graph.native is not None


def test_a_small_graph_replays_on_the_calling_thread_and_a_large_one_on_the_worker(dev):
    """Handing a replay to the queue worker and waiting for it costs more than a small graph's kernels: with the
    worker idle, one under `INLINE_GRAPH_WORK` runs on the caller's thread; a larger one goes to the worker."""
    from lazy import Device
    from lazy_cpu.graph import INLINE_GRAPH_WORK, NativeLaunch

    worker = Device[dev.device].queue_worker  # the device tensors run on (the fixture's may be another instance)
    for size, inline in ((100, True), (1 << 24, False)):
        jf = TinyJit(chain)
        x = Tensor(np.ones(size, np.float32), device=dev.device).realize()
        for _ in range(3):  # eager, capture, then a replay
            jf(x)
        Device[dev.device].synchronize()
        launcher = jf.graph_batches[0].graph.launcher
        assert isinstance(launcher, NativeLaunch) and (launcher.work < INLINE_GRAPH_WORK) == inline
        before = worker.submitted
        out = jf(x)
        assert (worker.submitted == before) == inline, f"{size} elements"
        assert out.numpy()[0] == 63.0  # ((1 * 2 + 1) ... five times


def _cached_plan(dev, out: Tensor):
    """The plan of the cached schedule that realizing `out`'s structure runs (`lazy.engine.realize.CachedSchedule`)."""
    from lazy.engine import realize as engine
    from lazy.engine.schedule import graph_structure

    key = (graph_structure([out.lazydata]).key, engine.BEAM.value, engine.NOOPT.value)
    return engine.schedule_cache[hash(key)].plan


def test_an_eager_schedule_of_several_kernels_replays_as_one_native_graph_from_its_second_run(dev):
    """A cached schedule's consecutive kernels on a host device run as one native graph from the second run on
    (`lazy.engine.realize.StepGraph`): recorded once, its buffer arguments patched each run (new inputs, new outputs),
    and the kernels still counted one by one."""
    from lazy import Device, GlobalCounters
    from lazy.engine.realize import StepGraph

    worker, graphs = Device[dev.device].queue_worker, []
    for run in range(5):
        a = np.random.default_rng(run).standard_normal((64, 300)).astype(np.float32)
        x = Tensor(a, device=dev.device).realize()
        out = x.softmax(1)
        plan, kernels, submitted = None, GlobalCounters.kernel_count, worker.submitted
        if run:
            plan = _cached_plan(dev, out)
        out.realize()
        want = np.exp(a - a.max(1, keepdims=True))
        np.testing.assert_allclose(out.numpy(), want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        ran = GlobalCounters.kernel_count - kernels
        assert ran >= 2, "softmax is several kernels"
        if run >= 2:  # the plan is made on the second run
            plan = _cached_plan(dev, out) if plan is None else plan
            (graph_part,) = [part for part in plan if isinstance(part, StepGraph)]
            assert len(graph_part.steps) == ran
            assert isinstance(graph_part.graph, HostGraph) and graph_part.graph.native is not None
            graphs.append(graph_part.graph)
            assert worker.submitted - submitted <= 1, "one submission at most (a small graph runs on this thread)"
    assert all(g is graphs[0] for g in graphs), "recorded once, then patched"


def test_an_eager_graph_is_recorded_again_when_a_kernel_gets_a_new_program(dev):
    """A quick build replaced by its full one changes a kernel's program: the next run records the graph anew, so it
    never calls the old binary's address."""
    from lazy.engine.realize import StepGraph, get_runner

    a = np.random.default_rng(0).standard_normal((32, 100)).astype(np.float32)
    for _ in range(3):
        out = Tensor(a, device=dev.device).realize().softmax(1)
        plan = _cached_plan(dev, out) if _ else None  # (looked up before realizing: a realized node is a buffer)
        out.realize()
    (part,) = [p for p in plan if isinstance(p, StepGraph)]
    old_graph = part.graph
    runner = get_runner(*part.steps[0].kernel)
    runner.program = runner.dev.runtime(runner.spec.name, runner.lib, runner.spec)  # as `CompiledRunner.rebuild` does
    out = Tensor(a + 1, device=dev.device).realize().softmax(1).realize()
    want = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert part.graph is not old_graph and part.programs[0] is runner.program

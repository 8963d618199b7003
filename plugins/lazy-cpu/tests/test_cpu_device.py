"""Allocator, compilers, programs, HCQ queues and plugin registration of the CPU and LLVM devices."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
from dataclasses import replace

import numpy as np
import pytest
from cpu_testing import buffers, end, from_device, load_program, loop, to_device

import lazy_cpu
from lazy.codegen.uops import UOpBuilder, UOps
from lazy.device import CompileError, DeviceError
from lazy.dtype import dtypes
from lazy.hcq import Exec, HCQGraph
from lazy.helpers import Context
from lazy.ops import Ops
from lazy_cpu import device as cpu_device
from lazy_cpu import find_c_compiler
from lazy_cpu.device import ClangCompiler, HostAllocator

f32 = dtypes.float32


def add_one_uops(n: int):
    """out[i] = a[i] + 1"""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    i = loop(b, n)
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, b.add(UOps.LOAD, f32, (a, i)), b.const(1.0, f32))))
    end(b, i)
    return b.uops


# --- allocator ---------------------------------------------------------------------------------------------------


def test_allocator_alignment_views_and_transfer():
    alloc = HostAllocator()
    bufs = [alloc.alloc(size) for size in (0, 1, 3, 1000, 1 << 20)]
    assert all(b.value % 64 == 0 for b in bufs)
    big = bufs[-1]
    data = np.arange(1 << 18, dtype=np.float32)
    alloc._copyin(big, memoryview(data).cast("B"))
    view = np.frombuffer(alloc._as_buffer(big), np.float32)  # zero copy: writes show through
    view[5] = -1.0
    sub = alloc._offset(big, 16, 4 * 4)  # elements 4..7
    out = np.empty(4, np.float32)
    alloc._copyout(memoryview(out).cast("B"), sub)
    np.testing.assert_array_equal(out, [4, -1, 6, 7])
    alloc._transfer(bufs[3], sub, 16, None, None)
    np.testing.assert_array_equal(np.frombuffer(alloc._as_buffer(bufs[3]), np.float32)[:4], [4, -1, 6, 7])
    for b, size in zip(bufs, (0, 1, 3, 1000, 1 << 20)):
        alloc.free(b, size)
    assert alloc.alloc(1000).value == bufs[3].value  # handed back by the LRU cache
    alloc.free_cache()


GATED_READ_SCRIPT = """
import ctypes, mmap, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from test_kernels import gated_copy_uops
from cpu_testing import load_program
from lazy_cpu import device as cpu_device
from lazy_cpu.device import open_cpu, open_llvm

slack, page = cpu_device.READ_SLACK, mmap.PAGESIZE
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
area = mmap.mmap(-1, 3 * page)  # page | page | page: the outer two fault on any access
base = ctypes.addressof(ctypes.c_char.from_buffer(area))
assert libc.mprotect(base, page, 0) == 0 and libc.mprotect(base + 2 * page, page, 0) == 0
src = np.arange(5, dtype=np.float32)
for dev in (open_cpu("CPU"), open_llvm("LLVM")):
    prg = load_program(dev, gated_copy_uops(8, 5))  # 8: gcc 12 read the 8 floats as one 256-bit vector here
    # the 5 floats with only the allocator's slack between them and a faulting page: after them, then before them
    for at in (base + 2 * page - slack - src.nbytes, base + page + slack):
        ctypes.memmove(at, src.ctypes.data, src.nbytes)
        out = dev.allocator.alloc(8 * 4)
        prg(out, dev.allocator._wrap(at, src.nbytes), vals=())
        got = np.empty(8, np.float32)
        dev.allocator._copyout(memoryview(got).cast("B"), out)
        assert got.tolist() == [0, 1, 2, 3, 4, -1, -1, -1], got
        dev.allocator.free(out, 8 * 4)
print("ok")
"""


def test_gated_loads_stay_within_the_read_slack(tmp_path):
    """A gated load the compiler turns into a whole-vector read (gcc 12 on AVX-512, see `READ_SLACK`) reads at most
    the slack every buffer has on either side: run on 5 floats placed between faulting pages with exactly that slack
    around them. In a fresh process, so a fault fails this test rather than the test run."""
    here = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run([sys.executable, "-c", GATED_READ_SCRIPT, here], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), (
        f"exit {res.returncode} (negative: killed by that signal)\n{res.stdout}\n{res.stderr[-3000:]}"
    )


def test_large_buffers_start_on_a_huge_page_and_ask_for_huge_pages():
    """From 4 MiB a buffer is 2 MiB aligned and advised MADV_HUGEPAGE (Linux): a long stream then walks few page
    table entries. Where transparent huge pages are on ("always" or "madvise"), the kernel backs it with them."""
    import sys

    alloc = HostAllocator()
    size = 16 << 20
    big = alloc.alloc(size)
    try:
        if not sys.platform.startswith("linux"):
            pytest.skip(f"huge page advice is Linux's; this is {sys.platform}")
        assert (big.value - cpu_device.READ_SLACK) % (2 << 20) == 0
        np.frombuffer(alloc._as_buffer(big), np.uint8)[:] = 1  # touch every page
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                mode = f.read()
        except OSError:
            mode = ""
        if "[never]" in mode or not mode:
            print(f"transparent huge pages are off here ({mode.strip() or 'no sysfs entry'}): alignment checked only")
            return
        with open("/proc/self/smaps") as f:
            lines = f.read().split("\n")
        # the mapping that holds the buffer: the kernel marks it eligible for huge pages once advised (THPeligible,
        # Linux 5.0 on); whether it got them depends on free memory, so that is printed, not asserted
        for i, line in enumerate(lines):
            span = line.split(" ", 1)[0]
            if "-" not in span or not all(c in "0123456789abcdef-" for c in span):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= big.value < hi:
                fields = {}
                for row in lines[i + 1 :]:
                    if not row or row.split(" ", 1)[0].count("-") == 1 and ":" not in row.split(" ", 1)[0]:
                        break
                    key, _, value = row.partition(":")
                    fields[key] = value.split()
                if "THPeligible" not in fields:
                    print("this kernel's smaps has no THPeligible field: alignment checked only")
                    return
                assert fields["THPeligible"][0] == "1", f"the buffer's mapping is not eligible for huge pages ({mode})"
                print(f"huge pages behind the buffer: {fields.get('AnonHugePages', ['?'])[0]} kB")
                return
        raise AssertionError("the buffer's mapping is not in /proc/self/smaps")
    finally:
        alloc.free(big, size)
        alloc.free_cache()


def test_cpu_and_llvm_share_host_memory(dev):
    other = cpu_device.open_cpu("CPU:1") if dev.device == "LLVM" else cpu_device.open_llvm("LLVM:1")
    try:
        a = to_device(dev, np.arange(8, dtype=np.float32))
        out = other.allocator.alloc(32)
        load_program(other, add_one_uops(8))(out, a)
        np.testing.assert_array_equal(from_device(other, out, np.zeros(8, np.float32)), np.arange(8) + 1)
    finally:
        other.close()


# --- compilers -----------------------------------------------------------------------------------------------------


def test_compile_error_shows_source_and_message(dev):
    bad = "void broken(float* x) { x[0] = undefined_name; }\n" if dev.device == "CPU" else "define void @broken( {\n"
    with pytest.raises(CompileError) as info:
        dev.compiler.compile(bad)
    assert info.value.src == bad and info.value.device == dev.device
    text = str(info.value)
    assert "generated source" in text and bad.splitlines()[0] in text
    assert ("undefined_name" in info.value.message) if dev.device == "CPU" else ("error" in info.value.message)


def test_compiler_prefers_gcc_then_clang(monkeypatch):
    """Unset, `LAZY_CC` leaves the first of gcc, clang, cc on PATH: gcc compiles lazy's kernels faster than clang
    (docs/benchmarks.md, sixteenth session), so a machine with both uses gcc."""
    monkeypatch.setattr(shutil, "which", lambda cc: f"/usr/bin/{cc}" if cc in ("clang", "gcc", "cc") else None)
    with Context(CC=""):
        assert find_c_compiler()[0] == "/usr/bin/gcc"
        monkeypatch.setattr(shutil, "which", lambda cc: f"/usr/bin/{cc}" if cc in ("clang", "cc") else None)
        assert find_c_compiler()[0] == "/usr/bin/clang"
        monkeypatch.setattr(shutil, "which", lambda cc: "/usr/bin/cc" if cc == "cc" else None)
        assert find_c_compiler()[0] == "/usr/bin/cc"


def test_no_compiler_error_names_both(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda cc: None)
    with Context(CC=""):
        with pytest.raises(DeviceError, match="clang.*gcc"):
            ClangCompiler("CPU")
        ok, reason = lazy_cpu.probe_cpu()
        assert not ok and "clang" in reason and "gcc" in reason


def test_lazy_cc_chooses_the_compiler():
    """`LAZY_CC` names the C compiler (on PATH, or a path), whichever is preferred otherwise; each compiler there
    builds and runs a kernel, under a compile cache key of its own."""
    found = [cc for cc in ("clang", "gcc") if shutil.which(cc) is not None]
    assert found, "the CPU device's tests need clang or gcc"
    keys = set()
    for cc in [*found, shutil.which(found[0])]:
        with Context(CC=cc):
            path, _ = find_c_compiler()
            assert path == shutil.which(cc)
            assert lazy_cpu.probe_cpu() == (True, f"C compiler {path}")
            compiler = ClangCompiler("CPU")
            assert compiler.cc == path and (cc in compiler.version or "/" in cc), compiler.version
            keys.add(compiler.cachekey)
            so = compiler.compile("int lazy_twice(int x) { return 2 * x; }")
            assert cpu_device.load_shared_object(f"cc_{len(keys)}", so).lazy_twice(21) == 42
    assert len(keys) == len(found)  # the same compiler by name or by path: one key; clang and gcc: two


def test_lazy_cc_that_is_not_there_says_how_to_fix_it():
    with Context(CC="no-such-cc-lazy"):
        ok, why = lazy_cpu.probe_cpu()
        assert not ok and "LAZY_CC='no-such-cc-lazy'" in why and "unset it" in why
        with pytest.raises(DeviceError, match="LAZY_CC='no-such-cc-lazy' is not an executable"):
            ClangCompiler("CPU")


def test_compile_cache_key_and_reuse(dev, tmp_path):
    assert dev.compiler.cachekey and (dev.device != "CPU" or "-O2" in dev.compiler.cachekey)
    src = dev.renderer.render("cached_kernel", add_one_uops(4))
    with Context(CACHE_DIR=str(tmp_path)):
        first = dev.compiler.compile_cached(src)
        assert any(tmp_path.rglob("*")) and dev.compiler.compile_cached(src) == first


def test_llvm_same_name_different_code():
    dev = cpu_device.open_llvm("LLVM:2")
    try:
        progs = []
        for n in (4, 6):  # same kernel name, different bodies: each must run its own code
            progs.append(load_program(dev, add_one_uops(n), name="same_name"))
        outs = [dev.allocator.alloc(32) for _ in progs]
        a = to_device(dev, np.full(8, 2.0, np.float32))
        for prg, out in zip(progs, outs):
            dev.allocator._copyin(out, memoryview(np.zeros(8, np.float32)).cast("B"))
            prg(out, a)
        got = [from_device(dev, out, np.zeros(8, np.float32)) for out in outs]
        np.testing.assert_array_equal(got[0], [3, 3, 3, 3, 0, 0, 0, 0])
        np.testing.assert_array_equal(got[1], [3, 3, 3, 3, 3, 3, 0, 0])
    finally:
        dev.close()


def test_llvm_compile_pool_kernels_build_in_worker_processes_as_they_would_here():
    dev = cpu_device.open_llvm("LLVM:3")
    try:
        srcs = [dev.renderer.render(f"pooled_{n}", add_one_uops(n)) for n in (3, 5)]
        here = [dev.compiler.compile(src) for src in srcs]
        assert dev.jit.workers == 0  # single kernels compile in this process
        assert dev.compiler.compile_batch(srcs) == here  # the same objects: the compile cache holds either
        assert dev.jit.workers == 1 and dev.jit.idle_workers[0].alive
        worker = dev.jit.idle_workers[0]
        with pytest.raises(CompileError, match="error") as info:  # LLVM's message; the worker carries on
            dev.compiler.compile_batch(["define void @broken( {\n"])
        assert info.value.device == "LLVM:3" and worker.alive and dev.jit.idle_workers == [worker]
        worker.proc.kill()  # a worker that died (LLVM aborting on some IR): that compile fails, the next starts anew
        worker.proc.wait()
        with pytest.raises(CompileError, match="worker exited"):
            dev.compiler.compile_batch(srcs[:1])
        assert dev.jit.workers == 0 and dev.compiler.compile_batch(srcs[1:]) == here[1:]
        prg = dev.load_program("pooled_3", dev.compiler.compile_batch(srcs[:1])[0])
        out, a = dev.allocator.alloc(12), to_device(dev, np.array([1.0, 2.0, 3.0], np.float32))
        prg(out, a)
        np.testing.assert_array_equal(from_device(dev, out, np.zeros(3, np.float32)), [2, 3, 4])
        workers = [w.proc for w in dev.jit.idle_workers]
    finally:
        dev.close()
    assert workers and all(proc.poll() == 0 for proc in workers)  # closing the device stopped them


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"), reason="x86-64 ELF only")
def test_llvm_kernels_address_constants_and_calls_absolutely(tmp_path):
    """MCJIT puts a kernel's code, its constants and the C library's memcpy wherever memory is free: a 32-bit
    PC-relative reference between them aborted the process once buffers lay gigabytes apart."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf on PATH (binutils) to list the object's relocations")
    dev = cpu_device.open_llvm("LLVM:5")
    try:
        copy = "  %d = getelementptr float, ptr %out, i64 %i\n  %s = getelementptr float, ptr %a, i64 %i\n"
        srcs = [dev.renderer.render("consts", add_one_uops(64)),  # a float constant from the constant pool
                "define void @copies(ptr noalias %out, ptr noalias %a) {\nentry:\n  br label %loop\nloop:\n"
                "  %i = phi i64 [ 0, %entry ], [ %n, %loop ]\n" + copy + "  %v = load float, ptr %s\n"
                "  store float %v, ptr %d\n  %n = add nuw nsw i64 %i, 1\n  %c = icmp ult i64 %n, 4096\n"
                "  br i1 %c, label %loop, label %done\ndone:\n  ret void\n}\n"]  # fmt: skip
        kinds = set()
        for src in srcs:
            obj = tmp_path / "kernel.o"
            obj.write_bytes(dev.compiler.for_work(float("inf")).compile(src))
            listing = subprocess.run([readelf, "-rs", str(obj)], capture_output=True, text=True, check=True).stdout
            kinds |= set(re.findall(r"R_X86_64_\w+", listing))
            assert "memcpy" in listing or "copies" not in src  # the copy loop became a call
        assert kinds == {"R_X86_64_64"}
    finally:
        dev.close()


FORKED_WORKERS_SCRIPT = """
import os
from lazy_cpu.device import open_llvm
dev = open_llvm("LLVM")
def ir(name):
    return f"define void @{name}(ptr %out) {{\\nentry:\\n  store float 2.5, ptr %out\\n  ret void\\n}}\\n"
def pooled_as_here(name):
    return dev.compiler.compile_batch([ir(name)]) == [dev.compiler.compile(ir(name))]
assert pooled_as_here("in_parent")
parents = [w.proc.pid for w in dev.jit.idle_workers]
pid = os.fork()
if pid == 0:  # the child's requests must not go down the parent's pipes, nor its exit wait on the parent's workers
    ok = pooled_as_here("in_child")
    mine = [w.proc.pid for w in dev.jit.idle_workers]
    ok = ok and len(mine) == 1 and mine[0] not in parents
    dev.close()
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert pooled_as_here("after_fork") and [w.proc.pid for w in dev.jit.idle_workers] == parents
dev.close()
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_llvm_workers_serve_only_the_process_that_started_them():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", FORKED_WORKERS_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "ok", (
        f"exit {res.returncode}\n{res.stdout}\n{res.stderr[-3000:]}"
    )


def test_llvm_compiles_in_process_when_no_worker_can_start(monkeypatch, capsys):
    dev = cpu_device.open_llvm("LLVM:4")
    try:
        monkeypatch.setattr(sys, "executable", "/nonexistent/python")
        src = dev.renderer.render("unpooled", add_one_uops(2))
        with Context(DEBUG=1):
            assert dev.compiler.compile_batch([src]) == [dev.compiler.compile(src)]
        assert dev.jit.workers == 0 and dev.jit.workers_failed
        assert "compiling in this process" in capsys.readouterr().out
    finally:
        dev.close()


def test_program_wait_returns_seconds(dev):
    prg = load_program(dev, add_one_uops(16))
    out, a = dev.allocator.alloc(64), to_device(dev, np.zeros(16, np.float32))
    assert prg(out, a) is None
    assert 0 <= prg(out, a, wait=True) < 10


# --- queues ----------------------------------------------------------------------------------------------------------


def test_queue_exec_signal_wait_order(dev):
    prg = load_program(dev, add_one_uops(1024))
    a, mid, out = (to_device(dev, np.full(1024, v, np.float32)) for v in (1.0, 0.0, 0.0))
    gate, done = dev.signal_t(0), dev.signal_t(0)
    q = dev.compute_queue_t()
    q.wait(gate, 1).exec(prg, (mid, a)).exec(prg, (out, mid)).signal(done, 7).submit(dev)
    assert done.value == 0  # held back by the wait
    gate.value = 1
    done.wait(7)
    np.testing.assert_array_equal(from_device(dev, out, np.zeros(1024, np.float32)), 3.0)


def test_queue_timestamps_and_copy(dev):
    prg = load_program(dev, add_one_uops(4096))
    a, out, copy = (to_device(dev, np.full(4096, 1.0, np.float32)) for _ in range(3))
    t0, t1, done = dev.signal_t(0), dev.signal_t(0), dev.signal_t(0)
    q = dev.compute_queue_t().timestamp(t0).exec(prg, (out, a)).memory_barrier().copy(copy, out, 4096 * 4)
    q.timestamp(t1).signal(done, 1).submit(dev)
    done.wait(1)
    assert t0.timestamp <= t1.timestamp <= done.timestamp
    np.testing.assert_array_equal(from_device(dev, copy, np.zeros(4096, np.float32)), 2.0)


def test_resubmitted_queue_keeps_each_submission(dev):
    """A queue updated and submitted again while the worker may still run the first submission."""
    prg = load_program(dev, add_one_uops(256))
    srcs = [to_device(dev, np.full(256, float(v), np.float32)) for v in range(5)]
    outs = [dev.allocator.alloc(1024) for _ in range(5)]
    q = dev.compute_queue_t().exec(prg, (outs[0], srcs[0]))
    for k in range(5):
        q.cmds[0] = replace(q.cmds[0], bufs=(outs[k], srcs[k]))
        q.submit(dev)
    q2 = dev.compute_queue_t().signal(dev.timeline_signal, dev.next_value())
    q2.submit(dev)
    dev.synchronize()
    for k in range(5):
        np.testing.assert_array_equal(from_device(dev, outs[k], np.zeros(256, np.float32)), k + 1.0)


def test_hcq_graph_replay_with_new_buffers(dev):
    prg = load_program(dev, add_one_uops(64))
    a1, a2 = to_device(dev, np.full(64, 1.0, np.float32)), to_device(dev, np.full(64, 10.0, np.float32))
    mid, out1, out2 = (dev.allocator.alloc(256) for _ in range(3))
    first, second = Exec(prg, (mid, a1)), Exec(prg, (out1, mid))
    graph = HCQGraph(dev, [first, second])
    graph.replay({})
    graph.replay({0: replace(first, bufs=(mid, a2)), 1: replace(second, bufs=(out2, mid))})
    dev.synchronize()
    np.testing.assert_array_equal(from_device(dev, out1, np.zeros(64, np.float32)), 3.0)
    np.testing.assert_array_equal(from_device(dev, out2, np.zeros(64, np.float32)), 12.0)


def test_failed_command_raises_on_synchronize(dev):
    def broken(*args, **kwargs):
        raise ValueError("boom")

    done = dev.signal_t(0)
    dev.compute_queue_t().exec(broken, ()).signal(done, 1).submit(dev)
    done.wait(1)  # the signal still arrives
    dev.compute_queue_t().signal(dev.timeline_signal, dev.next_value()).submit(dev)
    with pytest.raises(DeviceError, match="boom"):
        dev.synchronize()
    dev.synchronize()  # reported once; the device keeps working


def test_close_stops_threads():
    dev = cpu_device.open_cpu("CPU:9")
    dev.cores.run(lambda lo, hi: None, (), 10, 3)  # start two core threads
    assert len(dev.cores.workers) == 2
    dev.close()
    assert not dev.queue_worker.thread.is_alive() and not dev.cores.workers
    assert all(not t.name.startswith("lazy-CPU:9") for t in threading.enumerate())


# --- registration ----------------------------------------------------------------------------------------------------


def test_registration():
    specs = {spec.name: spec for spec in lazy_cpu.lazy_devices()}
    assert set(specs) == {"CPU", "LLVM"} and specs["CPU"].priority == 100 and specs["LLVM"].priority == 90
    assert specs["CPU"].probe() == (True, f"C compiler {find_c_compiler()[0]}")
    assert specs["LLVM"].probe()[0]
    dev = specs["CPU"].open("CPU:3")
    try:
        assert dev.device == "CPU:3" and dev.hcq and dev.renderer.caps.core_split
    finally:
        dev.close()


def test_import_is_cheap():
    code = (
        "import sys, lazy_cpu; lazy_cpu.lazy_devices(); "
        "print(sorted(m for m in sys.modules if 'llvmlite' in m or m == 'lazy_cpu.device'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_device_works_in_a_forked_child(dev):
    prg = load_program(dev, add_one_uops(8))
    a, out = to_device(dev, np.zeros(8, np.float32)), dev.allocator.alloc(32)
    dev.cores.run(lambda lo, hi: None, (), 4, 2)  # the parent has core threads
    pid = os.fork()
    if pid == 0:  # child: the worker threads did not come along; both paths must start their own
        try:
            dev.cores.run(lambda lo, hi: None, (), 4, 2)
            done = dev.signal_t(0)
            dev.compute_queue_t().exec(prg, (out, a)).signal(done, 1).submit(dev)
            done.wait(1, timeout=10)
            os._exit(0 if from_device(dev, out, np.zeros(8, np.float32))[0] == 1.0 else 1)
        except BaseException:
            traceback.print_exc()
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0


def test_programs_of_identical_binaries_each_bind_their_own_arguments():
    """Two kernels whose sources compile to the same bytes share one loaded library (and ctypes' one function object
    per symbol): binding the second kernel's arguments changed the first's, whose next call failed ("takes at least
    2 arguments (1 given)"). Each program calls through a function object of its own."""
    import ctypes

    from lazy.plugins import Device

    dev = Device["CPU"]
    so = dev.compiler.compile("void same_bytes(float *a) { a[0] += 1.0f; }")
    first, second = (cpu_device.CPUProgram(dev, "same_bytes", so) for _ in range(2))
    assert first.lib is second.lib  # loaded once
    one = first.bind([ctypes.c_void_p])
    second.bind([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    value = (ctypes.c_float * 1)(0.0)
    one(ctypes.addressof(value))
    assert value[0] == 1.0

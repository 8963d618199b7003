"""Cold start on the CPU and LLVM devices: a second process with a warm cache generates no code and runs no compiler
(the program cache gives the source, the binary cache the shared object), a kernel whose compile fails leaves no
program entry behind (the next process would load a program that does not compile), and small kernels compile with
cheaper flags, as do kernels the code generator vectorized."""

from __future__ import annotations

import copy
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lazy import Context, Device, Tensor
from lazy.codegen.program import get_program
from lazy.device import CompileError, ProgramSpec
from lazy.engine import realize, runners
from lazy_cpu.device import SMALL_KERNEL_WORK, ClangCompiler, CPUProgram, load_shared_object, unpack_batch
from lazy_cpu.hostcpu import x86_fma
from lazy_cpu.renderer import HALF_TYPE

SCRIPT = """
import numpy as np
from lazy import Tensor
a = np.arange(64, dtype=np.float32).reshape(8, 8)
got = (Tensor(a, device={device!r}).exp2() @ Tensor(a, device={device!r})).sum(axis=0).numpy()
assert np.allclose(got, (np.exp2(a) @ a).sum(axis=0), rtol=1e-5), got
print("ok")
"""


def run(device: str, cache: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env.update(LAZY_CACHE_DIR=cache, LAZY_DEBUG="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(device=device)], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
    return proc.stderr


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
def test_a_warm_process_generates_and_compiles_nothing(tmp_path, device):
    cold = run(device, str(tmp_path))
    assert "0 hits" in cold and " 0 kernels generated" not in cold, cold
    warm = run(device, str(tmp_path))
    assert "lazy: 0 kernels generated" in warm and " 0 compiled" in warm, warm
    assert "program cache: 0 hits" not in warm and "compile cache: 0 hits" not in warm, warm


def test_a_failed_compile_leaves_no_program_entry(tmp_path, monkeypatch):
    dev = Device["CPU"]

    def broken(src: str) -> bytes:
        raise CompileError("CPU", src, "the compiler broke")

    realize.method_cache.clear()
    realize.schedule_cache.clear()
    a = np.arange(6, dtype=np.float32)
    with Context(CACHE_DIR=str(tmp_path)):
        monkeypatch.setattr(type(dev.compiler), "compile", lambda self, src: broken(src))  # every flag set's
        with pytest.raises(CompileError, match="the compiler broke"):
            (Tensor(a, device="CPU") * 7.25).realize()
        assert program_entries(tmp_path) == []
        monkeypatch.undo()
        np.testing.assert_allclose((Tensor(a, device="CPU") * 7.25).numpy(), a * 7.25)
    assert len(program_entries(tmp_path)) == 1


def program_entries(cache) -> list:
    return [p for p in cache.rglob("*") if p.is_file() and "program" in p.relative_to(cache).parts]


def test_small_kernels_compile_with_cheaper_flags_under_their_own_key():
    """Kernels of little work run in microseconds at -O1 as at -O2 (measured on the CNN step's kernels), and -O1
    compiles them in about half the time; their binaries are cached apart from -O2 ones."""
    compiler = ClangCompiler("CPU")
    small, large = compiler.for_work(SMALL_KERNEL_WORK - 1), compiler.for_work(SMALL_KERNEL_WORK)
    assert large is compiler and "-O2" in compiler.flags and isinstance(small, ClangCompiler)
    assert "-O1" in small.flags and "-O2" not in small.flags and small.cachekey != compiler.cachekey
    assert small.for_work(0) is small
    src = "void twice(float* restrict out, const float* restrict a) { for (int i = 0; i < 4; i++) out[i] = 2 * a[i]; }"
    assert small.compile(src)[:4] == b"\x7fELF"
    spec = ProgramSpec("E_4", "", "CPU", op_estimate=4, mem_estimate=32)
    assert spec.estimated_work() == 8 and ProgramSpec("E_v", "", "CPU").estimated_work() == float("inf")


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
def test_kernels_written_in_vectors_compile_with_cheaper_flags(device):
    """The full configuration's extra (gcc's -O2 over -O1, LLVM's O3 pipeline) is mostly the auto-vectorizers: a
    kernel the code generator already wrote in vector types (a matmul tile) gets the cheaper one, as fast and compiled
    in about half the time; a large scalar one (an int division, which has no vector form here) keeps the full one."""
    dev = Device[device]
    compiler = dev.compiler
    a = Tensor(np.ones((256, 256), np.float32), device=device)
    n = Tensor(np.arange(1 << 18, dtype=np.int32), device=device)
    matmul = get_program((a @ a).schedule()[-1].ast, dev.renderer)
    division = get_program(((n // 7) + (n % 5)).schedule()[-1].ast, dev.renderer)
    assert matmul.vector_width > 1 and division.vector_width == 1
    assert matmul.estimated_work() >= SMALL_KERNEL_WORK and division.estimated_work() >= SMALL_KERNEL_WORK
    cheap = compiler.small if compiler.vectors_cheap else compiler  # (C without x86 FMA: -O2 vectorizes its FMAs)
    assert compiler.for_program(matmul) is cheap and compiler.for_program(division) is compiler
    assert compiler.small.cachekey != compiler.cachekey and compiler.small.for_program(division) is compiler.small
    assert device == "LLVM" or compiler.vectors_cheap == x86_fma()
    without_fma = copy.copy(compiler)
    without_fma.vectors_cheap = False
    assert without_fma.for_program(matmul) is without_fma
    np.testing.assert_allclose((a @ a).numpy(), np.full((256, 256), 256, np.float32))  # built the cheaper way


def test_kernels_of_one_batch_keep_their_own_code():
    """`compile_batch` builds several kernels in one compiler run; each binary names its kernel's symbol in the
    batch's shared object, so two kernels of one name (E_16 for different constants) stay apart, helpers their
    preludes share are defined once, and the batch is loaded once."""
    dev = Device["CPU"]
    src = "void k(float* restrict out) {{ out[0] = {value}f; }}"
    x = Tensor(np.arange(16, dtype=np.float32), device="CPU")
    vector = get_program((x * 3).schedule()[-1].ast, dev.renderer).src  # a prelude (guarded helpers) and E_16
    libs = dev.compiler.compile_batch([src.format(value=1.0), src.format(value=2.0), vector, vector])
    assert all(unpack_batch(lib) is not None for lib in libs) and len({unpack_batch(lib)[1] for lib in libs}) == 1  # type: ignore[index]
    first, second = CPUProgram(dev, "k", libs[0]), CPUProgram(dev, "k", libs[1])
    assert first.lib is second.lib  # one load of the batch
    out = np.zeros(1, np.float32)
    first(out.ctypes.data)
    assert out[0] == 1.0
    second(out.ctypes.data)
    assert out[0] == 2.0


def test_a_batch_that_fails_names_the_kernel_that_does_not_compile(tmp_path):
    compiler = ClangCompiler("CPU")
    good, bad = "void k1(float* restrict out) { out[0] = 1.0f; }", "void k2(float* restrict out) { out[0] = nothing; }"
    with Context(CACHE_DIR=str(tmp_path)):
        with pytest.raises(CompileError, match="nothing"):
            compiler.compile_cached_batch([good, bad])
        assert compiler.cached_binary(good) is not None and compiler.cached_binary(bad) is None


def test_a_schedules_small_kernels_compile_in_batches(tmp_path, monkeypatch):
    """The new small kernels of one realize build in a few compiler runs, not one each (a C compiler's start and
    link were most of a small kernel's build time), with each kernel's own result."""
    runs: list[str] = []
    compile_one = ClangCompiler.compile
    monkeypatch.setattr(ClangCompiler, "compile", lambda self, src: runs.append(src) or compile_one(self, src))
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    base = np.arange(16, dtype=np.float32)
    with Context(CACHE_DIR=str(tmp_path)):
        x = Tensor(base, device="CPU").realize()
        runs.clear()
        outs = [(x * (i + 2) + 1).contiguous() for i in range(12)]  # 12 kernels, each of its own constants
        Tensor.realize(*outs)
    assert 1 <= len(runs) <= 3, len(runs)
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out.numpy(), base * (i + 2) + 1)


def test_convolution_kernels_compile_in_batches_that_still_spread(tmp_path, monkeypatch):
    """Kernels of 8-24 KiB of source (a convolution's) batch too (each compiler run costs ~50 ms of CPU before any
    kernel), in batches of about `batch_chars`, so a schedule's batches still spread over the cores."""
    sizes: list[int] = []
    compile_one = ClangCompiler.compile
    monkeypatch.setattr(ClangCompiler, "compile", lambda self, src: sizes.append(len(src)) or compile_one(self, src))
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    rng = np.random.default_rng(0)
    a = rng.random((2, 8, 12, 12), dtype=np.float32)
    weights = [rng.random((16, 8, 3, 3), dtype=np.float32) * (i + 1) for i in range(6)]
    with Context(CACHE_DIR=str(tmp_path)):
        x = Tensor(a, device="CPU").realize()
        ws = [Tensor(w, device="CPU").realize() for w in weights]
        sizes.clear()
        outs = [(x.conv2d(w) + i).relu().contiguous() for i, w in enumerate(ws)]
        Tensor.realize(*outs)
    compiler = Device["CPU"].compiler
    assert 2 <= len(sizes) < len(outs), sizes  # batched, and in more than one batch
    assert max(sizes) <= compiler.batch_chars + compiler.batch_src_max + 4096, sizes
    ref = torch.nn.functional.conv2d(torch.tensor(a), torch.tensor(weights[2])).numpy() + 2
    np.testing.assert_allclose(outs[2].numpy(), np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernels link without libraries on Linux only")
def test_kernels_link_no_libraries_yet_call_libm_and_compiler_helpers():
    """On Linux a kernel's shared object names no library (the C library's link was a third of a small compile): what
    it calls from libm resolves in the process when it loads, the compiler's helpers come from the static libgcc."""
    # half as the kernels declare it: _Float16, or __fp16 on a compiler without it (clang before 15 on x86-64)
    src = (
        "\n".join(HALF_TYPE[:5])
        + """
float expf(float);
float lazy_test_libm(float a) { return expf(a); }
float lazy_test_half(float a) { volatile lazy_half h = (lazy_half)a; return (float)h; }
"""
    )
    so = ClangCompiler("CPU").compile(src)
    assert b"libc.so" not in so and b"libm.so" not in so  # no DT_NEEDED entry names them
    lib = load_shared_object("link_test", so)
    for name, arg, want in (
        ("lazy_test_libm", 1.0, np.float32(np.e)),  # glibc's expf is correctly rounded
        ("lazy_test_half", 1.1, np.float32(np.float16(1.1))),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
        assert np.float32(fn(arg)) == want, name


def _division(device: str) -> tuple[Tensor, np.ndarray]:
    """A large scalar kernel (an int division has no vector form here): its full build is the expensive one."""
    n = np.arange(1 << 18, dtype=np.int32)
    return (Tensor(n, device=device) // 7) + (Tensor(n, device=device) % 5), n // 7 + n % 5


def _runner(out: Tensor) -> realize.CompiledRunner:
    (si,) = out.schedule()
    return realize.get_runner(si.bufs[0].device, si.ast)


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
def test_a_kernel_builds_quickly_first_and_in_full_once_it_runs_again(tmp_path, device, monkeypatch):
    """A kernel whose full build is costly builds with the compiler's quick tier first (a weight's initialisation,
    a cold first step run once); once it has run again and done enough work to be worth it (here: any), it asks for
    the full build in the background, which then replaces it."""
    monkeypatch.setattr(runners, "UPGRADE_WORK", 0)
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    compiler = Device[device].compiler
    with Context(CACHE_DIR=str(tmp_path)):
        out, want = _division(device)
        runner = _runner(out)
        assert runner.upgrade is compiler and runner.upgrading is None
        assert runner.lib == compiler.small.cached_binary(runner.spec.src)  # the quick build, cached under its key
        assert compiler.cached_binary(runner.spec.src) is None
        np.testing.assert_array_equal(out.numpy(), want)
        assert runner.upgrading is None  # one run: it may never run again
        again, _ = _division(device)
        np.testing.assert_array_equal(again.numpy(), want)
        assert runner.upgrading is not None
        assert runner.upgrading.wait(timeout=120)
        assert runner.upgrade is None and runner.lib == compiler.cached_binary(runner.spec.src)
        third, _ = _division(device)
        np.testing.assert_array_equal(third.numpy(), want)  # the full build computes the same


def test_a_kernel_whose_full_build_is_cached_builds_in_full_at_once(tmp_path):
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    compiler = Device["CPU"].compiler
    with Context(CACHE_DIR=str(tmp_path)):
        out, want = _division("CPU")
        spec = _runner(out).spec
        compiler.compile_cached(spec.src)  # as an earlier process that ran the kernel again left it
        realize.method_cache.clear()
        runner = _runner(out)
        assert runner.upgrade is None and runner.lib == compiler.cached_binary(spec.src)
        np.testing.assert_array_equal(out.numpy(), want)
    with Context(CACHE_DIR=str(tmp_path), TIERED=0):
        realize.method_cache.clear()
        assert _runner(_division("CPU")[0]).upgrade is None  # LAZY_TIERED=0: every kernel in full at once


def test_a_jit_replays_the_full_builds_of_its_kernels(tmp_path):
    """What a jit captures runs on: it builds its kernels in full when it captures them, before its graph is made."""
    from lazy import TinyJit

    realize.method_cache.clear()
    realize.schedule_cache.clear()
    n = np.arange(1 << 18, dtype=np.int32)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x // 7) + (x % 5)).realize()

    with Context(CACHE_DIR=str(tmp_path)):
        x = Tensor(n, device="CPU").realize()
        np.testing.assert_array_equal(f(x).numpy(), n // 7 + n % 5)  # eager: the quick build
        (quick,) = [r for r in realize.method_cache.values() if r.upgrade is not None]
        np.testing.assert_array_equal(f(x).numpy(), n // 7 + n % 5)  # the capture
        assert quick.upgrade is None and quick.lib == Device["CPU"].compiler.cached_binary(quick.spec.src)
        for _ in range(2):
            np.testing.assert_array_equal(f(Tensor(n + 1, device="CPU")).numpy(), (n + 1) // 7 + (n + 1) % 5)


def _fresh_division() -> tuple[realize.CompiledRunner, Tensor, np.ndarray]:
    """`_division` on CPU built anew (empty method and schedule caches): its kernel's runner, the result, numpy's."""
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    out, want = _division("CPU")
    return _runner(out), out, want


def test_a_failed_full_build_keeps_the_quick_one(tmp_path, monkeypatch):
    dev = Device["CPU"]
    with Context(CACHE_DIR=str(tmp_path)):
        runner, out, want = _fresh_division()
        quick = runner.lib
        monkeypatch.setattr(dev.compiler, "compile", lambda src: (_ for _ in ()).throw(CompileError("CPU", src, "x")))
        realize.upgrade_kernels([runner])
        assert runner.upgrade is None and runner.lib == quick
        np.testing.assert_array_equal(out.numpy(), want)


def test_a_kernel_that_did_little_work_keeps_its_quick_build(tmp_path):
    """A kernel run a few times (a script, a test) does too little for its full build to pay: it is not built twice."""
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    with Context(CACHE_DIR=str(tmp_path)):
        out, want = _division("CPU")
        runner = _runner(out)
        for _ in range(3):
            np.testing.assert_array_equal(_division("CPU")[0].numpy(), want)
        assert runner.runs == 3 and runner.work_done < runners.UPGRADE_WORK
        assert runner.upgrading is None and runner.upgrade is not None


def test_profiled_runs_count_toward_the_full_build(tmp_path, monkeypatch):
    """While profiling (LAZY_DEBUG=2 times every kernel), runs count as they do otherwise."""
    monkeypatch.setattr(runners, "UPGRADE_WORK", 0)
    realize.method_cache.clear()
    realize.schedule_cache.clear()
    with Context(CACHE_DIR=str(tmp_path), DEBUG=2):
        out, want = _division("CPU")
        runner = _runner(out)
        for _ in range(2):
            np.testing.assert_array_equal(_division("CPU")[0].numpy(), want)
        assert runner.upgrading is not None and runner.upgrading.wait(timeout=120)
        assert runner.upgrade is None


def test_of_two_full_builds_at_once_the_first_to_finish_stays(tmp_path, monkeypatch):
    """The background thread and a jit's capture may build one kernel in full at the same time: the first build to
    finish is kept and the later one dropped, so the program a captured graph was made with never changes."""
    import threading

    dev = Device["CPU"]
    with Context(CACHE_DIR=str(tmp_path)):
        runner, out, want = _fresh_division()
        real, gate, started = dev.compiler.compile_cached, threading.Event(), threading.Event()

        def held_back(src: str) -> bytes:  # the first build (the background one) waits until the second is done
            if not started.is_set():
                started.set()
                assert gate.wait(timeout=60)
            return real(src)

        monkeypatch.setattr(dev.compiler, "compile_cached", held_back)
        slow = threading.Thread(target=runner.rebuild)
        slow.start()
        assert started.wait(timeout=60)
        runner.rebuild()  # the second build finishes first: its program is the one kept
        kept = runner.program
        assert runner.upgrade is None and runner.lib == real(runner.spec.src)
        gate.set()
        slow.join(timeout=60)
        assert runner.program is kept
        np.testing.assert_array_equal(out.numpy(), want)

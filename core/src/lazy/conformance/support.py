"""Helpers the suite's layers share: buffers from numpy arrays, running the suite's kernels (`lazy.conformance.kernels`)
and `KernelBuilder`'s on a device through its own renderer, compiler and runtime, and `run_interrupted`, which sends
Ctrl-C to a script running in a subprocess (also for plugins' own tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from lazy.conformance import kernels
from lazy.device import Buffer, Compiled, ProgramSpec
from lazy.dtype import DType, dtypes, float_to_fp8, fp8_to_float, to_np_dtype, values_to_storage
from lazy.helpers import Context
from lazy.tensor import Tensor

INDEX = kernels.INDEX


def reference_device(device_name: str) -> str:
    """The device the suite compares results with: PYTHON, emulating nothing (run it inside `on_reference()`). When
    the device under test is PYTHON itself emulating a GPU target (`LAZY_EMULATE`), another PYTHON instance, so the
    emulation is compared with the plain interpreter rather than with itself."""
    from lazy.helpers import EMULATE
    from lazy.plugins import Device

    return "PYTHON:1" if EMULATE.value and Device.canonicalize(device_name) == "PYTHON" else "PYTHON"


def on_reference() -> Context:
    """The settings the reference device runs under: no emulation (the device is opened, and runs kernels, so)."""
    return Context(EMULATE="")


def np_values(values: list[Any], dtype: DType) -> np.ndarray:
    """Python values (already truncated to `dtype`) as the numpy array holding their bytes (bfloat16: uint16 bits,
    fp8: uint8 bits)."""
    return values_to_storage(values, dtype)


def buffer_from(device: str, array: np.ndarray, dtype: DType) -> Buffer:
    buf = Buffer(device, array.size, dtype).allocate()
    return buf.copyin(memoryview(np.ascontiguousarray(array)).cast("B"))  # type: ignore[arg-type]


def empty_buffer(device: str, size: int, dtype: DType, fill: Any = 0) -> Buffer:
    return buffer_from(device, np.full(size, fill, to_np_dtype(dtype)), dtype)


def values_of(buf: Buffer) -> list[Any]:
    """A buffer's elements as Python values (bfloat16 as floats)."""
    return buf.numpy().tolist()


def raw_bytes(buf: Buffer) -> bytes:
    return bytes(buf.as_buffer(allow_zero_copy=False))


class KernelBuilder(kernels.KernelBuilder):
    """A kernel written with `UOpBuilder` for `device` (see `lazy.conformance.kernels.KernelBuilder`), then rendered,
    compiled and run through the device's own parts."""

    def __init__(self, device: Compiled, name: str):
        super().__init__(device.renderer.caps, name)
        self.device = device

    def program(self) -> tuple[Any, ProgramSpec]:
        return compile_kernel(self.device, self.kernel())

    def run(self, *bufs: Buffer, vals: tuple[int, ...] = (), launch: tuple[list[int], list[int]] | None = None) -> None:
        run_kernel(self.device, self.kernel(), *bufs, vals=vals, launch=launch)


def compile_kernel(device: Compiled, kernel: kernels.SuiteKernel) -> tuple[Any, ProgramSpec]:
    """`kernel` through the device's own renderer, compiler (and its cache) and runtime: (program, spec)."""
    src = kernel.render(device.renderer)
    gs, ls = (list(s) if s is not None else None for s in (kernel.global_size, kernel.local_size))
    spec = ProgramSpec(kernel.name, src, device.device, gs, ls, outs=kernel.outs, ins=kernel.ins,
                       uops=list(kernel.uops))  # fmt: skip
    lib = device.compiler.compile_cached(src)
    return device.runtime(kernel.name, lib, spec), spec


def run_kernel(device: Compiled, kernel: kernels.SuiteKernel, *bufs: Buffer, vals: tuple[int, ...] = (),
               launch: tuple[list[int], list[int]] | None = None) -> None:  # fmt: skip
    """Compile `kernel` for `device` and run it once on `bufs` (with its own launch unless `launch` is given)."""
    program, spec = compile_kernel(device, kernel)
    global_size, local_size = launch if launch is not None else (spec.global_size, spec.local_size)
    run_program(device, program, bufs, vals, global_size, local_size)


def run_program(device: Compiled, program: Any, bufs: tuple[Buffer, ...], vals: tuple[int, ...] = (),
                global_size: list[int] | None = None, local_size: list[int] | None = None) -> None:  # fmt: skip
    gs = tuple(global_size) if global_size is not None else None
    ls = tuple(local_size) if local_size is not None else None
    program(*[b.opaque for b in bufs], global_size=gs, local_size=ls, vals=tuple(vals), wait=True)
    device.synchronize()


def run_interrupted(script: str, *args: str, limit: float = 20.0) -> tuple[int, str]:
    """Run `script` (Python source) with `args` in a subprocess without LAZY_ settings, send it Ctrl-C (SIGINT) 0.5 s
    after it prints a line starting with "launched", and return (exit code, output). Fails the test when it is still
    running `limit` seconds after the interrupt. The child takes Ctrl-C as an interactive Python does even when the
    tests run in the background (a shell starts background jobs with SIGINT ignored, and children inherit that)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    script = f"import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n{script}"
    proc = subprocess.Popen([sys.executable, "-c", script, *args], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        assert first.startswith("launched"), first + proc.communicate(timeout=120)[0]
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail(f"still running {limit}s after Ctrl-C:\n{out}")
    return proc.returncode, out


def check_fp8_arithmetic_of_all_pairs(device: str, dtype: DType) -> None:
    """a+b, a*b, a-b, max and a<b over every pair of finite values of an fp8 `dtype` on `device`: each result is the
    exact one rounded once to fp8 (`lazy.dtype.float_to_fp8`, the host reference), for plugins' own fp8 tests."""
    all_bits = np.arange(256, dtype=np.uint8)
    values = fp8_to_float(all_bits, dtype).astype(np.float64)
    finite = all_bits[np.isfinite(values)]
    a_bits, b_bits = (g.ravel() for g in np.meshgrid(finite, finite))
    a, b = (Tensor(bits, device=device).bitcast(dtype) for bits in (a_bits, b_bits))
    x, y = values[a_bits], values[b_bits]
    with np.errstate(over="ignore"):
        for got, want in ((a + b, x + y), (a * b, x * y), (a - b, x - y)):
            assert got.dtype == dtype
            np.testing.assert_array_equal(got.bitcast(dtypes.uint8).numpy(), float_to_fp8(want, dtype))
    np.testing.assert_array_equal(a.maximum(b).cast(dtypes.float32).numpy(), np.maximum(x, y))
    np.testing.assert_array_equal((a < b).numpy(), x < y)

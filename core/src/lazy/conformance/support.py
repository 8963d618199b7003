"""Helpers the suite's layers share: buffers from numpy arrays, `KernelBuilder`, which writes a test kernel from
UOps so it is valid both for thread-style devices (`caps.has_threads`: SPECIAL ids) and loop-style ones (RANGE), and
`run_interrupted`, which sends Ctrl-C to a script running in a subprocess (also for plugins' own tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import Buffer, Compiled, ProgramSpec
from lazy.dtype import DType, dtypes, float_to_fp8, fp8_to_float, to_np_dtype, values_to_storage
from lazy.ops import Ops
from lazy.tensor import Tensor

INDEX = dtypes.int32


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


class KernelBuilder:
    """A kernel written with `UOpBuilder`, then rendered, compiled and run through the device's own parts."""

    def __init__(self, device: Compiled, name: str):
        self.device, self.name, self.caps = device, name, device.renderer.caps
        self.b = UOpBuilder()
        self.params = 0
        self.global_size: list[int] | None = None
        self.local_size: list[int] | None = None
        self.closers: list[UOp] = []  # RANGE/IF uops still open, innermost last

    # ---- definitions -----------------------------------------------------------------------------------------------

    def buffer(self, dtype: DType, written: bool = False) -> UOp:
        uop = self.b.add(UOps.DEFINE_GLOBAL, dtype.ptr(), (), (self.params, f"data{self.params}", written))
        self.params += 1
        return uop

    def var(self, name: str, lo: int, hi: int) -> UOp:
        return self.b.add(UOps.DEFINE_VAR, INDEX, (), (name, lo, hi))

    def const(self, value: Any, dtype: DType = INDEX) -> UOp:
        return self.b.const(value, dtype)

    def alu(self, op: Ops, *src: UOp) -> UOp:
        return self.b.alu(op, *src)

    # ---- control flow ----------------------------------------------------------------------------------------------

    def global_index(self, size: int | UOp, max_size: int | None = None) -> UOp:
        """The outer index 0..size-1: one thread each (SPECIAL) on thread-style devices, else a RANGE loop.
        A symbolic `size` (a DEFINE_VAR) launches `max_size` threads guarded by an IF."""
        if not self.caps.has_threads:
            return self.loop(size)
        launch = size if isinstance(size, int) else max_size
        assert isinstance(launch, int), "a symbolic size needs max_size on thread-style devices"
        self.global_size, self.local_size = [launch, 1, 1], [1, 1, 1]
        idx = self.b.add(UOps.SPECIAL, INDEX, (), ("gidx0", launch))
        if not isinstance(size, int):
            self.open_if(self.alu(Ops.CMPLT, idx, size))
        return idx

    def loop(self, size: int | UOp, axis: int = 0, reduce: bool = False) -> UOp:
        end = self.const(size) if isinstance(size, int) else size
        rng = self.b.add(UOps.RANGE, INDEX, (self.const(0), end), (axis, reduce))
        self.b.open_scope()
        self.closers.append(rng)
        return rng

    def open_if(self, cond: UOp) -> UOp:
        uop = self.b.add(UOps.IF, None, (cond,))
        self.b.open_scope()
        self.closers.append(uop)
        return uop

    def close(self) -> None:
        """Close the innermost open loop or if."""
        uop = self.closers.pop()
        self.b.add(UOps.ENDRANGE if uop.op is UOps.RANGE else UOps.ENDIF, None, (uop,))
        self.b.close_scope()

    # ---- memory ----------------------------------------------------------------------------------------------------

    def load(self, buf: UOp, idx: UOp, dtype: DType | None = None, gate: UOp | None = None,
             alt: UOp | None = None) -> UOp:  # fmt: skip
        dtype = dtype or buf.dtype.base()  # type: ignore[union-attr]
        return self.b.add(UOps.LOAD, dtype, (buf, idx) if gate is None else (buf, idx, gate, alt))  # type: ignore[arg-type]

    def store(self, buf: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> None:
        self.b.add(UOps.STORE, None, (buf, idx, value) if gate is None else (buf, idx, value, gate))
        self.b.invalidate()

    # ---- running ---------------------------------------------------------------------------------------------------

    def program(self) -> tuple[Any, ProgramSpec]:
        while self.closers:
            self.close()
        uops = self.b.uops
        src = self.device.renderer.render(self.name, uops)
        outs = [u.arg[0] for u in uops if u.op is UOps.DEFINE_GLOBAL and u.arg[2]]
        ins = [u.arg[0] for u in uops if u.op is UOps.DEFINE_GLOBAL and not u.arg[2]]
        spec = ProgramSpec(self.name, src, self.device.device, self.global_size, self.local_size, outs=outs, ins=ins,
                           uops=uops)  # fmt: skip
        lib = self.device.compiler.compile_cached(src)
        return self.device.runtime(self.name, lib, spec), spec

    def run(self, *bufs: Buffer, vals: tuple[int, ...] = (), launch: tuple[list[int], list[int]] | None = None) -> None:
        program, spec = self.program()
        global_size, local_size = launch if launch is not None else (spec.global_size, spec.local_size)
        run_program(self.device, program, bufs, vals, global_size, local_size)


def run_program(device: Compiled, program: Any, bufs: tuple[Buffer, ...], vals: tuple[int, ...] = (),
                global_size: list[int] | None = None, local_size: list[int] | None = None) -> None:  # fmt: skip
    gs = tuple(global_size) if global_size is not None else None
    ls = tuple(local_size) if local_size is not None else None
    program(*[b.opaque for b in bufs], global_size=gs, local_size=ls, vals=tuple(vals), wait=True)
    device.synchronize()


def run_interrupted(script: str, *args: str, limit: float = 20.0) -> tuple[int, str]:
    """Run `script` (Python source) with `args` in a subprocess without LAZY_ settings, send it Ctrl-C (SIGINT) 0.5 s
    after it prints a line starting with "launched", and return (exit code, output). Fails the test when it is still
    running `limit` seconds after the interrupt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
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

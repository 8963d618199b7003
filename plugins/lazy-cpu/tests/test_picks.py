"""The C renderer's min/max picks: `where(p < q, q, p)` and `where(p < q, p, q)` of float vectors and scalars render
as one call (`lazy_pick_gt`, `lazy_pick_lt`: x86's MAXPS/MINPS under gcc, on lane 0 for a scalar, MAXPD/MINPD for a
double), and lazy's MAX as a pick plus a NaN fix. Each must give exactly the select's bits (NaN, signed zeros,
infinities, denormals) at every vector width, under every C compiler here, on every instruction set the compiler can
target on this machine, at both optimisation levels the CPU device uses."""

from __future__ import annotations

import ctypes
import itertools
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpu_testing import buffers, end, loop

from lazy.codegen.uops import UOpBuilder, UOps
from lazy.dtype import dtypes
from lazy.ops import Ops
from lazy_cpu.device import ClangCompiler
from lazy_cpu.renderer import ClangRenderer

f32, f64 = dtypes.float32, dtypes.float64
CONSTANTS = [2.5, -0.0, 129.0, float("nan")]
CLAMP = (-151.0, 129.0)
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 1e-40, -1e-40, -3e38, 3e38, 1e-310, -1e-310]


def pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values (float64's own denormals too), padded with (1, 2) to a multiple of 16."""
    np_type = np.float32 if dtype == f32 else np.float64
    xy = list(itertools.product(SPECIAL, SPECIAL))
    xy += [(1.0, 2.0)] * (-len(xy) % 16)
    arr = np.array(xy, np_type)
    return np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1])


def pick_kernel(dtype, width: int, n: int) -> list:
    """out_gt = where(y < x, x, y), out_lt = where(x < y, x, y), out_max = MAX(x, y), over `width`-lane vectors (1:
    scalars)."""
    vec = dtype.vec(width)
    b = UOpBuilder()
    gt, lt, mx, xs, ys, *out = buffers(b, *[(dtype, True)] * 3, (dtype, False), (dtype, False),
                                       *[(dtype, True)] * (3 * len(CONSTANTS) + 1))  # fmt: skip
    i = loop(b, n // width)
    at = b.alu(Ops.MUL, i, b.const(width, dtypes.int32))
    x, y = (b.add(UOps.LOAD, vec, (buf, at)) for buf in (xs, ys))

    def select_if_less(p, q, then, otherwise):  # where(p < q, then, otherwise)
        return b.alu(Ops.WHERE, b.add(UOps.ALU, dtypes.bool.vec(width), (p, q), Ops.CMPLT), then, otherwise)

    def const(c):  # one value in every lane
        k = b.const(c, dtype)
        return b.add(UOps.VECTORIZE, vec, tuple(k for _ in range(width))) if width > 1 else k

    stores = [(gt, select_if_less(y, x, x, y)), (lt, select_if_less(x, y, x, y)), (mx, b.alu(Ops.MAX, x, y))]
    for j, c in enumerate(CONSTANTS):  # constant operands (gcc 12 commuted a scalar MINSS builtin on a constant)
        k = const(c)
        stores += [(out[3 * j], select_if_less(x, k, k, x)), (out[3 * j + 1], select_if_less(k, x, k, x)),
                   (out[3 * j + 2], b.alu(Ops.MAX, x, k))]  # fmt: skip
    lo, hi = (const(c) for c in CLAMP)  # a clamp, as the polynomial exp2's: x at least `lo`, at most `hi`
    up = select_if_less(x, lo, lo, x)
    stores.append((out[-1], select_if_less(hi, up, hi, up)))
    for buf, value in stores:
        b.add(UOps.STORE, None, (buf, at, value))
    end(b, i)
    return b.uops


def expected(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """The selects' values; lazy's MAX is either operand's NaN where both are NaN (compared as NaN, not by bits)."""
    out = [np.where(y < x, x, y), np.where(x < y, x, y), np.where((x >= y) | np.isnan(x), x, y)]
    for c in CONSTANTS:
        k = x.dtype.type(c)
        out += [np.where(x < k, k, x), np.where(k < x, k, x), np.where((x >= k) | np.isnan(x), x, np.full_like(x, k))]
    lo, hi = (x.dtype.type(c) for c in CLAMP)
    up = np.where(x < lo, lo, x)
    return [*out, np.where(hi < up, hi, up)]


def targets() -> list[list[str]]:
    """Extra flags for each instruction set to check: the machine's own, and on x86 without AVX-512 and without AVX."""
    return [[], ["-mno-avx512f"], ["-mno-avx"]] if platform.machine() in ("x86_64", "AMD64") else [[]]


def compilers() -> list[str]:
    return [path for cc in ("gcc", "clang") if (path := shutil.which(cc)) is not None]


CASES = [(f32, 1), (f32, 4), (f32, 8), (f32, 16), (f64, 1)]


@pytest.mark.parametrize("dtype,width", CASES)
def test_picks_render_as_one_call(dtype, width):
    x, _ = pairs(dtype)
    src = ClangRenderer().render("picks", pick_kernel(dtype, width, len(x)))
    name = dtype.vec(width).name if width > 1 else ClangRenderer().type_map[dtype]
    assert f"lazy_pick_gt_{name}(" in src and f"lazy_pick_lt_{name}(" in src
    body = src[src.index("void picks(") :]
    assert body.count("<") == 1, body  # the loop's: the picks' compares are not written


@pytest.mark.parametrize("dtype,width", CASES)
def test_picks_give_the_selects_bits_everywhere(dtype, width, tmp_path: Path):
    if not compilers():
        pytest.skip("no gcc or clang on PATH: the CPU device's kernels need one")
    x, y = pairs(dtype)
    src = ClangRenderer().render("picks", pick_kernel(dtype, width, len(x)))
    want = expected(x, y)
    uint = np.uint32 if dtype == f32 else np.uint64
    for cc, extra, level in itertools.product(compilers(), targets(), ("-O1", "-O2")):  # (the device uses both)
        compiler = ClangCompiler("CPU", cc=cc)
        flags = [level if flag == "-O2" else flag for flag in compiler.flags]
        so = tmp_path / f"picks_{Path(cc).name}_{extra[0] if extra else 'native'}{level}.so"
        cmd = [cc, *flags, *extra, "-x", "c", "-", "-x", "none", "-o", str(so), *compiler.link]
        proc = subprocess.run(cmd, input=src.encode(), capture_output=True, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr.decode()}"
        outs = [np.full_like(x, 7.0) for _ in want]
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        ctypes.CDLL(str(so)).picks(*(ptr(a) for a in (*outs[:3], x, y, *outs[3:])))
        names = ["where(y < x, x, y)", "where(x < y, x, y)", "MAX(x, y)"]
        names += [f for c in CONSTANTS for f in (f"where(x < {c}, {c}, x)", f"where({c} < x, {c}, x)", f"MAX(x, {c})")]
        names.append(f"x clamped to {CLAMP}")
        for name, got, ref in zip(names, outs, want):
            both_nan = np.isnan(got) & np.isnan(ref)
            bad = np.flatnonzero((got.view(uint) != ref.view(uint)) & ~both_nan)
            assert not bad.size, f"{cc} {level} {extra}, {dtype} x {width}, {name}: x={x[bad[:4]]} " \
                                 f"y={y[bad[:4]]} gave {got[bad[:4]]}, want {ref[bad[:4]]}"  # fmt: skip

"""The C renderer's min/max picks: `where(p < q, q, p)` and `where(p < q, p, q)` of float vectors render as one call
(`lazy_pick_gt`, `lazy_pick_lt`: x86's MAXPS and MINPS under gcc), and lazy's MAX as a pick plus a NaN fix. Each must
give exactly the select's bits (NaN, signed zeros, infinities, denormals) at every vector width, under every C
compiler here, on every instruction set the compiler can target on this machine."""

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

f32 = dtypes.float32
SPECIAL = np.float32([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 1e-40, -1e-40, -3e38, 3e38])
# every pair of special values, padded with (1, 2) to a multiple of the widest vector
PAIRS = np.array(list(itertools.product(SPECIAL, SPECIAL)) + [(1.0, 2.0)] * 16, np.float32)[
    : len(SPECIAL) ** 2 // 16 * 16 + 16
]
X, Y = np.ascontiguousarray(PAIRS[:, 0]), np.ascontiguousarray(PAIRS[:, 1])


def pick_kernel(width: int) -> list:
    """out_gt = where(y < x, x, y), out_lt = where(x < y, x, y), out_max = MAX(x, y), over `width`-lane vectors."""
    vec = f32.vec(width)
    b = UOpBuilder()
    gt, lt, mx, xs, ys = buffers(b, (f32, True), (f32, True), (f32, True), (f32, False), (f32, False))
    i = loop(b, len(X) // width)
    at = b.alu(Ops.MUL, i, b.const(width, dtypes.int32))
    x, y = (b.add(UOps.LOAD, vec, (buf, at)) for buf in (xs, ys))
    b.add(
        UOps.STORE, None, (gt, at, b.alu(Ops.WHERE, b.add(UOps.ALU, dtypes.bool.vec(width), (y, x), Ops.CMPLT), x, y))
    )
    b.add(
        UOps.STORE, None, (lt, at, b.alu(Ops.WHERE, b.add(UOps.ALU, dtypes.bool.vec(width), (x, y), Ops.CMPLT), x, y))
    )
    b.add(UOps.STORE, None, (mx, at, b.alu(Ops.MAX, x, y)))
    end(b, i)
    return b.uops


def expected() -> list[np.ndarray]:
    return [np.where(Y < X, X, Y), np.where(X < Y, X, Y), np.where((X >= Y) | np.isnan(X), X, Y)]


def targets() -> list[list[str]]:
    """Extra flags for each instruction set to check: the machine's own, and on x86 without AVX-512 and without AVX."""
    return [[], ["-mno-avx512f"], ["-mno-avx"]] if platform.machine() in ("x86_64", "AMD64") else [[]]


def compilers() -> list[str]:
    return [path for cc in ("gcc", "clang") if (path := shutil.which(cc)) is not None]


@pytest.mark.parametrize("width", [4, 8, 16])
def test_picks_render_as_one_call(width):
    src = ClangRenderer().render("picks", pick_kernel(width))
    assert f"lazy_pick_gt_float{width}(" in src and f"lazy_pick_lt_float{width}(" in src
    body = src[src.index("void picks(") :]
    assert body.count("<") == 1, body  # the loop's: the picks' compares are not written


@pytest.mark.parametrize("width", [4, 8, 16])
def test_picks_give_the_selects_bits_everywhere(width, tmp_path: Path):
    if not compilers():
        pytest.skip("no gcc or clang on PATH: the CPU device's kernels need one")
    src = ClangRenderer().render("picks", pick_kernel(width))
    want = expected()
    for cc, extra in itertools.product(compilers(), targets()):
        compiler = ClangCompiler("CPU", cc=cc)
        so = tmp_path / f"picks_{Path(cc).name}_{len(extra)}_{extra[0] if extra else 'native'}.so"
        cmd = [cc, *compiler.flags, *extra, "-x", "c", "-", "-x", "none", "-o", str(so), *compiler.link]
        proc = subprocess.run(cmd, input=src.encode(), capture_output=True, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr.decode()}"
        outs = [np.full_like(X, 7.0) for _ in range(3)]
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        ctypes.CDLL(str(so)).picks(*(ptr(a) for a in (*outs, X, Y)))
        for name, got, ref in zip(("where(y < x, x, y)", "where(x < y, x, y)", "MAX(x, y)"), outs, want):
            bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
            assert not bad.size, f"{cc} {extra}, {width} lanes, {name}: x={X[bad[:4]]} y={Y[bad[:4]]} gave " \
                                 f"{got[bad[:4]]}, want {ref[bad[:4]]}"  # fmt: skip

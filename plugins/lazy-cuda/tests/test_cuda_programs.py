"""Real Tensor programs (matmul, half matmul, convolution, softmax, a long sum) scheduled as usual, every kernel lowered
through core's code generator with the CUDA capabilities (work groups, shared memory, grouped reductions) and compiled
by NVRTC: what a GPU would run, checked without one."""

from __future__ import annotations

import pytest

from lazy import Tensor
from lazy.codegen.program import get_program
from lazy.dtype import dtypes
from lazy.engine.schedule import create_schedule
from lazy.ops import Ops
from lazy_cuda.compiler import NVRTCCompiler
from lazy_cuda.renderer import CUDARenderer


def programs() -> dict[str, list[Tensor]]:
    # built on PYTHON (always there, no kernel runs: only the schedule is made)
    a, b = Tensor.rand(64, 96, device="PYTHON"), Tensor.rand(96, 128, device="PYTHON")
    x, w = Tensor.rand(2, 8, 16, 16, device="PYTHON"), Tensor.rand(16, 8, 3, 3, device="PYTHON")
    return {
        "matmul": [a @ b],
        "matmul_half": [a.half() @ b.half()],
        "conv2d": [x.conv2d(w, padding=1)],
        "softmax": [Tensor.rand(32, 1000, device="PYTHON").softmax(-1)],
        "long_sum": [Tensor.rand(4096, device="PYTHON").sum()],  # few outputs: a grouped reduction
        "bfloat16": [(Tensor.rand(8, 16, device="PYTHON").cast(dtypes.bfloat16) * 3).exp()],
    }


@pytest.mark.parametrize("name", list(programs()))
def test_program_kernels_render_and_compile(name):
    renderer, compiler = CUDARenderer("sm_80"), NVRTCCompiler("sm_80")
    schedule = create_schedule([t.lazydata for t in programs()[name]])
    kernels = [si for si in schedule if si.ast.op is Ops.SINK]
    assert kernels
    for si in kernels:
        spec = get_program(si.ast, renderer)
        assert spec.global_size is not None and spec.local_size is not None  # thread ids, not loops
        assert all(g <= most for g, most in zip(spec.global_size, renderer.caps.global_max or ()))
        assert compiler.compile(spec.src)[:4] == b"\x7fELF", spec.src


def test_long_sum_uses_shared_memory_and_a_barrier():
    spec = get_program(create_schedule([Tensor.rand(4096, device="PYTHON").sum().lazydata])[-1].ast, CUDARenderer())
    assert "__shared__" in spec.src and "__syncthreads();" in spec.src and (spec.local_size or [1])[0] > 1

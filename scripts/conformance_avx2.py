"""The conformance suite on the CPU device as an AVX2-only machine would run it, on a machine with AVX-512: the host
reports no AVX-512 flags to the code generator (so kernels are written for 8 float lanes and 16 registers, with the
AVX2 helpers of the C prelude) and kernels compile with -mno-avx512f. CI runs it (`scripts/test.sh`) so the 8-lane
paths stay checked on AVX-512 machines too; on a machine without AVX-512 the plain suite already runs them.

    .venv/bin/python scripts/conformance_avx2.py --device CPU --out reports/conformance-avx2
"""

from __future__ import annotations

import runpy
import sys

import lazy_cpu.device
import lazy_cpu.hostcpu as hostcpu


def as_avx2() -> None:
    """Hide the AVX-512 flags from `lazy_cpu.hostcpu` and compile without AVX-512, before any device opens."""
    flags = frozenset(f for f in hostcpu.cpu_flags() if not f.startswith("avx512"))
    for cached in (hostcpu.vector_widths, hostcpu.vector_registers, hostcpu.x86_fma):
        cache_clear = getattr(cached, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
    hostcpu.cpu_flags = lambda: flags  # type: ignore[assignment]
    lazy_cpu.device.ClangCompiler.FLAGS = [*lazy_cpu.device.ClangCompiler.FLAGS, "-mno-avx512f"]
    print(f"conformance as an AVX2 machine: {hostcpu.describe()}, kernels compiled with -mno-avx512f", flush=True)


if __name__ == "__main__":
    if "avx512f" not in hostcpu.cpu_flags():
        print("this machine has no AVX-512: the plain conformance run already checks its own vector paths")
        sys.exit(0)
    as_avx2()
    sys.argv = ["lazy.conformance", *sys.argv[1:]]
    runpy.run_module("lazy.conformance", run_name="__main__")

"""What the host CPU offers the code generator: its float vector widths, read once from the operating system.

Kernels are compiled for this machine (`-march=native`, llvmlite's host features), so the widths the renderers
declare follow what it has: 16 float lanes with AVX-512, 8 with AVX/AVX2, 4 with SSE or NEON."""

from __future__ import annotations

import functools
import platform
import subprocess

from lazy.renderer import Capabilities

# bytes of stack a kernel may stage an operand tile in (`OptOps.PACK`): within half an L2 of every CPU we meet, and far
# below the 8 MiB thread stacks (the tile is a local array of the kernel function)
PACK_MAX = 512 * 1024

# (feature flag as the OS names it, float32 lanes of its widest vector register)
X86_WIDTHS = (("avx512f", 16), ("avx", 8), ("sse2", 4))


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags (Linux: /proc/cpuinfo; macOS: sysctl); empty when the OS does not say."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
                                 capture_output=True, text=True, timeout=5).stdout  # fmt: skip
            return frozenset(out.lower().replace(".", "_").split())
        except (OSError, subprocess.SubprocessError):
            pass
    return frozenset()


@functools.cache
def vector_widths() -> tuple[int, ...]:
    """The float32 vector widths worth emitting on this CPU, narrowest first (the widest is the register width)."""
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return (4,)  # NEON (SVE lengths vary by chip; 128-bit vectors are always there)
    flags = cpu_flags()
    for flag, lanes in X86_WIDTHS:
        if flag in flags:
            return tuple(w for w in (4, 8, 16) if w <= lanes)
    return (4, 8)  # flags unknown: what every x86-64 compiler can lower (8 lanes as two halves at worst)


@functools.cache
def x86_fma() -> bool:
    """An x86 CPU with FMA instructions: the C prelude's vector multiply-add is then one builtin (`vector_fma` in
    `lazy_cpu.renderer`), not a loop of fmaf that only gcc's -O2 vectorizer turns into one instruction."""
    return platform.machine().lower() in ("x86_64", "amd64") and "fma" in cpu_flags()


@functools.cache
def vector_registers() -> int:
    """Vector registers of the widest width: 32 with AVX-512 and on ARM64, 16 with AVX/SSE."""
    if platform.machine().lower() in ("arm64", "aarch64") or "avx512f" in cpu_flags():
        return 32
    return 16


def host_capabilities() -> Capabilities:
    """What the CPU and LLVM renderers declare: loops over the whole range (no threads, no local memory), the first
    loop split over the cores, and this CPU's vectors, registers and packing room."""
    return Capabilities(has_threads=False, has_local=False, vector_widths=vector_widths(), core_split=True,
                        vector_registers=vector_registers(), pack_max=PACK_MAX)  # fmt: skip


def describe() -> str:
    """One line naming the vector extensions found (for the benchmark record and `python -m lazy devices`)."""
    names = [f for f in ("avx512f", "avx2", "avx", "fma", "sse4_2", "neon", "asimd") if f in cpu_flags()]
    return f"{platform.machine()} {' '.join(names) or 'no vector flags reported'}, float lanes {max(vector_widths())}"

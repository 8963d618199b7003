"""C source -> the bytes of a shared library, with the system C compiler found on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from lazy.device import CompileError, Compiler, DeviceError

C_COMPILERS = ("cc", "gcc", "clang")  # in order of preference (the probe in lazy_template/__init__.py looks for these)

# No -ffast-math: NaN, inf and signed zeros must behave as `lazy.ops` says. -ffp-contract=off: a*b+c stays two
# roundings (gcc would fuse it into one), as on the reference device. -fwrapv: signed overflow wraps, as it does there.
# -fno-tree-loop-vectorize: gcc 12.2 at -O2 vectorized a sum over a flipped view (three reversed loads a step) into
# code that added the wrong elements (96 for 78); -O1, -O3 and -O2 without loop vectorization are right
FLAGS = ("-O2", "-fno-tree-loop-vectorize", "-fPIC", "-shared", "-ffp-contract=off", "-fwrapv")


class TemplateCompiler(Compiler):
    """`compile(src) -> bytes`. Core calls `compile_cached`, which keeps the binaries in an on-disk cache keyed by
    `cachekey` and the source: put everything that changes the binary in the key (compiler, version, flags)."""

    def __init__(self, device: str):
        path = next((found for name in C_COMPILERS if (found := shutil.which(name)) is not None), None)
        if path is None:
            raise DeviceError(f"{device}: no C compiler on PATH (looked for {', '.join(C_COMPILERS)}); install gcc or "
                              "clang")  # fmt: skip
        self.device, self.cc = device, path
        version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
        super().__init__(cachekey=f"tmpl {path} {(version.splitlines() or ['?'])[0]} {' '.join(FLAGS)}")

    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="lazy_tmpl_") as tmp:
            out = os.path.join(tmp, "kernel.so")
            cmd = [self.cc, *FLAGS, "-x", "c", "-", "-o", out, "-lm"]
            proc = subprocess.run(cmd, input=src.encode(), capture_output=True, check=False)
            if proc.returncode != 0:  # CompileError shows the numbered source with the compiler's message
                raise CompileError(self.device, src, f"{' '.join(cmd)}\n{proc.stderr.decode(errors='replace')}")
            with open(out, "rb") as f:
                return f.read()

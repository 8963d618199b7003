"""`DiskRenderer` and `DiskCompiler`: DISK runs no kernels. Its capabilities say so by name (core refuses kernels on it
before any code is generated, and the conformance suite skips its kernel layers with this reason)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazy.device import Compiler, DeviceError
from lazy.renderer import Capabilities, Renderer

if TYPE_CHECKING:
    from lazy.codegen.uops import UOp

NO_KERNELS = "DISK is a copy-only device: move tensors to a compute device with .to()"


class DiskRenderer(Renderer):
    device = "DISK"
    caps = Capabilities(unsupported=(("kernels", NO_KERNELS),))  # every dtype can be stored, none computed in

    def render(self, name: str, uops: list[UOp]) -> str:
        raise DeviceError(f"cannot render kernel {name}: {NO_KERNELS}")


class DiskCompiler(Compiler):
    def __init__(self) -> None:
        super().__init__(cachekey=None)

    def compile(self, src: str) -> bytes:
        raise DeviceError(f"cannot compile a kernel: {NO_KERNELS}")


def refuse_program(name: str, lib: bytes, spec: Any = None) -> Any:
    """`Compiled.runtime` of DISK: there is nothing to load."""
    raise DeviceError(f"cannot load kernel {name}: {NO_KERNELS}")

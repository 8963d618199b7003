"""The wrong parts of the broken devices, and `open_broken`, which opens the working CPU device with its factory and
swaps exactly one part. Swapping after opening (instead of building a `Compiled` here) keeps these fixtures
independent of how `Compiled` is constructed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lazy.device import BufferSpec, Compiled, Compiler, ProgramSpec
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.renderer.cstyle import checked_div
from lazy_cpu.device import HostAllocator, open_cpu
from lazy_cpu.renderer import ClangRenderer

# ---------------------------------------------------------------------------------------------------------------------
# allocators


class AliasingAllocator(HostAllocator):
    """One block per size, handed to every buffer of that size: live buffers share memory."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: dict[int, Any] = {}

    def _alloc(self, size: int, spec: BufferSpec) -> Any:
        if size not in self.blocks:
            self.blocks[size] = super()._alloc(size, spec)
        return self.blocks[size]

    def _free(self, opaque: Any, size: int, spec: BufferSpec) -> None:
        pass  # the block is handed out again, so it is never given back


class ReusingFreeListAllocator(HostAllocator):
    """Keeps freed buffers by size and hands them out again, but reads the list instead of popping from it: two later
    allocations of that size get the same freed buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.freed: dict[int, list[Any]] = {}

    def alloc(self, size: int, spec: BufferSpec | None = None) -> Any:
        if kept := self.freed.get(size):
            return kept[-1]  # the bug: kept.pop()
        return super().alloc(size, spec)

    def free(self, opaque: Any, size: int, spec: BufferSpec | None = None) -> None:
        self.freed.setdefault(size, []).append(opaque)


class ShortCopyinAllocator(HostAllocator):
    """Copies host data in one byte short."""

    def _copyin(self, dest: Any, src: memoryview) -> None:
        super()._copyin(dest, src[:-1])


# ---------------------------------------------------------------------------------------------------------------------
# renderers


def _floor_idiv(a: str, b: str, dtype: DType) -> str:
    """Python's floor division: the quotient one lower when the remainder is not 0 and the signs differ."""
    if not dtypes.is_int(dtype):
        return ClangRenderer.code_for_op[Ops.IDIV](a, b, dtype=dtype)
    quotient, remainder = checked_div("/")(a, b, dtype), checked_div("%")(a, b, dtype)
    return f"({quotient}-(({remainder}!=0)&((({a})<0)!=(({b})<0))))"


class FloorDivRenderer(ClangRenderer):
    code_for_op = {**ClangRenderer.code_for_op, Ops.IDIV: _floor_idiv}


class ArithmeticWhereRenderer(ClangRenderer):
    code_for_op = {**ClangRenderer.code_for_op, Ops.WHERE: lambda c, a, b, dtype: f"(({c})*({a})+(1-({c}))*({b}))"}


class RoundingCastRenderer(ClangRenderer):
    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        if dst.count == 1 and dtypes.is_float(src) and dtypes.is_int(dst):
            rint = "__builtin_rint" if src == dtypes.float64 else "__builtin_rintf"
            return f"(({self.render_dtype(dst)}){rint}({x}))"
        return super().render_cast(x, src, dst)


class NoBoolRenderer(ClangRenderer):
    caps = dataclasses.replace(ClangRenderer.caps, dtypes=frozenset({dtypes.float32, dtypes.int32}))


# ---------------------------------------------------------------------------------------------------------------------
# compiler and programs


class LengthKeyedCompiler(Compiler):
    """The device's own compiler behind a cache keyed on the source's length alone."""

    def __init__(self, inner: Compiler):
        super().__init__(cachekey=None)
        self.inner = inner
        self.by_length: dict[int, bytes] = {}

    def compile(self, src: str) -> bytes:
        return self.inner.compile(src)

    def compile_cached(self, src: str) -> bytes:
        if len(src) not in self.by_length:
            self.by_length[len(src)] = self.inner.compile_cached(src)
        return self.by_length[len(src)]


class StaleLastBuffer:
    """A loaded program whose launcher fills the last buffer slot once, at the first launch, and never again."""

    def __init__(self, program: Any):
        self.program = program
        self.kept: Any = None

    def __call__(self, *bufs: Any, **launch: Any) -> Any:
        if bufs:
            if self.kept is None:
                self.kept = bufs[-1]
            bufs = (*bufs[:-1], self.kept)
        return self.program(*bufs, **launch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.program, name)


def stale_last_buffer(dev: Compiled) -> None:
    load = dev.runtime

    def load_stale(name: str, lib: bytes, spec: ProgramSpec) -> StaleLastBuffer:
        return StaleLastBuffer(load(name, lib, spec))

    dev.runtime = load_stale


# ---------------------------------------------------------------------------------------------------------------------
# queues


def _queue_without(handler: str) -> Callable[[Compiled], None]:
    """The device's compute queue with the `handler` command (`on_wait`, `on_timestamp`) doing nothing."""

    def swap(dev: Compiled) -> None:
        dev.compute_queue_t = type(f"Broken{dev.compute_queue_t.__name__}", (dev.compute_queue_t,),
                                   {handler: lambda self, dev, cmd: None})  # fmt: skip

    return swap


# ---------------------------------------------------------------------------------------------------------------------
# opening


def _set(part: str, make: Callable[[Compiled], Any]) -> Callable[[Compiled], None]:
    return lambda dev: setattr(dev, part, make(dev))


BREAKS: dict[str, Callable[[Compiled], None]] = {
    "BROKEN_ALIAS": _set("allocator", lambda dev: AliasingAllocator()),
    "BROKEN_LRU_REUSE": _set("allocator", lambda dev: ReusingFreeListAllocator()),
    "BROKEN_COPYIN": _set("allocator", lambda dev: ShortCopyinAllocator()),
    "BROKEN_IDIV": _set("renderer", lambda dev: FloorDivRenderer()),
    "BROKEN_WHERE": _set("renderer", lambda dev: ArithmeticWhereRenderer()),
    "BROKEN_CAST": _set("renderer", lambda dev: RoundingCastRenderer()),
    "BROKEN_NO_BOOL": _set("renderer", lambda dev: NoBoolRenderer()),
    "BROKEN_COMPILE_CACHE": _set("compiler", lambda dev: LengthKeyedCompiler(dev.compiler)),
    "BROKEN_STALE_ARG": stale_last_buffer,
    "BROKEN_NOOP_WAIT": _queue_without("on_wait"),
    "BROKEN_NOOP_TIMESTAMP": _queue_without("on_timestamp"),
}


def open_broken(name: str) -> Compiled:
    """The CPU device named `name` ("BROKEN_ALIAS", "BROKEN_ALIAS:1"), with the part its name says broken."""
    dev = open_cpu(name)
    BREAKS[name.partition(":")[0]](dev)
    return dev

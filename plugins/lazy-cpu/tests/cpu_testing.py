"""Shared fixtures: both devices of the plugin, and a helper that renders, compiles and runs a UOp kernel."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import Compiled, ProgramSpec
from lazy.dtype import DType, dtypes
from lazy_cpu.device import open_cpu, open_llvm

_names = itertools.count()


@pytest.fixture(scope="session", params=["CPU", "LLVM"])
def dev(request: pytest.FixtureRequest) -> Iterator[Compiled]:
    device = open_cpu("CPU") if request.param == "CPU" else open_llvm("LLVM")
    yield device
    device.close()


def load_program(dev: Compiled, uops: list[UOp], core_split: int = 0, name: str | None = None, **spec_kw):
    name = name or f"kernel{next(_names)}"
    src = dev.renderer.render(name, uops)
    lib = dev.compiler.compile(src)
    return dev.runtime(name, lib, ProgramSpec(name, src, dev.device, core_split=core_split, **spec_kw))


def to_device(dev: Compiled, arr: np.ndarray):
    opaque = dev.allocator.alloc(arr.nbytes)
    dev.allocator._copyin(opaque, memoryview(np.ascontiguousarray(arr)).cast("B"))
    return opaque


def from_device(dev: Compiled, opaque, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    dev.allocator._copyout(memoryview(out).cast("B"), opaque)
    return out


def run(
    dev: Compiled, uops: list[UOp], arrays: Sequence[np.ndarray], vals: tuple[int, ...] = (), **kw
) -> list[np.ndarray]:
    """Run `uops` with `arrays` as its buffers (DEFINE_GLOBAL index order); every buffer's contents afterwards."""
    prg = load_program(dev, uops, **kw)
    opaques = [to_device(dev, a) for a in arrays]
    prg(*opaques, vals=vals)
    result = [from_device(dev, o, a) for o, a in zip(opaques, arrays)]
    for o, a in zip(opaques, arrays):
        dev.allocator.free(o, a.nbytes)
    return result


def buffers(b: UOpBuilder, *spec: tuple[DType, bool]) -> list[UOp]:
    """DEFINE_GLOBALs data0, data1... of (dtype, written?)."""
    return [b.add(UOps.DEFINE_GLOBAL, dt.ptr(), (), (i, f"data{i}", w)) for i, (dt, w) in enumerate(spec)]


def loop(b: UOpBuilder, end: int | UOp, start: int | UOp = 0) -> UOp:
    as_uop = lambda x: x if isinstance(x, UOp) else b.const(x, dtypes.int32)
    b.open_scope()
    return b.add(UOps.RANGE, dtypes.int32, (as_uop(start), as_uop(end)), (0, False))


def end(b: UOpBuilder, rng: UOp) -> None:
    b.add(UOps.ENDRANGE, None, (rng,))
    b.close_scope()

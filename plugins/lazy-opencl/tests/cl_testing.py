"""Shared fixtures: the opened CL device (skipped with the reason when no OpenCL platform is usable) and helpers that
build, compile and run UOp kernels on it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import DeviceError, ProgramSpec
from lazy.dtype import DType, dtypes

_names = itertools.count()


@pytest.fixture(scope="session")
def dev() -> Iterator[object]:
    from lazy_opencl import probe_cl

    usable, reason = probe_cl()
    if not usable:
        pytest.skip(reason)
    from lazy_opencl.device import open_cl

    try:
        device = open_cl("CL")
    except DeviceError as e:
        pytest.skip(str(e))
    yield device
    device.close()


def load_program(dev, uops: list[UOp], name: str | None = None):
    name = name or f"kernel{next(_names)}"
    src = dev.renderer.render(name, uops)
    lib = dev.compiler.compile(src)
    return dev.runtime(name, lib, ProgramSpec(name, src, dev.device))


def to_device(dev, arr: np.ndarray):
    opaque = dev.allocator.alloc(arr.nbytes)
    dev.allocator._copyin(opaque, memoryview(np.ascontiguousarray(arr)).cast("B"))
    return opaque


def from_device(dev, opaque, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    dev.allocator._copyout(memoryview(out).cast("B"), opaque)
    return out


def run(dev, uops: list[UOp], arrays: Sequence[np.ndarray], global_size=(1, 1, 1), local_size=(1, 1, 1),
        vals: tuple[int, ...] = ()) -> list[np.ndarray]:  # fmt: skip
    """Run `uops` with `arrays` as its buffers (DEFINE_GLOBAL order); every buffer's contents afterwards."""
    prg = load_program(dev, uops)
    opaques = [to_device(dev, a) for a in arrays]
    prg(*opaques, global_size=global_size, local_size=local_size, vals=vals)
    return [from_device(dev, o, a) for o, a in zip(opaques, arrays)]


def buffers(b: UOpBuilder, *spec: tuple[DType, bool]) -> list[UOp]:
    """DEFINE_GLOBALs data0, data1... of (dtype, written?)."""
    return [b.add(UOps.DEFINE_GLOBAL, dt.ptr(), (), (i, f"data{i}", w)) for i, (dt, w) in enumerate(spec)]


def special(b: UOpBuilder, name: str, size: int) -> UOp:
    return b.add(UOps.SPECIAL, dtypes.int32, (), (name, size))

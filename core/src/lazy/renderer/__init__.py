"""`Renderer`: a device's capabilities (which drive code generation and which conformance tests apply) and
`render(name, uops) -> str`, turning the linear IR into the device's source language."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lazy.dtype import ALL_DTYPES, DType
from lazy.ops import Ops

if TYPE_CHECKING:
    from lazy.codegen.uops import UOp


@dataclass(frozen=True)
class Capabilities:
    """What a device's code generator may use. One object drives both codegen and the conformance suite."""

    has_threads: bool = False  # GPU-style launch: global dims are thread ids (SPECIAL); else the kernel loops itself
    has_local: bool = False  # local (shared) memory, barriers and local thread ids
    global_max: tuple[int, ...] | None = None  # per-dimension launch limits (None: unlimited)
    local_max: tuple[int, ...] | None = None
    local_size_max: int = 0  # most threads in one work group
    shared_max: int = 0  # bytes of local memory per work group
    vector_widths: tuple[int, ...] = ()  # float vector widths the renderer can emit (e.g. (4, 8))
    dtypes: frozenset[DType] = frozenset(ALL_DTYPES)  # element types the device can compute in (fp8: see Renderer)
    core_split: bool = (
        False  # CPU: the kernel takes [lo, hi) of its outermost loop so a runtime can split it over cores
    )
    serial_work_groups: bool = False  # a work group's items run one after another on a CPU core (PoCL), not as
    # parallel GPU lanes: per-item vectors and register tiles pay, spreading a reduce over a group does not
    vector_registers: int = 16  # vector registers of the widest width (AVX2 16, AVX-512 and NEON 32): sizes tiles
    pack_max: int = 0  # bytes of scratch memory (DEFINE_LOCAL on a device without threads) a kernel may stage an
    # operand tile in (`OptOps.PACK`); 0: no packing
    upcast_max: int = 64  # most accumulator registers an upcast may create
    # transcendental ALU ops (EXP2, LOG2, SIN) the language has a fast, precise version of that works on vectors (a
    # GPU's exp2, OpenCL's exp2 on PoCL's vector math); the others are lowered to polynomial code
    # (`lazy.codegen.transcendental`), which vectorizes where a libm call would not
    native_math: frozenset[Ops] = frozenset()
    unsupported: tuple[tuple[str, str], ...] = ()  # (conformance feature, reason) a device declares it lacks

    def supports(self, dtype: DType) -> bool:
        return dtype.scalar() in self.dtypes


class Renderer:
    """Base class of every renderer. Subclasses set `device`, `caps` and implement `render`.

    fp8 UOps reach `render` like any float dtype. A renderer whose language has no fp8 types (no shipped one has)
    passes the list through `lazy.renderer.emulate.emulate_fp8` first: fp8 becomes uint8 bits in memory and float32
    values in registers, with the host reference's rounding (the C-style base class and LLVM do this)."""

    device: str = ""
    caps: Capabilities = Capabilities()

    def render(self, name: str, uops: list[UOp]) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement render(name, uops)")

"""`Renderer`: a device's capabilities (which drive code generation and which conformance tests apply) and
`render(name, uops) -> str`, turning the linear IR into the device's source language."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lazy.dtype import ALL_DTYPES, DType
from lazy.ops import Ops
from lazy.record import record

if TYPE_CHECKING:
    from lazy.codegen.uops import UOp


@record(frozen=True)
class FragmentLayout:
    """Which elements of one operand tile of a tensor-core instruction each thread of the warp holds.

    `rows` and `cols` name, least significant bit first, where each bit of an element's row and column index comes
    from: `"lN"` is bit N of the thread's lane (its linear id within the work group, modulo the warp size), `"eN"` bit
    N of the element's position in the thread's fragment vector. Every tensor core in use is such a bit permutation
    (sizes are powers of two). Example, PTX `mma.m16n8k16` operand A (16 x 16): row = lane/4 + 8*(e/2 % 2), col =
    2*(lane % 4) + e % 2 + 8*(e/4) is `rows=("l2", "l3", "l4", "e1"), cols=("e0", "l0", "l1", "e2")`."""

    rows: tuple[str, ...]
    cols: tuple[str, ...]

    def __post_init__(self) -> None:
        bits = [*self.rows, *self.cols]
        if len(set(bits)) != len(bits) or any(b[:1] not in ("l", "e") or not b[1:].isdigit() for b in bits):
            raise ValueError(f"FragmentLayout bits must be distinct 'lN'/'eN' names, not {bits}")
        for kind in "le":
            have = sorted(int(b[1:]) for b in bits if b[0] == kind)
            if have != list(range(len(have))):
                raise ValueError(f"FragmentLayout {kind}-bits must be {kind}0..{kind}{len(have) - 1}, not {have}")

    @property
    def elements(self) -> int:
        """Elements per thread: the length of the fragment vector."""
        return 1 << sum(b[0] == "e" for b in (*self.rows, *self.cols))

    @property
    def lanes(self) -> int:
        return 1 << sum(b[0] == "l" for b in (*self.rows, *self.cols))

    @property
    def shape(self) -> tuple[int, int]:
        return 1 << len(self.rows), 1 << len(self.cols)

    def coords(self, lane: int, elem: int) -> tuple[int, int]:
        """(row, col) of fragment element `elem` of the thread at `lane`."""

        def gather(bits: tuple[str, ...]) -> int:
            return sum(((lane if b[0] == "l" else elem) >> int(b[1:]) & 1) << i for i, b in enumerate(bits))

        return gather(self.rows), gather(self.cols)


@record(frozen=True)
class TensorCore:
    """A warp-wide matrix multiply-accumulate the device has: D = A @ B + C with A (M x K), B (K x N), C and D (M x N),
    inputs `dtype_in`, accumulator and result `dtype_out`. `threads` lanes take part (a warp: 32 on NVIDIA and Apple),
    each holding the fragments `a`, `b`, `c` describe. `name` identifies the instruction (e.g. `"mma.m16n8k16"`): the
    renderer emits it for a WMMA UOp with this arg, and `LAZY_EMULATE` runs it with the hardware's own lane layout,
    written independently in the emulator, so a layout declared wrong here gives wrong numbers there."""

    name: str
    dims: tuple[int, int, int]  # (M, N, K)
    threads: int
    dtype_in: DType
    dtype_out: DType
    a: FragmentLayout
    b: FragmentLayout
    c: FragmentLayout

    def __post_init__(self) -> None:
        m, n, k = self.dims
        for what, layout, shape in (("a", self.a, (m, k)), ("b", self.b, (k, n)), ("c", self.c, (m, n))):
            if (
                layout.shape != shape
                or layout.lanes != self.threads
                or layout.elements * layout.lanes != m * n * k // ({"a": n, "b": m, "c": k}[what])
            ):
                raise ValueError(
                    f"TensorCore {self.name}: layout {what} covers {layout.shape} with {layout.lanes} lanes x "
                    f"{layout.elements} elements, expected {shape} over {self.threads} lanes"
                )


@record(frozen=True)
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
    # register tiles may pad the rows they tile (`OptOps.PAD`: 6-row tiles over 1024 rows): the compiler keeps the
    # padded rows' gated loads in the reduce loop cheap (gcc: a branch it predicts; matmul 2048 +4-14%); LLVM
    # at O1 spilled an accumulator for them (118 -> 70 GFLOP/s), and without the gates it was still 15% slower
    padded_tiles: bool = False
    # index arithmetic (loop counters, offsets) in int64 even where int32 holds every value: on a 64-bit CPU an
    # address is 64-bit, and a C compiler told that int32 wraps (-fwrapv) cannot widen an index itself, so every
    # operand address costs a sign extension (gcc -O1, a matmul's inner loop: 6 extra instructions a step); LLVM,
    # given i32 sums without `nsw`, also spends long in its loop analyses on them
    wide_index: bool = False
    # a reduce step's updates emitted unrolled-step-major (`Lowerer.reduce_lanes`) for a compiler that keeps the
    # order it is given (gcc at -O1 schedules nothing): the first unrolled step of every accumulator, then the second...
    # A compiler that schedules (LLVM) does better with each accumulator's steps together: interleaved, the
    # broadcasts of a 5x5 convolution's sliding window stayed live across the taps and it spilled (94 -> 206 ms)
    interleave_reduce: bool = False
    # transcendental ALU ops (EXP2, LOG2, SIN) the language has a fast, precise version of that works on vectors (a
    # GPU's exp2, OpenCL's exp2 on PoCL's vector math); the others are lowered to polynomial code
    # (`lazy.codegen.transcendental`), which vectorizes where a libm call would not
    native_math: frozenset[Ops] = frozenset()
    # whether the language's float division `x / y` is IEEE's, rounded once (C, LLVM IR, CUDA with -prec-div): then
    # `Ops.FDIV` reaches the renderer; otherwise the lowerer makes it x * (1 / y) (about 1.5 ulp), so a renderer that
    # does not know the op never sees it
    exact_division: bool = False
    unsupported: tuple[tuple[str, str], ...] = ()  # (conformance feature, reason) a device declares it lacks
    # warp-wide matrix multiply-accumulate instructions (`TensorCore`); the optimiser maps a matmul's tile onto one
    # when the kernel's dtypes and sizes fit (WMMA UOps), on a device with threads and local ids
    tensor_cores: tuple[TensorCore, ...] = ()

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

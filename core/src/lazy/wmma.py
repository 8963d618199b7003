"""The warp-wide multiply-accumulate instructions (tensor cores) the PYTHON device emulates, written here from their
vendors' documentation and never taken from a plugin's `TensorCore` declaration, so a layout declared wrong computes
wrong numbers (which the conformance suite catches) instead of agreeing with itself: `KNOWN_TENSOR_CORES` (each
instruction's tiles, lanes, dtype forms and per-lane fragment layouts), `known_tensor_core` (the instruction a WMMA
UOp runs, checked against it) and `multiply_accumulate` (one warp's D = A @ B + C)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazy.codegen.uops import UOp
from lazy.device import CompileError
from lazy.dtype import DType, dtypes
from lazy.record import record
from lazy.renderer import TensorCore


@record(frozen=True)
class KnownTensorCore:
    """One instruction as documented: tile sizes (M, N, K), the lanes of its warp, the (dtype_in, dtype_out) forms it
    has, and for each operand tile the (row, col) that element `e` of lane `l`'s fragment holds (`c`: C and D)."""

    dims: tuple[int, int, int]
    threads: int
    forms: frozenset[tuple[DType, DType]]
    a: Callable[[int, int], tuple[int, int]]
    b: Callable[[int, int], tuple[int, int]]
    c: Callable[[int, int], tuple[int, int]]

    @property
    def elements(self) -> tuple[int, int, int]:
        """Fragment lengths of A, B and C per lane."""
        m, n, k = self.dims
        return m * k // self.threads, k * n // self.threads, m * n // self.threads


# NVIDIA PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (.f16/.bf16 inputs): with
# groupID = laneid >> 2 and threadID_in_group = laneid % 4, A (16x16) element a_i is at row groupID (+8 for i in
# 2, 3, 6, 7), col 2*threadID_in_group + (i & 1) (+8 for i >= 4); B (16x8) b_i at row 2*threadID_in_group + (i & 1)
# (+8 for i >= 2), col groupID; C and D (16x8) c_i at row groupID (+8 for i >= 2), col 2*threadID_in_group + (i & 1).
def _mma_m16n8k16_a(lane: int, i: int) -> tuple[int, int]:
    return lane // 4 + (8 if i in (2, 3, 6, 7) else 0), 2 * (lane % 4) + i % 2 + (8 if i >= 4 else 0)


def _mma_m16n8k16_b(lane: int, i: int) -> tuple[int, int]:
    return 2 * (lane % 4) + i % 2 + (8 if i >= 2 else 0), lane // 4


def _mma_m16n8k16_c(lane: int, i: int) -> tuple[int, int]:
    return lane // 4 + (8 if i >= 2 else 0), 2 * (lane % 4) + i % 2


# Apple simdgroup_matrix 8x8 (`simdgroup_multiply_accumulate`; `thread_elements()` holds 2 adjacent elements of a row,
# the same for A, B, C and D): the threads of a SIMD group tile the matrix in Morton order (US patent 11256518 B2, as
# metal-flash-attention's `morton_order` spells it out): with quad = lane / 4, row = 4*(quad / 4) + (lane / 2) % 4,
# col = 4*((quad / 2) % 2) + 2*(lane % 2) + i.
def _simdgroup_8x8(lane: int, i: int) -> tuple[int, int]:
    quad = lane // 4
    return 4 * (quad // 4) + (lane // 2) % 4, 4 * (quad // 2 % 2) + 2 * (lane % 2) + i


_F16, _BF16, _F32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
KNOWN_TENSOR_CORES: dict[str, KnownTensorCore] = {
    # mma.sync.aligned.m16n8k16.row.col: f16 inputs accumulate in f32 or f16, bf16 inputs in f32 (sm_80 and later)
    "mma.m16n8k16": KnownTensorCore((16, 8, 16), 32, frozenset({(_F16, _F32), (_F16, _F16), (_BF16, _F32)}),
                                    _mma_m16n8k16_a, _mma_m16n8k16_b, _mma_m16n8k16_c),
    # simdgroup_float8x8, simdgroup_half8x8 and (MSL 3.1) simdgroup_bfloat8x8, accumulating in float or their own type
    "simdgroup_8x8x8": KnownTensorCore((8, 8, 8), 32, frozenset({(_F32, _F32), (_F16, _F32), (_F16, _F16),
                                       (_BF16, _F32), (_BF16, _BF16)}), _simdgroup_8x8, _simdgroup_8x8, _simdgroup_8x8),
}  # fmt: skip


def known_tensor_core(where: str, uop: UOp) -> KnownTensorCore:
    """The documented instruction a WMMA UOp runs; CompileError when its name is unknown or its tile, warp, dtypes or
    fragment sizes are not the instruction's."""
    tc = uop.arg

    def refuse(why: str) -> CompileError:
        return CompileError("PYTHON", "", f"{where}: {why}")

    if not isinstance(tc, TensorCore):
        raise refuse(f"the arg of a WMMA is a TensorCore, not {tc!r:.100}")
    if (known := KNOWN_TENSOR_CORES.get(tc.name)) is None:
        raise refuse(f"tensor core {tc.name!r} is not an instruction the PYTHON device knows "
                     f"({', '.join(KNOWN_TENSOR_CORES)}); to emulate it, add its documented lane layout to "
                     f"lazy.wmma.KNOWN_TENSOR_CORES")  # fmt: skip
    if (tc.dims, tc.threads) != (known.dims, known.threads):
        raise refuse(f"{tc.name} multiplies {known.dims} (M, N, K) tiles over {known.threads} lanes, but the "
                     f"TensorCore declares {tc.dims} over {tc.threads}")  # fmt: skip
    if (tc.dtype_in, tc.dtype_out) not in known.forms:
        forms = ", ".join(sorted(f"{i.name} -> {o.name}" for i, o in known.forms))
        raise refuse(f"{tc.name} has no {tc.dtype_in.name} -> {tc.dtype_out.name} form (it has {forms})")
    elems_a, elems_b, elems_c = known.elements
    wanted = (tc.dtype_in.vec(elems_a), tc.dtype_in.vec(elems_b), tc.dtype_out.vec(elems_c))
    got = tuple(s.dtype for s in uop.src)
    if got != wanted or uop.dtype != wanted[2]:
        raise refuse(f"{tc.name} takes fragments (A, B, C) of {wanted} per lane and gives {wanted[2]}, but this WMMA "
                     f"takes {got} and gives {uop.dtype}")  # fmt: skip
    return known


def multiply_accumulate(
    known: KnownTensorCore, rounded: Callable[[Any], Any], fragments: list[Any]
) -> list[tuple[Any, ...]]:
    """D = A @ B + C for one warp, from each lane's (A, B, C) fragments placed by the instruction's documented layouts;
    returns each lane's D fragment. Each product of two input values is exact, and each step of the sum (in k order,
    from C) is rounded by `rounded` (to the output dtype): the hardware's internal order and extra precision are not
    documented."""
    m, n, k = known.dims
    a = [[0.0] * k for _ in range(m)]
    b = [[0.0] * n for _ in range(k)]
    d = [[0.0] * n for _ in range(m)]  # holds C, then D
    for lane, fragment in enumerate(fragments):
        for (tile, where), values in zip(((a, known.a), (b, known.b), (d, known.c)), fragment):
            for e, value in enumerate(values):
                row, col = where(lane, e)
                tile[row][col] = value
    for row in range(m):
        for col in range(n):
            acc = d[row][col]
            for j in range(k):
                acc = rounded(acc + a[row][j] * b[j][col])
            d[row][col] = acc
    elems_c = known.elements[2]
    return [tuple(d[r][c] for r, c in (known.c(lane, e) for e in range(elems_c))) for lane in range(len(fragments))]

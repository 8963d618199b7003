"""Hand-built UOp kernels for the lazy-cuda tests: one per feature the renderer must get right (work-items, local
memory with a barrier, half, bfloat16, vectors at odd offsets, int64 variables, tensor cores)."""

from __future__ import annotations

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.renderer import FragmentLayout, TensorCore

f32, i32 = dtypes.float32, dtypes.int32
GROUP = 16


def buffers(b: UOpBuilder, *spec: tuple[DType, bool]) -> list[UOp]:
    """DEFINE_GLOBALs data0, data1... of (dtype, written?)."""
    return [b.add(UOps.DEFINE_GLOBAL, dt.ptr(), (), (i, f"data{i}", w)) for i, (dt, w) in enumerate(spec)]


def special(b: UOpBuilder, name: str, size: int) -> UOp:
    return b.add(UOps.SPECIAL, i32, (), (name, size))


def elementwise(dtype: DType = f32) -> list[UOp]:
    """out[gidx0] = a[gidx0] * b[gidx0] + 1, in `dtype`."""
    b = UOpBuilder()
    out, x, y = buffers(b, (dtype, True), (dtype, False), (dtype, False))
    i = special(b, "gidx0", 8)
    prod = b.alu(Ops.MUL, b.add(UOps.LOAD, dtype, (x, i)), b.add(UOps.LOAD, dtype, (y, i)))
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.ADD, prod, b.const(1.0, dtype))))
    return b.uops


def group_sum() -> list[UOp]:
    """out[gidx0] = sum(a[gidx0*GROUP + lidx0]): partials in local memory, a barrier, then lane 0 adds them."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    temp = b.add(UOps.DEFINE_LOCAL, f32.ptr(), (), ("temp", GROUP))
    g, lane = special(b, "gidx0", 4), special(b, "lidx0", GROUP)
    idx = b.alu(Ops.ADD, b.alu(Ops.MUL, g, b.const(GROUP, i32)), lane)
    b.add(UOps.STORE, None, (temp, lane, b.add(UOps.LOAD, f32, (a, idx))))
    b.add(UOps.BARRIER)
    first = b.add(UOps.IF, None, (b.alu(Ops.CMPLT, lane, b.const(1, i32)),))
    acc = b.add(UOps.DEFINE_ACC, f32, (), 0.0)
    rng = b.add(UOps.RANGE, i32, (b.const(0, i32), b.const(GROUP, i32)), (1, True))
    total = b.add(UOps.ASSIGN, f32, (acc, b.alu(Ops.ADD, acc, b.add(UOps.LOAD, f32, (temp, rng)))))
    b.add(UOps.ENDRANGE, None, (rng,))
    b.add(UOps.STORE, None, (out, g, total))
    b.add(UOps.ENDIF, None, (first,))
    return b.uops


def half_math() -> list[UOp]:
    """out = exp2(a) * 0.5 in half, and a bitcast to ushort bits."""
    b = UOpBuilder()
    out, bits, a = buffers(b, (dtypes.float16, True), (dtypes.uint16, True), (dtypes.float16, False))
    i = special(b, "gidx0", 8)
    val = b.add(UOps.LOAD, dtypes.float16, (a, i))
    b.add(UOps.STORE, None, (out, i, b.alu(Ops.MUL, b.alu(Ops.EXP2, val), b.const(0.5, dtypes.float16))))
    b.add(UOps.STORE, None, (bits, i, b.add(UOps.BITCAST, dtypes.uint16, (val,))))
    return b.uops


def bfloat16_select() -> list[UOp]:
    """out = flag ? v + v : v in bfloat16, and v as float32."""
    b = UOpBuilder()
    out, wide, flags, vals = buffers(b, (dtypes.bfloat16, True), (f32, True), (dtypes.bool, False),
                                     (dtypes.bfloat16, False))  # fmt: skip
    i = special(b, "gidx0", 4)
    v = b.add(UOps.LOAD, dtypes.bfloat16, (vals, i))
    pick = b.alu(Ops.WHERE, b.add(UOps.LOAD, dtypes.bool, (flags, i)), b.alu(Ops.ADD, v, v), v)
    b.add(UOps.STORE, None, (out, i, pick))
    b.add(UOps.STORE, None, (wide, i, b.add(UOps.CAST, f32, (v,))))
    return b.uops


def vector_odd_offset() -> list[UOp]:
    """float4 loads and stores at gidx0*4 + 1: never 16-byte aligned, so the element-wise path must be taken."""
    b = UOpBuilder()
    out, a = buffers(b, (f32, True), (f32, False))
    idx = b.alu(Ops.ADD, b.alu(Ops.MUL, special(b, "gidx0", 2), b.const(4, i32)), b.const(1, i32))
    vec = b.add(UOps.LOAD, f32.vec(4), (a, idx))
    b.add(UOps.STORE, None, (out, idx, b.alu(Ops.MUL, vec, vec)))
    return b.uops


def int64_variable() -> list[UOp]:
    """out[i] = i for i < n, n an int64 DEFINE_VAR (passed as a 64-bit parameter), with an int64 loop."""
    b = UOpBuilder()
    (out,) = buffers(b, (dtypes.int64, True))
    n = b.add(UOps.DEFINE_VAR, dtypes.int64, (), ("n", 1, 1 << 40))
    rng = b.add(UOps.RANGE, dtypes.int64, (b.const(0, dtypes.int64), n), (0, False))
    b.add(UOps.STORE, None, (out, rng, rng))
    b.add(UOps.ENDRANGE, None, (rng,))
    return b.uops


def _lane_bits(b: UOpBuilder, lane: UOp, elem: int, bits: tuple[str, ...]) -> UOp:
    """The row or column index that `bits` (a FragmentLayout's) give element `elem` of the thread at `lane`."""
    total = b.const(sum(((elem >> int(bit[1:])) & 1) << k for k, bit in enumerate(bits) if bit[0] == "e"), i32)
    for k, bit in enumerate(bits):
        if bit[0] == "l":
            one = b.alu(Ops.AND, b.alu(Ops.SHR, lane, b.const(int(bit[1:]), i32)), b.const(1, i32))
            total = b.alu(Ops.ADD, total, b.alu(Ops.MUL, one, b.const(1 << k, i32)))
    return total


def _fragment(b: UOpBuilder, buf: UOp, lane: UOp, layout: FragmentLayout, dtype: DType) -> UOp:
    """The thread's fragment of a row-major tile in `buf`, as a vector in fragment order."""
    cols = layout.shape[1]
    lanes = []
    for e in range(layout.elements):
        idx = b.alu(Ops.ADD, b.alu(Ops.MUL, _lane_bits(b, lane, e, layout.rows), b.const(cols, i32)),
                    _lane_bits(b, lane, e, layout.cols))  # fmt: skip
        lanes.append(b.add(UOps.LOAD, dtype, (buf, idx)))
    return b.add(UOps.VECTORIZE, dtype.vec(len(lanes)), tuple(lanes))


def wmma(tc: TensorCore) -> list[UOp]:
    """D = A @ B + C for one warp and one tile: A (M x K), B (K x N), C and D (M x N), all row-major."""
    b = UOpBuilder()
    out, a, bb, c = buffers(b, (tc.dtype_out, True), (tc.dtype_in, False), (tc.dtype_in, False),
                            (tc.dtype_out, False))  # fmt: skip
    lane = special(b, "lidx0", tc.threads)
    frags = [_fragment(b, buf, lane, layout, dt) for buf, layout, dt in
             ((a, tc.a, tc.dtype_in), (bb, tc.b, tc.dtype_in), (c, tc.c, tc.dtype_out))]  # fmt: skip
    d = b.add(UOps.WMMA, tc.dtype_out.vec(tc.c.elements), tuple(frags), tc)
    cols = tc.c.shape[1]
    for e in range(tc.c.elements):
        idx = b.alu(Ops.ADD, b.alu(Ops.MUL, _lane_bits(b, lane, e, tc.c.rows), b.const(cols, i32)),
                    _lane_bits(b, lane, e, tc.c.cols))  # fmt: skip
        b.add(UOps.STORE, None, (out, idx, b.add(UOps.GEP, tc.dtype_out, (d,), e)))
    return b.uops

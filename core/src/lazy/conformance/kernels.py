"""The suite's fixed kernels, written in UOps for given `Capabilities`: what layer `kernels` (and `hcq`) run, what
`--compile-only` renders and compiles without the device, and what a plugin's golden-file tests render.

`suite_kernels(caps)` lists them all; the builders below make one each, so a layer and the list share one definition.
Building needs no device, no numpy and no pytest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lazy.codegen.transcendental import division
from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.dtype import ALL_DTYPES, DType, dtypes
from lazy.ops import GroupOp, Ops

if TYPE_CHECKING:
    from lazy.renderer import Capabilities, FragmentLayout, Renderer, TensorCore

INDEX = dtypes.int32
N = 33  # elements of the elementwise kernels: odd on purpose
GROUPS = 4  # work groups of the local-memory kernel
FLOATS = [d for d in ALL_DTYPES if dtypes.is_float(d)]
INTS = [d for d in ALL_DTYPES if dtypes.is_int(d)]

FLOAT_OPS = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP,
             Ops.WHERE, Ops.MULACC, Ops.FDIV)  # fmt: skip
INT_OPS = (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
           Ops.SHR, Ops.NEG, Ops.WHERE, Ops.MULACC)  # fmt: skip
BOOL_OPS = (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPNE, Ops.CMPLT, Ops.MAX, Ops.WHERE)
ALU_CASES = [(op, d) for d in FLOATS for op in FLOAT_OPS] + [(op, d) for d in INTS for op in INT_OPS]
ALU_CASES += [(op, dtypes.bool) for op in BOOL_OPS]
REDUCE_CASES = [(dtypes.float32, Ops.ADD), (dtypes.int32, Ops.MAX)]
REDUCE_ROWS, REDUCE_COLS = 5, 19
CAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES if s != d]
BITCAST_PAIRS = [(s, d) for s in ALL_DTYPES for d in ALL_DTYPES
                 if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]  # fmt: skip
SYMBOLIC_MAX = 16  # threads launched for the symbolic kernel's `n` (its upper bound)


def arity(op: Ops) -> int:
    return 1 if op in GroupOp.Unary else 3 if op in GroupOp.Ternary else 2


def alu_input_dtypes(op: Ops, dtype: DType) -> list[DType]:
    """The dtypes of `op`'s operands in the ALU kernel of `dtype` (a WHERE's condition is bool)."""
    return [dtypes.bool if op is Ops.WHERE and j == 0 else dtype for j in range(arity(op))]


def alu_output_dtype(op: Ops, dtype: DType) -> DType:
    return dtypes.bool if op in GroupOp.Comparison else dtype


@dataclass(frozen=True)
class SuiteKernel:
    """One fixed kernel of the suite: its function name (unique in the suite), the layer that runs it, its UOps and
    its launch (work groups and their size; None on a loop-style device, which loops over its range itself)."""

    name: str
    layer: str
    uops: tuple[UOp, ...]
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None

    def render(self, renderer: Renderer) -> str:
        return renderer.render(self.name, list(self.uops))

    @property
    def outs(self) -> list[int]:
        return [u.arg[0] for u in self.uops if u.op is UOps.DEFINE_GLOBAL and u.arg[2]]

    @property
    def ins(self) -> list[int]:
        return [u.arg[0] for u in self.uops if u.op is UOps.DEFINE_GLOBAL and not u.arg[2]]


class KernelBuilder:
    """A kernel written with `UOpBuilder` for a device with `caps`, valid both for thread-style devices
    (`caps.has_threads`: SPECIAL ids) and loop-style ones (RANGE). `kernel()` closes it into a `SuiteKernel`."""

    def __init__(self, caps: Capabilities, name: str):
        self.caps, self.name = caps, name
        self.b = UOpBuilder()
        self.params = 0
        self.global_size: list[int] | None = None
        self.local_size: list[int] | None = None
        self.closers: list[UOp] = []  # RANGE/IF uops still open, innermost last

    # ---- definitions -----------------------------------------------------------------------------------------------

    def buffer(self, dtype: DType, written: bool = False) -> UOp:
        uop = self.b.add(UOps.DEFINE_GLOBAL, dtype.ptr(), (), (self.params, f"data{self.params}", written))
        self.params += 1
        return uop

    def var(self, name: str, lo: int, hi: int) -> UOp:
        return self.b.add(UOps.DEFINE_VAR, INDEX, (), (name, lo, hi))

    def const(self, value: Any, dtype: DType = INDEX) -> UOp:
        return self.b.const(value, dtype)

    def alu(self, op: Ops, *src: UOp) -> UOp:
        return self.b.alu(op, *src)

    # ---- control flow ----------------------------------------------------------------------------------------------

    def global_index(self, size: int | UOp, max_size: int | None = None) -> UOp:
        """The outer index 0..size-1: one thread each (SPECIAL) on thread-style devices, else a RANGE loop.
        A symbolic `size` (a DEFINE_VAR) launches `max_size` threads guarded by an IF."""
        if not self.caps.has_threads:
            return self.loop(size)
        launch = size if isinstance(size, int) else max_size
        assert isinstance(launch, int), "a symbolic size needs max_size on thread-style devices"
        self.global_size, self.local_size = [launch, 1, 1], [1, 1, 1]
        idx = self.b.add(UOps.SPECIAL, INDEX, (), ("gidx0", launch))
        if not isinstance(size, int):
            self.open_if(self.alu(Ops.CMPLT, idx, size))
        return idx

    def loop(self, size: int | UOp, axis: int = 0, reduce: bool = False) -> UOp:
        end = self.const(size) if isinstance(size, int) else size
        rng = self.b.add(UOps.RANGE, INDEX, (self.const(0), end), (axis, reduce))
        self.b.open_scope()
        self.closers.append(rng)
        return rng

    def open_if(self, cond: UOp) -> UOp:
        uop = self.b.add(UOps.IF, None, (cond,))
        self.b.open_scope()
        self.closers.append(uop)
        return uop

    def close(self) -> None:
        """Close the innermost open loop or if."""
        uop = self.closers.pop()
        self.b.add(UOps.ENDRANGE if uop.op is UOps.RANGE else UOps.ENDIF, None, (uop,))
        self.b.close_scope()

    # ---- memory ----------------------------------------------------------------------------------------------------

    def load(self, buf: UOp, idx: UOp, dtype: DType | None = None, gate: UOp | None = None,
             alt: UOp | None = None) -> UOp:  # fmt: skip
        dtype = dtype or buf.dtype.base()  # type: ignore[union-attr]
        return self.b.add(UOps.LOAD, dtype, (buf, idx) if gate is None else (buf, idx, gate, alt))  # type: ignore[arg-type]

    def store(self, buf: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> None:
        self.b.add(UOps.STORE, None, (buf, idx, value) if gate is None else (buf, idx, value, gate))
        self.b.invalidate()

    # ---- the result ------------------------------------------------------------------------------------------------

    def finish(self) -> list[UOp]:
        """The kernel's UOps, every open loop and if closed."""
        while self.closers:
            self.close()
        return self.b.uops

    def kernel(self, layer: str = "kernels") -> SuiteKernel:
        uops = self.finish()
        launch = [tuple(s) if s is not None else None for s in (self.global_size, self.local_size)]
        return SuiteKernel(self.name, layer, tuple(uops), *launch)


# ---------------------------------------------------------------------------------------------------------------------
# the kernels, one builder each (the layer's test of the same name feeds it data and checks the result)


def elementwise_add(caps: Capabilities) -> SuiteKernel:
    """out[i] = a[i] + b[i], float32, N elements."""
    k = KernelBuilder(caps, "conf_add")
    out, a, b = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32), k.buffer(dtypes.float32)
    idx = k.global_index(N)
    k.store(out, idx, k.alu(Ops.ADD, k.load(a, idx), k.load(b, idx)))
    return k.kernel()


def reduction(caps: Capabilities, dtype: DType, op: Ops) -> SuiteKernel:
    """out[r] = op over a[r, :] of a (REDUCE_ROWS, REDUCE_COLS) array, through an accumulator (DEFINE_ACC)."""
    k = KernelBuilder(caps, f"conf_reduce_{op.name.lower()}")
    out, a = k.buffer(dtype, True), k.buffer(dtype)
    row = k.global_index(REDUCE_ROWS)
    acc = k.b.add(UOps.DEFINE_ACC, dtype, (), 0 if op is Ops.ADD else dtypes.min(dtype))
    col = k.loop(REDUCE_COLS, axis=1, reduce=True)
    val = k.load(a, k.alu(Ops.ADD, k.alu(Ops.MUL, row, k.const(REDUCE_COLS)), col))
    k.b.add(UOps.ASSIGN, dtype, (acc, k.alu(op, acc, val)))
    k.close()
    k.store(out, row, acc)
    return k.kernel()


def alu(caps: Capabilities, op: Ops, dtype: DType) -> SuiteKernel:
    """out[i] = op(x[i], ...) for one ALU primitive on `dtype` (operands as `alu_input_dtypes` says)."""
    k = KernelBuilder(caps, f"conf_alu_{op.name.lower()}_{dtype.name}")
    out = k.buffer(alu_output_dtype(op, dtype), True)
    params = [k.buffer(d) for d in alu_input_dtypes(op, dtype)]
    idx = k.global_index(N)
    srcs = [k.load(p, idx) for p in params]
    if op is Ops.FDIV and not caps.exact_division:  # (as the lowerer does: such a renderer never sees FDIV)
        k.store(out, idx, division(k.b, *srcs))
    else:
        k.store(out, idx, k.alu(op, *srcs))
    return k.kernel()


def int_division(caps: Capabilities, op: Ops, size: int) -> SuiteKernel:
    """out[i] = x[i] IDIV/MOD y[i], int32 (for the signs of C's truncating division)."""
    k = KernelBuilder(caps, f"conf_neg_{op.name.lower()}")
    out, x, y = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32), k.buffer(dtypes.int32)
    idx = k.global_index(size)
    k.store(out, idx, k.alu(op, k.load(x, idx), k.load(y, idx)))
    return k.kernel()


def cast(caps: Capabilities, src: DType, dst: DType, bitcast: bool = False) -> SuiteKernel:
    """out[i] = (dst) a[i], a CAST or (same size) BITCAST."""
    k = KernelBuilder(caps, f"conf_{'bitcast' if bitcast else 'cast'}_{src.name}_{dst.name}")
    out, a = k.buffer(dst, True), k.buffer(src)
    idx = k.global_index(N)
    k.store(out, idx, k.b.add(UOps.BITCAST if bitcast else UOps.CAST, dst, (k.load(a, idx),)))
    return k.kernel()


def gated_load_and_store(caps: Capabilities) -> SuiteKernel:
    """12 threads read a 7-element buffer (gated, -1 past its end) and store where i % 3 != 1."""
    k = KernelBuilder(caps, "conf_gated")
    out, a = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32)
    idx = k.global_index(12)
    val = k.load(a, idx, gate=k.alu(Ops.CMPLT, idx, k.const(7)), alt=k.const(-1))
    k.store(out, idx, val, gate=k.alu(Ops.CMPNE, k.alu(Ops.MOD, idx, k.const(3)), k.const(1)))
    return k.kernel()


def if_block(caps: Capabilities) -> SuiteKernel:
    """out[i] = i + 100 for i < 4 of 10, inside an IF."""
    k = KernelBuilder(caps, "conf_if")
    out = k.buffer(dtypes.int32, True)
    idx = k.global_index(10)
    k.open_if(k.alu(Ops.CMPLT, idx, k.const(4)))
    k.store(out, idx, k.alu(Ops.ADD, idx, k.const(100)))
    k.close()
    return k.kernel()


VECTOR_COUNT = 5  # vectors per vector kernel


def vector(caps: Capabilities, width: int) -> SuiteKernel:
    """Vector load of `width` floats, add, lanes reversed (GEP, VECTORIZE), vector store; VECTOR_COUNT vectors."""
    vec = dtypes.float32.vec(width)
    k = KernelBuilder(caps, f"conf_vector{width}")
    out, a = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32)
    base = k.alu(Ops.MUL, k.global_index(VECTOR_COUNT), k.const(width))
    v = k.load(a, base, vec)
    summed = k.alu(Ops.ADD, v, v)
    lanes = [k.b.add(UOps.GEP, dtypes.float32, (summed,), lane) for lane in range(width)]
    k.store(out, base, k.b.add(UOps.VECTORIZE, vec, tuple(reversed(lanes))))
    return k.kernel()


def local_memory(caps: Capabilities) -> SuiteKernel:
    """GROUPS work groups each reverse their slice through local memory, with a BARRIER between write and read."""
    size = min(16, caps.local_size_max, *(caps.local_max or (16,))[:1])
    k = KernelBuilder(caps, "conf_locals")
    out, a = k.buffer(dtypes.int32, True), k.buffer(dtypes.int32)
    local = k.b.add(UOps.DEFINE_LOCAL, dtypes.int32.ptr(), (), ("temp", size))
    gid, lid = k.b.add(UOps.SPECIAL, INDEX, (), ("gidx0", GROUPS)), k.b.add(UOps.SPECIAL, INDEX, (), ("lidx0", size))
    gidx = k.alu(Ops.ADD, k.alu(Ops.MUL, gid, k.const(size)), lid)
    k.store(local, lid, k.load(a, gidx))
    k.b.add(UOps.BARRIER)
    k.store(out, gidx, k.load(local, k.alu(Ops.ADD, k.const(size - 1), k.alu(Ops.NEG, lid))))
    k.global_size, k.local_size = [GROUPS, 1, 1], [size, 1, 1]
    return k.kernel()


def symbolic_size(caps: Capabilities) -> SuiteKernel:
    """out[i] = i * step for i < n: two DEFINE_VARs, n bounding the range."""
    k = KernelBuilder(caps, "conf_symbolic")
    out = k.buffer(dtypes.int32, True)
    n, step = k.var("n", 1, SYMBOLIC_MAX), k.var("step", 1, 10)
    idx = k.global_index(n, max_size=SYMBOLIC_MAX)
    k.store(out, idx, k.alu(Ops.MUL, idx, step))
    return k.kernel()


HCQ_N = 64  # elements of the hcq layer's kernel


def add_one(caps: Capabilities) -> SuiteKernel:
    """out[i] = a[i] + 1, float32: the hcq layer's kernel."""
    k = KernelBuilder(caps, "conf_add_one")
    out, a = k.buffer(dtypes.float32, True), k.buffer(dtypes.float32)
    idx = k.global_index(HCQ_N)
    k.store(out, idx, k.alu(Ops.ADD, k.load(a, idx), k.const(1.0, dtypes.float32)))
    return k.kernel("hcq")


def _fragment_offsets(k: KernelBuilder, layout: FragmentLayout, lane: UOp, row_stride: int) -> list[UOp]:
    """Index into a row-major tile (`row_stride` elements per row) of each element of `lane`'s fragment, as the
    layout declares: the lane's bits contribute one UOp sum, each element's bits a constant."""
    lane_part: UOp = k.const(0)
    for bits, scale in ((layout.rows, row_stride), (layout.cols, 1)):
        for i, bit in enumerate(bits):
            if bit[0] == "l":
                lane_bit = k.alu(Ops.AND, k.alu(Ops.SHR, lane, k.const(int(bit[1:]))), k.const(1))
                lane_part = k.alu(Ops.ADD, lane_part, k.alu(Ops.MUL, lane_bit, k.const(scale << i)))
    offsets = []
    for elem in range(layout.elements):
        row, col = layout.coords(0, elem)  # lane 0: the element's own bits only
        offsets.append(k.alu(Ops.ADD, lane_part, k.const(row * row_stride + col)))
    return offsets


def wmma(caps: Capabilities, tc: TensorCore) -> SuiteKernel:
    """One warp, one tile: D = A @ B + C on the tensor core `tc`, A (M x K), B (K x N), C and D (M x N) row-major,
    each lane's fragments gathered and scattered through the layouts `tc` declares (so a declaration that is not the
    hardware's gives wrong numbers)."""
    m, n, kdim = tc.dims
    k = KernelBuilder(caps, "conf_wmma_" + re.sub(r"\W", "_", f"{tc.name}_{tc.dtype_in.name}_{tc.dtype_out.name}"))
    out, a, b, c = k.buffer(tc.dtype_out, True), k.buffer(tc.dtype_in), k.buffer(tc.dtype_in), k.buffer(tc.dtype_out)
    lane = k.b.add(UOps.SPECIAL, INDEX, (), ("lidx0", tc.threads))

    def fragment(buf: UOp, layout: FragmentLayout, row_stride: int, dtype: DType) -> UOp:
        values = [k.load(buf, idx) for idx in _fragment_offsets(k, layout, lane, row_stride)]
        return k.b.add(UOps.VECTORIZE, dtype.vec(len(values)), tuple(values))

    srcs = (fragment(a, tc.a, kdim, tc.dtype_in), fragment(b, tc.b, n, tc.dtype_in), fragment(c, tc.c, n, tc.dtype_out))
    result = k.b.add(UOps.WMMA, tc.dtype_out.vec(tc.c.elements), srcs, tc)
    for elem, idx in enumerate(_fragment_offsets(k, tc.c, lane, n)):
        k.store(out, idx, k.b.add(UOps.GEP, tc.dtype_out, (result,), elem))
    k.global_size, k.local_size = [1, 1, 1], [tc.threads, 1, 1]
    return k.kernel()


# ---------------------------------------------------------------------------------------------------------------------
# the list


def suite_kernels(caps: Capabilities) -> list[SuiteKernel]:
    """Every fixed kernel the suite runs on a device with `caps`, in a stable order, names unique. Kernels such a
    device skips are left out: dtypes it does not declare, vector widths it has not, local memory without
    `has_local`; one WMMA kernel per declared tensor core is in. An empty list on a device without kernels."""
    if "kernels" in dict(caps.unsupported):
        return []
    out = [elementwise_add(caps)]
    out += [reduction(caps, dtype, op) for dtype, op in REDUCE_CASES if caps.supports(dtype)]
    out += [alu(caps, op, dtype) for op, dtype in ALU_CASES if caps.supports(dtype)]
    out += [int_division(caps, op, 7) for op in (Ops.IDIV, Ops.MOD)]
    out += [cast(caps, s, d) for s, d in CAST_PAIRS if caps.supports(s) and caps.supports(d)]
    out += [cast(caps, s, d, bitcast=True) for s, d in BITCAST_PAIRS if caps.supports(s) and caps.supports(d)]
    out += [gated_load_and_store(caps), if_block(caps)]
    out += [vector(caps, width) for width in caps.vector_widths]
    out += [local_memory(caps)] if caps.has_local else []
    out += [symbolic_size(caps), add_one(caps)]
    out += [wmma(caps, tc) for tc in caps.tensor_cores]
    return out

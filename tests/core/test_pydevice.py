"""The PYTHON reference device: hand-built UOp kernels run by the interpreter, checked against numpy and `exec_alu`."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.dtype import DType, dtypes, to_np_dtype
from lazy.ops import Ops, exec_alu, truncate
from lazy.pydevice import (
    LOOP_CAPS,
    PythonAllocator,
    PythonCompiler,
    PythonProgram,
    PythonRenderer,
    lazy_devices,
    parse_kernel,
    truncator,
)

I32 = dtypes.int32
F32 = dtypes.float32


class Kernel:
    """A UOpBuilder with helpers for the shapes of kernel these tests build."""

    def __init__(self) -> None:
        self.b = UOpBuilder()
        self.params = 0

    def buf(self, dtype: DType, written: bool = False) -> UOp:
        self.params += 1
        return self.b.add(UOps.DEFINE_GLOBAL, dtype.ptr(), (), (self.params - 1, f"data{self.params - 1}", written))

    def const(self, value: object, dtype: DType = I32) -> UOp:
        return self.b.const(value, dtype)

    def loop(self, end: UOp | int, axis: int = 0) -> UOp:
        end_uop = self.const(end) if isinstance(end, int) else end
        rng = self.b.add(UOps.RANGE, I32, (self.const(0), end_uop), (axis, False))
        self.b.open_scope()
        return rng

    def end(self, rng: UOp) -> None:
        self.b.add(UOps.ENDRANGE, None, (rng,))
        self.b.close_scope()

    def load(self, buf: UOp, idx: UOp, dtype: DType, gate: UOp | None = None, alt: UOp | None = None) -> UOp:
        return self.b.add(UOps.LOAD, dtype, (buf, idx) if gate is None else (buf, idx, gate, alt))

    def store(self, buf: UOp, idx: UOp, val: UOp, gate: UOp | None = None) -> None:
        self.b.add(UOps.STORE, None, (buf, idx, val) if gate is None else (buf, idx, val, gate))

    def run(self, *arrays: np.ndarray, **launch: object) -> list[np.ndarray]:
        src = PythonRenderer().render("test_kernel", self.b.uops)
        program = PythonProgram("test_kernel", PythonCompiler().compile(src))
        bufs = [memoryview(bytearray(a.tobytes())) for a in arrays]
        program(*bufs, **launch)  # type: ignore[arg-type]
        return [np.frombuffer(b, dtype=a.dtype) for b, a in zip(bufs, arrays)]


def elementwise(op: Ops, dtype: DType, arrays: list[np.ndarray]) -> np.ndarray:
    """out[i] = op(in0[i], in1[i], ...) over a loop."""
    k = Kernel()
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dtype
    out = k.buf(out_dtype, written=True)
    ins = [k.buf(dtypes.bool if op is Ops.WHERE and j == 0 else dtype) for j in range(len(arrays))]
    rng = k.loop(len(arrays[0]))
    vals = [k.load(buf, rng, buf.dtype.base()) for buf in ins]  # type: ignore[union-attr]
    k.store(out, rng, k.b.alu(op, *vals))
    k.end(rng)
    return k.run(np.zeros(len(arrays[0]), to_np_dtype(out_dtype)), *arrays)[0]


def test_elementwise_loop_matches_numpy():
    a, b = np.random.default_rng(0).random((2, 37), dtype=np.float32)
    np.testing.assert_array_equal(elementwise(Ops.ADD, F32, [a, b]), a + b)
    np.testing.assert_array_equal(elementwise(Ops.MUL, F32, [a, b]), a * b)


def test_reduction_with_define_acc_and_assign():
    rows, cols = 5, 7
    a = np.arange(rows * cols, dtype=np.float32) * 0.5
    k = Kernel()
    out, inp = k.buf(F32, written=True), k.buf(F32)
    row = k.loop(rows)
    acc = k.b.add(UOps.DEFINE_ACC, F32, (), 0.0)
    col = k.loop(cols, axis=1)
    val = k.load(inp, k.b.alu(Ops.ADD, k.b.alu(Ops.MUL, row, k.const(cols)), col), F32)
    k.b.add(UOps.ASSIGN, F32, (acc, k.b.alu(Ops.ADD, acc, val)))
    k.end(col)
    k.store(out, row, acc)
    k.end(row)
    (result, _) = k.run(np.zeros(rows, np.float32), a)
    np.testing.assert_allclose(result, a.reshape(rows, cols).sum(axis=1))


def test_special_thread_ids_follow_the_launch_grid():
    k = Kernel()
    out = k.buf(I32, written=True)
    gid, lid = k.b.add(UOps.SPECIAL, I32, (), ("gidx0", 3)), k.b.add(UOps.SPECIAL, I32, (), ("lidx0", 4))
    idx = k.b.alu(Ops.ADD, k.b.alu(Ops.MUL, gid, k.const(4)), lid)
    k.store(out, idx, k.b.alu(Ops.MUL, idx, k.const(10)))
    (result,) = k.run(np.zeros(12, np.int32), global_size=(3, 1, 1), local_size=(4, 1, 1))
    np.testing.assert_array_equal(result, np.arange(12) * 10)
    (result,) = k.run(np.zeros(12, np.int32))  # no launch dims given: the SPECIAL sizes are the grid
    np.testing.assert_array_equal(result, np.arange(12) * 10)


ALU_CASES = [
    (Ops.ADD, I32), (Ops.MUL, I32), (Ops.IDIV, I32), (Ops.MOD, I32), (Ops.MAX, I32), (Ops.CMPLT, I32),
    (Ops.CMPNE, I32), (Ops.AND, I32), (Ops.OR, I32), (Ops.XOR, I32), (Ops.SHL, I32), (Ops.SHR, I32), (Ops.NEG, I32),
    (Ops.ADD, F32), (Ops.MUL, F32), (Ops.MAX, F32), (Ops.CMPLT, F32), (Ops.NEG, F32), (Ops.EXP2, F32),
    (Ops.LOG2, F32), (Ops.SIN, F32), (Ops.SQRT, F32), (Ops.RECIP, F32), (Ops.MULACC, F32), (Ops.WHERE, F32),
    (Ops.ADD, dtypes.int8), (Ops.MUL, dtypes.uint8), (Ops.ADD, dtypes.float16), (Ops.MUL, dtypes.bfloat16),
    (Ops.ADD, dtypes.uint64), (Ops.MUL, dtypes.int64), (Ops.ADD, dtypes.float64),
]  # fmt: skip


@pytest.mark.parametrize("op,dtype", ALU_CASES, ids=lambda x: getattr(x, "name", None))
def test_alu_matches_exec_alu(op: Ops, dtype: DType):
    rng = np.random.default_rng(1)
    arity = (
        1
        if op in (Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP)
        else 3
        if op in (Ops.MULACC, Ops.WHERE)
        else 2
    )
    if dtypes.is_float(dtype):
        raw = [rng.uniform(0.1, 4.0, 16) for _ in range(arity)]
    else:
        hi = 7 if op in (Ops.SHL, Ops.SHR) else 100
        lo = 0 if op in (Ops.SHL, Ops.SHR) or dtypes.is_unsigned(dtype) else -100
        raw = [rng.integers(lo, hi, 16) for _ in range(arity)]
    if op is Ops.WHERE:
        raw[0] = raw[0] > 2
    if op in (Ops.IDIV, Ops.MOD):
        raw[1][raw[1] == 0] = 3
    values = [[truncate(v, dtypes.bool if op is Ops.WHERE and j == 0 else dtype) for v in r.tolist()]
              for j, r in enumerate(raw)]  # fmt: skip
    arrays = [_to_np(v, dtypes.bool if op is Ops.WHERE and j == 0 else dtype) for j, v in enumerate(values)]
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dtype
    expected = [exec_alu(op, out_dtype, list(operands)) for operands in zip(*values)]
    got = _from_np(elementwise(op, dtype, arrays), out_dtype)
    assert got == expected


def _to_np(values: list, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return (np.array(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.array(values, to_np_dtype(dtype))


def _from_np(array: np.ndarray, dtype: DType) -> list:
    if dtype == dtypes.bfloat16:
        return ((array.astype(np.uint32) << 16).view(np.float32)).astype(np.float64).tolist()
    return array.tolist()


def test_idiv_and_mod_truncate_toward_zero_like_c():
    a = np.array([-7, 7, -7, 7, -1, 0], np.int32)
    b = np.array([2, -2, -2, 2, 5, 3], np.int32)
    np.testing.assert_array_equal(elementwise(Ops.IDIV, I32, [a, b]), [-3, -3, 3, 3, 0, 0])
    np.testing.assert_array_equal(elementwise(Ops.MOD, I32, [a, b]), [-1, 1, -1, 1, -1, 0])


def unary_kernel(kind: UOps, src_dtype: DType, dst_dtype: DType, array: np.ndarray, out_len: int) -> np.ndarray:
    k = Kernel()
    out, inp = k.buf(dst_dtype, written=True), k.buf(src_dtype)
    rng = k.loop(out_len)
    k.store(out, rng, k.b.add(kind, dst_dtype, (k.load(inp, rng, src_dtype),)))
    k.end(rng)
    return k.run(np.zeros(out_len, to_np_dtype(dst_dtype)), array)[0]


def test_cast_float_to_int_truncates_toward_zero():
    a = np.array([-2.7, -0.5, 0.5, 2.7, 100.9], np.float32)
    np.testing.assert_array_equal(unary_kernel(UOps.CAST, F32, I32, a, 5), [-2, 0, 0, 2, 100])
    np.testing.assert_array_equal(unary_kernel(UOps.CAST, F32, dtypes.bool, a, 5), [True] * 5)
    np.testing.assert_array_equal(unary_kernel(UOps.CAST, I32, dtypes.uint8, np.array([-1, 256, 3], np.int32), 3),
                                  [255, 0, 3])  # fmt: skip


def test_half_and_bfloat16_memory_round_trip():
    a = np.array([0.1, -2.5, 65504, 1e-3], np.float32)
    np.testing.assert_array_equal(unary_kernel(UOps.CAST, F32, dtypes.float16, a, 4), a.astype(np.float16))
    bits = unary_kernel(UOps.CAST, F32, dtypes.bfloat16, a, 4)
    expected = [struct.unpack("I", struct.pack("f", truncate(float(v), dtypes.bfloat16)))[0] >> 16 for v in a]
    np.testing.assert_array_equal(bits, expected)


def test_bitcast_matches_numpy_view():
    a = np.array([1.0, -2.5, 3.25e-3, 0.0], np.float32)
    np.testing.assert_array_equal(unary_kernel(UOps.BITCAST, F32, I32, a, 4), a.view(np.int32))
    h = np.array([1.0, -0.5, 7.0], np.float16)
    np.testing.assert_array_equal(unary_kernel(UOps.BITCAST, dtypes.float16, dtypes.int16, h, 3), h.view(np.int16))


def test_gated_load_and_store():
    k = Kernel()
    out, inp = k.buf(I32, written=True), k.buf(I32)
    rng = k.loop(8)
    gate = k.b.alu(Ops.CMPLT, rng, k.const(5))
    val = k.load(inp, rng, I32, gate, k.const(-1))
    k.store(out, rng, val, k.b.alu(Ops.CMPNE, k.b.alu(Ops.MOD, rng, k.const(2)), k.const(1)))
    k.end(rng)
    (result, _) = k.run(np.full(8, 99, np.int32), np.arange(5, dtype=np.int32))  # input shorter: gate guards it
    np.testing.assert_array_equal(result, [0, 99, 2, 99, 4, 99, -1, 99])


@pytest.mark.parametrize("width", [2, 4])
def test_vector_load_store_gep_vectorize(width: int):
    k = Kernel()
    vec = F32.vec(width)
    out, inp = k.buf(F32, written=True), k.buf(F32)
    rng = k.loop(3)
    base = k.b.alu(Ops.MUL, rng, k.const(width))
    v = k.load(inp, base, vec)
    doubled = k.b.alu(Ops.ADD, v, v)
    lanes = [k.b.add(UOps.GEP, F32, (doubled,), lane) for lane in range(width)]
    k.store(out, base, k.b.add(UOps.VECTORIZE, vec, tuple(reversed(lanes))))
    k.end(rng)
    a = np.arange(3 * width, dtype=np.float32)
    (result, _) = k.run(np.zeros_like(a), a)
    np.testing.assert_array_equal(result, (a * 2).reshape(3, width)[:, ::-1].reshape(-1))


def test_local_memory_and_barrier_reverse_each_group():
    groups, size = 3, 8
    k = Kernel()
    out, inp = k.buf(I32, written=True), k.buf(I32)
    local = k.b.add(UOps.DEFINE_LOCAL, I32.ptr(), (), ("temp", size))
    gid, lid = k.b.add(UOps.SPECIAL, I32, (), ("gidx0", groups)), k.b.add(UOps.SPECIAL, I32, (), ("lidx0", size))
    gidx = k.b.alu(Ops.ADD, k.b.alu(Ops.MUL, gid, k.const(size)), lid)
    k.store(local, lid, k.load(inp, gidx, I32))
    k.b.add(UOps.BARRIER)
    k.store(out, gidx, k.load(local, k.b.alu(Ops.ADD, k.const(size - 1), k.b.alu(Ops.NEG, lid)), I32))
    a = np.arange(groups * size, dtype=np.int32)
    (result, _) = k.run(np.zeros_like(a), a, global_size=(groups, 1, 1), local_size=(size, 1, 1))
    np.testing.assert_array_equal(result, a.reshape(groups, size)[:, ::-1].reshape(-1))


def test_define_var_is_a_symbolic_size():
    k = Kernel()
    out = k.buf(I32, written=True)
    n = k.b.add(UOps.DEFINE_VAR, I32, (), ("n", 1, 10))
    rng = k.loop(n)
    k.store(out, rng, k.b.alu(Ops.ADD, rng, k.const(1)))
    k.end(rng)
    for size in (3, 7):
        (result,) = k.run(np.zeros(10, np.int32), vals=(size,))
        np.testing.assert_array_equal(result, [*range(1, size + 1), *[0] * (10 - size)])


def test_const_defined_in_a_loop_is_usable_after_it():
    k = Kernel()
    out = k.buf(I32, written=True)
    rng = k.loop(4)
    late = k.const(42)  # first made inside the loop body
    k.store(out, rng, late)
    k.end(rng)
    k.store(out, k.const(0), late)
    (result,) = k.run(np.zeros(4, np.int32))
    np.testing.assert_array_equal(result, [42] * 4)


def test_if_endif_skips_the_block():
    k = Kernel()
    out = k.buf(I32, written=True)
    rng = k.loop(6)
    cond = k.b.add(UOps.IF, None, (k.b.alu(Ops.CMPLT, rng, k.const(3)),))
    k.store(out, rng, k.const(7))
    k.b.add(UOps.ENDIF, None, (cond,))
    k.end(rng)
    (result,) = k.run(np.zeros(6, np.int32))
    np.testing.assert_array_equal(result, [7, 7, 7, 0, 0, 0])


def test_out_of_bounds_access_is_an_error():
    k = Kernel()
    out = k.buf(I32, written=True)
    rng = k.loop(5)
    k.store(out, rng, rng)
    k.end(rng)
    with pytest.raises(IndexError, match="out of bounds"):
        k.run(np.zeros(4, np.int32))


def test_source_round_trips():
    k = Kernel()
    out = k.buf(F32.vec(4).scalar(), written=True)
    consts = [k.const(v, F32) for v in (math.nan, math.inf, -math.inf, -0.0, 1e-30)]
    k.const((1.0, 2.0), F32.vec(2))
    k.b.add(UOps.DEFINE_LOCAL, dtypes.half.ptr(), (), ("tmp\t1", 4))
    k.store(out, k.const(0), k.b.alu(Ops.MAX, consts[0], consts[1]))
    src = PythonRenderer().render("round_trip", k.b.uops)
    parsed = parse_kernel(src)
    assert PythonRenderer().render("round_trip", parsed) == src
    assert [(u.op, u.dtype) for u in parsed] == [(u.op, u.dtype) for u in k.b.uops]
    assert math.copysign(1, parsed[4].arg) == -1


def test_compile_refuses_unreadable_source():
    from lazy.device import CompileError

    with pytest.raises(CompileError, match="not a literal"):
        PythonCompiler().compile("0\tCONST\tdtypes.int\t\t__import__('os')\n")


FLOAT_OR_INT = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans())


@given(FLOAT_OR_INT)
def test_fast_truncators_equal_ops_truncate(value: object):
    for dtype in dtypes.fields().values():
        try:
            want = truncate(value, dtype)
        except Exception as e:  # the reference itself refuses (ints past float16's range): so must the fast path
            with pytest.raises(type(e)):
                truncator(dtype)(value)
            continue
        got = truncator(dtype)(value)
        assert type(got) is type(want) and (got == want or (got != got and want != want)), (dtype, value)


def test_allocator_views_offsets_and_transfers():
    alloc = PythonAllocator()
    buf = alloc.alloc(16)
    alloc._copyin(buf, memoryview(bytes(range(16))))
    sub = alloc._offset(buf, 4, 8)
    assert bytes(sub) == bytes(range(8, 12))
    sub[0] = 200
    assert alloc._as_buffer(buf)[8] == 200  # a sub-buffer shares memory with its base
    other = alloc.alloc(16)
    alloc._transfer(other, buf, 16, None, None)
    out = memoryview(bytearray(16))
    alloc._copyout(out, other)
    assert bytes(out) == bytes(buf)
    assert all(alloc.supports(c) for c in ("as_buffer", "offset", "transfer"))


def test_registered_as_a_never_default_device():
    (spec,) = lazy_devices()
    assert spec.name == "PYTHON" and spec.priority == 0 and not spec.default_ok
    assert spec.probe()[0]
    dev = spec.open("PYTHON")
    assert dev.renderer.caps.has_threads and not dev.renderer.caps.core_split
    assert not PythonRenderer(threads=False).caps.has_threads and PythonRenderer(threads=False).caps is LOOP_CAPS

"""64-bit index arithmetic (issue 8): a kernel computes its sizes, loop counters, thread ids and buffer indices in
int32 unless the symbolic bounds say one of those values (or a step computing it) can pass 2**31 - 1, and in int64
then. Lowering and rendering only for the kernels of 2**31 + 5 elements (nothing that large runs here), and small
runs on the PYTHON reference device."""

from __future__ import annotations

import numpy as np
import pytest

from lazy import Context, Tensor, Variable, dtypes
from lazy.codegen.kernel import Kernel
from lazy.codegen.lowerer import IndexOverflow, Lowerer, lower_kernel
from lazy.codegen.program import get_program
from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import ProgramSpec
from lazy.dtype import DType
from lazy.ops import LazyOp, Ops
from lazy.pydevice import LOOP_CAPS, PythonCompiler, PythonProgram, PythonRenderer
from lazy.renderer import Capabilities
from lazy.renderer.cstyle import CStyleLanguage
from lazy.symbolic import Node

N = 2**31 + 5  # one more element than int32 can count to, and a few
# (sums below are over shape (1, N): two reduced axes, which `LazyBuffer._split_reduce` leaves whole, so one kernel
# loops over all N)


@pytest.fixture(autouse=True)
def python_device():
    with Context(DEVICE="PYTHON"):
        yield


class LoopC(CStyleLanguage):
    """The shared C-style renderer as a CPU-like device would use it: loops, no vectors, [lo, hi) core split."""

    caps = Capabilities(core_split=True)


RENDERERS = {"threads": PythonRenderer(threads=True), "loops": PythonRenderer(threads=False), "C": LoopC()}


def ast_of(out: Tensor) -> LazyOp:
    return out.schedule()[-1].ast


def index_uops(uops: list[UOp]) -> list[UOp]:
    """Every UOp that holds an index value: loops, thread ids, parameters, and the index operand of loads/stores."""
    held = [u for u in uops if u.op in (UOps.RANGE, UOps.SPECIAL, UOps.DEFINE_VAR)]
    return held + [u.src[1] for u in uops if u.op in (UOps.LOAD, UOps.STORE)]


def index_dtypes(spec: ProgramSpec) -> set[DType | None]:
    assert spec.uops is not None
    return {u.dtype for u in index_uops(spec.uops)}


# ---------------------------------------------------------------------------------------------------------------------
# which kernels get which index dtype


@pytest.mark.parametrize("renderer", RENDERERS.values(), ids=RENDERERS.keys())
def test_small_kernels_keep_int32_indices(renderer):
    x = Tensor.empty(1000, dtype=dtypes.int8)
    for out in (x + 1, x.flip(0)[::3] * 2, x.cast(dtypes.int64).sum(), x.pad(((3, 4),)).sum()):
        assert index_dtypes(get_program(ast_of(out), renderer)) == {dtypes.int32}


@pytest.mark.parametrize("renderer", RENDERERS.values(), ids=RENDERERS.keys())
def test_a_reduction_over_more_than_2_31_elements_counts_in_int64(renderer):
    spec = get_program(ast_of(Tensor.empty(1, N, dtype=dtypes.int64).sum()), renderer)  # (a constant's sum folds)
    assert index_dtypes(spec) == {dtypes.int64}
    ranges = [u for u in spec.uops or [] if u.op is UOps.RANGE]
    assert [u.src[1].arg for u in ranges] == [N]  # the loop end is N itself, not N wrapped to a negative int32


def test_an_elementwise_kernel_of_2_31_threads_has_int64_thread_ids():
    spec = get_program(ast_of(Tensor.empty(N, dtype=dtypes.int8) + 1), RENDERERS["threads"])
    specials = [u for u in spec.uops or [] if u.op is UOps.SPECIAL]
    assert specials and {u.dtype for u in specials} == {dtypes.int64} == index_dtypes(spec)
    assert spec.global_size is not None and spec.global_size[0] * (spec.local_size or [1])[0] == N


def test_the_core_split_bounds_are_int64_when_the_outer_loop_is_that_long():
    spec = get_program(ast_of(Tensor.empty(N, dtype=dtypes.int8) + 1), RENDERERS["C"])
    assert spec.core_split == N
    params = [u for u in spec.uops or [] if u.op is UOps.DEFINE_VAR]
    assert [(u.arg[0], u.dtype) for u in params] == [("core_lo", dtypes.int64), ("core_hi", dtypes.int64)]


@pytest.mark.parametrize("view", ["strided", "flipped", "padded"])
def test_a_small_output_that_reads_far_into_a_large_buffer_indexes_in_int64(view):
    x = Tensor.empty(N, dtype=dtypes.int8)
    out = {"strided": x[N - 7 :: 2], "flipped": x.flip(0)[:4], "padded": x.pad(((0, 2),))[N - 2 :]}[view] + 1
    assert out.numel() == 4
    for renderer in RENDERERS.values():
        spec = get_program(ast_of(out), renderer)
        assert dtypes.int64 in index_dtypes(spec) and dtypes.int32 not in index_dtypes(spec)


def test_a_partial_sum_that_does_not_fit_makes_the_kernel_int64():
    """x*(2**31-1) + y*(2**31-1) - 2**31 fits int32 at both ends, but its first two terms add up to 2**32 - 2."""
    k = Kernel(ast_of(Tensor.empty(4) + 1), LOOP_CAPS)
    x, y = Variable("x", 0, 1), Variable("y", 0, 1)
    expr = x * (2**31 - 1) + y * (2**31 - 1) - 2**31
    assert isinstance(expr, Node) and dtypes.min(dtypes.int32) <= expr.min and expr.max <= dtypes.max(dtypes.int32)
    for dtype, fits in ((dtypes.int32, False), (dtypes.int64, True)):
        lowerer = Lowerer(k, dtype)
        for v in (x, y):
            lowerer.var_uops[v] = lowerer.b.add(UOps.DEFINE_VAR, dtype, (), (v.expr, v.min, v.max))
        if fits:
            assert lowerer.node(expr).dtype == dtypes.int64
        else:
            with pytest.raises(IndexOverflow, match="does not fit int"):
                lowerer.node(expr)


def test_an_index_beyond_int64_is_refused_with_a_message():
    k = Kernel(ast_of(Tensor.empty(2**63 + 1, dtype=dtypes.int8) + 1), LOOP_CAPS)
    with pytest.raises(IndexOverflow, match=r"cannot be indexed: .* does not fit int64; smaller sizes"):
        lower_kernel(k)
    # a reduction that long is refused where it is built (it would never finish); a constant's sum is its product
    with pytest.raises(ValueError, match=r"would count past int64 and never finish"):
        Tensor.empty(1, 2**63 + 1, dtype=dtypes.int64).sum()
    assert Tensor.ones(2**40, 2**30).sum().item() == 2.0**70


# ---------------------------------------------------------------------------------------------------------------------
# rendering: the C-style renderer follows the UOps' dtypes; int parameters are passed as 64-bit integers


def test_c_source_of_a_large_reduction_uses_long_long_and_of_a_small_one_int():
    big = get_program(ast_of(Tensor.empty(1, N, dtype=dtypes.int64).sum()), LoopC()).src
    assert f"for (long long ridx0 = 0ll; ridx0 < {N}ll; ridx0++)" in big
    small = get_program(ast_of(Tensor.empty(1000, dtype=dtypes.int64).sum()), LoopC()).src
    assert "for (int ridx0 = 0; ridx0 <" in small and "long long ridx" not in small


def test_c_int_parameters_are_64_bit_and_narrowed_inside_an_int32_kernel():
    def src_of(bound: int) -> str:
        v = Variable("n", 1, bound).bind(3)
        return get_program(ast_of(Tensor.ones(bound, dtype=dtypes.int64).shrink(((0, v),)).sum()), LoopC()).src

    small, big = src_of(100), src_of(2**40)
    assert "const long long n)" in small and "ridx0 < ((int)n);" in small
    assert "const long long n)" in big and "ridx0 < n;" in big


# ---------------------------------------------------------------------------------------------------------------------
# the PYTHON reference device: int64 index math must not wrap at 32 bits, int32 index math wraps like C's


def test_a_variable_with_a_bound_past_2_31_lowers_in_int64_and_runs():
    for bound in (100, 2**40):
        v = Variable("n", 1, bound).bind(3)
        out = Tensor.ones(bound, dtype=dtypes.int64).shrink(((0, v),)).sum()
        spec = get_program(ast_of(out), PythonRenderer())
        assert index_dtypes(spec) == {dtypes.int32 if bound == 100 else dtypes.int64}
        assert out.item() == 3


def run_python(uops: list[UOp], out: np.ndarray) -> np.ndarray:
    program = PythonProgram("k", PythonCompiler().compile(PythonRenderer(threads=False).render("k", uops)))
    buf = memoryview(bytearray(out.tobytes()))
    program(buf)
    return np.frombuffer(buf, dtype=out.dtype)


@pytest.mark.parametrize("index", [dtypes.int32, dtypes.int64])
def test_python_device_index_arithmetic_wraps_exactly_at_its_dtype(index):
    """out[i] = start + i for a loop counter near the top of int32: int64 counts on, int32 wraps as C's would."""
    start = 2**31 - 2
    b = UOpBuilder()
    out = b.add(UOps.DEFINE_GLOBAL, dtypes.int64.ptr(), (), (0, "data0", True))
    rng = b.add(UOps.RANGE, index, (b.const(0, index), b.const(4, index)), (0, False))
    b.open_scope()
    value = b.alu(Ops.ADD, rng, b.const(start, index))
    b.add(UOps.STORE, None, (out, rng, b.add(UOps.CAST, dtypes.int64, (value,)) if index != dtypes.int64 else value))
    b.add(UOps.ENDRANGE, None, (rng,))
    got = run_python(b.uops, np.zeros(4, np.int64)).tolist()
    wide = [start + i for i in range(4)]
    assert got == (wide if index == dtypes.int64 else [v - 2**32 if v > 2**31 - 1 else v for v in wide])

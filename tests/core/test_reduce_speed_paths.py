"""The fast paths of reductions (issue 10, item 4): softmax, log_softmax and layernorm in at most three kernels; row
reductions (every input contiguous or broadcast along the reduce axis) unrolled into vector accumulators whose lanes
are combined after the loop; and numpy's numbers (to float32 rounding) over odd, empty and large sizes, on the PYTHON
reference device's loop-style renderer (vector widths 2 and 4, like a CPU plugin) and on the CPU device (a real
compiler, 4 to 16 lanes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pytest

from lazy import Tensor
from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps
from lazy.codegen.lowerer import choose_vector_axis, lower_kernel
from lazy.codegen.program import build_kernel, get_program
from lazy.codegen.uops import UOps
from lazy.dtype import dtypes
from lazy.engine.realize import CompiledRunner, ExecItem
from lazy.helpers import prod
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.pydevice import PythonRenderer

LOOPS = PythonRenderer(threads=False)  # loop-style, vector widths (2, 4): what a CPU plugin's kernels look like


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- references --------------------------------------------------------------------------------------------------------


def np_softmax(a: np.ndarray, axis: int) -> np.ndarray:
    if a.size == 0:
        return a.astype(np.float64)
    e = np.exp(a.astype(np.float64) - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_layernorm(a: np.ndarray, axis: int) -> np.ndarray:
    if a.size == 0:
        return a.astype(np.float64)
    y = a.astype(np.float64) - a.astype(np.float64).mean(axis, keepdims=True)
    return y / np.sqrt((y * y).mean(axis, keepdims=True) + 1e-5)


@dataclass(frozen=True)
class Case:
    """A reduction, its float64 numpy reference and what float32 arithmetic allows."""

    name: str
    run: Callable[[Tensor, int], Tensor]
    ref: Callable[[np.ndarray, int], np.ndarray]
    rtol: float
    atol: Callable[[np.ndarray, int], float]

    def check(self, got: np.ndarray, a: np.ndarray, axis: int, what: str) -> None:
        want = self.ref(a, axis)
        assert got.shape == want.shape, f"{self.name} {what}: shape {got.shape}, numpy {want.shape}"
        np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol(a, axis), err_msg=f"{self.name} {what}")


def sum_atol(a: np.ndarray, axis: int) -> float:
    """Rounding of a float32 sum: a few units of the sum of magnitudes (cancellation makes a relative bound useless)."""
    return 4e-6 * float(np.abs(a.astype(np.float64)).sum(axis).max(initial=1.0))


CASES = {
    c.name: c
    for c in [
        Case("softmax", lambda t, ax: t.softmax(ax), np_softmax, 2e-5, lambda a, ax: 1e-7),
        Case(
            "log_softmax",
            lambda t, ax: t.log_softmax(ax),
            lambda a, ax: np.log(np_softmax(a, ax)),
            2e-5,
            lambda a, ax: 2e-5,
        ),  # fmt: skip
        Case("layernorm", lambda t, ax: t.layernorm(ax), np_layernorm, 2e-5, lambda a, ax: 2e-5),
        Case("sum", lambda t, ax: t.sum(ax), lambda a, ax: a.astype(np.float64).sum(ax), 0.0, sum_atol),
        Case("max", lambda t, ax: t.max(ax), lambda a, ax: a.max(ax), 0.0, lambda a, ax: 0.0),
    ]
}


# -- running kernels built for the loop-style renderer ---------------------------------------------------------------


def kernels(*outs: Tensor) -> list:
    return [si for si in outs[0].schedule(*outs[1:]) if si.ast.op is Ops.SINK]


def reduce_kernels(t: Tensor) -> list[Kernel]:
    """The reduce kernels of `t`'s schedule, optimised as the loop-style renderer's heuristics choose."""
    asts = [si.ast for si in kernels(t)]
    return [build_kernel(ast, LOOPS) for ast in asts if any(n.op in (Ops.SUM, Ops.RMAX) for n in ast.toposort())]


def run_loop_style(out: Tensor) -> np.ndarray:
    """Realize `out` (its inputs realized already) with every kernel built for the loop-style renderer."""
    base = out.lazydata.base
    if base.op is Ops.CONST or base.realized is not None:  # nothing to compute (a sum over no or one element)
        return out.numpy()
    result = None
    for si in out.schedule():
        assert si.ast.op is Ops.SINK, f"only kernels expected, got {si.kind}"
        ExecItem(CompiledRunner(get_program(si.ast, LOOPS), Device["PYTHON"]), list(si.bufs), dict(si.var_vals)).run()
        if any(o is base for o in si.outputs):
            result = si.bufs[0].numpy()
    assert result is not None and out.lazydata.st.contiguous, "expected a plain reshape of the last kernel's output"
    return result.reshape(out.shape)


# -- kernel counts -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 6), (64, 1025), (3, 4096), (1, 7), (1024, 16), (2, 32767)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm"])
def test_softmax_family_is_three_kernels(name, shape):
    """A max (or mean) pass, a sum pass and the elementwise result: no kernel of its own adds the two partial sums
    of softmax or realizes a selector (rows up to the length a reduction is split into partials at)."""
    x = Tensor(rng().standard_normal(shape).astype(np.float32), device="PYTHON").realize()
    for axis in (-1, 0):
        assert len(kernels(CASES[name].run(x, axis))) <= 3, f"{name} over axis {axis} of {shape}"


def test_a_reduce_used_twice_by_one_expression_fuses():
    """Elementwise ops that use a reduce's result more than once (`m.isinf().where(0, m)` in logsumexp, `r * r + r`,
    the zero-variance guard of std) join the reduce's kernel when they all lead to one realized buffer; two
    realized consumers still get the reduce realized once."""
    a = rng(7).standard_normal((4, 6)).astype(np.float32)
    x = Tensor(a, device="PYTHON").realize()
    r = x.sum(1)
    assert len(kernels(r * r + r)) == 1
    np.testing.assert_allclose((r * r + r).numpy(), a.sum(1) ** 2 + a.sum(1), rtol=1e-5)
    assert len(kernels(x.logsumexp(1))) == 3  # max (with its guard), the exp-sum, the log
    shifted = a.astype(np.float64) - a.max(1, keepdims=True)
    np.testing.assert_allclose(x.logsumexp(1).numpy(), np.log(np.exp(shifted).sum(1)) + a.max(1), rtol=1e-6)
    assert len(kernels(x.std(1))) == 2  # the mean, then the variance with its guard and sqrt
    np.testing.assert_allclose(x.std(1).numpy(), a.std(1, ddof=1), rtol=1e-5)
    assert len(kernels(r * 2, r + 1)) == 3  # two realized consumers: the sum is realized for both


# -- vector accumulators along the reduce axis -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm", "sum", "max"])
def test_row_reductions_keep_vector_accumulators(name):
    """Each pass over a row (max, the exp-sum of softmax, the mean and variance of layernorm, a plain row sum) reads
    its input contiguously along the reduce axis: it is unrolled by the widest vector width and accumulated in
    vectors, whose lanes are combined after the loop."""
    a = rng(1).standard_normal((3, 64)).astype(np.float32)
    out = CASES[name].run(Tensor(a, device="PYTHON").realize(), -1)
    passes = reduce_kernels(out)
    assert passes, "a row reduction makes at least one reduce kernel"
    for k in passes:
        assert 4 in [k.full_shape[i] for i in k.axes(Axis.UNROLL)], f"{k}: the reduce axis is not unrolled by 4"
        accs = [u.dtype for u in lower_kernel(k)[0] if u.op is UOps.DEFINE_ACC]
        assert accs and all(d is not None and d.count == 4 for d in accs), f"{k}: accumulators {accs}"
    CASES[name].check(run_loop_style(out), a, -1, "of (3, 64)")


def test_column_reductions_keep_output_lanes():
    """A reduce over the outer axis is contiguous along its output: the output axis is the vector, not the reduce
    axis (whose loads are strided)."""
    a = rng(2).standard_normal((16, 8)).astype(np.float32)
    out = Tensor(a, device="PYTHON").realize().sum(0)
    (k,) = reduce_kernels(out)
    axis, width = choose_vector_axis(k)
    assert axis is not None and k.kinds[axis] is Axis.UPCAST and width == 4, k
    CASES["sum"].check(run_loop_style(out), a, 0, "of (16, 8)")


def test_strided_reduce_axis_is_not_vectorized():
    """A reduce axis no input is contiguous along (a transposed view) gets no vector lanes: its loads would be
    gathers of single elements."""
    a = rng(3).standard_normal((64, 3)).astype(np.float32)
    out = Tensor(a, device="PYTHON").realize().T.sum(1)
    (k,) = reduce_kernels(out)
    assert choose_vector_axis(k) == (None, 1), k
    CASES["sum"].check(run_loop_style(out), a.T, 1, "of a transposed (64, 3)")


def test_short_heavy_reductions_gather_output_lanes():
    """The exp-sum passes of a softmax over a few classes (read along rows: each output's inputs are strided along
    the output axis, and 10 classes fill no vector) compute their exp2 polynomial on vectors of outputs, each lane's
    input loaded on its own (`gathered_output_lanes`); a cheap body over the same layout (a plain row sum) and a
    device with a native exp2 (the PYTHON device) keep their scalar loops."""
    a = (rng(8).standard_normal((64, 10)) * 4).astype(np.float32)
    cpu = Device["CPU"].renderer
    assert Ops.EXP2 not in cpu.caps.native_math and max(cpu.caps.vector_widths) >= 4, "the CPU lowers exp2 itself"
    x = Tensor(a, device="CPU").realize()
    for out in (x.softmax(-1), x.log_softmax(-1)):
        asts = [si.ast for si in kernels(out)]
        heavy = [build_kernel(ast, cpu) for ast in asts if _reduces_exp(ast)]
        assert heavy, "an exp-sum pass"
        for k in heavy:
            axis, width = choose_vector_axis(k)
            assert axis is not None and k.kinds[axis] is Axis.UPCAST and width == max(cpu.caps.vector_widths), k
    (plain,) = [build_kernel(si.ast, cpu) for si in kernels(x.sum(-1))]
    assert choose_vector_axis(plain)[1] < max(cpu.caps.vector_widths), plain
    (loops,) = [k for k in reduce_kernels(Tensor(a, device="PYTHON").realize().softmax(-1)) if _reduces_exp(k.ast)]
    assert Axis.UPCAST not in loops.kinds or choose_vector_axis(loops)[1] < 4, loops


def test_int_labels_bool_constants_and_bool_data_keep_vector_lanes():
    """The cross entropy's backward compares int32 labels with the classes under a mask that is all true (a bool
    constant): both vectorize (int lanes compared, the mask a constant vector). A bool tensor in memory vectorizes
    too: its bytes are loaded one per lane into a compare's vector (int lanes of 0 or 1)."""
    a = (rng(11).standard_normal((64, 10)) * 4).astype(np.float32)
    labels = rng(12).integers(0, 10, 64).astype(np.int32)
    cpu = Device["CPU"].renderer
    x = Tensor(a, device="CPU", requires_grad=True)
    y = Tensor(labels, device="CPU").realize()
    x.sparse_categorical_crossentropy(y).backward()
    assert x.grad is not None
    uses_labels = [
        build_kernel(si.ast, cpu)
        for si in kernels(x.grad)
        if any(b.arg.dtype == dtypes.int32 for b in si.ast.toposort() if b.op is Ops.LOAD) and _reduces_exp(si.ast)
    ]
    assert uses_labels, "a reduce kernel of the gradient reads the labels"
    for k in uses_labels:
        assert choose_vector_axis(k)[0] is not None, k
    p = np_softmax(a, -1)
    np.testing.assert_allclose(x.grad.numpy(), (p - np.eye(10)[labels]) / 64, rtol=2e-4, atol=2e-6)
    mask = rng(13).random((64, 10)) < 0.5
    m = Tensor(mask, device="CPU").realize()
    out = m.where(Tensor(a, device="CPU").exp(), 0).sum(-1)
    (k,) = [build_kernel(si.ast, cpu) for si in kernels(out)]
    assert choose_vector_axis(k)[0] is not None, k
    np.testing.assert_allclose(out.numpy(), np.where(mask, np.exp(a.astype(np.float64)), 0).sum(-1), rtol=2e-5)


MASKED = {
    "where": (lambda m, a, b: m.where(a, -1.5), lambda m, a, b: np.where(m, a, -1.5)),
    "transposed": (lambda m, a, b: m.T.where(a.T, 0), lambda m, a, b: np.where(m.T, a.T, 0)),
    "strided": (lambda m, a, b: m[:, ::2].where(a[:, ::2], 2), lambda m, a, b: np.where(m[:, ::2], a[:, ::2], 2)),
    "padded": (lambda m, a, b: m.pad(((1, 2), (3, 0))).where(a.pad(((1, 2), (3, 0))), 5),
               lambda m, a, b: np.where(np.pad(m, ((1, 2), (3, 0))), np.pad(a, ((1, 2), (3, 0))), 5)),
    "row sum": (lambda m, a, b: m.where(a, 0).sum(1), lambda m, a, b: np.where(m, a, 0).sum(1)),
    "column sum": (lambda m, a, b: m.where(a, 0).sum(0), lambda m, a, b: np.where(m, a, 0).sum(0)),
    "row max": (lambda m, a, b: m.where(a, -np.inf).max(1), lambda m, a, b: np.where(m, a, -np.inf).max(1)),
    "matmul": (lambda m, a, b: m[:, : b.shape[1]].where(a @ b, 0),
               lambda m, a, b: np.where(m[:, : b.shape[1]], a @ b, 0)),
}  # fmt: skip


@pytest.mark.parametrize("n", [1, 7, 8, 17, 33, 100])
@pytest.mark.parametrize("name", list(MASKED))
def test_bool_data_in_vector_kernels_reads_every_lane(name, n):
    """Kernels that read a bool tensor (a mask: `where`, a masked sum or max, a matmul's masked result) take vector
    lanes and still read each element's own byte: transposed, strided and padded masks, sizes off every vector width."""
    gen = rng(n)
    a = gen.standard_normal((n, n + 3)).astype(np.float32)
    mask = gen.random((n, n + 3)) < 0.5
    b = gen.standard_normal((n + 3, min(n, 5))).astype(np.float32)
    run, ref = MASKED[name]
    want = ref(mask, a.astype(np.float64), b.astype(np.float64))
    got = run(
        Tensor(mask, device="CPU").realize(), Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5 * max(1.0, n))
    loop = run(*(Tensor(v, device="PYTHON").realize() for v in (mask, a, b)))
    np.testing.assert_allclose(run_loop_style(loop), want, rtol=1e-5, atol=1e-5 * max(1.0, n))


def test_masked_kernels_take_vector_lanes():
    """A `where` over a bool mask and a matmul whose result a bool mask selects from (causal attention's scores)
    vectorize on the CPU: before, a loaded bool kept the whole kernel scalar (the matmul 10x slower, the `where` a
    branch per element)."""
    cpu = Device["CPU"].renderer
    gen = rng(21)
    mask = Tensor(gen.random((64, 64)) < 0.5, device="CPU").realize()
    a = Tensor(gen.standard_normal((64, 64)).astype(np.float32), device="CPU").realize()
    for out in (mask.where(a, 0), mask.where(a @ a, -np.inf)):
        (k,) = [build_kernel(si.ast, cpu) for si in kernels(out)]
        assert any(b.dtype == dtypes.bool for b in k.bufs), k
        assert choose_vector_axis(k)[0] is not None, k
    q = Tensor(gen.standard_normal((2, 64, 16)).astype(np.float32), device="CPU").realize()
    causal = q.scaled_dot_product_attention(q, q, is_causal=True)
    scores = [build_kernel(si.ast, cpu) for si in kernels(causal) if any(
        n.op is Ops.LOAD and n.arg.dtype == dtypes.bool for n in si.ast.toposort())]  # fmt: skip
    assert scores and all(choose_vector_axis(k)[0] is not None for k in scores), scores
    qn = q.numpy().astype(np.float64)
    s = np.where(np.triu(np.ones((64, 64), bool), 1), -np.inf, qn @ qn.transpose(0, 2, 1) / 4)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(causal.numpy(), (p / p.sum(-1, keepdims=True)) @ qn, rtol=1e-4, atol=1e-5)


def test_small_kernels_keep_their_code_small():
    """A kernel of little work (`SMALL_WORK`) unrolls at most `SMALL_BODY_BUDGET` lanes x operations: the cross
    entropy's gradient over 512 x 10 logits had a 16-register tile of an exp's polynomial with gathered lanes on top
    (52k characters of C, 0.3 s of gcc for a kernel of microseconds); now its exp-sums keep full vector lanes without
    the tile. A kernel of much work keeps the full `BODY_BUDGET`; the gradient stays right."""
    from lazy.codegen.kernel import BODY_BUDGET, SMALL_BODY_BUDGET, SMALL_WORK

    cpu = Device["CPU"].renderer
    a = (rng(14).standard_normal((512, 10)) * 4).astype(np.float32)
    labels = rng(15).integers(0, 10, 512).astype(np.int32)
    x = Tensor(a, device="CPU", requires_grad=True)
    x.sparse_categorical_crossentropy(Tensor(labels, device="CPU").realize()).backward()
    assert x.grad is not None
    built = [(build_kernel(si.ast, cpu), get_program(si.ast, cpu)) for si in kernels(x.grad)]
    heavy = [(k, spec) for k, spec in built if _reduces_exp(k.ast)]
    assert heavy, "a reduce kernel of the gradient computes an exp"
    for k, spec in built:
        assert prod(k.full_shape) * k.body_ops() < SMALL_WORK and k.body_budget(k.body_ops()) == SMALL_BODY_BUDGET
        assert k.registers() * k.body_ops() <= SMALL_BODY_BUDGET, (k.applied_opts, k.body_ops())
        assert len(spec.src) < 20000, (spec.name, len(spec.src))
    for k, _ in heavy:
        assert choose_vector_axis(k)[1] == max(cpu.caps.vector_widths), k.applied_opts
    p = np_softmax(a, -1)
    np.testing.assert_allclose(x.grad.numpy(), (p - np.eye(10)[labels]) / 512, rtol=2e-4, atol=2e-7)
    big = build_kernel(
        kernels(Tensor(rng(16).random((256, 256, 64)).astype(np.float32), device="CPU").exp().sum(-1))[0].ast, cpu
    )
    assert big.body_budget(big.body_ops()) == BODY_BUDGET


def _reduces_exp(ast) -> bool:
    nodes = ast.toposort()
    return any(n.op is Ops.EXP2 for n in nodes) and any(n.op in (Ops.SUM, Ops.RMAX) for n in nodes)


@pytest.mark.parametrize("shape", [(64, 10), (24, 5), (7, 3), (40, 1), (8, 0)])
def test_short_heavy_reductions_and_their_gradients_on_cpu(shape):
    """Softmax, log_softmax and cross entropy over a few classes, with their gradients, as a small classifier trains
    (the forward and backward exp-sums get gathered lanes where the batch divides by a vector width)."""
    a = (rng(9).standard_normal(shape) * 4).astype(np.float32)
    for name in ("softmax", "log_softmax"):
        CASES[name].check(CASES[name].run(Tensor(a, device="CPU"), -1).numpy(), a, -1, f"of {shape}")
    if not a.size:
        return
    labels = rng(10).integers(0, shape[1], shape[0]).astype(np.int32)
    x = Tensor(a, device="CPU", requires_grad=True)
    loss = x.sparse_categorical_crossentropy(Tensor(labels, device="CPU"))
    loss.backward()
    p = np_softmax(a, -1)
    want_loss = -np.log(p[np.arange(shape[0]), labels]).mean()
    np.testing.assert_allclose(loss.item(), want_loss, rtol=2e-5, atol=2e-6)
    want_grad = (p - np.eye(shape[1])[labels]) / shape[0]
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), want_grad, rtol=2e-4, atol=2e-6)


# -- odd, empty and large sizes against numpy --------------------------------------------------------------------------

ODD = [1, 7, 17, 1023, 1025, 0]


@pytest.mark.parametrize("n", ODD)
def test_odd_row_lengths_loop_style(n):
    a = (rng(n).standard_normal((3, n)) * 4).astype(np.float32)
    x = Tensor(a, device="PYTHON").realize()
    for case in CASES.values():
        if case.name != "max" or n:  # (the max of no elements raises)
            case.check(run_loop_style(case.run(x, -1)), a, -1, f"of (3, {n})")


@pytest.mark.parametrize("n", ODD)
def test_odd_sizes_on_cpu(n):
    """The CPU device compiles the vector paths with a real compiler: rows and columns of odd lengths."""
    for shape in ((5, n), (n, 6)):
        a = (rng(n).standard_normal(shape) * 4).astype(np.float32)
        x = Tensor(a, device="CPU")
        for axis in (-1, 0):
            for case in CASES.values():
                if case.name != "max" or a.shape[axis]:
                    case.check(case.run(x, axis).numpy(), a, axis, f"over axis {axis} of {shape}")


def test_wide_rows_on_cpu():
    """Rows of 4096 (16 lanes on AVX-512), and rows long enough to be split into partial results over the cores."""
    for shape in ((4, 4096), (2, 65536 + 16), (1, 1 << 20)):
        a = (rng(4).standard_normal(shape) * 4).astype(np.float32)
        x = Tensor(a, device="CPU")
        for case in CASES.values():
            case.check(case.run(x, -1).numpy(), a, -1, f"of {shape}")


def test_long_sums_on_cpu():
    """A long sum: split into partials over the cores (vector accumulators in each) at 2**24, and at an odd size (its
    divisible prefix split, the rest summed apart)."""
    for n, rtol in (((1 << 24), 1e-6), ((1 << 22) + 1, 1e-6)):
        a = rng(5).random(n, dtype=np.float32)
        np.testing.assert_allclose(Tensor(a, device="CPU").sum().item(), a.astype(np.float64).sum(), rtol=rtol)


def test_a_sum_whose_partials_are_long_splits_again():
    """A length only 8 chunks of 8 lanes divide leaves few partials with long rows, which are split again: three
    stages for 64 * 32769 ones (in memory: a constant's sum folds to its product), exact in float32 at every stage."""
    n = 64 * 32769
    ones = Tensor.ones(2, n, device="CPU").contiguous().realize()
    assert len(kernels(ones[0].sum())) == 3
    assert ones[0].sum().item() == float(n)
    np.testing.assert_array_equal(ones.sum(1, keepdim=True).numpy(), [[n]] * 2)


def test_long_partial_sums_read_two_rows_at_once():
    """The partial sums of a long sum (`lazy.codegen.opt_reduce.paired_streams`) compute two of their rows together,
    so each thread reads two streams of memory; a short reduction does not."""

    def cpu_kernels(t: Tensor) -> list[Kernel]:
        return [build_kernel(si.ast, Device["CPU"].renderer) for si in kernels(t)]

    n = 1 << 22
    first, _ = cpu_kernels(Tensor(np.ones(n, np.float32), device="CPU").sum())
    upcasts = [first.full_shape[i] for i in first.axes(Axis.UPCAST)]
    assert 2 in upcasts and first.full_shape[first.axes(Axis.GLOBAL)[0]] >= 16, first
    (short,) = cpu_kernels(Tensor(np.ones((64, 4096), np.float32), device="CPU").sum(1))
    assert 2 not in [short.full_shape[i] for i in short.axes(Axis.UPCAST)], short
    a = rng(6).random(n, dtype=np.float32)
    np.testing.assert_allclose(Tensor(a, device="CPU").sum().item(), a.astype(np.float64).sum(), rtol=1e-6)
    b = rng(7).random((64, 1 << 17), dtype=np.float32)  # long rows, each split into partials
    np.testing.assert_allclose(Tensor(b, device="CPU").sum(1).numpy(), b.astype(np.float64).sum(1), rtol=1e-5)


def test_long_odd_row_softmax_is_accurate_on_cpu():
    """A long row no split plan divides (100003 is prime) is split over its longest divisible prefix, the rest reduced
    on its own: one accumulator over the whole row was 1.5e-4 off."""
    a = (rng(6).standard_normal((1, 100003)) * 4).astype(np.float32)
    np.testing.assert_allclose(Tensor(a, device="CPU").softmax(-1).numpy(), np_softmax(a, -1), rtol=1e-5, atol=0)
    for n in (100003, (1 << 22) + 1):  # a max and a sum through the remainder, exact and within float32 rounding
        b = rng(n).standard_normal(n).astype(np.float32)
        assert Tensor(b, device="CPU").max().item() == b.max()
        np.testing.assert_allclose(Tensor(b, device="CPU").sum().item(), b.astype(np.float64).sum(), rtol=1e-5)


# -- the order of a reduce step's updates ------------------------------------------------------------------------------


@pytest.mark.parametrize("interleave", [True, False])
def test_unrolled_reduce_steps_update_every_accumulator_before_the_next_step(interleave):
    """A 3x3 convolution's kernel unrolls the filter taps over a tile of accumulators. For a compiler that keeps the
    order it is given (`Capabilities.interleave_reduce`: gcc at -O1 chained each accumulator's taps and spilled one)
    the updates go tap by tap, each touching every accumulator once; otherwise each accumulator's taps come
    together (a scheduling compiler keeps the window's broadcasts live for less). Either way each accumulator sums
    its taps in order: the result is the same bit for bit."""
    x = Tensor(rng(3).standard_normal((2, 8, 10, 10)).astype(np.float32), device="PYTHON").realize()
    w = Tensor(rng(4).standard_normal((16, 8, 3, 3)).astype(np.float32), device="PYTHON").realize()
    expected = x.conv2d(w).numpy()
    out = x.conv2d(w)
    (item,) = kernels(out)
    # axes (batch, out channels, rows, columns, in channels, filter rows, filter columns): 4 columns by 4 out
    # channels of accumulators, the 3 filter columns unrolled (the CPU renderer's heuristics choose such tiles)
    tile = [Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 6, 0)]
    lang = PythonRenderer(threads=False)
    lang.caps = replace(lang.caps, interleave_reduce=interleave)
    uops, _ = lower_kernel(build_kernel(item.ast, lang, tile))
    accs = {id(u) for u in uops if u.op is UOps.DEFINE_ACC}
    updates = [u.src[0] for u in uops if u.op is UOps.ASSIGN and id(u.src[0]) in accs]
    assert len(accs) > 1 and len(updates) == len(accs) * 3  # (4 vector accumulators of 4 lanes here)
    repeats = sum(a is b for a, b in zip(updates, updates[1:]))
    assert repeats == (0 if interleave else len(accs) * 2), f"{repeats} updates right after one of the same accumulator"
    ExecItem(CompiledRunner(get_program(item.ast, lang, tile), Device["PYTHON"]), list(item.bufs)).run()
    np.testing.assert_array_equal(item.bufs[0].numpy().reshape(expected.shape), expected)

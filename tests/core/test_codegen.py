"""Code generation choices: every optimisation gives the same numbers as none, on the PYTHON reference device
(whose renderer has work groups, local memory and vectors, so all of LOCAL, GROUP, UPCAST and UNROLL apply)."""

import numpy as np
import pytest

from lazy import Context, Tensor
from lazy.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from lazy.codegen.program import get_program
from lazy.codegen.uops import UOps
from lazy.dtype import dtypes
from lazy.engine.realize import ExecItem, get_runner
from lazy.ops import ConstBuffer, LazyOp, MemBuffer, Ops
from lazy.plugins import Device
from lazy.shape.shapetracker import ShapeTracker

D = "PYTHON"
rng = np.random.default_rng(0)
A = rng.standard_normal((6, 32)).astype(np.float32)
B = rng.standard_normal((32, 8)).astype(np.float32)


def run_with(out: Tensor, opts: list[Opt] | None) -> np.ndarray:
    si = out.schedule()[-1]
    runner = get_runner(D, si.ast, opts)
    ExecItem(runner, list(si.bufs), dict(si.var_vals)).run()
    return si.bufs[0].numpy().reshape(out.shape)


REDUCE_OPTS = [
    [],
    [Opt(OptOps.GROUP, 1, 8)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 2, 4)],
    [Opt(OptOps.GROUP, 1, 4), Opt(OptOps.UPCAST, 0, 2)],
    [Opt(OptOps.UNROLL, 1, 4)],
    [Opt(OptOps.UNROLL, 1, 0)],
    [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UNROLL, 1, 8)],
]


@pytest.mark.parametrize("opts", REDUCE_OPTS, ids=repr)
def test_reduce_opts_agree(opts):
    out = Tensor(A, device=D).exp().sum(axis=1) * 2
    np.testing.assert_allclose(run_with(out, opts), np.exp(A).sum(1) * 2, rtol=1e-5)


MATMUL_OPTS = [
    [],
    [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4)],  # axis 1 (contiguous in the output) becomes vector lanes
    [Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 3, 4)],
    [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 2, 0)],
]


@pytest.mark.parametrize("opts", MATMUL_OPTS, ids=repr)
def test_matmul_opts_agree(opts):
    out = Tensor(A, device=D) @ Tensor(B, device=D)
    np.testing.assert_allclose(run_with(out, opts), A @ B, rtol=1e-4, atol=1e-5)


def test_vector_axis_emits_vector_loads():
    out = Tensor(A, device=D) @ Tensor(B, device=D)
    spec = get_program(out.schedule()[-1].ast, Device[D].renderer, [Opt(OptOps.UPCAST, 1, 4)])
    assert spec.uops is not None
    assert any(u.op is UOps.LOAD and u.dtype is not None and u.dtype.count == 4 for u in spec.uops)


def test_group_uses_local_memory_and_a_barrier():
    out = Tensor(A, device=D).sum(axis=1)
    spec = get_program(out.schedule()[-1].ast, Device[D].renderer, [Opt(OptOps.GROUP, 1, 8)])
    ops = {u.op for u in spec.uops or []}
    assert {UOps.DEFINE_LOCAL, UOps.BARRIER, UOps.IF} <= ops
    assert spec.local_size == [8, 1, 1]


def test_bad_opt_is_refused():
    out = Tensor(A, device=D).sum(axis=1)
    k = Kernel(out.schedule()[-1].ast, Device[D].renderer.caps)
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.UPCAST, 1, 4))  # axis 1 is the reduce axis
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.UNROLL, 1, 5))  # 32 is not a multiple of 5


def test_noopt_and_heuristics_agree():
    x = Tensor(A, device=D)
    with Context(NOOPT=True):
        plain = (x.exp() @ Tensor(B, device=D)).numpy()
    optimized = (x.exp() @ Tensor(B, device=D)).numpy()
    np.testing.assert_allclose(plain, optimized, rtol=1e-5, atol=1e-5)


def test_beam_search_picks_options_that_work(tmp_path):
    x = Tensor(A[:, :16], device=D).realize()
    with Context(BEAM=1, CACHE_DIR=str(tmp_path)):
        out = (x * 2).sum(axis=1).numpy()
    np.testing.assert_allclose(out, (A[:, :16] * 2).sum(1), rtol=1e-5)
    assert list((tmp_path / "beam").iterdir()), "the search result is cached on disk"


def test_vector_lanes_of_a_padded_constant_keep_their_mask():
    # regression: a vectorized kernel broadcast a padded constant to every lane, padding included
    x = Tensor.ones(7, 6, device=D).reshape(1, 1, 7, 6).pad(((0, 0), (0, 0), (0, 1), (0, 1)))
    out = x._windows((2, 3), (2, 2), (1, 1)).sum((-2, -1))  # 4x3 window sums over a padded 8x7 of ones
    expected = np.array([[6, 6, 4], [6, 6, 4], [6, 6, 4], [3, 3, 2]], dtype=np.float32)
    np.testing.assert_allclose(run_with(out, [Opt(OptOps.UPCAST, 0, 4)]).reshape(4, 3), expected)
    np.testing.assert_allclose(out.numpy().reshape(4, 3), expected)


def test_an_optimisation_that_does_not_apply_leaves_the_kernel_as_it_was():
    """The heuristics try an optimisation on the kernel itself and go on without it when it raises: a refused work
    group (over the device's threads) or tile (over the code budget) must not leave its split axes behind (a PYTHON
    kernel ran with 4096 threads per group that way)."""
    from lazy.ops import Ops

    caps = Device["PYTHON"].renderer.caps
    out = Tensor.empty(64, 64, 64, device="PYTHON") + 1
    (si,) = [s for s in out.schedule() if s.ast.op is Ops.SINK]
    k = Kernel(si.ast, caps)
    k.apply_opt(Opt(OptOps.LOCAL, 0, 32))
    before = (k.full_shape, list(k.kinds), list(k.applied_opts), list(k.packs))
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.LOCAL, 0, 64))  # 32 x 64 threads: over local_size_max
    assert (k.full_shape, list(k.kinds), list(k.applied_opts), list(k.packs)) == before
    assert caps.local_size_max and k.threads() <= caps.local_size_max


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
@pytest.mark.parametrize("size", [0, 1, 2, 37])
def test_a_kernel_takes_core_bounds_exactly_when_its_spec_says_it_is_split(device, size):
    """A loop split over the cores takes [core_lo, core_hi) as its last two parameters, and `ProgramSpec.core_split`
    (the loop's length) is what tells a runtime to pass them. An empty loop was split with a length of 0, which reads
    as "not split": the CPU then called the kernel without its bounds, so it looped over whatever the registers held
    (hours, in CI) or wrote into an empty buffer."""
    if not Device[device].renderer.caps.core_split:
        pytest.skip(f"{device}'s renderer splits no loop over cores")
    st = ShapeTracker.from_shape((size,))
    fill = LazyOp(Ops.CONST, (), ConstBuffer(1.0, dtypes.float32, st))
    spec = get_program(LazyOp(Ops.SINK, (LazyOp(Ops.STORE, (fill,), MemBuffer(0, dtypes.float32, st)),)),
                       Device[device].renderer)  # fmt: skip
    assert ("core_lo" in spec.src) == (spec.core_split > 0), spec.src
    assert spec.core_split == (size if size > 1 else 0)


def test_a_buffer_read_through_two_views_is_not_packed():
    """Every load of a packed buffer reads its one tile, laid out for one view: `t @ t` reads t as both operands
    (two views of buffer 1), so staging it staged the first operand's elements for both (a 512 x 512 `t @ t` on
    PYTHON was 69 off; a cumulative product's gradient, reading a mask at four offsets, 0.19 off). With two buffers
    the same work groups stage each operand; with one, neither view is staged and the product is right."""
    t, u = (Tensor(rng.standard_normal((64, 64)).astype(np.float32), device=D).realize() for _ in range(2))
    groups = [Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 4)]
    for other, packable in ((u, True), (t, False)):
        out = t @ other
        k = Kernel(out.schedule()[-1].ast, Device[D].renderer.caps)
        for opt in groups:
            k.apply_opt(opt)
        assert (k.pack_plan(1) is not None) == packable
        if not packable:
            assert len({b.st for b in k.membufs if b.idx == 1}) == 2  # the one buffer, read through two views
            with pytest.raises(KernelOptError, match="not reused"):
                k.apply_opt(Opt(OptOps.PACK, 1, 0))
        opts = [*groups, Opt(OptOps.PACK, 1, 0)] if packable else groups
        np.testing.assert_allclose(run_with(out, opts), t.numpy() @ other.numpy(), rtol=1e-4, atol=1e-4)

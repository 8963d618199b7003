"""BEAM search itself (`lazy.codegen.search`): the table of what it tries, parallel compiling that chooses as a
sequential search does, the progress line, the time budget, candidates with wrong results, absurd tiles (registers,
source size) and symbolic kernels. Timings are faked where the choice matters (never on speed). PYTHON device."""

import hashlib
import io
import sys
import threading
import time

import numpy as np
import pytest

from lazy import Context, Device, Tensor
from lazy.codegen import search
from lazy.codegen.kernel import Kernel, Opt, OptOps
from lazy.codegen.program import hand_coded_optimizations
from lazy.ops import Ops
from lazy.renderer import Capabilities

D = "PYTHON"
X = np.arange(256, dtype=np.float32).reshape(16, 16) / 256


def kernel_ast(t: Tensor):
    (ast,) = [si.ast for si in t.schedule() if si.ast.op is Ops.SINK]
    return ast


def row_sum_ast(factor: float = 2.0):
    return kernel_ast((Tensor(X[:8, :8], device=D).realize() * factor).sum(axis=1))


def matmul_ast(n: int):
    a, b = Tensor(X[:n, :n], device=D).realize(), Tensor(X[:n, :n].T.copy(), device=D).realize()
    return kernel_ast(a @ b)


@pytest.fixture(autouse=True)
def fresh_state(fresh_search):
    """Nothing found or compiled in memory, nothing on disk: every call searches (conftest's `fresh_search`)."""
    yield


class FakeClock:
    """The search's wall clock: `step` seconds pass at every reading."""

    def __init__(self, step: float):
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def hashed_timer(timed: list):
    """A fake device timer: each option list gets a fixed pseudo-random time; the lists timed are recorded."""

    def timer(dev, cand, program, bufs, first) -> float:
        timed.append(tuple(cand.opts))
        return int.from_bytes(hashlib.sha256(repr(cand.opts).encode()).digest()[:4], "little") / 2**32

    return timer


# -- the table ---------------------------------------------------------------------------------------------------------


def test_the_search_space_has_a_row_for_every_optops_member():
    missing = [op.name for op in OptOps if op not in search.SEARCH_SPACE]
    assert not missing, f"add a SearchRow for {missing} to lazy.codegen.search.SEARCH_SPACE (or BEAM never tries it)"


def test_candidates_follow_the_table_and_ops_without_a_row_are_skipped(monkeypatch):
    k = Kernel(matmul_ast(8), Device[D].renderer.caps)
    cands = search.candidate_opts(k)
    assert {c.op for c in cands} >= {OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.SWAP}
    for c in cands:
        row = search.SEARCH_SPACE[c.op]
        if row.on_inputs:  # PACK: `axis` is an input buffer's index
            assert c.axis in {b.idx for b in k.membufs[1:]}
            continue
        assert k.kinds[c.axis] in row.axis_kinds
        if row.second_axis:
            assert k.kinds[c.amount] in row.axis_kinds and c.amount > c.axis
        elif row.padding:  # PAD: only amounts that do not divide the axis, and never on a device with threads
            assert k.full_shape[c.axis] % c.amount and not k.caps.has_threads
        else:  # only splits that divide the axis
            assert c.amount == 0 or k.full_shape[c.axis] % c.amount == 0
    monkeypatch.delitem(search.SEARCH_SPACE, OptOps.UPCAST)
    assert [c for c in search.candidate_opts(k) if c.op is OptOps.UPCAST] == []


def test_a_rows_needs_field_names_the_capability_it_takes():
    ast = matmul_ast(8)
    plain = search.candidate_opts(Kernel(ast, Capabilities(vector_widths=(4,))))
    assert not [c for c in plain if c.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.PACK)]
    packing = search.candidate_opts(Kernel(ast, Capabilities(vector_widths=(4,), pack_max=1 << 16)))
    assert {(c.axis, c.amount) for c in packing if c.op is OptOps.PACK} == {(1, 0), (2, 0)}  # the input buffers
    pads = {(c.axis, c.amount) for c in plain if c.op is OptOps.PAD}  # 8 x 8 outputs: 3, 5, 6 and 7 do not divide
    assert pads == {(axis, amount) for axis in (0, 1) for amount in (3, 5, 6, 7)}, pads


# -- parallel compiling ----------------------------------------------------------------------------------------------


def test_parallel_compiling_chooses_as_sequential_compiling_does(monkeypatch):
    dev = Device[D]
    ast = matmul_ast(4)
    original = dev.compiler.compile
    active, most = [0], [0]
    lock, overlap = threading.Lock(), threading.Event()
    rng = np.random.default_rng(1)
    delays = iter(rng.uniform(0.0, 0.004, 100_000))

    def slow_compile(src: str) -> bytes:  # random delays: compiles finish out of order
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
            delay = next(delays)
            if active[0] > 1:
                overlap.set()
        overlap.wait(0.02)  # until compiles have overlapped once: a second one can start beside this one
        time.sleep(delay)
        with lock:
            active[0] -= 1
        return original(src)

    monkeypatch.setattr(dev.compiler, "compile", slow_compile)
    runs = []
    for workers in (1, 4):
        timed: list = []
        monkeypatch.setattr(search, "_time_program", hashed_timer(timed))
        monkeypatch.setattr(search, "COMPILE_WORKERS", workers)
        search._results.clear()
        most[0] = 0
        overlap.clear()
        runs.append((search.beam_search(ast, dev, 2), timed, most[0]))
    (seq_opts, seq_timed, seq_most), (par_opts, par_timed, par_most) = runs
    assert seq_most == 1 and par_most > 1  # the second search did compile in parallel
    assert par_opts == seq_opts and par_opts  # the same choice, and an actual one
    assert par_timed == seq_timed  # the same candidates, timed in the same order


# -- progress and budget -------------------------------------------------------------------------------------------


def test_a_slow_search_shows_its_progress_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(search, "_clock", FakeClock(0.05))
    with Context(PROGRESS=1):  # drawn although stderr is not a terminal here
        opts = search.beam_search(row_sum_ast(), Device[D], 2)
        out, err = capsys.readouterr()
        lines = [line for line in err.split("\r") if line.strip()]
        assert lines and out == ""
        assert all(line.startswith("BEAM kernel ") and " candidates, " in line and "best " in line for line in lines)
        assert lines[-1].endswith(", done\n") and err.count("\n") == 1  # one line, redrawn in place
        assert opts == search.beam_search(row_sum_ast(), Device[D], 2)  # (cached: no second search, no more lines)
        assert capsys.readouterr().err == ""


def test_off_a_terminal_a_slow_search_prints_nothing_by_default(monkeypatch, capsys):
    monkeypatch.setattr(search, "_clock", FakeClock(0.05))
    search.beam_search(row_sum_ast(), Device[D], 2)
    assert capsys.readouterr() == ("", "")


def test_a_fast_search_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(search, "_clock", FakeClock(0.0))
    search.beam_search(row_sum_ast(), Device[D], 2)
    assert capsys.readouterr() == ("", "")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_updating_line(monkeypatch):
    monkeypatch.setattr(search, "_clock", FakeClock(0.05))
    monkeypatch.setattr(sys, "stderr", Terminal())
    search.beam_search(row_sum_ast(), Device[D], 2)
    err = sys.stderr.getvalue()
    assert err.startswith("\rBEAM kernel ") and err.count("\r") > 1  # redrawn in place
    assert err.endswith(", done\n") and err.count("\n") == 1  # one line, ended when the search ends


def test_the_budget_stops_a_search_and_the_progress_line_says_so(monkeypatch, capsys):
    ast = matmul_ast(4)
    timed: list = []
    monkeypatch.setattr(search, "_time_program", hashed_timer(timed))
    search.beam_search(ast, Device[D], 2)
    unlimited = len(timed)
    timed.clear()
    search._results.clear()
    capsys.readouterr()
    monkeypatch.setattr(search, "_clock", FakeClock(0.2))
    with Context(BEAM_BUDGET=1, PROGRESS=1):
        opts = search.beam_search(ast, Device[D], 2)
    err = capsys.readouterr().err
    assert err.endswith(", stopped: LAZY_BEAM_BUDGET=1 s spent\n")
    assert 1 <= len(timed) < unlimited  # the unoptimised kernel is always measured; the rest was cut short
    k = Kernel(ast, Device[D].renderer.caps)
    for opt in opts:
        k.apply_opt(opt)  # whatever it found is a valid choice


# -- what never wins ---------------------------------------------------------------------------------------------------


def test_a_candidate_with_wrong_results_never_wins(monkeypatch, capsys):
    dev = Device[D]
    ast, wrong_ast = row_sum_ast(2.0), row_sum_ast(3.0)
    bad = Opt(OptOps.UPCAST, 0, 2)
    assert bad in search.candidate_opts(Kernel(ast, dev.renderer.caps))
    original = search.get_program

    def miscompiling(ast_, renderer, opts=None):  # a code generator that gets one option wrong
        return original(wrong_ast if opts and bad in opts else ast_, renderer, opts)

    monkeypatch.setattr(search, "get_program", miscompiling)
    monkeypatch.setattr(search, "_time_program", lambda dev, cand, program, bufs, first: float(bad not in cand.opts))
    with Context(DEBUG=1):
        opts = search.beam_search(ast, dev, 2)
    assert bad not in opts
    assert f"BEAM: [{bad}] gives other results than the unoptimised kernel" in capsys.readouterr().out
    monkeypatch.setattr(search, "outputs_match", lambda *args: True)  # without the check, the wrong one wins
    search._results.clear()
    assert bad in search.beam_search(ast, dev, 2)


def test_outputs_match_allows_rounding_not_wrong_values():
    from lazy.dtype import dtypes

    want = np.random.default_rng(0).uniform(-1, 1, 1000).astype(np.float32)
    assert search.outputs_match(want * np.float32(1 + 1e-6), want, dtypes.float32)  # summation order
    off = want.copy()
    off[17] += 0.01
    assert not search.outputs_match(off, want, dtypes.float32)
    nan = want.copy()
    nan[3] = np.nan
    assert search.outputs_match(nan, nan, dtypes.float32) and not search.outputs_match(want, nan, dtypes.float32)
    assert not search.outputs_match(np.array([1, 2]), np.array([1, 3]), dtypes.int32)


def applied(ast, opts: list) -> Kernel:
    k = Kernel(ast, Device[D].renderer.caps)
    for opt in opts:
        k.apply_opt(opt)  # the kernel accepts each one: pruning is the search's own judgement
    return k


TILE = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 8)]  # 16x16 matmul: (2, 4) loops, 16 reduce, 4 n lanes, 8 m


def test_tiles_that_need_far_too_many_registers_are_pruned_before_compiling(monkeypatch):
    monkeypatch.setattr(search, "MAX_SOURCE_CHARS", 10**9)  # registers alone
    ast = matmul_ast(16)  # PYTHON: vectors of 2 and 4 lanes, 16 registers: tiles over 32 registers are pruned
    s = search.Search(ast, Device[D], 2)
    extended = s.extensions([(0.0, TILE)])
    kept = [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 2, 8)]  # 26 registers; unrolling adds none
    # 16 accumulator vectors + 16 broadcast m values + 1 n vector; 32 accumulator vectors + 8 + 4
    pruned = [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4)]
    assert all([*TILE, opt] in extended for opt in kept)
    assert not any([*TILE, opt] in extended for opt in pruned) and s.progress.pruned == len(pruned)
    for opts in extended + [[*TILE, opt] for opt in pruned]:
        assert search.too_many_registers(applied(ast, opts)) == (opts[-1] in pruned)


def test_steps_that_blow_up_the_source_are_pruned_before_compiling(monkeypatch):
    ast = matmul_ast(16)
    s = search.Search(ast, Device[D], 2)
    parent = s.source_chars(TILE)
    monkeypatch.setattr(search, "MAX_SOURCE_CHARS", parent * 10)
    extended = s.extensions([(0.0, TILE)])
    assert [*TILE, Opt(OptOps.UNROLL, 2, 8)] in extended  # 8 times the lanes: under 10 times the source
    assert [*TILE, Opt(OptOps.UNROLL, 2, 0)] not in extended  # all 16 reduce steps unrolled: over
    monkeypatch.setattr(search, "MAX_SOURCE_CHARS", parent // 2)  # the kernel is over the limit already:
    s.seen.clear()
    extended = s.extensions([(0.0, TILE)])
    assert extended and all(applied(ast, opts).upcast_size() == applied(ast, TILE).upcast_size() for opts in extended)
    assert {opts[-1].op for opts in extended} == {OptOps.LOCAL, OptOps.SWAP}  # only steps that do not grow it


def test_a_symbolic_kernel_keeps_the_heuristics_choice(monkeypatch):
    """It is not searched (timing one size says little about the others), and `LAZY_BEAM` must not leave it
    unoptimised: it used to get no options at all."""
    from lazy.symbolic import Variable

    monkeypatch.setattr(search, "_time_program", lambda *args: pytest.fail("a symbolic kernel was timed"))
    vi = Variable("n", 1, 16).bind(8)
    t = Tensor(X, device=D).realize()
    ast = kernel_ast(t[:vi].sum(axis=1))
    heuristic = hand_coded_optimizations(Kernel(ast, Device[D].renderer.caps)).applied_opts
    assert heuristic and search.beam_search(ast, Device[D], 2) == heuristic
    with Context(BEAM=2):
        np.testing.assert_allclose(t[:vi].sum(axis=1).numpy(), X[:8].sum(axis=1), rtol=1e-6)

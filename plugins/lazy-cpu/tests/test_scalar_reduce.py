"""gcc before 12.4 / 13.2 vectorizes a loop that sums floats loaded in reverse order into wrong code at -O2 (a
symbolic, so scalar, reduction over a flipped axis gave 302, not 276): the C renderer turns the loop vectorizer off
for kernels that accumulate a float in a scalar (`lazy_cpu.renderer.SCALAR_REDUCE`)."""

from __future__ import annotations

import numpy as np

from lazy import Tensor, Variable
from lazy.helpers import Context


def test_a_symbolic_sum_over_a_flipped_axis_at_the_full_optimisation_level():
    a = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    with Context(TIERED=0):  # the full build (-O2) at once, not the quick one a first call gets
        for n in (1, 2):
            v = Variable("n", 1, 2).bind(n)
            got = Tensor(a, device="CPU")[:v].flip(2).sum().item()
            assert got == a[:n].sum(), f"n={n}: {got}"


def test_scalar_float_reductions_carry_the_guard_and_vector_kernels_do_not():
    from lazy.codegen.program import get_program
    from lazy.engine.schedule import create_schedule
    from lazy.plugins import Device

    v = Variable("n", 1, 8).bind(5)
    scalar = Tensor(np.ones((8, 3), np.float32), device="CPU")[:v].flip(1).sum()
    vector = Tensor(np.ones(4096, np.float32), device="CPU").sum()
    renderer = Device["CPU"].renderer
    for t, want in ((scalar, True), (vector, False)):
        sources = [
            get_program(item.ast, renderer).src for item in create_schedule([t.lazydata]) if item.ast.op.name == "SINK"
        ]
        assert any("LAZY_SCALAR_REDUCE void" in src for src in sources) is want, sources

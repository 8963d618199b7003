"""How the benchmark command times a row fairly, whatever it measures: each implementation of a row (a column: numpy,
PyTorch, a lazy device) is a `Cell` set up with its untimed warm-up calls (`set_up`), then all of a row's cells are
timed in turns (`measure_cells`) so that they meet the same phases of a noisy machine, and each reports its best
repetition in the row's unit (`figure_of`). A failing implementation is a cell's figure, never the run's end.

    cells = [set_up("numpy", numpy_sum, (n,), warmup=1), set_up("lazy CPU", lib_sum, (lib, n), warmup=1)]
    measure_cells([c for c in cells if c], Budget(3.0, 100))
    figures = [figure_of(c, "sum of 16M float32", GBS, 4 * n) for c in cells]
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Timed = Callable[[], object]  # one repetition: recomputes the result from the inputs and waits for the device
Prepare = Callable[[], Timed]  # the untimed set-up of one repetition (a forward pass before a timed backward)


@dataclass(frozen=True)
class Budget:
    """How long to measure one figure: after the row's untimed warm-up calls (compilation, the jit's capture), timed
    repetitions while their total stays under `seconds`, at most `max_reps`: a slow call (a CNN step of seconds)
    is timed once or twice, a fast one many times."""

    seconds: float
    max_reps: int


class Elapsed(float):
    """What a repetition returns when it timed itself (one in a fresh process, where the parent's clock would also
    count the interpreter's start and exit): `Cell.repeat` takes this time in seconds instead of its own."""


class Cell:
    """One implementation of a row being measured: its set-up (`Prepare`), the times of its repetitions so far, or
    (`failed`) why it has no figure."""

    def __init__(self, label: str, prepare: Prepare | None = None, failed: str | None = None):
        self.label, self.prepare, self.failed = label, prepare, failed
        self.times: list[float] = []
        self.started = time.perf_counter()

    def wants_more(self, budget: Budget, min_reps: int = 1) -> bool:
        return self.failed is None and (len(self.times) < min_reps or (sum(self.times) < budget.seconds and
                                                                       len(self.times) < budget.max_reps))  # fmt: skip

    def repeat(self) -> None:
        """One timed repetition, prepared untimed; a failure ends the cell (printed in full), not the run."""
        assert self.prepare is not None
        try:
            run = self.prepare()
            start = time.perf_counter()
            result = run()
            self.times.append(result if isinstance(result, Elapsed) else time.perf_counter() - start)
        except Exception as e:
            self.fail(e)

    def fail(self, e: Exception) -> None:
        if isinstance(e, NotMeasured):
            self.failed = str(e)
        else:
            traceback.print_exc()
            self.failed = f"failed ({type(e).__name__})"


# A row's columns are timed in turns (`measure_cells`): BLOCKS turns each, every turn after SETTLE_S of idle time. The
# pause lets the previous column's thread pool go quiet: OpenBLAS's threads spin ~0.1 s after a call (THREAD_TIMEOUT),
# and a lazy matmul timed right after numpy's ran at 0.72-0.77x of its speed when the turns were one repetition each.
BLOCKS = 5
SETTLE_S = 0.15


def measure_cells(cells: list[Cell], budget: Budget, min_reps: int = 1) -> None:
    """Time the cells' repetitions in turns: each round gives every cell still under its budget a block of about a
    fifth of its repetitions (by count or time), starting one cell later each round, so that all of a row's columns
    meet the same phases of a noisy machine (its memory bandwidth moved by half between cells measured one after the
    other) instead of one column meeting a fast phase and the next a slow one. Each cell gets at least `min_reps`."""
    rounds = 0
    while live := [c for c in cells if c.wants_more(budget, min_reps)]:
        for cell in live[rounds % len(live) :] + live[: rounds % len(live)]:
            time.sleep(SETTLE_S)
            before, block_start = len(cell.times), time.perf_counter()
            while cell.wants_more(budget, min_reps) and (len(cell.times) == before or (
                    len(cell.times) - before < budget.max_reps / BLOCKS and
                    time.perf_counter() - block_start < budget.seconds / BLOCKS)):  # fmt: skip
                cell.repeat()
        rounds += 1


@dataclass(frozen=True)
class Unit:
    """How a row reports a time: work per second (`rate`: GFLOP/s, GB/s) or time per item (ms/step, us/op)."""

    name: str
    scale: float
    rate: bool

    def figure(self, seconds: float, work: float) -> float:
        return work / seconds / self.scale if self.rate else seconds / work / self.scale


GFLOPS, GBS = Unit("GFLOP/s", 1e9, rate=True), Unit("GB/s", 1e9, rate=True)
MS, MS_PER_STEP, US_PER_STEP, US_PER_OP, SECONDS = (
    Unit("ms", 1e-3, False),
    Unit("ms/step", 1e-3, False),
    Unit("us/step", 1e-6, False),
    Unit("us/op", 1e-6, False),
    Unit("s", 1.0, False),
)


Figure = float | str  # a measured figure, or why there is none


class NotMeasured(Exception):
    """A library cannot measure a row the way the others do: the cell says why."""


def set_up(label: str, impl: Callable[..., Prepare] | None, args: Sequence[Any], warmup: int) -> Cell | None:
    """One implementation of a row, set up with its untimed warm-up calls done (compilation, the jit's capture), or
    None where there is none; a failure is the cell's figure (and printed in full), not fatal."""
    if impl is None:
        return None
    cell = Cell(label)
    try:
        prepare = impl(*args)
        for _ in range(warmup):
            prepare()()
        cell.prepare = prepare
    except Exception as e:
        cell.fail(e)
    return cell


def figure_of(cell: Cell | None, title: str, unit: Unit, work: float) -> Figure:
    """A measured cell's figure (its best repetition of `work` in `unit`), printed under the row's `title` as it is
    reported; "-" for a missing one."""
    if cell is None:
        return "-"
    if cell.failed is not None:
        return cell.failed
    figure = unit.figure(min(cell.times), work)
    took = time.perf_counter() - cell.started
    print(f"  {title} | {cell.label}: {fmt_number(figure)} {unit.name} ({len(cell.times)} repetitions, "
          f"{took:.1f} s with the row's others)", file=sys.stderr, flush=True)  # fmt: skip
    return figure


def fmt_number(value: Figure) -> str:
    if isinstance(value, str):
        return value
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def ratio(lazy: Figure, reference: Figure) -> str:
    if isinstance(lazy, str) or isinstance(reference, str):
        return ""
    return f"{fmt_number(lazy / reference)}x"

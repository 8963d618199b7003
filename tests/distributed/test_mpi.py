"""lazy.distributed on real MPI: each test launches mpi_worker.py (or the digits example) with the `mpiexec` of the
installed MPI (the mpich wheel's, in the venv's bin/) on 1, 2 and 3 processes; the ranks check against numpy."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the MPI extra is not installed: pip install 'lazy-core[mpi]'")

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = HERE / "mpi_worker.py"


def mpiexec() -> str:
    local = pathlib.Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec: install the mpich wheel (pip install 'lazy-core[mpi]') or a system MPI")
    return found


def launch(n: int, *args: str, timeout: float = 120, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [mpiexec(), *extra, "-n", str(n), sys.executable, *args] if n else [sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=os.environ.copy())


@pytest.mark.parametrize("n", [0, 2, 3])  # 0: plain python, outside mpiexec (a world of one)
@pytest.mark.parametrize("scenario", ["collectives", "mismatch", "data_parallel"])
def test_collectives_against_numpy(n: int, scenario: str) -> None:
    if n == 0 and scenario == "mismatch":
        pytest.skip("a world of one has no other rank to disagree with")
    proc = launch(n, str(WORKER), scenario)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(re.findall(rf"OK {scenario} (\d+)/", proc.stdout)) == [str(r) for r in range(max(n, 1))], proc.stdout


def test_stuck_rank_is_named_within_the_timeout() -> None:
    # the subprocess timeout bounds the wait: without the deadline the survivors would wait forever
    # 3 s: long enough for the live ranks to reach the collective on a loaded machine (a first kernel compiles)
    proc = launch(3, str(WORKER), "stuck", "3", timeout=90, extra=("-disable-auto-cleanup",))
    # matched anywhere, not per line: the survivors' writes reach mpiexec's stdout in whatever order it forwards them
    raised = re.findall(
        r"RAISED rank 2 of 3 did not take part in collective #2, all_reduce\('sum'\).*?\(rank (\d) waited\)",
        proc.stdout,
    )
    assert sorted(raised) == ["0", "1"], proc.stdout + proc.stderr


def test_killed_rank_ends_the_job_instead_of_hanging() -> None:
    # MPICH ends the job when a process dies (the survivors do not outlive it); what matters is that nobody hangs
    proc = launch(2, str(WORKER), "killed", "30", timeout=60)
    assert proc.returncode != 0 and "RAISED" not in proc.stdout and "OK" not in proc.stdout, proc.stdout


def test_a_lost_rank_notice_names_the_rank_and_the_waiting_collective_raises() -> None:
    # in a process of its own (plain python, a world of one): MPI is never started inside the test runner
    proc = launch(0, str(WORKER), "notice", timeout=120)
    assert proc.returncode == 0 and "OK notice 0/1" in proc.stdout, proc.stdout + proc.stderr
    assert "lazy.distributed: rank 1 (process" in proc.stderr, proc.stderr  # written at once, for the log


def test_without_mpi4py_the_error_names_the_extra() -> None:
    code = "import sys; sys.modules['mpi4py'] = None; import lazy.distributed as d; d.init()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "pip install 'lazy-core[mpi]'" in proc.stderr, proc.stderr


def epoch_losses(output: str) -> dict[int, float]:
    return {int(e): float(loss) for e, loss in re.findall(r"epoch\s+(\d+)\s+loss ([\d.]+)", output)}


def test_data_parallel_digits_matches_the_single_process_run() -> None:
    example = str(ROOT / "examples" / "digits.py")
    single = launch(0, example, "--epochs", "2")
    parallel = launch(2, example, "--mpi", "--epochs", "2", timeout=180)
    assert single.returncode == 0 and parallel.returncode == 0, single.stderr + parallel.stderr
    want, got = epoch_losses(single.stdout), epoch_losses(parallel.stdout)
    assert sorted(want) == [1, 2] and sorted(got) == [1, 2], (single.stdout, parallel.stdout)
    for epoch, loss in want.items():
        assert abs(got[epoch] - loss) <= 1e-4 + 5e-5, (epoch, got[epoch], loss)  # (the single run prints 4 decimals)

"""Data-parallel training across MPI processes against one process (issue 14's bar: 2 processes >= 1.6x the samples
per second of 1, one core each).

Trains examples/digits_cnn.py's CNN with Adam on the digits, the same global batch either way: 1 process runs the
jitted single-process step (`training.classification_step`); N processes under the venv's `mpiexec` each take 1/N
of every global batch and run `DataParallel.jitted_step` (jitted forward and backward, the gradients averaged over
MPI on the host, jitted optimizer step). Every process has LAZY_THREADS=1 and, with --pin (the default), its own core
(`taskset` for the one process, `mpiexec -bind-to core` for the group). Each run warms up (capture, compiles) and then
times --steps steps on rank 0 (the ranks meet every step, so rank 0's time is the group's).
Run: .venv/bin/python bench/dp_mpi.py [--batch 256] [--steps 60] [--repeats 5] [--processes 2] [--no-pin]"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
WARMUP_STEPS = 3  # the first call runs eagerly, the second captures, the third is the first replay


def worker(batch: int, steps: int, mpi: bool) -> None:
    """One process's training: prints `SAMPLES_PER_S <value>` on rank 0."""
    sys.path.insert(0, str(ROOT / "examples"))
    import numpy as np
    from digits import load
    from digits_cnn import CNN
    from training import classification_step, place

    from lazy import Device, Tensor
    from lazy.nn.optim import Adam

    Tensor.manual_seed(0)
    x_train, y_train, _, _ = load()
    with Tensor.inference_mode(False):
        model = CNN()
        opt = Adam(place(model, Device.DEFAULT), lr=3e-3)
    rank, size = 0, 1
    step: Callable[[Tensor, Tensor], Tensor]
    if mpi:
        import lazy.distributed as dist

        dist.init()
        rank, size = dist.rank(), dist.world_size()
        ddp = dist.DataParallel(opt.params)
        share = len(np.array_split(np.arange(batch), size)[rank]) * size / batch  # as in examples/digits.py
        step = ddp.jitted_step(lambda x, y: model(x).sparse_categorical_crossentropy(y) * share, opt)
    else:
        step = classification_step(model, opt)
    rng = np.random.default_rng(1)

    def run(count: int) -> None:
        for _ in range(count):
            idx = np.array_split(rng.choice(len(x_train), batch, replace=False), size)[rank]
            step(Tensor(x_train[idx]), Tensor(y_train[idx])).item()

    run(WARMUP_STEPS)
    if mpi:
        dist.barrier()
    start, start_cpu = time.perf_counter(), time.process_time()
    run(steps)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    if mpi:  # the busiest rank's CPU time (all its threads): the group is as fast as its slowest member
        cpu = dist.all_reduce(Tensor([cpu]), "max").item()
    if rank == 0:
        print(f"SAMPLES_PER_S {steps * batch / elapsed:.1f} PER_CPU_S {steps * batch / cpu:.1f}", flush=True)


@dataclass(frozen=True)
class Rate:
    """One run's samples per second of wall-clock time, and per second of the busiest process's CPU time (what
    the wall-clock rate would be on an otherwise idle machine if no process ever waited)."""

    wall: float
    cpu: float


def measure(processes: int, args: argparse.Namespace) -> Rate:
    """One fresh run on `processes` processes (1: no MPI)."""
    me = [sys.executable, __file__, "--worker", "--batch", str(args.batch), "--steps", str(args.steps)]
    if processes == 1:
        cmd = (["taskset", "-c", "0"] if args.pin else []) + me
    else:
        mpiexec = str(pathlib.Path(sys.executable).parent / "mpiexec")
        cmd = [mpiexec, *(["-bind-to", "core"] if args.pin else []), "-n", str(processes), *me, "--mpi"]
    env = {**os.environ, "LAZY_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    found = re.search(r"SAMPLES_PER_S ([\d.]+) PER_CPU_S ([\d.]+)", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return Rate(float(found.group(1)), float(found.group(2)))


def summary(label: str, values: list[float], unit: str) -> str:
    runs = ", ".join(f"{v:.2f}" if unit == "x" else f"{v:.0f}" for v in values)
    median = f"{statistics.median(values):.2f}x" if unit == "x" else f"{statistics.median(values):8.0f} {unit}"
    return f"{label:<28}{median}  (runs: {runs})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="global batch (default 256)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run (default 60)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each configuration, alternating (default 5)")
    parser.add_argument("--processes", type=int, default=2, help="MPI processes to compare with one (default 2)")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="let the OS place the processes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.batch, args.steps, args.mpi)
    single: list[Rate] = []
    group: list[Rate] = []
    for _ in range(args.repeats):  # alternating, so a change in the machine's load reaches both
        single.append(measure(1, args))
        group.append(measure(args.processes, args))
    n = args.processes
    print(f"CNN training, global batch {args.batch}, {args.steps} steps, LAZY_THREADS=1, pinned: {args.pin}, "
          f"load average before the last run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    print(summary("1 process:", [r.wall for r in single], "samples/s"))
    print(summary(f"{n} processes:", [r.wall for r in group], "samples/s"))
    print(summary("ratio (bar for 2: >= 1.6x):", [g.wall / s.wall for s, g in zip(single, group)], "x"))
    print(summary("1 process, per CPU s:", [r.cpu for r in single], "samples/s"))
    print(summary(f"{n} processes, per CPU s:", [r.cpu for r in group], "samples/s"))
    print(summary("ratio of CPU-time rates:", [g.cpu / s.cpu for s, g in zip(single, group)], "x"))


if __name__ == "__main__":
    main()

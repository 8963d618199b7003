"""What every example shares: its command line (--device and integer knobs), putting a model on a device, one jitted
classification step, and the loop over epochs."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lazy import Device, Tensor, jit
from lazy.nn.optim import Optimizer
from lazy.nn.state import get_parameters
from lazy.progress import progress, write


def setup(doc: str, data_parallel: bool = False, **defaults: int) -> tuple[argparse.Namespace, str]:
    """Parse `--device` and one integer option per keyword (`epochs=30` gives `--epochs`), seed the random numbers
    (the same on every device) and return the options and the device to train on. `data_parallel` adds `--devices`
    (a comma-separated list: batches sharded over them) and `--mpi` (one process per rank under mpiexec)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", default=None, help="device to train on (default: the default device)")
    if data_parallel:
        parser.add_argument("--devices", default=None, help="e.g. CPU:0,CPU:1: each batch split over these devices")
        parser.add_argument("--mpi", action="store_true", help="data-parallel across the processes of mpiexec")
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    Tensor.manual_seed(0)
    return args, args.device or Device.DEFAULT


def place(model: Any, device: str | tuple[str, ...]) -> list[Tensor]:
    """Move every parameter of `model` to `device` (a tuple: replicated on each; realized there) and return them."""
    params = get_parameters(model)
    for p in params:
        p.to_(device).realize()
    return params


def classification_step(model: Callable[[Tensor], Tensor], opt: Optimizer) -> Callable[[Tensor, Tensor], Tensor]:
    """A jitted step: cross-entropy of `model(x)` against integer labels `y`, backward, optimizer update (on one device
    or sharded over several)."""

    @jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

    return step


Step = Callable[[Tensor, Tensor], Tensor]


def train_epochs(args: argparse.Namespace, step: Step, batch: Callable[[np.ndarray], Tensor], x_train: np.ndarray,
                 y_train: np.ndarray, start: float) -> None:  # fmt: skip
    """`args.epochs` passes over the training set in a seeded random order, `args.batch` samples a `step` (`batch`
    puts an array on the device); the mean loss printed after the first epoch, every fifth and the last (seconds since
    `start`), and a progress line on an interactive terminal."""
    rng = np.random.default_rng(1)
    steps = len(x_train) // args.batch
    with progress("training", total=args.epochs * steps * args.batch, unit="samples") as bar:
        for epoch in range(args.epochs):
            order = rng.permutation(len(x_train))
            total = 0.0
            for s in range(steps):
                idx = order[s * args.batch : (s + 1) * args.batch]
                total += step(batch(x_train[idx]), batch(y_train[idx])).item()
                bar.update(args.batch, f"epoch {epoch + 1}/{args.epochs}, loss {total / (s + 1):.4f}")
            if epoch % 5 == 0 or epoch == args.epochs - 1:
                write(f"epoch {epoch + 1:3d}  loss {total / steps:.4f}  ({time.perf_counter() - start:.1f} s)")

"""What every example shares: its command line (--device and integer knobs), putting a model on a device, and one
jitted classification step."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from lazy import Device, Tensor, jit
from lazy.nn.optim import Optimizer
from lazy.nn.state import get_parameters


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

"""Train a small MLP on scikit-learn's bundled 8x8 digits (no download) on the default device.

    python examples/digits.py [--device CPU] [--epochs 30]
    python examples/digits.py --devices CPU:0,CPU:1             # data-parallel on two devices of one machine
    mpiexec -n 2 .venv/bin/python examples/digits.py --mpi   # data-parallel across processes (lazy-core[mpi])

Prints the loss as it trains and the final test accuracy (>= 95% is expected); on an interactive terminal a progress
line shows the epoch, the running loss and samples per second (`LAZY_PROGRESS`). With --devices every batch is
sharded over the devices and the parameters replicated on each (their gradients combined by an allreduce); with
--mpi each rank trains on its slice of every global batch and the gradients are averaged. Either way the losses are
the single-device run's; --mpi's rank 0 prints the loss after every epoch.
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.datasets import load_digits
from training import classification_step, place, setup, train_epochs

from lazy import Tensor, nn
from lazy.nn.optim import Adam, Optimizer


class MLP:
    def __init__(self, hidden: int = 128):
        self.l1, self.l2 = nn.Linear(64, hidden), nn.Linear(hidden, 10)

    def __call__(self, x: Tensor) -> Tensor:  # (B, 64) -> (B, 10) logits
        return self.l2(self.l1(x).relu())


def load(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixel values 0..16 -> 0..1
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    split = int(len(x) * 0.8)
    train, test = order[:split], order[split:]
    return x[train], y[train], x[test], y[test]


def mpi_step(model: MLP, opt: Optimizer, ddp: object, share: float):  # noqa: ANN201 (a DataParallelStep)
    """A jitted data-parallel step (`DataParallel.jitted_step`). `share` (this rank's part of every global batch times
    the world size) weights this rank's mean loss, so that the ranks' averaged gradients are the gradient of the
    global batch's mean loss."""
    import lazy.distributed as dist

    assert isinstance(ddp, dist.DataParallel)
    return ddp.jitted_step(lambda x, y: model(x).sparse_categorical_crossentropy(y) * share, opt)


def main() -> float:
    args, device = setup(__doc__, data_parallel=True, epochs=30, batch=64)
    devices = tuple(args.devices.split(",")) if args.devices else None
    x_train, y_train, x_test, y_test = load()
    with Tensor.inference_mode(False):
        model = MLP()
        opt = Adam(place(model, devices or device), lr=3e-3)
    if args.mpi:
        return train_mpi(args, device, model, opt, (x_train, y_train, x_test, y_test))
    train_step = classification_step(model, opt)

    def batch(data: np.ndarray) -> Tensor:  # on the device, or split over the devices along the batch axis
        return Tensor(data, device=device) if devices is None else Tensor(data, device=devices[0]).shard(devices, 0)

    print(f"training on {', '.join(devices) if devices else device}: {len(x_train)} train / {len(x_test)} test digits")
    start = time.perf_counter()
    train_epochs(args, train_step, batch, x_train, y_train, start)
    with Tensor.inference_mode():
        pred = model(batch(x_test)).argmax(-1).numpy()
    accuracy = float((pred == y_test).mean())
    print(f"test accuracy: {accuracy * 100:.2f}% ({time.perf_counter() - start:.1f} s)")
    return accuracy


def train_mpi(args, device: str, model: MLP, opt: Optimizer, data: tuple[np.ndarray, ...]) -> float:  # noqa: ANN001
    """The loop of `main` with every global batch split over the ranks (same seed, same batches, same order)."""
    import lazy.distributed as dist

    x_train, y_train, x_test, y_test = data
    dist.init()
    rank, size = dist.rank(), dist.world_size()
    ddp = dist.DataParallel(opt.params)
    if rank == 0:
        print(f"training on {device} x {size} processes: {len(x_train)} train / {len(x_test)} test digits")
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    steps = len(x_train) // args.batch
    share = len(np.array_split(np.arange(args.batch), size)[rank]) * size / args.batch  # the same every step
    step = mpi_step(model, opt, ddp, share)
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        total = 0.0
        for s in range(steps):
            idx = np.array_split(order[s * args.batch : (s + 1) * args.batch], size)[rank]  # this rank's slice
            total += step(Tensor(x_train[idx], device=device), Tensor(y_train[idx], device=device)).item()
        # the global batch's mean loss is the ranks' mean of their weighted losses
        epoch_loss = dist.all_reduce(Tensor([total / steps], device=device), "mean").item()
        if rank == 0:
            print(f"epoch {epoch + 1:3d}  loss {epoch_loss:.6f}  ({time.perf_counter() - start:.1f} s)", flush=True)
    with Tensor.inference_mode():
        pred = model(Tensor(x_test, device=device)).argmax(-1).numpy()
    accuracy = float((pred == y_test).mean())
    if rank == 0:
        print(f"test accuracy: {accuracy * 100:.2f}% ({time.perf_counter() - start:.1f} s)")
    return accuracy


if __name__ == "__main__":
    main()

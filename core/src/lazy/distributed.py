"""Collectives across processes over MPI (`mpi4py`, the `lazy-core[mpi]` extra): `init`, `rank`, `world_size`,
`all_reduce`, `broadcast`, `all_gather`, `barrier`, and `DataParallel`, which averages gradients in buckets (eagerly, or
between the two jitted halves of a training step). Tensors of any device travel through host memory unless a
`DevicePath` is registered for their device kind."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lazy.record import record
from lazy.tensor import Tensor

if TYPE_CHECKING:
    import numpy as np

    from lazy.nn.optim import Optimizer

DEFAULT_TIMEOUT_S = 60.0
REDUCE_OPS = ("sum", "mean", "max", "min")
HEADER_BYTES = 256  # one collective's description (verb, sequence number, shape, dtype), exchanged before its data
HEADER_TAG = 7001
# a waiting rank polls without sleeping this long (yielding the core), then sleeps between polls: ranks that sleep
# make each collective's message rounds wait for the sleeps (measured: 1-4 ms a training step at 1 ms sleeps)
SPIN_S = 0.05


class DistributedError(RuntimeError):
    """A collective that cannot complete: a rank was lost or is stuck, or the ranks passed tensors that differ."""


# ---------------------------------------------------------------------------------------------------------------------
# device <-> host


@record(frozen=True)
class DevicePath:
    """How a device kind's buffers reach the MPI library. The default goes through host memory: one copy out of the
    realized buffer into a numpy array, one copy into a new buffer of the device. A plugin whose memory MPI can read
    directly (CUDA-aware MPI, NCCL) registers its own pair with `register_device_path`."""

    to_host: Callable[[Tensor], np.ndarray]
    from_host: Callable[[np.ndarray, Tensor], Tensor]  # (values, the tensor they replace) -> tensor on its device


def _host_to_host(t: Tensor) -> np.ndarray:
    import numpy as np

    return np.ascontiguousarray(t.numpy())


def _host_from_host(values: np.ndarray, like: Tensor) -> Tensor:
    out = Tensor(values, device=like.device)
    return out if out.dtype == like.dtype else out.cast(like.dtype)  # bfloat16 and fp8 come back as float32


HOST_PATH = DevicePath(_host_to_host, _host_from_host)
DEVICE_PATHS: dict[str, DevicePath] = {}


def register_device_path(device_kind: str, path: DevicePath) -> None:
    """Exchange tensors of `device_kind` (a device name's part before ':') through `path` instead of host memory."""
    DEVICE_PATHS[device_kind.upper()] = path


def _path(t: Tensor) -> DevicePath:
    device = t.device if isinstance(t.device, str) else str(t.device)
    return DEVICE_PATHS.get(device.split(":")[0].upper(), HOST_PATH)


# ---------------------------------------------------------------------------------------------------------------------
# the process group


@record()
class _World:
    comm: Any  # a duplicate of MPI.COMM_WORLD: lazy's messages never match the program's own MPI traffic
    mpi: Any  # the mpi4py.MPI module
    rank: int
    size: int
    timeout_s: float
    calls: int = 0  # collectives started, the same count on every rank
    broken: str | None = None  # why the group cannot be used any more
    places: list[tuple[str, int]] | None = None  # each rank's (host name, process id), gathered at init


_world: _World | None = None


def _import_mpi() -> Any:
    try:
        import mpi4py
    except ImportError:
        raise ImportError(
            "lazy.distributed needs mpi4py and an MPI library: pip install 'lazy-core[mpi]' (mpi4py and the mpich "
            "wheel), or mpi4py built against a system MPI"
        ) from None
    # lazy finalizes MPI itself at exit, and not at all once a rank was lost: MPI_Finalize waits for the dead rank
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    return MPI


def init(timeout_s: float | None = None) -> None:
    """Join the process group started by `mpiexec` (a group of one without it). Calling it again changes only the
    timeout. `timeout_s` (default 60) bounds how long a collective waits for the other ranks before it raises
    `DistributedError` naming the ranks that did not arrive."""
    global _world
    if _world is not None:
        if timeout_s is not None:
            _world.timeout_s = float(timeout_s)
        return
    mpi = _import_mpi()
    comm = mpi.COMM_WORLD.Dup()
    comm.Set_errhandler(mpi.ERRORS_RETURN)
    world = _World(comm, mpi, comm.Get_rank(), comm.Get_size(), DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
    _world = world
    atexit.register(_finalize)
    if world.size > 1:
        world.places = _gather_places(world)
        _watch_for_lost_ranks()


# ---------------------------------------------------------------------------------------------------------------------
# a rank that dies: MPICH's process manager tells the others with SIGUSR1 (`mpiexec -disable-auto-cleanup`; without it
# it kills them at once, printing the dead process's id). Each rank knows where the others run, so the notice names
# the rank whose process is gone, and the collective waiting (or the next one) raises.

PLACE_BYTES = 256  # a rank's "host pid", padded


def _gather_places(world: _World) -> list[tuple[str, int]]:
    """Every rank's (host name, process id), exchanged once at init (with the collectives' deadline)."""
    import numpy as np

    mine = np.zeros(PLACE_BYTES, np.uint8)
    encoded = f"{socket.gethostname()} {os.getpid()}".encode()[:PLACE_BYTES]
    mine[: len(encoded)] = np.frombuffer(encoded, np.uint8)
    every = np.zeros((world.size, PLACE_BYTES), np.uint8)
    request = world.comm.Iallgather(mine, every)
    _wait(world, [request], "init (where each rank runs)", lambda: [])
    places = []
    for row in every:
        host, _, pid = bytes(row).rstrip(b"\0").decode(errors="replace").rpartition(" ")
        places.append((host, int(pid)))
    return places


def _watch_for_lost_ranks() -> None:
    """Listen for the process manager's notice that a rank died (SIGUSR1), unless the program handles it itself or
    this is not the main thread (where Python runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
        return
    signal.signal(signal.SIGUSR1, _on_lost_rank)


def lost_ranks(world: _World) -> tuple[list[int], list[int]]:
    """(ranks on this host whose process is gone, ranks on other hosts that cannot be checked from here)."""
    here = socket.gethostname()
    gone, elsewhere = [], []
    for r, (host, pid) in enumerate(world.places or []):
        if r == world.rank:
            continue
        if host != here:
            elsewhere.append(r)
            continue
        if not _alive(pid):
            gone.append(r)
    return gone, elsewhere


def _alive(pid: int) -> bool:
    """Is process `pid` running? A process that died but was not waited for yet (a zombie) is not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel, which counts a zombie as alive
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _on_lost_rank(signum: int, frame: Any) -> None:
    world = _world
    if world is None or world.broken is not None:
        return
    gone, elsewhere = lost_ranks(world)
    if gone:
        who = ", ".join(f"rank {r} (process {world.places[r][1]})" for r in gone) if world.places else "a rank"
        what = f"{who} of {world.size} died"
    elif elsewhere:
        what = f"a rank on another host (one of ranks {', '.join(map(str, elsewhere))}) of {world.size} died"
    else:
        what = f"a rank of {world.size} died (the process manager said so; every process on this host is alive)"
    world.broken = f"{what}; rank {world.rank} can no longer take part in collectives, and mpiexec ends the job"
    # written at once: the process manager may stop this process moments later
    os.write(2, f"lazy.distributed: {world.broken}\n".encode())


def _finalize() -> None:
    if _world is not None and _world.broken is None and not _world.mpi.Is_finalized():
        _world.mpi.Finalize()


def _get_world(usable: bool = True) -> _World:
    if _world is None:
        init()
    assert _world is not None
    if usable and _world.broken is not None:
        raise DistributedError(f"the process group is unusable: {_world.broken}")
    return _world


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1."""
    return _get_world(usable=False).rank


def world_size() -> int:
    """How many processes the group has (1 outside mpiexec)."""
    return _get_world(usable=False).size


# ---------------------------------------------------------------------------------------------------------------------
# waiting with a deadline: MPI blocks forever on a dead peer, so every request is polled until it completes or the
# deadline passes (no extra thread, no extra messages; MPI makes progress inside each test)


def _wait(world: _World, requests: list[Any], what: str, pending_ranks: Callable[[], list[int]]) -> None:
    deadline = time.monotonic() + world.timeout_s
    pause = 0.0
    spin_start = time.monotonic()
    while not world.mpi.Request.Testall(requests):
        if world.broken is not None:  # a rank was reported lost while this one waited
            raise DistributedError(world.broken)
        if time.monotonic() > deadline:
            missing = pending_ranks()
            who = f"rank {', '.join(map(str, missing))}" if missing else "a rank"
            world.broken = (
                f"{who} of {world.size} did not take part in {what} within {world.timeout_s:g} s (rank {world.rank} "
                f"waited): it died or is stuck. If it is only slow, raise the timeout: "
                "lazy.distributed.init(timeout_s=...)"
            )
            raise DistributedError(world.broken)
        if time.monotonic() - spin_start < SPIN_S:
            os.sched_yield()  # MPI moves messages only inside calls: a sleeping rank stalls its peers' collectives
            continue
        time.sleep(pause)  # a long wait: back off to at most 1 ms so a waiting rank leaves the core to the others
        pause = min(1e-3, pause * 2 + 1e-6)


def _describe(verb: str, detail: str, shape: tuple[Any, ...], dtype: Any) -> str:
    return f"{verb}({detail}) of shape {shape} and dtype {dtype}"


def _agree(world: _World, description: str) -> str:
    """Exchange this collective's description with every other rank; raise if any differs or does not arrive. Each
    rank hears from each rank, so a lost one is named, and a mismatch raises on every rank (none waits for data)."""
    import numpy as np

    world.calls += 1
    what = f"collective #{world.calls}, {description}"
    encoded = what.encode()[:HEADER_BYTES]
    mine = np.zeros(HEADER_BYTES, np.uint8)
    mine[: len(encoded)] = np.frombuffer(encoded, np.uint8)
    peers = [r for r in range(world.size) if r != world.rank]
    theirs = {r: np.zeros(HEADER_BYTES, np.uint8) for r in peers}
    receives = [world.comm.Irecv(theirs[r], source=r, tag=HEADER_TAG) for r in peers]
    sends = [world.comm.Isend(mine, dest=r, tag=HEADER_TAG) for r in peers]
    _wait(world, receives + sends, what, lambda: [r for r, req in zip(peers, receives) if not req.Test()])
    differ = {
        r: bytes(h).rstrip(b"\0").decode(errors="replace") for r, h in theirs.items() if not np.array_equal(h, mine)
    }
    if differ:
        lines = "; ".join(f"rank {r}: {d}" for r, d in differ.items())
        raise DistributedError(
            f"ranks called different collectives: rank {world.rank}: {what}; {lines}. Every rank must call the same "
            "collectives in the same order with tensors of the same shape and dtype"
        )
    return what


def _collective(
    verb: str, detail: str, t: Tensor, start: Callable[[_World, np.ndarray], tuple[Any, np.ndarray]]
) -> Any:
    world = _get_world()
    shape, path = tuple(t.shape), _path(t)
    what = _agree(world, _describe(verb, detail, shape, t.dtype))
    request, result = start(world, path.to_host(t))
    _wait(world, [request], what, lambda: [])
    return result, path


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """The elementwise `op` ("sum", "mean", "max" or "min") of `t` over every rank, on every rank (same device and
    dtype as `t`; "mean" of an integer tensor divides with truncation)."""
    if op not in REDUCE_OPS:
        raise ValueError(f"all_reduce op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
    if _get_world().size == 1:
        return t

    def start(world: _World, host: np.ndarray) -> tuple[Any, np.ndarray]:
        mpi_op = {"sum": world.mpi.SUM, "mean": world.mpi.SUM, "max": world.mpi.MAX, "min": world.mpi.MIN}[op]
        return world.comm.Iallreduce(world.mpi.IN_PLACE, host, op=mpi_op), host

    total, path = _collective("all_reduce", repr(op), t, start)
    if op == "mean":
        total = (
            (total / _get_world().size).astype(total.dtype) if total.dtype.kind == "f" else total // _get_world().size
        )
    return path.from_host(total, t)


def broadcast(t: Tensor, root: int = 0) -> Tensor:
    """`root`'s `t` on every rank. Every rank passes a tensor of the same shape and dtype (its values are not read)."""
    size = _get_world().size
    if not 0 <= root < size:
        raise ValueError(f"broadcast root must be a rank in 0..{size - 1}, got {root}")
    if size == 1:
        return t

    def start(world: _World, host: np.ndarray) -> tuple[Any, np.ndarray]:
        return world.comm.Ibcast(host, root=root), host

    values, path = _collective("broadcast", f"root={root}", t, start)
    return path.from_host(values, t)


def all_gather(t: Tensor) -> Tensor:
    """Every rank's `t` stacked along a new leading axis, in rank order: shape (world_size(), *t.shape). Every rank
    passes a tensor of the same shape and dtype."""
    if _get_world().size == 1:
        return t.unsqueeze(0)

    def start(world: _World, host: np.ndarray) -> tuple[Any, np.ndarray]:
        import numpy as np

        gathered = np.empty((world.size, *host.shape), host.dtype)
        return world.comm.Iallgather(host, gathered), gathered

    values, path = _collective("all_gather", "", t, start)
    return path.from_host(values, t)


def barrier() -> None:
    """Return once every rank has called it (raises `DistributedError` naming a rank that does not within the
    timeout)."""
    world = _get_world()
    if world.size > 1:
        _agree(world, "barrier()")


# ---------------------------------------------------------------------------------------------------------------------
# data parallel training


class DataParallel:
    """Keeps the parameters of one model the same on every rank: the constructor broadcasts rank 0's values, and
    `average_gradients()`, called after `backward()` and before the optimizer step, replaces each `.grad` by its mean
    over the ranks. `jitted_step(loss_fn, opt)` is the same training step, jitted.

    Gradients are averaged in buckets of about `bucket_mb` MiB, the last parameters first (the order backward
    finishes them): a bucket's gradients are flattened into one buffer, copied to the host and sent with one
    non-blocking allreduce; the next bucket is flattened and copied while it is in flight. What overlaps: a bucket's
    reduction with the copying (eagerly: and computing) of the later buckets, as far as the MPI library progresses on
    its own (MPICH moves messages between our tests; set MPIR_CVAR_ASYNC_PROGRESS=1 for a progress thread). What does
    not: the copies to and from the host, and the optimizer step, which waits for every bucket."""

    def __init__(self, params: Sequence[Tensor], bucket_mb: float = 25.0, root: int = 0):
        self.params = list(params)
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        for p in self.params:
            p.assign(broadcast(p, root)).realize()

    def buckets(self) -> list[list[Tensor]]:
        """The parameters with gradients, last first, grouped into buckets of about `bucket_mb` MiB of one device
        and dtype each."""
        out: list[list[Tensor]] = []
        size = 0
        for p in reversed([p for p in self.params if p.grad is not None]):
            same_kind = out and (out[-1][0].device, out[-1][0].dtype) == (p.device, p.dtype)
            if not same_kind or size >= self.bucket_bytes:
                out.append([])
                size = 0
            out[-1].append(p)
            size += _numel(p) * p.dtype.itemsize
        return out

    def average_gradients(self) -> None:
        """Replace every parameter's `.grad` by its mean over the ranks."""
        if _get_world().size == 1:
            return
        buckets = self.buckets()
        _set_gradients(buckets, _mean_over_ranks([_flat_gradients(bucket) for bucket in buckets]))

    def jitted_step(self, loss_fn: Callable[..., Tensor], opt: Optimizer) -> DataParallelStep:
        """A jitted training step `step(*inputs) -> loss`: `loss_fn(*inputs)` is this rank's loss (its gradients,
        averaged over the ranks, must be the global batch's: weight a mean loss by this rank's share of the batch
        times `world_size()`), and `opt` updates the parameters of this `DataParallel`. Inputs keep their shapes from
        step to step, as under `jit`. The returned loss's memory is rewritten by the next step: read it first."""
        return DataParallelStep(self, loss_fn, opt)


class DataParallelStep:
    """Two jitted halves with the gradient exchange between them, which `jit` cannot capture (it runs on the host):
    forward and backward return the loss and each bucket's gradients flattened; their means over the ranks are the
    inputs of the second half, which puts them back as `.grad` and runs the optimizer step. Built by
    `DataParallel.jitted_step`."""

    def __init__(self, ddp: DataParallel, loss_fn: Callable[..., Tensor], opt: Optimizer):
        from lazy.engine.jit import jit

        self.ddp, self.loss_fn, self.opt = ddp, loss_fn, opt
        self.layout: list[list[Tensor]] | None = None  # the buckets of the last backward run in Python
        self.backward, self.update = jit(self._backward), jit(self._update)

    def __call__(self, *inputs: Tensor) -> Tensor:
        loss, *flats = self.backward(*inputs)
        self.update(*[mean.realize() for mean in _mean_over_ranks(flats)])
        return loss

    def _backward(self, *inputs: Tensor) -> list[Tensor]:
        with Tensor.train():
            self.opt.zero_grad()
            loss = self.loss_fn(*inputs)
            loss.backward()
            self.layout = self.ddp.buckets()  # runs eagerly and at capture only: replays keep the captured layout
            outs = [loss, *[_flat_gradients(bucket) for bucket in self.layout]]
            Tensor.realize(*outs)  # one schedule: the forward work is shared by the loss and the gradients
            return outs

    def _update(self, *means: Tensor) -> None:
        assert self.layout is not None
        with Tensor.train():
            _set_gradients(self.layout, list(means))
            self.opt.step()


def _flat_gradients(bucket: list[Tensor]) -> Tensor:
    grads = [p.grad for p in bucket if p.grad is not None]
    return grads[0].flatten().cat(*[g.flatten() for g in grads[1:]])  # (sum of the bucket's sizes,)


def _set_gradients(buckets: list[list[Tensor]], flats: list[Tensor]) -> None:
    """Give each parameter of `buckets` its slice of its bucket's flat gradient as `.grad`."""
    for bucket, flat in zip(buckets, flats):
        offset = 0
        for p in bucket:
            p.grad = flat[offset : offset + _numel(p)].reshape(p.shape)
            offset += _numel(p)


def _mean_over_ranks(flats: list[Tensor]) -> list[Tensor]:
    """Each of `flats` averaged over the ranks: each is copied to the host and its allreduce started before the
    next one is copied; then each is waited for and copied back."""
    world = _get_world()
    if world.size == 1:
        return flats
    in_flight: list[tuple[Tensor, Any, np.ndarray, str]] = []
    for flat in flats:
        what = _agree(world, _describe("average_gradients", "", tuple(flat.shape), flat.dtype))
        host = _path(flat).to_host(flat)
        in_flight.append((flat, world.comm.Iallreduce(world.mpi.IN_PLACE, host, op=world.mpi.SUM), host, what))
        world.mpi.Request.Testall([request for _, request, _, _ in in_flight])  # earlier buckets move on
    means: list[Tensor] = []
    for flat, request, host, what in in_flight:
        _wait(world, [request], what, lambda: [])
        host /= world.size
        means.append(_path(flat).from_host(host, flat))
    return means


def _numel(t: Tensor) -> int:
    n = t.numel()
    if not isinstance(n, int):
        raise ValueError(f"DataParallel needs parameters of concrete shape, not {t.shape}")
    return n

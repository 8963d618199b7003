"""One rank of the MPI tests (launched by test_mpi.py with `mpiexec -n N python mpi_worker.py SCENARIO`): checks
lazy.distributed against numpy on every rank and prints `OK <scenario> <rank>/<size>` when every check passed."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import lazy.distributed as dist
from lazy import Tensor, dtypes
from lazy.nn.optim import SGD


def rank_input(r: int, dtype: type[np.generic]) -> np.ndarray:
    # every rank can compute every rank's input, so each checks the collective's result against numpy
    values = (np.arange(12).reshape(3, 4) - 5) * (r + 1) + r
    return values.astype(dtype)


def check_collectives(rank: int, size: int) -> None:
    for np_dtype, dtype in ((np.float32, dtypes.float32), (np.int32, dtypes.int32)):
        inputs = np.stack([rank_input(r, np_dtype) for r in range(size)])  # (size, 3, 4)
        mine = Tensor(rank_input(rank, np_dtype))
        for op, want in (("sum", inputs.sum(0)), ("max", inputs.max(0)), ("min", inputs.min(0))):
            got = dist.all_reduce(mine, op)
            assert got.dtype == dtype and got.device == mine.device, (got.dtype, got.device)
            np.testing.assert_array_equal(got.numpy(), want.astype(np_dtype), err_msg=op)
        mean = dist.all_reduce(mine, "mean").numpy()
        want_mean = inputs.sum(0) // size if np_dtype == np.int32 else inputs.mean(0)
        np.testing.assert_allclose(mean, want_mean, rtol=1e-6, err_msg="mean")
        root = size - 1
        np.testing.assert_array_equal(dist.broadcast(mine, root=root).numpy(), inputs[root])
        gathered = dist.all_gather(mine)
        assert gathered.shape == (size, 3, 4)
        np.testing.assert_array_equal(gathered.numpy(), inputs)
    # a lazy input (not realized yet) and a view of one
    lazy_input = (Tensor.arange(6).float() * (rank + 1)).reshape(2, 3)[:, 1:]
    want = sum((np.arange(6, dtype=np.float32) * (r + 1)).reshape(2, 3)[:, 1:] for r in range(size))
    np.testing.assert_array_equal(dist.all_reduce(lazy_input).numpy(), want)
    dist.barrier()


def check_mismatch(rank: int, size: int) -> None:
    shape = (3,) if rank == 0 else (4,)
    try:
        dist.all_reduce(Tensor.ones(*shape))
    except dist.DistributedError as e:
        assert "(3,)" in str(e) and "(4,)" in str(e), e
    else:
        raise AssertionError("all_reduce of different shapes did not raise")
    try:
        dist.all_gather(Tensor.ones(2, dtype=dtypes.int32 if rank == 1 else dtypes.float32))
    except dist.DistributedError as e:
        assert "int" in str(e) and "float" in str(e), e
    else:
        raise AssertionError("all_gather of different dtypes did not raise")
    # the group is still usable afterwards
    np.testing.assert_array_equal(dist.all_reduce(Tensor.ones(2)).numpy(), np.full(2, size, np.float32))


def check_average_gradients(rank: int, size: int) -> None:
    params = [Tensor.full((5, 7), float(rank + 1)).contiguous(), Tensor.full((7,), 1.5 - rank).contiguous()]
    params.append(Tensor.arange(300).float() * (rank + 1))
    for p in params:
        p.requires_grad_().realize()
    ddp = dist.DataParallel(params, bucket_mb=200 * 4 / 2**20)  # buckets of ~200 floats: more than one bucket
    assert len(ddp.buckets()) == 0  # no gradients yet
    np.testing.assert_array_equal(params[0].numpy(), np.ones((5, 7), np.float32))  # rank 0's values everywhere
    np.testing.assert_array_equal(params[2].numpy(), np.arange(300, dtype=np.float32))
    loss = (params[0].sum(1) * params[1][:5]).sum() * (rank + 1) + (params[2] * params[2]).sum() * (rank + 1)
    loss.backward()
    assert len(ddp.buckets()) == 2, [len(b) for b in ddp.buckets()]
    ddp.average_gradients()
    scale = np.mean([r + 1 for r in range(size)])  # each rank's gradient is (rank + 1) times rank 0's
    grads = [p.grad.numpy() for p in params if p.grad is not None]
    assert len(grads) == 3
    np.testing.assert_allclose(grads[0], np.full((5, 7), 1.5 * scale), rtol=1e-6)
    want_p1 = np.zeros(7, np.float32)
    want_p1[:5] = 7 * scale
    np.testing.assert_allclose(grads[1], want_p1, rtol=1e-6)
    np.testing.assert_allclose(grads[2], 2 * np.arange(300) * scale, rtol=1e-6)


GLOBAL_X = (np.arange(7 * 4).reshape(7, 4) % 5 - 2).astype(np.float32) / 3  # a global batch of 7: uneven slices
GLOBAL_Y = (np.arange(7) % 3).astype(np.int32)
STEPS = 4  # the first call runs eagerly, the second captures, the last two replay


def check_jitted_step(rank: int, size: int) -> None:
    """`DataParallel.jitted_step` on each rank's slice of a batch gives the single-process full-batch step's losses
    and parameters (computed eagerly on every rank), and after the capture it replays both jitted halves."""

    def model() -> list[Tensor]:  # a linear classifier 4 -> 3, the same start on every rank
        w = Tensor((np.arange(12).reshape(4, 3) % 7 - 3).astype(np.float32) / 10).contiguous().realize()
        return [w, Tensor.full((3,), 0.1).contiguous().realize()]

    def mean_loss(params: list[Tensor], x: Tensor, y: Tensor) -> Tensor:
        return (x.matmul(params[0]) + params[1]).sparse_categorical_crossentropy(y)

    reference, params = model(), model()
    reference_opt, opt = (
        SGD(reference, lr=0.5, momentum=0.9),
        SGD(params, lr=0.5, momentum=0.9),
    )  # (Adam would hide a wrong scale)
    mine = np.array_split(np.arange(len(GLOBAL_X)), size)[rank]
    share = len(mine) * size / len(GLOBAL_X)
    step = dist.DataParallel(params).jitted_step(lambda x, y: mean_loss(params, x, y) * share, opt)
    for s in range(STEPS):
        batch_x = GLOBAL_X * (s + 1)  # new values every step: a replay must read its new inputs
        with Tensor.train():
            reference_opt.zero_grad()
            want = mean_loss(reference, Tensor(batch_x), Tensor(GLOBAL_Y))
            want.backward()
            reference_opt.step()
        got = dist.all_reduce(step(Tensor(batch_x[mine]), Tensor(GLOBAL_Y[mine])), "mean").item()
        np.testing.assert_allclose(got, want.item(), rtol=1e-5, err_msg=f"loss of step {s}")
    for p, ref in zip(params, reference):
        np.testing.assert_allclose(p.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    assert step.backward.captured is not None and step.update.captured is not None, "a half was not jitted"
    assert step.backward.cnt == step.update.cnt == STEPS


def check_lost(rank: int, size: int) -> None:
    """The last rank stops taking part: `stuck` sleeps past the others' timeout, `killed` dies by SIGKILL."""
    dist.init(timeout_s=float(sys.argv[2]))
    dist.barrier()  # everyone is up
    if rank == size - 1:
        if sys.argv[1] == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3 * float(sys.argv[2]))
        os._exit(0)
    try:
        dist.all_reduce(Tensor.ones(4))
    except dist.DistributedError as e:
        # one write (print writes the text and its newline apart when unbuffered, PYTHONUNBUFFERED=1), so the two
        # survivors' lines cannot interleave into one through mpiexec's forwarding
        sys.stdout.write(f"RAISED {e}\n")
        sys.stdout.flush()
        # the other survivor's deadline is moments away: leaving now would reach it first as a lost rank (mpiexec
        # -disable-auto-cleanup tells the others when a process ends without finalizing), not as its own timeout
        time.sleep(2.0)
        os._exit(0)  # the group is broken: skip the interpreter's clean-up, as a program that gives up would
    raise AssertionError("all_reduce with a lost rank did not raise")


def check_notice(rank: int, size: int) -> None:
    """The process manager's notice that a rank died (SIGUSR1, as `mpiexec -disable-auto-cleanup` sends it), in a
    world of one whose other ranks' places are made up: a finished process, a zombie and a process on another host.
    The collective waiting raises naming the two gone on this host; every later collective raises too; with only
    other hosts' ranks left, the notice names them as the candidates."""
    import socket
    import subprocess
    import threading

    world = dist._world
    assert world is not None and size == 1, "the notice scenario runs as a world of one"
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for until the end
    deadline = time.monotonic() + 30
    while dist._alive(zombie.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dist._alive(os.getpid()) and not dist._alive(finished.pid) and not dist._alive(zombie.pid)
    here = socket.gethostname()
    world.places = [(here, os.getpid()), (here, finished.pid), (here, zombie.pid), ("another-host.invalid", 1)]
    world.size = len(world.places)
    signal.signal(signal.SIGUSR1, dist._on_lost_rank)
    never = world.comm.Irecv(np.zeros(1, np.uint8), source=0, tag=4242)  # nothing is ever sent: it stays pending
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    start = time.monotonic()
    try:
        dist._wait(world, [never], "a test collective", lambda: [])
        raise AssertionError("the wait did not raise on the notice")
    except dist.DistributedError as e:
        message = str(e)
    assert time.monotonic() - start < 10, "the notice did not end the wait"
    assert f"rank 1 (process {finished.pid})" in message and f"rank 2 (process {zombie.pid})" in message, message
    assert "of 4 died" in message and "rank 3" not in message, message
    try:
        dist.all_reduce(Tensor.ones(2))
        raise AssertionError("a collective after the notice did not raise")
    except dist.DistributedError as e:
        assert "of 4 died" in str(e), e
    never.Cancel()
    zombie.wait()
    world.places, world.broken = [world.places[0], ("another-host.invalid", 1), ("yet-another.invalid", 2)], None
    world.size = 3
    dist._on_lost_rank(signal.SIGUSR1, None)
    assert world.broken is not None and "a rank on another host (one of ranks 1, 2) of 3 died" in world.broken
    world.size, world.places, world.broken = 1, None, None  # a world of one again, for the clean-up at exit


def check_data_parallel(rank: int, size: int) -> None:  # one launch for both: each costs seconds of start-up
    check_average_gradients(rank, size)
    check_jitted_step(rank, size)


SCENARIOS = {"collectives": check_collectives, "mismatch": check_mismatch, "data_parallel": check_data_parallel}
SCENARIOS["stuck"] = SCENARIOS["killed"] = check_lost
SCENARIOS["notice"] = check_notice

if __name__ == "__main__":
    scenario = sys.argv[1]
    dist.init()
    SCENARIOS[scenario](dist.rank(), dist.world_size())
    print(f"OK {scenario} {dist.rank()}/{dist.world_size()}", flush=True)

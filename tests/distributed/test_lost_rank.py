"""A rank that dies while the others wait: MPICH's process manager (`mpiexec -disable-auto-cleanup`) sends the
survivors SIGUSR1, and `lazy.distributed` names the rank whose process is gone (from the host and process id each
rank gave at init) and raises in the collective waiting. Here in one process on real MPI (a world of one, its
requests really pending): the other ranks' places are a finished process, a zombie and a process on another host."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("mpi4py", reason="the MPI extra is not installed: pip install 'lazy-core[mpi]'")

import lazy.distributed as dist  # noqa: E402


def _finished_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def world(monkeypatch):
    dist.init()
    real = dist._world
    assert real is not None
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for until the test ends
    deadline = time.monotonic() + 30
    while dist._alive(zombie.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    here = socket.gethostname()
    places = [(here, os.getpid()), (here, _finished_pid()), (here, zombie.pid), ("another-host.invalid", 1)]
    fake = dist._World(real.comm, real.mpi, 0, len(places), 30.0, places=places)
    monkeypatch.setattr(dist, "_world", fake)
    previous = signal.signal(signal.SIGUSR1, dist._on_lost_rank)
    yield fake
    signal.signal(signal.SIGUSR1, previous)
    zombie.wait()


def test_dead_and_zombie_processes_are_gone_and_live_ones_not() -> None:
    assert dist._alive(os.getpid())
    assert not dist._alive(_finished_pid())


def test_the_waiting_collective_raises_naming_the_lost_ranks(world) -> None:
    import numpy as np

    never = world.comm.Irecv(np.zeros(1, np.uint8), source=0, tag=4242)  # nothing is ever sent: it stays pending
    notice = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
    notice.start()
    start = time.monotonic()
    with pytest.raises(dist.DistributedError) as caught:
        dist._wait(world, [never], "a test collective", lambda: [])
    assert time.monotonic() - start < 10, "the notice did not end the wait"
    message = str(caught.value)
    places = world.places
    assert f"rank 1 (process {places[1][1]})" in message and f"rank 2 (process {places[2][1]})" in message, message
    assert "of 4 died" in message and "rank 3" not in message, message
    never.Cancel()
    with pytest.raises(dist.DistributedError, match="of 4 died"):  # and every later collective
        dist._get_world()


def test_on_another_host_the_candidates_are_named(world) -> None:
    world.places = [world.places[0], ("another-host.invalid", 1), ("yet-another.invalid", 2)]
    world.size = 3
    dist._on_lost_rank(signal.SIGUSR1, None)
    assert world.broken is not None and "a rank on another host (one of ranks 1, 2) of 3 died" in world.broken

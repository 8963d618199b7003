"""Allreduce bandwidth across CPU:0 and CPU:1 against this machine's memory copy bandwidth (issue 14's bar: >= 50%).

Core's allreduce (`lazy.multi.ring_allreduce`, what a sum over a sharded axis runs; between CPU:0 and CPU:1 each
device adds the other's partial in place, see docs/architecture.md "Peer reads"): each device holds 64 MiB of
float32 and every device ends with the sum, timed to both devices' completion; bandwidth = bytes / time. Also the
copy paths it uses alone: a ring over the devices in which every step copies a 64 MiB chunk to the next device
(`Tensor.to`: a direct memmove between the two pools).
Run: .venv/bin/python bench/allreduce.py [--mib 64] [--repeats 5]"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lazy.plugins import Device
from lazy.tensor import Tensor

DEVICES = ("CPU", "CPU:1")


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm: allocations, first-touch page faults, compiles
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def memory_copy_gbps(nbytes: int, repeats: int) -> float:
    """numpy copy of a large array into a preallocated one: bytes copied per second."""
    src, dest = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
    return nbytes / best_seconds(lambda: np.copyto(dest, src), repeats) / 1e9


def ring_copy_gbps(nbytes: int, repeats: int) -> float:
    """One ring step per device: each device's 64 MiB chunk is copied to the next device (both at once would share
    the same memory bus; here they run one after another, as the allreduce's schedule does)."""
    chunks = [Tensor(np.ones(nbytes // 4, np.float32), device=dev).realize() for dev in DEVICES]

    def ring() -> None:  # a copy between host instances runs on the realizing thread: done when realize returns
        for k, chunk in enumerate(chunks):
            chunk.to(DEVICES[(k + 1) % len(DEVICES)]).realize()

    return len(DEVICES) * nbytes / best_seconds(ring, repeats) / 1e9


def allreduce_gbps(nbytes: int, repeats: int) -> float:
    """The sum of one 64 MiB buffer per device, replicated on every device."""
    per_device = np.ones((len(DEVICES), nbytes // 4), np.float32)
    held = Tensor(per_device).shard(DEVICES, axis=0).realize()

    def allreduce() -> None:
        held.sum(0).realize()  # a new result each time: nothing is reused from the last call
        for dev in DEVICES:
            Device[dev].synchronize()

    return nbytes / best_seconds(allreduce, repeats) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="bytes per chunk, in MiB (default 64)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    nbytes = args.mib << 20
    copy_bw, ring_bw = memory_copy_gbps(nbytes, args.repeats), ring_copy_gbps(nbytes, args.repeats)
    reduce_bw = allreduce_gbps(nbytes, args.repeats)
    print(f"memory copy (numpy, {args.mib} MiB):          {copy_bw:6.2f} GB/s")
    print(f"ring copies {' -> '.join(DEVICES)} -> {DEVICES[0]}: {ring_bw:6.2f} GB/s")
    print(f"allreduce over {', '.join(DEVICES)}:        {reduce_bw:6.2f} GB/s")
    print(f"ratio: {reduce_bw / copy_bw:.0%} of the memory copy (issue 14 bar: >= 50%); copy paths alone "
          f"{ring_bw / copy_bw:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()

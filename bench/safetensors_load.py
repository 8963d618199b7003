"""Load throughput: a safetensors file read through DISK into CPU (`safe_load` + `.to("CPU")`) against
`numpy.fromfile` on the same file. Both run warm (the file in the page cache), best of `--repeat` runs.

    .venv/bin/python bench/safetensors_load.py [--mib 1024] [--tensors 8] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

import numpy as np

from lazy import Tensor
from lazy.helpers import GlobalCounters
from lazy.nn.state import safe_load, safe_save


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    path = pathlib.Path(args.dir) / "lazy-disk-bench.safetensors"
    per = args.mib * (1 << 20) // 4 // args.tensors
    rng = np.random.default_rng(0)
    tensors = {f"w{i}": Tensor(rng.standard_normal(per, dtype=np.float32), device="CPU") for i in range(args.tensors)}
    start = time.perf_counter()
    safe_save(tensors, path)
    save_s = time.perf_counter() - start
    nbytes = path.stat().st_size
    del tensors

    def load_numpy() -> None:
        np.fromfile(path, dtype=np.uint8)

    def load_lazy() -> None:
        loaded = safe_load(path)
        on_cpu = {k: v.to("CPU") for k, v in loaded.items()}
        GlobalCounters.kernel_count = 0
        Tensor.realize(*on_cpu.values())
        assert GlobalCounters.kernel_count == 0, "loading ran kernels"

    load_numpy()  # warm the page cache
    first_s = best_of(1, load_lazy)  # fresh CPU buffers (page faults), as numpy.fromfile has on every run
    numpy_s, lazy_s = best_of(args.repeat, load_numpy), best_of(args.repeat, load_lazy)
    raw = np.fromfile(path, dtype=np.uint8)
    header = 8 + int(raw[:8].view(np.uint64)[0])
    for name, tensor in safe_load(path).items():  # the bytes arrived: each tensor against the file itself
        i = int(name[1:])
        want = raw[header + i * per * 4 : header + (i + 1) * per * 4].view(np.float32)
        np.testing.assert_array_equal(tensor.to("CPU").numpy(), want)
    gib = nbytes / (1 << 30)
    print(f"file: {path} ({nbytes / (1 << 20):.0f} MiB, {args.tensors} float32 tensors)")
    print(f"safe_save (durable, atomic): {save_s:.3f} s = {gib / save_s:.2f} GiB/s")
    print(f"numpy.fromfile:              {numpy_s:.3f} s = {gib / numpy_s:.2f} GiB/s")
    print(f"safe_load -> CPU:            {lazy_s:.3f} s = {gib / lazy_s:.2f} GiB/s ({lazy_s / numpy_s:.2f}x numpy)")
    print(f"safe_load -> CPU, first run: {first_s:.3f} s = {gib / first_s:.2f} GiB/s ({first_s / numpy_s:.2f}x numpy)")
    os.unlink(path)


if __name__ == "__main__":
    main()

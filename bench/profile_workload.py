"""One row of the benchmark command on one lazy device, run a few times, nothing timed here: with `LAZY_DEBUG=2` the
summary at exit lists the kernels that take its time (calls, total and mean time, GFLOP/s, GB/s) and their sizes.

    LAZY_DEBUG=2 python bench/profile_workload.py --device CUDA matmul 2048
    LAZY_DEBUG=4 python bench/profile_workload.py --device CPU conv_backward    (the generated source too)
"""

from __future__ import annotations

import argparse

import run  # bench/run.py: this script's directory is on sys.path when it runs

ROWS = {"elementwise", "exp", "softmax", "sum", "matmul", "conv2d", "conv2d_backward", "cnn", "mlp"}


def arguments(key: str, size: int | None) -> tuple[object, ...]:
    """The row's arguments at the benchmark's full sizes (`size`: matmul's n, or the vector/softmax length)."""
    sizes = run.FULL
    return {"elementwise": (size or sizes.vector,), "exp": (size or sizes.vector,), "sum": (size or sizes.vector,),
            "softmax": (size or sizes.softmax,), "matmul": (size or sizes.matmul[0],), "conv2d": (sizes.conv,),
            "conv2d_backward": (sizes.conv,), "cnn": (sizes.cnn_batch,), "mlp": ()}[key]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row", choices=sorted(ROWS))
    parser.add_argument("size", nargs="?", type=int, default=None, help="matmul's n, or the vector/softmax length")
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--reps", type=int, default=3, help="repetitions after the row's warm-up calls")
    args = parser.parse_args()
    lib = run.lazy_lib(args.device)
    prepare = run.LIB_ROWS[args.row](lib, *arguments(args.row, args.size))
    warmup = 2 if args.row == "cnn" else 1
    for _ in range(warmup + args.reps):
        prepare()()


if __name__ == "__main__":
    main()

"""The benchmark command: lazy beside numpy (and PyTorch / tinygrad when installed), in one process run.

    .venv/bin/python bench/run.py [--devices CPU,LLVM] [--out docs/benchmarks.md] [--quick]

Writes a Markdown table (and the machine it ran on) to --out, and prints it. Timing lives here, never in tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

Row = dict[str, Any]


def best_of(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def import_time(repeats: int = 5) -> float:
    code = "import time; t = time.perf_counter(); import lazy; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(repeats)]  # fmt: skip
    return statistics.median(runs)


def lazy_sync(device: str) -> None:
    from lazy import Device

    Device[device].synchronize()


def bench_elementwise(device: str, n: int, repeats: int) -> dict[str, float]:
    from lazy import Tensor

    rng = np.random.default_rng(0)
    a, b, c = (rng.random(n, dtype=np.float32) for _ in range(3))
    ta, tb, tc = (Tensor(x, device=device).realize() for x in (a, b, c))

    def run_lazy() -> None:
        ((ta + tb) * tc).realize()
        lazy_sync(device)

    return {"lazy": best_of(run_lazy, repeats), "numpy": best_of(lambda: (a + b) * c, repeats)}


def bench_reduce(device: str, n: int, repeats: int) -> dict[str, float]:
    from lazy import Tensor

    a = np.random.default_rng(0).random(n, dtype=np.float32)
    ta = Tensor(a, device=device).realize()

    def run_lazy() -> None:
        ta.sum().realize()
        lazy_sync(device)

    return {"lazy": best_of(run_lazy, repeats), "numpy": best_of(lambda: a.sum(), repeats)}


def bench_matmul(device: str, n: int, repeats: int) -> dict[str, float]:
    from lazy import Tensor

    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    ta, tb = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()

    def run_lazy() -> None:
        (ta @ tb).realize()
        lazy_sync(device)

    return {"lazy": best_of(run_lazy, repeats), "numpy": best_of(lambda: a @ b, repeats)}


def bench_tiny(device: str, repeats: int) -> dict[str, float]:
    from lazy import Tensor

    x = Tensor(np.arange(16, dtype=np.float32), device=device).realize()
    count = 200

    def run_lazy() -> None:
        for _ in range(count):
            (x + 1).realize()
        lazy_sync(device)

    xn = np.arange(16, dtype=np.float32)

    def run_numpy() -> None:
        for _ in range(count):
            xn + 1

    return {"lazy": best_of(run_lazy, repeats) / count, "numpy": best_of(run_numpy, repeats) / count}


def bench_jit_step(device: str, repeats: int) -> dict[str, float]:
    """A jitted 2-layer MLP forward+backward+SGD step on a 64x64 batch: per-replay cost."""
    from lazy import Context, Tensor, jit
    from lazy.nn import Linear
    from lazy.nn.optim import SGD
    from lazy.nn.state import get_parameters

    with Context(DEVICE=device):
        l1, l2 = Linear(64, 64), Linear(64, 10)
        params = get_parameters([l1, l2])
        for p in params:
            p.realize()
        opt = SGD(params, lr=0.01)

    @jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

    x = Tensor(np.random.default_rng(0).random((64, 64), dtype=np.float32), device=device).realize()
    y = Tensor(np.arange(64, dtype=np.int32) % 10, device=device).realize()
    count = 20

    def run() -> None:
        for _ in range(count):
            step(x, y)
        lazy_sync(device)

    return {"lazy": best_of(run, repeats) / count}


def torch_rows(sizes: dict[str, int], repeats: int) -> dict[str, float]:
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(os.cpu_count() or 1)
    n = sizes["elementwise"]
    a, b, c = (torch.rand(n) for _ in range(3))
    m = sizes["matmul"]
    x, y = torch.rand(m, m), torch.rand(m, m)
    r = torch.rand(sizes["reduce"])
    t16 = torch.arange(16, dtype=torch.float32)
    return {
        "elementwise": best_of(lambda: (a + b) * c, repeats),
        "reduce": best_of(lambda: r.sum(), repeats),
        "matmul": best_of(lambda: x @ y, repeats),
        "tiny": best_of(lambda: [t16 + 1 for _ in range(200)], repeats) / 200,
    }


def tinygrad_rows(sizes: dict[str, int], repeats: int, device: str) -> dict[str, float]:
    """tinygrad (`pip install tinygrad`) on its device of the same name (CPU, LLVM, CL), when it has one."""
    try:
        from tinygrad import Device as TDevice
        from tinygrad import Tensor as TTensor

        dev = device if device in TDevice._devices else "CPU"  # type: ignore[attr-defined]
        TDevice[dev]
    except Exception:  # not installed, or no such backend here
        return {}
    rng = np.random.default_rng(0)
    n = sizes["elementwise"]
    a, b, c = (TTensor(rng.random(n, dtype=np.float32), device=dev).realize() for _ in range(3))
    m = sizes["matmul"]
    x, y = (TTensor(rng.random((m, m), dtype=np.float32), device=dev).realize() for _ in range(2))
    r = TTensor(rng.random(sizes["reduce"], dtype=np.float32), device=dev).realize()
    t16 = TTensor(np.arange(16, dtype=np.float32), device=dev).realize()

    def timed(make: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            make().realize()
            TDevice[dev].synchronize()

        return run

    def tiny() -> None:
        for _ in range(50):
            (t16 + 1).realize()
        TDevice[dev].synchronize()

    return {
        "elementwise": best_of(timed(lambda: (a + b) * c), repeats),
        "reduce": best_of(timed(lambda: r.sum()), repeats),
        "matmul": best_of(timed(lambda: x @ y), repeats),
        "tiny": best_of(tiny, repeats) / 50,
    }


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="CPU,LLVM")
    parser.add_argument("--out", default="docs/benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats (a smoke run)")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    sizes = {"elementwise": 1 << 20, "reduce": 1 << 20, "matmul": 256} if args.quick else \
        {"elementwise": 16 << 20, "reduce": 16 << 20, "matmul": 1024}  # fmt: skip

    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}. Command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`.",
        "",
    ]
    from lazy.conformance.runner import device_versions

    for device in args.devices.split(","):
        lines.append(f"{device}: " + ", ".join(f"{k} {v}" for k, v in device_versions(device).items()))
    lines.append("")
    imp = import_time()
    lines += [f"`import lazy` (median of 5 fresh processes): **{imp * 1e3:.0f} ms**", ""]
    lines += [
        "| workload | device | lazy | numpy | lazy vs numpy | torch | tinygrad (same device) |",
        "|---|---|---|---|---|---|---|",
    ]
    ref_torch = torch_rows(sizes, repeats)
    n_el, n_red, n_mm = sizes["elementwise"], sizes["reduce"], sizes["matmul"]
    flops = 2 * n_mm**3
    for device in args.devices.split(","):
        try:
            ref_tiny = tinygrad_rows(sizes, repeats, device)
        except Exception as e:  # a tinygrad backend that fails at run time: say so, keep benchmarking lazy
            print(f"tinygrad on {device} failed: {e}")
            ref_tiny = {}
        results = {
            f"(a+b)*c, {n_el >> 20}M float32": ("elementwise", bench_elementwise(device, n_el, repeats)),
            f"sum, {n_red >> 20}M float32": ("reduce", bench_reduce(device, n_red, repeats)),
            f"matmul {n_mm}x{n_mm} float32": ("matmul", bench_matmul(device, n_mm, repeats)),
            "cached tiny op (x+1).realize(), 16 elements": ("tiny", bench_tiny(device, repeats)),
        }
        for name, (key, r) in results.items():
            speed = f"{r['numpy'] / r['lazy']:.2f}x" if key != "tiny" else f"{r['numpy'] / r['lazy']:.3f}x"
            lazy_cell = fmt_time(r["lazy"]) + (f" ({flops / r['lazy'] / 1e9:.1f} GFLOP/s)" if key == "matmul" else "")
            numpy_cell = fmt_time(r["numpy"]) + (
                f" ({flops / r['numpy'] / 1e9:.1f} GFLOP/s)" if key == "matmul" else ""
            )
            torch_cell = fmt_time(ref_torch[key]) if key in ref_torch else "not installed"
            tiny_cell = fmt_time(ref_tiny[key]) if key in ref_tiny else "n/a"
            lines.append(f"| {name} | {device} | {lazy_cell} | {numpy_cell} | {speed} | {torch_cell} | {tiny_cell} |")
        jit = bench_jit_step(device, repeats)
        lines.append(
            f"| jitted MLP train step (64x64 batch), per replay | {device} | {fmt_time(jit['lazy'])} | | | | |"
        )
        print(f"{device}: done", flush=True)
    table = "\n".join(lines)
    print(table)
    if args.out:
        write_section(args.out, table)


START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def write_section(path: str, table: str) -> None:
    """Replace the generated section of `path` (between the bench markers), keeping the hand-written rest."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = f"{START}\n## Latest run (`bench/run.py`, {stamp})\n\n{table}\n{END}"
    try:
        text = open(path).read()
    except FileNotFoundError:
        text = "# Benchmarks\n\n"
    if START in text and END in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()

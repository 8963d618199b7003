"""How a benchmark run is described and written down: the machine and library versions it ran on, the import time,
the figures issue 14's own scripts report (quoted, each run in a fresh process), and the generated section of
docs/benchmarks.md (between the bench markers; the hand-written rest is kept)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np


def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        return f", {kib / (1 << 20):.0f} GiB"
    except (OSError, StopIteration, ValueError):
        return ""


def machine_lines(devices: list[str], torch: Any) -> list[str]:
    """The machine and the library versions the figures depend on."""
    try:
        from lazy_cpu.hostcpu import describe

        vectors = describe()
    except ImportError:
        vectors = f"{platform.machine()}, vector extensions unknown (lazy-cpu is not installed)"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch_version = f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "no PyTorch"
    try:
        from importlib.metadata import version

        tinygrad_version = f"tinygrad {version('tinygrad')}"
    except Exception:
        tinygrad_version = "no tinygrad"
    from lazy.conformance.runner import device_versions

    lines = [
        f"Machine: {cpu_model()} ({vectors}), {os.cpu_count()} cores ({usable} usable){memory_gib()}, "
        f"{platform.system()} {platform.release()}.",
        f"Python {platform.python_version()}, numpy {np.__version__}, {torch_version}, {tinygrad_version}. "
        f"Command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`.",
        "",
    ]
    lines += [f"{device}: " + ", ".join(f"{k} {v}" for k, v in device_versions(device).items()) for device in devices]
    return lines


def import_time(repeats: int) -> float:
    """The median time of `import lazy` in fresh processes (the "import" row)."""
    code = "import time; t = time.perf_counter(); import lazy; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(repeats)]  # fmt: skip
    return statistics.median(runs)


# Issue 14's figures, each from its own script in a fresh process (a second CPU instance, MPI): (row, script, its
# arguments in a full run and in a quick one, the lines of its output that are the figures)
MULTI_DEVICE_ROWS: dict[str, tuple[str, list[str], list[str], tuple[str, ...]]] = {
    "allreduce": ("allreduce.py", [], ["--mib", "8", "--repeats", "2"], ("allreduce over", "ratio:")),
    "dp_mpi": ("dp_mpi.py", [], ["--steps", "10", "--repeats", "1"], ("1 process:", "processes:", "ratio (")),
}


def multi_device_lines(key: str, quick: bool) -> list[str]:
    """Run one of MULTI_DEVICE_ROWS and quote its figures (or why there are none)."""
    script, full_args, quick_args, wanted = MULTI_DEVICE_ROWS[key]
    args = quick_args if quick else full_args
    label = " ".join([f"bench/{script}", *args])
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), script), *args]
    print(f"  {key}: {label}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return [f"`{label}`: failed ({tail[0]})", ""]
    figures = [line.strip() for line in proc.stdout.splitlines() if any(w in line for w in wanted)]
    return [f"`{label}` (issue 14):", "", *(f"    {line}" for line in figures), ""]


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

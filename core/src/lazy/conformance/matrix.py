"""Run the suite on several devices (each in its own process, so one device's crash cannot hide another's result;
several at once, one per core by default: a device waiting on its compiler leaves the core to another) and print one
matrix: row x layer, passed / failed / skipped / known failures, in the order the rows were named. A row is a device,
PYTHON emulating a device (`LAZY_EMULATE`), or one code generation target of a device checked compile-only."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lazy.conformance import LAYERS


def usable_devices() -> list[str]:
    """Every device whose probe succeeds, PYTHON included (the reference device is always tested)."""
    from lazy.plugins import Device

    return [name for name in sorted(Device.specs()) if Device.probe(name)[0]]


def unusable_devices() -> list[tuple[str, str]]:
    """(device, why) for every registered device `--all` leaves out, so that the run says what it did not check."""
    from lazy.plugins import Device

    return [(name, why) for name in sorted(Device.specs()) for ok, why in [Device.probe(name)] if not ok]


@dataclass(frozen=True)
class MatrixRow:
    """What one process of the matrix runs: the suite on `device`, with PYTHON emulating `emulate` when set, or the
    compile-only check of `device` (which gives a row per code generation target)."""

    device: str
    emulate: str | None = None
    compile_only: bool = False

    @property
    def stem(self) -> str:
        """The reports' file name stem."""
        name = self.device + (f"_emulating_{self.emulate}" if self.emulate else "")
        name += "_compile_only" if self.compile_only else ""
        return name.replace(":", "_").replace("/", "_")

    @property
    def label(self) -> str:
        return f"{self.device} emulating {self.emulate}" if self.emulate else self.device + (
            " compile-only" if self.compile_only else "")  # fmt: skip


def _run_one(row: MatrixRow, out_dir: pathlib.Path, keyword: str | None, extra_args: list[str]) -> list[dict]:
    json_path, report = out_dir / f"{row.stem}.json", out_dir / f"{row.stem}.md"
    cmd = [sys.executable, "-m", "lazy.conformance", "--device", row.device, "--json", str(json_path), "--report",
           str(report)]  # fmt: skip
    cmd += ["--compile-only"] if row.compile_only else []
    if keyword:
        cmd += ["-k", keyword]
    env = {k: v for k, v in os.environ.items() if k != "LAZY_EMULATE"}  # a row emulates what it names, or nothing
    env.update({"LAZY_EMULATE": row.emulate} if row.emulate else {})
    extra = [] if row.compile_only else extra_args  # (pytest's arguments: the compile-only check runs no suite)
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, env=env)
    if json_path.exists():
        data = json.loads(json_path.read_text())
        return data["rows"] if "rows" in data else [data]
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
    return [{"device": row.label, "summary": {"passed": 0, "failed": 1, "skipped": 0, "known_failures": 0},
             "layers": {}, "crash": "\n".join(tail)}]  # fmt: skip


def format_matrix(results: list[dict]) -> str:
    seen = {layer for r in results for layer in r.get("layers", {})}
    # a layer LAYERS does not list yet (a new test module) still gets its column, after the known ones
    layers = [layer for layer in LAYERS if layer in seen] + sorted(seen - set(LAYERS))
    header = ["device", *layers, "total"]
    rows = []
    for r in results:
        cells = [r["device"]]
        for layer in layers:
            c = r.get("layers", {}).get(layer)
            cells.append(f"{c['passed']}/{c['failed']}/{c['skipped']}/{c['known_failures']}" if c else "-")
        s = r["summary"]
        cells.append(f"{s['passed']}/{s['failed']}/{s['skipped']}/{s['known_failures']}")
        rows.append(cells)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    out.append("cells: passed/failed/skipped/known failures")
    for r in results:
        if "crash" in r:
            out.append(f"{r['device']}: the suite crashed:\n{r['crash']}")
    return "\n".join(out)


def load_reports(directory: str | os.PathLike[str]) -> list[dict]:
    """The rows of every JSON report under `directory` (a run's `--out`, or CI's downloaded artifacts), by path."""
    rows: list[dict] = []
    for path in sorted(pathlib.Path(directory).rglob("*.json")):
        data = json.loads(path.read_text())
        rows += data["rows"] if "rows" in data else [data]
    return rows


def run_matrix(rows: list[MatrixRow], out_dir: str | None = None, keyword: str | None = None,
               extra_args: list[str] | None = None, jobs: int = 0) -> int:  # fmt: skip
    directory = pathlib.Path(out_dir) if out_dir else pathlib.Path(tempfile.mkdtemp(prefix="lazy-conformance-"))
    directory.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = max(1, min(len(rows) or 1, jobs if jobs > 0 else cores))

    def one(row: MatrixRow) -> list[dict]:
        print(f"conformance: {row.label} ...", flush=True)
        result = _run_one(row, directory, keyword, list(extra_args or []))
        print(f"conformance: {row.label} done", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:  # each row runs in its own process (`_run_one`)
        results = [result for row_results in pool.map(one, rows) for result in row_results]
    print(format_matrix(results))
    print(f"reports: {directory}")
    failed = sum(r["summary"]["failed"] for r in results)
    return 1 if failed or not results else 0

"""Run the suite on several devices (each in its own process, so one device's crash cannot hide another's result;
several at once, one per core by default: a device waiting on its compiler leaves the core to another) and print one
matrix: device x layer, passed / failed / skipped / known failures, in the order the devices were named."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from lazy.conformance import LAYERS


def usable_devices() -> list[str]:
    """Every device whose probe succeeds, PYTHON included (the reference device is always tested)."""
    from lazy.plugins import Device

    return [name for name in sorted(Device.specs()) if Device.probe(name)[0]]


def _run_one(device: str, out_dir: pathlib.Path, keyword: str | None, extra_args: list[str]) -> dict:
    stem = device.replace(":", "_").replace("/", "_")
    json_path, report = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    cmd = [
        sys.executable,
        "-m",
        "lazy.conformance",
        "--device",
        device,
        "--json",
        str(json_path),
        "--report",
        str(report),
    ]
    if keyword:
        cmd += ["-k", keyword]
    proc = subprocess.run([*cmd, *extra_args], capture_output=True, text=True)
    if json_path.exists():
        return json.loads(json_path.read_text())
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
    return {"device": device, "summary": {"passed": 0, "failed": 1, "skipped": 0, "known_failures": 0},
            "layers": {}, "crash": "\n".join(tail)}  # fmt: skip


def format_matrix(results: list[dict]) -> str:
    layers = [layer for layer in LAYERS if any(layer in r.get("layers", {}) for r in results)]
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


def run_matrix(devices: list[str] | None, out_dir: str | None = None, keyword: str | None = None,
               extra_args: list[str] | None = None, jobs: int = 0) -> int:  # fmt: skip
    targets = devices if devices is not None else usable_devices()
    directory = pathlib.Path(out_dir) if out_dir else pathlib.Path(tempfile.mkdtemp(prefix="lazy-conformance-"))
    directory.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = max(1, min(len(targets) or 1, jobs if jobs > 0 else cores))

    def one(device: str) -> dict:
        print(f"conformance: {device} ...", flush=True)
        result = _run_one(device, directory, keyword, list(extra_args or []))
        print(f"conformance: {device} done", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=workers) as pool:  # each device runs in its own process (`_run_one`)
        results = list(pool.map(one, targets))
    print(format_matrix(results))
    print(f"reports: {directory}")
    failed = sum(r["summary"]["failed"] for r in results)
    return 1 if failed or not results else 0

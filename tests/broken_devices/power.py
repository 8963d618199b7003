"""Runs the conformance suite against broken devices (and working ones) in one subprocess, and, as
`python -m broken_devices.power`, against every broken device in turn, printing the kill-rate table for the docs."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections import Counter

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1]


def run_suites(runs: dict[str, str | None], out_dir: pathlib.Path, timeout: float = 600) -> dict[str, dict[str, str]]:
    """{device: {test id: outcome}} for `runs` ({device: pytest -k selection or None for the whole suite}), run one
    after another in one subprocess with the broken devices among them registered. A run that writes no report (a
    crash) raises with the subprocess's output."""
    env = {k: v for k, v in os.environ.items() if k not in ("LAZY_PLUGINS", "LAZY_DEVICE")}  # ours must be enabled
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), env.get("PYTHONPATH")]))
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the suite needs no installed pytest plugin (hypothesis: seconds)
    cmd = [sys.executable, "-m", "broken_devices.power", "--runs", json.dumps(runs), "--out", str(out_dir)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    results = {}
    for device in runs:
        report = out_dir / f"{device}.json"
        if not report.exists():
            raise RuntimeError(f"the conformance run against {device} wrote no report (exit {proc.returncode}):\n"
                               f"{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}")  # fmt: skip
        results[device] = {t["id"]: t["outcome"] for t in json.loads(report.read_text())["tests"]}
    return results


def run_here(runs: dict[str, str | None], out_dir: pathlib.Path) -> None:
    """What `run_suites`'s subprocess does: <device>.json in `out_dir` for each run."""
    from broken_devices import FIXTURES, PLUGIN_NAME, BrokenDevices
    from lazy.conformance.runner import run_conformance
    from lazy.plugins import Device

    # only the devices under test: the copies layer copies to every other usable device
    Device.register(BrokenDevices([device for device in runs if device in FIXTURES]), PLUGIN_NAME)
    for device, keyword in runs.items():
        result = run_conformance(device, keyword=keyword, json_path=out_dir / f"{device}.json")
        print(result.summary_line(), flush=True)


def kill_table(out_dir: pathlib.Path) -> tuple[int, list[str]]:
    """(broken devices that fail at least one test, the Markdown table of what fails), running the whole suite
    against each broken device on its own."""
    from broken_devices import FIXTURES
    from lazy.conformance import LAYERS
    from lazy.conformance.runner import layer_of

    killed, rows = 0, ["| fixture | what is broken | tests that fail (by layer) |", "| --- | --- | --- |"]
    for device, broken in FIXTURES.items():
        try:
            outcomes = run_suites({device: None}, out_dir, timeout=3600)[device]
        except RuntimeError as e:  # a crash fails the device too, but the table should say so
            killed += 1
            rows.append(f"| {device} | {broken} | the run crashed: {str(e).splitlines()[0]} |")
            continue
        failed = Counter(layer_of(t) for t, outcome in outcomes.items() if outcome == "failed")
        killed += bool(failed)
        by_layer = ", ".join(f"{layer} {failed[layer]}" for layer in LAYERS if failed[layer])
        rows.append(f"| {device} | {broken} | {sum(failed.values())} of {len(outcomes)} ({by_layer or 'none'}) |")
    return killed, rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m broken_devices.power", description=__doc__)
    parser.add_argument("--runs", help="JSON {device: -k selection or null}; without it: the kill-rate table")
    parser.add_argument("--out", help="with --runs: the directory for the <device>.json reports")
    args = parser.parse_args()
    if args.runs:
        run_here(json.loads(args.runs), pathlib.Path(args.out))
        return 0
    from broken_devices import FIXTURES

    with tempfile.TemporaryDirectory(prefix="lazy-kill-rate-") as tmp:
        killed, rows = kill_table(pathlib.Path(tmp))
    print(f"kill rate: {killed}/{len(FIXTURES)}\n")
    print("\n".join(rows))
    return 0 if killed == len(FIXTURES) else 1


if __name__ == "__main__":
    sys.exit(main())

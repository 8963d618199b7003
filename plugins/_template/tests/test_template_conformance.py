"""The conformance suite against TMPL, the way a plugin's CI runs it: `python -m lazy.conformance --device TMPL`,
in a subprocess (the suite is a pytest session of its own). Known failures come from the plugin's
`lazy_known_failures` hook; any other failure, or a stale known-failure entry, fails this test."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys


def test_conformance_suite_passes(tmp_path: pathlib.Path) -> None:
    report = tmp_path / "conformance.json"
    cmd = [sys.executable, "-m", "lazy.conformance", "--device", "TMPL", "--json", str(report)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert report.exists(), f"the suite did not run:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    failed = {
        t["id"]: t["message"][-1500:] for t in json.loads(report.read_text())["tests"] if t["outcome"] == "failed"
    }
    assert not failed, "\n\n".join(f"{test}:\n{message}" for test, message in failed.items())
    assert proc.returncode == 0, proc.stdout[-3000:]

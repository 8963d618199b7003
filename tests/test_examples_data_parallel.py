"""The main job data-parallel on two devices of one machine (`examples/digits.py --devices CPU:0,CPU:1`): each batch
sharded over the devices, the parameters replicated and their gradients combined by the ring allreduce, so every
epoch's loss and the accuracy are the single-device run's."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "digits.py")


def run(*args: str) -> str:
    proc = subprocess.run([sys.executable, EXAMPLE, "--epochs", "2", *args], capture_output=True, text=True,
                          timeout=240, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_two_devices_train_as_one() -> None:
    single, sharded = run(), run("--devices", "CPU:0,CPU:1")
    assert "training on CPU:0, CPU:1" in sharded, sharded
    losses = [re.findall(r"epoch\s+(\d+)\s+loss ([\d.]+)", out) for out in (single, sharded)]
    assert len(losses[0]) == 2 and losses[0] == losses[1], (single, sharded)  # printed to 4 decimals: within 1e-4
    accuracy = [re.findall(r"test accuracy: ([\d.]+)%", out) for out in (single, sharded)]
    assert accuracy[0] and accuracy[0] == accuracy[1], (single, sharded)

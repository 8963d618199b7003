"""`CL:0` and `CL:1` on PoCL: a second device where POCL_DEVICES lists two (read when the platform loads, so each case
runs in a fresh process), copies between the two both ways, and the error that says how to get a second device."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TWO_DEVICES = """
import numpy as np
from lazy.tensor import Tensor
from lazy_opencl.device import CLAllocator

staged = []
original = CLAllocator._copyout
CLAllocator._copyout = lambda self, dest, src: (staged.append(dest.nbytes), original(self, dest, src))[1]
data = np.arange(1001, dtype=np.float32)
a = Tensor(data, device="CL")
b = (a + 1).to("CL:1")
assert b.device == "CL:1", b.device
np.testing.assert_array_equal(b.numpy(), data + 1)
staged.clear()
c = (b * 2).to("CL")
np.testing.assert_array_equal(c.numpy(), (data + 1) * 2)
assert staged == [data.nbytes], f"CL:1 -> CL took more than one host copy: {staged}"  # (.numpy() is the one)
np.testing.assert_array_equal(a[3:10].to("CL:1").numpy(), data[3:10])  # a view at an unaligned offset
np.testing.assert_array_equal(Tensor(data[:0], device="CL:1").to("CL").numpy(), data[:0])
print("ok")
"""


pytestmark = pytest.mark.devices("CL")


def run_with_pocl_devices(value: str, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")}
    env["POCL_DEVICES"] = value
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


def test_two_pocl_devices_copy_both_ways():
    proc = run_with_pocl_devices("pthread pthread", TWO_DEVICES)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_missing_second_device_says_how_to_get_one():
    proc = run_with_pocl_devices("pthread", "from lazy.plugins import Device; Device['CL:1']")
    assert proc.returncode != 0
    assert "this machine has 1 OpenCL device(s)" in proc.stderr, proc.stderr
    assert "POCL_DEVICES='pthread pthread'" in proc.stderr, proc.stderr

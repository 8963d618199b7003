"""Sharding over two OpenCL devices (PoCL exposes one CPU device per `POCL_DEVICES` entry, read when the platform
loads, so each check runs in a fresh process): values and gradients against the unsharded run on one device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyopencl", reason="lazy-opencl's pyopencl is not installed")

SCRIPT = textwrap.dedent("""
    import numpy as np
    from lazy import Tensor
    D = ("CL:0", "CL:1")
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)

    def run(shard):
        x, w = Tensor(xs, device="CL", requires_grad=True), Tensor(ws, device="CL", requires_grad=True)
        if shard:
            x, w = x.shard(D, axis=0), w.to(D)
            x.requires_grad = w.requires_grad = True
        out = ((x @ w).relu() * 2 + 1).sum(0)  # a reduce over the sharded axis: the ring allreduce
        (out * out).sum().backward()
        return out.numpy(), x.grad.numpy(), w.grad.numpy(), x.max(0).numpy()

    for name, a, b in zip(("out", "x.grad", "w.grad", "max"), run(False), run(True)):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-5), (name, a, b)
    print("OK")
""")


@pytest.mark.devices("CL")
def test_sharded_over_two_pocl_devices_matches_one_device() -> None:
    env = {**os.environ, "POCL_DEVICES": "pthread pthread"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, env=env)
    if "this machine has 1 OpenCL device" in proc.stderr:
        pytest.skip("this OpenCL platform ignores POCL_DEVICES (not PoCL): no second CL device to shard over")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr

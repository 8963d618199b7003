"""`lazy.device.LaunchLimits`: the launch checks the GPU runtimes share, each refusal naming the limit in the device's
own vocabulary."""

from __future__ import annotations

import pytest

from lazy.device import DeviceError, LaunchLimits

LIMITS = LaunchLimits("block", (1024, 1024, 64), "MAX_BLOCK_DIM_{xyz}", 512, "MAX_THREADS", 49152, "SHARED",
                      (2**31 - 1, 65535, 65535), "MAX_GRID_DIM_{xyz}")  # fmt: skip


def test_a_launch_within_the_limits_passes() -> None:
    LIMITS.check("GPU", "k", (4, 65535, 1), (32, 16, 1), shared_bytes=49152)


@pytest.mark.parametrize(
    "global_size, local_size, shared, message",
    [
        ((1, 1, 1), (1, 1, 128), 0, r"blocks of 128 threads in dimension 2; this device allows 64 \(MAX_BLOCK_DIM_Z\)"),
        ((1, 1, 1), (32, 32, 1), 0, r"blocks of 1024 threads \(32x32x1\); it can have at most 512 \(MAX_THREADS\)"),
        ((1, 1, 1), (32, 1, 1), 49153, r"uses 49153 bytes of block memory; this device allows 49152 \(SHARED\)"),
        ((1, 65536, 1), (32, 1, 1), 0, r"65536 blocks in dimension 1; this device allows 65535 \(MAX_GRID_DIM_Y\)"),
        ((1, 1, 1), (0, 1, 1), 0, r"invalid sizes global=\(1, 1, 1\) local=\(0, 1, 1\)"),
    ],
)
def test_each_limit_is_named(global_size, local_size, shared, message) -> None:
    with pytest.raises(DeviceError, match=r"GPU: kernel k .*" + message):
        LIMITS.check("GPU", "k", global_size, local_size, shared_bytes=shared)


def test_unnamed_optional_limits_are_not_checked() -> None:
    LaunchLimits("work group", (64,), "L", 64, "T").check("D", "k", (10**9,), (64,), shared_bytes=10**9)

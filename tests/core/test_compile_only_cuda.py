"""`--compile-only` against the real CUDA plugin: its renderer's kernels compiled by NVRTC (from pip: no GPU, driver
or toolkit needed) for each target, and a deliberately broken CUDA renderer whose NVRTC rejection is reported with
the kernel's name and NVRTC's own words. Skipped, saying why, where lazy-cuda or NVRTC is not installed."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from lazy.codegen.uops import UOp
from lazy.conformance.compile_only import headline, run_compile_only
from lazy.device import DeviceError
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, hookimpl
from lazy.plugins import Device

lazy_cuda = pytest.importorskip("lazy_cuda", reason="lazy-cuda is not installed (pip install -e plugins/lazy-cuda)")
from lazy_cuda.compiler import NVRTCCompiler, load_nvrtc  # noqa: E402
from lazy_cuda.renderer import CUDARenderer  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_registry")


@pytest.fixture(autouse=True)
def nvrtc() -> None:
    try:
        load_nvrtc()
    except DeviceError as e:  # (no NVRTC wheel for this platform, e.g. macOS)
        pytest.skip(f"NVRTC cannot be loaded here: {e}")


class MisspellingRenderer(CUDARenderer):
    """CUDA C++ with an undeclared name in the reduction kernels: what a renderer bug looks like to NVRTC."""

    def render(self, name: str, uops: list[UOp]) -> str:
        src = super().render(name, uops)
        return src.replace("blockIdx.x", "blockIdx.x + undeclared_offset") if name.startswith("conf_reduce") else src


class BrokenCudaPlugin:
    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        targets = lambda: [CodegenTarget("sm_80", MisspellingRenderer("sm_80"), NVRTCCompiler("sm_80"))]
        return [DeviceSpec("BADCUDA", PLUGIN_API_VERSION, 1, lambda: (False, "no GPU"), self.open,
                           codegen_targets=targets)]  # fmt: skip

    def open(self, name: str) -> Any:
        raise AssertionError("--compile-only must not open the device")


MATMUL_LAYER = """
import numpy as np
from lazy.tensor import Tensor

def test_matmul_softmax(device_name):
    a = Tensor(np.ones((16, 16), np.float32), device=device_name)
    assert ((a @ a).softmax(1).numpy() == 1 / 16).all()
"""


@pytest.mark.parametrize("keyword", ["wmma", "matmul"])
def test_cuda_targets_compile_the_suite_kernels(tmp_path, keyword: str) -> None:
    """The hand-built tensor-core kernels, and a Tensor program's kernels lowered with the CUDA caps."""
    from lazy import pydevice

    # (a module name of its own: pytest reuses a module of the same name that an earlier in-process run imported)
    (tmp_path / "test_41_tensor.py").write_text(textwrap.dedent(MATMUL_LAYER))
    Device.register(pydevice, "python")  # (the reference device that runs the Tensor layer)
    Device.register(lazy_cuda, "cuda")
    results = run_compile_only("CUDA", keyword=keyword, suite_dir=tmp_path)
    assert [r.device for r in results] == ["CUDA sm_80 compile-only", "CUDA sm_90 compile-only"]
    expected = "test_20_kernels.py::conf_wmma_mma_m16n8k16_" if keyword == "wmma" else "test_41_tensor.py::test_matmul"
    for result in results:
        assert all(t.id.startswith(expected) for t in result.tests) and len(result.tests) >= 2, result.tests
        failed = {t.id: t.message[-800:] for t in result.tests if t.outcome != "passed"}
        assert not failed and not result.notes[1:], (failed, result.notes)


def test_a_kernel_nvrtc_rejects_is_reported_with_its_name_and_nvrtcs_words() -> None:
    Device.register(BrokenCudaPlugin(), "badcuda")
    [result] = run_compile_only("BADCUDA", keyword="conf_reduce")
    failed = {t.id: t.message for t in result.tests if t.outcome == "failed"}
    assert set(failed) == {"test_20_kernels.py::conf_reduce_add", "test_20_kernels.py::conf_reduce_max"}
    message = failed["test_20_kernels.py::conf_reduce_add"]
    assert "kernel conf_reduce_add" in message and '"undeclared_offset" is undefined' in headline(message), message
    assert result.exit_code == 1

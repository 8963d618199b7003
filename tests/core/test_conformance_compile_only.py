"""The suite's fixed kernels (`lazy.conformance.kernels`, the tensor-core one run emulated), `python -m lazy.conformance
--device NAME --compile-only`, the matrix rows it and `--emulate` add, and the reference an emulating PYTHON is
compared with, on plugins registered in the test: code generation targets built on the PYTHON renderer, whose
compiler (`PythonCompiler`) rejects text it cannot parse. Nothing here needs a plugin."""

from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from lazy import pydevice
from lazy.codegen.uops import UOp, UOps
from lazy.conformance.__main__ import main
from lazy.conformance.compile_only import codegen_targets, headline, run_compile_only
from lazy.conformance.kernels import suite_kernels
from lazy.conformance.matrix import MatrixRow, format_matrix
from lazy.conformance.runner import SUITE_DIR, run_conformance
from lazy.conformance.support import on_reference, reference_device
from lazy.device import DeviceError
from lazy.dtype import ALL_DTYPES, dtypes
from lazy.helpers import EMULATE, Context
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, hookimpl
from lazy.plugins import Device
from lazy.pydevice import THREAD_CAPS, PythonCompiler, PythonRenderer
from lazy.renderer import Capabilities, FragmentLayout, TensorCore

pytestmark = pytest.mark.usefixtures("clean_registry")

# PTX mma.m16n8k16 as NVIDIA documents it (tc_contract), and the same with A's element bits 1 and 2 swapped
MMA = TensorCore("mma.m16n8k16", (16, 8, 16), 32, dtypes.float16, dtypes.float32,
                 a=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1", "e2")),
                 b=FragmentLayout(("e0", "l0", "l1", "e1"), ("l2", "l3", "l4")),
                 c=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1")))  # fmt: skip
MMA_MISDECLARED = dataclasses.replace(MMA, a=FragmentLayout(("l2", "l3", "l4", "e2"), ("e0", "l0", "l1", "e1")))
GPU_CAPS = Capabilities(has_threads=True, has_local=True, local_max=(1024, 1024, 64), local_size_max=1024,
                        shared_max=49152, vector_widths=(2, 4), dtypes=frozenset(ALL_DTYPES) - {dtypes.float64},
                        tensor_cores=(MMA,))  # fmt: skip


class BrokenRenderer(PythonRenderer):
    """The PYTHON renderer, but text its compiler rejects for the reduction kernels, and no code at all for conf_if."""

    def render(self, name: str, uops: list[UOp]) -> str:
        if name == "conf_if":
            raise NotImplementedError("this renderer has no IF")
        src = super().render(name, uops)
        return src.replace("RANGE", "RANGE(") if name.startswith("conf_reduce") else src


class LibrarylessCompiler(PythonCompiler):
    def compile(self, src: str) -> bytes:
        raise DeviceError("libfancy.so not found: pip install fancy-compiler")


class GenPlugin:
    """GEN: targets but no hardware (its probe and open are recorded, and must not be called); NOGEN: no targets;
    BADGEN: targets whose compiler package is missing."""

    def __init__(self) -> None:
        self.touched: list[str] = []

    def probe(self) -> tuple[bool, str]:
        self.touched.append("probe")
        return False, "no hardware here"

    def open(self, name: str) -> Any:
        self.touched.append("open")
        raise RuntimeError("no hardware here")

    @staticmethod
    def targets() -> list[CodegenTarget]:
        return [CodegenTarget("good", PythonRenderer(), PythonCompiler()),
                CodegenTarget("broken", BrokenRenderer(), PythonCompiler()),
                CodegenTarget("GEN", PythonRenderer())]  # fmt: skip

    @staticmethod
    def missing_compiler() -> list[CodegenTarget]:
        raise ModuleNotFoundError("No module named 'fancy_compiler'", name="fancy_compiler")

    @staticmethod
    def compiler_without_library() -> list[CodegenTarget]:
        return [CodegenTarget("sm", PythonRenderer(), LibrarylessCompiler())]

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        spec = lambda name, targets: DeviceSpec(name, PLUGIN_API_VERSION, 1, self.probe, self.open,
                                                codegen_targets=targets)  # fmt: skip
        # (GEN's targets looked up when asked for: a test replaces them)
        return [spec("GEN", lambda: self.targets()), spec("NOGEN", None), spec("BADGEN", self.missing_compiler),
                spec("NOLIB", self.compiler_without_library)]  # fmt: skip


@pytest.fixture
def gen() -> Iterator[GenPlugin]:
    plugin = GenPlugin()
    Device.register(pydevice, "python")
    Device.register(plugin, "gen")
    yield plugin


TENSOR_LAYER = """
import numpy as np
from lazy.dtype import dtypes
from lazy.tensor import Tensor

def test_reduce_rows(device_name):
    t = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device_name)
    assert t.sum(axis=1).numpy().tolist() == [6, 22, 38]

def test_reduce_in_float64(device_name):
    assert Tensor([1.0, 2.0], device=device_name, dtype=dtypes.float64).sum().item() == 3.0
"""


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "test_40_tensor.py").write_text(textwrap.dedent(TENSOR_LAYER))
    return tmp_path


# ---------------------------------------------------------------------------------------------------------------------
# the fixed kernels


def test_suite_kernels_follow_the_capabilities() -> None:
    names = [k.name for k in suite_kernels(GPU_CAPS)]
    assert len(names) == len(set(names)), "kernel names must be unique"
    assert {"conf_add", "conf_locals", "conf_vector2", "conf_vector4", "conf_add_one", "conf_symbolic"} <= set(names)
    assert "conf_wmma_mma_m16n8k16_half_float" in names  # one per declared tensor core
    assert not any("float64" in name for name in names)  # a dtype the caps do not declare: left out
    loop_style = {k.name for k in suite_kernels(Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32})))}
    assert not {"conf_locals", "conf_vector2", "conf_alu_add_half"} & loop_style
    assert suite_kernels(Capabilities(unsupported=(("kernels", "copy-only"),))) == []


def test_wmma_kernel_uses_the_declared_fragments() -> None:
    [wmma] = [k for k in suite_kernels(GPU_CAPS) if k.name.startswith("conf_wmma")]
    [op] = [u for u in wmma.uops if u.op is UOps.WMMA]
    assert op.arg == MMA and op.dtype == dtypes.float32.vec(4)
    assert [s.dtype for s in op.src] == [dtypes.float16.vec(8), dtypes.float16.vec(4), dtypes.float32.vec(4)]
    assert (wmma.global_size, wmma.local_size) == ((1, 1, 1), (32, 1, 1))


@pytest.mark.parametrize("tc,passes", [(MMA, True), (MMA_MISDECLARED, False)], ids=["as-documented", "misdeclared"])
def test_tensor_core_layer_catches_a_misdeclared_layout(gen: GenPlugin, tc: TensorCore, passes: bool, tmp_path) -> None:
    """Layer kernels' WMMA test, on PYTHON emulating a GPU that declares `tc`: the emulator computes with the
    hardware's own lanes, so a layout declared otherwise moves elements and the test fails."""
    target = CodegenTarget("sm", _with_caps(dataclasses.replace(GPU_CAPS, tensor_cores=(tc,))), PythonCompiler())
    gen.targets = lambda: [target]  # type: ignore[method-assign]
    shutil.copy(SUITE_DIR / "test_20_kernels.py", tmp_path)  # (collecting one layer, not the whole suite)
    with Context(EMULATE="GEN"):
        result = run_conformance("PYTHON", known_failures=[], keyword="test_tensor_cores", suite_dir=tmp_path)
        Device.reset(discover=False)  # closes the emulating PYTHON before the setting goes back
    assert result.device == "PYTHON emulating GEN sm"
    assert result.counts()["passed" if passes else "failed"] == 1, [t.message[-600:] for t in result.tests]


def test_an_emulating_python_is_compared_with_a_plain_instance() -> None:
    """The ops and end_to_end layers' reference: PYTHON, but a second, plain instance when PYTHON itself emulates a
    GPU target (comparing the emulation with itself would check nothing)."""
    assert reference_device("python") == reference_device("CPU") == "PYTHON"
    with Context(EMULATE="CUDA"):
        assert reference_device("python") == "PYTHON:1" and reference_device("CPU") == "PYTHON"
        with on_reference():
            assert EMULATE.value == ""


def _with_caps(caps: Capabilities) -> PythonRenderer:
    renderer = PythonRenderer()
    renderer.caps = caps
    return renderer


# ---------------------------------------------------------------------------------------------------------------------
# --compile-only


def test_every_target_gets_a_row_with_each_failure_named(gen: GenPlugin, suite, tmp_path) -> None:
    report, json_path = tmp_path / "r.md", tmp_path / "r.json"
    results = run_compile_only("gen", keyword="reduce", suite_dir=suite, report=report, json_path=json_path)
    good, broken, render_only = results
    assert [r.device for r in results] == ["GEN good compile-only", "GEN broken compile-only", "GEN render-only"]
    ids = [t.id for t in good.tests]
    assert ids[:2] == ["test_20_kernels.py::conf_reduce_add", "test_20_kernels.py::conf_reduce_max"]
    assert any(i.startswith("test_40_tensor.py::test_reduce_rows::r_") for i in ids), ids  # lowered from its AST
    assert good.counts() == {"passed": len(ids), "failed": 0, "skipped": 0, "known_failures": 0}
    assert good.exit_code == 0 and render_only.counts()["failed"] == 0

    failed = {t.id: t.message for t in broken.tests if t.outcome == "failed"}
    assert set(failed) == {"test_20_kernels.py::conf_reduce_add", "test_20_kernels.py::conf_reduce_max"}
    message = failed["test_20_kernels.py::conf_reduce_add"]
    assert "source of conf_reduce_add" in message and headline(message) == "KeyError: 'RANGE('", message
    assert broken.exit_code == 1 and broken.layers() == ["kernels", "tensor"]

    assert gen.touched == [], "compile-only probed or opened the device"
    rows = json.loads(json_path.read_text())["rows"]
    assert [row["device"] for row in rows] == [r.device for r in results]
    assert rows[1]["layers"]["kernels"]["failed"] == 2 and "conf_reduce_add" in report.read_text()


def test_a_kernel_the_renderer_cannot_write_fails_with_the_reason(gen: GenPlugin, suite) -> None:
    [_, broken, _] = run_compile_only("GEN", keyword="conf_if", suite_dir=suite)
    [record] = broken.tests
    assert record.outcome == "failed" and "code generation failed" in record.message
    assert "this renderer has no IF" in record.message


def test_kernels_in_dtypes_the_target_lacks_are_skipped_with_the_reason(gen: GenPlugin, suite) -> None:
    caps = dataclasses.replace(THREAD_CAPS, dtypes=frozenset(ALL_DTYPES) - {dtypes.float64})
    gen.targets = lambda: [CodegenTarget("sm", _with_caps(caps), PythonCompiler())]  # type: ignore[method-assign]
    [result] = run_compile_only("GEN", keyword="float64", suite_dir=suite)
    [skipped] = [t for t in result.tests if t.outcome == "skipped"]
    assert skipped.id.startswith("test_40_tensor.py::test_reduce_in_float64::")
    assert skipped.message == "computes in double, which GEN does not declare (caps.dtypes)"


def test_devices_that_cannot_be_checked_say_why(gen: GenPlugin) -> None:
    with pytest.raises(DeviceError, match=r"unknown device 'NOPE'; devices with code generation targets: BADGEN, GEN,"):
        codegen_targets("NOPE")
    with pytest.raises(DeviceError, match=r"NOGEN declares no code generation targets .* --device NOGEN"):
        codegen_targets("NOGEN")
    with pytest.raises(DeviceError, match=r"raised ModuleNotFoundError.*module 'fancy_compiler'.*install"):
        codegen_targets("BADGEN")
    with pytest.raises(DeviceError, match=r"^--compile-only: NOLIB sm compile-only: the compiler cannot run here: "
                                          r"libfancy.so not found: pip install fancy-compiler$"):  # fmt: skip
        run_compile_only("NOLIB")  # (once, before anything is recorded or rendered: not a failure per kernel)


def test_command_line_prints_each_failure_and_exits_1(gen: GenPlugin, capsys) -> None:
    assert main(["--device", "GEN", "--compile-only", "-k", "conf_reduce_add"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "GEN good compile-only: 1 compiled, 0 failed, 0 skipped"
    assert out[1] == "GEN broken compile-only: 0 compiled, 1 failed, 0 skipped"
    assert out[2] == "  FAILED test_20_kernels.py::conf_reduce_add: KeyError: 'RANGE('"
    assert out[3] == "GEN render-only: 1 rendered, 0 failed, 0 skipped"
    assert main(["--device", "NOGEN", "--compile-only"]) == 2
    assert "NOGEN declares no code generation targets" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------------
# the matrix


def test_matrix_rows_for_emulation_and_compile_only() -> None:
    rows = [MatrixRow("CPU"), MatrixRow("PYTHON", emulate="CUDA"), MatrixRow("CUDA", compile_only=True)]
    assert [r.label for r in rows] == ["CPU", "PYTHON emulating CUDA", "CUDA compile-only"]
    assert len({r.stem for r in rows}) == 3
    cell = {"passed": 3, "failed": 0, "skipped": 1, "known_failures": 0}
    table = format_matrix([{"device": "CUDA sm_80 compile-only", "summary": cell, "layers": {"kernels": cell}}])
    assert "| CUDA sm_80 compile-only | 3/0/1/0 " in table


def test_matrix_of_saved_reports(tmp_path, capsys) -> None:
    """`--matrix-of DIR`: one table of every report under DIR (CI's downloaded artifacts), compile-only rows too."""
    cell = {"passed": 2, "failed": 0, "skipped": 0, "known_failures": 0}

    def row(device: str, failed: int = 0) -> dict:
        return {"device": device, "summary": {**cell, "failed": failed}, "layers": {"kernels": cell}}

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "CPU.json").write_text(json.dumps(row("CPU")))
    (tmp_path / "CUDA_compile_only.json").write_text(json.dumps({"rows": [row("CUDA sm_80 compile-only", 1)]}))
    assert main(["--matrix-of", str(tmp_path)]) == 1  # a row with a failure
    out = capsys.readouterr().out
    assert "| CUDA sm_80 compile-only | 2/0/0/0 | 2/1/0/0 |" in out and "| CPU " in out


def test_matrix_arguments_are_checked(capsys) -> None:
    for argv in (["--compile-only"], ["--device", "CPU", "--emulate", "CUDA"], []):
        with pytest.raises(SystemExit):
            main(argv)
    capsys.readouterr()

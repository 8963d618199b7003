"""TMPL's code generation without opening the device (`codegen_targets`): `python -m lazy.conformance --device TMPL
--compile-only` renders and compiles the suite's kernels with it, and `LAZY_EMULATE=TMPL` runs the PYTHON device with
TMPL's capabilities. A GPU plugin's own tests check the same two things for its targets."""

from __future__ import annotations

import numpy as np

from lazy import Tensor
from lazy.conformance.__main__ import main
from lazy.helpers import Context
from lazy.plugins import Device
from lazy.pydevice import emulating
from lazy_template.compiler import TemplateCompiler
from lazy_template.renderer import CAPS, TemplateRenderer


def test_codegen_targets_are_the_device_parts() -> None:
    spec = Device.specs()["TMPL"]
    assert spec.codegen_targets is not None
    [target] = spec.codegen_targets()
    assert target.name == "TMPL" and isinstance(target.renderer, TemplateRenderer)
    assert isinstance(target.compiler, TemplateCompiler) and target.renderer.caps is CAPS


def test_compile_only_renders_and_compiles_the_suite_kernels(tmp_path, capsys) -> None:
    # (two kernels, for speed: `-k conf_add` selects conf_add and conf_add_one, and no Tensor-layer test)
    assert main(["--device", "TMPL", "--compile-only", "-k", "conf_add", "--json", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out.splitlines() == ["TMPL compile-only: 2 compiled, 0 failed, 0 skipped"]


def test_python_device_emulates_tmpl() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    Device.reset()  # the PYTHON device takes LAZY_EMULATE when it opens
    try:
        with Context(EMULATE="TMPL"):
            t = Tensor(a, device="PYTHON")
            np.testing.assert_allclose((t @ t.T).sum(axis=1).numpy(), (a @ a.T).sum(axis=1))
            assert emulating() == "TMPL"
    finally:
        Device.reset()  # closes the emulating PYTHON device

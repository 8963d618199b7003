"""The conformance suite every device must pass, shipped in lazy-core: `python -m lazy.conformance --device NAME`.

A pytest suite in layers (one test module each, see `LAYERS`), run in-process by `runner.run_conformance`, which
applies the device plugin's known failures (the `lazy_known_failures` hook) and writes a Markdown and a JSON report.
`compile_only` renders and compiles the suite's kernels (`kernels`, and the Tensor layers' recorded on PYTHON) for a
device's code generation targets without the device; `matrix` runs several devices and prints one table.
Needs pytest: `pip install 'lazy-core[conformance]'`.
"""

from __future__ import annotations

LAYERS: tuple[str, ...] = (
    "discovery",
    "allocator",
    "kernels",
    "hcq",
    "tensor",
    "ops",
    "dlpack",
    "end_to_end",
    "copies",
    "multi",
)

__all__ = ["LAYERS"]

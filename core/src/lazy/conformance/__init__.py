"""The conformance suite every device must pass, shipped in lazy-core: `python -m lazy.conformance --device NAME`.

A pytest suite in layers (one test module each, see `LAYERS`), run in-process by `runner.run_conformance`, which
applies the device plugin's known failures (the `lazy_known_failures` hook) and writes a Markdown and a JSON report.
Needs pytest: `pip install 'lazy-core[conformance]'`.
"""

from __future__ import annotations

LAYERS: tuple[str, ...] = ("discovery", "allocator", "kernels", "hcq", "tensor", "ops", "end_to_end", "copies")

__all__ = ["LAYERS"]

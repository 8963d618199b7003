"""The kernel graph viewer (`LAZY_VIZ`): `lazy.viz.capture` records what each realize scheduled and compiled,
`lazy.viz.server` serves a trace as a self-contained web page on 127.0.0.1 (`python -m lazy viz trace.json`).

`with lazy.viz.recording() as trace: ...` records a block of code; `trace.save(path)` writes it."""

from lazy.viz.capture import TRACE_VERSION, Trace, recording

__all__ = ["TRACE_VERSION", "Trace", "recording"]

"""The TMPL device: the parts (allocator, renderer, compiler, runtime) wired into one `Compiled`.

No queue types are passed, so this is the simple tier: core gives the device its synchronous queues
(`lazy.hcq.SyncQueue`), which run each kernel by calling the `Program` on the submitting thread. To overlap kernels
with Python, pass `signal_t=` and `compute_queue_t=` (a `lazy.hcq.HostQueue` subclass run by a worker thread, as
lazy-cpu does, or an `HWQueue` that enqueues on real hardware)."""

from __future__ import annotations

from lazy.device import Compiled
from lazy_template.allocator import TemplateAllocator
from lazy_template.compiler import TemplateCompiler
from lazy_template.renderer import TemplateRenderer
from lazy_template.runtime import load_program


def open_tmpl(name: str = "TMPL") -> Compiled:
    """The device `name` ("TMPL", "TMPL:1", ...). Raise here, with what to install, when something is missing."""
    return Compiled(name, TemplateAllocator(), TemplateRenderer(), TemplateCompiler(name), load_program)

"""lazy: a lazy tensor library. `Tensor` builds a graph; `.realize()` fuses it into kernels that a device plugin
renders, compiles and runs. Devices are plugins found through the `lazy.devices` entry-point group.

`nn` and the jit (`TinyJit`, `jit`) load on first use (`lazy.TinyJit`, `from lazy import nn`): `import lazy` then
costs what a tensor needs, not the jit's capture and replay machinery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazy.dtype import dtypes  # noqa: F401
from lazy.helpers import Context, GlobalCounters, getenv  # noqa: F401
from lazy.plugins import Device  # noqa: F401
from lazy.symbolic import Variable  # noqa: F401
from lazy.tensor import Tensor  # noqa: F401

if TYPE_CHECKING:
    from lazy import nn  # noqa: F401
    from lazy.engine.jit import TinyJit, jit  # noqa: F401

__all__ = ["Tensor", "Device", "dtypes", "Context", "GlobalCounters", "Variable", "TinyJit", "jit", "nn"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The names loaded on first use (PEP 562)."""
    if name == "nn":
        import lazy.nn

        return lazy.nn
    if name in ("TinyJit", "jit"):
        import lazy.engine.jit

        return getattr(lazy.engine.jit, name)
    raise AttributeError(f"module 'lazy' has no attribute {name!r}")

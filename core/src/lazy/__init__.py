"""lazy: a lazy tensor library. `Tensor` builds a graph; `.realize()` fuses it into kernels that a device plugin
renders, compiles and runs. Devices are plugins found through the `lazy.devices` entry-point group."""

from lazy import nn  # noqa: F401
from lazy.dtype import dtypes  # noqa: F401
from lazy.engine.jit import TinyJit, jit  # noqa: F401
from lazy.helpers import Context, GlobalCounters, getenv  # noqa: F401
from lazy.plugins import Device  # noqa: F401
from lazy.symbolic import Variable  # noqa: F401
from lazy.tensor import Tensor  # noqa: F401

__all__ = ["Tensor", "Device", "dtypes", "Context", "GlobalCounters", "Variable", "TinyJit", "jit", "nn"]
__version__ = "0.1.0"

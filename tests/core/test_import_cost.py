"""`import lazy` stays cheap: it loads no plugin module, no compiler binding, no numpy, no pluggy and no entry-point
metadata (each in a fresh process, since this test process has long imported them). The first use then loads what it
needs and works, numpy values included. Structural checks, not timings (timings are in bench/)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from lazy.dtype import _float_to_fp32, float_to_bf16, float_to_fp16

# top-level packages (or exact modules) that `import lazy` must not load: device plugins and their compiler bindings,
# numpy, pluggy and importlib.metadata (plugin discovery), the parts of lazy loaded on first use (the code generator
# with the first kernel, `nn` and the jit when named), and the standard modules that cost milliseconds (used only by
# caches and thread pools)
NOT_AT_IMPORT = (
    *("lazy_cpu", "lazy_opencl", "lazy_disk", "lazy_template", "llvmlite", "pyopencl", "numpy", "pluggy"),
    *("lazy_cuda", "lazy_metal", "cuda", "Metal", "objc"),
    *("importlib.metadata", "importlib_metadata", "lazy.pydevice", "lazy.hookspecs", "lazy.nn", "lazy.engine.jit"),
    "lazy.engine.captured",
    *("lazy.codegen.program", "lazy.codegen.kernel", "hashlib", "tempfile", "pathlib", "concurrent.futures"),
)

FIRST_USE = """
import json, sys
import lazy
from lazy import Tensor
loaded = sorted(sys.modules)
t = Tensor([1.0, 2.0, 3.0]) * 2 + 1
out = {"loaded": loaded, "values": t.tolist(), "default": lazy.Device.DEFAULT}
out["numpy_after_use"] = "numpy" in sys.modules
import numpy as np  # numpy values work whether numpy was imported before lazy or after it
out["from_numpy"] = (Tensor(np.arange(3, dtype=np.int16)) + np.int16(1)).tolist()
out["numpy_scalar"] = (t * np.float32(0.5)).tolist()
out["array_index"] = t[np.array([2, 0])].tolist()
out["mask_index"] = t[np.array([True, False, True])].tolist()
out["arange"] = Tensor.arange(np.int64(3)).tolist()
out["dtype"] = repr(Tensor([1], dtype=np.float16).dtype)
out["state"] = sorted(lazy.nn.state.get_state_dict({"w": t}))
from lazy import TinyJit  # loaded on first use
out["jit"] = TinyJit(lambda x: (x * 2).realize())(Tensor([1.0, 2.0])).tolist()
from lazy.plugins import DeviceSpec
out["device_spec"] = DeviceSpec.__module__
print(json.dumps(out))
"""


def _run(code: str) -> dict:
    # PYTHON (the reference interpreter) keeps the check free of a C compiler; LAZY_PLUGINS is left unset so that every
    # installed plugin is there to be (not) loaded
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZY_")} | {"LAZY_DEVICE": "PYTHON"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_import_loads_no_plugin_numpy_or_discovery_and_first_use_works() -> None:
    out = _run(FIRST_USE)
    loaded = sorted({name for name in NOT_AT_IMPORT for m in out["loaded"] if m == name or m.startswith(name + ".")})
    assert loaded == [], f"`import lazy` loaded {loaded}: import them where they are first needed"
    assert out["values"] == [3.0, 5.0, 7.0]
    assert out["default"] == "PYTHON"
    assert out["numpy_after_use"]  # (a Tensor from a list goes through numpy)
    assert out["from_numpy"] == [1, 2, 3]
    assert out["numpy_scalar"] == [1.5, 2.5, 3.5]
    assert out["array_index"] == [7.0, 3.0]
    assert out["mask_index"] == [3.0, 7.0]
    assert out["arange"] == [0, 1, 2]
    assert out["dtype"] == "dtypes.half"
    assert out["state"] == ["w"]
    assert out["jit"] == [2.0, 4.0]
    assert out["device_spec"] == "lazy.hookspecs"


def test_unknown_attribute_of_lazy_nn_is_an_attribute_error() -> None:
    import lazy.nn

    with pytest.raises(AttributeError, match="no attribute 'stat'"):
        lazy.nn.stat  # noqa: B018 (the attribute access is the test)


# rounding of one Python float to a narrower float (constant folding, `dtypes.as_const`), checked against numpy's
# casts: ties to even, the overflow thresholds (the largest finite value, the first value that rounds to inf),
# subnormals and their underflow to zero
EDGES = [0.0, -0.0, 1.0, 1 / 3, -2.5e-3, 65504.0, 65519.99, 65520.0, -65520.0, 5.960464477539063e-08,
         2.9802322387695312e-08, 2.980232238769532e-08, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-24, 1 + 3 * 2**-24,
         3.4028234663852886e38, 3.4028235677973366e38, 3.402823669209385e38, 1e39, -1e300, 1.401298464324817e-45,
         7.006492321624085e-46, 7.1e-46, 1e-50, 3.3961e38, 1 + 2**-8, 1 + 3 * 2**-8]  # fmt: skip


@pytest.mark.parametrize("convert", [float_to_fp16, float_to_bf16, _float_to_fp32])
def test_float_rounding_matches_numpy(convert: Callable[[float], float]) -> None:
    np = pytest.importorskip("numpy", reason="numpy is the reference for the rounding")

    def reference(x: float) -> float:
        with np.errstate(over="ignore"):
            if convert is float_to_fp16:
                return float(np.float64(x).astype(np.float16))
            if convert is _float_to_fp32:
                return float(np.float32(x))
            bits = int(np.array(x, np.float32).view(np.uint32))
            return float(np.array((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000, np.uint32).view(np.float32))

    for x in [*EDGES, *(-v for v in EDGES)]:
        got, want = convert(x), reference(x)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (x, got, want)
    assert math.isnan(convert(math.nan)) and convert(math.inf) == math.inf and convert(-math.inf) == -math.inf

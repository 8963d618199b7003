"""C for TMPL: core's C-style renderer (`CStyleLanguage`) with the few entries of its dialect table that plain C needs.
The kernel it writes loops over its whole range itself: `void name(float* data0, const float* data1, ...)`."""

from __future__ import annotations

from lazy.codegen.uops import UOp
from lazy.dtype import DType, dtypes
from lazy.ops import Ops
from lazy.renderer import Capabilities
from lazy.renderer.cstyle import BASE_CODE_FOR_OP, CStyleLanguage, checked_div

# The element types plain C computes in. fp8 is emulated by core (held as bytes, computed in float) for every C-style
# renderer, so it comes free; half and bfloat16 would need compiler-specific types (see lazy-cpu's renderer).
C_DTYPES = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                      dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64, *dtypes.fp8s})  # fmt: skip

# What the code generator may use on this device. No threads (the kernel is a loop nest), no local memory, no vector
# types: the simplest target. The conformance suite reads the same object (it skips what is not declared).
CAPS = Capabilities(has_threads=False, has_local=False, vector_widths=(), dtypes=C_DTYPES)


def _c_math(name: str, dtype: DType) -> str:
    """`<math.h>`'s function for the dtype: `sqrtf` for float, `sqrt` for double. C's `sqrt` of a float is a double,
    and inside an expression it stayed one: the next operations ran in double, never rounded to float32."""
    return f"{name}f" if dtype.scalar() == dtypes.float32 else name


def _idiv(a: str, b: str, dtype: DType) -> str:
    # integer division must not trap: x/0 is 0 and INT_MIN/-1 wraps, as `lazy.ops` says (checked_div writes that)
    return f"{_c_math('trunc', dtype)}({a}/{b})" if dtypes.is_float(dtype) else checked_div("/")(a, b, dtype)


def _mod(a: str, b: str, dtype: DType) -> str:
    return f"{_c_math('fmod', dtype)}({a},{b})" if dtypes.is_float(dtype) else checked_div("%")(a, b, dtype)


def _sqrt(x: str, dtype: DType) -> str:
    return f"{_c_math('sqrt', dtype)}({x})"


class TemplateRenderer(CStyleLanguage):
    """The C-style base with C99's `_Bool`, non-trapping integer division and `<math.h>` (sqrt, trunc, fmod,
    INFINITY, NAN). exp2/log2/sin are not called: with no `native_math` declared, core writes them as polynomials."""

    device = "TMPL"
    caps = CAPS
    type_map = {**CStyleLanguage.type_map, dtypes.bool: "_Bool"}
    code_for_op = {**BASE_CODE_FOR_OP, Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.SQRT: _sqrt}

    def render_prelude(self, uops: list[UOp]) -> list[str]:
        return ["#include <math.h>"]

"""The linear IR a kernel is lowered to: a list of `UOp`s in execution order, built by `UOpBuilder`, which shares
identical values and simplifies ALU ops by the rule table the lazy graph uses too (`lazy.rewrite`).

This is the whole contract between core's code generator and a plugin's renderer. Meaning of each op:

| op            | dtype              | src                                  | arg                                   |
| ------------- | ------------------ | ------------------------------------ | ------------------------------------- |
| DEFINE_GLOBAL | PtrDType           | ()                                   | (param index, name, written?)         |
| DEFINE_VAR    | index              | ()                                   | (name, min, max) symbolic size        |
| DEFINE_LOCAL  | PtrDType           | ()                                   | (name, element count)                 |
| DEFINE_ACC    | scalar/vector      | ()                                   | initial value (a mutable variable)    |
| CONST         | scalar             | ()                                   | Python value                          |
| SPECIAL       | index              | ()                                   | (name "gidxN"/"lidxN", size) thread id |
| RANGE         | index              | (start, end)                         | (axis, is_reduce) loop start          |
| ENDRANGE      | None               | (range,)                             | None: closes the loop                 |
| LOAD          | element            | (buf, idx) or (buf, idx, gate, alt)  | None: gated -> gate ? buf[idx] : alt  |
| STORE         | None               | (buf, idx, val) or (.., val, gate)   | None                                  |
| ALU           | result             | operands                             | an `Ops` ALU member                   |
| CAST/BITCAST  | target             | (x,)                                 | None                                  |
| VECTORIZE     | vector             | scalars, one per lane                | None                                  |
| GEP           | scalar             | (vector,)                            | lane                                  |
| ASSIGN        | acc's              | (acc, value)                         | None: acc = value                     |
| IF / ENDIF    | None               | (cond,) / (if,)                      | None                                  |
| BARRIER       | None               | ()                                   | None: local-memory barrier            |
| WMMA          | dtype_out x c elts | (a fragment, b fragment, c fragment) | `TensorCore`: D = A @ B + C, warp-wide |

WMMA (`lazy.renderer.TensorCore`, only on a device that declares one): every thread of a warp (lanes = linear local
id modulo `threads`) executes it together, never under a divergent IF; each passes its fragment of A (`dtype_in`
vector of `a.elements`), of B and of the accumulator C (`dtype_out` vector of `c.elements`), in the order the
`FragmentLayout`s give, and gets its fragment of D back.

Kernel parameters are the DEFINE_GLOBALs by index, then the DEFINE_VARs in list order. A LOAD/STORE of a
vector dtype through a scalar pointer accesses `count` consecutive elements starting at `idx`. Dtypes are any of
`lazy.dtype`'s, fp8 included: a renderer without fp8 types rewrites those first (`lazy.renderer.emulate.emulate_fp8`).

"index" is the kernel's index dtype: every size, loop counter, thread id, symbolic variable, buffer index and mask
is computed in it. The lowerer picks int32 (the fast one) unless the symbolic bounds say some such value, or a step
computing it, can pass 2**31 - 1, and int64 then. The shipped renderers declare every int parameter (DEFINE_VAR) as
a 64-bit integer and narrow it to the DEFINE_VAR's dtype inside, so their devices pass the values as int64 whatever
the kernel's index dtype is.
"""

from __future__ import annotations

import math
from enum import Enum, auto
from typing import Any

from lazy.dtype import DType, dtypes
from lazy.ops import GroupOp, Ops
from lazy.record import record
from lazy.rewrite import rewrite


class UOps(Enum):
    # members are singletons, equal only to themselves: hashed by identity in C, not by Enum's Python `__hash__` (every
    # graph node's and kernel's key holds one; a set of them iterates in no fixed order, as with any PYTHONHASHSEED)
    __hash__ = object.__hash__

    DEFINE_GLOBAL = auto()
    DEFINE_VAR = auto()
    DEFINE_LOCAL = auto()
    DEFINE_ACC = auto()  # noqa: E702
    CONST = auto()
    SPECIAL = auto()
    RANGE = auto()
    ENDRANGE = auto()  # noqa: E702
    LOAD = auto()
    STORE = auto()
    ALU = auto()
    CAST = auto()
    BITCAST = auto()  # noqa: E702
    VECTORIZE = auto()
    GEP = auto()
    ASSIGN = auto()
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()  # noqa: E702
    WMMA = auto()

    def __repr__(self) -> str:
        return f"UOps.{self.name}"


@record(eq=False)
class UOp:
    """One instruction. Identity is the object; `key` is the structure, used for common-subexpression reuse."""

    op: UOps
    dtype: DType | None = None
    src: tuple[UOp, ...] = ()
    arg: Any = None

    def __repr__(self) -> str:
        srcs = ", ".join(f"%{id(s) % 10000}" for s in self.src)
        return f"%{id(self) % 10000} = {self.op.name} {self.dtype} [{srcs}] {self.arg!r}"

    @property
    def key(self) -> tuple[Any, ...]:
        # 0.0 == -0.0: the sign keeps the two constants apart
        sign = math.copysign(1.0, self.arg) if isinstance(self.arg, float) else None
        return (self.op, self.dtype, tuple(id(s) for s in self.src), self.arg, sign)


def pretty(uops: list[UOp]) -> str:
    """A numbered listing of a UOp list (LAZY_DEBUG>=5)."""
    index = {id(u): i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        srcs = [index.get(id(s), "?") for s in u.src]
        lines.append(f"{i:4d} {u.op.name:14s} {str(u.dtype):24s} {str(srcs):20s} {u.arg!r}")
    return "\n".join(lines)


class _UOpGraph:
    """The rewrite rules' view of the UOps being built: a constant is a CONST (a vector one holds one value for every
    lane); new constants come from the builder, so they are shared like any other."""

    def __init__(self, builder: UOpBuilder):
        self.builder = builder

    def const_value(self, uop: UOp) -> Any:
        return uop.arg if uop.op is UOps.CONST and not isinstance(uop.arg, (tuple, list)) else None

    def make_const(self, value: Any, dtype: DType, like: UOp) -> UOp:
        return self.builder.const(value, dtype)


class UOpBuilder:
    """Appends UOps in execution order, reusing identical pure instructions and simplifying ALU ops by the shared
    rule table (`lazy.rewrite.RULES`)."""

    PURE = frozenset({UOps.CONST, UOps.ALU, UOps.CAST, UOps.BITCAST, UOps.VECTORIZE, UOps.GEP, UOps.DEFINE_GLOBAL,
                      UOps.DEFINE_VAR, UOps.SPECIAL})  # fmt: skip

    def __init__(self) -> None:
        self.uops: list[UOp] = []
        self.cache: dict[tuple[Any, ...], UOp] = {}
        self.scopes: list[list[tuple[Any, ...]]] = [[]]  # cache keys made inside each open loop/if
        self.graph = _UOpGraph(self)  # how the rewrite rules read these UOps
        # bumped whenever values made so far may go out of reach (a scope closes, loads are invalidated): a caller's own
        # memo of values is good only within one epoch
        self.epoch = 0

    def open_scope(self) -> None:
        self.scopes.append([])

    def close_scope(self) -> None:
        """Values made inside a closed loop or if are out of scope for what follows: forget them."""
        self.epoch += 1
        for key in self.scopes.pop():
            self.cache.pop(key, None)

    def add(self, op: UOps, dtype: DType | None = None, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        if op in self.PURE:  # (the key as `UOp.key` makes it, without making the UOp: most pure ones are reused)
            sign = math.copysign(1.0, arg) if isinstance(arg, float) else None
            if (hit := self.cache.get(key := (op, dtype, tuple([id(s) for s in src]), arg, sign))) is not None:
                return hit
            if op is UOps.ALU and dtype is not None and (better := rewrite(self.graph, arg, dtype, src)) is not None:
                return better
            uop = self.cache[key] = UOp(op, dtype, src, arg)
            if op not in (UOps.CONST, UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR):
                self.scopes[-1].append(key)
        else:
            uop = UOp(op, dtype, src, arg)
        self.uops.append(uop)
        return uop

    def const(self, value: Any, dtype: DType) -> UOp:
        if isinstance(value, float) and math.isnan(value):
            value = math.nan  # one canonical NaN so the cache key matches
        return self.add(UOps.CONST, dtype, (), dtypes.as_const(value, dtype) if dtype.count == 1 else value)

    def alu(self, op: Ops, *src: UOp) -> UOp:
        count = src[0].dtype.count if src[0].dtype is not None else 1
        dtype = dtypes.bool.vec(count) if op in GroupOp.Comparison else src[-1].dtype
        if op is Ops.WHERE:
            dtype = src[1].dtype
        return self.add(UOps.ALU, dtype, src, op)

    def invalidate(self) -> None:
        """Forget reusable loads and values (after a barrier or a store that later loads may observe)."""
        self.epoch += 1
        self.cache = {k: v for k, v in self.cache.items() if v.op in (UOps.CONST, UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)}

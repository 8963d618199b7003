"""The primitive op set (closed: every Tensor method decomposes into these) and `LazyOp`, the kernel AST node.

Also the reference semantics of every ALU op in Python (`exec_alu`), used for constant folding and by the
`PYTHON` reference device, so a plugin author can read exactly what each op must compute.
"""

from __future__ import annotations

import functools
import math
import struct
import weakref
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from lazy.dtype import FP8_FORMATS, ConstType, DType, dtypes, float_to_fp8, fp8_to_float, lowest_value
from lazy.record import record
from lazy.shape import ShapeTracker


class Ops(Enum):
    """Every primitive. Groups below say which are unary/binary/ternary ALU ops, reductions and meta ops."""

    # members are singletons, equal only to themselves: hashed by identity in C, not by Enum's Python `__hash__` (every
    # graph node's and kernel's key holds one; a set of them iterates in no fixed order, as with any PYTHONHASHSEED)
    __hash__ = object.__hash__

    # unary
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()  # noqa: E702
    # binary
    ADD = auto()
    MUL = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()  # noqa: E702
    CMPLT = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()  # noqa: E702
    # ternary
    WHERE = auto()
    MULACC = auto()  # noqa: E702
    # random bits: Threefry-2x32 of the counter (src 0, src 1) under the key (src 2, src 3), all uint32; arg: which
    # of its two output words (0 or 1). One node where the rounds would be ~120 (`lazy.codegen.threefry` lowers it)
    THREEFRY = auto()
    # reductions (arg: the reduced axes)
    SUM = auto()
    RMAX = auto()  # noqa: E702
    # type changes
    CAST = auto()
    BITCAST = auto()  # noqa: E702
    # buffer access inside a kernel AST
    LOAD = auto()
    CONST = auto()
    STORE = auto()
    SINK = auto()  # noqa: E702
    # meta ops: how a LazyBuffer comes to exist without (or besides) a kernel
    EMPTY = auto()
    COPY = auto()
    CONTIGUOUS = auto()
    ASSIGN = auto()
    CUSTOM = auto()
    VIEW = auto()
    BUFFER_VIEW = auto()  # a base sharing its source's memory: arg is the byte offset (no kernel, no copy)  # noqa: E702
    # a base whose element i (row-major) is i, in its integer dtype: arange without host data. Like a constant it has no
    # memory unless realized: a kernel reading it computes the index (its AST leaf is a CONST of `RAMP_VALUE`)
    RAMP = auto()
    # out[..., i, ...] = x[..., index[..., i, ...], ...] along axis `arg` (srcs: x, index; 0 outside [0, n)): read in
    # a kernel as a load whose address along that axis is the index's value (`MemBuffer.gather`), not a one-hot sum
    GATHER = auto()
    # binary, after the rest so that no other member's value moves: x / y rounded once (IEEE division). Renderers
    # whose division is exact render it (`Capabilities.exact_division`); for the others the lowerer makes it
    # x * (1 / y), within about an ulp and a half (`lazy.codegen.transcendental.division`)
    FDIV = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons compared by identity: hash them by identity too, in C (Enum's own hash is a Python
    # method, and every graph node and kernel key hashes its op)
    __hash__ = object.__hash__


class GroupOp:
    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE,
                        Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})  # fmt: skip
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | frozenset({Ops.CAST, Ops.BITCAST, Ops.THREEFRY})
    Reduce = frozenset({Ops.SUM, Ops.RMAX})
    Buffer = frozenset({Ops.LOAD, Ops.CONST, Ops.STORE})
    Meta = frozenset(
        {Ops.EMPTY, Ops.CONST, Ops.COPY, Ops.CONTIGUOUS, Ops.ASSIGN, Ops.CUSTOM, Ops.VIEW, Ops.BUFFER_VIEW, Ops.RAMP}
    )
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
    # bases computed where they are read, never kept in memory unless realized: a constant, the index ramp
    Computed = frozenset({Ops.CONST, Ops.RAMP})
    # ops where f(0, ...) may be non-zero: a padded (masked) input to them is not zero after the op
    UnsafePad = frozenset({Ops.RECIP, Ops.FDIV, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.CMPNE, Ops.CMPLT, Ops.THREEFRY})


# the reduction's identity and its ALU op
REDUCE_ALU: dict[Ops, Ops] = {Ops.SUM: Ops.ADD, Ops.RMAX: Ops.MAX}

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), `Ops.THREEFRY`: the
# rotations of the even and odd groups of four rounds, the key schedule's parity word, and the ALU ops it lowers to
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = 0x1BD11BDA
THREEFRY_ALU_OPS = 119


def threefry2x32(x0: int, x1: int, k0: int, k1: int) -> tuple[int, int]:
    """The reference: both output words of Threefry-2x32 for the counter (x0, x1) under the key (k0, k1), all uint32
    as Python ints (`Ops.THREEFRY` with arg w computes word w of this)."""
    mask = 0xFFFFFFFF
    ks = (k0, k1, k0 ^ k1 ^ THREEFRY_PARITY)
    x0, x1 = (x0 + ks[0]) & mask, (x1 + ks[1]) & mask
    for i in range(5):
        for r in THREEFRY_ROTATIONS[i % 2]:
            x0 = (x0 + x1) & mask
            x1 = (((x1 << r) & mask) | (x1 >> (32 - r))) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & mask
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & mask
    return x0, x1


def identity_element(op: Ops, dtype: DType) -> ConstType:
    if op in (Ops.RMAX, Ops.MAX):
        return lowest_value(dtype)  # (not dtypes.min: -inf is NaN in fp8e4m3)
    assert op in (Ops.SUM, Ops.ADD), f"{op} has no identity element"
    return dtypes.as_const(0, dtype)


# ---------------------------------------------------------------------------------------------------------------------
# the kernel AST


@record(frozen=True)
class MemBuffer:
    """Argument of LOAD/STORE: kernel buffer number `idx`, its element dtype, and the view it is accessed through."""

    idx: int
    dtype: DType
    st: ShapeTracker
    # (stride, size): a gathered load (`Ops.GATHER`). The LOAD's source is the index; `st` reads the element at index
    # 0 along the gathered axis, the index times `stride` is added to the address, and indices outside [0, size)
    # read 0
    gather: tuple[int, int] | None = None

    def __repr__(self) -> str:  # part of the node digest: complete and the same in every process
        extra = f", gather={self.gather}" if self.gather is not None else ""
        return f"MemBuffer(idx={self.idx}, dtype={self.dtype!r}, st={_st_text(self.st)}{extra})"


class _Ramp:
    """The value of a CONST leaf that reads an `Ops.RAMP` base: each element is its own index into the base (the
    lowerer computes it from the leaf's view, as a load computes its address)."""

    __slots__ = ()

    def __repr__(self) -> str:  # part of the node digest: the same in every process
        return "RAMP_VALUE"

    def __reduce__(self) -> str:
        return "RAMP_VALUE"  # pickled as this module's singleton


RAMP_VALUE = _Ramp()


@record(frozen=True)
class ConstBuffer:
    """Argument of CONST: a constant `val` broadcast through `st` (a masked st makes it zero outside the mask), or
    with `val` `RAMP_VALUE`, the index into the `Ops.RAMP` base the view reads."""

    val: ConstType | Any  # Any: a bound symbolic Variable, or RAMP_VALUE
    dtype: DType
    st: ShapeTracker

    def __repr__(self) -> str:  # part of the node digest: -0.0, 0.0, 0 and False stay apart (they compare equal)
        return f"ConstBuffer(val={self.val!r}, dtype={self.dtype!r}, st={_st_text(self.st)})"


@functools.lru_cache(maxsize=4096)
def _st_text(st: ShapeTracker) -> str:
    """repr of a ShapeTracker, memoized: kernels are rebuilt at every schedule from the same few views, and the
    repr is most of the cost of a node's digest."""
    return repr(st)


class LazyOp:
    """A node of a kernel's AST. Nodes are interned (hash-consed on their sources' identities and the arg): building
    a node equal in structure to a live one returns that object, so equality is identity and hashing is O(1) however
    much the DAG shares (the method cache is keyed by structure this way).

    `digest` is a sha256 over the op, the arg's repr and the sources' digests, computed once per node the first time
    it is asked for (BEAM's on-disk cache, debug output), so it costs one hash per distinct node and nothing on the
    path of a cached realize. Args must therefore have a repr that determines them and is the same in every process
    (values and frozen dataclasses of values, no object ids). `repr` lists each distinct node once, in topological
    order.
    """

    __slots__ = ("op", "src", "arg", "_digest", "__weakref__")
    _interned: weakref.WeakValueDictionary[tuple[Any, ...], LazyOp] = weakref.WeakValueDictionary()
    op: Ops
    src: tuple[LazyOp, ...]
    arg: Any
    _digest: bytes | None

    def __new__(cls, op: Ops, src: tuple[LazyOp, ...] = (), arg: Any = None) -> LazyOp:
        # interned by the identity of the (already interned, and kept alive by the node) sources and the arg: a dict
        # lookup, no hashing of text
        src = tuple(src)
        key = (op, tuple(id(s) for s in src), _arg_key(arg))
        if (hit := cls._interned.get(key)) is not None:
            return hit
        node = super().__new__(cls)
        node.op, node.src, node.arg, node._digest = op, src, arg, None
        cls._interned[key] = node
        return node

    @property
    def digest(self) -> bytes:
        """The structural digest, computed once per node on first use (sources first, iteratively)."""
        if self._digest is None:
            for node in self.toposort():
                if node._digest is None:
                    node._digest = _node_digest(node.op, node.src, node.arg)
        assert self._digest is not None
        return self._digest

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle memoizes by object, so a shared source is written once: linear in distinct nodes
        return (LazyOp, (self.op, self.src, self.arg))

    def __repr__(self) -> str:
        return render_ast(self)

    def toposort(self) -> list[LazyOp]:
        seen: dict[LazyOp, None] = {}
        stack: list[tuple[LazyOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                seen[node] = None
                continue
            if node in seen:
                continue
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(node.src) if s not in seen)
        return list(seen)

    @property
    def dtype(self) -> DType:
        if self.op in (Ops.LOAD, Ops.CONST, Ops.STORE):
            return self.arg.dtype
        if self.op in (Ops.CAST, Ops.BITCAST):
            return self.arg[0] if isinstance(self.arg, tuple) else self.arg
        if self.op in GroupOp.Comparison:
            return dtypes.bool
        if self.op is Ops.WHERE:
            return self.src[1].dtype
        if self.op in GroupOp.Reduce:
            return self.src[0].dtype
        return self.src[-1].dtype


def _arg_key(arg: Any) -> Any:
    """The arg as an interning key: equal exactly for the same constant, though 0.0 == -0.0 == 0 == False compare
    equal and NaN compares unequal to itself (floats go by repr, other values by value and type)."""
    if isinstance(arg, ConstBuffer):
        val = repr(arg.val) if isinstance(arg.val, float) else (arg.val, type(arg.val))
        return (ConstBuffer, val, arg.dtype, arg.st)
    return repr(arg) if isinstance(arg, float) else (arg, type(arg))


def _node_digest(op: Ops, src: tuple[LazyOp, ...], arg: Any) -> bytes:
    """sha256 of one node given its sources' digests (fixed length, so the framing is unambiguous)."""
    arg_text = repr(arg)
    assert " at 0x" not in arg_text, f"LazyOp arg {type(arg).__name__} has no stable repr: {arg_text}"
    head = f"{op.name}\0{len(src)}\0".encode()
    import hashlib  # on first use (only BEAM's disk cache needs digests)

    return hashlib.sha256(b"".join((head, *(s.digest for s in src), arg_text.encode()))).digest()


def render_ast(root: LazyOp) -> str:
    """One numbered line per distinct node, sources before their users: `%3 = MUL %1 %2`, then the arg if any."""
    nodes = root.toposort()
    number = {node: i for i, node in enumerate(nodes)}
    lines = []
    for i, node in enumerate(nodes):
        srcs = "".join(f" %{number[s]}" for s in node.src)
        arg = f" {node.arg!r}" if node.arg is not None else ""
        lines.append(f"%{i} = {node.op.name}{srcs}{arg}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# reference semantics of the ALU ops


def _idiv(x: int, y: int) -> int:  # C semantics: truncate toward zero; x // 0 is 0 by convention here
    return abs(x) // abs(y) * (1 if x * y >= 0 else -1) if y != 0 else 0


def _mod(x: int, y: int) -> int:  # C semantics: sign of the dividend
    return x - _idiv(x, y) * y if y != 0 else 0


def _safe(fxn: Callable[[float], float]) -> Callable[[float], float]:
    def run(x: float) -> float:
        try:
            return fxn(x)
        except (ValueError, OverflowError):
            return math.nan

    return run


def _exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if x > 0:
        return math.log2(x) if not math.isinf(x) else math.inf
    return -math.inf if x == 0 else math.nan


def _recip(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x) if isinstance(x, float) else math.inf
    return 1.0 / x


def _fdiv(x: float, y: float) -> float:
    """IEEE x / y (Python's float division, rounded once; the caller rounds float32 and narrower: a quotient of two
    float32 rounded to float64 and then to float32 is still the correctly rounded one)."""
    if y == 0:
        if x == 0 or x != x:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    try:
        return x / y
    except OverflowError:
        return math.copysign(math.inf, x) * math.copysign(1.0, y)


PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: _exp2,
    Ops.LOG2: _log2,
    Ops.SIN: _safe(lambda x: math.sin(x) if not math.isinf(x) else math.nan),
    Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
    Ops.RECIP: _recip,
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
    Ops.ADD: lambda x, y: x + y,
    Ops.MUL: lambda x, y: x * y,
    Ops.FDIV: _fdiv,
    Ops.IDIV: _idiv,
    Ops.MOD: _mod,
    Ops.MAX: lambda x, y: x if x >= y or x != x else y,  # NaN propagates from either side
    Ops.CMPLT: lambda x, y: x < y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.AND: lambda x, y: x & y,
    Ops.OR: lambda x, y: x | y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.SHL: lambda x, y: x << y,
    Ops.SHR: lambda x, y: x >> y,
    Ops.WHERE: lambda c, x, y: x if c else y,
    Ops.MULACC: lambda x, y, z: x * y + z,
}


def truncate(value: Any, dtype: DType) -> Any:
    """`value` as `dtype` holds it: ints wrap, floats round to nearest even (fp8 saturating: `float_to_fp8`), bool
    is bool."""
    if dtypes.is_int(dtype):
        if isinstance(value, float):
            value = int(value) if math.isfinite(value) else 0
        return dtypes.as_const(value, dtype)
    if dtype == dtypes.bool:
        return bool(value)
    if dtype in (dtypes.float32, dtypes.float16):
        fmt = "f" if dtype == dtypes.float32 else "e"
        try:
            return struct.unpack(fmt, struct.pack(fmt, float(value)))[0]
        except (OverflowError, struct.error):  # too large for the format: rounds to infinity like the hardware
            return math.inf if value > 0 else -math.inf
    if dtype == dtypes.bfloat16:
        bits = struct.unpack("I", struct.pack("f", truncate(value, dtypes.float32)))[0]
        if not math.isnan(value):
            bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        else:
            bits |= 0x400000  # a NaN stays one: its quiet bit set (a payload only in the low half would be inf)
        return struct.unpack("f", struct.pack("I", (bits >> 16 << 16) & 0xFFFFFFFF))[0]
    if dtype in FP8_FORMATS:
        return fp8_to_float(float_to_fp8(float(value), dtype), dtype)
    return float(value)


def exec_alu(op: Ops, dtype: DType, operands: list[Any]) -> Any:
    """Compute one ALU op on Python scalars exactly as a device must, result truncated to `dtype`."""
    return truncate(PYTHON_ALU[op](*operands), dtype)

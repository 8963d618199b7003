"""PYTHON, the reference device: a pure-Python interpreter of the `UOp` list, registered through the same
`lazy_devices` hook as every plugin. The core tests and the conformance suite run on it without a plugin installed,
and it is the first device a plugin author reads: a simple-tier device (Allocator, Renderer, Compiler, Program).
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import struct
import time
from collections.abc import Callable
from typing import Any

from lazy.codegen.uops import UOp, UOps
from lazy.device import Allocator, BufferSpec, Compiled, CompileError, Compiler, ProgramSpec
from lazy.dtype import FP8S, DType, PtrDType, dtypes, float_to_fp8, fp8_to_float
from lazy.hookspecs import PLUGIN_API_VERSION, DeviceSpec, hookimpl
from lazy.ops import PYTHON_ALU, Ops, truncate
from lazy.renderer import Capabilities, Renderer

# ---------------------------------------------------------------------------------------------------------------------
# registration: what a plugin's entry module holds


@hookimpl
def lazy_devices() -> list[DeviceSpec]:
    return [
        DeviceSpec(name="PYTHON", api_version=PLUGIN_API_VERSION, priority=0, probe=lambda: (True, "pure Python"),
                   open=open_python_device, description="reference interpreter of the UOp IR (slow; never the default)",
                   default_ok=False)
    ]  # fmt: skip


def open_python_device(name: str) -> Compiled:
    return Compiled(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)


# ---------------------------------------------------------------------------------------------------------------------
# memory: every buffer is a memoryview (format "B") of a bytearray


class PythonAllocator(Allocator):
    """Host memory, with every optional feature: zero-copy views, sub-buffers (slices) and transfers."""

    features = frozenset({"as_buffer", "offset", "transfer"})

    def _alloc(self, size: int, spec: BufferSpec) -> memoryview:
        return memoryview(bytearray(size))

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def _as_buffer(self, src: memoryview) -> memoryview:
        return src

    def _offset(self, buf: memoryview, size: int, offset: int) -> memoryview:
        return buf[offset : offset + size]

    def _transfer(self, dest: memoryview, src: memoryview, size: int, src_dev: Any, dest_dev: Any) -> None:
        dest[:size] = src[:size]


# ---------------------------------------------------------------------------------------------------------------------
# rendering: the "source" is the UOp list as text, one UOp a line, which `parse_kernel` reads back exactly

# GPU-style by default (SPECIAL thread ids, local memory, barriers) so the reference covers what GPU plugins get;
# `PythonRenderer(threads=False)` is the loop-style variant (RANGE over the global axes), like a CPU plugin.
EXACT_MATH = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})  # the reference computes them with Python's math module
THREAD_CAPS = Capabilities(has_threads=True, has_local=True, local_max=(1024, 1024, 64), local_size_max=1024,
                           shared_max=1 << 16, vector_widths=(2, 4), native_math=EXACT_MATH)  # fmt: skip
LOOP_CAPS = Capabilities(has_threads=False, has_local=False, vector_widths=(2, 4), native_math=EXACT_MATH)


class PythonRenderer(Renderer):
    device = "PYTHON"

    def __init__(self, threads: bool = True):
        self.caps = THREAD_CAPS if threads else LOOP_CAPS

    def render(self, name: str, uops: list[UOp]) -> str:
        """Tab-separated: index, op, dtype, source indices, arg. Every field is a Python literal or a dtype/Ops name."""
        index: dict[int, int] = {}
        lines = [f"# PYTHON kernel {name}: index, op, dtype, sources, arg"]
        for i, uop in enumerate(uops):
            missing = [s for s in uop.src if id(s) not in index]
            if missing:
                raise CompileError(
                    "PYTHON", "\n".join(lines), f"UOp {i} ({uop.op.name}) uses a UOp not listed before it"
                )
            srcs = ",".join(str(index[id(s)]) for s in uop.src)
            lines.append("\t".join((str(i), uop.op.name, repr(uop.dtype), srcs, repr(uop.arg))))
            index[id(uop)] = i
        return "\n".join(lines) + "\n"


_NAMES: dict[str, Any] = {"nan": math.nan, "inf": math.inf, "Ops": Ops, "dtypes": dtypes}


def _literal(node: ast.expr) -> Any:
    """Evaluate the small literal language `repr` writes for UOp fields; anything else is refused."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(x) for x in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.Attribute):
        base = _literal(node.value)
        if base is Ops:
            return Ops[node.attr]
        if base is dtypes and isinstance(dtype := getattr(dtypes, node.attr, None), DType):
            return dtype
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("vec", "ptr"):
        base, args = _literal(node.func.value), [_literal(a) for a in node.args]
        if isinstance(base, DType):
            return base.vec(*args) if node.func.attr == "vec" else base.ptr()
    raise ValueError(f"not a literal the PYTHON device can read back: {ast.unparse(node)}")


def parse_kernel(src: str) -> list[UOp]:
    """The UOp list `PythonRenderer.render` wrote."""
    uops: list[UOp] = []
    for line in src.splitlines():
        if not line or line.startswith("#"):
            continue
        idx, op, dtype, srcs, arg = line.split("\t")
        if int(idx) != len(uops):
            raise ValueError(f"UOp {idx} is out of order (expected {len(uops)})")
        src = tuple(uops[int(s)] for s in srcs.split(",")) if srcs else ()  # type: ignore[assignment]
        parse = lambda text: _literal(ast.parse(text, mode="eval").body)
        uops.append(UOp(UOps[op], parse(dtype), src, parse(arg)))  # type: ignore[arg-type]
    return uops


class PythonCompiler(Compiler):
    """Compiling is checking that the source parses; the "binary" is the source itself."""

    def __init__(self) -> None:
        super().__init__(cachekey=None)  # nothing to gain from a disk cache

    def compile(self, src: str) -> bytes:
        try:
            parse_kernel(src)
        except (ValueError, SyntaxError, KeyError, TypeError) as e:
            raise CompileError("PYTHON", src, f"{type(e).__name__}: {e}") from e
        return src.encode()


# ---------------------------------------------------------------------------------------------------------------------
# values: how each dtype is truncated, and how its elements sit in memory


@functools.cache
def truncator(dtype: DType) -> Callable[[Any], Any]:
    """A fast function equal to `lambda v: truncate(v, dtype)` for a scalar dtype."""
    if dtypes.is_int(dtype):
        lo, hi = dtypes.min(dtype), dtypes.max(dtype)
        return lambda v: v if v.__class__ is int and lo <= v <= hi else truncate(v, dtype)
    if dtype == dtypes.float64:
        return float
    if dtype == dtypes.bool:
        return bool
    if dtype in (dtypes.float32, dtypes.float16):
        fmt = struct.Struct(dtype.fmt or "")

        def round_float(v: Any) -> Any:
            try:
                return fmt.unpack(fmt.pack(float(v)))[0]
            except (OverflowError, struct.error):
                return truncate(v, dtype)

        return round_float
    return lambda v: truncate(v, dtype)


@functools.cache
def _half_bits_table(dtype: DType) -> tuple[float, ...]:
    """Every 16-bit pattern of float16/bfloat16 as a Python float (memoryview cannot hold these formats)."""
    import numpy as np

    bits = np.arange(1 << 16, dtype=np.uint16)
    as_float = bits.view(np.float16) if dtype == dtypes.float16 else (bits.astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore"):  # signalling-NaN bit patterns
        return tuple(as_float.astype(np.float64).tolist())


def _half_to_bits(dtype: DType) -> Callable[[Any], int]:
    fmt, shift = ("<e", 0) if dtype == dtypes.float16 else ("<f", 16)
    bits_fmt = "<H" if dtype == dtypes.float16 else "<I"
    return lambda v: struct.unpack(bits_fmt, struct.pack(fmt, truncate(v, dtype)))[0] >> shift


@functools.cache
def element_format(dtype: DType) -> tuple[str, Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
    """(memoryview format, decode or None, encode or None) of a scalar dtype held in memory."""
    if dtype in (dtypes.float16, dtypes.bfloat16):  # stored as their 16 bits
        return "H", _half_bits_table(dtype).__getitem__, _half_to_bits(dtype)
    if dtype in FP8S:  # stored as their 8 bits, converted by the host reference (`lazy.dtype.float_to_fp8`)
        values = tuple(fp8_to_float(bits, dtype) for bits in range(256))
        return "B", values.__getitem__, lambda v: float_to_fp8(float(v), dtype)
    assert dtype.fmt is not None, f"{dtype} has no memory format"
    return dtype.fmt, None, None


def _reader(dtype: DType, where: str) -> Callable[[memoryview, int], Any]:
    """Reads the element (or the `count` consecutive elements of a vector dtype) at an index, bounds-checked."""
    _, decode, _ = element_format(dtype.scalar())
    count = dtype.count

    def read(mv: memoryview, idx: int) -> Any:
        if not 0 <= idx <= len(mv) - count:
            raise IndexError(f"{where}: index {idx} (+{count}) out of bounds of a buffer of {len(mv)} elements")
        if count == 1:
            return decode(mv[idx]) if decode else mv[idx]
        lanes = mv[idx : idx + count].tolist()
        return tuple(map(decode, lanes)) if decode else tuple(lanes)

    return read


def _writer(dtype: DType, where: str) -> Callable[[memoryview, int, Any], None]:
    _, _, encode = element_format(dtype.scalar())
    count = dtype.count

    def write(mv: memoryview, idx: int, value: Any) -> None:
        if not 0 <= idx <= len(mv) - count:
            raise IndexError(f"{where}: index {idx} (+{count}) out of bounds of a buffer of {len(mv)} elements")
        for lane, v in enumerate(value if count > 1 else (value,)):
            mv[idx + lane] = encode(v) if encode else v

    return write


def _bits_codec(dtype: DType) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(value -> bytes, bytes -> value) for BITCAST; vectors are tuples of lanes."""
    fmt, decode, encode = element_format(dtype.scalar())
    packer = struct.Struct(f"<{dtype.count}{fmt}")

    def to_bytes(value: Any) -> bytes:
        lanes = value if dtype.count > 1 else (value,)
        return packer.pack(*(map(encode, lanes) if encode else lanes))

    def from_bytes(raw: bytes) -> Any:
        lanes = packer.unpack(raw)
        lanes = tuple(map(decode, lanes)) if decode else lanes
        return lanes if dtype.count > 1 else lanes[0]

    return to_bytes, from_bytes


def const_value(value: Any, dtype: DType) -> Any:
    """A CONST/DEFINE_ACC argument as the register holds it: truncated to the dtype, a tuple for a vector."""
    trunc = truncator(dtype.scalar())
    if dtype.count == 1:
        return trunc(value)
    lanes = value if isinstance(value, (tuple, list)) else (value,) * dtype.count
    return tuple(trunc(v) for v in lanes)


# ---------------------------------------------------------------------------------------------------------------------
# the interpreter: a pre-pass turns each executable UOp into a closure `step(regs) -> next step`; registers are a list
# indexed by UOp position. A negative next step (~n) means "barrier, then continue at n".

Step = Callable[[list[Any]], int]
_SETUP = frozenset({UOps.CONST, UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR, UOps.DEFINE_LOCAL, UOps.SPECIAL, UOps.ENDIF})


class _Lowering:
    """What a step builder needs: registers of sources, and where control flow goes."""

    def __init__(self, name: str, uops: list[UOp]):
        self.name, self.uops = name, uops
        self.reg = {id(u): i for i, u in enumerate(uops)}
        self.step_at: list[int] = []  # step index each UOp starts at (steps before it)
        count = 0
        for uop in uops:
            self.step_at.append(count)
            count += uop.op not in _SETUP
        self.closer: dict[int, int] = {}  # RANGE/IF position -> position of its ENDRANGE/ENDIF
        for i, uop in enumerate(uops):
            if uop.op in (UOps.ENDRANGE, UOps.ENDIF):
                self.closer[self.reg[id(uop.src[0])]] = i

    def regs(self, uop: UOp) -> tuple[int, ...]:
        return tuple(self.reg[id(s)] for s in uop.src)

    def where(self, i: int) -> str:
        return f"PYTHON kernel {self.name}: UOp {i} ({self.uops[i].op.name})"


def _lanes(value: Any, count: int) -> Any:
    return value if isinstance(value, tuple) else (value,) * count


def _step_alu(low: _Lowering, i: int, uop: UOp) -> Step:
    fn, nxt, srcs = PYTHON_ALU[uop.arg], low.step_at[i] + 1, low.regs(uop)
    assert uop.dtype is not None
    trunc, count = truncator(uop.dtype.scalar()), uop.dtype.count
    if count > 1:

        def vector(r: list[Any]) -> int:
            r[i] = tuple(trunc(fn(*lane)) for lane in zip(*(_lanes(r[s], count) for s in srcs)))
            return nxt

        return vector
    if len(srcs) == 1:
        (a,) = srcs

        def unary(r: list[Any]) -> int:
            r[i] = trunc(fn(r[a]))
            return nxt

        return unary
    if len(srcs) == 2:
        a, b = srcs

        def binary(r: list[Any]) -> int:
            r[i] = trunc(fn(r[a], r[b]))
            return nxt

        return binary

    def ternary(r: list[Any]) -> int:
        r[i] = trunc(fn(*[r[s] for s in srcs]))
        return nxt

    return ternary


def _step_cast(low: _Lowering, i: int, uop: UOp) -> Step:
    (a,), nxt = low.regs(uop), low.step_at[i] + 1
    assert uop.dtype is not None
    trunc = truncator(uop.dtype.scalar())
    if uop.dtype.count > 1:
        count = uop.dtype.count
        return lambda r: (r.__setitem__(i, tuple(map(trunc, _lanes(r[a], count)))), nxt)[1]
    return lambda r: (r.__setitem__(i, trunc(r[a])), nxt)[1]


def _step_bitcast(low: _Lowering, i: int, uop: UOp) -> Step:
    (a,), nxt = low.regs(uop), low.step_at[i] + 1
    assert uop.dtype is not None and uop.src[0].dtype is not None
    to_bytes, _ = _bits_codec(uop.src[0].dtype)
    _, from_bytes = _bits_codec(uop.dtype)
    if uop.src[0].dtype.itemsize != uop.dtype.itemsize:
        raise CompileError("PYTHON", "", f"{low.where(i)}: BITCAST {uop.src[0].dtype} -> {uop.dtype} changes the size")
    return lambda r: (r.__setitem__(i, from_bytes(to_bytes(r[a]))), nxt)[1]


def _step_load(low: _Lowering, i: int, uop: UOp) -> Step:
    srcs, nxt = low.regs(uop), low.step_at[i] + 1
    assert uop.dtype is not None
    read = _reader(uop.dtype, low.where(i))
    if len(srcs) == 2:
        buf, idx = srcs

        def load(r: list[Any]) -> int:
            r[i] = read(r[buf], r[idx])
            return nxt

        return load
    buf, idx, gate, alt = srcs

    def gated_load(r: list[Any]) -> int:
        r[i] = read(r[buf], r[idx]) if r[gate] else r[alt]
        return nxt

    return gated_load


def _step_store(low: _Lowering, i: int, uop: UOp) -> Step:
    srcs, nxt = low.regs(uop), low.step_at[i] + 1
    assert uop.src[2].dtype is not None
    write = _writer(uop.src[2].dtype, low.where(i))
    buf, idx, val = srcs[:3]
    gate = srcs[3] if len(srcs) == 4 else None

    def store(r: list[Any]) -> int:
        if gate is None or r[gate]:
            write(r[buf], r[idx], r[val])
        return nxt

    return store


def _step_range(low: _Lowering, i: int, uop: UOp) -> Step:
    (start, end), body = low.regs(uop), low.step_at[i] + 1
    after = low.step_at[low.closer[i]] + 1  # past the ENDRANGE

    def loop_start(r: list[Any]) -> int:
        r[i] = r[start]
        return body if r[i] < r[end] else after

    return loop_start


def _step_endrange(low: _Lowering, i: int, uop: UOp) -> Step:
    (rng,), nxt = low.regs(uop), low.step_at[i] + 1
    end, body = low.reg[id(uop.src[0].src[1])], low.step_at[rng] + 1

    def loop_end(r: list[Any]) -> int:
        r[rng] += 1
        return body if r[rng] < r[end] else nxt

    return loop_end


def _step_if(low: _Lowering, i: int, uop: UOp) -> Step:
    (cond,), nxt = low.regs(uop), low.step_at[i] + 1
    after = low.step_at[low.closer[i]]  # ENDIF makes no step: the next step is the one after it
    return lambda r: nxt if r[cond] else after


def _step_define_acc(low: _Lowering, i: int, uop: UOp) -> Step:
    assert uop.dtype is not None
    initial, nxt = const_value(uop.arg, uop.dtype), low.step_at[i] + 1
    return lambda r: (r.__setitem__(i, initial), nxt)[1]


def _step_assign(low: _Lowering, i: int, uop: UOp) -> Step:
    (acc, val), nxt = low.regs(uop), low.step_at[i] + 1

    def assign(r: list[Any]) -> int:
        r[acc] = r[i] = r[val]
        return nxt

    return assign


def _step_vectorize(low: _Lowering, i: int, uop: UOp) -> Step:
    srcs, nxt = low.regs(uop), low.step_at[i] + 1
    return lambda r: (r.__setitem__(i, tuple([r[s] for s in srcs])), nxt)[1]


def _step_gep(low: _Lowering, i: int, uop: UOp) -> Step:
    (vec,), nxt, lane = low.regs(uop), low.step_at[i] + 1, uop.arg
    return lambda r: (r.__setitem__(i, r[vec][lane]), nxt)[1]


def _step_barrier(low: _Lowering, i: int, uop: UOp) -> Step:
    resume = ~(low.step_at[i] + 1)
    return lambda r: resume


STEP_BUILDERS: dict[UOps, Callable[[_Lowering, int, UOp], Step]] = {
    UOps.ALU: _step_alu, UOps.CAST: _step_cast, UOps.BITCAST: _step_bitcast, UOps.LOAD: _step_load,
    UOps.STORE: _step_store, UOps.RANGE: _step_range, UOps.ENDRANGE: _step_endrange, UOps.IF: _step_if,
    UOps.DEFINE_ACC: _step_define_acc, UOps.ASSIGN: _step_assign, UOps.VECTORIZE: _step_vectorize,
    UOps.GEP: _step_gep, UOps.BARRIER: _step_barrier,
}  # fmt: skip


def _run_thread(steps: list[Step], regs: list[Any]) -> None:
    """Run one thread to the end (a barrier with no other thread in the group is a no-op)."""
    pc, end = 0, len(steps)
    while pc < end:
        pc = steps[pc](regs)
        if pc < 0:
            pc = ~pc


def _thread_until_barriers(steps: list[Step], regs: list[Any]) -> Any:
    """One thread of a work group as a generator that pauses at each barrier, so the group runs in lockstep."""
    pc, end = 0, len(steps)
    while pc < end:
        pc = steps[pc](regs)
        if pc < 0:
            yield
            pc = ~pc


class PythonProgram:
    """A kernel ready to run: the runtime of the PYTHON device, `runtime(name, lib, spec)`."""

    def __init__(self, name: str, lib: bytes, spec: ProgramSpec | None = None):
        self.name, self.uops = name, parse_kernel(lib.decode())
        low = _Lowering(name, self.uops)
        self.template: list[Any] = [None] * len(self.uops)  # registers every thread starts from
        self.globals: list[tuple[int, int, str]] = []  # (register, parameter index, memoryview format)
        self.vars: list[int] = []
        self.locals: list[tuple[int, str, int]] = []  # (register, format, element count)
        self.specials: list[tuple[int, bool, int]] = []  # (register, is a local id, dimension)
        self.launch: dict[bool, list[int]] = {False: [1, 1, 1], True: [1, 1, 1]}  # from SPECIAL sizes
        self.steps: list[Step] = []
        for i, uop in enumerate(self.uops):
            if uop.op in _SETUP:
                self._setup(i, uop)
            elif (builder := STEP_BUILDERS.get(uop.op)) is not None:
                self.steps.append(builder(low, i, uop))
            else:
                raise CompileError("PYTHON", lib.decode(), f"{low.where(i)}: the PYTHON device cannot run {uop.op}")
        self.has_barrier = any(u.op is UOps.BARRIER for u in self.uops)

    def _setup(self, i: int, uop: UOp) -> None:
        if uop.op is UOps.CONST:
            assert uop.dtype is not None
            self.template[i] = const_value(uop.arg, uop.dtype)
        elif uop.op is UOps.DEFINE_GLOBAL:
            assert isinstance(uop.dtype, PtrDType)
            self.globals.append((i, uop.arg[0], element_format(uop.dtype.base())[0]))
        elif uop.op is UOps.DEFINE_VAR:
            self.vars.append(i)
        elif uop.op is UOps.DEFINE_LOCAL:
            assert isinstance(uop.dtype, PtrDType)
            self.locals.append((i, element_format(uop.dtype.base())[0], uop.arg[1]))
        elif uop.op is UOps.SPECIAL:
            name, size = uop.arg
            if name[:4] not in ("gidx", "lidx"):
                raise CompileError("PYTHON", "", f"SPECIAL {name!r}: expected gidxN (group id) or lidxN (local id)")
            is_local, dim = name[0] == "l", int(name[4:])
            self.specials.append((i, is_local, dim))
            if isinstance(size, int):
                self.launch[is_local][dim] = size

    def __repr__(self) -> str:
        return f"<PythonProgram {self.name}: {len(self.uops)} uops, {len(self.steps)} steps>"

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run the whole launch grid; `global_size` counts work groups, `local_size` threads in one group."""
        start = time.perf_counter()
        if len(vals) < len(self.vars):
            raise ValueError(f"PYTHON kernel {self.name} takes {len(self.vars)} variable values, got {vals}")
        regs = list(self.template)
        for reg, param, fmt in self.globals:
            regs[reg] = memoryview(bufs[param]).cast("B").cast(fmt)  # type: ignore[call-overload]
        for reg, value in zip(self.vars, vals):
            regs[reg] = value
        groups = _dims(global_size, self.launch[False])
        threads = _dims(local_size, self.launch[True])
        for group in itertools.product(*(range(n) for n in reversed(groups))):
            self._run_group(regs, group[::-1], threads)
        return time.perf_counter() - start if wait else None

    def _run_group(self, regs: list[Any], group: tuple[int, ...], threads: list[int]) -> None:
        for reg, fmt, count in self.locals:  # local memory is fresh for each work group
            regs[reg] = memoryview(bytearray(count * struct.calcsize(fmt))).cast(fmt)  # type: ignore[call-overload]
        thread_regs = []
        for lid in itertools.product(*(range(n) for n in reversed(threads))):
            lid = lid[::-1]
            mine = list(regs) if self.specials else regs
            for reg, is_local, dim in self.specials:
                mine[reg] = lid[dim] if is_local else group[dim]
            if not self.has_barrier:
                _run_thread(self.steps, mine)
            else:
                thread_regs.append(mine)
        running = [_thread_until_barriers(self.steps, r) for r in thread_regs]
        while running:  # each thread runs to its next barrier, then the next thread: barrier semantics
            running = [t for t in running if next(t, StopIteration) is not StopIteration]


def _dims(given: Any, default: list[int]) -> list[int]:
    dims = list(given) if given is not None else list(default)
    return dims + [1] * (3 - len(dims))

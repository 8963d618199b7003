"""PYTHON, the reference device: a pure-Python interpreter of the `UOp` list, registered through the same
`lazy_devices` hook as every plugin. The core tests and the conformance suite run on it without a plugin installed,
and it is the first device a plugin author reads: a simple-tier device (Allocator, Renderer, Compiler, Program).
With `LAZY_EMULATE=NAME` it emulates NAME's code generation target: NAME's capabilities drive code generation, and
the interpreter runs the kernels as that GPU would (launch limits, warps, tensor-core instructions by their own
documented lane layouts), so a GPU plugin's code generation is checked where no GPU is.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from lazy.codegen.uops import UOp, UOps
from lazy.device import (
    Allocator,
    BufferSpec,
    Compiled,
    CompileError,
    Compiler,
    DeviceError,
    LaunchLimits,
    ProgramSpec,
    opened_devices,
)
from lazy.dtype import FP8S, DType, PtrDType, dtypes, float_to_fp8, fp8_to_float
from lazy.helpers import EMULATE
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, hookimpl
from lazy.ops import PYTHON_ALU, Ops, truncate
from lazy.record import record
from lazy.renderer import Capabilities, FragmentLayout, Renderer, TensorCore
from lazy.wmma import known_tensor_core, multiply_accumulate

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
    """The PYTHON device (or instance), emulating what `LAZY_EMULATE` names when it opens, for as long as it is open."""
    setting = emulate_setting()
    emulation = find_emulation(setting) if setting else None
    renderer = PythonRenderer(emulation=emulation)
    runtime = functools.partial(PythonProgram, caps=renderer.caps, emulation=emulation)
    return Compiled(name, PythonAllocator(), renderer, PythonCompiler(), runtime)


# ---------------------------------------------------------------------------------------------------------------------
# emulation: `LAZY_EMULATE=NAME` gives the PYTHON device NAME's first code generation target
#
# The target is fixed when a PYTHON instance opens: changing `LAZY_EMULATE` later changes what instances opened
# afterwards emulate (the conformance suite compares `PYTHON` emulating a GPU with a plain `PYTHON:1` opened so), and
# `lazy.Device.reset()` closes them all. Kernels of one target never run as another's: the method cache and the
# schedule cache hold runners bound to one opened instance (both drop them when it closes), the on-disk program cache
# is keyed by the renderer's capabilities, and a kernel's text names the target it was made for (`# emulates:`),
# which the program checks against its device's when it is loaded (a pickled jit taken to another target).


@record(frozen=True)
class Emulation:
    """What an opened PYTHON instance emulates: `device` (as `LAZY_EMULATE` names it, upper case), `label` naming the
    target for reports ("CUDA sm_80") and `caps`, the target's capabilities."""

    device: str
    label: str
    caps: Capabilities


def emulate_setting() -> str:
    """`LAZY_EMULATE` as a device name ("cuda" -> "CUDA"); "" when unset."""
    return str(EMULATE.value or "").strip().partition(":")[0].upper()


def find_emulation(device: str) -> Emulation:
    """`device`'s first `CodegenTarget`, found through the registry without probing or opening `device` (so it works
    without its GPU or driver). DeviceError saying what to set for PYTHON itself, an unknown device, a device without
    code generation targets, or targets that cannot be had."""
    from lazy.plugins import Device, PluginFailure, call_plugin  # the registry sits beside this module (layer 9)

    specs = Device.specs()
    emulable = sorted(name for name, spec in specs.items() if spec.codegen_targets is not None and name != "PYTHON")
    fix = (f"set LAZY_EMULATE to a device with code generation targets ({', '.join(emulable) or 'none is installed'})"
           " or unset it")  # fmt: skip
    if device == "PYTHON":
        raise DeviceError(f"LAZY_EMULATE=PYTHON: the PYTHON device cannot emulate itself; {fix}")
    if (spec := specs.get(device)) is None:
        raise DeviceError(f"LAZY_EMULATE={device}: no installed plugin provides device {device}; {fix}")
    if spec.codegen_targets is None:
        raise DeviceError(f"LAZY_EMULATE={device}: {device} declares no code generation targets "
                          f"(DeviceSpec.codegen_targets, plugin API 2.1), so it cannot be emulated; {fix}")  # fmt: skip
    targets = call_plugin(spec.codegen_targets)
    if isinstance(targets, PluginFailure):
        raise DeviceError(f"LAZY_EMULATE={device}: {device}'s codegen_targets() {targets}") from targets.exc
    if not isinstance(targets, (list, tuple)) or not targets or not isinstance(targets[0], CodegenTarget):
        raise DeviceError(f"LAZY_EMULATE={device}: {device}'s codegen_targets() returned {targets!r:.200}, not a "
                          f"non-empty list of CodegenTarget; this is a bug in its plugin")  # fmt: skip
    target = targets[0]
    caps = getattr(target.renderer, "caps", None)
    if not isinstance(caps, Capabilities):
        raise DeviceError(f"LAZY_EMULATE={device}: target {target.name}'s renderer has no Capabilities (caps)")
    label = device if target.name == device else f"{device} {target.name}"
    return Emulation(device, label, caps)


def emulating(device: str = "PYTHON") -> str | None:
    """What the opened PYTHON device (or instance `device`, e.g. "PYTHON:1") emulates, e.g. "CUDA sm_80"; None when it
    emulates nothing or is not open."""
    dev = opened_devices.get(device)
    renderer = dev.renderer if dev is not None else None
    emulation = renderer.emulation if isinstance(renderer, PythonRenderer) else None
    return emulation.label if emulation is not None else None


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
                           shared_max=1 << 16, vector_widths=(2, 4), native_math=EXACT_MATH,
                           exact_division=True)  # fmt: skip
LOOP_CAPS = Capabilities(has_threads=False, has_local=False, vector_widths=(2, 4), native_math=EXACT_MATH,
                         exact_division=True)  # fmt: skip
EMULATES = "# emulates: "  # the header line naming the target a kernel was generated for


class PythonRenderer(Renderer):
    """Writes the UOp list as text. Under an `Emulation` it has the emulated target's capabilities, so core generates
    that target's kernels, and the text says which target they are for."""

    device = "PYTHON"

    def __init__(self, threads: bool = True, emulation: Emulation | None = None):
        self.emulation = emulation
        self.caps = emulation.caps if emulation is not None else THREAD_CAPS if threads else LOOP_CAPS

    def render(self, name: str, uops: list[UOp]) -> str:
        """Tab-separated: index, op, dtype, source indices, arg. Every field is a Python literal or a dtype/Ops name."""
        index: dict[int, int] = {}
        lines = [f"# PYTHON kernel {name}: index, op, dtype, sources, arg"]
        if self.emulation is not None:
            lines.append(EMULATES + self.emulation.label)
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
_CONSTRUCTORS: dict[str, Callable[..., Any]] = {"TensorCore": TensorCore, "FragmentLayout": FragmentLayout}  # WMMA's


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
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS:
        if all(kw.arg is not None for kw in node.keywords):
            kwargs = {str(kw.arg): _literal(kw.value) for kw in node.keywords}
            return _CONSTRUCTORS[node.func.id](*[_literal(a) for a in node.args], **kwargs)
    raise ValueError(f"not a literal the PYTHON device can read back: {ast.unparse(node)}")


_AST_LOCK = threading.Lock()  # CPython 3.11's ast.parse is not thread-safe: concurrent parses (kernels loaded by
# parallel compiles) raised "SystemError: AST constructor recursion depth mismatch"


def _parse_field(text: str) -> Any:
    """A field of a kernel line, read back as the value `PythonRenderer` wrote."""
    with _AST_LOCK:
        tree = ast.parse(text, mode="eval")
    return _literal(tree.body)


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
        uops.append(UOp(UOps[op], _parse_field(dtype), src, _parse_field(arg)))  # type: ignore[arg-type]
    return uops


def kernel_target(src: str) -> str | None:
    """The target a kernel's text says it was made for (`# emulates: CUDA sm_80`); None: the plain PYTHON device."""
    for line in src.splitlines():
        if line.startswith(EMULATES):
            return line[len(EMULATES) :]
        if line and not line.startswith("#"):
            break
    return None


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


def _step_wmma(low: _Lowering, i: int, uop: UOp) -> Step:
    """A lane hands in its fragments and pauses; the program runs the warp's multiply-accumulate once every lane of
    the warp is there and writes each lane's D fragment into the register (`PythonProgram._run_warps`)."""
    (a, b, c), resume = low.regs(uop), ~(low.step_at[i] + 1)

    def deposit(r: list[Any]) -> int:
        r[i] = (r[a], r[b], r[c])
        return resume

    return deposit


STEP_BUILDERS: dict[UOps, Callable[[_Lowering, int, UOp], Step]] = {
    UOps.ALU: _step_alu, UOps.CAST: _step_cast, UOps.BITCAST: _step_bitcast, UOps.LOAD: _step_load,
    UOps.STORE: _step_store, UOps.RANGE: _step_range, UOps.ENDRANGE: _step_endrange, UOps.IF: _step_if,
    UOps.DEFINE_ACC: _step_define_acc, UOps.ASSIGN: _step_assign, UOps.VECTORIZE: _step_vectorize,
    UOps.GEP: _step_gep, UOps.BARRIER: _step_barrier, UOps.WMMA: _step_wmma,
}  # fmt: skip


def _run_thread(steps: list[Step], regs: list[Any]) -> None:
    """Run one thread to the end (a barrier with no other thread in the group is a no-op)."""
    pc, end = 0, len(steps)
    while pc < end:
        pc = steps[pc](regs)
        if pc < 0:
            pc = ~pc


def _thread_until_pauses(steps: list[Step], regs: list[Any]) -> Iterator[int]:
    """One thread of a work group as a generator that yields the step it pauses at (a barrier or a WMMA, which wait
    for other threads) and goes on past it when resumed."""
    pc, end = 0, len(steps)
    while pc < end:
        nxt = steps[pc](regs)
        if nxt < 0:
            yield pc
            nxt = ~nxt
        pc = nxt


def _lane_ranges(lanes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for lane in lanes:
        if runs and runs[-1][1] == lane - 1:
            runs[-1][1] = lane
        else:
            runs.append([lane, lane])
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


# ---------------------------------------------------------------------------------------------------------------------
# programs


class PythonProgram:
    """A kernel ready to run: the runtime of the PYTHON device, `runtime(name, lib, spec)`. The device also passes its
    `caps` (the launch limits every launch is checked against, as a GPU checks them) and its `emulation` (a kernel
    generated for another target is refused when loaded); a program made without them (tests of hand-built UOps)
    checks neither."""

    def __init__(self, name: str, lib: bytes, spec: ProgramSpec | None = None, caps: Capabilities | None = None,
                 emulation: Emulation | None = None):  # fmt: skip
        src = lib.decode()
        self.name, self.uops = name, parse_kernel(src)
        self.caps, self.emulation = caps, emulation
        self.device_label = f"PYTHON emulating {emulation.label}" if emulation is not None else "PYTHON"
        made_for = kernel_target(src)
        if caps is not None and made_for != (emulation.label if emulation is not None else None):
            generated = f"PYTHON emulating {made_for}" if made_for else "PYTHON"
            raise DeviceError(f"PYTHON kernel {name} was generated for {generated} and cannot run on "
                              f"{self.device_label}: a kernel made for one target never runs as another's")  # fmt: skip
        self.core_split = spec.core_split if spec is not None else 0  # the kernel's last two variables: [lo, hi)
        low = _Lowering(name, self.uops)
        self.template: list[Any] = [None] * len(self.uops)  # registers every thread starts from
        self.globals: list[tuple[int, int, str]] = []  # (register, parameter index, memoryview format)
        self.vars: list[int] = []
        self.locals: list[tuple[int, str, int]] = []  # (register, format, element count)
        self.local_bytes = 0  # local memory a work group asks for
        self.specials: list[tuple[int, bool, int]] = []  # (register, is a local id, dimension)
        self.launch: dict[bool, list[int]] = {False: [1, 1, 1], True: [1, 1, 1]}  # from SPECIAL sizes
        self.steps: list[Step] = []
        for i, uop in enumerate(self.uops):
            if uop.op in _SETUP:
                self._setup(i, uop)
            elif (builder := STEP_BUILDERS.get(uop.op)) is not None:
                self.steps.append(builder(low, i, uop))
            else:
                raise CompileError("PYTHON", src, f"{low.where(i)}: the PYTHON device cannot run {uop.op}")
        # the steps a thread pauses at for its warp: WMMA step -> (register, instruction, accumulator dtype)
        self.warp_steps = {low.step_at[i]: (i, known_tensor_core(low.where(i), u), u.arg.dtype_out)
                           for i, u in enumerate(self.uops) if u.op is UOps.WMMA}  # fmt: skip
        self.lockstep = bool(self.warp_steps) or any(u.op is UOps.BARRIER for u in self.uops)

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
            self.local_bytes += uop.arg[1] * uop.dtype.base().itemsize
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
        if self.core_split:  # the whole range in one call: [0, extent) of the outermost loop
            vals = (*vals, 0, self.core_split)
        if len(vals) < len(self.vars):
            raise ValueError(f"PYTHON kernel {self.name} takes {len(self.vars)} variable values, got {vals}")
        groups = _dims(global_size, self.launch[False])
        threads = _dims(local_size, self.launch[True])
        if self.caps is not None:
            self._check_launch(groups, threads)
        regs = list(self.template)
        for reg, param, fmt in self.globals:
            regs[reg] = memoryview(bufs[param]).cast("B").cast(fmt)  # type: ignore[call-overload]
        for reg, value in zip(self.vars, vals):
            regs[reg] = value
        for group in itertools.product(*(range(n) for n in reversed(groups))):
            self._run_group(regs, group[::-1], threads)
        return time.perf_counter() - start if wait else None

    def _check_launch(self, groups: list[int], threads: list[int]) -> None:
        """Refuse what the device's GPU would refuse to launch: too many work groups or threads, too much local
        memory, as its Capabilities declare them (`LaunchLimits`, the check the GPU runtimes make). A kernel core
        generated for these capabilities never asks for it (a code generation bug if it does)."""
        caps = self.caps
        assert caps is not None
        unlimited = (1 << 62,) * 3
        limits = LaunchLimits("work group", caps.local_max or unlimited, "Capabilities.local_max[{dim}]",
                              caps.local_size_max or unlimited[0], "Capabilities.local_size_max", caps.shared_max,
                              "Capabilities.shared_max" if caps.has_local else "", caps.global_max or (),
                              "Capabilities.global_max[{dim}]")  # fmt: skip
        limits.check(self.device_label, self.name, tuple(groups), tuple(threads), self.local_bytes)

    def _run_group(self, regs: list[Any], group: tuple[int, ...], threads: list[int]) -> None:
        for reg, fmt, count in self.locals:  # local memory is fresh for each work group
            regs[reg] = memoryview(bytearray(count * struct.calcsize(fmt))).cast(fmt)  # type: ignore[call-overload]
        thread_regs = []  # in linear local id order: lidx0 fastest
        for lid in itertools.product(*(range(n) for n in reversed(threads))):
            lid = lid[::-1]
            mine = list(regs) if self.specials else regs
            for reg, is_local, dim in self.specials:
                mine[reg] = lid[dim] if is_local else group[dim]
            if not self.lockstep:
                _run_thread(self.steps, mine)
            else:
                thread_regs.append(mine)
        if thread_regs:
            self._run_lockstep(thread_regs)

    def _run_lockstep(self, thread_regs: list[list[Any]]) -> None:
        """The threads of one work group, each run until it pauses (at a barrier or a WMMA) or ends. A warp whose
        lanes all wait at one WMMA gets its results and goes on; when no thread can go on, each waits at a barrier or
        has ended, and the barrier opens."""
        threads = [_thread_until_pauses(self.steps, regs) for regs in thread_regs]
        paused: list[int | None] = [None] * len(threads)  # the step each thread waits at; None once it has ended
        ready: list[int] = list(range(len(threads)))
        while ready:
            for t in ready:
                paused[t] = next(threads[t], None)
            ready = self._run_warps(paused, thread_regs) or [t for t, at in enumerate(paused) if at is not None]

    def _run_warps(self, paused: list[int | None], thread_regs: list[list[Any]]) -> list[int]:
        """Run the WMMA each waiting warp's lanes are all at (lane = linear local id % the warp size); returns the
        lanes that may go on. DeviceError when only some lanes of a warp reach a WMMA, as a GPU's result would be
        undefined."""
        released: list[int] = []
        for t, at in enumerate(paused):
            if at is None or (step := self.warp_steps.get(at)) is None:
                continue
            reg, known, dtype_out = step
            first = t - t % known.threads
            lanes = list(range(first, first + known.threads))
            where = f"{self.device_label} kernel {self.name}: the WMMA of UOp {reg} ({self.uops[reg].arg.name})"
            if lanes[-1] >= len(paused):
                raise DeviceError(f"{where} needs all {known.threads} lanes of a warp, but the work group has "
                                  f"{len(paused)} threads, so the last warp has {len(paused) - first}; a work group "
                                  f"using it must be a multiple of {known.threads} threads")  # fmt: skip
            if any(paused[lane] != at for lane in lanes):
                states: dict[str, list[int]] = {}
                for lane in lanes:
                    states.setdefault("reached it" if paused[lane] == at else self._doing(paused[lane]), []).append(
                        lane
                    )
                doing = ", ".join(f"lanes {_lane_ranges(group)} {state}" for state, group in states.items())
                raise DeviceError(f"{where}: in warp {first // known.threads}, {doing}; every lane of a warp executes "
                                  f"a WMMA together, never under an IF that divides the warp")  # fmt: skip
            results = multiply_accumulate(known, truncator(dtype_out), [thread_regs[lane][reg] for lane in lanes])
            for lane, fragment in zip(lanes, results):
                thread_regs[lane][reg] = fragment
                paused[lane] = -1  # running again: not at this WMMA any more
            released += lanes
        return released

    def _doing(self, at: int | None) -> str:
        if at is None:
            return "ended"
        if (step := self.warp_steps.get(at)) is not None:
            return f"are at the WMMA of UOp {step[0]}"
        return "are at a barrier"


def _dims(given: Any, default: list[int]) -> list[int]:
    dims = list(given) if given is not None else list(default)
    return dims + [1] * (3 - len(dims))

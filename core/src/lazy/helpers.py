"""Small shared helpers and every `LAZY_` setting: the only module that reads `os.environ`.

Settings are declared once here; code reads `DEBUG.value`, tests change them with `with Context(DEBUG=2):`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    import pathlib

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------------------------------
# settings


class Setting:
    """One `LAZY_<NAME>` environment setting: read once at import, overridable in code with `Context`."""

    registry: dict[str, Setting] = {}

    def __init__(self, name: str, default: Any, doc: str, minimum: int | None = None):
        self.name, self.default, self.doc, self.minimum = name, default, doc, minimum
        raw = os.environ.get(f"LAZY_{name}")
        self.value: Any = default if raw is None else self.parse(raw)
        Setting.registry[name] = self

    def parse(self, raw: str) -> Any:
        if isinstance(self.default, bool):
            return raw.strip().lower() not in ("", "0", "false", "no")
        if isinstance(self.default, int):
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(
                    f"LAZY_{self.name}={raw!r} is not an integer; set it to a number, e.g. LAZY_{self.name}=1"
                ) from None
            return self.check(value)
        return raw

    def check(self, value: Any) -> Any:
        """`value` if this setting may take it (an integer setting with a minimum: not below it), else ValueError."""
        if self.minimum is not None and isinstance(value, int) and value < self.minimum:
            least = self.minimum
            raise ValueError(f"LAZY_{self.name}={value} is below {least}: set it to {least} or more ({self.doc})")
        return value

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __ge__(self, other: int) -> bool:
        return int(self.value) >= other

    def __gt__(self, other: int) -> bool:
        return int(self.value) > other

    def __le__(self, other: int) -> bool:
        return int(self.value) <= other

    def __lt__(self, other: int) -> bool:
        return int(self.value) < other

    def __repr__(self) -> str:
        return f"LAZY_{self.name}={self.value!r}"


DEBUG = Setting(
    "DEBUG", 0, "0-6: 1 device choice and plugin problems, 2 kernel timings, 3 schedule, 4 source, 5 UOps, 6 all"
)
BEAM = Setting("BEAM", 0, "beam width for kernel optimisation search (0: heuristics only)", minimum=0)
BEAM_BUDGET = Setting("BEAM_BUDGET", 60, "seconds BEAM may spend searching one kernel (0: no limit)", minimum=0)
NOOPT = Setting("NOOPT", False, "1: switch off kernel optimisations (upcast, unroll, locals)")
JIT = Setting("JIT", 1, "0: `jit` functions run eagerly; 1: capture and replay kernels")
DEVICE = Setting("DEVICE", "", "default device, e.g. CPU, LLVM, PYTHON, CL (default: highest-priority usable plugin)")
EMULATE = Setting(
    "EMULATE", "", "the PYTHON device emulates this device's code generation target, e.g. CUDA or METAL (no GPU needed)"
)
PLUGINS = Setting("PLUGINS", "", "comma-separated allow-list of plugin names (entry-point names); empty: all")
CACHE_DIR = Setting("CACHE_DIR", "", "directory for the compile cache (default: ~/.cache/lazy); 'off' disables it")
THREADS = Setting("THREADS", 0, "CPU threads for one kernel (0: one per core; capped at 4 per core)", minimum=0)
CC = Setting("CC", "", "C compiler of the CPU device: a name on PATH or a path (default: gcc, else clang, else cc)")
TIERED = Setting(
    "TIERED",
    1,
    "1: a kernel with a cheaper build (a compiler's quick tier) builds with it first, in full once it runs on (or a "
    "jit captures it); 0: every kernel builds in full at once",
)
TRAINING = Setting(
    "TRAINING", False, "1: training mode (dropout drops, batchnorm uses batch statistics), like Tensor.train()"
)
PROFILE = Setting(
    "PROFILE",
    "",
    "path of a Chrome trace event file (Perfetto, chrome://tracing) written at exit: kernels, copies, compiles",
)
VIZ = Setting(
    "VIZ",
    0,
    "1: record each realize (graph, fusion, kernels, times); at exit write the trace and serve the viewer on 127.0.0.1 "
    "until Ctrl-C; 2: only write the trace (python -m lazy viz FILE shows it)",
)
PROGRESS = Setting("PROGRESS", -1, "progress bars for long work: 1 always, 0 never, -1 on an interactive terminal")
CHECK_INDEX = Setting(
    "CHECK_INDEX", 0, "1: IndexError for out-of-range index tensors (reads them on the host, a sync); 0: they pick 0"
)


class ShapeError(RuntimeError, ValueError, AssertionError):
    """Shapes that do not fit an op (broadcasting, reshape, matmul, einsum, permute, ...). Each of the types code
    written for other libraries catches: a RuntimeError (PyTorch, current tinygrad), a ValueError (what Python code
    expects of a bad argument) and an AssertionError (older tinygrad checked shapes with `assert`)."""


class ArgumentError(ValueError, TypeError, RuntimeError, AssertionError):
    """An argument an op does not accept (an unknown mode or reduction, a probability outside [0, 1], a float index).
    Each of the types code written for other libraries catches for it: a ValueError (what Python code expects), and
    the RuntimeError, AssertionError or TypeError that tinygrad 0.14 raises, depending on the op."""


# tinygrad's names for code and tests that read the environment directly (lazy's own knobs are the Settings above)
CI = os.environ.get("CI", "") not in ("", "0")
OSX = os.uname().sysname == "Darwin" if hasattr(os, "uname") else False
IMAGE = 0  # lazy has no image (texture) dtype path


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """The environment variable `key` converted to the type of `default` (tinygrad's helper)."""
    raw = os.environ.get(key)
    if raw is None:
        return default
    return type(default)(raw) if not isinstance(default, bool) else raw not in ("", "0", "false", "False")


class Context(contextlib.ContextDecorator):
    """Temporarily change settings: `with Context(DEBUG=2, NOOPT=1): ...`."""

    def __init__(self, **kwargs: Any):
        unknown = [k for k in kwargs if k not in Setting.registry]
        if unknown:
            raise KeyError(f"unknown setting(s) {unknown}; known: {sorted(Setting.registry)}")
        for k, v in kwargs.items():
            Setting.registry[k].check(v)
        self.kwargs = kwargs
        self.saved: list[dict[str, Any]] = []

    def __enter__(self) -> Context:
        self.saved.append({k: Setting.registry[k].value for k in self.kwargs})
        for k, v in self.kwargs.items():
            Setting.registry[k].value = v
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.pop().items():
            Setting.registry[k].value = v


def cache_dir() -> pathlib.Path | None:
    """The compile cache directory, or None when `LAZY_CACHE_DIR=off`."""
    import pathlib  # on first use: pathlib pulls in urllib and ipaddress, which `import lazy` need not load

    if CACHE_DIR.value == "off":
        return None
    if CACHE_DIR.value:
        return pathlib.Path(CACHE_DIR.value)
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "lazy"


# ---------------------------------------------------------------------------------------------------------------------
# counters


class GlobalCounters:
    """Process-wide counts of what ran: kernels, operations, memory moved, device time."""

    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    kernel_count: int = 0
    mem_used: int = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0
        GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0.0, 0


# ---------------------------------------------------------------------------------------------------------------------
# small functions


def prod(xs: Iterable[Any], start: Any = 1) -> Any:
    return functools.reduce(operator.mul, xs, start)


class cached_property(Generic[T]):  # noqa: N801 (named as the functools decorator it stands in for)
    """`functools.cached_property` without its lock (Python 3.11's takes an RLock on every first computation; the
    symbolic nodes' and shape trackers' keys are computed tens of thousands of times in a cold start's code
    generation): the value is computed on first access and kept in the instance's `__dict__`, where later accesses
    find it without calling this descriptor. Two threads computing it at once both compute the same value."""

    def __init__(self, fn: Callable[[Any], T]):
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached_property[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T | cached_property[T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


def dedup(xs: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(xs))


def all_int(xs: Iterable[Any]) -> bool:
    for x in xs:  # (a loop, not all() of a generator: every shape is checked, on the eager path too)
        if not isinstance(x, int):
            return False
    return True


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    return [x for xs in xss for x in xs]


def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


def check_int(op: str, name: str, value: Any) -> int:
    """`value` when it is an int (numpy's too, not bool), else an ArgumentError naming `op`'s argument `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        if type(value).__name__ in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
            return int(value)
        raise ArgumentError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r:.40}")
    return value


def argfix(*x: Any) -> tuple[Any, ...]:
    """Accept both `f(1, 2)` and `f((1, 2))`."""
    if x and x[0].__class__ in (tuple, list):
        if len(x) != 1:
            raise ValueError(f"bad arguments {x}: pass either a sequence or separate values, not both")
        return tuple(x[0])
    return x


def ceildiv(num: int, amt: int) -> int:
    return -(-num // amt)


def partition(xs: Iterable[T], pred: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    yes: list[T] = []
    no: list[T] = []
    for x in xs:
        (yes if pred(x) else no).append(x)
    return yes, no


def colored(text: str, color: str | None) -> str:
    codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
    return f"\x1b[{codes[color]}m{text}\x1b[0m" if color else text


def to_function_name(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def pairwise(xs: Iterable[T]) -> Iterator[tuple[T, T]]:
    return itertools.pairwise(xs)


class Timing(contextlib.ContextDecorator):
    """`with Timing("load: "): ...` prints the elapsed time when DEBUG>=1 or `always`."""

    def __init__(self, prefix: str = "", always: bool = False):
        self.prefix, self.always = prefix, always

    def __enter__(self) -> Timing:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start
        if self.always or DEBUG >= 1:
            print(f"{self.prefix}{self.elapsed * 1e3:.2f} ms")


def broadcast_shape(op: str, *shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """The shape `shapes` broadcast to (numpy rules); ValueError naming `op` and every shape when they clash."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out: list[Any] = []
    for dims in zip(*padded):
        non_one = {d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(non_one) > 1:
            raise ShapeError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)

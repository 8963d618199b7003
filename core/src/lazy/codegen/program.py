"""From a kernel AST to a `ProgramSpec`: choose optimisations (heuristics, or BEAM search when `LAZY_BEAM`),
lower to UOps and render with the device's renderer; `compiled_program` adds the binary and keeps the lowered program
on disk by the kernel's structure, so a later process skips code generation."""

from __future__ import annotations

import functools
import sys
import time
from typing import TYPE_CHECKING, Any

from lazy.codegen.heuristics import cpu_tiles, reuse_axes, tile_optimizations
from lazy.codegen.kernel import Axis, Kernel, Opt, OptOps
from lazy.codegen.lowerer import estimate_ops, lower_kernel
from lazy.codegen.opt_gpu import gpu_optimizations
from lazy.codegen.opt_reduce import (
    gathered_output_lanes,
    narrow_lanes,
    paired_streams,
    reduce_optimizations,
    unroll_reduce,
)
from lazy.codegen.uops import UOps, pretty
from lazy.device import Compiled, Compiler, ProgramSpec
from lazy.diskcache import compile_stats, load_cached, store_cached
from lazy.helpers import DEBUG, NOOPT, VIZ, prod, to_function_name
from lazy.ops import LazyOp
from lazy.record import fields as record_fields
from lazy.record import is_record, replace
from lazy.symbolic import Variable

if TYPE_CHECKING:
    from lazy.renderer import Capabilities, Renderer


def hand_coded_optimizations(k: Kernel) -> Kernel:
    """What a kernel gets without BEAM: work-group devices their own path; elsewhere matmul-like kernels (an input
    broadcast along an output axis) register and cache tiles, other reductions vector lanes and unrolling."""
    if k.caps.has_local:
        return gpu_optimizations(k)
    if not k.reduceops:
        return elementwise_lanes(k)
    if not reuse_axes(k):
        return paired_streams(reduce_optimizations(k))
    tiled = cpu_tiles(k) or tile_optimizations(k)
    if lanes := narrow_lanes(tiled):  # a heavy body broadcast along a short axis (a softmax's two sums): gathered
        if (gathered := gathered_output_lanes(tiled, lanes)) is not None:  # lanes on the tile, or instead of it
            return gathered  # where the tile leaves them no room in the code budget (`Kernel.body_budget`)
        if (gathered := gathered_output_lanes(k, lanes)) is not None:
            return unroll_reduce(gathered)
    return tiled


def elementwise_lanes(k: Kernel) -> Kernel:
    """An elementwise kernel's innermost output axis as vector lanes of the widest width the kernel allows: explicit
    vector code where the compiler would not vectorize the loop itself (a polynomial exp2's selects and bit casts)."""
    globals_ = k.axes(Axis.GLOBAL)
    if not globals_:
        return k

    def contiguous(axis: int) -> int:  # the buffers (the output too) that lanes along `axis` move as whole vectors
        return sum(1 for b in k.membufs if k.st_of(b).real_strides()[axis] == 1)

    # a transposing kernel (NCHW to NHWC) reads more buffers contiguously along an axis the output is strided in:
    # lanes there load vectors and store lane by lane, instead of gathering every input a value at a time
    best = max(globals_, key=lambda a: (contiguous(a), a == globals_[-1]))
    for axis in dict.fromkeys((best, globals_[-1])):
        size = k.full_shape[axis]
        for width in sorted(k.caps.vector_widths, reverse=True):
            trial = k.applied(Opt(OptOps.UPCAST, axis, width)) if isinstance(size, int) and size % width == 0 else None
            if trial is not None and trial.vector_axis() is not None:
                return trial
    return k


def build_kernel(ast: LazyOp, renderer: Renderer, opts: list[Opt] | None = None) -> Kernel:
    k = Kernel(ast, renderer.caps)
    if opts is not None:
        for opt in opts:
            k.apply_opt(opt)
        return k
    if NOOPT:
        return k
    return hand_coded_optimizations(k)


def kernel_name(k: Kernel) -> str:
    prefix = "r" if k.reduceops else "E"
    return to_function_name(f"{prefix}_" + "_".join(str(s) if isinstance(s, int) else "v" for s in k.full_shape))


def get_program(ast: LazyOp, renderer: Renderer, opts: list[Opt] | None = None, record: bool = False) -> ProgramSpec:
    """Lower and render one kernel AST for `renderer`'s device. `record`: hand the kernel (optimisations, UOps,
    source) to the LAZY_VIZ trace, as the program that runs (BEAM's candidates are not recorded)."""
    k = build_kernel(ast, renderer, opts)
    spec = kernel_program(k, renderer)
    if record:
        from lazy.viz.capture import record_program

        record_program(ast, k, spec, opts_given=opts is not None)
    return spec


def kernel_program(k: Kernel, renderer: Renderer) -> ProgramSpec:
    """Lower and render a kernel whose optimisations are applied."""
    ast = k.ast
    uops, lowerer = lower_kernel(k)
    name = kernel_name(k)
    if DEBUG >= 5:
        print(pretty(uops))
    src = renderer.render(name, uops)
    if DEBUG >= 4:
        print(src)
    membufs = k.membufs
    mem = sum(prod(st.shape) * b.dtype.itemsize for b, st in zip(k.bufs, k.sts) if b in membufs)
    vars_: list[Variable] = lowerer.symbolic_vars
    widest = max((u.dtype.count for u in uops if u.op is UOps.ALU and u.dtype is not None), default=1)
    return ProgramSpec(name=name, src=src, device=renderer.device, global_size=lowerer.global_size,
                       local_size=lowerer.local_size, vars=vars_, outs=[0],
                       ins=[b.idx for b in membufs if b.idx != 0], op_estimate=estimate_ops(ast, k.full_shape),
                       mem_estimate=mem, core_split=lowerer.core_split, uops=uops, vector_width=widest)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# the on-disk cache of lowered programs

PROGRAM_FORMAT = 1  # bump when ProgramSpec's fields change meaning


def stable_text(value: Any) -> str:
    """A repr that is the same in every process: set elements sorted (their order follows string hashes)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(stable_text(v) for v in value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(stable_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stable_text(k)}: {stable_text(v)}" for k, v in value.items()) + "}"
    if is_record(value) and not isinstance(value, type):
        fields = (f"{f.name}={stable_text(getattr(value, f.name))}" for f in record_fields(value))
        return f"{type(value).__name__}({', '.join(fields)})"
    return repr(value)


@functools.cache
def source_fingerprint(module: str) -> str:
    """Names, sizes and modification times of the Python files of `module`'s top-level package (or of the module
    alone): it changes with the code that generates programs, an upgrade or an edit in a checkout, so no entry
    written by other code is used. Stat calls only (about a millisecond for lazy's sources)."""
    top = sys.modules.get(module.partition(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return "unknown"
    from pathlib import Path  # on first use: pathlib is costly to import

    root = Path(file).parent
    files = sorted(root.rglob("*.py")) if hasattr(top, "__path__") else [Path(file)]
    stats = [(str(f.relative_to(root)), f.stat()) for f in files]
    import hashlib

    return hashlib.sha256(repr([(name, st.st_size, st.st_mtime_ns) for name, st in stats]).encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _caps_text(caps: Capabilities) -> str:
    return stable_text(caps)  # most of a key's cost, and the same for every kernel of a device


def program_key(ast: LazyOp, renderer: Renderer, compiler_key: str | None, opts: list[Opt] | None) -> bytes:
    """What a lowered program depends on: the kernel's structure, the renderer (class, its render function, device,
    capabilities), the compiler, the optimisation settings (BEAM's choice arrives as `opts`) and the code of lazy and
    of the renderer's plugin (which stands for their versions, and also sees an edit in a checkout)."""
    render = renderer.render  # a replaced one (a test's, a user's patch) renders other code: another key
    identity = [
        PROGRAM_FORMAT,
        ast.digest.hex(),
        f"{type(renderer).__module__}.{type(renderer).__qualname__}",
        f"{getattr(render, '__module__', '')}.{getattr(render, '__qualname__', type(render).__qualname__)}",
        renderer.device,
        _caps_text(renderer.caps),
        compiler_key,
        stable_text(opts),
        bool(NOOPT),
        source_fingerprint(__name__),
        source_fingerprint(type(renderer).__module__),
    ]
    import hashlib

    return hashlib.sha256(repr(identity).encode()).digest()


def compiled_program(ast: LazyOp, dev: Compiled, opts: list[Opt] | None = None,
                     tiered: bool = False) -> tuple[ProgramSpec, bytes, Compiler | None]:  # fmt: skip
    """The program for `ast` on `dev`, its binary and (`tiered`: built with the compiler's quick tier,
    `Compiler.tiers`) the compiler of its full build, else None: `get_program` and `compile_cached`, with the
    lowered program (without its UOps, which only code generation reads) cached on disk, so a hit skips code
    generation. An entry is written once its source compiled; one that fails its checks or does not load is generated
    again and replaced, with a note at LAZY_DEBUG>=1. At LAZY_DEBUG>=4, and while LAZY_VIZ records, code generation
    always runs, so the source (and UOps, optimisations) are there to print or record."""
    spec, new_key = program_source(ast, dev, opts)
    compiler, upgrade = dev.compiler.tiers(spec) if tiered else (dev.compiler.for_program(spec), None)
    lib = compiler.compile_cached(spec.src)
    if new_key is not None:
        remember_program(new_key, spec)
    return spec, lib, upgrade


def program_source(ast: LazyOp, dev: Compiled, opts: list[Opt] | None = None) -> tuple[ProgramSpec, bytes | None]:
    """The program for `ast` on `dev` (see `compiled_program`), from the on-disk program cache or generated, and the
    key to `remember_program` it under once its source compiled (None: it came from the cache)."""
    key = program_key(ast, dev.renderer, dev.compiler.cachekey, opts)
    if DEBUG < 4 and not VIZ and (spec := _load_program(key)) is not None:
        return spec, None
    start = time.perf_counter()
    spec = get_program(ast, dev.renderer, opts, record=bool(VIZ))  # recorded before compiling: a failure shows too
    compile_stats.add("codegen", time.perf_counter() - start)
    return spec, key


def remember_program(key: bytes, spec: ProgramSpec) -> None:
    """Keep `spec` (without its UOps) in the on-disk program cache under `key` (from `program_source`)."""
    import pickle  # here, not at the top: `import lazy` stays light

    store_cached("program", key, pickle.dumps(replace(spec, uops=None), pickle.HIGHEST_PROTOCOL))


def _load_program(key: bytes) -> ProgramSpec | None:
    import pickle

    if (payload := load_cached("program", key)) is None:
        return None
    try:
        spec = pickle.loads(payload)
    except Exception as e:  # checksummed, so only code that changed without the fingerprint noticing gets here
        compile_stats.problem(f"program cache: the entry {key.hex()} does not load ({e!r}); replacing it")
        return None
    if not isinstance(spec, ProgramSpec):
        compile_stats.problem(f"program cache: the entry {key.hex()} holds a {type(spec).__name__}; replacing it")
        return None
    return spec

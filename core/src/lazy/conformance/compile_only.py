"""`python -m lazy.conformance --device NAME --compile-only`: every kernel of the suite rendered and compiled for each
of NAME's code generation targets (`DeviceSpec.codegen_targets`), without probing or opening NAME, so it runs with no
GPU or driver. The kernels: the fixed UOp kernels (`lazy.conformance.kernels`) and those of the Tensor layers,
recorded by running those layers on the PYTHON reference device and lowered for each target by core's code
generator, as the device itself would. One report row per target ("CUDA sm_80 compile-only")."""

from __future__ import annotations

import json
import os
import pathlib
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from lazy.conformance import fixtures
from lazy.conformance.kernels import suite_kernels
from lazy.conformance.runner import (
    SUITE_DIR,
    ConformancePlugin,
    ConformanceResult,
    TestRecord,
    device_versions,
    forget_suite_modules,
    layer_of,
)
from lazy.device import CompileError, DeviceError, ProgramSpec
from lazy.helpers import Context
from lazy.ops import LazyOp, Ops

if TYPE_CHECKING:
    from lazy.device import Compiler
    from lazy.hookspecs import CodegenTarget
    from lazy.renderer import Capabilities

REFERENCE = "PYTHON"  # where the Tensor layers run while their kernels are recorded
RECORDED_LAYERS = ("tensor", "ops", "end_to_end")  # the layers whose kernels come from Tensor programs
FIXED_SOURCE = {"kernels": "test_20_kernels.py", "hcq": "test_30_hcq.py"}  # where each fixed kernel's layer runs it


# ---------------------------------------------------------------------------------------------------------------------
# the device's targets


def codegen_targets(device: str) -> list[CodegenTarget]:
    """`device`'s code generation targets, from its DeviceSpec alone (no probe, no open). DeviceError, saying what to
    do, for an unknown device, one without `codegen_targets`, and targets its plugin cannot make (its compiler's
    package missing, say)."""
    from lazy.hookspecs import CodegenTarget
    from lazy.plugins import Device, PluginFailure, call_plugin

    base = Device.canonicalize(device).partition(":")[0]
    specs = Device.specs()
    checkable = sorted(name for name, spec in specs.items() if spec.codegen_targets is not None)
    hint = f"devices with code generation targets: {', '.join(checkable) or 'none installed'}"
    if (spec := specs.get(base)) is None:
        raise DeviceError(f"--compile-only: unknown device {device!r}; {hint}")
    if spec.codegen_targets is None:
        raise DeviceError(f"--compile-only: {base} declares no code generation targets (DeviceSpec.codegen_targets, "
                          f"plugin API 2.1), so it can only be checked by running the suite on it: python -m "
                          f"lazy.conformance --device {base}; {hint}")  # fmt: skip
    targets = call_plugin(spec.codegen_targets)
    if isinstance(targets, PluginFailure):
        missing = targets.exc.name if isinstance(targets.exc, ImportError) else None
        fix = (f"; a package it needs is missing (Python module {missing!r}): install the one its plugin's README "
               "names for its compiler") if missing else ""  # fmt: skip
        raise DeviceError(f"--compile-only: {base}'s codegen_targets() {targets}{fix}") from targets.exc
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, CodegenTarget) for t in targets):
        raise DeviceError(f"--compile-only: {base}'s codegen_targets() returned {targets!r:.200}, not a non-empty "
                          "list of CodegenTarget; this is a bug in its plugin")  # fmt: skip
    return list(targets)


def check_compiler_runs(device: str, target: CodegenTarget) -> None:
    """Compile the suite's first kernel for `target`: a compiler that cannot run here at all (its package or library
    missing, an architecture it does not know) is one DeviceError, with its reason, not a failure per kernel."""
    if target.compiler is None:
        return
    kernel = suite_kernels(target.renderer.caps)[0]
    try:
        target.compiler.compile_cached(kernel.render(target.renderer))
    except CompileError:  # the kernel's own failure: reported with the others
        pass
    except Exception as e:
        raise DeviceError(f"--compile-only: {row_label(device, target)}: the compiler cannot run here: {e}") from e


def row_label(device: str, target: CodegenTarget) -> str:
    """The report row of one target: "CUDA sm_80 compile-only", "METAL render-only" (no compiler here)."""
    name = device if target.name == device else f"{device} {target.name}"
    return f"{name} {'compile-only' if target.compiler is not None else 'render-only'}"


# ---------------------------------------------------------------------------------------------------------------------
# the Tensor layers' kernels


@dataclass(frozen=True)
class RecordedKernel:
    """A kernel AST the Tensor layers scheduled, with the test that first ran it."""

    test: str  # pytest node id relative to the suite
    ast: LazyOp


class _KernelRecorder:
    """A pytest plugin: after each test, the kernel ASTs the engine compiled since (the method cache's keys; read
    also just before a device closes, which empties them) are that test's."""

    def __init__(self) -> None:
        self.kernels: dict[LazyOp, RecordedKernel] = {}
        self.current = ""
        self.failed: list[str] = []

    def collect(self, closing_device: str = "") -> None:  # (also a close callback: called with the device's name)
        from lazy.engine.runners import method_cache

        for key in list(method_cache):
            if key[1] not in self.kernels:
                self.kernels[key[1]] = RecordedKernel(self.current, key[1])

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.current = item.nodeid
        try:
            return (yield)
        finally:
            self.collect()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def record_tensor_kernels(suite_dir: pathlib.Path = SUITE_DIR, keyword: str | None = None
                          ) -> tuple[list[RecordedKernel], list[str]]:  # fmt: skip
    """Run the Tensor layers of the suite in `suite_dir` on PYTHON (quietly, in this process) and return the kernel
    ASTs they scheduled, each once, in the order first run, and the ids of tests that failed there (their kernels up
    to the failure are in). The reference device's kernels compiled before are forgotten first, so each kernel is
    found again under the test that runs it (a cached schedule looks its kernels up in the method cache)."""
    from lazy.device import close_callbacks
    from lazy.engine.runners import method_cache

    files = sorted(str(p) for p in suite_dir.glob("test_*.py") if layer_of(p.name) in RECORDED_LAYERS)
    if not files:
        return [], []
    for key in [key for key, runner in method_cache.items() if runner.dev.device == REFERENCE]:
        del method_cache[key]
    forget_suite_modules(suite_dir)
    recorder = _KernelRecorder()
    close_callbacks.insert(0, recorder.collect)  # before the engine forgets a closing device's kernels
    args = [*files, "--rootdir", str(suite_dir), "-c", os.devnull, "-p", "no:cacheprovider", "-p", "no:terminal",
            "--import-mode=importlib"]  # fmt: skip
    if keyword:
        args += ["-k", keyword]
    try:
        with Context(EMULATE=""):  # the plain interpreter: the kernels' ASTs do not depend on it, and it is quicker
            pytest.main(args, plugins=[ConformancePlugin(REFERENCE, []), fixtures, recorder])
    finally:
        close_callbacks.remove(recorder.collect)
    return list(recorder.kernels.values()), recorder.failed


# ---------------------------------------------------------------------------------------------------------------------
# checking one target


def unsupported_dtypes(ast: LazyOp, caps: Capabilities) -> list[str]:
    """The dtypes `ast` computes in that `caps` does not declare (the device would refuse the kernel)."""
    bad = {n.dtype for n in ast.toposort() if n.op is not Ops.SINK and not caps.supports(n.dtype)}
    return sorted(d.name for d in bad)


def _codegen_failure(e: Exception) -> str:
    frames = traceback.format_exception(type(e), e, e.__traceback__)
    return "code generation failed:\n" + "".join(frames[-6:])


COMPILER_SAYS = "--- the compiler says ---"


def headline(message: str) -> str:
    """The line of a failure's message to print beside the kernel's name: the compiler's first error line."""
    text = message.partition(COMPILER_SAYS)[2] or message
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")


def summary_line(result: ConformanceResult) -> str:
    c, verb = result.counts(), "rendered" if result.device.endswith("render-only") else "compiled"
    return f"{result.device}: {c['passed']} {verb}, {c['failed']} failed, {c['skipped']} skipped"


def _compile(compiler: Compiler, name: str, src: str) -> str | None:
    """None when `src` compiles; else the failure: the numbered source, then the compiler's message (last, so a
    report that shows the end of a long message shows the compiler's words)."""
    try:
        compiler.compile_cached(src)
        return None
    except CompileError as e:
        numbered = "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(src.splitlines()))
        return f"--- source of {name} ---\n{numbered}\n{COMPILER_SAYS}\n{e.message.strip()}"
    except Exception as e:  # a compiler that fails otherwise (a crash in its library) fails the kernel too
        return f"{name}: the compiler raised {type(e).__name__}: {e}"


class _TargetCheck:
    """The kernels of one target, rendered on the calling thread (code generation is Python) and compiled on a
    thread pool (compilers release the GIL or run as processes); outcomes in the order the kernels were given."""

    def __init__(self, target: CodegenTarget, pool: ThreadPoolExecutor):
        self.target, self.pool = target, pool
        self.records: list[TestRecord] = []
        self.pending: list[tuple[TestRecord, Future[str | None]]] = []
        self.names: dict[str, int] = {}

    def test_id(self, source: str, name: str) -> str:
        """`source::name`, numbered from the second kernel of that name a test runs (`r_3_4#2`)."""
        key = f"{source}::{name}"
        self.names[key] = self.names.get(key, 0) + 1
        return key if self.names[key] == 1 else f"{key}#{self.names[key]}"

    def add(self, test_id: str, layer: str, name: str, src: str, spec: ProgramSpec | None = None) -> None:
        """A rendered kernel: compiled when the target has a compiler (the one it would use for `spec`)."""
        record = TestRecord(test_id, layer)
        self.records.append(record)
        if self.target.compiler is not None:
            compiler = self.target.compiler
            compiler = compiler.for_work(float("inf")) if spec is None else compiler.for_program(spec)
            self.pending.append((record, self.pool.submit(_compile, compiler, name, src)))

    def other(self, test_id: str, layer: str, outcome: str, message: str) -> None:
        self.records.append(TestRecord(test_id, layer, outcome, message))

    def results(self) -> list[TestRecord]:
        for record, future in self.pending:
            if (failure := future.result()) is not None:
                record.outcome, record.message = "failed", failure
        return self.records


def check_target(device: str, target: CodegenTarget, recorded: list[RecordedKernel], keyword: str | None,
                 pool: ThreadPoolExecutor) -> _TargetCheck:  # fmt: skip
    """Render every kernel of the suite for `target` (fixed kernels as they are, recorded ASTs lowered by core's
    code generator with the target's capabilities, as the device would) and start compiling each with its compiler
    on `pool` (`.results()` waits for them). A kernel the renderer or lowerer cannot handle fails, with the end of
    the traceback."""
    from lazy.codegen.program import get_program

    check, renderer = _TargetCheck(target, pool), target.renderer
    caps: Capabilities = renderer.caps
    for kernel in suite_kernels(caps):
        if keyword and keyword.lower() not in kernel.name.lower():
            continue
        test_id = check.test_id(FIXED_SOURCE[kernel.layer], kernel.name)
        try:
            check.add(test_id, kernel.layer, kernel.name, kernel.render(renderer))
        except Exception as e:
            check.other(test_id, kernel.layer, "failed", _codegen_failure(e))
    for rec in recorded:
        layer = layer_of(rec.test)
        if bad := unsupported_dtypes(rec.ast, caps):
            reason = f"computes in {', '.join(bad)}, which {device} does not declare (caps.dtypes)"
            check.other(check.test_id(rec.test, rec.ast.digest.hex()[:12]), layer, "skipped", reason)
            continue
        try:
            spec = get_program(rec.ast, renderer)
        except Exception as e:
            check.other(check.test_id(rec.test, rec.ast.digest.hex()[:12]), layer, "failed", _codegen_failure(e))
            continue
        check.add(check.test_id(rec.test, spec.name), layer, spec.name, spec.src, spec)
    return check


# ---------------------------------------------------------------------------------------------------------------------
# the run


def run_compile_only(device: str, *, report: str | os.PathLike[str] | None = None,
                     json_path: str | os.PathLike[str] | None = None, keyword: str | None = None,
                     suite_dir: str | os.PathLike[str] | None = None, jobs: int = 0
                     ) -> list[ConformanceResult]:  # fmt: skip
    """Check every kernel of the suite (or of the test modules in `suite_dir`) for each of `device`'s targets; one
    result per target, written as one Markdown report and one JSON file (`{"rows": [...]}`) when asked.
    `keyword`: only kernels whose name (fixed kernels) or test (Tensor layers) contains it. Raises DeviceError
    (`codegen_targets`, `check_compiler_runs`) before doing anything when the device cannot be checked this way."""
    from lazy.plugins import Device

    device = Device.canonicalize(device).partition(":")[0]
    targets = codegen_targets(device)
    for target in targets:
        check_compiler_runs(device, target)
    versions = device_versions(device)
    recorded, failed_here = record_tensor_kernels(pathlib.Path(suite_dir) if suite_dir else SUITE_DIR, keyword)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results = []
    with ThreadPoolExecutor(max_workers=jobs if jobs > 0 else cores) as pool:
        # every target's code generation first, so it overlaps the compiles of the targets before it
        checks = [check_target(device, target, recorded, keyword, pool) for target in targets]
        for target, check in zip(targets, checks):
            tests = check.results()
            compiler = target.compiler
            what = (f"compiled by {type(compiler).__name__}" if compiler is not None else
                    "rendered only: this target has no compiler on this platform")  # fmt: skip
            notes = [f"nothing ran: {len(tests)} kernels rendered by {type(target.renderer).__name__} and {what}; "
                     f"{len(recorded)} of them recorded from the Tensor layers on {REFERENCE}"]  # fmt: skip
            if failed_here:
                notes.append(f"{len(failed_here)} Tensor-layer tests failed on {REFERENCE} while recording (their "
                             f"kernels up to the failure are in): {', '.join(failed_here[:5])}")  # fmt: skip
            results.append(ConformanceResult(row_label(device, target), versions, tests, 0, notes))
    if report is not None:
        pathlib.Path(report).write_text("\n\n".join(r.to_markdown() for r in results))
    if json_path is not None:
        rows = [r.to_json() for r in results]
        pathlib.Path(json_path).write_text(json.dumps({"device": device, "rows": rows}, indent=2))
    return results

"""The MSL `MetalRenderer` writes for a fixed set of kernels, against reviewed golden files (one `.metal` per kernel):
the conformance suite's kernels (`lazy.conformance.kernels.suite_kernels`, the WMMA one included) and the kernels of
a few real Tensor programs lowered with the METAL target's capabilities by core's code generator. Off macOS there is
no Metal compiler, so this is how the MSL is checked there: any change to it is a diff a reviewer reads.

    python -m lazy_metal.golden --update [--dir DIR]   # rewrite the files, then review them with `git diff`
    python -m lazy_metal.golden [--dir DIR]            # compare, printing each difference (exit 1 on one)
"""

from __future__ import annotations

import argparse
import difflib
import pathlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from lazy_metal.renderer import MetalRenderer

if TYPE_CHECKING:
    from lazy import Tensor

UPDATE_COMMAND = "python -m lazy_metal.golden --update"
# the checkout's golden files: src/lazy_metal/golden.py -> plugins/lazy-metal/tests/golden
CHECKOUT_DIR = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden"


# The real programs are scheduled on a PYTHON instance emulating METAL: the scheduler reads the device's capabilities
# (a cast feeding a tensor core stays in the matmul's kernel), so the kernels are the ones METAL itself would get, and
# the same whatever else the process opened. An instance of its own: the others keep the targets they opened with.
SCHEDULING_DEVICE = "PYTHON:99"


def program_kernels() -> list[tuple[str, Callable[[], Tensor]]]:
    """(label, a function returning the Tensor to realize) of the real programs whose kernels are golden."""
    from lazy import Tensor, dtypes
    from lazy.dtype import DType

    def empty(*shape: int, dtype: DType = dtypes.float32) -> Tensor:
        return Tensor.empty(*shape, dtype=dtype, device=SCHEDULING_DEVICE)  # only the kernel ASTs are used

    return [
        ("matmul", lambda: empty(64, 64) @ empty(64, 64)),  # on the simdgroup tensor core
        ("matmul_half", lambda: empty(64, 64, dtype=dtypes.float16) @ empty(64, 64, dtype=dtypes.float16)),
        ("sum_rows", lambda: empty(64, 64).sum(axis=1)),
        ("sum_long", lambda: empty(4, 8192).sum(axis=1)),  # split over a threadgroup: threadgroup memory, barrier
        ("softmax", lambda: empty(64, 64).softmax(axis=-1)),
    ]


def golden_sources(renderer: MetalRenderer | None = None) -> dict[str, str]:
    """File name -> MSL, for every golden kernel, in a stable order."""
    from lazy.codegen.program import get_program
    from lazy.conformance.kernels import suite_kernels
    from lazy.engine.schedule import create_schedule
    from lazy.helpers import Context
    from lazy.plugins import Device
    from lazy.pydevice import emulating

    renderer = renderer or MetalRenderer()
    out = {f"{k.name}.metal": k.render(renderer) for k in suite_kernels(renderer.caps)}
    with Context(NOOPT=0, BEAM=0, EMULATE="METAL"):  # the default heuristics, whatever the caller's settings
        Device[SCHEDULING_DEVICE]  # noqa: B018  (opens it under this setting, unless it is open already)
        if (target := emulating(SCHEDULING_DEVICE)) != "METAL":
            raise RuntimeError(f"{SCHEDULING_DEVICE} is open emulating {target}, not METAL: lazy_metal.golden needs "
                               "it for itself (close it with lazy.Device.reset())")  # fmt: skip
        for label, program in program_kernels():
            items = [si for si in create_schedule([program().lazydata]) if si.kind == "kernel"]
            for i, si in enumerate(items):
                spec = get_program(si.ast, renderer)
                out[f"prog_{label}_{i}_{spec.name}.metal"] = spec.src
    return out


def differences(directory: pathlib.Path, sources: dict[str, str]) -> list[str]:
    """A unified diff (or a note) per golden file that is missing, different or no longer written."""
    problems = []
    on_disk = {p.name for p in directory.glob("*.metal")} if directory.is_dir() else set()
    for name, src in sources.items():
        path = directory / name
        if name not in on_disk:
            problems.append(f"{path}: missing (a new kernel)")
            continue
        old = path.read_text()
        if old != src:
            diff = difflib.unified_diff(old.splitlines(True), src.splitlines(True), f"{path} (golden)",
                                        f"{name} (rendered now)")  # fmt: skip
            problems.append("".join(diff))
    problems += [f"{directory / name}: no kernel renders it any more" for name in sorted(on_disk - set(sources))]
    return problems


def write(directory: pathlib.Path, sources: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stale in set(p.name for p in directory.glob("*.metal")) - set(sources):
        (directory / stale).unlink()
    for name, src in sources.items():
        path = directory / name
        if not path.exists() or path.read_text() != src:
            path.write_text(src)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lazy_metal.golden", description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the golden files (review them with git diff)")
    parser.add_argument("--dir", type=pathlib.Path, default=None, help=f"golden directory (default: {CHECKOUT_DIR})")
    args = parser.parse_args(argv)
    directory = args.dir or CHECKOUT_DIR
    if args.dir is None and not directory.parent.is_dir():
        parser.error(f"{directory.parent} does not exist (lazy-metal is not installed from a checkout): pass --dir")
    sources = golden_sources()
    if args.update:
        write(directory, sources)
        print(f"wrote {len(sources)} golden files to {directory}: review them with `git diff {directory}`")
        return 0
    problems = differences(directory, sources)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} golden files differ; if the new MSL is right, run `{UPDATE_COMMAND}` and review it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m lazy.conformance --device NAME [--compile-only] [--report FILE.md] [--json FILE.json] [-k EXPR] [-x]
[-- PYTEST ARGS]`, or `python -m lazy.conformance --all [--emulate NAMES] [--compile-only-for NAMES] [--out DIR]`:
every usable device (and the rows asked for: PYTHON emulating NAME, NAME's targets compile-only), one matrix (row x
layer); `--matrix-of DIR` prints that matrix from the JSON reports under DIR."""

from __future__ import annotations

import argparse
import sys

INSTALL_HINT = "the conformance suite needs pytest: pip install 'lazy-core[conformance]'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lazy.conformance", description="Run lazy's device conformance suite."
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--device", help="device to test, e.g. CPU, CL, PYTHON")
    target.add_argument("--all", action="store_true", help="every usable device, then one matrix of the results")
    target.add_argument("--devices", help="comma-separated devices to test, then one matrix")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="with --device: render and compile every kernel of the suite for each of the device's code generation "
        "targets, without the device (no GPU or driver needed); one report row per target",
    )
    parser.add_argument(
        "--emulate",
        metavar="NAMES",
        help="matrix rows of PYTHON emulating each named device (LAZY_EMULATE=NAME), e.g. CUDA,METAL",
    )
    parser.add_argument(
        "--compile-only-for", metavar="NAMES", help="matrix rows of each named device's targets, compile-only"
    )
    target.add_argument("--matrix-of", metavar="DIR", help="print one matrix of the JSON reports under DIR")
    parser.add_argument("--out", metavar="DIR", help="with --all/--devices: write <DEVICE>.md/.json reports here")
    parser.add_argument("--report", metavar="FILE.md", help="write the Markdown report here")
    parser.add_argument("--json", metavar="FILE.json", help="write the JSON report here")
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="with --all/--devices: devices tested at once, each in its own process (0: one per core)",
    )
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only run tests matching EXPR (pytest -k)")
    parser.add_argument("-x", dest="exitfirst", action="store_true", help="stop at the first failure")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    extra_rows = bool(args.emulate or args.compile_only_for)
    if args.compile_only and not args.device:
        parser.error("--compile-only checks one device: --device NAME --compile-only (in a matrix: --compile-only-for)")
    if not (args.device or args.all or args.devices or extra_rows or args.matrix_of):
        parser.error("name what to test: --device NAME, --devices NAMES, --all, --emulate or --compile-only-for")
    if args.device and extra_rows:
        parser.error("--emulate and --compile-only-for add matrix rows: use them with --all, --devices, or alone")
    if args.matrix_of:
        from lazy.conformance.matrix import format_matrix, load_reports

        results = load_reports(args.matrix_of)
        print(format_matrix(results))
        return 1 if not results or any(r["summary"]["failed"] for r in results) else 0
    try:
        import pytest  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    from lazy.conformance.runner import check_device, run_conformance
    from lazy.device import DeviceError

    if args.compile_only:
        return _compile_only(args)
    try:  # an unknown or unusable device is one line and status 2, not a run in which every test fails
        named = [args.device] if args.device else _names(args.devices)
        devices = [check_device(name) for name in named]
    except DeviceError as e:
        print(f"python -m lazy.conformance: {e}", file=sys.stderr)
        return 2
    if args.all or args.devices or extra_rows:
        from lazy.conformance.matrix import MatrixRow, run_matrix, unusable_devices, usable_devices

        for name, why in unusable_devices() if args.all else []:
            print(f"conformance: not run on {name}: {why}", flush=True)
        rows = [MatrixRow(name) for name in (devices if not args.all else usable_devices())]
        rows += [MatrixRow("PYTHON", emulate=name) for name in _names(args.emulate)]
        rows += [MatrixRow(name, compile_only=True) for name in _names(args.compile_only_for)]
        return run_matrix(rows, out_dir=args.out, keyword=args.keyword, extra_args=args.pytest_args, jobs=args.jobs)
    try:  # (LAZY_EMULATE naming a target that cannot be had is refused here, before any test)
        result = run_conformance(devices[0], report=args.report, json_path=args.json, keyword=args.keyword,
                                 exitfirst=args.exitfirst, extra_args=args.pytest_args)  # fmt: skip
    except DeviceError as e:
        print(f"python -m lazy.conformance: {e}", file=sys.stderr)
        return 2
    print(result.summary_line())
    return result.exit_code


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _compile_only(args: argparse.Namespace) -> int:
    from lazy.conformance.compile_only import headline, run_compile_only, summary_line
    from lazy.device import DeviceError

    if args.exitfirst or args.pytest_args:
        print("python -m lazy.conformance: --compile-only takes no -x or pytest arguments", file=sys.stderr)
        return 2
    try:
        results = run_compile_only(args.device, report=args.report, json_path=args.json, keyword=args.keyword)
    except DeviceError as e:
        print(f"python -m lazy.conformance: {e}", file=sys.stderr)
        return 2
    for result in results:
        print(summary_line(result))
        for test in result.tests:
            if test.outcome == "failed":
                print(f"  FAILED {test.id}: {headline(test.message)}")
    return max(result.exit_code for result in results)


if __name__ == "__main__":
    sys.exit(main())

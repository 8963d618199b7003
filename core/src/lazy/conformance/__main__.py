"""`python -m lazy.conformance --device NAME [--report FILE.md] [--json FILE.json] [-k EXPR] [-x] [-- PYTEST ARGS]`
or `python -m lazy.conformance --all [--out DIR]`: every usable device, one matrix (device x layer)."""

from __future__ import annotations

import argparse
import sys

INSTALL_HINT = "the conformance suite needs pytest: pip install 'lazy-core[conformance]'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lazy.conformance", description="Run lazy's device conformance suite."
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--device", help="device to test, e.g. CPU, CL, PYTHON")
    target.add_argument("--all", action="store_true", help="every usable device, then one matrix of the results")
    target.add_argument("--devices", help="comma-separated devices to test, then one matrix")
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
    try:
        import pytest  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    from lazy.conformance.runner import check_device, run_conformance
    from lazy.device import DeviceError

    try:  # an unknown or unusable device is one line and status 2, not a run in which every test fails
        named = [args.device] if args.device else [d.strip() for d in args.devices.split(",")] if args.devices else []
        devices = [check_device(name) for name in named]
    except DeviceError as e:
        print(f"python -m lazy.conformance: {e}", file=sys.stderr)
        return 2
    if args.all or args.devices:
        from lazy.conformance.matrix import run_matrix

        return run_matrix(
            devices or None, out_dir=args.out, keyword=args.keyword, extra_args=args.pytest_args, jobs=args.jobs
        )
    result = run_conformance(devices[0], report=args.report, json_path=args.json, keyword=args.keyword,
                             exitfirst=args.exitfirst, extra_args=args.pytest_args)  # fmt: skip
    print(result.summary_line())
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

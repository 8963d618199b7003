"""`python -m lazy.conformance --device NAME [--report FILE.md] [--json FILE.json] [-k EXPR] [-x] [-- PYTEST ARGS]`."""

from __future__ import annotations

import argparse
import sys

INSTALL_HINT = "the conformance suite needs pytest: pip install 'lazy-core[conformance]'"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lazy.conformance", description="Run lazy's device conformance suite."
    )
    parser.add_argument("--device", required=True, help="device to test, e.g. CPU, CL, PYTHON")
    parser.add_argument("--report", metavar="FILE.md", help="write the Markdown report here")
    parser.add_argument("--json", metavar="FILE.json", help="write the JSON report here")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only run tests matching EXPR (pytest -k)")
    parser.add_argument("-x", dest="exitfirst", action="store_true", help="stop at the first failure")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    try:
        import pytest  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    from lazy.conformance.runner import run_conformance

    result = run_conformance(args.device, report=args.report, json_path=args.json, keyword=args.keyword,
                             exitfirst=args.exitfirst, extra_args=args.pytest_args)  # fmt: skip
    print(result.summary_line())
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
